"""Frozen target agents: any rollout engine behind one ``RolloutEngine`` that refuses weight updates.

Harness-R1 never trains the target. A ``FrozenTarget`` wraps the engine that serves it:

* ``jax``: the embedded ``JaxEngine`` over a Qwen3.5 loaded from an HF directory (``save_hf``
  writes one from a trained model) or given as an in-memory model;
* ``sglang``: one or more SGLang-API servers (``SGLangClient``), including our own
  ``EngineServer`` (the TPU path: the target served from JAX hosts);
* ``chat``: any OpenAI-compatible chat endpoint through ``ChatEngine`` (API models give text
  without token ids or log-probs; the adapter turns the executor's token context back into chat
  messages and the reply back into tokens, so the executor runs them unchanged);
* ``factory``: ``"module:function"`` building an engine (custom engines, test doubles).

Frozen is enforced three ways: the wrapper's weight-update methods raise ``FrozenTargetError``;
the wrapped engine's own update methods are replaced by ones that raise (so a learner holding
the inner engine cannot update it either); and every generation checks that the engine's weight
version, and the version the server reports for the reply, are still the pinned one (a target
whose weights changed behind our back fails the request as an infrastructure error, which the
executor retries and never scores).

The identity ``(kind, model, version, endpoint, options)`` is part of every cache key
(baselines, rewards, packets): a baseline is never reused for another target or serving
protocol. ``TargetSpec`` is the serialisable recipe (it rebuilds the same target in a worker
process); ``TargetIdentity`` is what keys caches.
"""
from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import importlib
import json
import logging
import os
from typing import Any, Optional, Sequence

import jax.numpy as jnp

from harness_jax.sampling import chat
from harness_jax.sampling.types import GenerateRequest, GenerateResult, RolloutEngine
from harness_jax.models import qwen3_5
from harness_jax.sampling.engine import JaxEngine
from harness_jax.sampling.openai_client import ChatClientConfig, OpenAIChatClient
from harness_jax.sampling.sglang_client import SGLangClient
from harness_jax.sampling.tokenizer import load_tokenizer

log = logging.getLogger(__name__)

KINDS = ("jax", "sglang", "chat", "factory")
# Methods of engines/clients that change the served weights.
WEIGHT_UPDATE_METHODS = ("update_weights", "update_weights_from_disk", "sync_model",
                         "update_weights_from_tensor", "update_weights_from_distributed",
                         "load_weights", "set_params")


class FrozenTargetError(RuntimeError):
    """A weight update was aimed at a frozen target, or its weights changed under it."""


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


@dataclasses.dataclass(frozen=True)
class TargetIdentity:
    """What a target IS, for cache keys: same identity = same behaviour given the same inputs."""

    kind: str
    model: str
    version: str
    endpoint: str = "local"
    options: tuple = ()          # sorted (name, value) pairs that change behaviour

    def to_dict(self) -> dict:
        return {"kind": self.kind, "model": self.model, "version": self.version,
                "endpoint": self.endpoint, "options": [list(kv) for kv in self.options]}

    @classmethod
    def from_dict(cls, d: dict) -> "TargetIdentity":
        return cls(d["kind"], d["model"], d["version"], d.get("endpoint", "local"),
                   tuple(tuple(kv) for kv in d.get("options", ())))

    @property
    def key(self) -> str:
        return "t-" + hashlib.sha256(_canon(self.to_dict()).encode()).hexdigest()[:16]

    def __str__(self) -> str:
        return f"{self.kind}:{self.model}@{self.version} ({self.endpoint})"


