"""Evolution on generated DBBench through the real executor (SQLite, real tokenizer, overlays in
the sandboxed hook workers), with the deterministic editors and a scripted policy
(``doubles.ReactivePolicy``: a test double, because no trained model runs here) whose failures
depend on the harness: the evolved pool's joint coverage must beat its best single sibling, and
the root causes, directions, report and profiles must reflect the policy's real weaknesses."""
import os

import pytest

from harness_jax import harness_s
from harness_jax.envs import dbbench
from harness_jax.harness.executor import ExecutorConfig
from harness_jax.harness.presets import base_harness
from harness_jax.harness.siblings import Sibling
from harness_jax.harness_s.coverage import joint_coverage

from .doubles import ReactivePolicy

CATS = ["counting", "aggregation-SUM", "other", "DELETE"]


def _tasks(n_per_cat, seed, split):
    out = []
    for i, c in enumerate(CATS):
        out += dbbench.generate_tasks(n_per_cat, seed=seed * 10 + i, split=split, categories=[c])
    return out


@pytest.fixture(scope="module")
def world(qwen_tok):
    train, val = _tasks(2, 1, "train"), _tasks(2, 2, "search")
    items = {}
    for t in train + val:
        items[t.data["description"] + "\n" + t.data["add_description"]] = dict(
            t.data, _category=t.category)
    policy = ReactivePolicy(qwen_tok, items)
    trajectories = {}

    run = harness_s.executor_rollout(
        policy, lambda: dbbench.DBBenchEnv(engine="sqlite", protocol="text"),
        tokenizer=qwen_tok, config=ExecutorConfig(concurrency=8, infra_retries=0))

    def rollout(sib, tasks):
        trajs = run(sib, tasks)
        trajectories.setdefault(sib.sibling_id, []).extend(trajs)
        return trajs

    h0 = Sibling(base_harness("dbbench", "text"), name="H0")
    cfg = harness_s.EvolutionConfig(env_name="dbbench", protocol="text", max_generations=2,
                                    parents_per_generation=2, children_per_direction=2,
                                    max_directions=3, min_failures=2, policy_version="v7")
    result = harness_s.evolve(h0, train_tasks=train, val_tasks=val, rollout=rollout,
                              editor=harness_s.make_editor("deterministic"), config=cfg)
    return result, trajectories, val


def test_pool_covers_more_than_any_single_sibling(world, tmp_path):
    result, _, val = world
    pool = result.freeze(str(tmp_path))
    solved = pool.solved()
    best = max(len(s) for s in solved.values())
    joint = len(joint_coverage(solved, pool.ids))
    h0 = len(solved[pool.ids[0]])
    assert h0 == 2                                   # H0 solves the DELETE tasks only
    assert joint == len(val) > best > h0             # complementary siblings
    assert result.generations[0]["parents"] == [pool.ids[0]]
    assert set(result.generations[0]["directions"]) == {
        "answered_without_inspecting", "answered_after_error", "unparsable_action"}
    # the worked example fixes "other" but regresses the mutations: a local edit
    we = next(e for e in pool.entries if e.direction == "unparsable_action"
              and "worked_example" in e.editor)
    cats = {t.task_id: t.category for t in val}
    assert {cats[t] for t in we.solved()} == {"other"}
    # each generation-1 direction fixes its own category
    for op, cat in (("error_recovery_hint", "aggregation-SUM"),
                    ("block_answer_after_error", "aggregation-SUM"),
                    ("schema_preview", "counting"), ("inspect_before_answer", "counting")):
        e = next(e for e in pool.entries if e.editor == f"deterministic:{op}"
                 and e.generation == 1)
        assert {cats[t] for t in e.solved()} == {cat, "DELETE"}, op
    # generation 2 combines directions (a child of a child solves more than its parent)
    g2 = [e for e in pool.entries if e.generation == 2]
    assert g2 and max(len(e.solved()) for e in g2) > max(
        len(e.solved()) for e in pool.entries if e.generation == 1)
    for e in pool.entries[1:]:
        assert e.parent_id in pool.ids and e.editor.startswith("deterministic:")
        assert e.policy_version == "v7" and set(e.validation) == {t.task_id for t in val}
    # read-only, content-addressed file and a readable report
    assert oct(os.stat(pool.path).st_mode & 0o777) == "0o444"
    report = open(pool.path[:-5] + ".md").read()
    assert "Complementarity over H0 failures" in report and "worked_example" in report
    assert f"joint coverage of the pool: {joint}/{len(val)}" in report


def test_h0_failure_features_and_profiles_from_real_episodes(world):
    result, trajectories, val = world
    pool = result.pool()
    # H0's validation failures carry router features naming their root causes
    causes = {k for fs in pool.h0_failures.values() for f in fs for k in f if k.startswith("cause=")}
    assert causes == {"cause=answered_without_inspecting", "cause=answered_after_error",
                      "cause=unparsable_action"}
    h0_id = pool.ids[0]
    we = next(e for e in pool.entries if "worked_example" in e.editor and e.generation == 1)
    cats = {t.task_id: t.category for t in val}
    val_ids = set(cats)
    pairs = harness_s.pair_trajectories(
        [t for t in trajectories[h0_id] if t.task_id in val_ids],
        [t for t in trajectories[we.sibling_id] if t.task_id in val_ids], cats)
    prof = harness_s.summarise_offline(we.sibling_id, pairs, "v7")
    # evolution profiled every child from the same paired validation episodes
    assert pool.profiles[we.sibling_id] == prof.to_dict()
    assert set(pool.profiles) == set(pool.ids[1:])
    assert any(s.startswith("category=other") for s in prof.helps_when)
    assert any(s.startswith("category=DELETE") for s in prof.hurts_when)
    assert any("unparsable replies" in s and s.startswith("fewer") for s in
               prof.behaviour_difference)
    assert prof.policy_version == "v7" and prof.evidence[0].startswith(f"{len(val)} paired")
