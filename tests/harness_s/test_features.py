"""Interpretable failure features and the per-sibling logistic success model."""
import json

import pytest

from harness_jax import harness_s
from harness_jax.harness_s.features import SuccessModel, task_text

from .builders import ANSWER, SQL, traj


def test_failure_features_are_named_and_averaged():
    f = harness_s.failure_features(traj("t", [(SQL, "no such column: x"), (ANSWER, "")],
                                        logprob=-0.5))
    assert f["cause=answered_after_error"] == 1.0 and f["status=completed"] == 1.0
    assert f["error_obs_frac"] == 0.5 and f["turns"] == 0.2 and f["tool=text"] == 1.0
    assert f["confidence"] == pytest.approx(0.6065, abs=1e-3)        # exp(-0.5)
    assert harness_s.failure_features(traj("t", [(ANSWER, "")], success=True)) == {}
    two = [traj("t", [(ANSWER, "")]), traj("t", [(SQL, "no such table: t"), (ANSWER, "")])]
    tf = harness_s.task_features({"category": "count"}, two + [traj("t", [], infra=True)])
    assert tf["cause=answered_without_inspecting"] == 0.5 == tf["cause=answered_after_error"]
    assert tf["category=count"] == 1.0 and tf["has_failures"] == 1.0
    assert harness_s.task_features({"category": "x"}) == {"category=x": 1.0, "has_failures": 0.0}
    assert task_text({"description": "How many?", "add_description": "Table t."}) == \
        "How many?\nTable t."


def test_success_model_learns_a_feature_and_falls_back_to_its_prior():
    rows = [{"cause=a": 1.0}] * 6 + [{"cause=b": 1.0}] * 6
    ys = [1.0] * 5 + [0.0] + [0.0] * 6
    m = SuccessModel.fit(rows, ys, l2=0.1)
    pa, pb = m.predict({"cause=a": 1.0}), m.predict({"cause=b": 1.0})
    assert pa > 0.7 and pb < 0.2 and 0 < pb < pa < 1
    assert m.explain({"cause=a": 1.0})[0][0] == "cause=a"
    assert m.predict({"unseen": 1.0}) == pytest.approx(m.predict({}))
    m2 = SuccessModel.from_dict(json.loads(json.dumps(m.to_dict())))
    assert m2.predict({"cause=a": 1.0}) == pytest.approx(pa)
    empty = SuccessModel.fit([], [], prior=0.3)
    assert empty.predict({"cause=a": 1.0}) == pytest.approx(0.3)
    strong = SuccessModel.fit(rows, ys, l2=1e4)                 # heavy L2: close to the prior
    assert abs(strong.predict({"cause=a": 1.0}) - strong.prior) < 0.05