def weights_fingerprint(path: str, sample_bytes: int = 1 << 20) -> str:
    """A cheap content fingerprint of a weights directory: names, sizes, and the first and last
    ``sample_bytes`` of every file (config, tokenizer and safetensors shards)."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"weights_fingerprint: {path} is not a directory")
    h = hashlib.sha256()
    for name in sorted(os.listdir(path)):
        p = os.path.join(path, name)
        if not os.path.isfile(p) or name.startswith("."):
            continue
        size = os.path.getsize(p)
        h.update(f"{name}\0{size}\0".encode())
        with open(p, "rb") as f:
            h.update(f.read(sample_bytes))
            if size > 2 * sample_bytes:
                f.seek(size - sample_bytes)
                h.update(f.read(sample_bytes))
    return "w-" + h.hexdigest()[:16]


def _refuse(identity: TargetIdentity, method: str):
    def refuse(*_a, **_k):
        raise FrozenTargetError(
            f"{method}: the Harness-R1 target {identity} is frozen; only the engineer's "
            "parameters train. Give the learner the ENGINEER's engine, not the target's.")
    refuse.__name__ = method
    return refuse


class FrozenTarget(RolloutEngine):
    """A rollout engine whose weights cannot change (see the module docstring).

    ``check_result_version``: also require every reply's ``weight_version`` to equal the pinned
    one (set for servers that report the version they served with).
    """

    def __init__(self, engine: RolloutEngine, identity: TargetIdentity, *,
                 spec: Optional["TargetSpec"] = None, check_result_version: bool = False,
                 owns_engine: bool = True, pinned_version: Optional[int] = None):
        if not isinstance(engine, RolloutEngine):
            raise TypeError(f"FrozenTarget: engine must be a RolloutEngine, got "
                            f"{type(engine).__name__}")
        if isinstance(engine, FrozenTarget):
            raise TypeError("FrozenTarget: the engine is already a FrozenTarget")
        self.engine = engine
        self.identity = identity
        self.spec = spec
        self.check_result_version = check_result_version
        self.owns_engine = owns_engine
        self._engine_version = int(engine.weight_version)
        self._pinned = self._engine_version if pinned_version is None else int(pinned_version)
        self.requests = 0
        for m in WEIGHT_UPDATE_METHODS:      # every update entry point refuses, present or not
            try:
                setattr(engine, m, _refuse(identity, f"{type(engine).__name__}.{m}"))
            except AttributeError:           # __slots__ / read-only: nothing can be set there either
                if callable(getattr(engine, m, None)):
                    raise

    # -- the refused surface ---------------------------------------------------------------
    def update_weights(self, *a, **k):
        _refuse(self.identity, "FrozenTarget.update_weights")()

    def update_weights_from_disk(self, *a, **k):
        _refuse(self.identity, "FrozenTarget.update_weights_from_disk")()

    def sync_model(self, *a, **k):
        _refuse(self.identity, "FrozenTarget.sync_model")()

    # -- RolloutEngine ---------------------------------------------------------------------
    @property
    def weight_version(self) -> int:
        return self._pinned

    @property
    def key(self) -> str:
        return self.identity.key

    def _check_version(self, got: int, want: int, what: str) -> None:
        if int(got) != want:
            raise FrozenTargetError(
                f"target {self.identity}: {what} is {got}, but the target was pinned at version "
                f"{want}; its weights changed, so cached baselines no longer apply. Serve the "
                "frozen weights again (or build a new target, which gets a new identity).")

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        self._check_version(self.engine.weight_version, self._engine_version,
                            "the engine's weight version")
        self.requests += 1
        res = await self.engine.generate(request)
        if self.check_result_version:
            self._check_version(res.weight_version, self._pinned,
                                "the version the server replied with")
        return res

    async def end_episode(self, episode_id: str) -> None:
        await self.engine.end_episode(episode_id)

    def usage(self) -> dict:
        """Requests served, plus the endpoint's token/cost accounting when it has one."""
        out: dict = {"requests": self.requests}
        client = getattr(self.engine, "client", None)
        if client is not None and hasattr(client, "usage_summary"):
            out["usage"] = client.usage_summary()
        return out

    def close(self) -> None:
        if self.owns_engine and callable(getattr(self.engine, "close", None)):
            self.engine.close()

    def __repr__(self) -> str:
        return f"FrozenTarget({self.identity})"


# ------------------------------------------------------------------------------------------
# The serialisable recipe
# ------------------------------------------------------------------------------------------
# Options that change what the target does (they go into the identity); the rest (caches,
# concurrency, credentials' variable names, prices) only change how it is reached.
BEHAVIOUR_OPTIONS = {
    "jax": ("dtype", "max_len", "tokenizer_path"),
    "sglang": (),
    "chat": ("tool_mode", "extra_body", "tokenizer_path"),
    "factory": ("kwargs",),
}
KNOWN_OPTIONS = {
    "jax": ("dtype", "max_len", "tokenizer_path", "max_slots", "decode_steps", "seed",
            "prefill_buckets"),
    "sglang": ("max_concurrency", "timeout_s", "max_retries"),
    "chat": ("tool_mode", "extra_body", "tokenizer_path", "api_key_env", "cache_dir",
             "timeout_s", "max_retries", "max_concurrency", "requests_per_minute",
             "price_input_per_mtok", "price_output_per_mtok", "supports_seed"),
    "factory": ("kwargs",),
}


