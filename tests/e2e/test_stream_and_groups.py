"""Pure parts of the loop: the grain task stream (deterministic, reshuffled per epoch,
checkpointable), group advantages, dynamic sampling and the staleness histogram."""
import json

import numpy as np
import pytest

from harness_jax.envs.base import Task
from harness_jax.train.data import TaskStream
from harness_jax.train.groups import (Episode, Group, compute_advantages, dynamic_sampling_filter,
                                      staleness_histogram)
from harness_jax.types import TokenSegment

TASKS = [Task("toy", {"i": i}) for i in range(10)]


def test_stream_is_deterministic_shuffled_and_reshuffles_each_epoch():
    a = [t.data["i"] for t in TaskStream(TASKS, seed=3).take(20)]
    b = [t.data["i"] for t in TaskStream(TASKS, seed=3).take(20)]
    c = [t.data["i"] for t in TaskStream(TASKS, seed=4).take(20)]
    assert a == b and a != c
    assert sorted(a[:10]) == list(range(10)) and sorted(a[10:]) == list(range(10))
    assert a[:10] != list(range(10)) and a[:10] != a[10:]


def test_stream_state_round_trips_through_json():
    s = TaskStream(TASKS, seed=0)
    s.take(7)
    state = json.loads(json.dumps(s.state()))
    rest = [t.task_id for t in s.take(9)]
    s2 = TaskStream(TASKS, seed=0)
    s2.restore(state)
    assert [t.task_id for t in s2.take(9)] == rest and s2.num_taken == 16


def test_stream_restore_refuses_other_seed_or_split():
    state = TaskStream(TASKS, seed=0).state()
    with pytest.raises(ValueError, match="config.seed"):
        TaskStream(TASKS, seed=1).restore(state)
    with pytest.raises(ValueError, match="empty"):
        TaskStream([], seed=0)


def _ep(reward, version=0, n=6):
    seg = TokenSegment(token_ids=list(range(n)), loss_mask=[0, 0, 1, 1, 1, 1][:n],
                       rollout_logprobs=[0.0] * n)
    return Episode("e", TASKS[0], "H0", float(reward), reward > 0, [seg], version)


def test_group_advantages_match_the_formula_and_zero_variance_is_counted():
    g1 = Group("g1", TASKS[0], [_ep(1), _ep(0), _ep(0), _ep(1)])
    g2 = Group("g2", TASKS[1], [_ep(0), _ep(0)])
    g3 = Group("g3", TASKS[2], [_ep(1), _ep(0), _ep(0)])      # a rescued group may differ in size
    stats = compute_advantages([g1, g2, g3], eps=1e-6)
    r = np.array([1, 0, 0, 1.0])
    want = (r - r.mean()) / max(r.std(), 1e-6)
    assert [e.segments[0].advantage for e in g1.episodes] == pytest.approx(want)
    assert all(e.segments[0].advantage == 0.0 for e in g2.episodes)
    r3 = np.array([1, 0, 0.0])
    assert [e.segments[0].advantage for e in g3.episodes] == pytest.approx((r3 - r3.mean()) / r3.std())
    assert stats["zero_variance_groups"] == 1 and stats["zero_variance_fraction"] == pytest.approx(1 / 3)
    assert g1.episodes[0].segments[0].group_id == "g1"


def test_dynamic_sampling_modes():
    groups = [Group("a", TASKS[0], [_ep(1), _ep(0)]), Group("b", TASKS[1], [_ep(0), _ep(0)]),
              Group("c", TASKS[2], [_ep(1), _ep(1)])]
    kept, dropped = dynamic_sampling_filter(groups, "off")
    assert len(kept) == 3 and not dropped
    for mode in ("skip", "oversample"):
        kept, dropped = dynamic_sampling_filter(groups, mode)
        assert [g.group_id for g in kept] == ["a"] and [g.group_id for g in dropped] == ["b", "c"]
    with pytest.raises(ValueError, match="dynamic_sampling"):
        dynamic_sampling_filter(groups, "sometimes")


def test_staleness_histogram():
    g = Group("a", TASKS[0], [_ep(1, version=3), _ep(0, version=2), _ep(0, version=3)])
    assert staleness_histogram([g], learner_version=3) == {0: 2, 1: 1}


def test_a_sliding_window_episode_counts_once():
    """An episode cut into several segments (context resets, sliding windows) is one sample of its
    group: the advantages equal those of the same group with one segment per episode, and every
    segment of an episode carries the episode's advantage."""
    def ep(reward, n_segments):
        e = _ep(reward)
        e.segments = [TokenSegment(token_ids=list(range(6)), loss_mask=[0, 0, 1, 1, 1, 1],
                                   rollout_logprobs=[0.0] * 6) for _ in range(n_segments)]
        return e

    split = Group("g", TASKS[0], [ep(1, 3), ep(0, 1), ep(0, 1)])
    plain = Group("h", TASKS[1], [ep(1, 1), ep(0, 1), ep(0, 1)])
    compute_advantages([split, plain], eps=1e-6)
    r = np.array([1, 0, 0.0])
    want = (r - r.mean()) / r.std()
    assert [s.advantage for s in split.episodes[0].segments] == pytest.approx([want[0]] * 3)
    assert [e.segments[0].advantage for e in split.episodes] == pytest.approx(want)
    assert [e.segments[0].advantage for e in plain.episodes] == pytest.approx(want)
