"""An etcd v3 client spoken from trio through etcd's JSON gateway (grpc-gateway).

Why the gateway and httpx: etcd's own Python clients are gRPC and thread- or
asyncio-bound; the gateway (`/v3/kv/txn`, `/v3/kv/range`, `/v3/lease/grant`,
`/v3/lease/keepalive`, `/v3/lease/revoke`, keys and values base64) is served by every
etcd since 3.3 on its client port, and httpx runs on trio through anyio/sniffio, so
the whole client is a few POSTs with no thread and no generated code. A keep-alive
is one POST whose body is one request: the gateway answers with one line and ends.

Endpoints are tried in turn; a request that fails on all of them raises `EtcdError`.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mrs.limits import REPLICATION_ETCD_TIMEOUT_S

if TYPE_CHECKING:
    import httpx  # imported where used: a group that is not replicated never loads it

logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per renewal otherwise


class EtcdError(Exception):
    """etcd could not be reached on any endpoint, or answered with an error."""


ETCD_UNREACHABLE = "etcd unreachable: "
"""How the error of an etcd none of whose endpoints answered begins (`ENDPOINT: why;
...` follows): `mrs failover` tells it from an etcd that answered with an error."""


def silent_etcd_line(
    error: str, endpoints: Sequence[str], config_path: object, done: str = ""
) -> str | None:
    """The operator's line for `error`, an EtcdError's text, when no endpoint of
    `endpoints` answered (None: etcd answered, with an error of its own): where etcd
    was asked and why each gave no answer, what the command `done` (if it says), and
    the config key to check. Why: the client's words (`etcd unreachable:
    http://...: cannot connect`) named neither `[coordinator] etcd` nor the file that
    holds it; one wording for `mrs failover` and `mrs serve --instance`'s log."""
    if not error.startswith(ETCD_UNREACHABLE):
        return None
    where = ", ".join(endpoints)
    why = error.removeprefix(ETCD_UNREACHABLE)
    if len(endpoints) == 1:
        why = why.removeprefix(f"{where}: ")
    told = f"{done}: " if done else ""
    return (
        f"etcd at {where} does not answer ({why}); {told}check that etcd is running "
        f"there and that [coordinator] etcd in {config_path} is its client URL"
    )


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def _unanswered(error: httpx.HTTPError) -> str:
    """Why an endpoint gave no answer, in words. Why: `repr` of httpx's error,
    `ConnectError('all attempts to connect to 127.0.0.1:2379 failed')`, reached the
    operator as it was (`mrs failover`, `mrs status`, the server's log)."""
    import httpx

    if isinstance(error, httpx.ConnectError):
        return "cannot connect"
    if isinstance(error, httpx.TimeoutException):
        return "no answer in time"
    return f"{type(error).__name__}: {error}"


