"""Test doubles of the sampling layer.

``ScriptedEngine``: the engine behind ``EngineServer`` (the real ``JaxEngine`` is tested in
test_engine.py and end to end in test_server_client.py / test_chat_completions.py). A random tiny
model cannot be made to produce a given reply (a tool call, a character whose UTF-8 bytes span
several tokens), so it replies with a scripted token sequence, streamed ``step`` tokens per chunk;
everything around it (HTTP, SSE, parsing, the clients) is the real code.

``ChatServer``: a scripted OpenAI-compatible chat-completions server over real HTTP (a local
``ThreadingHTTPServer``). A real provider cannot be reached from CI, and rate limits, 5xx,
malformed replies, or LLM roles (voters, editors, diagnosers, teachers) answering well, badly or
not at all must be provoked on demand. ``handler(body)`` decides each reply from the request; the
client under test is the real ``OpenAIChatClient`` (HTTP, cache, accounting). Used by the sampling,
Harness-S and Harness-R1 tests.
"""
import concurrent.futures
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness_jax.sampling.types import FINISH_STOP, GenerateResult, StreamChunk


class _Chunks(list):
    """What ``JaxEngine.stream`` returns: an iterable of chunks with ``close()``."""

    def close(self):
        pass


class ScriptedEngine:
    weight_version = 0

    def __init__(self, token_ids, step=3, finish=FINISH_STOP):
        self.token_ids, self.step, self.finish = list(token_ids), step, finish

    def _result(self, rid):
        stop = self.token_ids[-1] if self.finish == FINISH_STOP else None
        return GenerateResult(request_id=rid, token_ids=self.token_ids,
                              logprobs=[-0.5] * len(self.token_ids), finish_reason=self.finish,
                              weight_version=0, stop_reason=stop)

    def submit_many(self, requests):
        futs = []
        for r in requests:
            f = concurrent.futures.Future()
            f.set_result(self._result(r.request_id))
            futs.append(f)
        return futs

    def stream(self, request):
        ids, n = self.token_ids, self.step
        chunks = _Chunks(StreamChunk(request.request_id, ids[i:i + n], [-0.5] * len(ids[i:i + n]),
                                     [0] * len(ids[i:i + n])) for i in range(0, len(ids), n))
        chunks.append(StreamChunk(request.request_id, [], [], [],
                                  self._result(request.request_id)))
        return chunks


def reply(content, tool_calls=None, pt: int = 20, ct: int = 10) -> dict:
    """A chat-completions response body with one choice."""
    msg = {"role": "assistant", "content": content}
    if tool_calls:
        msg["tool_calls"] = tool_calls
    return {"choices": [{"index": 0, "message": msg, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": pt, "completion_tokens": ct}}


class ChatServer:
    """Scripted OpenAI-compatible server. ``handler(body)`` returns the reply text, or
    ``(status, payload)`` / ``(status, payload, headers)`` with ``payload`` a dict (sent as JSON)
    or a raw string. ``requests`` holds the request bodies, ``headers`` their HTTP headers."""

    def __init__(self, handler=None):
        self.handler = handler or (lambda body: "ok")
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self._lock = threading.Lock()
        state = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n))
                with state._lock:        # requests[i] and headers[i] are one request
                    state.headers.append(dict(self.headers))
                    state.requests.append(body)
                out = state.handler(body)
                if not isinstance(out, tuple):
                    out = (200, reply(out))
                status, payload, headers = (tuple(out) + ({},))[:3]
                data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
                self.send_response(status)
                if not isinstance(payload, str):
                    self.send_header("Content-Type", "application/json")
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.thread = threading.Thread(target=self.srv.serve_forever,
                                       kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}/v1"

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()
