"""SGLang-compatible HTTP server over the embedded ``JaxEngine`` (stdlib only).

Serves the request/response shapes of SGLang 0.5.23 that RL clients use (``/generate``,
``/health``, ``/health_generate``, ``/model_info``, ``/server_info``, ``/v1/loads``,
``/flush_cache``, ``/abort_request``, ``/pause_generation``, ``/continue_generation``,
``/update_weights_from_disk``, ``/v1/models``) plus an OpenAI-compatible
``/v1/chat/completions`` (tools in, tool calls out, token ids on request; ``stream: true``
answers with ``chat.completion.chunk`` Server-Sent Events). Why: the SGLang client
is tested end to end over real HTTP against it, and frozen target agents / helper LLMs can be
served from JAX hosts (TPU) where SGLang's weight-update API is missing.

The rooms: ``server_protocol`` (the ``/generate`` wire format, validation), ``server_chat``
(chat completions), ``server_weights`` (weight updates), ``server_http`` (routing, JSON, SSE).
Bad requests get HTTP 400 with ``{"error": {"message", "field"}}``; a handler exception never
takes the server down (500 with the message).
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from http.server import ThreadingHTTPServer
from typing import Any, Callable, Iterator, Optional

from harness_jax.sampling.server_chat import ChatEndpoints
from harness_jax.sampling.server_http import Handler
from harness_jax.sampling.server_protocol import (SGLANG_SAMPLING_KEYS, BadRequest, SSEStream, int_list,
                                                  parse_sampling_params, require, sglang_finish_reason)
from harness_jax.sampling.server_weights import WeightEndpoints
from harness_jax.sampling.types import GenerateRequest, GenerateResult, SamplingParams

log = logging.getLogger(__name__)

__all__ = ["EngineServer", "build_server", "BadRequest", "SGLANG_SAMPLING_KEYS", "parse_sampling_params"]


class EngineServer:
    """The server state: engine, tokenizer, weight-version names, pause/update coordination.

    Args:
      engine: a ``JaxEngine``.
      tokenizer: HF-style tokenizer (``encode``/``decode``); needed for ``text`` inputs, stop
        strings, ``text`` outputs and chat completions.
      model_path / served_model_name: reported by ``/model_info``.
      load_model_fn: ``path -> nnx model`` for ``/update_weights_from_disk`` (default
        ``qwen3_5.load_hf(path, dtype=...)``).
      model: the model the engine serves (learner format): what tensor / distributed weight
        updates patch (``build_server`` passes it; without it only disk updates work).
      disabled_endpoints: paths answered with 404, as an older SGLang would (tests of clients'
        feature probing).
      incremental_streaming_output: streamed ``/generate`` chunks carry only the new tokens
        (SGLang's ``--incremental-streaming-output``); default cumulative chunks.
    """

    def __init__(self, engine, tokenizer=None, model_path: str = "", served_model_name: str = "",
                 load_model_fn: Optional[Callable[[str], Any]] = None, dtype: str = "float32",
                 incremental_streaming_output: bool = False, model=None, disabled_endpoints=()):
        self.engine = engine
        self.incremental_streaming_output = bool(incremental_streaming_output)
        self.tokenizer = tokenizer
        self.model_path = model_path
        self.served_model_name = served_model_name or model_path or "harness_jax"
        self.dtype = dtype
        self.weight_version = str(engine.weight_version)
        self.gate = threading.Event()     # cleared while a weight update holds the writer lock
        self.gate.set()
        self.update_lock = threading.Lock()
        self.chat = ChatEndpoints(self)                      # /v1/chat/completions
        self.weights = WeightEndpoints(self, load_model_fn, model)   # /update_weights_*, sessions, groups
        self.disabled_endpoints = frozenset(disabled_endpoints)
        self._httpd: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None

    # ------------------------------------------------------------------------- lifecycle
    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serves in a background thread; returns the base URL (port 0 = any free port)."""
        handler = type("Handler", (Handler,), {"app": self})
        self._httpd = ThreadingHTTPServer((host, port), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True, name="EngineServer")
        self._thread.start()
        return self.url

    def serve_forever(self, host: str = "0.0.0.0", port: int = 30000) -> None:
        handler = type("Handler", (Handler,), {"app": self})
        self._httpd = ThreadingHTTPServer((host, port), handler)
        self._httpd.daemon_threads = True
        self._httpd.serve_forever()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def shutdown(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    # -------------------------------------------------------------------------- endpoints
    def version_of(self, res: GenerateResult) -> str:
        return self.weight_version if res.weight_version == self.engine.weight_version else str(res.weight_version)

    def submit_one(self, ids: list[int], params: SamplingParams, rid: str):
        return self.submit_all([(ids, params, rid)])[0]

    def submit_all(self, items):
        """Validates and queues (ids, params, rid) triples together (one prefill for a batch)."""
        self.gate.wait()
        try:
            return self.engine.submit_many([GenerateRequest(input_ids=ids, params=p, request_id=rid)
                                            for ids, p, rid in items])
        except ValueError as e:
            raise BadRequest("input_ids", str(e))

    def _parse_generate(self, body: Any):
        """Validates a ``/generate`` body -> (inputs, parsed params, rids, return_logprob, single)."""
        require(isinstance(body, dict), "body", "must be a JSON object")
        n_inputs = sum(body.get(k) is not None for k in ("text", "input_ids", "input_embeds"))
        require(n_inputs == 1, "input_ids", "give exactly one of text / input_ids (input_embeds is unsupported)")
        require(body.get("input_embeds") is None, "input_embeds", "not supported; send input_ids")
        lsl = body.get("logprob_start_len")
        require(lsl in (None, -1) or (isinstance(lsl, list) and all(x in (None, -1) for x in lsl)),
                "logprob_start_len", "prompt logprobs are not supported; omit it or use -1")
        require(not body.get("top_logprobs_num"), "top_logprobs_num", "top logprobs are not supported")
        require(not body.get("token_ids_logprob"), "token_ids_logprob", "not supported")
        if body.get("text") is not None:
            require(self.tokenizer is not None, "text", "this server has no tokenizer; send input_ids")
            texts = body["text"]
            single = isinstance(texts, str)
            texts = [texts] if single else texts
            require(isinstance(texts, list) and all(isinstance(t, str) for t in texts), "text",
                    "must be a string or a list of strings")
            inputs = [self.tokenizer.encode(t, add_special_tokens=False) for t in texts]
        else:
            ids = body["input_ids"]
            require(isinstance(ids, list), "input_ids", "must be a list of ints or a list of such lists")
            single = isinstance(ids, list) and (not ids or not isinstance(ids[0], list))
            inputs = [int_list(ids, "input_ids")] if single else [
                int_list(x, f"input_ids[{i}]") for i, x in enumerate(ids if isinstance(ids, list) else [None])]
        require(all(len(x) > 0 for x in inputs), "input_ids", "must not be empty")
        sps = body.get("sampling_params")
        if isinstance(sps, list):
            require(len(sps) == len(inputs), "sampling_params", "list length must match the batch")
            parsed = [parse_sampling_params(s, f"sampling_params[{i}]") for i, s in enumerate(sps)]
        else:
            parsed = [parse_sampling_params(sps)] * len(inputs)
        for p, _ in parsed:
            if p.stop:
                require(self.tokenizer is not None, "sampling_params.stop",
                        "stop strings need a server tokenizer; use stop_token_ids")
        rids = body.get("rid")
        if rids is None:
            rids = [uuid.uuid4().hex for _ in inputs]
        elif isinstance(rids, str):
            require(single or len(inputs) == 1, "rid", "a batch needs a list of rids")
            rids = [rids]
        require(isinstance(rids, list) and len(rids) == len(inputs) and len(set(rids)) == len(rids)
                and all(isinstance(r, str) for r in rids), "rid", "must be unique strings, one per input")
        ret_lp = body.get("return_logprob", False)
        ret_lp = ret_lp if isinstance(ret_lp, list) else [ret_lp] * len(inputs)
        return inputs, parsed, rids, ret_lp, single

    def _output(self, ids, extras, rid, token_ids, logprobs, lp: bool, t0: float, body: dict,
                res: Optional[GenerateResult] = None) -> dict:
        """One SGLang ``/generate`` output object; ``res=None`` makes a streaming chunk of a
        running request (``finish_reason`` null)."""
        meta = {"id": rid, "finish_reason": None if res is None else sglang_finish_reason(res),
                "prompt_tokens": len(ids), "completion_tokens": len(token_ids),
                "cached_tokens": 0 if res is None else res.cached_tokens,
                "weight_version": self.weight_version if res is None else self.version_of(res),
                "e2e_latency": time.time() - t0}
        if res is not None and res.token_versions:
            spans, start = [], 0
            for i in range(1, len(res.token_versions) + 1):
                if i == len(res.token_versions) or res.token_versions[i] != res.token_versions[start]:
                    spans.append({"version": str(res.token_versions[start]), "start": start, "end": i})
                    start = i
            meta["weight_versions"] = spans
        if lp:
            meta["output_token_logprobs"] = [[l, t, None] for l, t in zip(logprobs, token_ids)]
            meta["output_token_logprobs_length"] = len(token_ids)
        text = ""
        if self.tokenizer is not None and token_ids:
            text = self.tokenizer.decode(token_ids, skip_special_tokens=extras["skip_special_tokens"])
            stop = None if res is None else res.stop_reason
            if isinstance(stop, str) and not extras["no_stop_trim"]:
                text = text[:text.rfind(stop)] if stop in text else text
        out = {"text": text, "output_ids": list(token_ids), "meta_info": meta}
        if body.get("return_prompt_token_ids"):
            out["prompt_token_ids"] = ids
        return out

    def generate(self, body: dict) -> Any:
        inputs, parsed, rids, ret_lp, single = self._parse_generate(body)
        t0 = time.time()
        futs = self.submit_all([(ids, p, rid) for ids, (p, _), rid in zip(inputs, parsed, rids)])
        outs = []
        for ids, (p, extras), rid, fut, lp in zip(inputs, parsed, rids, futs, ret_lp):
            res: GenerateResult = fut.result()
            outs.append(self._output(ids, extras, rid, res.token_ids, res.logprobs, lp, t0, body, res))
        return outs[0] if single and len(outs) == 1 else outs

    def generate_stream(self, body: dict) -> Iterator[dict]:
        """``/generate`` with ``stream: true``: yields one output object per engine step that
        produced tokens (at most ``decode_steps`` tokens apart; ``sampling_params.stream_interval``
        = N waits for N new tokens between chunks), the last one with its ``finish_reason``.
        Chunks are cumulative like SGLang's default (text, output_ids, output_token_logprobs),
        or deltas when the server runs with ``incremental_streaming_output``. One input per
        streaming request. Validation happens before the first chunk (a 400 is still possible);
        closing the generator (client gone) aborts the request.
        """
        inputs, parsed, rids, ret_lp, single = self._parse_generate(body)
        require(len(inputs) == 1, "stream", "streaming takes one input per request; send a batch with stream=false")
        interval = (body.get("sampling_params") or {}).get("stream_interval") or 1
        require(isinstance(interval, int) and interval >= 1, "sampling_params.stream_interval", "must be an int >= 1")
        ids, (params, extras), rid, lp = inputs[0], parsed[0], rids[0], ret_lp[0]
        self.gate.wait()
        try:
            chunks = self.engine.stream(GenerateRequest(input_ids=ids, params=params, request_id=rid))
        except ValueError as e:
            raise BadRequest("input_ids", str(e))
        return SSEStream(self._stream_chunks(ids, extras, rid, lp, body, interval, chunks), chunks.close)

    def _stream_chunks(self, ids, extras, rid, lp, body, interval, chunks) -> Iterator[dict]:
        t0 = time.time()
        toks: list = []
        lps: list = []
        sent, sent_text = 0, ""
        for chunk in chunks:
            toks += chunk.token_ids
            lps += chunk.logprobs
            if chunk.result is None and len(toks) - sent < interval:
                continue
            out = self._output(ids, extras, rid, toks, lps, lp, t0, body, chunk.result)
            if self.incremental_streaming_output:   # deltas; text sliced from the cumulative decode
                # hold back a trailing partial UTF-8 character (decoded as U+FFFD) until its
                # bytes are complete; text already sent is never re-sent (a stop string trimmed
                # off the final text may thus have been streamed in part)
                text = out["text"] if chunk.result is not None else out["text"].rstrip("\ufffd")
                out["text"] = text[len(sent_text):] if text.startswith(sent_text) else ""
                out["output_ids"] = out["output_ids"][sent:]
                if lp:
                    out["meta_info"]["output_token_logprobs"] = out["meta_info"]["output_token_logprobs"][sent:]
                    out["meta_info"]["output_token_logprobs_length"] = len(toks) - sent
                sent_text = text
            sent = len(toks)
            yield out


    def model_info(self) -> dict:
        cfg = getattr(self.engine, "config", None)
        return {"model_path": self.model_path, "served_model_name": self.served_model_name,
                "tokenizer_path": self.model_path, "is_generation": True,
                "preferred_sampling_params": None, "weight_version": self.weight_version,
                "load_format": "auto", "reasoning_parser": None,
                "tool_call_parser": "qwen3_coder" if self.tokenizer is not None else None,
                "model_type": getattr(cfg, "model_type", "qwen3_5"),
                "architectures": ["Qwen3_5ForCausalLM"]}

    def server_info(self) -> dict:
        e = self.engine
        return {"version": "harness_jax-0.1.0", "max_running_requests": e.max_slots,
                "context_length": e.max_len, "decode_steps": e.decode_steps,
                "internal_states": [{"num_running_reqs": e.num_running(),
                                     "num_waiting_reqs": e.num_waiting(), "paused": e.paused,
                                     "stats": dict(e.stats)}]}

    def loads(self) -> dict:
        return {"loads": [{"dp_rank": 0, "num_running_reqs": self.engine.num_running(),
                           "num_waiting_reqs": self.engine.num_waiting()}]}


def build_server(model_path: str, *, tokenizer_path: Optional[str] = None, max_slots: int = 8,
                 max_len: int = 4096, decode_steps: int = 8, dtype: str = "bfloat16",
                 served_model_name: str = "", weight_version: str = "0", seed: int = 0,
                 incremental_streaming_output: bool = False) -> EngineServer:
    """Loads a checkpoint into a ``JaxEngine`` and wraps it in an ``EngineServer`` (not started)."""
    import jax.numpy as jnp

    from harness_jax.models import qwen3_5
    from harness_jax.sampling.engine import JaxEngine
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"dtype {dtype!r}: use 'float32' or 'bfloat16'")
    tokenizer = None
    try:
        from harness_jax.sampling.tokenizer import load_tokenizer
        tokenizer = load_tokenizer(tokenizer_path or model_path)
    except Exception as e:   # token-in/token-out serving still works without one
        log.warning("no tokenizer (%s); text inputs, stop strings and chat are disabled", e)
    model = qwen3_5.load_hf(model_path, dtype=dtype)
    version = int(weight_version) if str(weight_version).lstrip("-").isdigit() else 0
    engine = JaxEngine(model, max_slots=max_slots, max_len=max_len, tokenizer=tokenizer,
                       decode_steps=decode_steps, seed=seed, weight_version=version,
                       cache_dtype=jnp.bfloat16 if dtype == "bfloat16" else jnp.float32)
    server = EngineServer(engine, tokenizer=tokenizer, model_path=model_path,
                          served_model_name=served_model_name, dtype=dtype,
                          incremental_streaming_output=incremental_streaming_output, model=model)
    server.weight_version = str(weight_version)
    return server
