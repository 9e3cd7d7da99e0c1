"""SGLang-compatible HTTP server over the embedded ``JaxEngine`` (stdlib only).

Serves the request/response shapes of SGLang 0.5.23 that RL clients use (``/generate``,
``/health``, ``/health_generate``, ``/model_info``, ``/server_info``, ``/v1/loads``,
``/flush_cache``, ``/abort_request``, ``/pause_generation``, ``/continue_generation``,
``/update_weights_from_disk``, ``/v1/models``) plus an OpenAI-compatible
``/v1/chat/completions`` (tools in, tool calls out, token ids on request; ``stream: true``
answers with ``chat.completion.chunk`` Server-Sent Events). Why: the SGLang client
is tested end to end over real HTTP against it, and frozen target agents / helper LLMs can be
served from JAX hosts (TPU) where SGLang's weight-update API is missing.

Bad requests get HTTP 400 with ``{"error": {"message", "field"}}``; a handler exception never
takes the server down (500 with the message).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator, Optional
from urllib.parse import urlparse

from harness_jax.sampling import chat
from harness_jax.sampling.types import (FINISH_ABORT, FINISH_LENGTH, FINISH_STOP, GenerateRequest,
                                        GenerateResult, SamplingParams)

log = logging.getLogger(__name__)

# every key SGLang 0.5.23's contract accepts in sampling_params; anything else is a 400
SGLANG_SAMPLING_KEYS = frozenset({
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k",
    "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n",
    "json_schema", "regex", "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens",
    "spaces_between_special_tokens", "no_stop_trim", "stream_interval", "logit_bias",
    "sampling_seed", "custom_params", "beam_width", "watermark", "choice"})
# accepted keys this engine cannot honour unless they carry their neutral value
_NEUTRAL = {"frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0,
            "min_new_tokens": 0, "n": 1, "stop_regex": None, "json_schema": None, "regex": None,
            "ebnf": None, "structural_tag": None, "logit_bias": None, "custom_params": None,
            "beam_width": None, "watermark": None, "choice": None}


class BadRequest(Exception):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def _req(cond: bool, field: str, message: str) -> None:
    if not cond:
        raise BadRequest(field, message)


def _int_list(x: Any, field: str) -> list[int]:
    _req(isinstance(x, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in x),
         field, "must be a list of ints")
    return list(x)


def parse_sampling_params(sp: Any, field: str = "sampling_params") -> tuple[SamplingParams, dict]:
    """SGLang ``sampling_params`` dict -> (SamplingParams, extras). Raises BadRequest."""
    if sp is None:
        sp = {}
    _req(isinstance(sp, dict), field, "must be an object")
    unknown = sorted(set(sp) - SGLANG_SAMPLING_KEYS)
    _req(not unknown, f"{field}.{unknown[0] if unknown else ''}",
         f"unknown sampling parameter(s) {unknown}; SGLang rejects them (use max_new_tokens, not max_tokens)")
    for k, neutral in _NEUTRAL.items():
        v = sp.get(k, neutral)
        _req(v is None or v == neutral or (k == "n" and v == 1) or (neutral is None and not v),
             f"{field}.{k}", f"value {v!r} is not supported by harness_jax serve (only {neutral!r})")
    stop = sp.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    _req(isinstance(stop, (list, tuple)) and all(isinstance(s, str) and s for s in stop),
         f"{field}.stop", "must be a non-empty string or a list of them")
    stop_ids = sp.get("stop_token_ids") or []
    stop_ids = _int_list(stop_ids, f"{field}.stop_token_ids")
    top_k = sp.get("top_k", -1)
    _req(isinstance(top_k, int), f"{field}.top_k", "must be an int")
    if top_k >= 1 << 30 or top_k == 0:
        top_k = -1
    seed = sp.get("sampling_seed")
    _req(seed is None or isinstance(seed, int), f"{field}.sampling_seed", "must be an int")
    max_new = sp.get("max_new_tokens", 128)
    _req(isinstance(max_new, int) and max_new >= 1, f"{field}.max_new_tokens", "must be an int >= 1")
    for k in ("temperature", "top_p", "min_p"):
        _req(isinstance(sp.get(k, 0.0), (int, float)) and not isinstance(sp.get(k), bool),
             f"{field}.{k}", "must be a number")
    try:
        params = SamplingParams(
            temperature=float(sp.get("temperature", 1.0)), top_p=float(sp.get("top_p", 1.0)),
            top_k=int(top_k), min_p=float(sp.get("min_p", 0.0)), max_new_tokens=int(max_new),
            stop_token_ids=tuple(stop_ids), stop=tuple(stop), seed=seed,
            ignore_eos=bool(sp.get("ignore_eos", False)))
    except ValueError as e:
        msg = str(e)
        name = msg.split(".")[1].split(" ")[0] if msg.startswith("SamplingParams.") else "?"
        raise BadRequest(f"{field}.{name}", msg)
    extras = {"skip_special_tokens": bool(sp.get("skip_special_tokens", True)),
              "no_stop_trim": bool(sp.get("no_stop_trim", False))}
    return params, extras


def sglang_finish_reason(res: GenerateResult) -> dict:
    if res.finish_reason == FINISH_STOP:
        return {"type": "stop", "matched": res.stop_reason}
    if res.finish_reason == FINISH_LENGTH:
        return {"type": "length", "length": len(res.token_ids)}
    return {"type": "abort", "message": res.message or "aborted", "status_code": None, "err_type": None}


class EngineServer:
    """The server state: engine, tokenizer, weight-version names, pause/update coordination.

    Args:
      engine: a ``JaxEngine``.
      tokenizer: HF-style tokenizer (``encode``/``decode``); needed for ``text`` inputs, stop
        strings, ``text`` outputs and chat completions.
      model_path / served_model_name: reported by ``/model_info``.
      load_model_fn: ``path -> nnx model`` for ``/update_weights_from_disk`` (default
        ``qwen3_5.load_hf(path, dtype=...)``).
      incremental_streaming_output: streamed ``/generate`` chunks carry only the new tokens
        (SGLang's ``--incremental-streaming-output``); default cumulative chunks.
    """

    def __init__(self, engine, tokenizer=None, model_path: str = "", served_model_name: str = "",
                 load_model_fn: Optional[Callable[[str], Any]] = None, dtype: str = "float32",
                 incremental_streaming_output: bool = False):
        self.engine = engine
        self.incremental_streaming_output = bool(incremental_streaming_output)
        self.tokenizer = tokenizer
        self.model_path = model_path
        self.served_model_name = served_model_name or model_path or "harness_jax"
        self.dtype = dtype
        self._load_model_fn = load_model_fn
        self.weight_version = str(engine.weight_version)
        self._gate = threading.Event()     # cleared while a weight update holds the writer lock
        self._gate.set()
        self._update_lock = threading.Lock()
        self._httpd: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None

    # ------------------------------------------------------------------------- lifecycle
    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serves in a background thread; returns the base URL (port 0 = any free port)."""
        handler = type("Handler", (_Handler,), {"app": self})
        self._httpd = ThreadingHTTPServer((host, port), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True, name="EngineServer")
        self._thread.start()
        return self.url

    def serve_forever(self, host: str = "0.0.0.0", port: int = 30000) -> None:
        handler = type("Handler", (_Handler,), {"app": self})
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
    def _version_of(self, res: GenerateResult) -> str:
        return self.weight_version if res.weight_version == self.engine.weight_version else str(res.weight_version)

    def _submit(self, ids: list[int], params: SamplingParams, rid: str):
        return self._submit_many([(ids, params, rid)])[0]

    def _submit_many(self, items):
        """Validates and queues (ids, params, rid) triples together (one prefill for a batch)."""
        self._gate.wait()
        try:
            return self.engine.submit_many([GenerateRequest(input_ids=ids, params=p, request_id=rid)
                                            for ids, p, rid in items])
        except ValueError as e:
            raise BadRequest("input_ids", str(e))

    def _parse_generate(self, body: Any):
        """Validates a ``/generate`` body -> (inputs, parsed params, rids, return_logprob, single)."""
        _req(isinstance(body, dict), "body", "must be a JSON object")
        n_inputs = sum(body.get(k) is not None for k in ("text", "input_ids", "input_embeds"))
        _req(n_inputs == 1, "input_ids", "give exactly one of text / input_ids (input_embeds is unsupported)")
        _req(body.get("input_embeds") is None, "input_embeds", "not supported; send input_ids")
        lsl = body.get("logprob_start_len")
        _req(lsl in (None, -1) or (isinstance(lsl, list) and all(x in (None, -1) for x in lsl)),
             "logprob_start_len", "prompt logprobs are not supported; omit it or use -1")
        _req(not body.get("top_logprobs_num"), "top_logprobs_num", "top logprobs are not supported")
        _req(not body.get("token_ids_logprob"), "token_ids_logprob", "not supported")
        if body.get("text") is not None:
            _req(self.tokenizer is not None, "text", "this server has no tokenizer; send input_ids")
            texts = body["text"]
            single = isinstance(texts, str)
            texts = [texts] if single else texts
            _req(isinstance(texts, list) and all(isinstance(t, str) for t in texts), "text",
                 "must be a string or a list of strings")
            inputs = [self.tokenizer.encode(t, add_special_tokens=False) for t in texts]
        else:
            ids = body["input_ids"]
            _req(isinstance(ids, list), "input_ids", "must be a list of ints or a list of such lists")
            single = isinstance(ids, list) and (not ids or not isinstance(ids[0], list))
            inputs = [_int_list(ids, "input_ids")] if single else [
                _int_list(x, f"input_ids[{i}]") for i, x in enumerate(ids if isinstance(ids, list) else [None])]
        _req(all(len(x) > 0 for x in inputs), "input_ids", "must not be empty")
        sps = body.get("sampling_params")
        if isinstance(sps, list):
            _req(len(sps) == len(inputs), "sampling_params", "list length must match the batch")
            parsed = [parse_sampling_params(s, f"sampling_params[{i}]") for i, s in enumerate(sps)]
        else:
            parsed = [parse_sampling_params(sps)] * len(inputs)
        for p, _ in parsed:
            if p.stop:
                _req(self.tokenizer is not None, "sampling_params.stop",
                     "stop strings need a server tokenizer; use stop_token_ids")
        rids = body.get("rid")
        if rids is None:
            rids = [uuid.uuid4().hex for _ in inputs]
        elif isinstance(rids, str):
            _req(single or len(inputs) == 1, "rid", "a batch needs a list of rids")
            rids = [rids]
        _req(isinstance(rids, list) and len(rids) == len(inputs) and len(set(rids)) == len(rids)
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
                "weight_version": self.weight_version if res is None else self._version_of(res),
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
        futs = self._submit_many([(ids, p, rid) for ids, (p, _), rid in zip(inputs, parsed, rids)])
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
        _req(len(inputs) == 1, "stream", "streaming takes one input per request; send a batch with stream=false")
        interval = (body.get("sampling_params") or {}).get("stream_interval") or 1
        _req(isinstance(interval, int) and interval >= 1, "sampling_params.stream_interval", "must be an int >= 1")
        ids, (params, extras), rid, lp = inputs[0], parsed[0], rids[0], ret_lp[0]
        self._gate.wait()
        try:
            chunks = self.engine.stream(GenerateRequest(input_ids=ids, params=params, request_id=rid))
        except ValueError as e:
            raise BadRequest("input_ids", str(e))
        return _Stream(self._stream_chunks(ids, extras, rid, lp, body, interval, chunks), chunks.close)

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

    def update_weights_from_disk(self, body: dict) -> tuple[int, dict]:
        _req(isinstance(body, dict), "body", "must be a JSON object")
        path = body.get("model_path")
        _req(isinstance(path, str) and path, "model_path", "required: a checkpoint directory")
        version = body.get("weight_version")
        _req(version is None or isinstance(version, (str, int)), "weight_version", "must be a string")
        abort_all = bool(body.get("abort_all_requests", False))
        flush = bool(body.get("flush_cache", True))
        with self._update_lock:
            self._gate.clear()   # writer lock: new requests wait behind the update
            try:
                if not self.engine.paused and not abort_all:
                    while not self.engine.is_idle():   # in-flight requests finish first
                        time.sleep(0.01)
                try:
                    model = self._load(path)
                except Exception as e:   # bad path / incompatible checkpoint: 400, keep serving
                    return 400, {"success": False, "message": f"failed to load {path}: {type(e).__name__}: {e}",
                                 "num_paused_requests": 0}
                int_version = None
                if version is not None and str(version).lstrip("-").isdigit():
                    int_version = int(version)
                try:
                    v = self.engine.update_weights(model, version=int_version,
                                                   in_flight="abort" if abort_all else "continue",
                                                   flush_cache=flush)
                except ValueError as e:
                    return 400, {"success": False, "message": str(e), "num_paused_requests": 0}
                self.weight_version = str(version) if version is not None else str(v)
                self.model_path = path
                return 200, {"success": True, "message": "Succeeded to update model weights.",
                             "num_paused_requests": self.engine.num_running()}
            finally:
                self._gate.set()

    def _load(self, path: str):
        if self._load_model_fn is not None:
            return self._load_model_fn(path)
        from harness_jax.models import qwen3_5
        return qwen3_5.load_hf(path, dtype=self.dtype)

    # ------------------------------------------------------------------ chat completions
    def _parse_chat(self, body: Any) -> "_ChatRequest":
        """Validates a ``/v1/chat/completions`` body (every error is a 400 naming the field)."""
        _req(isinstance(body, dict), "body", "must be a JSON object")
        _req(self.tokenizer is not None, "messages", "this server has no tokenizer")
        _req(body.get("n", 1) == 1, "n", "only n=1 is supported")
        _req(not body.get("top_logprobs"), "top_logprobs", "top logprobs are not supported")
        stream = body.get("stream", False)
        _req(isinstance(stream, bool), "stream", "must be true or false")
        opts = body.get("stream_options")
        _req(opts is None or isinstance(opts, dict), "stream_options", "must be an object")
        _req(opts is None or stream, "stream_options", "only allowed with stream=true")
        opts = opts or {}
        _req(set(opts) <= {"include_usage", "continuous_usage_stats"}, "stream_options",
             f"unknown option(s) {sorted(set(opts) - {'include_usage', 'continuous_usage_stats'})}")
        _req(not opts.get("continuous_usage_stats"), "stream_options.continuous_usage_stats",
             "not supported; use include_usage")
        tools = body.get("tools")
        _req(tools is None or isinstance(tools, list), "tools", "must be a list of tool specs")
        tool_specs = None
        if tools:
            tool_specs = []
            for i, t in enumerate(tools):
                _req(isinstance(t, dict), f"tools[{i}]", "must be an object")
                tool_specs.append(t.get("function", t) if t.get("type") == "function" else t)
        kw = body.get("chat_template_kwargs") or {}
        _req(isinstance(kw, dict), "chat_template_kwargs", "must be an object")
        thinking = bool(kw.get("enable_thinking", False))
        if body.get("input_ids") is not None:
            ids = _int_list(body["input_ids"], "input_ids")
        else:
            msgs = body.get("messages")
            _req(isinstance(msgs, list) and msgs, "messages", "must be a non-empty list")
            try:
                prompt = chat.render_messages(msgs, tools=tools or None, add_generation_prompt=True,
                                              enable_thinking=thinking)
            except (ValueError, TypeError) as e:
                raise BadRequest("messages", str(e))
            ids = self.tokenizer.encode(prompt, add_special_tokens=False)
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens", 128))
        _req(isinstance(max_tokens, int) and max_tokens >= 1, "max_tokens", "must be an int >= 1")
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else stop
        stop_ids = list(body.get("stop_token_ids") or [])
        im_end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if isinstance(im_end, int) and im_end != getattr(self.tokenizer, "unk_token_id", None):
            stop_ids.append(im_end)
        sp = {"temperature": body.get("temperature", 1.0), "top_p": body.get("top_p", 1.0),
              "top_k": body.get("top_k", -1), "min_p": body.get("min_p", 0.0),
              "max_new_tokens": max_tokens, "stop": stop, "stop_token_ids": stop_ids,
              "sampling_seed": body.get("seed")}
        for k in ("frequency_penalty", "presence_penalty"):
            if body.get(k) not in (None, 0, 0.0):
                raise BadRequest(k, "not supported by harness_jax serve (only 0)")
        params, _ = parse_sampling_params(sp, "request")
        return _ChatRequest(
            ids=ids, params=params, rid=body.get("rid") or f"chatcmpl-{uuid.uuid4().hex[:24]}",
            model=body.get("model") or self.served_model_name, tools=tool_specs,
            thinking=thinking, logprobs=bool(body.get("logprobs")),
            include_usage=bool(opts.get("include_usage")), body=body)

    def _token_logprobs(self, token_ids, logprobs) -> list:
        out = []
        for t, lp in zip(token_ids, logprobs):
            piece = self.tokenizer.decode([t])
            out.append({"token": piece, "bytes": list(piece.encode()), "logprob": lp,
                        "top_logprobs": []})
        return out

    def _reply_text(self, token_ids, stop_reason=None) -> str:
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        if isinstance(stop_reason, str) and stop_reason in text:
            text = text[:text.rfind(stop_reason)]
        return text

    @staticmethod
    def _finish_reason(res: GenerateResult, calls) -> str:
        if calls and res.finish_reason == FINISH_STOP:
            return "tool_calls"
        return {FINISH_STOP: "stop", FINISH_LENGTH: "length", FINISH_ABORT: "abort"}[res.finish_reason]

    def _extras(self, req: "_ChatRequest", res: GenerateResult, choice: dict, out: dict) -> None:
        """The SGLang-style extras a client may ask for (token ids, weight version)."""
        body = req.body
        if body.get("return_token_ids") or body.get("return_prompt_token_ids"):
            choice["prompt_token_ids"] = req.ids
        if body.get("return_token_ids"):
            choice["response_token_ids"] = list(res.token_ids)
        if body.get("return_meta_info"):
            out["meta_info"] = {"weight_version": self._version_of(res),
                                "cached_tokens": res.cached_tokens}

    def chat_completions(self, body: dict) -> dict:
        """``/v1/chat/completions`` without streaming: one ``chat.completion`` object."""
        req = self._parse_chat(body)
        _req(not body.get("stream"), "stream", "use chat_completions_stream for stream=true")
        res: GenerateResult = self._submit(req.ids, req.params, req.rid).result()
        content, calls = chat.reply_view(self._reply_text(res.token_ids, res.stop_reason),
                                         tools=req.tools, thinking=req.thinking)
        message: dict = {"role": "assistant", "content": content or (None if calls else "")}
        if calls:
            message["tool_calls"] = [_tool_call_json(c) for c in calls]
        choice: dict = {"index": 0, "message": message,
                        "finish_reason": self._finish_reason(res, calls)}
        if req.logprobs:
            choice["logprobs"] = {"content": self._token_logprobs(res.token_ids, res.logprobs)}
        out = {"id": req.rid, "object": "chat.completion", "created": int(time.time()),
               "model": req.model, "choices": [choice], "usage": _usage(req.ids, res.token_ids)}
        self._extras(req, res, choice, out)
        return out

    def chat_completions_stream(self, body: dict) -> "_Stream":
        """``/v1/chat/completions`` with ``stream: true``: ``chat.completion.chunk`` objects
        (sent as SSE, then ``data: [DONE]``): a role chunk, content deltas and tool-call deltas
        (each call whole, once its ``</tool_call>`` closes), a final chunk with
        ``finish_reason`` (and the SGLang extras), and with ``stream_options.include_usage`` a
        last chunk with empty ``choices`` and the usage (earlier chunks carry ``usage: null``).
        The deltas add up to the non-streamed reply (``chat.reply_view``). Validation happens
        before the first chunk; closing the stream (client gone) aborts the request.
        """
        req = self._parse_chat(body)
        self._gate.wait()
        try:
            chunks = self.engine.stream(GenerateRequest(input_ids=req.ids, params=req.params,
                                                        request_id=req.rid))
        except ValueError as e:
            raise BadRequest("input_ids", str(e))
        return _Stream(self._chat_chunks(req, chunks), chunks.close)

    def _chat_chunks(self, req: "_ChatRequest", chunks) -> Iterator[dict]:
        created = int(time.time())

        def chunk(delta: Optional[dict], finish=None, **extra) -> dict:
            choices = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None,
                                                 "finish_reason": finish}]
            out = {"id": req.rid, "object": "chat.completion.chunk", "created": created,
                   "model": req.model, "choices": choices, **extra}
            if req.include_usage and "usage" not in out:
                out["usage"] = None
            return out

        yield chunk({"role": "assistant", "content": ""})
        toks: list = []
        pending_lps: list = []       # (token, logprob) not yet attached to a chunk
        sent_content, sent_calls = "", 0
        for c in chunks:
            toks += c.token_ids
            pending_lps += zip(c.token_ids, c.logprobs)
            res = c.result
            if res is None:   # hold back a partial UTF-8 character until its bytes are complete
                text = self.tokenizer.decode(toks, skip_special_tokens=True).rstrip("\ufffd")
            else:
                text = self._reply_text(res.token_ids, res.stop_reason)
            content, calls = chat.reply_view(text, tools=req.tools, thinking=req.thinking,
                                             final=res is not None, stops=req.params.stop)
            deltas = []
            if content.startswith(sent_content) and len(content) > len(sent_content):
                deltas.append({"content": content[len(sent_content):]})
                sent_content = content
            for i in range(sent_calls, len(calls)):
                deltas.append({"tool_calls": [{"index": i, **_tool_call_json(calls[i])}]})
            sent_calls = max(sent_calls, len(calls))
            for d in deltas:
                out = chunk(d)
                if req.logprobs and pending_lps:
                    out["choices"][0]["logprobs"] = {"content": self._token_logprobs(
                        *zip(*pending_lps))}
                    pending_lps = []
                yield out
            if res is not None:
                out = chunk({}, self._finish_reason(res, calls))
                if req.logprobs and pending_lps:
                    out["choices"][0]["logprobs"] = {"content": self._token_logprobs(
                        *zip(*pending_lps))}
                self._extras(req, res, out["choices"][0], out)
                yield out
                if req.include_usage:
                    yield chunk(None, usage=_usage(req.ids, res.token_ids))


