"""Rank-1 routing at inference (``harness_s.rank1``): one harness per task from the whole pool,
H0 included, decided before any rollout; H0's attempts reused where H0 is chosen; the results
file's schema and table row. Policy: the scripted ``ReactivePolicy`` (test double, ``loopkit``)."""
import json

import pytest

from harness_jax import harness_s
from harness_jax.envs import dbbench
from harness_jax.harness_s import rank1
from harness_jax.train import rollout

from . import loopkit


def _router(pool, name="features"):
    run = loopkit.resolve(loopkit.config(**{"harness_s.router.name": name}))
    return rank1.rank1_router(run.method("harness_s"), pool)


def test_rank1_routes_each_task_before_rollout_and_reports_gaps(loop_world, tmp_path):
    w = loop_world
    run = loopkit.resolve(loopkit.config())
    runner = loopkit.runner(run, w.policy, lambda: dbbench.DBBenchEnv(engine="sqlite", protocol="text"), w.tok)
    router = _router(w.pool)
    assert router.config.include_base and router.config.top_k == 1 and w.pool.ids[0] in router.candidates
    try:
        res = rank1.rank1_evaluate(runner, w.val, w.pool, router, run.base_harness, k=1, temperature=0.0)
    finally:
        runner.close()
    assert res["format"] == "harness-s-rank1-v1" and res["num_tasks"] == len(w.val) == 6
    by_dir = {e.sibling_id: e.direction for e in w.pool.entries}
    cats = {t.task_id: t.category for t in w.val}
    for row in res["per_task"]:        # the category-only success models pick the fixing sibling
        if cats[row["task_id"]] == "counting":
            assert by_dir[row["choice"]] == "inspect_before_answer"
        if cats[row["task_id"]] == "aggregation-SUM":
            assert by_dir[row["choice"]] == "error_recovery_hint"
        assert len(row["h0"]) == len(row["rank1"]) == 1
    assert res["h0"]["avg@1"] == pytest.approx(1 / 3)           # H0 solves only DELETE
    assert res["rank1"]["avg@1"] == 1.0
    assert res["gap"]["avg@1"] == pytest.approx(2 / 3) and res["gap"]["pass@1"] == pytest.approx(2 / 3)
    share = res["h0_rank1_share"]
    assert share == sum(r["choice"] == w.pool.ids[0] for r in res["per_task"]) / 6
    assert sum(v["tasks"] for v in res["choices"].values()) == 6
    # decided before any rollout: every decision logged with empty failure features
    assert [d["features"].get("turns", 0.0) for d in router.decisions] == [0.0] * 6
    path = tmp_path / "r.json"
    path.write_text(json.dumps(res))
    row = rank1.table_row(rank1.load_results(str(path)))
    assert row["h0"] == res["h0"]["avg@1"] and row["gap"] == res["gap"]["avg@1"] and row["tasks"] == 6
    path.write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match="harness-s-rank1-v1"):
        rank1.load_results(str(path))


def test_rank1_reuses_h0_attempts_where_h0_is_chosen(loop_world):
    """With every sibling scored 0 on validation except H0, H0 is Rank-1 everywhere: Rank-1 then
    equals H0 attempt for attempt and needs no extra rollout."""
    w = loop_world
    entries = [harness_s.PoolEntry(e.sibling, e.generation, e.parent_id, e.direction, e.editor,
                                   {t: ([True] if i == 0 else [False]) for t in e.validation}, "v7", e.cost)
               for i, e in enumerate(w.pool.entries)]
    pool = harness_s.SiblingPool(entries, env_name="dbbench", val_task_ids=w.pool.val_task_ids,
                                 task_info=w.pool.task_info)
    run = loopkit.resolve(loopkit.config())
    harnesses = []

    class Runner(rollout.EpisodeRunner):
        async def run(self, task, harness, n, group_id, **kw):
            harnesses.append(getattr(harness, "sibling_id", harness.harness_id))
            return await super().run(task, harness, n, group_id, **kw)
    runner = Runner(run.runner, w.policy, lambda: dbbench.DBBenchEnv(engine="sqlite", protocol="text"), w.tok)
    try:
        res = rank1.rank1_evaluate(runner, w.val, pool, _router(pool, "validation_topk"),
                                   run.base_harness, k=1, temperature=0.0)
    finally:
        runner.close()
    assert res["h0_rank1_share"] == 1.0 and res["gap"]["avg@1"] == 0.0
    assert all(r["h0"] == r["rank1"] for r in res["per_task"])
    assert len(harnesses) == 6 and len(set(harnesses)) == 1      # H0's attempts only: no extra rollout
