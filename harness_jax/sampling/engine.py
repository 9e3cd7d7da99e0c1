"""Embedded JAX rollout engine: continuous batching over the model's generation caches.

Why this shape:
  * a fixed number of cache rows ("slots"); a request takes a free slot, a finished request
    frees it for a waiting one (continuous batching);
  * the KV cache is paged by default: a pool of pages shared by the slots, each slot's pages
    listed in its block table, attention over each row's live pages only (ragged paged
    attention), so memory follows the live tokens, not ``slots x max_len``; when the pool runs
    dry the youngest request is preempted and recomputed later (``planner``); the contiguous
    cache (``cache_kind="contiguous"``) stays as an option;
  * every step is one device program: either ``decode_steps`` decode tokens for every running
    row (a ``lax.scan``, rows stopping on device at stop ids / budget, so the cache never holds
    tokens past the end of a request), or a mixed step with one token for every decoding row
    next to prompt chunks under a per-step token budget (chunked prefill never stalls decode);
  * the host overlaps: the next decode step is dispatched, fed from the previous one's device
    outputs, before the previous one's tokens are read back and turned into results;
  * a finished request leaves its state in the slot: a later request whose ``input_ids`` start
    with exactly the tokens that slot has consumed continues from there (episode continuation,
    an exact-prefix cache of end states; the GDN recurrent state cannot be rolled back, so only
    exact extensions are reused); ``episode_id`` pins an episode to its slot;
  * weights live as an ``nnx.State`` on device; ``update_weights`` swaps the reference between
    steps (no host copy) and bumps the version; every generated token records its version.

The pieces: ``scheduler.Scheduler`` (requests, slots, control commands; host only),
``planner.Planner`` (what the next step runs, pages, preemption), ``pages.PagePool``,
``runner.DeviceRunner`` (cache and jitted ``programs``), ``serving.ServingWeights`` (the served
layout), ``stream.ChunkStream``. A scheduler thread runs the steps; ``submit`` is thread-safe and
returns a ``concurrent.futures.Future``; ``generate`` (async) and ``generate_batch`` (sync) wrap it.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import threading
import uuid
from typing import Callable, Optional, Sequence

import jax.numpy as jnp

from harness_jax.sampling.pages import PagePool
from harness_jax.sampling.planner import MAX_DEVICE_STOP_IDS, Planner, StepPlan
from harness_jax.sampling.runner import DeviceRunner, check_cache_kind, default_pages
from harness_jax.sampling.scheduler import EngineClosedError, Scheduler
from harness_jax.sampling.serving import ServingWeights
from harness_jax.sampling.stream import ChunkStream
from harness_jax.sampling.types import (GenerateRequest, GenerateResult, RolloutEngine,
                                        SamplingParams, StreamChunk)

log = logging.getLogger(__name__)

__all__ = ["JaxEngine", "EngineClosedError", "ChunkStream", "MAX_DEVICE_STOP_IDS"]


class JaxEngine(RolloutEngine):
    """Continuous-batching generation engine over a Qwen3.5-style model with ``extend`` caches.

    Args:
      model: an nnx module with ``extend_groups_hidden`` / ``extend`` and ``.config``.
      max_slots: cache rows (concurrent requests / cached episodes).
      max_len: tokens per row (prompt + generated).
      tokenizer: optional HF-style tokenizer with ``decode``; needed for stop strings.
      prefill_buckets: allowed prefill chunk widths; the largest is the longest chunk.
      decode_steps: decode tokens per host round trip.
      eos_token_ids: ids that end a request unless ``ignore_eos``; default from the config.
      seed: seeds the engine-chosen per-request seeds (requests with ``seed=None``).
      cache_dtype: dtype of the KV and conv caches; the Gated DeltaNet recurrent state is always
        fp32 (the model refuses anything else).
      cache_kind: ``"paged"`` (default) or ``"contiguous"`` (``runner.DeviceRunner``).
      page_size / num_pages: the paged cache's pool (``num_pages=0``: every slot at full length,
        so never a preemption; fewer pages hold fewer live tokens and preempt when they run out).
      token_budget: tokens per mixed step (decoding rows' tokens + prompt chunks; default: the
        largest prefill bucket plus ``max_slots``).
      prefill_rows: most requests prefilling in one mixed step.
      overlap: dispatch the next decode step before reading the previous one back.
      attention_impl: ``paged_attention`` implementation (``"auto"``: Pallas on TPU/GPU, XLA
        on CPU).
      mesh / rules: the serving mesh (weights and cache sharded by their logical axes and
        ``rules``, default ``sharding.SAMPLE_RULES``). Default: when the parameters live on
        several devices (e.g. the learner's FSDP layout), those devices as ``(data, tensor)``
        with ``tensor_parallel`` devices per replica; else their one device.
      weight_layout: ``"hf"`` | ``"in_out"`` | ``"auto"`` (``serving.ServingWeights``).
      tensor_parallel: tensor-parallel degree of the serving mesh (1: weights replicated).
      serve_dtype: dtype of the served weight matrices (default: the model's compute dtype).
        The served copy is rebuilt on device at every ``update_weights``; decode never runs on
        the learner's layout.
    """

    def __init__(self, model, max_slots: int = 8, max_len: int = 512, *, tokenizer=None,
                 prefill_buckets: Sequence[int] = (16, 64, 256), decode_steps: int = 8,
                 eos_token_ids: Optional[Sequence[int]] = None, seed: int = 0,
                 weight_version: int = 0, cache_dtype=jnp.float32, cache_kind: str = "paged",
                 page_size: int = 16, num_pages: int = 0, token_budget: int = 0, prefill_rows: int = 8,
                 overlap: bool = True, attention_impl: str = "auto", mesh=None, rules=None,
                 weight_layout: str = "auto", tensor_parallel: int = 1, serve_dtype=None):
        if max_slots < 1:
            raise ValueError(f"JaxEngine.max_slots must be >= 1, got {max_slots}")
        if max_len < 2:
            raise ValueError(f"JaxEngine.max_len must be >= 2, got {max_len}")
        if decode_steps < 1:
            raise ValueError(f"JaxEngine.decode_steps must be >= 1, got {decode_steps}")
        if prefill_rows < 1:
            raise ValueError(f"JaxEngine.prefill_rows must be >= 1, got {prefill_rows}")
        buckets = sorted(set(int(b) for b in prefill_buckets))
        if not buckets or buckets[0] < 1:
            raise ValueError(f"JaxEngine.prefill_buckets must be positive ints, got {prefill_buckets}")
        check_cache_kind(cache_kind, page_size, num_pages, max_len)
        self.config = getattr(model, "config", None) or getattr(model, "cfg", None)
        if self.config is None:
            raise ValueError("JaxEngine: model has no .config (the model config the cache is built from)")
        self.max_slots = int(max_slots)
        self.max_len = int(max_len)
        self.tokenizer = tokenizer
        self.prefill_buckets = tuple(b for b in buckets if b <= max_len) or (max_len,)
        self.decode_steps = int(decode_steps)
        self.cache_kind = cache_kind
        self.overlap = bool(overlap)
        if eos_token_ids is None:
            eos = getattr(self.config, "eos_token_id", None)
            eos_token_ids = () if eos is None else ((eos,) if isinstance(eos, int) else tuple(eos))
        self.eos_token_ids = tuple(int(e) for e in eos_token_ids)
        self._weights = ServingWeights(model, weight_layout, mesh, rules=rules, tensor_parallel=tensor_parallel,
                                       dtype=serve_dtype)
        self.weight_layout = self._weights.layout
        self.mesh = self._weights.mesh
        paged = cache_kind == "paged"
        self.page_size = int(page_size)
        self.num_pages = (int(num_pages) or default_pages(self.max_slots, self.max_len, self.page_size)) if paged else 0
        self._runner = DeviceRunner(self._weights.graphdef, self.config, max_slots=self.max_slots,
                                    max_len=self.max_len, decode_steps=self.decode_steps, cache_kind=cache_kind,
                                    cache_dtype=cache_dtype, page_size=self.page_size, num_pages=self.num_pages,
                                    attn_impl=attention_impl, mesh=self.mesh, rules=self._weights.rules,
                                    devices=self._weights.devices())
        pool = (PagePool(self.num_pages, self.page_size, self.max_slots, -(-self.max_len // self.page_size))
                if paged else None)
        self._sched = Scheduler(self.max_slots, self.max_len, vocab_size=getattr(self.config, "vocab_size", None),
                                eos_token_ids=self.eos_token_ids, tokenizer=tokenizer, seed=seed,
                                state=self._weights.state, version=weight_version, pool=pool)
        rows = tuple(sorted({1, min(prefill_rows, self.max_slots)}))   # one prompt, or up to prefill_rows
        self.token_budget = int(token_budget) or self.prefill_buckets[-1] + self.max_slots
        self._planner = Planner(self._sched, max_slots=self.max_slots, max_len=self.max_len,
                                decode_steps=self.decode_steps, chunk_buckets=self.prefill_buckets,
                                row_buckets=rows, token_budget=self.token_budget)
        self.stats = self._sched.stats
        self._thread = threading.Thread(target=self._loop, name="JaxEngine", daemon=True)
        self._thread.start()

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
        import jax
        return jax.tree_util.tree_map(lambda a: a.sharding, self._runner.cache)

    def kv_memory(self) -> dict:
        """KV cache memory: bytes the KV arrays hold (``held``: the whole pool or every slot at
        ``max_len``), bytes of one token (all layers, keys and values), and for a paged cache
        the pages in use now and at the peak."""
        held = self._runner.kv_bytes
        out = {"held_bytes": held, "cache_kind": self.cache_kind}
        pool = self._sched.pool
        if pool is None:
            out["token_bytes"] = held // (self.max_slots * self.max_len)
            return out
        per_page = held // pool.num_pages
        with self._sched.cv:
            out.update(token_bytes=per_page // pool.page_size, pages=pool.num_pages, pages_used=pool.used,
                       peak_pages_used=pool.peak_used, used_bytes=pool.used * per_page,
                       peak_used_bytes=pool.peak_used * per_page)
        return out

    def lower_decode(self):
        """The decode program lowered for the served weights and the cache (every row idle):
        ``.compile().as_text()`` for HLO checks (``serving.weight_all_gathers``),
        ``.compile().memory_analysis()`` for its footprint."""
        with self._sched.cv:
            plan = self._planner.idle_decode_plan(self._sched.state, self._sched.version)
        return self._runner.lower_decode(plan)

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
        """The scheduler thread: plan a step, dispatch it, read the previous one back; a decode
        step whose rows carry on is chained (dispatched from the previous step's device outputs
        before they are read), so the host's token handling overlaps the device's next step."""
        sched = self._sched
        inflight: Optional[tuple] = None          # (plan, device outputs) not read back yet
        while True:
            try:
                nxt = None
                if inflight is not None:
                    with sched.cv:
                        nxt = self._chain(*inflight)
                if nxt is not None:
                    out = self._dispatch(nxt)
                    self._process(*inflight)      # overlaps the chained step on the device
                    inflight = (nxt, out)
                    continue
                if inflight is not None:
                    self._process(*inflight)
                    inflight = None
                with sched.cv:
                    while not sched.closed:
                        sched.apply_controls()
                        if not sched.paused and (sched.waiting or sched.running()):
                            break
                        sched.cv.wait(timeout=0.1)
                    if sched.closed:
                        sched.fail_all(EngineClosedError("JaxEngine closed"))
                        return
                    resets = []
                    if sched.pending_weights is None:   # a weight swap waiting to drain admits nobody
                        resets = sched.admit(self._planner.fits if sched.pool is not None else None)
                    plan = self._planner.plan(sched.state, sched.version)
                if resets:
                    self._runner.reset(resets)
                if plan is not None:
                    inflight = (plan, self._dispatch(plan))
            except Exception as e:  # keep serving: fail the requests of this step, rebuild cache
                log.exception("JaxEngine step failed")
                inflight = None
                with sched.cv:
                    sched.fail_running(RuntimeError(f"JaxEngine step failed: {type(e).__name__}: {e}"))
                    self._runner.cache = self._runner.new_cache()
                    if sched.pool is not None:
                        sched.pool.dirty = True

    def _chain(self, plan: StepPlan, out: dict) -> Optional[StepPlan]:
        """The decode step to dispatch before ``plan`` is read back, if nothing the host learns
        from it can change the next step: no commands or pause pending, no waiting request a free
        slot could take, and some row can still run past this step (under the lock)."""
        sched = self._sched
        admissible = sched.waiting and any(s.active is None for s in sched.slots)
        if not self.overlap or plan.mixed or sched.closed or sched.paused or admissible or sched.controls_pending():
            return None
        left = [act.budget - len(act.out_tokens) for s, act in plan.decode if s.active is act]
        if not left or max(left) <= plan.steps * (2 if plan.chained else 1):
            return None                           # every row ends within the step in flight
        return self._planner.chain(plan, out["carry"])

    def _dispatch(self, plan: StepPlan) -> dict:
        pool = self._sched.pool
        if pool is not None and pool.dirty:
            with self._sched.cv:
                table, pool.dirty = pool.table.copy(), False
            self._runner.set_block_tables(table)
        return self._runner.dispatch(plan)

    def _process(self, plan: StepPlan, out: dict) -> None:
        """Reads a step back (waits for it) and hands its tokens to the scheduler."""
        r = self._runner.read(out)
        with self._sched.cv:
            self._sched.apply_step(plan, r)
