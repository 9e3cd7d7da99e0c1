"""What the engine's next device step does (host side, no device code).

Two kinds of steps:
  * **decode** (every running row has one token to feed): ``decode_steps`` tokens per row in
    one device program (a ``lax.scan``), rows stopping on device at stop ids / budget;
  * **mixed** (some row still has prompt to feed): one token for every decoding row next to
    prompt chunks of the prefilling rows, in one program with two row groups (decode rows
    ``[max_slots, 1]``, prefill rows ``[rows, T]``), under a per-step token budget
    (SGLang/vLLM-style chunked prefill): decoding never stalls behind a long prompt, and a
    prompt costs its own tokens, not ``max_slots x T``.
Prefill rows are taken first come, first served (admission order); the chunk width ``T`` and
the prefill row count are rounded up to the given buckets, so the compiled programs are
bounded: one decode program and one mixed program per (rows, T) bucket pair.

With a paged cache the planner gives every row of the step the pages it needs first: the
oldest rows first, then (when the free list runs short) the pages of finished rows kept for
reuse, least recently used first, then by preempting the youngest running request, which goes
back to the head of the queue to be recomputed (``Scheduler.preempt``; never corrupted).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

import numpy as np

from harness_jax.sampling.scheduler import Scheduler, Seq, Slot

MAX_DEVICE_STOP_IDS = 8   # stop ids checked on device per row; more are checked on the host


def bucket(n: int, buckets: Sequence[int]) -> int:
    """The smallest bucket >= n (the largest if none is)."""
    for b in buckets:
        if n <= b:
            return b
    return buckets[-1]


@dataclasses.dataclass
class StepPlan:
    """One device step: its rows (with the request each served when planned), the weights and
    the host arrays of the program's inputs."""
    state: Any
    version: int
    decode: list            # [(slot, seq)]: rows feeding their one pending token
    prefill: list           # [(slot, seq, n)]: rows feeding n prompt tokens
    steps: int              # decode tokens per row (1 in a mixed step)
    arrays: dict
    chained: bool = False   # inputs are the previous decode step's device outputs

    @property
    def mixed(self) -> bool:
        return bool(self.prefill)


def _sampling_arrays(seqs: Sequence[Optional[Seq]]) -> tuple:
    """(temperature, top_p, top_k, min_p, seed, step) per row; None rows are padding."""
    n = len(seqs)
    temp, top_p = np.zeros((n,), np.float32), np.ones((n,), np.float32)
    top_k, min_p = np.full((n,), -1, np.int32), np.zeros((n,), np.float32)
    seed, step = np.zeros((n,), np.uint32), np.zeros((n,), np.int32)
    for i, a in enumerate(seqs):
        if a is None:
            continue
        p = a.request.params
        temp[i], top_p[i], top_k[i], min_p[i] = p.temperature, p.top_p, p.top_k, p.min_p
        seed[i], step[i] = a.seed, len(a.out_tokens)
    return temp, top_p, top_k, min_p, seed, step


