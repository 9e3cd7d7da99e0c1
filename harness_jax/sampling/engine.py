"""Embedded JAX rollout engine: continuous batching over the model's generation caches.

Why this shape:
  * a fixed number of cache rows ("slots"); a request takes a free slot, a finished request
    frees it for a waiting one (continuous batching);
  * every model call is ``model.extend(tokens_BT, cache, num_new_B)``: prefill, chunked prefill,
    decode and multi-turn continuation are the same call with different ``num_new_B``, so the
    compiled shapes are bounded by a few prefill buckets plus one multi-step decode program;
  * decode runs ``decode_steps`` tokens per host round trip (a ``lax.scan``), stopping rows on
    device at stop ids / budget so the cache never holds tokens past the end of a request;
  * a finished request leaves its state in the slot: a later request whose ``input_ids`` start
    with exactly the tokens that slot has consumed continues from there (episode continuation,
    an exact-prefix cache of end states; the GDN recurrent state cannot be rolled back, so only
    exact extensions are reused); ``episode_id`` pins an episode to its slot;
  * weights live as an ``nnx.State`` on device; ``update_weights`` swaps the reference between
    steps (no host copy) and bumps the version; every generated token records its version.

A scheduler thread runs the steps; ``submit`` is thread-safe and returns a
``concurrent.futures.Future``; ``generate`` (async) and ``generate_batch`` (sync) wrap it.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import logging
import queue
import threading
import time
import uuid
from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from harness_jax.sampling.sampler import sample_tokens
from harness_jax.sampling.types import (FINISH_ABORT, FINISH_LENGTH, FINISH_STOP, GenerateRequest,
                                        GenerateResult, RolloutEngine, SamplingParams, StreamChunk)

log = logging.getLogger(__name__)

MAX_DEVICE_STOP_IDS = 8   # stop ids checked on device per row; more are checked on the host


class EngineClosedError(RuntimeError):
    pass


# ---------------------------------------------------------------------------------------------
# jitted programs (pure functions of graphdef/state/cache)

def _extend_and_sample(graphdef, state, cache, tokens_BT, num_new_B, temp_B, top_p_B, top_k_B,
                       min_p_B, seed_B, step_B):
    """One extend call; samples from the logits at each row's last new position."""
    model = nnx.merge(graphdef, state)
    hidden_BTD, cache = model.extend_hidden(tokens_BT, cache, num_new_B)
    last_B = jnp.maximum(num_new_B - 1, 0)
    # project only each row's last new position: no [B, T, V] prefill logits
    hidden_BD = jnp.take_along_axis(hidden_BTD, last_B[:, None, None], axis=1)[:, 0]
    logits_BV = model.lm_logits(hidden_BD)
    tok_B, lp_B = sample_tokens(logits_BV, temp_B, top_p_B, top_k_B, min_p_B, seed_B, step_B)
    return tok_B, lp_B, cache


def _decode_loop(graphdef, n_steps, state, cache, tok_B, active_B, budget_B, stop_BS, temp_B,
                 top_p_B, top_k_B, min_p_B, seed_B, step0_B):
    """``n_steps`` decode steps; a row stops (feeds nothing more) after a stop id or its budget."""
    model = nnx.merge(graphdef, state)

    def body(carry, j):
        cache, tok_B, active_B, budget_B = carry
        logits_BTV, cache = model.extend(tok_B[:, None], cache, active_B.astype(jnp.int32))
        new_B, lp_B = sample_tokens(logits_BTV[:, 0], temp_B, top_p_B, top_k_B, min_p_B, seed_B,
                                    step0_B + j)
        emitted_B = active_B
        budget_B = budget_B - active_B.astype(jnp.int32)
        hit_B = jnp.any(new_B[:, None] == stop_BS, axis=-1)
        active_B = active_B & ~hit_B & (budget_B > 0)
        tok_B = jnp.where(emitted_B, new_B, tok_B)
        return (cache, tok_B, active_B, budget_B), (new_B, lp_B, emitted_B)

    (cache, _, _, _), (tok_NB, lp_NB, emitted_NB) = jax.lax.scan(
        body, (cache, tok_B, active_B, budget_B), jnp.arange(n_steps, dtype=jnp.int32))
    return tok_NB, lp_NB, emitted_NB, cache


# ---------------------------------------------------------------------------------------------
# host-side bookkeeping

