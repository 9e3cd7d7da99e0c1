"""The demonstration's pre-registered criteria (demo.criteria) on hand-made run summaries: each
criterion can fail, the verdict needs 2 of 3 runs and the paired interval."""
import json

import pytest

from harness_jax.harness_r1 import demo


def _eval(per_packet, valid_frac, tasks):
    det = [{"packet": p, "delta_b": sum(r) / len(r), "rewards": r, "valid": [True] * len(r)}
           for p, r in per_packet.items()]
    return {"details": det, "valid_frac": valid_frac, "delta_b": 0.0, "cross_delta_b": 0.0,
            "infra_samples": 0, "task_deltas": tasks, "greedy": {"delta_b": 0.0}}


def _run(tmp_path, name, sft, grpo, valid, tasks_sft, tasks_grpo):
    d = tmp_path / name
    d.mkdir()
    (d / "engineer_summary.json").write_text(json.dumps({"eval": {
        "after_sft": _eval(sft, 0.9, tasks_sft), "final": _eval(grpo, valid, tasks_grpo)}}))
    return str(d)


def test_criteria(tmp_path):
    sft = {f"p{i}": [0.0, -0.125] for i in range(6)}
    up = {f"p{i}": [0.25, 0.125] for i in range(6)}
    down = {f"p{i}": [-0.25, -0.25] for i in range(6)}
    t0 = {f"t{i}": 0.0 for i in range(12)}
    t1 = {f"t{i}": 0.125 + 0.01 * i for i in range(12)}
    good = [_run(tmp_path, f"g{i}", sft, up, 0.9, t0, t1) for i in range(2)]
    bad = _run(tmp_path, "bad", sft, down, 0.5, t0, {t: -0.1 for t in t0})
    c = demo.criteria(good + [bad], samples=2000)
    r = c["runs"]
    assert [x["C1"] for x in r] == [True, True, False] and r[0]["helpful_share"] == {"sft": 0.0, "grpo": 1.0}
    assert [x["C2"] for x in r] == [True, True, False] and r[2]["packets_rising"] == 0
    assert [x["C3"] for x in r] == [True, True, False]
    assert c["tasks"] == 12 and c["runs_meeting"] == {"C1": 2, "C2": 2, "C3": 2}
    # C4: per task, (2 runs at t1 + 1 run at -0.1) / 3 minus 0; the interval decides the verdict
    assert c["C4"]["diff"] == pytest.approx(sum((2 * v - 0.1) / 3 for v in t1.values()) / 12)
    assert c["C4"]["n_tasks"] == 12 and c["C4"]["ci_low"] > 0      # every per-task difference is > 0
    assert c["shows_learning"]                                      # C1-C3 on 2 of 3 runs, and C4
    assert "Shows learning" in demo.criteria_markdown(c)
    only_bad = demo.criteria([bad, bad, bad], samples=500)
    assert not only_bad["shows_learning"] and only_bad["runs_meeting"]["C1"] == 0
    with pytest.raises(ValueError, match="after-SFT and final"):
        empty = tmp_path / "empty"
        empty.mkdir()
        (empty / "engineer_summary.json").write_text("{}")
        demo.criteria([str(empty)])
