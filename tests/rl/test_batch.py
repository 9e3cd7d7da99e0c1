"""Packing of TokenSegments into fixed-shape rows."""
import numpy as np
import pytest

from harness_jax.rl import batch as rlbatch
from harness_jax.types import TokenSegment


def seg(n, start_loss=3, adv=1.0, turns=(), gid="g", reward=0.0):
    mask = [0] * start_loss + [1] * (n - start_loss)
    lp = [0.0] * start_loss + [-0.1 * (i + 1) for i in range(n - start_loss)]
    return TokenSegment(token_ids=list(range(100, 100 + n)), loss_mask=mask, rollout_logprobs=lp,
                        advantage=adv, group_id=gid, turn_starts=list(turns), reward=reward)


def test_pack_alignment_segments_and_buckets():
    segs = [seg(10, adv=0.5), seg(6, adv=-1.0), seg(5, adv=2.0)]
    b = rlbatch.pack_segments(segs, rlbatch.PackConfig(buckets=(8, 16), row_multiple=4))
    assert b.shape == (4, 16)                    # 9+5+4 = 18 > 16 -> two rows, bucket 16, multiple 4
    st = b.stats
    assert (st.num_segments_packed, st.num_rows, st.num_tokens) == (3, 4, 18)
    assert st.num_loss_tokens == 7 + 3 + 2
    # every piece: targets are inputs shifted by one, positions restart, mask/logp aligned to targets
    for m in b.meta:
        r, s = m["row"], m["segment"]
        on = b.segment_ids[r] == s
        n = m["end"] - m["start"]
        np.testing.assert_array_equal(b.input_ids[r][on], np.arange(100, 100 + n - 1))
        np.testing.assert_array_equal(b.target_ids[r][on], np.arange(101, 100 + n))
        np.testing.assert_array_equal(b.positions[r][on], np.arange(n - 1))
        np.testing.assert_array_equal(b.loss_mask[r][on], [0] * 2 + [1] * (n - 3))
        np.testing.assert_allclose(b.rollout_logp[r][on][2:], [-0.1 * (i + 1) for i in range(n - 3)], rtol=1e-6)
    assert b.loss_mask[b.segment_ids == 0].sum() == 0


def test_overlong_split_at_turn_boundary_and_drop_counted():
    long_ok = seg(30, turns=(12, 20))            # pieces [0,12) [12,20) [20,30) fit in 16
    long_bad = seg(40, turns=(30,))              # [0,30) still too long -> dropped
    b = rlbatch.pack_segments([long_ok, long_bad, seg(4)], rlbatch.PackConfig(buckets=(16,)))
    assert b.stats.num_split == 1
    assert b.stats.num_dropped_overlong == 1
    assert b.stats.num_segments_packed == 4
    assert b.stats.num_loss_tokens == 10 + 8 + 9 + 1  # pieces [0,13) [12,21) [20,30) and seg(4)
    pieces = sorted((m["start"], m["end"]) for m in b.meta if m["end"] - m["start"] != 4)
    assert pieces == [(0, 13), (12, 21), (20, 30)]
    b2 = rlbatch.pack_segments([long_ok], rlbatch.PackConfig(buckets=(16,), overlong="drop"))
    assert b2.stats.num_dropped_overlong == 1 and b2.stats.num_segments_packed == 0
    assert b2.loss_mask.sum() == 0


def test_no_loss_segments_counted_and_bad_config():
    b = rlbatch.pack_segments([seg(5, start_loss=5)], rlbatch.PackConfig(buckets=(8,)))
    assert b.stats.num_dropped_no_loss == 1
    with pytest.raises(ValueError, match="overlong"):
        rlbatch.PackConfig(overlong="truncate")


def test_split_pieces_train_every_sampled_token_exactly_once():
    """A multi-turn episode split at its turn starts: each sampled token is the target of exactly
    one piece, with its own rollout log-prob and the episode's advantage. (Before the fix, the
    first sampled token of every turn a piece started at was never a target.)"""
    # prompt 6 | turn 1: 5 sampled | observation 4 | turn 2: 5 sampled | observation 4 | turn 3: 6
    kinds = [0] * 6 + [1] * 5 + [0] * 4 + [1] * 5 + [0] * 4 + [1] * 6
    starts = [i for i in range(1, len(kinds)) if kinds[i] and not kinds[i - 1]]
    ids = list(range(500, 500 + len(kinds)))
    lp = [-(i + 1) / 100 if k else 0.0 for i, k in enumerate(kinds)]
    s = TokenSegment(token_ids=ids, loss_mask=kinds, rollout_logprobs=lp, advantage=0.7, turn_starts=starts)
    b = rlbatch.pack_segments([s], rlbatch.PackConfig(buckets=(12,)))
    assert b.stats.num_split == 1
    assert sorted((m["start"], m["end"]) for m in b.meta) == [(0, 7), (6, 16), (15, 25), (24, 30)]
    on = b.loss_mask > 0
    trained = sorted(b.target_ids[on].tolist())
    assert trained == [t for t, k in zip(ids, kinds) if k]          # every sampled token, once
    np.testing.assert_allclose(b.rollout_logp[on], [lp[t - 500] for t in b.target_ids[on]], rtol=1e-6)
    assert np.all(b.advantages[on] == np.float32(0.7))
