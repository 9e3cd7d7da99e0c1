"""Minimal blocking JSON-over-HTTP helper (stdlib ``http.client``), run in worker threads by the
async clients. Why stdlib: aiohttp is not a dependency and localhost/LAN calls are cheap.
"""
from __future__ import annotations

import dataclasses
import http.client
import json
import socket
import time
from typing import Any, Optional
from urllib.parse import urlparse


class TransportError(ConnectionError):
    """The server could not be reached or dropped the connection (retryable)."""


@dataclasses.dataclass
class HttpResponse:
    status: int
    json: Any              # parsed body (last SSE chunk for event streams); None if not JSON
    text: str              # raw body
    headers: dict          # lower-cased header names


def http_json(method: str, url: str, body: Any = None, timeout: float = 60.0,
              headers: Optional[dict] = None) -> HttpResponse:
    """Sends one request; returns an ``HttpResponse``.

    Raises ``TransportError`` on connection failures and timeouts.
    """
    u = urlparse(url)
    conn_cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(u.hostname, u.port, timeout=timeout)
    path = u.path or "/"
    if u.query:
        path += "?" + u.query
    data = None if body is None else json.dumps(body).encode()
    hdrs = {"Content-Type": "application/json", "Accept": "application/json"}
    if headers:
        hdrs.update(headers)
    try:
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        raw = resp.read().decode("utf-8", errors="replace")
        status = resp.status
        resp_headers = {k.lower(): v for k, v in resp.getheaders()}
    except (ConnectionError, socket.timeout, TimeoutError, http.client.HTTPException, OSError) as e:
        raise TransportError(f"{method} {url}: {type(e).__name__}: {e}") from e
    finally:
        conn.close()
    text = raw
    if resp_headers.get("content-type", "").startswith("text/event-stream"):
        # SSE: keep the last data chunk before [DONE] (cumulative output)
        chunks = [ln[5:].strip() for ln in raw.splitlines() if ln.startswith("data:")]
        chunks = [c for c in chunks if c and c != "[DONE]"]
        text = chunks[-1] if chunks else ""
    try:
        parsed = json.loads(text) if text else None
    except json.JSONDecodeError:
        parsed = None
    return HttpResponse(status, parsed, raw, resp_headers)


def wait_healthy(url: str, timeout_s: float, proc=None, poll_s: float = 1.0) -> None:
    """Polls ``url/health`` until it answers 200 (a server that is starting up).

    ``proc``: the server's ``subprocess.Popen``; if it exits first this raises ``RuntimeError``
    with the tail of its output when that was piped. ``TimeoutError`` after ``timeout_s``.
    """
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if proc is not None and proc.poll() is not None:
            out = getattr(proc, "stdout", None)
            tail = out.read()[-3000:] if out is not None and not out.closed else "(see its log)"
            tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
            raise RuntimeError(f"server for {url} exited with code {proc.returncode}:\n{tail}")
        try:
            if http_json("GET", url + "/health", timeout=5).status == 200:
                return
        except TransportError:
            pass
        time.sleep(poll_s)
    raise TimeoutError(f"{url}/health not 200 after {timeout_s:.0f}s")
