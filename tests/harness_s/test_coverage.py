"""Greedy joint-coverage selection against brute force on small instances."""
import itertools
import math
import random

import pytest

from harness_jax import harness_s
from harness_jax.harness_s.coverage import exclusive_tasks, joint_coverage


def _instance(rng, n_sib, n_tasks):
    return {f"s{i}": {t for t in range(n_tasks) if rng.random() < rng.uniform(0.1, 0.6)}
            for i in range(n_sib)}


def _best(solved, k):
    return max(len(joint_coverage(solved, c)) for c in itertools.combinations(solved, k))


@pytest.mark.parametrize("seed", range(40))
def test_greedy_against_brute_force(seed):
    rng = random.Random(seed)
    solved = _instance(rng, rng.randint(2, 7), rng.randint(3, 12))
    costs = {s: rng.choice([1.0, 2.0, 3.0]) for s in solved}
    for k in range(1, len(solved) + 1):
        chosen = harness_s.coverage_select(solved, k, costs)
        assert len(chosen) == k == len(set(chosen))
        opt = _best(solved, k)
        got = len(joint_coverage(solved, chosen))
        assert got <= opt and got >= (1 - 1 / math.e) * opt
        if k == 1:
            assert got == opt
        # every pick maximises the marginal gain (brute force over the remaining candidates),
        # ties going to the cheaper harness
        covered = set()
        for j, c in enumerate(chosen):
            rest = [s for s in solved if s not in chosen[:j]]
            gains = {s: len(solved[s] - covered) for s in rest}
            best_gain = max(gains.values())
            assert gains[c] == best_gain
            assert costs[c] == min(costs[s] for s in rest if gains[s] == best_gain)
            covered |= solved[c]


def test_greedy_prefers_complementary_siblings_over_individual_scores():
    solved = {"big": {1, 2, 3, 4}, "other_big": {1, 2, 3, 5}, "small": {6, 7}}
    # top-2 by individual score would be big + other_big (5 tasks); coverage picks 6
    assert harness_s.coverage_select(solved, 2) == ["big", "small"]


def test_ties_go_to_the_cheaper_harness_then_the_id():
    solved = {"a": {1}, "b": {1}, "c": {1}}
    assert harness_s.coverage_select(solved, 1, {"a": 5.0, "b": 1.0, "c": 1.0}) == ["b"]
    assert harness_s.coverage_select(solved, 1) == ["a"]


def test_candidates_restriction_k_bounds_and_errors():
    solved = {"a": {1, 2}, "b": {3}, "c": {4}}
    assert harness_s.coverage_select(solved, 5) == ["a", "b", "c"]
    assert harness_s.coverage_select(solved, 0) == []
    assert harness_s.coverage_select(solved, 2, candidates=["c", "b"]) == ["b", "c"]
    with pytest.raises(KeyError, match="no entry"):
        harness_s.coverage_select(solved, 1, candidates=["zzz"])
    with pytest.raises(ValueError, match="k must be"):
        harness_s.coverage_select(solved, -1)
    assert exclusive_tasks({"a": {1, 2}, "b": {2, 3}}) == {"a": {1}, "b": {3}}
