"""HTTP plumbing of the engine server (stdlib ``http.server``): routing, JSON and SSE replies.

Bad requests get HTTP 400 with ``{"error": {"message", "field"}}``; unknown paths a 404; a
handler exception never takes the server down (500 with the message).
"""
from __future__ import annotations

import json
import logging
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlparse

from harness_jax.sampling.server_protocol import BadRequest, SSEStream, require

log = logging.getLogger(__name__)


class Reply:
    """What a route returns when it is not a plain 200 JSON body: ``Reply(status, obj)``."""

    def __init__(self, status: int, obj: Any):
        self.status, self.obj = status, obj


def _abort_request(app, body):
    rid = body.get("rid") if isinstance(body, dict) else None
    abort_all = bool(body.get("abort_all", False)) if isinstance(body, dict) else False
    require(abort_all or isinstance(rid, str), "rid", "give a rid or abort_all=true")
    app.engine.abort(rid, abort_all=abort_all, message="Abort by abort_request")
    return {}


def _pause(app, body):
    mode = (body or {}).get("mode", "abort")
    require(mode in ("abort", "retract", "in_place"), "mode", "use abort, retract or in_place")
    app.engine.pause(mode)
    return {"success": True, "message": f"paused ({mode})"}


def _flush(app, body):
    if app.engine.flush_cache():
        return {"success": True, "message": "Cache flushed."}
    return Reply(400, {"success": False, "message": "Cache not flushed: requests are running or queued"})


def _health_generate(app, body):
    app.generate({"input_ids": [0], "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}})
    return {}


def _models(app, body):
    return {"object": "list", "data": [{"id": app.served_model_name, "object": "model", "owned_by": "harness_jax"}]}


def _continue(app, body):
    app.engine.resume()
    return {"success": True, "message": "continued"}


def _status_reply(out):
    status, obj = out
    return Reply(status, obj)


ANY = ("GET", "POST", "PUT")

# path -> (methods, handler(app, body)); a handler returns a JSON body, a Reply or an SSEStream
ROUTES = {
    "/generate": (("POST", "PUT"), lambda app, b: (app.generate_stream(b) if isinstance(b, dict) and b.get("stream")
                                                  else app.generate(b))),
    "/health": (ANY, lambda app, b: {}),
    "/ready": (ANY, lambda app, b: {}),
    "/health_generate": (ANY, _health_generate),
    "/model_info": (ANY, lambda app, b: app.model_info()),
    "/get_model_info": (ANY, lambda app, b: app.model_info()),
    "/server_info": (ANY, lambda app, b: app.server_info()),
    "/get_server_info": (ANY, lambda app, b: app.server_info()),
    "/v1/loads": (ANY, lambda app, b: app.loads()),
    "/v1/models": (ANY, _models),
    "/flush_cache": (ANY, _flush),
    "/abort_request": (("POST",), _abort_request),
    "/pause_generation": (("POST",), _pause),
    "/continue_generation": (("POST",), _continue),
    "/update_weights_from_disk": (("POST",), lambda app, b: _status_reply(app.weights.update_from_disk(b))),
    "/begin_weight_update": (("POST",), lambda app, b: app.weights.begin(b)),
    "/end_weight_update": (("POST",), lambda app, b: _status_reply(app.weights.end(b))),
    "/init_weights_update_group": (("POST",), lambda app, b: _status_reply(app.weights.init_group(b))),
    "/destroy_weights_update_group": (("POST",), lambda app, b: app.weights.destroy_group(b)),
    "/update_weights_from_distributed": (("POST",),
                                         lambda app, b: _status_reply(app.weights.update_from_distributed(b))),
    "/update_weights_from_tensor": (("POST",), lambda app, b: _status_reply(app.weights.update_from_tensor(b))),
    "/update_weight_version": (("POST",), lambda app, b: app.weights.update_version(b)),
    "/v1/chat/completions": (("POST",), lambda app, b: (app.chat.complete_stream(b) if isinstance(b, dict)
                                                        and b.get("stream") else app.chat.complete(b))),
}


class Handler(BaseHTTPRequestHandler):
    """One connection of an ``EngineServer`` (``app``, set on a subclass by the server)."""
    app: Any
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):   # route through logging, not stderr
        log.debug("%s - " + fmt, self.address_string(), *args)

    def _send(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_sse(self, chunks: SSEStream) -> None:
        """Server-Sent Events: ``data: {json}`` per chunk, then ``data: [DONE]``; the connection
        closes at the end (no Content-Length). A client that goes away aborts the request."""
        self.close_connection = True
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for obj in chunks:
                self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            log.info("stream client went away; request aborted")
        except Exception as e:   # headers are out: report in-band, like SGLang's error chunk
            log.exception("stream failed")
            try:
                err = {"error": {"message": f"{type(e).__name__}: {e}", "field": None}}
                self.wfile.write(f"data: {json.dumps(err)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
            except OSError:
                pass
        finally:
            chunks.close()   # aborts the request if it has not finished

    def _body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except json.JSONDecodeError as e:
            raise BadRequest("body", f"invalid JSON: {e}")

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def _dispatch(self, method: str) -> None:
        path = urlparse(self.path).path.rstrip("/") or "/"
        try:
            body = self._body() if method in ("POST", "PUT") else {}
            route = None if path in self.app.disabled_endpoints else ROUTES.get(path)
            if route is None or method not in route[0]:
                return self._send(404, {"error": {"message": f"{method} {path} not found", "field": "path"}})
            out = route[1](self.app, body)
            if isinstance(out, SSEStream):
                return self._send_sse(out)
            if isinstance(out, Reply):
                return self._send(out.status, out.obj)
            return self._send(200, out)
        except BadRequest as e:
            return self._send(400, {"error": {"message": e.message, "field": e.field}})
        except Exception as e:   # never die on a request
            log.exception("request %s %s failed", method, path)
            try:
                return self._send(500, {"error": {"message": f"{type(e).__name__}: {e}", "field": None}})
            except Exception:
                pass