@dataclasses.dataclass
class _Active:
    request: GenerateRequest
    future: concurrent.futures.Future
    seed: int
    budget: int                      # tokens this request may still generate
    stop_ids: frozenset
    pending: list = dataclasses.field(default_factory=list)   # tokens to feed before next sample
    out_tokens: list = dataclasses.field(default_factory=list)
    out_logprobs: list = dataclasses.field(default_factory=list)
    out_versions: list = dataclasses.field(default_factory=list)
    cached_tokens: int = 0
    abort_message: Optional[str] = None
    stop_reason: Any = None
    finish: Optional[str] = None
    on_chunk: Optional[Callable[[StreamChunk], None]] = None   # streaming callback


@dataclasses.dataclass
class _Slot:
    idx: int
    active: Optional[_Active] = None
    fed: list = dataclasses.field(default_factory=list)   # tokens whose state the row holds
    valid: bool = True              # False: row holds tokens not mirrored in `fed`; reset first
    episode_id: Optional[str] = None
    last_used: float = 0.0
    needs_reset: bool = False


def _bucket(n: int, buckets: Sequence[int]) -> int:
    for b in buckets:
        if n <= b:
            return b
    return buckets[-1]


class ChunkStream:
    """Iterator over one streamed request's ``StreamChunk``s (``JaxEngine.stream``)."""

    def __init__(self, engine: "JaxEngine", request: GenerateRequest, timeout: Optional[float]):
        self._engine, self._rid, self._timeout = engine, request.request_id, timeout
        self._q: queue.Queue = queue.Queue()
        self._fut = engine.submit(request, on_chunk=self._q.put)
        # a failed step / closed engine fails the future without a final chunk: wake the reader
        self._fut.add_done_callback(lambda f: self._q.put(None) if f.exception() is not None else None)
        self._done = False

    def __iter__(self) -> "ChunkStream":
        return self

    def __next__(self) -> StreamChunk:
        if self._done:
            raise StopIteration
        chunk = self._q.get(timeout=self._timeout)
        if chunk is None:
            self._done = True
            raise self._fut.exception()
        self._done = chunk.result is not None
        return chunk

    def close(self) -> None:
        """Aborts the request unless its last chunk was read."""
        if not self._done:
            self._done = True
            self._engine.abort(self._rid, message="Abort by closed stream")

    def __enter__(self) -> "ChunkStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class JaxEngine(RolloutEngine):
    """Continuous-batching generation engine over a Qwen3.5-style model with ``extend`` caches.

    Args:
      model: an nnx module with ``extend(input_ids_BT, cache, num_new_B)`` and ``.config``.
      max_slots: cache rows (concurrent requests / cached episodes).
      max_len: tokens per row (prompt + generated).
      tokenizer: optional HF-style tokenizer with ``decode``; needed for stop strings.
      prefill_buckets: allowed prefill widths; the largest is the prefill chunk.
      decode_steps: decode tokens per host round trip.
      eos_token_ids: ids that end a request unless ``ignore_eos``; default from the config.
      seed: seeds the engine-chosen per-request seeds (requests with ``seed=None``).
      cache_dtype: dtype of the KV and conv caches; the Gated DeltaNet recurrent state is always
        fp32 (``qwen3_5.init_cache``; the model refuses anything else).
      init_cache_fn / reset_rows_fn: cache API (defaults: ``qwen3_5.init_cache`` /
        ``qwen3_5.reset_cache_rows``).
      mesh / rules: shard the cache on this mesh by its logical axes (``cache_axes_fn``,
        default ``qwen3_5.cache_logical_axes``) and ``rules`` (default
        ``sharding.SAMPLE_RULES``). Default: the mesh of the parameters when they are
        ``NamedSharding``-placed (e.g. ``load_hf(path, mesh=...)``), else one device.
      weight_layout: ``"hf"`` serves the model's own arrays (``[out, in]`` weights, no copy);
        ``"in_out"`` serves a transposed copy made by ``model.decode_layout`` (XLA:CPU decodes
        ~1.3x faster at batch 8; costs a second copy of the weights, refreshed on device by
        ``update_weights``); ``"auto"`` (default): ``"in_out"`` on the CPU backend when the
        model offers ``decode_layout``, else ``"hf"``.
    """

    def __init__(self, model, max_slots: int = 8, max_len: int = 512, *, tokenizer=None,
                 prefill_buckets: Sequence[int] = (16, 64, 256), decode_steps: int = 8,
                 eos_token_ids: Optional[Sequence[int]] = None, seed: int = 0,
                 weight_version: int = 0, cache_dtype=jnp.float32,
                 init_cache_fn: Optional[Callable] = None,
                 reset_rows_fn: Optional[Callable] = None, mesh=None, rules=None,
                 cache_axes_fn: Optional[Callable] = None, weight_layout: str = "auto"):
        if max_slots < 1:
            raise ValueError(f"JaxEngine.max_slots must be >= 1, got {max_slots}")
        if max_len < 2:
            raise ValueError(f"JaxEngine.max_len must be >= 2, got {max_len}")
        if decode_steps < 1:
            raise ValueError(f"JaxEngine.decode_steps must be >= 1, got {decode_steps}")
        buckets = sorted(set(int(b) for b in prefill_buckets))
        if not buckets or buckets[0] < 1:
            raise ValueError(f"JaxEngine.prefill_buckets must be positive ints, got {prefill_buckets}")
        self.config = getattr(model, "config", None) or getattr(model, "cfg", None)
        if init_cache_fn is None or reset_rows_fn is None or cache_axes_fn is None:
            from harness_jax.models import qwen3_5
            init_cache_fn = init_cache_fn or qwen3_5.init_cache
            reset_rows_fn = reset_rows_fn or qwen3_5.reset_cache_rows
            cache_axes_fn = (cache_axes_fn or getattr(qwen3_5, "cache_logical_axes", None)
                             or getattr(getattr(qwen3_5, "cache", None), "cache_logical_axes", None))
        self._cache_axes_fn = cache_axes_fn
        self._rules = rules
        if self.config is None:
            raise ValueError("JaxEngine: model has no .config (the model config the cache is built from)")
        self.max_slots = int(max_slots)
        self.max_len = int(max_len)
        self.tokenizer = tokenizer
        self.prefill_buckets = tuple(b for b in buckets if b <= max_len) or (max_len,)
        self.decode_steps = int(decode_steps)
        if eos_token_ids is None:
            eos = getattr(self.config, "eos_token_id", None)
            eos_token_ids = () if eos is None else ((eos,) if isinstance(eos, int) else tuple(eos))
        self.eos_token_ids = tuple(int(e) for e in eos_token_ids)
        self._cache_dtype = cache_dtype
        self._init_cache_fn = init_cache_fn
        if weight_layout not in ("auto", "hf", "in_out"):
            raise ValueError(f"JaxEngine.weight_layout={weight_layout!r}: use 'auto', 'hf' or 'in_out'")
        to_decode = getattr(model, "decode_layout", None)
        if weight_layout == "auto":
            weight_layout = "in_out" if to_decode is not None and jax.default_backend() == "cpu" else "hf"
        if weight_layout == "in_out" and to_decode is None:
            raise ValueError(f"JaxEngine.weight_layout='in_out': {type(model).__name__} has no "
                             "decode_layout(); use weight_layout='hf'")
        self.weight_layout = weight_layout
        self._graphdef, self._state = nnx.split(model)
        self._learner_treedef = jax.tree_util.tree_structure(self._state)   # what update_weights takes
        self._convert = None
        if weight_layout == "in_out":
            self._graphdef, self._state, self._convert = to_decode()
        if mesh is None:
            leaves = jax.tree_util.tree_leaves(self._state)
            sh = getattr(leaves[0], "sharding", None) if leaves else None
            if isinstance(sh, jax.sharding.NamedSharding) and sh.mesh.size > 1:
                mesh = sh.mesh
        self.mesh = mesh
        self._version = int(weight_version)
        self._rng = np.random.default_rng(seed)

        self._extend = jax.jit(functools.partial(_extend_and_sample, self._graphdef),
                               donate_argnums=(1,))
        self._decode = jax.jit(functools.partial(_decode_loop, self._graphdef, self.decode_steps),
                               donate_argnums=(1,))
        self._reset = jax.jit(reset_rows_fn, donate_argnums=(0,))
        self._cache = self._new_cache()

        self._slots = [_Slot(i) for i in range(self.max_slots)]
        self._waiting: list[_Active] = []
        self._cv = threading.Condition()
        self._paused = False
        self._closed = False
        self._abort_rids: dict[str, str] = {}
        self._abort_all: Optional[str] = None
        self._retract = False
        self._pending_weights = None
        self.stats = {"steps_prefill": 0, "steps_decode": 0, "tokens_generated": 0,
                      "tokens_prefilled": 0, "tokens_reused": 0}
        self._thread = threading.Thread(target=self._loop, name="JaxEngine", daemon=True)
        self._thread.start()

    def _new_cache(self):
        """An empty cache, committed to the parameters' device when they live on one device
        (an uncommitted first cache would make every program compile twice)."""
        cache = self._init_cache_fn(self.config, self.max_slots, self.max_len, dtype=self._cache_dtype)
        if self.mesh is not None and self._cache_axes_fn is not None:
            from harness_jax import sharding as shd
            rules = shd.SAMPLE_RULES if self._rules is None else self._rules
            shardings = jax.tree_util.tree_map(
                lambda ax, a: shd.named_sharding(ax, self.mesh, rules, a.shape),
                self._cache_axes_fn(), cache, is_leaf=lambda x: isinstance(x, tuple))
            return jax.device_put(cache, shardings)
        leaves = jax.tree_util.tree_leaves(self._state)
        devices = leaves[0].sharding.device_set if leaves and hasattr(leaves[0], "sharding") else set()
        if len(devices) == 1:
            cache = jax.device_put(cache, next(iter(devices)))
        return cache

    # -------------------------------------------------------------------------------- API
    @property
    def weight_version(self) -> int:
        return self._version

    @property
    def served_state(self):
        """The parameter state the engine decodes with: the model's own arrays with
        ``weight_layout="hf"``, the [in, out] copy with ``"in_out"``."""
        return self._state

    @property
    def cache_shardings(self):
        """The sharding of every array of the decode cache (a pytree shaped like the cache)."""
        return jax.tree_util.tree_map(lambda a: a.sharding, self._cache)

    def submit(self, request: GenerateRequest,
               on_chunk: Optional[Callable[[StreamChunk], None]] = None) -> concurrent.futures.Future:
        """Queues a request; the future resolves to a ``GenerateResult``.

        ``on_chunk`` (optional) streams it: it is called on the engine's scheduler thread with
        a ``StreamChunk`` after every step that produced tokens for this request, and once more
        with the final ``result``. It must return quickly (hand the chunk to a queue); an
        exception in it is logged and the request goes on unstreamed.
        """
        return self.submit_many([request], on_chunk=None if on_chunk is None else [on_chunk])[0]

    def submit_many(self, requests: Sequence[GenerateRequest],
                    on_chunk: Optional[Sequence[Optional[Callable[[StreamChunk], None]]]] = None
                    ) -> list[concurrent.futures.Future]:
        """Queues several requests atomically (they are admitted together: one prefill step
        instead of one per request when the engine is idle). Validates all before queueing.
        ``on_chunk``: one streaming callback (or None) per request, see ``submit``."""
        if on_chunk is not None and len(on_chunk) != len(requests):
            raise ValueError(f"submit_many: {len(on_chunk)} on_chunk callbacks for {len(requests)} requests")
        acts = [self._prepare(r) for r in requests]
        for act, cb in zip(acts, on_chunk or [None] * len(acts)):
            act.on_chunk = cb
        with self._cv:
            if self._closed:
                raise EngineClosedError("JaxEngine is closed")
            self._waiting.extend(acts)
            self._cv.notify_all()
        return [a.future for a in acts]

    def _prepare(self, request: GenerateRequest) -> _Active:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        ids = [int(t) for t in request.input_ids]
        if not ids:
            raise ValueError(f"request {request.request_id}: input_ids is empty; give at least one token")
        if len(ids) >= self.max_len:
            raise ValueError(f"request {request.request_id}: prompt of {len(ids)} tokens does not fit "
                             f"max_len={self.max_len}; raise JaxEngine(max_len=...) or shorten it")
        vocab = getattr(self.config, "vocab_size", None)
        if vocab is not None and (min(ids) < 0 or max(ids) >= vocab):
            raise ValueError(f"request {request.request_id}: input_ids outside [0, {vocab})")
        p = request.params
        if p.stop and self.tokenizer is None:
            raise ValueError(f"request {request.request_id}: stop strings need a tokenizer; "
                             "pass JaxEngine(tokenizer=...) or use stop_token_ids")
        seed = int(p.seed) if p.seed is not None else int(self._rng.integers(0, 2**31 - 1))
        stop_ids = set(p.stop_token_ids)
        if not p.ignore_eos:
            stop_ids.update(self.eos_token_ids)
        request = dataclasses.replace(request, input_ids=ids)
        return _Active(request=request, future=fut, seed=seed & 0xFFFFFFFF,
                       budget=min(p.max_new_tokens, self.max_len - len(ids)),
                       stop_ids=frozenset(stop_ids))

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        return await asyncio.wrap_future(self.submit(request))

    def stream(self, request: GenerateRequest, timeout: Optional[float] = None) -> "ChunkStream":
        """Submits ``request`` now (bad requests raise here) and returns an iterator of its
        ``StreamChunk``s as the engine produces tokens (one per scheduler step that emitted
        some: up to ``decode_steps`` tokens each); the last chunk carries the ``GenerateResult``.
        ``close()`` (or leaving a ``with`` block) before the end aborts the request.
        ``timeout``: seconds to wait for each chunk (``queue.Empty`` past it; None = forever).
        """
        return ChunkStream(self, request, timeout)

    def generate_sync(self, request: GenerateRequest) -> GenerateResult:
        return self.submit(request).result()

    def generate_batch(self, prompts: Sequence[Sequence[int]], params: SamplingParams = SamplingParams(),
                       episode_ids: Optional[Sequence[Optional[str]]] = None) -> list[GenerateResult]:
        """Synchronous convenience: one request per prompt, results in prompt order.

        With ``params.seed = s``, prompt ``i`` gets seed ``s + i`` (so a group of identical
        prompts still gets distinct samples, reproducibly).
        """
        reqs = []
        tag = uuid.uuid4().hex[:12]
        for i, ids in enumerate(prompts):
            ep = episode_ids[i] if episode_ids is not None else None
            p = params if params.seed is None else dataclasses.replace(params, seed=(params.seed + i) % 2**31)
            reqs.append(GenerateRequest(input_ids=list(ids), params=p, request_id=f"batch-{tag}-{i}",
                                        episode_id=ep))
        return [f.result() for f in self.submit_many(reqs)]

    async def end_episode(self, episode_id: str) -> None:
        self.release_episode(episode_id)

    def release_episode(self, episode_id: str) -> None:
        with self._cv:
            for s in self._slots:
                if s.episode_id == episode_id and s.active is None:
                    s.episode_id, s.valid, s.fed = None, False, []

    def abort(self, request_id: Optional[str] = None, abort_all: bool = False,
              message: str = "aborted by request") -> None:
        """Aborts one request (or all): it returns with its partial tokens, finish 'abort'."""
        with self._cv:
            if abort_all:
                self._abort_all = message
            elif request_id is not None:
                self._abort_rids[str(request_id)] = message
            self._cv.notify_all()

    def pause(self, mode: str = "abort") -> None:
        """SGLang pause modes: 'abort' (return in-flight partials), 'retract' (requeue them and
        free their rows), 'in_place' (freeze them). New requests wait until ``resume``."""
        if mode not in ("abort", "retract", "in_place"):
            raise ValueError(f"pause mode {mode!r}: use 'abort', 'retract' or 'in_place'")
        with self._cv:
            self._paused = True
            if mode == "abort":
                self._abort_all = "Abort by pause_generation"
            elif mode == "retract":
                self._retract = True
            self._cv.notify_all()
        self._wait_applied()

    def resume(self) -> None:
        with self._cv:
            self._paused = False
            self._cv.notify_all()

    @property
    def paused(self) -> bool:
        return self._paused

    def num_running(self) -> int:
        with self._cv:
            return sum(1 for s in self._slots if s.active is not None)

    def num_waiting(self) -> int:
        with self._cv:
            return len(self._waiting)

    def is_idle(self) -> bool:
        with self._cv:
            return not self._waiting and all(s.active is None for s in self._slots)

    def flush_cache(self) -> bool:
        """Drops every cached episode state; refuses (False) while requests run (queued requests
        hold no state, so they do not block it; this lets a sync flush during a pause)."""
        with self._cv:
            if any(s.active is not None for s in self._slots):
                return False
            for s in self._slots:
                s.valid, s.fed, s.episode_id = False, [], None
            return True

    def update_weights(self, new, version: Optional[int] = None, *, in_flight: str = "finish",
                       flush_cache: bool = True) -> int:
        """Installs new parameters (an nnx module or an ``nnx.State`` matching the model).

        Arrays are used as they are with ``weight_layout="hf"`` and transposed on device with
        ``"in_out"``; never copied through the host (pass the learner's own device arrays).
        ``in_flight`` says what happens to running requests:
          * ``"finish"`` (default): they complete on the old weights first; new requests wait
            until the swap (every request is single-version);
          * ``"abort"``: they return at once with their partial tokens (finish 'abort'); the
            caller resumes them (prompt + partial) under the new version;
          * ``"continue"``: swap immediately; they continue on the new weights over a cache
            computed by the old ones (SGLang's in-place mode); ``token_versions`` records it.
        ``flush_cache`` drops episode states computed under older weights. Blocks until the
        swap happened; returns the new version.
        """
        if in_flight not in ("finish", "abort", "continue"):
            raise ValueError(f"update_weights: in_flight={in_flight!r}; use 'finish', 'abort' or 'continue'")
        state = nnx.state(new) if isinstance(new, nnx.Module) else new
        if jax.tree_util.tree_structure(state) != self._learner_treedef:
            raise ValueError("update_weights: parameter tree does not match the engine's model; "
                             "pass the same architecture (nnx module or nnx.state(model))")
        if self._convert is not None:
            state = self._convert(state)   # on-device transpose into the serving layout
        with self._cv:
            new_version = self._version + 1 if version is None else int(version)
            self._pending_weights = (state, new_version, flush_cache, in_flight)
            if in_flight == "abort":
                self._abort_all = "Abort by weight update"
            self._cv.notify_all()
        self._wait_applied()
        return new_version

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._thread.join(timeout=60)

    # -------------------------------------------------------------------------- scheduling
    def _wait_applied(self):
        """Waits until the scheduler has applied pending control commands."""
        if threading.current_thread() is self._thread:
            self._apply_controls()
            return
        with self._cv:
            while (self._pending_weights is not None or self._abort_all is not None or self._retract
                   or self._abort_rids) and not self._closed:
                self._cv.notify_all()
                self._cv.wait(timeout=0.05)

    def _finish(self, slot: Optional[_Slot], act: _Active, reason: str, streamed: Optional[int] = None) -> None:
        """Resolves the request; ``streamed``: tokens already streamed (the final chunk carries
        the rest; default all of them)."""
        act.finish = reason
        res = GenerateResult(
            request_id=act.request.request_id, token_ids=list(act.out_tokens),
            logprobs=[float(x) for x in act.out_logprobs], finish_reason=reason,
            weight_version=act.out_versions[-1] if act.out_versions else self._version,
            token_versions=(list(act.out_versions) if len(set(act.out_versions)) > 1 else None),
            stop_reason=act.stop_reason, prompt_tokens=len(act.request.input_ids),
            cached_tokens=act.cached_tokens, message=act.abort_message or "")
        if slot is not None:
            slot.active = None
            slot.last_used = time.monotonic()
        n0 = len(act.out_tokens) if streamed is None else streamed
        self._stream(act, act.out_tokens[n0:], act.out_logprobs[n0:], act.out_versions[n0:], res)
        if not act.future.done():
            act.future.set_result(res)

    @staticmethod
    def _stream(act: _Active, toks: list, lps: list, versions: list,
                result: Optional[GenerateResult] = None) -> None:
        if act.on_chunk is None or (not toks and result is None):
            return
        try:
            act.on_chunk(StreamChunk(act.request.request_id, list(toks), list(lps), list(versions), result))
        except Exception:   # a broken consumer must not stop the engine
            log.exception("on_chunk callback of %s failed; streaming stopped", act.request.request_id)
            act.on_chunk = None

    def _apply_controls(self) -> None:
        """Runs under the lock, between steps."""
        draining = (self._pending_weights is not None and self._pending_weights[3] == "finish"
                    and not self._paused and any(s.active is not None for s in self._slots))
        if self._pending_weights is not None and not draining:
            state, version, flush, _ = self._pending_weights
            self._state, self._version = state, version
            if flush:
                for s in self._slots:
                    if s.active is None:
                        s.valid, s.fed, s.episode_id = False, [], None
                    else:
                        s.episode_id = None   # mixed-version state: do not continue it later
                        s.needs_reset = True  # reset once the request ends
            self._pending_weights = None
        if self._abort_all is not None:
            msg = self._abort_all
            for act in self._waiting:
                act.abort_message = f"Abort before prefill: {msg}"
                self._finish(None, act, FINISH_ABORT)
            self._waiting = []
            for s in self._slots:
                if s.active is not None:
                    s.active.abort_message = msg
                    self._finish(s, s.active, FINISH_ABORT)
            self._abort_all = None
            self._abort_rids.clear()
        if self._abort_rids:
            keep = []
            for act in self._waiting:
                msg = self._abort_rids.get(act.request.request_id)
                if msg is not None:
                    act.abort_message = f"Abort before prefill: {msg}"
                    self._finish(None, act, FINISH_ABORT)
                else:
                    keep.append(act)
            self._waiting = keep
            for s in self._slots:
                if s.active is not None and s.active.request.request_id in self._abort_rids:
                    s.active.abort_message = self._abort_rids[s.active.request.request_id]
                    self._finish(s, s.active, FINISH_ABORT)
            self._abort_rids.clear()
        if self._retract:
            requeue = []
            for s in self._slots:
                act = s.active
                if act is None:
                    continue
                # recompute from scratch after continue: feed prompt + everything generated
                act.pending = list(act.request.input_ids) + list(act.out_tokens)
                act.cached_tokens = 0
                s.active, s.valid, s.fed, s.episode_id = None, False, [], None
                requeue.append(act)
            self._waiting = requeue + self._waiting
            self._retract = False
        for s in self._slots:
            if s.active is None and s.needs_reset:
                s.valid, s.fed, s.needs_reset = False, [], False
        self._cv.notify_all()

    def _admit(self) -> list[int]:
        """Moves waiting requests into slots; returns the rows that must be reset first."""
        resets = []
        still = []
        for act in self._waiting:
            ids = act.request.input_ids
            resumed = bool(act.pending)   # retracted request: pending already holds its history
            slot, reuse = None, 0
            if not resumed:
                # exact-prefix reuse of a finished row's state; the episode's own row first
                ep = act.request.episode_id
                cands = [s for s in self._slots
                         if s.active is None and s.valid and s.fed and len(s.fed) < len(ids)
                         and ids[:len(s.fed)] == s.fed]
                if cands:
                    best = max(cands, key=lambda s: (ep is not None and s.episode_id == ep, len(s.fed)))
                    slot, reuse = best, len(best.fed)
            if slot is None:
                free = [s for s in self._slots if s.active is None and s.idx not in resets]
                if not free:
                    still.append(act)
                    continue
                # prefer empty rows, then least recently used cached states
                free.sort(key=lambda s: (bool(s.fed) and s.valid, s.episode_id is not None, s.last_used))
                slot = free[0]
                reuse = 0
            if reuse:
                act.pending = list(ids[reuse:])
                act.cached_tokens = reuse
                self.stats["tokens_reused"] += reuse
            else:
                if not resumed:
                    act.pending = list(ids)
                resets.append(slot.idx)
                slot.fed, slot.valid = [], True
            slot.active = act
            slot.episode_id = act.request.episode_id
            slot.last_used = time.monotonic()
        self._waiting = still
        return resets

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._closed:
                    self._apply_controls()
                    has_active = any(s.active is not None for s in self._slots)
                    if not self._paused and (self._waiting or has_active):
                        break
                    self._cv.wait(timeout=0.1)
                if self._closed:
                    self._fail_all(EngineClosedError("JaxEngine closed"))
                    return
                resets = self._admit() if self._pending_weights is None else []
                rows = [s for s in self._slots if s.active is not None]
                state = self._state
                version = self._version
            try:
                if resets:
                    mask = np.zeros((self.max_slots,), dtype=bool)
                    mask[resets] = True
                    self._cache = self._reset(self._cache, jnp.asarray(mask))
                if rows:
                    self._step(rows, state, version)
            except Exception as e:  # keep serving: fail the requests of this step, rebuild cache
                log.exception("JaxEngine step failed")
                with self._cv:
                    for s in self._slots:
                        if s.active is not None and not s.active.future.done():
                            s.active.future.set_exception(
                                RuntimeError(f"JaxEngine step failed: {type(e).__name__}: {e}"))
                        s.active, s.fed, s.valid, s.episode_id = None, [], False, None
                    self._cache = self._new_cache()

    def _fail_all(self, exc: Exception) -> None:
        for act in self._waiting:
            if not act.future.done():
                act.future.set_exception(exc)
        self._waiting = []
        for s in self._slots:
            if s.active is not None and not s.active.future.done():
                s.active.future.set_exception(exc)
            s.active = None

    def _param_arrays(self, rows):
        B = self.max_slots
        temp = np.zeros((B,), np.float32)
        top_p = np.ones((B,), np.float32)
        top_k = np.full((B,), -1, np.int32)
        min_p = np.zeros((B,), np.float32)
        seed = np.zeros((B,), np.uint32)
        step = np.zeros((B,), np.int32)
        for s in rows:
            p = s.active.request.params
            temp[s.idx], top_p[s.idx], top_k[s.idx], min_p[s.idx] = p.temperature, p.top_p, p.top_k, p.min_p
            seed[s.idx] = s.active.seed
            step[s.idx] = len(s.active.out_tokens)
        return temp, top_p, top_k, min_p, seed, step

    def _step(self, rows: list[_Slot], state, version: int) -> None:
        B = self.max_slots
        temp, top_p, top_k, min_p, seed, step = self._param_arrays(rows)
        if any(len(s.active.pending) > 1 for s in rows):
            # prefill / continuation (decode rows ride along with one token)
            chunk = self.prefill_buckets[-1]
            feed = {s.idx: min(len(s.active.pending), chunk) for s in rows}
            T = _bucket(max(feed.values()), self.prefill_buckets)
            tokens = np.zeros((B, T), np.int32)
            num_new = np.zeros((B,), np.int32)
            for s in rows:
                n = feed[s.idx]
                tokens[s.idx, :n] = s.active.pending[:n]
                num_new[s.idx] = n
            tok, lp, self._cache = self._extend(state, self._cache, jnp.asarray(tokens),
                                                jnp.asarray(num_new), temp, top_p, top_k, min_p,
                                                seed, step)
            tok, lp = np.asarray(tok), np.asarray(lp)
            self.stats["steps_prefill"] += 1
            with self._cv:
                for s in rows:
                    act, n = s.active, feed[s.idx]
                    if act is None:
                        continue
                    s.fed.extend(act.pending[:n])
                    self.stats["tokens_prefilled"] += n
                    act.pending = act.pending[n:]
                    if not act.pending:
                        self._emit(s, [int(tok[s.idx])], [float(lp[s.idx])], version)
            return
        # decode: every row has exactly one pending token
        tok0 = np.zeros((B,), np.int32)
        active = np.zeros((B,), bool)
        budget = np.zeros((B,), np.int32)
        stop = np.full((B, MAX_DEVICE_STOP_IDS), -1, np.int32)
        for s in rows:
            act = s.active
            tok0[s.idx] = act.pending[0]
            active[s.idx] = True
            budget[s.idx] = act.budget - len(act.out_tokens)
            ids = sorted(act.stop_ids)[:MAX_DEVICE_STOP_IDS]
            stop[s.idx, :len(ids)] = ids
        tok_NB, lp_NB, em_NB, self._cache = self._decode(
            state, self._cache, jnp.asarray(tok0), jnp.asarray(active), jnp.asarray(budget),
            jnp.asarray(stop), temp, top_p, top_k, min_p, seed, step)
        tok_NB, lp_NB, em_NB = np.asarray(tok_NB), np.asarray(lp_NB), np.asarray(em_NB)
        self.stats["steps_decode"] += 1
        with self._cv:
            for s in rows:
                if s.active is None:
                    continue
                n = int(em_NB[:, s.idx].sum())
                toks = [int(t) for t in tok_NB[:n, s.idx]]
                lps = [float(x) for x in lp_NB[:n, s.idx]]
                self._emit(s, toks, lps, version)

    def _emit(self, s: _Slot, toks: list, lps: list, version: int) -> None:
        """Appends sampled tokens and finishes the request when a stop condition holds.

        Mirrors what the device fed in the step that produced ``toks``: in decode, the pending
        token then all but the last sampled one (prefill already mirrored its chunk).
        """
        act = s.active
        # mirror what the device fed: the pending token (decode) then toks[:-1]
        if act.pending:   # decode path: pending token was fed first
            s.fed.append(act.pending[0])
            s.fed.extend(toks[:-1])
        used = 0
        finished = None
        n0 = len(act.out_tokens)
        for t, l in zip(toks, lps):
            act.out_tokens.append(t)
            act.out_logprobs.append(l)
            act.out_versions.append(version)
            used += 1
            self.stats["tokens_generated"] += 1
            if t in act.stop_ids:
                act.stop_reason, finished = t, FINISH_STOP
            elif act.request.params.stop and self._stop_string_hit(act):
                finished = FINISH_STOP
            elif len(act.out_tokens) >= act.budget:
                finished = FINISH_LENGTH
            if finished:
                break
        if used < len(toks):
            s.valid = False   # the row consumed tokens past the end of this request
        act.pending = [act.out_tokens[-1]] if act.out_tokens else act.pending
        if finished:
            self._finish(s, act, finished, streamed=n0)
        else:
            self._stream(act, act.out_tokens[n0:], act.out_logprobs[n0:], act.out_versions[n0:])

    def _stop_string_hit(self, act: _Active) -> bool:
        stops = act.request.params.stop
        window = max(len(x) for x in stops) + 4
        text = self.tokenizer.decode(act.out_tokens[-window:])
        for x in stops:
            if x in text:
                act.stop_reason = x
                return True
        return False
