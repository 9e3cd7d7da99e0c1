"""Evaluation results: per-task outcomes, their pairing by task id and the paired comparison of
two results (``train.evaluation.compare_results``, ``load_results``). Pure data, no model; the
engine-level checks (same random numbers in every evaluation, the CLI on two checkpoints) are in
tests/e2e/test_learning.py."""
import json
import types

import pytest

from harness_jax.train import evaluation as E


def _task(tid, cat="x"):
    return types.SimpleNamespace(task_id=tid, category=cat)


def _ep(success, infra=False):
    return types.SimpleNamespace(success=success, infra_error=infra, reward=float(success), num_turns=1)


def _results(outcomes, greedy=None, k=2, temperature=1.0):
    tasks = [_task(t) for t in outcomes]
    per = [[_ep(bool(o)) if o is not None else _ep(False, infra=True) for o in outcomes[t]] for t in outcomes]
    g = [[_ep(bool(greedy[t]))] for t in outcomes] if greedy else None
    res = E.summarize_attempts(tasks, per, k, g)
    res["temperature"] = temperature
    return res


def test_summary_has_per_task_outcomes_and_greedy():
    res = _results({"a": [1, 0], "b": [None, 1], "c": [0, 0]}, greedy={"a": 1, "b": 0, "c": 0})
    assert res["per_task"] == [{"task_id": "a", "category": "x", "attempts": [1, 0], "greedy": 1},
                               {"task_id": "b", "category": "x", "attempts": [None, 1], "greedy": 0},
                               {"task_id": "c", "category": "x", "attempts": [0, 0], "greedy": 0}]
    assert res["greedy_success"] == pytest.approx(1 / 3)
    assert res["infra_errors"] == 1 and res["num_episodes"] == 5
    assert (res["sampling_seed"], res["sampling_keys"], res["k"]) == (E.EVAL_SAMPLING_SEED, "task_id#attempt", 2)
    assert E.per_task_values(res, "avg@2") == {"a": 0.5, "b": 1.0, "c": 0.0}   # infra errors unscored


def test_compare_pairs_by_task_and_checks_the_sampling():
    new = _results({"a": [1, 1], "b": [1, 0], "c": [0, 0], "d": [1, 1]}, greedy={"a": 1, "b": 1, "c": 0, "d": 1})
    old = _results({"d": [0, 1], "c": [0, 0], "b": [0, 0], "a": [1, 0], "e": [1, 1]},
                   greedy={"d": 0, "c": 0, "b": 0, "a": 1, "e": 1})
    p = E.compare_results(new, old, samples=2000)
    avg = p["avg@2"]
    # per-task differences a +0.5, b +0.5, c 0, d +0.5 (e has no partner)
    assert avg["n_tasks"] == 4 and avg["diff"] == pytest.approx(0.375) and avg["unpaired_tasks"] == 1
    assert avg["ci_low"] <= 0.375 <= avg["ci_high"] and (avg["wins"], avg["losses"]) == (3, 0)
    assert p["greedy_success"]["diff"] == pytest.approx(0.5)
    assert E.compare_results(new, new)["avg@2"]["diff"] == 0.0
    with pytest.raises(ValueError, match="'temperature'"):
        E.compare_results(new, _results({"a": [1, 1]}, temperature=0.7))
    with pytest.raises(ValueError, match="'k'"):
        E.compare_results(new, _results({"a": [1, 1, 1]}, k=3))
    old.pop("per_task")
    with pytest.raises(ValueError, match="per-task"):
        E.compare_results(new, old)


def test_load_results_from_eval_json_and_training_summary(tmp_path):
    res = _results({"a": [1, 0]})
    (tmp_path / "eval.json").write_text(json.dumps(res))
    (tmp_path / "summary.json").write_text(json.dumps({"eval": [dict(res, tag="start"), dict(res, tag="final")]}))
    assert E.load_results(str(tmp_path / "eval.json")) == res
    assert E.load_results(f"{tmp_path}/summary.json#start")["tag"] == "start"
    assert E.load_results(f"{tmp_path}/summary.json")["tag"] == "final"
    assert E.is_results_file(f"{tmp_path}/summary.json#start") and not E.is_results_file(str(tmp_path))
    with pytest.raises(ValueError, match="no evaluation tagged 'after_sft'"):
        E.load_results(f"{tmp_path}/summary.json#after_sft")
