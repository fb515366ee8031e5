"""HEAD on the acting page's paths is answered as GET is, without a body (RFC 9110):
it sent the body too, which a client keeping its connection reads as the start of its
next answer (the wire probe's finding)."""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlsplit

from sim.processes import GroupProcess
from tests.process.test_web_bus_admin import _plain_bus, _web_endpoint


def _raw(endpoint: str, method: str, path: str) -> bytes:
    where = urlsplit(endpoint)
    with socket.create_connection((where.hostname, where.port), timeout=10) as conn:
        conn.sendall(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


def test_head_on_the_session_path_sends_headers_only(tmp_path: Path) -> None:
    group = GroupProcess(_plain_bus(tmp_path, web_admin=True), 1)
    group.start()
    try:
        endpoint = _web_endpoint(group.address)
        got = _raw(endpoint, "GET", "/api/admin/session")
        head = _raw(endpoint, "HEAD", "/api/admin/session")
    finally:
        group.terminate()
    got_headers, _, got_body = got.partition(b"\r\n\r\n")
    head_headers, _, head_body = head.partition(b"\r\n\r\n")
    assert got_headers.startswith(b"HTTP/1.1 200") and got_body
    assert head_headers.startswith(b"HTTP/1.1 200") and head_body == b""
    length = f"Content-Length: {len(got_body)}".encode()
    assert length in got_headers and length in head_headers


def test_a_request_too_large_gets_its_400_and_a_clean_close(tmp_path: Path) -> None:
    """An answer given before the request was read whole (headers over 8 KiB) is
    followed by a clean close, not a TCP reset that can discard it on its way."""
    group = GroupProcess(_plain_bus(tmp_path, web_admin=True), 1)
    group.start()
    try:
        where = urlsplit(_web_endpoint(group.address))
        cookies = "".join(f"Cookie: c{n}={'x' * 100}\r\n" for n in range(200))
        with socket.create_connection((where.hostname, where.port), timeout=10) as conn:
            conn.sendall(f"GET /api/admin/session HTTP/1.1\r\n{cookies}\r\n".encode())
            conn.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := conn.recv(65536):  # ConnectionResetError before the fix
                answer += chunk
    finally:
        group.terminate()
    assert answer.startswith(b"HTTP/1.1 400") and answer.endswith(b"request too large\n")