@dataclasses.dataclass(frozen=True)
class TargetSpec:
    """How to build a frozen target (JSON-serialisable; rebuilt in worker processes).

    kind: one of ``KINDS``. model: the HF weights directory (jax), the served model name
    (sglang, chat) or a label (factory). urls: server base URLs (sglang) or the chat endpoint's
    base URL (chat, one). version: the weights version; ``""`` derives it (jax: a fingerprint of
    the weights directory; sglang: the server's ``weight_version``; chat: ``"api"``, set it when
    the provider pins model snapshots). factory: ``"module:function"`` returning a
    ``RolloutEngine`` (kind ``factory``). options: kind-specific, ``KNOWN_OPTIONS``.
    """

    kind: str
    model: str = ""
    urls: tuple = ()
    version: str = ""
    factory: str = ""
    options: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "urls", tuple(self.urls))
        object.__setattr__(self, "options", dict(self.options or {}))
        self.validate()

    def validate(self) -> None:
        def bad(field: str, msg: str):
            raise ValueError(f"TargetSpec.{field}: {msg}")

        if self.kind not in KINDS:
            bad("kind", f"{self.kind!r} is not one of {KINDS}")
        unknown = sorted(set(self.options) - set(KNOWN_OPTIONS[self.kind]))
        if unknown:
            bad("options", f"unknown option(s) {unknown} for kind {self.kind!r}; known: "
                           f"{sorted(KNOWN_OPTIONS[self.kind])}")
        for u in self.urls:
            if not isinstance(u, str) or not u.startswith(("http://", "https://")):
                bad("urls", f"{u!r} must start with http:// or https://")
        if self.kind == "jax" and not self.model:
            bad("model", "kind 'jax' needs the HF weights directory (qwen3_5.save_hf writes one)")
        if self.kind == "sglang" and not self.urls:
            bad("urls", "kind 'sglang' needs at least one server URL, e.g. http://host:30000")
        if self.kind == "chat":
            if len(self.urls) != 1:
                bad("urls", "kind 'chat' needs exactly one base URL, e.g. "
                            "https://api.openai.com/v1")
            if not self.model:
                bad("model", "kind 'chat' needs the model name the endpoint serves")
            mode = self.options.get("tool_mode", "structured")
            if mode not in TOOL_MODES:
                bad("options.tool_mode", f"{mode!r} is not one of {TOOL_MODES}")
        if self.kind == "factory" and ":" not in self.factory:
            bad("factory", "kind 'factory' needs 'package.module:function' returning a "
                           "RolloutEngine")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "model": self.model, "urls": list(self.urls),
                "version": self.version, "factory": self.factory, "options": dict(self.options)}

    @classmethod
    def from_dict(cls, d: dict) -> "TargetSpec":
        if not isinstance(d, dict):
            raise ValueError(f"TargetSpec.from_dict: expected a mapping, got {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"TargetSpec: unknown field(s) {unknown}; known: {sorted(known)}")
        if "kind" not in d:
            raise ValueError(f"TargetSpec.kind: required, one of {KINDS}")
        return cls(**d)

    def _options_identity(self) -> tuple:
        keep = BEHAVIOUR_OPTIONS[self.kind]
        return tuple((k, _canon(self.options[k])) for k in sorted(self.options) if k in keep)

    def identity(self, version: Optional[str] = None) -> TargetIdentity:
        """The identity (``version`` overrides the derived one, e.g. after probing a server)."""
        v = version or self.version
        if not v:
            if self.kind == "jax":
                v = weights_fingerprint(self.model)
            elif self.kind == "chat":
                v = "api"
            else:
                v = "unversioned"
        endpoint = ",".join(self.urls) if self.urls else ("local" if self.kind != "factory"
                                                          else self.factory)
        return TargetIdentity(self.kind, self.model or self.factory, str(v), endpoint,
                              self._options_identity())

    def build(self, tokenizer=None) -> FrozenTarget:
        """Builds the engine and wraps it (probes SGLang servers for their version)."""
        return _BUILDERS[self.kind](self, tokenizer)


def _build_jax(spec: TargetSpec, tokenizer) -> FrozenTarget:
    if not os.path.isdir(spec.model):
        raise FileNotFoundError(f"TargetSpec.model: no weights directory at {spec.model}; "
                                "export the target with qwen3_5.save_hf(model, dir) first")
    o = spec.options
    dtype = o.get("dtype", "float32")
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"TargetSpec.options.dtype: {dtype!r}; use 'float32' or 'bfloat16'")
    if tokenizer is None:
        tokenizer = load_tokenizer(o.get("tokenizer_path") or spec.model)
    model = qwen3_5.load_hf(spec.model, dtype=dtype)
    stops = [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    engine = JaxEngine(model, max_slots=int(o.get("max_slots", 8)),
                       max_len=int(o.get("max_len", 4096)), tokenizer=tokenizer,
                       decode_steps=int(o.get("decode_steps", 8)), seed=int(o.get("seed", 0)),
                       prefill_buckets=tuple(o.get("prefill_buckets", (16, 64, 256))),
                       eos_token_ids=[s for s in stops if s is not None],
                       cache_dtype=jnp.bfloat16 if dtype == "bfloat16" else jnp.float32)
    return FrozenTarget(engine, spec.identity(), spec=spec)


def _build_sglang(spec: TargetSpec, tokenizer) -> FrozenTarget:
    o = spec.options
    client = SGLangClient(list(spec.urls), max_concurrency=int(o.get("max_concurrency", 64)),
                          timeout_s=float(o.get("timeout_s", 600.0)),
                          max_retries=int(o.get("max_retries", 3)))
    version = spec.version
    served = spec.model
    if not version or not served:
        info = _run_sync(client.model_info())
        version = version or str(info.get("weight_version") or "unversioned")
        served = served or str(info.get("served_model_name") or info.get("model_path") or "")
    numeric = str(version).lstrip("-").isdigit()
    spec_v = dataclasses.replace(spec, model=served, version=str(version))
    return FrozenTarget(client, spec_v.identity(), spec=spec_v, check_result_version=numeric,
                        pinned_version=int(version) if numeric else None)


def _build_chat(spec: TargetSpec, tokenizer) -> FrozenTarget:
    o = spec.options
    if tokenizer is None:
        tokenizer = load_tokenizer(o.get("tokenizer_path"))
    cfg = ChatClientConfig(
        base_url=spec.urls[0], model=spec.model, api_key_env=o.get("api_key_env"),
        cache_dir=o.get("cache_dir"), timeout_s=float(o.get("timeout_s", 120.0)),
        max_retries=int(o.get("max_retries", 4)),
        requests_per_minute=float(o.get("requests_per_minute", 0.0)),
        price_input_per_mtok=float(o.get("price_input_per_mtok", 0.0)),
        price_output_per_mtok=float(o.get("price_output_per_mtok", 0.0)),
        supports_seed=bool(o.get("supports_seed", True)),
        extra_body=tuple(sorted((o.get("extra_body") or {}).items())))
    engine = ChatEngine(OpenAIChatClient(cfg), tokenizer,
                        tool_mode=o.get("tool_mode", "structured"),
                        max_concurrency=int(o.get("max_concurrency", 16)))
    return FrozenTarget(engine, spec.identity(), spec=spec)


def _build_factory(spec: TargetSpec, tokenizer) -> FrozenTarget:
    mod_name, _, fn_name = spec.factory.partition(":")
    try:
        fn = getattr(importlib.import_module(mod_name), fn_name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"TargetSpec.factory: cannot import {spec.factory!r} ({e})") from e
    kwargs = dict(spec.options.get("kwargs") or {})
    engine = fn(tokenizer=tokenizer, **kwargs)
    if not isinstance(engine, RolloutEngine):
        raise TypeError(f"TargetSpec.factory: {spec.factory} returned "
                        f"{type(engine).__name__}, not a RolloutEngine")
    return FrozenTarget(engine, spec.identity(), spec=spec)


_BUILDERS = {"jax": _build_jax, "sglang": _build_sglang, "chat": _build_chat,
             "factory": _build_factory}


def _run_sync(coro):
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    raise RuntimeError("this call blocks; inside a running event loop give TargetSpec.version "
                       "and TargetSpec.model explicitly so nothing needs probing")


def frozen(engine: RolloutEngine, *, model: str, version: str, kind: str = "factory",
           endpoint: str = "local", options: Optional[dict] = None,
           check_result_version: bool = False) -> FrozenTarget:
    """Freezes an engine built elsewhere (an in-memory model, a test double). ``model`` and
    ``version`` must name it uniquely: they key every cache."""
    if not model or not version:
        raise ValueError("frozen(): give model= and version= (they are the target's identity "
                         "in every cache key)")
    opts = tuple((k, _canon(v)) for k, v in sorted((options or {}).items()))
    return FrozenTarget(engine, TargetIdentity(kind, model, str(version), endpoint, opts),
                        check_result_version=check_result_version, owns_engine=False)


def as_target(target: Any, tokenizer=None) -> FrozenTarget:
    """A ``FrozenTarget`` from a target, a ``TargetSpec`` or its dict."""
    if isinstance(target, FrozenTarget):
        return target
    if isinstance(target, dict):
        target = TargetSpec.from_dict(target)
    if isinstance(target, TargetSpec):
        return target.build(tokenizer)
    if isinstance(target, RolloutEngine):
        raise TypeError("a bare RolloutEngine has no identity; wrap it with "
                        "harness_r1.frozen(engine, model=..., version=...) or describe it with a "
                        "TargetSpec")
    raise TypeError(f"target must be a FrozenTarget or TargetSpec, got {type(target).__name__}")


# ------------------------------------------------------------------------------------------
# OpenAI-compatible chat endpoints as a RolloutEngine
# ------------------------------------------------------------------------------------------
TOOL_MODES = ("structured", "text")


def parse_chatml(text: str) -> tuple[list[dict], list[dict], bool]:
    """The executor's rendered context (Qwen3.5 ChatML) as ``(messages, tools, thinking)``.

    ``messages`` are OpenAI chat messages (the trailing generation prompt dropped); ``tools``
    the JSON tool specs of a ``# Tools`` system block (removed from the system text);
    ``thinking`` whether the generation prompt opened a ``<think>`` block to continue. Assistant
    tool calls become structured ``tool_calls`` (ids ``call_<turn>_<j>``) and the next user
    turn's ``<tool_response>`` blocks become ``tool`` messages answering them.
    """
    parts = text.split(chat.IM_START)
    if parts[0].strip():
        raise ValueError("parse_chatml: text before the first <|im_start|>")
    turns = []
    for p in parts[1:]:
        role, _, body = p.partition("\n")
        closed = chat.IM_END in body
        body = body.split(chat.IM_END)[0]
        turns.append((role.strip(), body, closed))
    if not turns or turns[-1][0] != "assistant" or turns[-1][2]:
        raise ValueError("parse_chatml: the context must end with an open assistant turn (the "
                         "generation prompt)")
    gen = turns.pop()[1]
    thinking = gen.strip() == chat.THINK_OPEN
    tools: list[dict] = []
    messages: list[dict] = []
    pending_ids: list[str] = []
    for n, (role, body, _) in enumerate(turns):
        if role == "system" and body.startswith(chat.TOOLS_HEADER):
            block, _, rest = body[len(chat.TOOLS_HEADER):].partition("</tools>")
            tools = [json.loads(line) for line in block.strip().splitlines() if line.strip()]
            rest = rest[len(chat.TOOLS_INSTRUCTIONS):] if rest.startswith(
                chat.TOOLS_INSTRUCTIONS) else rest
            body = rest.strip()
            if body:
                messages.append({"role": "system", "content": body})
            continue
        if role == "assistant":
            _, content = chat.split_thinking(body)
            msg: dict = {"role": "assistant", "content": content.strip()}
            pending_ids = []
            if chat.TOOL_CALL_OPEN in content:
                visible, calls, errs = chat.parse_tool_calls(content, tools=tools or None)
                if calls and not errs:
                    msg["content"] = visible.strip()
                    msg["tool_calls"] = []
                    for j, c in enumerate(calls):
                        cid = f"call_{n}_{j}"
                        pending_ids.append(cid)
                        msg["tool_calls"].append({"id": cid, "type": "function", "function": {
                            "name": c.name, "arguments": json.dumps(c.arguments,
                                                                    ensure_ascii=False)}})
            messages.append(msg)
            continue
        stripped = body.strip()
        if role == "user" and pending_ids and stripped.startswith(chat.TOOL_RESPONSE_OPEN):
            blocks = [b.split(chat.TOOL_RESPONSE_CLOSE)[0].strip()
                      for b in stripped.split(chat.TOOL_RESPONSE_OPEN)[1:]]
            # one tool message per call; extra harness notes join the last one
            while len(blocks) < len(pending_ids):
                blocks.append("(no output)")
            if len(blocks) > len(pending_ids):
                blocks = blocks[:len(pending_ids) - 1] + [
                    "\n".join(blocks[len(pending_ids) - 1:])]
            for cid, b in zip(pending_ids, blocks):
                messages.append({"role": "tool", "tool_call_id": cid, "content": b})
            pending_ids = []
            continue
        pending_ids = []
        messages.append({"role": role, "content": stripped})
    return messages, tools, thinking


def reply_text(content: str, tool_calls: Sequence[dict], reasoning: str = "",
               thinking: bool = False) -> str:
    """An endpoint's reply in the Qwen3.5 text the executor parses (tool calls as XML)."""
    parts = []
    for c in tool_calls:
        args = c.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                args = {"arguments": args}
        if not isinstance(args, dict):
            args = {"arguments": args}
        parts.append(chat.render_tool_call(str(c.get("name") or ""), args))
    body = (content or "").strip()
    if parts:
        body = (body + "\n\n" if body else "") + "\n".join(parts)
    if thinking:
        body = (reasoning or "").strip() + "\n" + chat.THINK_CLOSE + "\n\n" + body
    return body


class ChatEngine(RolloutEngine):
    """A ``RolloutEngine`` over an OpenAI-compatible chat endpoint (API target models).

    Each request's token context is decoded, parsed back into chat messages (``parse_chatml``)
    and sent through the cached, costed ``OpenAIChatClient`` with the request's temperature,
    top-p, max tokens and seed; the reply is re-encoded with the tokenizer and closed with
    ``<|im_end|>``. Log-probabilities are not available from chat APIs: they are returned as
    0.0 (targets are frozen and never trained on, so nothing reads them).

    ``tool_mode``: ``"structured"`` sends the tool specs as the API's ``tools`` and converts
    structured ``tool_calls`` back to the Qwen XML the executor parses (the published warning:
    targets must use structured tool calls); ``"text"`` sends the rendered text as is.
    Responses are cached only when they are reproducible from the request: a seeded request
    (with an endpoint that honours seeds) or greedy decoding; so a paired rerun of an unchanged
    context replays the baseline's reply exactly.
    """

    def __init__(self, client, tokenizer, *, tool_mode: str = "structured",
                 max_concurrency: int = 16, role: str = "target"):
        if tool_mode not in TOOL_MODES:
            raise ValueError(f"ChatEngine.tool_mode: {tool_mode!r} is not one of {TOOL_MODES}")
        if max_concurrency < 1:
            raise ValueError("ChatEngine.max_concurrency must be >= 1")
        self.client = client
        self.tok = tokenizer
        self.tool_mode = tool_mode
        self.role = role
        self.max_concurrency = int(max_concurrency)
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self._sem: Optional[asyncio.Semaphore] = None
        self._sem_loop = None

    @property
    def weight_version(self) -> int:
        return 0

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._sem is None or self._sem_loop is not loop:
            self._sem, self._sem_loop = asyncio.Semaphore(self.max_concurrency), loop
        return self._sem

    def request_body(self, request: GenerateRequest) -> tuple[list[dict], dict, bool]:
        text = self.tok.decode(list(request.input_ids), skip_special_tokens=False)
        messages, tools, thinking = parse_chatml(text)
        if self.tool_mode == "text":
            body = text.split(chat.IM_START)
            messages = []
            for p in body[1:-1]:
                role, _, rest = p.partition("\n")
                messages.append({"role": role.strip(),
                                 "content": rest.split(chat.IM_END)[0].strip()})
            tools = []
        p = request.params
        kw: dict = {"temperature": p.temperature, "top_p": p.top_p,
                    "max_tokens": p.max_new_tokens}
        if p.seed is not None:
            kw["seed"] = p.seed
        if tools:
            kw["tools"] = tools
        return messages, kw, thinking

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        messages, kw, thinking = self.request_body(request)
        p = request.params
        cacheable = p.temperature == 0 or (p.seed is not None and
                                           self.client.config.supports_seed)
        async with self._semaphore():
            resp = await asyncio.to_thread(self.client.chat, messages, role=self.role,
                                           use_cache=cacheable, **kw)
        reasoning = (resp.raw.get("choices", [{}])[0].get("message") or {}).get(
            "reasoning_content") or ""
        text = reply_text(resp.content, resp.tool_calls, reasoning, thinking)
        ids = list(self.tok.encode(text, add_special_tokens=False))
        finish = "length" if resp.finish_reason == "length" else "stop"
        ids = ids[:max(1, p.max_new_tokens - 1)]
        if finish == "stop":
            ids.append(self.im_end)
        return GenerateResult(request_id=request.request_id, token_ids=ids,
                              logprobs=[0.0] * len(ids), finish_reason=finish,
                              weight_version=0, prompt_tokens=len(request.input_ids))

    def close(self) -> None:
        return None
