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

The pieces: ``scheduler.Scheduler`` (requests, slots, control commands; host only),
``programs`` (the jitted device programs), ``serving.ServingWeights`` (the served layout),
``stream.ChunkStream``. A scheduler thread runs the steps; ``submit`` is thread-safe and returns
a ``concurrent.futures.Future``; ``generate`` (async) and ``generate_batch`` (sync) wrap it.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import logging
import threading
import uuid
from typing import Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from harness_jax.sampling import programs
from harness_jax.sampling.scheduler import EngineClosedError, Scheduler, Slot
from harness_jax.sampling.serving import ServingWeights
from harness_jax.sampling.stream import ChunkStream
from harness_jax.sampling.types import (GenerateRequest, GenerateResult, RolloutEngine,
                                        SamplingParams, StreamChunk)

log = logging.getLogger(__name__)

MAX_DEVICE_STOP_IDS = 8   # stop ids checked on device per row; more are checked on the host

__all__ = ["JaxEngine", "EngineClosedError", "ChunkStream", "MAX_DEVICE_STOP_IDS"]


def _bucket(n: int, buckets: Sequence[int]) -> int:
    for b in buckets:
        if n <= b:
            return b
    return buckets[-1]


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
      weight_layout: ``"hf"`` | ``"in_out"`` | ``"auto"`` (``serving.ServingWeights``).
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
        if self.config is None:
            raise ValueError("JaxEngine: model has no .config (the model config the cache is built from)")
        if init_cache_fn is None or reset_rows_fn is None or cache_axes_fn is None:
            from harness_jax.models import qwen3_5
            init_cache_fn = init_cache_fn or qwen3_5.init_cache
            reset_rows_fn = reset_rows_fn or qwen3_5.reset_cache_rows
            cache_axes_fn = cache_axes_fn or qwen3_5.cache.cache_logical_axes
        self._cache_axes_fn = cache_axes_fn
        self._rules = rules
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
        self._weights = ServingWeights(model, weight_layout, mesh)
        self.weight_layout = self._weights.layout
        self.mesh = self._weights.mesh
        graphdef = self._weights.graphdef
        self._extend = jax.jit(functools.partial(programs.extend_and_sample, graphdef), donate_argnums=(1,))
        self._decode = jax.jit(functools.partial(programs.decode_loop, graphdef, self.decode_steps),
                               donate_argnums=(1,))
        self._reset = jax.jit(reset_rows_fn, donate_argnums=(0,))
        self._cache = self._new_cache()
        self._sched = Scheduler(self.max_slots, self.max_len, vocab_size=getattr(self.config, "vocab_size", None),
                                eos_token_ids=self.eos_token_ids, tokenizer=tokenizer, seed=seed,
                                state=self._weights.state, version=weight_version)
        self.stats = self._sched.stats
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
        devices = self._weights.devices()
        if len(devices) == 1:
            cache = jax.device_put(cache, next(iter(devices)))
        return cache

    # -------------------------------------------------------------------------------- API
    @property
    def weight_version(self) -> int:
        return self._sched.version

    @property
    def served_state(self):
        """The parameter state the engine decodes with: the model's own arrays with
        ``weight_layout="hf"``, the [in, out] copy with ``"in_out"``."""
        return self._sched.state

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
        acts = [self._sched.prepare(r) for r in requests]
        for act, cb in zip(acts, on_chunk or [None] * len(acts)):
            act.on_chunk = cb
        self._sched.enqueue(acts)
        return [a.future for a in acts]

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        return await asyncio.wrap_future(self.submit(request))

    def stream(self, request: GenerateRequest, timeout: Optional[float] = None) -> ChunkStream:
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
        with self._sched.cv:
            self._sched.release_episode(episode_id)

    def abort(self, request_id: Optional[str] = None, abort_all: bool = False,
              message: str = "aborted by request") -> None:
        """Aborts one request (or all): it returns with its partial tokens, finish 'abort'."""
        with self._sched.cv:
            if abort_all:
                self._sched.abort_all = message
            elif request_id is not None:
                self._sched.abort_rids[str(request_id)] = message
            self._sched.cv.notify_all()

    def pause(self, mode: str = "abort") -> None:
        """SGLang pause modes: 'abort' (return in-flight partials), 'retract' (requeue them and
        free their rows), 'in_place' (freeze them). New requests wait until ``resume``."""
        if mode not in ("abort", "retract", "in_place"):
            raise ValueError(f"pause mode {mode!r}: use 'abort', 'retract' or 'in_place'")
        with self._sched.cv:
            self._sched.paused = True
            if mode == "abort":
                self._sched.abort_all = "Abort by pause_generation"
            elif mode == "retract":
                self._sched.retract = True
            self._sched.cv.notify_all()
        self._wait_applied()

    def resume(self) -> None:
        with self._sched.cv:
            self._sched.paused = False
            self._sched.cv.notify_all()

    @property
    def paused(self) -> bool:
        return self._sched.paused

    def num_running(self) -> int:
        with self._sched.cv:
            return len(self._sched.running())

    def num_waiting(self) -> int:
        with self._sched.cv:
            return len(self._sched.waiting)

    def is_idle(self) -> bool:
        with self._sched.cv:
            return self._sched.is_idle()

    def flush_cache(self) -> bool:
        """Drops every cached episode state; refuses (False) while requests run (queued requests
        hold no state, so they do not block it; this lets a sync flush during a pause)."""
        with self._sched.cv:
            return self._sched.flush()

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
        state = self._weights.convert(new)
        sched = self._sched
        with sched.cv:
            new_version = sched.version + 1 if version is None else int(version)
            sched.pending_weights = (state, new_version, flush_cache, in_flight)
            if in_flight == "abort":
                sched.abort_all = "Abort by weight update"
            sched.cv.notify_all()
        self._wait_applied()
        return new_version

    def close(self) -> None:
        with self._sched.cv:
            self._sched.closed = True
            self._sched.cv.notify_all()
        self._thread.join(timeout=60)

    # -------------------------------------------------------------------------- scheduling
    def _wait_applied(self):
        """Waits until the scheduler has applied pending control commands."""
        sched = self._sched
        if threading.current_thread() is self._thread:
            sched.apply_controls()
            return
        with sched.cv:
            while sched.controls_pending() and not sched.closed:
                sched.cv.notify_all()
                sched.cv.wait(timeout=0.05)

    def _loop(self) -> None:
        sched = self._sched
        while True:
            with sched.cv:
                while not sched.closed:
                    sched.apply_controls()
                    if not sched.paused and (sched.waiting or sched.running()):
                        break
                    sched.cv.wait(timeout=0.1)
                if sched.closed:
                    sched.fail_all(EngineClosedError("JaxEngine closed"))
                    return
                resets = sched.admit() if sched.pending_weights is None else []
                rows = sched.running()
                state, version = sched.state, sched.version
            try:
                if resets:
                    mask = np.zeros((self.max_slots,), dtype=bool)
                    mask[resets] = True
                    self._cache = self._reset(self._cache, jnp.asarray(mask))
                if rows:
                    self._step(rows, state, version)
            except Exception as e:  # keep serving: fail the requests of this step, rebuild cache
                log.exception("JaxEngine step failed")
                with sched.cv:
                    sched.fail_running(RuntimeError(f"JaxEngine step failed: {type(e).__name__}: {e}"))
                    self._cache = self._new_cache()

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

    def _step(self, rows: list[Slot], state, version: int) -> None:
        if any(len(s.active.pending) > 1 for s in rows):
            self._prefill_step(rows, state, version)
        else:
            self._decode_step(rows, state, version)

    def _prefill_step(self, rows: list[Slot], state, version: int) -> None:
        """Prefill / continuation (decode rows ride along with one token)."""
        B = self.max_slots
        chunk = self.prefill_buckets[-1]
        feed = {s.idx: min(len(s.active.pending), chunk) for s in rows}
        T = _bucket(max(feed.values()), self.prefill_buckets)
        tokens = np.zeros((B, T), np.int32)
        num_new = np.zeros((B,), np.int32)
        for s in rows:
            n = feed[s.idx]
            tokens[s.idx, :n] = s.active.pending[:n]
            num_new[s.idx] = n
        tok, lp, self._cache = self._extend(state, self._cache, jnp.asarray(tokens), jnp.asarray(num_new),
                                            *self._param_arrays(rows))
        tok, lp = np.asarray(tok), np.asarray(lp)
        sched = self._sched
        sched.stats["steps_prefill"] += 1
        with sched.cv:
            for s in rows:
                act, n = s.active, feed[s.idx]
                if act is None:
                    continue
                s.fed.extend(act.pending[:n])
                sched.stats["tokens_prefilled"] += n
                act.pending = act.pending[n:]
                if not act.pending:
                    sched.emit(s, [int(tok[s.idx])], [float(lp[s.idx])], version)

    def _decode_step(self, rows: list[Slot], state, version: int) -> None:
        """``decode_steps`` tokens for every row (each has exactly one pending token)."""
        B = self.max_slots
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
            jnp.asarray(stop), *self._param_arrays(rows))
        tok_NB, lp_NB, em_NB = np.asarray(tok_NB), np.asarray(lp_NB), np.asarray(em_NB)
        sched = self._sched
        sched.stats["steps_decode"] += 1
        with sched.cv:
            for s in rows:
                if s.active is None:
                    continue
                n = int(em_NB[:, s.idx].sum())
                sched.emit(s, [int(t) for t in tok_NB[:n, s.idx]], [float(x) for x in lp_NB[:n, s.idx]],
                           version)
