"""Metrics: unbiased pass@k against brute-force enumeration, avg@k, per-category, DBBench's
overall_cat_accuracy, summaries and input validation."""
import itertools
import math

import pytest

from harness_jax import scoring as M


def _pass_at_k_brute(n, c, k):
    outcomes = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n,c,k", [(1, 0, 1), (1, 1, 1), (5, 2, 1), (5, 2, 3), (6, 1, 5),
                                   (8, 3, 8), (10, 0, 4), (7, 7, 2)])
def test_pass_at_k_matches_enumeration(n, c, k):
    assert M.pass_at_k(n, c, k) == pytest.approx(_pass_at_k_brute(n, c, k), abs=1e-12)


def test_pass_at_1_is_success_fraction_and_large_n_is_stable():
    assert M.pass_at_k(10, 3, 1) == pytest.approx(0.3)
    # closed form with math.comb for a large case
    n, c, k = 400, 7, 50
    exact = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert M.pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-9)


@pytest.mark.parametrize("n,c,k,field", [(0, 0, 1, "n="), (3, 4, 1, "c="), (3, 1, 4, "k="),
                                         (3, 1, 0, "k=")])
def test_pass_at_k_rejects_bad_input(n, c, k, field):
    with pytest.raises(ValueError, match=field):
        M.pass_at_k(n, c, k)


def test_avg_at_k_and_means_over_tasks():
    assert M.avg_at_k([1, 0, 1, 1], k=3) == pytest.approx(2 / 3)
    by_task = {"a": [True, False, False], "b": [False, False, False], "c": [True, True, True]}
    assert M.mean_avg_at_k(by_task, 3) == pytest.approx((1 / 3 + 0 + 1) / 3)
    assert M.mean_pass_at_k(by_task, 3) == pytest.approx((1 + 0 + 1) / 3)
    assert M.mean_pass_at_k(by_task, 1) == pytest.approx(M.mean_avg_at_k(by_task, 3))
    with pytest.raises(ValueError, match="fewer than k"):
        M.mean_pass_at_k({"a": [True]}, 2)


def test_success_rate_score_and_per_category():
    assert M.success_rate([]) == 0.0
    assert M.success_rate([True, False, 1, 0]) == 0.5
    assert M.mean_score([0.5, 1.0, 0.0]) == pytest.approx(0.5)
    acc = M.per_category_accuracy(["x", "y", "x", "x"], [1, 0, 0, 1])
    assert acc == {"x": pytest.approx(2 / 3), "y": 0.0}
    with pytest.raises(ValueError, match="one category per outcome"):
        M.per_category_accuracy(["x"], [1, 0])


def test_dbbench_overall_cat_accuracy_weights_groups_equally():
    cats = ["counting"] * 2 + ["ranking"] * 2 + ["INSERT"] * 4 + ["UPDATE"] * 1
    ok = [1, 1, 0, 0] + [1, 1, 1, 1] + [0]
    out = M.dbbench_accuracies(cats, ok)
    assert out["SELECT_accuracy"] == pytest.approx(0.5)
    assert out["INSERT_accuracy"] == 1.0 and out["UPDATE_accuracy"] == 0.0
    assert out["counting_accuracy"] == 1.0
    assert out["overall_cat_accuracy"] == pytest.approx((0.5 + 1.0 + 0.0) / 3)


def test_summarize_and_tgc_sgc():
    recs = [{"task_id": t, "success": s, "category": cat}
            for t, cat, outcomes in (("a", "put", [1, 0, 0]), ("b", "heat", [0, 0, 0]),
                                     ("c", "put", [1, 1, 0]))
            for s in outcomes]
    s = M.summarize(recs, ks=(1, 3, 5))
    assert s.num_tasks == 3 and s.num_episodes == 9
    assert s.success_rate == pytest.approx(3 / 9)
    assert set(s.pass_at) == {1, 3}            # k=5 needs 5 samples per task
    assert s.pass_at[3] == pytest.approx(2 / 3)
    assert s.per_category["put"] == pytest.approx(0.5)
    out = M.tgc_sgc({"t1": True, "t2": False, "t3": True}, {"t1": "s1", "t2": "s1", "t3": "s2"})
    assert out == {"tgc": pytest.approx(2 / 3), "sgc": 0.5}
    with pytest.raises(ValueError, match="no field 'success'"):
        M.group_by_task([{"task_id": "a"}])


def test_paired_bootstrap_on_known_data():
    # differences 1, 0, 0, 1 -> mean 0.5; every resampled mean is a multiple of 1/4 in [0, 1]
    r = M.paired_bootstrap([1, 1, 0, 1], [0, 1, 0, 0], samples=4000)
    assert r["diff"] == 0.5 and r["a"] == 0.75 and r["b"] == 0.25 and r["n_tasks"] == 4
    assert (r["wins"], r["losses"]) == (2, 0)
    # a resample of 4 tasks has mean 0 with probability 1/16 > 2.5%: 0 is inside, not significant
    assert r["ci_low"] == 0.0 and r["ci_high"] == 1.0 and r["level"] == 0.95 and not r["significant"]
    # the same pattern on 40 tasks is
    big = M.paired_bootstrap([1, 1, 0, 1] * 10, [0, 1, 0, 0] * 10, samples=4000)
    assert big["significant"] and 0.3 < big["ci_low"] < 0.5 < big["ci_high"] < 0.7
    # a constant difference has a degenerate interval; swapping the sides negates everything
    const = M.paired_bootstrap([0.5] * 9, [0.25] * 9)
    assert (const["diff"], const["ci_low"], const["ci_high"]) == (0.25, 0.25, 0.25)
    sw = M.paired_bootstrap([0, 1, 0, 0] * 10, [1, 1, 0, 1] * 10, samples=4000)
    assert sw["diff"] == -big["diff"] and sw["ci_high"] == pytest.approx(-big["ci_low"])
    # large n: the percentile interval matches the normal one, mean +- 1.96 sd / sqrt(n)
    import numpy as np
    rng = np.random.default_rng(1)
    a, b = rng.random(2000), rng.random(2000)
    n = M.paired_bootstrap(a, b, samples=4000, seed=3)
    half = 1.96 * np.std(a - b) / math.sqrt(2000)
    assert n["ci_low"] == pytest.approx(np.mean(a - b) - half, abs=0.15 * half)
    assert n["ci_high"] == pytest.approx(np.mean(a - b) + half, abs=0.15 * half)
    assert M.paired_bootstrap(a, b, seed=3, samples=500) == M.paired_bootstrap(a, b, seed=3, samples=500)
    with pytest.raises(ValueError, match="equal length"):
        M.paired_bootstrap([1, 0], [1])
    with pytest.raises(ValueError, match="no tasks"):
        M.paired_bootstrap([], [])
