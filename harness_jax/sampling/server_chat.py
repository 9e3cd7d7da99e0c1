"""OpenAI ``/v1/chat/completions`` over the engine (streamed and not): Qwen3.5 chat rendering,
``tools`` in, parsed ``tool_calls`` out, SGLang's token-id extras. Both paths read the reply
through ``chat.reply_view``, so streamed deltas add up to the non-streamed reply."""
from __future__ import annotations

import dataclasses
import json
import time
import uuid
from typing import Any, Iterator, Optional

from harness_jax.sampling import chat
from harness_jax.sampling.server_protocol import (BadRequest, SSEStream, int_list, parse_sampling_params,
                                                  require)
from harness_jax.sampling.types import (FINISH_ABORT, FINISH_LENGTH, FINISH_STOP, GenerateRequest,
                                        GenerateResult, SamplingParams)


class ChatEndpoints:
    """``/v1/chat/completions`` of an ``EngineServer`` (``app``: its tokenizer, engine, gate)."""

    def __init__(self, app):
        self.app = app

    @property
    def tokenizer(self):
        return self.app.tokenizer

    def _parse_chat(self, body: Any) -> "_ChatRequest":
        """Validates a ``/v1/chat/completions`` body (every error is a 400 naming the field)."""
        require(isinstance(body, dict), "body", "must be a JSON object")
        require(self.tokenizer is not None, "messages", "this server has no tokenizer")
        require(body.get("n", 1) == 1, "n", "only n=1 is supported")
        require(not body.get("top_logprobs"), "top_logprobs", "top logprobs are not supported")
        stream = body.get("stream", False)
        require(isinstance(stream, bool), "stream", "must be true or false")
        opts = body.get("stream_options")
        require(opts is None or isinstance(opts, dict), "stream_options", "must be an object")
        require(opts is None or stream, "stream_options", "only allowed with stream=true")
        opts = opts or {}
        require(set(opts) <= {"include_usage", "continuous_usage_stats"}, "stream_options",
                f"unknown option(s) {sorted(set(opts) - {'include_usage', 'continuous_usage_stats'})}")
        require(not opts.get("continuous_usage_stats"), "stream_options.continuous_usage_stats",
                "not supported; use include_usage")
        tools = body.get("tools")
        require(tools is None or isinstance(tools, list), "tools", "must be a list of tool specs")
        tool_specs = None
        if tools:
            tool_specs = []
            for i, t in enumerate(tools):
                require(isinstance(t, dict), f"tools[{i}]", "must be an object")
                tool_specs.append(t.get("function", t) if t.get("type") == "function" else t)
        kw = body.get("chat_template_kwargs") or {}
        require(isinstance(kw, dict), "chat_template_kwargs", "must be an object")
        thinking = bool(kw.get("enable_thinking", False))
        if body.get("input_ids") is not None:
            ids = int_list(body["input_ids"], "input_ids")
        else:
            msgs = body.get("messages")
            require(isinstance(msgs, list) and msgs, "messages", "must be a non-empty list")
            try:
                prompt = chat.render_messages(msgs, tools=tools or None, add_generation_prompt=True,
                                              enable_thinking=thinking)
            except (ValueError, TypeError) as e:
                raise BadRequest("messages", str(e))
            ids = self.tokenizer.encode(prompt, add_special_tokens=False)
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens", 128))
        require(isinstance(max_tokens, int) and max_tokens >= 1, "max_tokens", "must be an int >= 1")
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
            model=body.get("model") or self.app.served_model_name, tools=tool_specs,
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
            out["meta_info"] = {"weight_version": self.app.version_of(res),
                                "cached_tokens": res.cached_tokens}

    def complete(self, body: dict) -> dict:
        """``/v1/chat/completions`` without streaming: one ``chat.completion`` object."""
        req = self._parse_chat(body)
        require(not body.get("stream"), "stream", "use complete_stream for stream=true")
        res: GenerateResult = self.app.submit_one(req.ids, req.params, req.rid).result()
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

    def complete_stream(self, body: dict) -> "SSEStream":
        """``/v1/chat/completions`` with ``stream: true``: ``chat.completion.chunk`` objects
        (sent as SSE, then ``data: [DONE]``): a role chunk, content deltas and tool-call deltas
        (each call whole, once its ``</tool_call>`` closes), a final chunk with
        ``finish_reason`` (and the SGLang extras), and with ``stream_options.include_usage`` a
        last chunk with empty ``choices`` and the usage (earlier chunks carry ``usage: null``).
        The deltas add up to the non-streamed reply (``chat.reply_view``). Validation happens
        before the first chunk; closing the stream (client gone) aborts the request.
        """
        req = self._parse_chat(body)
        self.app.gate.wait()
        try:
            chunks = self.app.engine.stream(GenerateRequest(input_ids=req.ids, params=req.params,
                                                            request_id=req.rid))
        except ValueError as e:
            raise BadRequest("input_ids", str(e))
        return SSEStream(self._chat_chunks(req, chunks), chunks.close)

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

