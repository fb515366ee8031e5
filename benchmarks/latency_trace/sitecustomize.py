"""Where a put's answer time goes: stamps each WF put at eight points on its way.

Put this directory first on PYTHONPATH for peerbench's `bench_mrs.py` (it starts
`mrs serve` and the client processes with the same environment); Python imports
this module at start-up in every one of them. The server side stamps a put when its
frame was read, dispatched, when the commit holding it began, when its PutDone was
queued and when that was handed to the socket; the client side when the put was
called, handed to the socket, its answer read, and the caller resumed. The first
TRACE_PUTS puts (default 3000) of each process are written to
$TRACE_DIR/{srv,cli}-<pid>.json; `report.py` joins them by request id.

    cd ../shared/peerbench
    TRACE_DIR=/tmp/trace PYTHONPATH=$OLDPWD/benchmarks/latency_trace \\
        $OLDPWD/.venv/bin/python bench_mrs.py e2e --producers 1 --rate 1000 --gets 1000
    python $OLDPWD/benchmarks/latency_trace/report.py /tmp/trace

Measurement only: it wraps a few methods, never changes what they do.
"""

from __future__ import annotations

import json
import os
import sys
import time

_now = time.monotonic_ns  # one clock for every process on the machine
_stamps: dict[int, list[int]] = {}
_written = [False]
_PUTS_MAX = int(os.environ.get("TRACE_PUTS", "3000"))
_DIR = os.environ.get("TRACE_DIR", "/tmp/trace")


def _write_when_full(side: str) -> None:
    if _written[0] or len(_stamps) < _PUTS_MAX:
        return
    _written[0] = True
    os.makedirs(_DIR, exist_ok=True)
    with open(os.path.join(_DIR, f"{side}-{os.getpid()}.json"), "w") as out:
        json.dump(_stamps, out)


def _stamp_taken(stream: object) -> None:
    """The request ids whose frames sit in `stream`'s outbox were handed over now."""
    queued = getattr(stream, "_traced", None)
    if queued:
        now = _now()
        for request_id in queued:
            if request_id in _stamps:
                _stamps[request_id].append(now)
        queued.clear()


def _queue(stream: object, request_id: int) -> None:
    if not hasattr(stream, "_traced"):
        stream._traced = []  # type: ignore[attr-defined]
    stream._traced.append(request_id)  # type: ignore[attr-defined]


def _install_streams() -> None:
    from mrs.transport import framed

    receive_events = framed.FramedStream.receive_events
    take = framed.FramedStream.take
    write_now = getattr(framed.FramedStream, "write_now", None)

    async def traced_receive_events(self):  # type: ignore[no-untyped-def]
        events = await receive_events(self)
        self._read_ns = _now()
        return events

    def traced_take(self):  # type: ignore[no-untyped-def]
        _stamp_taken(self)
        return take(self)

    framed.FramedStream.receive_events = traced_receive_events
    framed.FramedStream.take = traced_take
    if write_now is not None:

        def traced_write_now(self) -> None:  # type: ignore[no-untyped-def]
            had = len(self._outbox)
            write_now(self)
            if had and not self._outbox:
                _stamp_taken(self)

        framed.FramedStream.write_now = traced_write_now


def _install_server() -> None:
    from journals import writer
    from mrs import protocol as wire
    from mrs.server import request_dispatch
    from mrs.server import session as server_session

    dispatch = request_dispatch.Dispatcher.dispatch
    commit_pending = writer.InlineWriter.commit_pending
    send = server_session.ServerSession.send
    commit_started = [0]

    def traced_dispatch(self, session, event, run=None):  # type: ignore[no-untyped-def]
        if type(event) is wire.Put and not _written[0]:
            _stamps[event.request_id] = [getattr(session, "_read_ns", 0), _now()]
        return dispatch(self, session, event, run)

    def traced_commit_pending(self):  # type: ignore[no-untyped-def]
        commit_started[0] = _now()
        return commit_pending(self)

    def traced_send(self, event):  # type: ignore[no-untyped-def]
        if type(event) is wire.PutDone:
            stamps = _stamps.get(event.request_id)
            if stamps is not None and len(stamps) == 2:
                stamps += [commit_started[0], _now()]
                _queue(self, event.request_id)
                _write_when_full("srv")
        return send(self, event)

    request_dispatch.Dispatcher.dispatch = traced_dispatch
    writer.InlineWriter.commit_pending = traced_commit_pending
    server_session.ServerSession.send = traced_send


def _install_client() -> None:
    from clients import pending

    request = pending.Requests.request

    async def traced_request(self, message, wait_s, kind="other"):  # type: ignore[no-untyped-def]
        if kind != "put" or _written[0]:
            return await request(self, message, wait_s, kind)
        request_id = message.request_id
        _stamps[request_id] = [_now()]
        link = self.link
        _queue(link, request_id)
        try:
            return await request(self, message, wait_s, kind)
        finally:
            stamps = _stamps.get(request_id)
            if stamps is not None:
                stamps += [getattr(link, "_read_ns", 0), _now()]
            _write_when_full("cli")

    pending.Requests.request = traced_request


try:
    _install_streams()
    _install_server() if "serve" in sys.argv else _install_client()
except Exception as error:  # noqa: BLE001 - a tracer must never stop the process it traces
    print(f"latency_trace not installed: {error}", file=sys.stderr)