class EtcdClient:
    """The few etcd calls a coordinator needs; one httpx client per instance."""

    def __init__(
        self, endpoints: Sequence[str], timeout_s: float = REPLICATION_ETCD_TIMEOUT_S
    ) -> None:
        if not endpoints:
            raise ValueError("etcd needs at least one endpoint")
        self.endpoints = list(endpoints)
        self.timeout_s = timeout_s
        import httpx

        self._http = httpx.AsyncClient(timeout=timeout_s)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST `body` to `path` on the first endpoint that answers; the JSON answer."""
        import httpx

        problems = []
        for index, endpoint in enumerate(self.endpoints):
            try:
                response = await self._http.post(endpoint + path, json=body)
            except httpx.HTTPError as error:
                problems.append(f"{endpoint}: {_unanswered(error)}")
                continue
            answer = _answer(endpoint + path, response)
            if index:  # the next call starts where this one worked
                self.endpoints = self.endpoints[index:] + self.endpoints[:index]
            return answer
        raise EtcdError(ETCD_UNREACHABLE + "; ".join(problems))

    def keepalive_blocking(self, lease_id: int) -> int:
        """`keepalive` from a thread, while the event loop is held by synchronous work
        (a new active's recovery, mrs.replication.lease_keeper): its own short-lived
        client, the endpoints in the same order; 0 also when none answers."""
        import httpx

        body = {"ID": str(lease_id)}
        with httpx.Client(timeout=self.timeout_s) as http:
            for endpoint in list(self.endpoints):
                url = endpoint + "/v3/lease/keepalive"
                try:
                    answer = _answer(url, http.post(url, json=body))
                except (httpx.HTTPError, EtcdError):
                    continue
                return _ttl(answer)
        return 0

    async def grant(self, ttl_s: int) -> int:
        answer = await self.call("/v3/lease/grant", {"TTL": ttl_s})
        return int(answer["ID"])

    async def keepalive(self, lease_id: int) -> int:
        """Renew the lease; its remaining TTL in seconds, 0 when it has expired."""
        return _ttl(await self.call("/v3/lease/keepalive", {"ID": str(lease_id)}))

    async def revoke(self, lease_id: int) -> None:
        await self.call("/v3/lease/revoke", {"ID": str(lease_id)})

    async def get(self, key: bytes) -> tuple[bytes, int] | None:
        """(value, mod_revision) of `key`, or None."""
        return _found(await self.call("/v3/kv/range", {"key": b64(key)}))

    async def get_many(self, keys: list[bytes]) -> list[tuple[bytes, int] | None]:
        """(value, mod_revision) of each of `keys`, or None, all read at one revision
        (one transaction of reads): a state read key by key could mix a new term with
        an old leader or in-sync record, which the simulator's coordinator never shows."""
        ranges = [{"request_range": {"key": b64(key)}} for key in keys]
        answer = await self.call("/v3/kv/txn", {"compare": [], "success": ranges})
        responses = answer.get("responses") or []
        found = [_found(response.get("response_range") or {}) for response in responses]
        if len(found) != len(keys):
            raise EtcdError(f"a transaction of {len(keys)} reads answered {len(found)}")
        return found

    async def txn(self, compare: list[dict[str, Any]], success: list[dict[str, Any]]) -> bool:
        """Run `success` if every `compare` holds; whether it did."""
        answer = await self.call("/v3/kv/txn", {"compare": compare, "success": success})
        return bool(answer.get("succeeded", False))


def _ttl(keepalive_answer: dict[str, Any]) -> int:
    """A keep-alive's remaining TTL in seconds, 0 when the lease has expired."""
    return int(keepalive_answer.get("result", {}).get("TTL", 0))


def _answer(url: str, response: httpx.Response) -> dict[str, Any]:
    """The JSON answer of one gateway call (its first line: a keep-alive streams)."""
    if response.status_code != 200:
        raise EtcdError(f"{url}: HTTP {response.status_code} {response.text}")
    text = response.text.strip().splitlines()[0] if response.text.strip() else "{}"
    return json.loads(text)


def _found(range_answer: dict[str, Any]) -> tuple[bytes, int] | None:
    """(value, mod_revision) of a range answer's first key, or None (no key)."""
    kvs = range_answer.get("kvs") or []
    if not kvs:
        return None
    return unb64(kvs[0].get("value", "")), int(kvs[0].get("mod_revision", 0))


def put_op(key: bytes, value: bytes, lease_id: int | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {"key": b64(key), "value": b64(value)}
    if lease_id is not None:
        request["lease"] = str(lease_id)
    return {"request_put": request}


def delete_op(key: bytes) -> dict[str, Any]:
    return {"request_delete_range": {"key": b64(key)}}


def absent(key: bytes) -> dict[str, Any]:
    """Compare: `key` does not exist."""
    return {"key": b64(key), "result": "EQUAL", "target": "CREATE", "create_revision": "0"}


def modified_at(key: bytes, revision: int) -> dict[str, Any]:
    """Compare: `key` was last written at `revision` (0: it does not exist)."""
    return {"key": b64(key), "result": "EQUAL", "target": "MOD", "mod_revision": str(revision)}


def holds(key: bytes, value: bytes) -> dict[str, Any]:
    """Compare: `key` holds exactly `value`."""
    return {"key": b64(key), "result": "EQUAL", "target": "VALUE", "value": b64(value)}
