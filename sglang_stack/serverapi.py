"""One HTTP request to a server's API (SGLang's, its router's), as the host's tasks make it: the status and the body,
the key sent as a bearer token, a connection problem raised as ``RequestFailed`` in a few words ("connection
refused", "timed out"). Plain ``http.client``, nothing buffered between the socket and the caller: the benchmark
streams through the same connection (``bench/client.py``), the smoke test and `invoke up` ask it one question.
"""

from __future__ import annotations

import http.client
import json
import socket
from urllib.parse import urlsplit


class RequestFailed(Exception):
    """One request did not produce a complete answer; the message says why."""


def connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return cls(parts.hostname, parts.port, timeout=timeout), parts.path.rstrip("/")


def headers(api_key: str | None, **extra: str) -> dict[str, str]:
    out = dict(extra)
    if api_key:
        out["Authorization"] = f"Bearer {api_key}"
    return out


def describe(err: BaseException) -> str:
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(err, socket.gaierror):
        return f"host not found ({err.strerror})"
    if isinstance(err, http.client.RemoteDisconnected):
        return "server closed the connection"
    return f"{err.__class__.__name__}: {err}".rstrip(": ")


def request(method: str, url: str, path: str, api_key: str | None, timeout: float, body: dict | None) -> tuple[int, bytes]:
    """One request: (status, body). Connection problems raise ``RequestFailed``."""
    conn, base = connection(url, timeout)
    sent = headers(api_key) if body is None else headers(api_key, **{"Content-Type": "application/json"})
    try:
        conn.request(method, base + path, body=None if body is None else json.dumps(body).encode(), headers=sent)
        resp = conn.getresponse()
        return resp.status, resp.read()
    except (OSError, http.client.HTTPException) as err:
        raise RequestFailed(describe(err)) from err
    finally:
        conn.close()


def get(url: str, path: str, api_key: str | None, timeout: float) -> tuple[int, bytes]:
    """``GET url+path``: (status, body)."""
    return request("GET", url, path, api_key, timeout, None)


def post(url: str, path: str, api_key: str | None, timeout: float, body: dict | None = None) -> tuple[int, bytes]:
    """``POST url+path`` with a JSON body: (status, body)."""
    return request("POST", url, path, api_key, timeout, body or {})
