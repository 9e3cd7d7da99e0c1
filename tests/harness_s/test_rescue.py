"""Rescue math: the trigger, splitting attempts over helpers, advantage calibration, metrics."""
import numpy as np
import pytest

from harness_jax import harness_s
from harness_jax.harness_s.rescue import RescueRecord


def test_trigger_fires_only_on_all_failed_without_infrastructure_errors():
    assert harness_s.rescue_trigger([False] * 8)
    assert not harness_s.rescue_trigger([False] * 7 + [True])
    assert not harness_s.rescue_trigger([False] * 7 + [None])          # None = infra error
    assert not harness_s.rescue_trigger([False] * 4, [False, False, True, False])
    assert harness_s.rescue_trigger([False] * 4, [False] * 4)
    assert not harness_s.rescue_trigger([])
    with pytest.raises(ValueError, match="infrastructure flags"):
        harness_s.rescue_trigger([False] * 3, [False] * 2)


def test_split_attempts():
    assert harness_s.split_attempts(8, ["a", "b", "c"]) == [("a", 3), ("b", 3), ("c", 2)]
    assert harness_s.split_attempts(8, ["a", "b"]) == [("a", 4), ("b", 4)]
    assert harness_s.split_attempts(2, ["a", "b", "c"]) == [("a", 1), ("b", 1)]   # K > G
    assert harness_s.split_attempts(3, ["a", "b"], "per_helper") == [("a", 3), ("b", 3)]
    for G, k in ((8, 3), (5, 5), (7, 2), (1, 4)):
        assert sum(n for _, n in harness_s.split_attempts(G, list("abcd")[:k])) == G
    with pytest.raises(ValueError, match="distinct"):
        harness_s.split_attempts(4, ["a", "a"])
    with pytest.raises(ValueError, match="no helpers"):
        harness_s.split_attempts(4, [])
    with pytest.raises(ValueError, match="mode"):
        harness_s.split_attempts(4, ["a"], "all")


def test_calibration_with_original_failures_teaches_an_all_success_rescue():
    orig = [0.0] * 4
    adv, adv_orig = harness_s.rescue_advantages_G(orig, [1.0] * 4)
    # mean 0.5, std 0.5 over the 8 rewards -> +1 for rescues, -1 for the originals
    np.testing.assert_allclose(adv, [1.0] * 4, rtol=1e-5)
    np.testing.assert_allclose(adv_orig, [-1.0] * 4, rtol=1e-5)
    adv_r, adv_o = harness_s.rescue_advantages_G(orig, [1.0] * 4, calibration="replaced")
    assert np.all(adv_r == 0) and np.all(adv_o == 0)               # the paper's literal reading
    # a mixed rescue: hand-computed statistics over originals + rescues
    resc = [1.0, 0.0, 1.0]
    both = np.array(orig + resc)
    expect = (np.array(resc) - both.mean()) / both.std()
    adv, _ = harness_s.rescue_advantages_G(orig, resc)
    np.testing.assert_allclose(adv, expect, rtol=1e-5)
    adv_r, _ = harness_s.rescue_advantages_G(orig, resc, calibration="replaced")
    r = np.array(resc)
    np.testing.assert_allclose(adv_r, (r - r.mean()) / r.std(), rtol=1e-5)
    # an all-fail rescue carries no signal either way
    assert np.all(harness_s.rescue_advantages_G(orig, [0.0, 0.0])[0] == 0)
    # scale="none" (Dr.GRPO) is passed through
    adv_n, _ = harness_s.rescue_advantages_G(orig, [1.0] * 4, scale="none")
    np.testing.assert_allclose(adv_n, [0.5] * 4, rtol=1e-6)
    with pytest.raises(ValueError, match="calibration"):
        harness_s.rescue_advantages_G(orig, resc, calibration="both")


def test_step_metrics():
    recs = [RescueRecord([0.0] * 4, True, helper_results={"a": [True, False], "b": [False, None]},
                         final_rewards=[1.0, 0.0, 0.0], wall_s=2.0),
            RescueRecord([0.0] * 4, True, helper_results={"a": [False, False]},
                         final_rewards=[0.0, 0.0], wall_s=1.0),
            RescueRecord([1.0, 0.0, 1.0, 0.0], False),
            RescueRecord([0.0] * 4, False, infra_error=True)]
    m = harness_s.rescue_step_metrics(recs, step_wall_s=10.0)
    assert m["groups"] == 4 and m["rescue_triggered"] == 2 and m["rescue_trigger_rate"] == 0.5
    assert m["rescue_success_rate"] == 0.5
    assert m["helper_attempt_success_rate"] == pytest.approx(1 / 5)
    assert m["per_helper"] == {"a": {"calls": 2, "attempts": 4, "successes": 1},
                               "b": {"calls": 1, "attempts": 1, "successes": 0}}
    assert m["zero_variance_before"] == 0.75 and m["zero_variance_after"] == 0.5
    assert m["infra_groups"] == 1 and m["rescue_wall_fraction"] == pytest.approx(0.3)
