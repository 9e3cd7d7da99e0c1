"""Test doubles for the Harness-R1 tests (no trained model runs on CI).

``SeededDBBenchPolicy`` stands in for a frozen *sampling* target on DBBench (text protocol): the
library's scripted agent (``harness_r1.scripted``, also the CPU presets' target) over a fixed
question index. It decodes the real token context with the real tokenizer and draws its
mistakes from the request's sampling seed, so paired reruns are only paired if the executor
really replays the seeds; any harness intervention makes it careful (see ``scripted``).

``ChatServer`` (from the Harness-S doubles) is a scripted OpenAI-compatible server over real
HTTP; ``chat_policy_handler`` makes it answer like ``SeededDBBenchPolicy`` from the chat
messages (a scripted API target; the seed comes from the request body).
``SGLangServer`` is a scripted SGLang-API server (``/generate`` with token ids and log-probs,
``/model_info``) over real HTTP, for the ``sglang`` target kind.
"""
from __future__ import annotations

import json
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness_jax.harness_r1.scripted import (ScriptedDBBenchAgent, TextPolicy, decide,  # noqa: F401
                                             item_index)

from tests.harness_s.doubles import ChatServer, reply  # noqa: F401  (re-exported)


class SeededDBBenchPolicy(ScriptedDBBenchAgent):
    """The scripted sampling target over a fixed question index (module docstring)."""

    def __init__(self, tokenizer, items: dict, **kw):
        super().__init__(tokenizer, items, **kw)


def make_policy(tokenizer=None, *, seed: int = 1, n: int = 3, categories=None, p_hasty=0.4,
                p_sloppy=0.3, crash_marker: str = "", latency_ms: float = 0.0):
    """``TargetSpec(kind="factory")`` entry point: the scripted policy over the generated
    DBBench tasks of ``dbbench_batch(seed, n, categories)`` (rebuilt in worker processes)."""
    if tokenizer is None:
        from harness_jax.sampling.tokenizer import load_tokenizer

        tokenizer = load_tokenizer()
    return SeededDBBenchPolicy(tokenizer, item_index(dbbench_batch(seed, n, categories)),
                               p_hasty=p_hasty, p_sloppy=p_sloppy, crash_marker=crash_marker,
                               latency_ms=latency_ms)


def dbbench_batch(seed: int = 1, n: int = 3, categories=None, split: str = "train"):
    from harness_jax.envs import dbbench

    cats = categories or ["counting", "aggregation-SUM", "aggregation-AVG"]
    out = []
    for i, c in enumerate(cats):
        out += dbbench.generate_tasks(n, seed=seed * 100 + i, split=split, categories=[c])
    return out


def chat_policy_handler(items: dict, log: list):
    """A ``ChatServer`` handler answering like the scripted policy from chat messages."""
    def handler(body):
        log.append(body)
        msgs = body["messages"]
        text = "".join(f"\x00{m['role']}\x00" + (m.get("content") or "") + "\n"
                       for m in msgs)
        # rebuild the "user\n" marker of the newest feedback for decide()
        last_user = [m for m in msgs if m["role"] in ("user", "tool")][-1]
        text = text + "user\n" + (last_user.get("content") or "")
        return decide(items, text, body.get("seed"))
    return handler


class SGLangServer:
    """Scripted SGLang-API server (test double over real HTTP): ``/generate`` decodes the input
    ids, asks ``policy(text, seed) -> str`` and answers with token ids, log-probs and the served
    ``weight_version``; ``/model_info`` reports ``model_path`` and ``weight_version``."""

    def __init__(self, tokenizer, policy, model_path="scripted-sglang", weight_version="5"):
        self.tok = tokenizer
        self.policy = policy
        self.model_path = model_path
        self.weight_version = weight_version
        self.requests: list = []
        state = self
        im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, obj, status=200):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path in ("/model_info", "/get_model_info"):
                    return self._send({"model_path": state.model_path,
                                       "weight_version": state.weight_version})
                self._send({"error": {"message": "not found"}}, 404)

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n))
                if self.path != "/generate":
                    return self._send({"ok": True})
                state.requests.append(body)
                text = state.tok.decode(body["input_ids"], skip_special_tokens=False)
                seed = body["sampling_params"].get("sampling_seed")
                ids = state.tok.encode(state.policy(text, seed), add_special_tokens=False)
                ids = ids + [im_end]
                self._send({"output_ids": ids, "meta_info": {
                    "output_token_logprobs": [[-0.1, t, None] for t in ids],
                    "finish_reason": {"type": "stop", "matched": im_end},
                    "weight_version": state.weight_version}})

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.thread = threading.Thread(target=self.srv.serve_forever,
                                       kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def make_split_policy(tokenizer=None, *, sizes=None, categories=None, seed: int = 0):
    """``TargetSpec(kind="factory")`` entry point for dataset builds: the scripted policy over
    the registry's generated DBBench splits (``sizes``: environment split -> n, as the builder
    loads them)."""
    from harness_jax.envs import registry

    if tokenizer is None:
        from harness_jax.sampling.tokenizer import load_tokenizer

        tokenizer = load_tokenizer()
    items = {}
    for split, n in (sizes or {"train": 6, "selection": 3}).items():
        items.update(item_index(registry.load_split("dbbench", split, n=n, seed=seed,
                                                    categories=categories)))
    return SeededDBBenchPolicy(tokenizer, items)


class RandomWalker(TextPolicy):
    """A sampling text-game target (test double): replies ``ACTION: <command>`` with a command
    drawn by the request seed from the last ``AVAILABLE ACTIONS:`` list in its context."""

    def __init__(self, tokenizer, version: int = 1):
        super().__init__(tokenizer, version)

    async def generate(self, request):
        text = self.tok.decode(list(request.input_ids), skip_special_tokens=False)
        line = text.rsplit("AVAILABLE ACTIONS:", 1)[-1].split("<|im_end|>")[0]
        options = [a.strip() for a in line.split(",") if a.strip()] or ["look"]
        return self.result(request, "ACTION: " + random.Random(request.params.seed).choice(
            options))