class Planner:
    """Builds ``StepPlan``s from a ``Scheduler``'s running rows (call under its lock).

    Args:
      max_slots / max_len / decode_steps: the engine's.
      chunk_buckets: prefill chunk widths (the largest is the longest chunk).
      row_buckets: prefill row counts of a mixed step (the largest is the most rows).
      token_budget: tokens per mixed step (decode rows' tokens + prompt chunks); prompt chunks
        always get at least the smallest chunk bucket.
    """

    def __init__(self, sched: Scheduler, *, max_slots: int, max_len: int, decode_steps: int,
                 chunk_buckets: Sequence[int], row_buckets: Sequence[int], token_budget: int):
        self.sched, self.pool = sched, sched.pool
        self.max_slots, self.max_len, self.decode_steps = max_slots, max_len, decode_steps
        self.chunk_buckets, self.row_buckets = tuple(chunk_buckets), tuple(row_buckets)
        self.token_budget = int(token_budget)

    # ------------------------------------------------------------------------ admission
    def fits(self, act: Seq) -> bool:
        """Whether a new request's first chunk can get pages without preempting anyone: free
        pages plus those of finished rows, beyond one page of headroom per running row."""
        pool = self.pool
        evictable = sum(len(pool.owned[s.idx]) for s in self.sched.slots if s.active is None)
        first = min(len(act.pending) or len(act.request.input_ids), self.chunk_buckets[-1])
        return pool.pages_for(first) + len(self.sched.running()) <= pool.free + evictable

    # --------------------------------------------------------------------------- plans
    def plan(self, state, version: int) -> Optional[StepPlan]:
        """The next step for the running rows (None: nothing runs)."""
        rows = sorted(self.sched.running(), key=lambda s: s.active.order)
        pre = [s for s in rows if len(s.active.pending) > 1]
        dec = [s for s in rows if len(s.active.pending) == 1]
        if not pre:
            dec = self._with_pages([(s, min(len(s.fed) + self.decode_steps, self.max_len)) for s in dec])
            return self._decode_plan(dec, state, version) if dec else None
        budget = max(self.token_budget - len(dec), self.chunk_buckets[0])
        chunks = []
        for s in pre:
            if budget <= 0 or len(chunks) == self.row_buckets[-1]:
                break
            n = min(len(s.active.pending), self.chunk_buckets[-1], budget)
            chunks.append((s, n))
            budget -= n
        needs = [(s, len(s.fed) + 1) for s in dec] + [(s, len(s.fed) + n) for s, n in chunks]
        kept = set(id(s) for s in self._with_pages(needs))
        dec = [s for s in dec if id(s) in kept]
        chunks = [(s, n) for s, n in chunks if id(s) in kept]
        if not chunks:
            return self._decode_plan(dec, state, version) if dec else None
        return self._mixed_plan(dec, chunks, state, version)

    def _with_pages(self, needs: list) -> list:
        """Gives each ``(slot, tokens)`` its pages (oldest first), evicting finished rows' pages
        then preempting the youngest running requests when the pool runs dry; returns the slots
        still in the step."""
        if self.pool is None:
            return [s for s, _ in needs]
        sched, pool = self.sched, self.pool
        step_slots = {s.idx for s, _ in needs}
        for s, n in needs:
            while s.active is not None and not pool.grow(s.idx, n):
                if sched.evict_cached(keep=step_slots):
                    continue
                victim = max(sched.running(), key=lambda r: r.active.order)
                sched.preempt(victim)
        return [s for s, _ in needs if s.active is not None]

    def idle_decode_plan(self, state, version: int) -> StepPlan:
        """A decode step with every row idle (to lower the program without running it)."""
        return self._decode_plan([], state, version)

    def _decode_plan(self, rows: list[Slot], state, version: int) -> StepPlan:
        B = self.max_slots
        tok0, active = np.zeros((B,), np.int32), np.zeros((B,), bool)
        budget = np.zeros((B,), np.int32)
        stop = np.full((B, MAX_DEVICE_STOP_IDS), -1, np.int32)
        seqs: list = [None] * B
        for s in rows:
            act = seqs[s.idx] = s.active
            tok0[s.idx], active[s.idx] = act.pending[0], True
            budget[s.idx] = act.budget - len(act.out_tokens)
            ids = sorted(act.stop_ids)[:MAX_DEVICE_STOP_IDS]
            stop[s.idx, :len(ids)] = ids
        arrays = dict(tok=tok0, active=active, budget=budget, stop=stop, sampling=_sampling_arrays(seqs))
        return StepPlan(state, version, [(s, s.active) for s in rows], [], self.decode_steps, arrays)

    def _mixed_plan(self, dec: list[Slot], chunks: list, state, version: int) -> StepPlan:
        B, oor = self.max_slots, self.max_slots        # slot id max_slots: a padding row
        # the decode group is always there (all padding when no row decodes): one program per
        # (rows, T) bucket pair instead of two
        tok, num, slots = np.zeros((B, 1), np.int32), np.zeros((B,), np.int32), np.full((B,), oor, np.int32)
        seqs: list = [None] * B
        for s in dec:
            tok[s.idx, 0], num[s.idx], slots[s.idx] = s.active.pending[0], 1, s.idx
            seqs[s.idx] = s.active
        groups = [(tok, num, slots)]
        R = bucket(len(chunks), self.row_buckets)
        T = bucket(max(n for _, n in chunks), self.chunk_buckets)
        tok, num, slots = np.zeros((R, T), np.int32), np.zeros((R,), np.int32), np.full((R,), oor, np.int32)
        pseqs: list = [None] * R
        for i, (s, n) in enumerate(chunks):
            tok[i, :n], num[i], slots[i] = s.active.pending[:n], n, s.idx
            pseqs[i] = s.active
        groups.append((tok, num, slots))
        seqs += pseqs
        arrays = dict(groups=tuple(groups), sampling=_sampling_arrays(seqs))
        return StepPlan(state, version, [(s, s.active) for s in dec], [(s, s.active, n) for s, n in chunks], 1,
                        arrays)

    def chain(self, prev: StepPlan, carry: dict) -> Optional[StepPlan]:
        """The decode step after ``prev`` (a decode step not yet read back) with the same rows,
        fed from ``prev``'s device outputs (``carry``): no host round trip between the two. None
        when a row cannot get the pages two steps ahead need."""
        if self.pool is not None:
            for s, act in prev.decode:
                if s.active is act and not self.pool.grow(s.idx, min(len(s.fed) + 2 * prev.steps, self.max_len)):
                    return None
        temp, top_p, top_k, min_p, seed, _ = prev.arrays["sampling"]
        arrays = dict(prev.arrays, tok=carry["tok"], active=carry["active"], budget=carry["budget"],
                      sampling=(temp, top_p, top_k, min_p, seed, carry["step"]))
        return StepPlan(prev.state, prev.version, prev.decode, [], prev.steps, arrays, chained=True)
