"""Host-side bookkeeping of the embedded engine: requests, cache slots, control commands.

No device code here. The ``Scheduler`` owns the condition variable every engine method locks,
the waiting queue, the slots (one per cache row) and the commands waiting to be applied between
steps (aborts, pauses, a weight swap); it admits requests to slots (exact-prefix reuse of a
finished row's state first) and turns sampled tokens into results and stream chunks. With a
paged cache it also owns the ``PagePool``: a slot whose state is forgotten gives its pages back,
and a running request can be preempted (its pages freed, the request requeued to be recomputed
from its prompt and the tokens it already produced, like a retraction).
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import threading
import time
from typing import Any, Callable, Optional

import numpy as np

from harness_jax.sampling.types import (FINISH_ABORT, FINISH_LENGTH, FINISH_STOP, GenerateRequest,
                                        GenerateResult, StreamChunk)

log = logging.getLogger(__name__)


class EngineClosedError(RuntimeError):
    pass


@dataclasses.dataclass
class Seq:
    """One admitted or waiting request and what it produced so far."""
    request: GenerateRequest
    future: concurrent.futures.Future
    seed: int
    budget: int                      # tokens this request may generate in total
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
    order: int = 0                   # admission order (first come, first served; youngest preempted)


@dataclasses.dataclass
class Slot:
    """One cache row: the request it serves, or the finished state it keeps for reuse."""
    idx: int
    active: Optional[Seq] = None
    fed: list = dataclasses.field(default_factory=list)   # tokens whose state the row holds
    valid: bool = True              # False: row holds tokens not mirrored in `fed`; reset first
    episode_id: Optional[str] = None
    last_used: float = 0.0
    needs_reset: bool = False


class Scheduler:
    """Requests, slots and pending control commands of one engine (thread-safe through ``cv``).

    Args:
      max_slots / max_len: cache rows and tokens per row.
      vocab_size: ids outside ``[0, vocab_size)`` are refused (None: not checked).
      eos_token_ids: end a request unless ``ignore_eos``.
      tokenizer: ``decode`` for stop strings (None: stop strings are refused).
      seed: seeds the per-request seeds of requests without one.
      state / version: the weights the engine starts with.
      pool: the ``PagePool`` of a paged cache (None: contiguous cache).
    """

    def __init__(self, max_slots: int, max_len: int, *, vocab_size: Optional[int], eos_token_ids,
                 tokenizer, seed: int, state, version: int, pool=None):
        self.max_slots, self.max_len = int(max_slots), int(max_len)
        self.vocab_size = vocab_size
        self.eos_token_ids = tuple(eos_token_ids)
        self.tokenizer = tokenizer
        self._rng = np.random.default_rng(seed)
        self.state, self.version = state, int(version)     # the weights steps run with
        self.slots = [Slot(i) for i in range(self.max_slots)]
        self.waiting: list[Seq] = []
        self.cv = threading.Condition()
        self.paused = False
        self.closed = False
        self.abort_rids: dict[str, str] = {}
        self.abort_all: Optional[str] = None
        self.retract = False
        self.pending_weights = None      # (state, version, flush, in_flight)
        self.pool = pool
        self._admitted = 0
        self.stats = {"steps_prefill": 0, "steps_decode": 0, "steps_chained": 0, "tokens_generated": 0,
                      "tokens_prefilled": 0, "tokens_reused": 0, "preemptions": 0}

    # ------------------------------------------------------------------------- requests
    def prepare(self, request: GenerateRequest) -> Seq:
        """Validates a request (a bad one raises ``ValueError`` naming the fix)."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        ids = [int(t) for t in request.input_ids]
        if not ids:
            raise ValueError(f"request {request.request_id}: input_ids is empty; give at least one token")
        if len(ids) >= self.max_len:
            raise ValueError(f"request {request.request_id}: prompt of {len(ids)} tokens does not fit "
                             f"max_len={self.max_len}; raise JaxEngine(max_len=...) or shorten it")
        vocab = self.vocab_size
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
        return Seq(request=request, future=fut, seed=seed & 0xFFFFFFFF,
                   budget=min(p.max_new_tokens, self.max_len - len(ids)), stop_ids=frozenset(stop_ids))

    def enqueue(self, seqs: list[Seq]) -> None:
        with self.cv:
            if self.closed:
                raise EngineClosedError("JaxEngine is closed")
            self.waiting.extend(seqs)
            self.cv.notify_all()

    def running(self) -> list[Slot]:
        return [s for s in self.slots if s.active is not None]

    def is_idle(self) -> bool:
        return not self.waiting and all(s.active is None for s in self.slots)

    def controls_pending(self) -> bool:
        return (self.pending_weights is not None or self.abort_all is not None or self.retract
                or bool(self.abort_rids))

    # ------------------------------------------------------------------------- results
    def finish(self, slot: Optional[Slot], act: Seq, reason: str, streamed: Optional[int] = None) -> None:
        """Resolves the request; ``streamed``: tokens already streamed (the final chunk carries
        the rest; default all of them)."""
        act.finish = reason
        res = GenerateResult(
            request_id=act.request.request_id, token_ids=list(act.out_tokens),
            logprobs=[float(x) for x in act.out_logprobs], finish_reason=reason,
            weight_version=act.out_versions[-1] if act.out_versions else self.version,
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
    def _stream(act: Seq, toks: list, lps: list, versions: list,
                result: Optional[GenerateResult] = None) -> None:
        if act.on_chunk is None or (not toks and result is None):
            return
        try:
            act.on_chunk(StreamChunk(act.request.request_id, list(toks), list(lps), list(versions), result))
        except Exception:   # a broken consumer must not stop the engine
            log.exception("on_chunk callback of %s failed; streaming stopped", act.request.request_id)
            act.on_chunk = None

    def emit(self, s: Slot, toks: list, lps: list, version: int) -> None:
        """Appends sampled tokens and finishes the request when a stop condition holds.

        Mirrors what the device fed in the step that produced ``toks``: in decode, the pending
        token then all but the last sampled one (prefill already mirrored its chunk).
        """
        act = s.active
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
        act.pending = [act.out_tokens[-1]] if act.out_tokens else act.pending
        if finished:
            self.finish(s, act, finished, streamed=n0)
            if used < len(toks):
                self.forget(s)   # the row consumed tokens past the end of this request
        else:
            self._stream(act, act.out_tokens[n0:], act.out_logprobs[n0:], act.out_versions[n0:])

    def _stop_string_hit(self, act: Seq) -> bool:
        stops = act.request.params.stop
        window = max(len(x) for x in stops) + 4
        text = self.tokenizer.decode(act.out_tokens[-window:])
        for x in stops:
            if x in text:
                act.stop_reason = x
                return True
        return False

    def fail_all(self, exc: Exception) -> None:
        for act in self.waiting:
            if not act.future.done():
                act.future.set_exception(exc)
        self.waiting = []
        for s in self.slots:
            if s.active is not None and not s.active.future.done():
                s.active.future.set_exception(exc)
            s.active = None

    def fail_running(self, exc: Exception) -> None:
        """A step failed: its requests fail, every row's state is forgotten."""
        for s in self.slots:
            if s.active is not None and not s.active.future.done():
                s.active.future.set_exception(exc)
            s.active = None
            self.forget(s)

    def forget(self, s: Slot) -> None:
        """The row's state is no longer usable: nothing reuses it, its pages go back."""
        s.valid, s.fed, s.episode_id = False, [], None
        if self.pool is not None:
            self.pool.release(s.idx)

    def requeue(self, s: Slot) -> Seq:
        """Takes the running request off its row (forgotten) to be recomputed later from its
        prompt plus everything it produced (retraction, preemption)."""
        act = s.active
        act.pending = list(act.request.input_ids) + list(act.out_tokens)
        act.cached_tokens = 0
        s.active = None
        self.forget(s)
        return act

    def preempt(self, s: Slot) -> None:
        """Out of pages: the request on ``s`` goes back to the head of the queue."""
        self.waiting.insert(0, self.requeue(s))
        self.stats["preemptions"] += 1

    def evict_cached(self, keep=()) -> bool:
        """Frees the pages of the least recently used finished row not in ``keep``; False if
        there is none."""
        cands = [s for s in self.slots if s.active is None and s.idx not in keep
                 and self.pool is not None and self.pool.owned[s.idx]]
        if not cands:
            return False
        self.forget(min(cands, key=lambda s: s.last_used))
        return True

    # ------------------------------------------------------------------------- controls
    def apply_controls(self) -> None:
        """Runs under the lock, between steps: weight swap, aborts, retraction."""
        draining = (self.pending_weights is not None and self.pending_weights[3] == "finish"
                    and not self.paused and any(s.active is not None for s in self.slots))
        if self.pending_weights is not None and not draining:
            state, version, flush, _ = self.pending_weights
            self.state, self.version = state, version
            if flush:
                for s in self.slots:
                    if s.active is None:
                        self.forget(s)
                    else:
                        s.episode_id = None   # mixed-version state: do not continue it later
                        s.needs_reset = True  # reset once the request ends
            self.pending_weights = None
        if self.abort_all is not None:
            msg = self.abort_all
            for act in self.waiting:
                act.abort_message = f"Abort before prefill: {msg}"
                self.finish(None, act, FINISH_ABORT)
            self.waiting = []
            for s in self.slots:
                if s.active is not None:
                    s.active.abort_message = msg
                    self.finish(s, s.active, FINISH_ABORT)
            self.abort_all = None
            self.abort_rids.clear()
        if self.abort_rids:
            self._abort_listed()
        if self.retract:
            # recompute from scratch after continue: feed prompt + everything generated
            requeue = [self.requeue(s) for s in self.slots if s.active is not None]
            self.waiting = sorted(requeue, key=lambda a: a.order) + self.waiting
            self.retract = False
        for s in self.slots:
            if s.active is None and s.needs_reset:
                s.needs_reset = False
                self.forget(s)
        self.cv.notify_all()

    def _abort_listed(self) -> None:
        keep = []
        for act in self.waiting:
            msg = self.abort_rids.get(act.request.request_id)
            if msg is not None:
                act.abort_message = f"Abort before prefill: {msg}"
                self.finish(None, act, FINISH_ABORT)
            else:
                keep.append(act)
        self.waiting = keep
        for s in self.slots:
            if s.active is not None and s.active.request.request_id in self.abort_rids:
                s.active.abort_message = self.abort_rids[s.active.request.request_id]
                self.finish(s, s.active, FINISH_ABORT)
        self.abort_rids.clear()

    def admit(self, fits: Optional[Callable[[Seq], bool]] = None) -> list[int]:
        """Moves waiting requests into slots; returns the rows that must be reset first.
        ``fits(seq)`` (paged cache): whether the pages for a new request's first chunk can be
        had; admission stops at the first request that does not fit (first come, first served)."""
        resets = []
        still = []
        blocked = False
        for act in self.waiting:
            if blocked:
                still.append(act)
                continue
            ids = act.request.input_ids
            resumed = bool(act.pending)   # retracted request: pending already holds its history
            slot, reuse = None, 0
            if not resumed:
                # exact-prefix reuse of a finished row's state; the episode's own row first
                ep = act.request.episode_id
                cands = [s for s in self.slots
                         if s.active is None and s.valid and s.fed and len(s.fed) < len(ids)
                         and ids[:len(s.fed)] == s.fed]
                if cands:
                    best = max(cands, key=lambda s: (ep is not None and s.episode_id == ep, len(s.fed)))
                    slot, reuse = best, len(best.fed)
            if slot is None:
                free = [s for s in self.slots if s.active is None and s.idx not in resets]
                if not free or (fits is not None and not fits(act)):
                    blocked = fits is not None and bool(free)
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
                self.forget(slot)
                slot.valid = True
            if not act.order:
                self._admitted += 1
                act.order = self._admitted
            slot.active = act
            slot.episode_id = act.request.episode_id
            slot.last_used = time.monotonic()
        self.waiting = still
        return resets

    # ------------------------------------------------------------------- episode states
    def release_episode(self, episode_id: str) -> None:
        for s in self.slots:
            if s.episode_id == episode_id and s.active is None:
                self.forget(s)

    def flush(self) -> bool:
        if any(s.active is not None for s in self.slots):
            return False
        for s in self.slots:
            self.forget(s)
        return True

    # ------------------------------------------------------------------------ step results
    def apply_step(self, plan, r: dict) -> None:
        """Turns a step's sampled tokens (``r``: host arrays) into results (under the lock). A
        row whose request ended or was aborted while the step ran had its tokens fed for
        nothing: its state is forgotten."""
        if not plan.mixed:
            self.stats["steps_decode"] += 1
            self.stats["steps_chained"] += int(plan.chained)
            for s, act in plan.decode:
                n = int(r["emitted"][:, s.idx].sum())
                if s.active is act:
                    self.emit(s, [int(t) for t in r["tok"][:n, s.idx]], [float(x) for x in r["lp"][:n, s.idx]],
                              plan.version)
                elif n and s.active is None:
                    self.forget(s)
            return
        self.stats["steps_prefill"] += 1
        for s, act in plan.decode:
            if s.active is act:
                self.emit(s, [int(r["tok"][s.idx])], [float(r["lp"][s.idx])], plan.version)
        off = self.max_slots                     # prefill rows follow the (always present) decode group
        for i, (s, act, n) in enumerate(plan.prefill):
            if s.active is not act:
                continue
            s.fed.extend(act.pending[:n])
            self.stats["tokens_prefilled"] += n
            act.pending = act.pending[n:]
            if not act.pending:
                self.emit(s, [int(r["tok"][off + i])], [float(r["lp"][off + i])], plan.version)
