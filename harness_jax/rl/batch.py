"""Packing executor ``TokenSegment``s into fixed-shape training rows.

A segment of ``n`` tokens becomes ``n - 1`` (input, target) positions: position ``t`` reads
``token_ids[t]`` and is scored on ``token_ids[t + 1]``; its loss mask and rollout log-prob are
those of the target token. Several segments share a row (first-fit decreasing), told apart by
``segment_ids`` (1, 2, ...; 0 is padding) with positions restarting at 0, so attention never
crosses segments. The row length is the smallest configured bucket that fits, which bounds the
number of distinct shapes (compilations) to ``len(buckets)``.

Nothing is truncated silently: a segment longer than the largest bucket is split at an
assistant-turn boundary (``TokenSegment.turn_starts``) when ``overlong="split"`` and it can be,
otherwise dropped; both are counted in ``PackStats``. Consecutive pieces share the turn's first
sampled token (the earlier piece's last target, the later piece's first input), so every
sampled token is trained exactly once. A split piece loses the context before its turn, so its
trainer log-probs differ from the rollout's; the importance weight accounts for that mismatch,
and ``overlong="drop"`` avoids it.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np

from harness_jax.types import TokenSegment

ARRAY_FIELDS = ("input_ids", "target_ids", "loss_mask", "rollout_logp", "advantages", "segment_ids",
                "positions")


@dataclasses.dataclass
class PackStats:
    num_segments_in: int = 0
    num_segments_packed: int = 0       # pieces placed in rows (a split segment counts each piece)
    num_split: int = 0                 # over-long segments split at a turn boundary
    num_dropped_overlong: int = 0      # over-long segments that could not be split (or policy=drop)
    num_dropped_no_loss: int = 0       # segments with no loss token (nothing to learn)
    num_rows: int = 0
    num_tokens: int = 0                # non-padding positions
    num_loss_tokens: int = 0
    row_length: int = 0

    @property
    def padding_fraction(self) -> float:
        total = self.num_rows * self.row_length
        return 1.0 - self.num_tokens / total if total else 0.0

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["padding_fraction"] = self.padding_fraction
        return d


@dataclasses.dataclass
class TrainBatch:
    """Host-side (numpy) packed batch; every array is ``[B, T]``.

    ``loss_mask``/``rollout_logp``/``advantages`` are aligned to ``target_ids``. ``meta`` holds
    per-piece records (group id, harness id, policy version, reward, row, segment id) for logging.
    """

    input_ids: np.ndarray
    target_ids: np.ndarray
    loss_mask: np.ndarray
    rollout_logp: np.ndarray
    advantages: np.ndarray
    segment_ids: np.ndarray
    positions: np.ndarray
    meta: list = dataclasses.field(default_factory=list)
    stats: PackStats = dataclasses.field(default_factory=PackStats)

    @property
    def shape(self):
        return self.input_ids.shape

    def arrays(self) -> dict:
        return {k: getattr(self, k) for k in ARRAY_FIELDS}

    def take_rows(self, idx) -> "TrainBatch":
        idx = np.asarray(idx)
        return dataclasses.replace(self, **{k: getattr(self, k)[idx] for k in ARRAY_FIELDS})


@dataclasses.dataclass(frozen=True)
class PackConfig:
    buckets: tuple[int, ...] = (256, 512, 1024, 2048, 4096)   # allowed row lengths (positions)
    overlong: str = "split"             # "split" at a turn boundary, else drop; or "drop"
    row_multiple: int = 1               # pad the row count to a multiple (minibatches*micro*dp)
    min_rows: int = 0                   # pad to at least this many rows
    pad_id: int = 0
    round_rows: bool = False            # pad the row count up to a row bucket (``row_bucket``)

    def __post_init__(self):
        if not self.buckets or any(b < 1 for b in self.buckets):
            raise ValueError(f"PackConfig.buckets: {self.buckets} must be a non-empty list of positive lengths")
        object.__setattr__(self, "buckets", tuple(sorted(int(b) for b in self.buckets)))
        if self.overlong not in ("split", "drop"):
            raise ValueError(f"PackConfig.overlong: {self.overlong!r}; use 'split' or 'drop'")
        if self.row_multiple < 1:
            raise ValueError(f"PackConfig.row_multiple: {self.row_multiple} must be >= 1")


def row_bucket(n: int) -> int:
    """The smallest of 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (``2^k`` and ``3 * 2^(k-1)``) that is
    >= ``n``: with ``PackConfig.round_rows`` a batch's row count (in units of ``row_multiple``)
    is one of these, so the learner compiles one step per bucket (a logarithmic number) instead
    of one per distinct row count, and pads at most a third of the rows."""
    p = 1
    while True:
        for b in ((p, p * 3 // 2) if p >= 2 else (p,)):
            if b >= n:
                return b
        p *= 2


def _split_points(seg: TokenSegment, cap: int) -> Optional[list[tuple[int, int]]]:
    """Token ranges [a, b) with b - a - 1 <= cap, cut only at turn starts; None if impossible.

    A cut at turn start ``c`` makes two pieces ``[a, c + 1)`` and ``[c, b)``: they share token
    ``c``, the turn's first sampled token, which is the last *target* of the first piece (scored
    with the context before it) and only an *input* of the second, whose targets begin at
    ``c + 1``. Every token after the first is thus a target exactly once."""
    n = len(seg.token_ids)
    cuts = sorted({t for t in seg.turn_starts if 0 < t < n - 1})
    pieces, a = [], 0
    while n - a - 1 > cap:
        # the piece [a, c + 1) needs c - a <= cap; cut at the furthest turn start that fits.
        ok = [c for c in cuts if a < c <= a + cap]
        if not ok:
            return None
        c = ok[-1]
        pieces.append((a, c + 1))
        a = c
    pieces.append((a, n))
    return pieces


def pack_segments(segments: Sequence[TokenSegment], cfg: PackConfig = PackConfig()) -> TrainBatch:
    """Pack segments into ``[rows, bucket]`` arrays (see module docstring)."""
    stats = PackStats(num_segments_in=len(segments))
    cap = cfg.buckets[-1]
    pieces = []  # (segment index, start, end)
    for i, seg in enumerate(segments):
        n = len(seg.token_ids)
        if n < 2 or not any(seg.loss_mask[1:]):
            stats.num_dropped_no_loss += 1
            continue
        if n - 1 <= cap:
            pieces.append((i, 0, n))
            continue
        split = _split_points(seg, cap) if cfg.overlong == "split" else None
        if split is None:
            stats.num_dropped_overlong += 1
            continue
        stats.num_split += 1
        pieces.extend((i, a, b) for a, b in split if any(seg.loss_mask[a + 1:b]))

    # first-fit decreasing on positions used (n - 1 per piece)
    order = sorted(range(len(pieces)), key=lambda k: -(pieces[k][2] - pieces[k][1]))
    rows: list[list[int]] = []
    fill: list[int] = []
    for k in order:
        L = pieces[k][2] - pieces[k][1] - 1
        for r in range(len(rows)):
            if fill[r] + L <= cap:
                rows[r].append(k)
                fill[r] += L
                break
        else:
            rows.append([k])
            fill.append(L)
    longest = max(fill, default=1)
    T = next(b for b in cfg.buckets if b >= longest)
    n_rows = max(len(rows), cfg.min_rows, 1)
    units = -(-n_rows // cfg.row_multiple)
    n_rows = (row_bucket(units) if cfg.round_rows else units) * cfg.row_multiple

    arr = {
        "input_ids": np.full((n_rows, T), cfg.pad_id, np.int32),
        "target_ids": np.full((n_rows, T), cfg.pad_id, np.int32),
        "loss_mask": np.zeros((n_rows, T), np.float32),
        "rollout_logp": np.zeros((n_rows, T), np.float32),
        "advantages": np.zeros((n_rows, T), np.float32),
        "segment_ids": np.zeros((n_rows, T), np.int32),
        "positions": np.zeros((n_rows, T), np.int32),
    }
    meta = []
    for r, ks in enumerate(rows):
        off = 0
        for s, k in enumerate(ks, start=1):
            i, a, b = pieces[k]
            seg = segments[i]
            tok = np.asarray(seg.token_ids[a:b], np.int32)
            L = len(tok) - 1
            sl = slice(off, off + L)
            arr["input_ids"][r, sl] = tok[:-1]
            arr["target_ids"][r, sl] = tok[1:]
            arr["loss_mask"][r, sl] = np.asarray(seg.loss_mask[a + 1:b], np.float32)
            arr["rollout_logp"][r, sl] = np.asarray(seg.rollout_logprobs[a + 1:b], np.float32)
            arr["advantages"][r, sl] = seg.advantage
            arr["segment_ids"][r, sl] = s
            arr["positions"][r, sl] = np.arange(L, dtype=np.int32)
            meta.append(dict(row=r, segment=s, group_id=seg.group_id, harness_id=seg.harness_id,
                             episode_id=seg.episode_id, task_id=seg.task_id, reward=seg.reward,
                             policy_version=seg.policy_version, start=a, end=b))
            off += L
            stats.num_segments_packed += 1
            stats.num_tokens += L
    stats.num_rows = n_rows
    stats.row_length = T
    stats.num_loss_tokens = int(arr["loss_mask"].sum())
    return TrainBatch(**arr, meta=meta, stats=stats)
