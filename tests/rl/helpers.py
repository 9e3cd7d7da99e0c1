"""Shared test data for tests/rl: deterministic rollout-like segments and a resumable iterator."""
import numpy as np

from harness_jax.rl import batch as rlbatch
from harness_jax.rl import losses
from harness_jax.types import TokenSegment


def set_group_advantages(segs, group_size):
    """Group-relative advantages of consecutive groups of ``group_size`` one-segment episodes."""
    r = np.asarray([s.reward for s in segs], np.float32).reshape(-1, group_size)
    for s, a in zip(segs, np.asarray(losses.group_advantages(r)).reshape(-1)):
        s.advantage = float(a)


def random_segments(seed, n=16, vocab=64, min_len=6, max_len=20, group_size=4):
    """Token ids avoid 0-2 (pad/bos/eos): HF zero-initialises the pad embedding row, where
    RMSNorm's derivative is ~1/sqrt(eps) and finite differences are meaningless."""
    rng = np.random.default_rng(seed)
    segs = []
    for i in range(n):
        L = int(rng.integers(min_len, max_len))
        p = int(rng.integers(2, 5))
        segs.append(TokenSegment(
            token_ids=[int(t) for t in rng.integers(3, vocab, L)], loss_mask=[0] * p + [1] * (L - p),
            rollout_logprobs=[0.0] * p + [float(x) for x in -rng.exponential(2.0, L - p)],
            reward=float(rng.integers(0, 2)), group_id=f"g{i // group_size}", policy_version=0))
    set_group_advantages(segs, group_size)
    return segs


class SeededBatches:
    """Deterministic batch stream with get_state/set_state (a stand-in data iterator)."""

    def __init__(self, seed, pack_cfg, **kw):
        self.seed, self.pack_cfg, self.kw, self.i = seed, pack_cfg, kw, 0

    def __next__(self):
        b = rlbatch.pack_segments(random_segments(self.seed * 1000 + self.i, **self.kw), self.pack_cfg)
        self.i += 1
        return b

    def get_state(self):
        return {"i": self.i}

    def set_state(self, s):
        self.i = int(s["i"])