@dataclasses.dataclass
class _ChatRequest:
    ids: list
    params: SamplingParams
    rid: str
    model: str
    tools: Optional[list]
    thinking: bool
    logprobs: bool
    include_usage: bool
    body: dict


def _tool_call_json(call) -> dict:
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": call.name,
                         "arguments": json.dumps(call.arguments, ensure_ascii=False)}}


def _usage(prompt_ids, token_ids) -> dict:
    return {"prompt_tokens": len(prompt_ids), "completion_tokens": len(token_ids),
            "total_tokens": len(prompt_ids) + len(token_ids)}


class _Stream:
    """SSE output objects whose ``close`` also closes the engine stream, which aborts the request
    if it still runs (the client went away, or the handler stopped early), even before the
    first chunk was produced."""

    def __init__(self, outputs: Iterator[dict], close_engine_stream: Callable[[], None]):
        self._outputs, self._close = outputs, close_engine_stream

    def __iter__(self):
        return self._outputs

    def close(self) -> None:
        self._outputs.close()
        self._close()


class _Handler(BaseHTTPRequestHandler):
    app: EngineServer
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

    def _send_sse(self, chunks: "_Stream") -> None:
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
                self.wfile.write(f"data: {json.dumps({'error': {'message': f'{type(e).__name__}: {e}', 'field': None}})}\n\n".encode())
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
        app = self.app
        url = urlparse(self.path)
        path = url.path.rstrip("/") or "/"
        try:
            body = self._body() if method in ("POST", "PUT") else {}
            if path == "/generate" and method in ("POST", "PUT"):
                if isinstance(body, dict) and body.get("stream"):
                    return self._send_sse(app.generate_stream(body))
                return self._send(200, app.generate(body))
            if path in ("/health", "/ready"):
                return self._send(200, {})
            if path == "/health_generate":
                app.generate({"input_ids": [0], "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}})
                return self._send(200, {})
            if path in ("/model_info", "/get_model_info"):
                return self._send(200, app.model_info())
            if path in ("/server_info", "/get_server_info"):
                return self._send(200, app.server_info())
            if path == "/v1/loads":
                return self._send(200, app.loads())
            if path == "/v1/models":
                return self._send(200, {"object": "list", "data": [
                    {"id": app.served_model_name, "object": "model", "owned_by": "harness_jax"}]})
            if path == "/flush_cache":
                if app.engine.flush_cache():
                    return self._send(200, {"success": True, "message": "Cache flushed."})
                return self._send(400, {"success": False, "message": "Cache not flushed: requests are running or queued"})
            if path == "/abort_request" and method == "POST":
                rid = body.get("rid") if isinstance(body, dict) else None
                abort_all = bool(body.get("abort_all", False)) if isinstance(body, dict) else False
                _req(abort_all or isinstance(rid, str), "rid", "give a rid or abort_all=true")
                app.engine.abort(rid, abort_all=abort_all, message="Abort by abort_request")
                return self._send(200, {})
            if path == "/pause_generation" and method == "POST":
                mode = (body or {}).get("mode", "abort")
                _req(mode in ("abort", "retract", "in_place"), "mode", "use abort, retract or in_place")
                app.engine.pause(mode)
                return self._send(200, {"success": True, "message": f"paused ({mode})"})
            if path == "/continue_generation" and method == "POST":
                app.engine.resume()
                return self._send(200, {"success": True, "message": "continued"})
            if path == "/update_weights_from_disk" and method == "POST":
                status, out = app.update_weights_from_disk(body)
                return self._send(status, out)
            if path == "/v1/chat/completions" and method == "POST":
                if isinstance(body, dict) and body.get("stream"):
                    return self._send_sse(app.chat_completions_stream(body))
                return self._send(200, app.chat_completions(body))
            return self._send(404, {"error": {"message": f"{method} {path} not found", "field": "path"}})
        except BadRequest as e:
            return self._send(400, {"error": {"message": e.message, "field": e.field}})
        except Exception as e:   # never die on a request
            log.exception("request %s %s failed", method, path)
            try:
                return self._send(500, {"error": {"message": f"{type(e).__name__}: {e}", "field": None}})
            except Exception:
                pass


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
                          incremental_streaming_output=incremental_streaming_output)
    server.weight_version = str(weight_version)
    return server
