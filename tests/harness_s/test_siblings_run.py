"""Siblings (spec + overlay) run wherever a harness runs: the executor, the loop's episode runner
(one overlay worker pool per sibling, reused; the run's sampling settings win; sibling id and
pool version recorded in trajectories and traces) and evaluation; and the overlay credit rule
(a turn whose action an overlay overrode is never trained on). Policy: the scripted
``ReactivePolicy`` (test double, see ``loopkit``); everything else is real."""
import asyncio
import dataclasses

import numpy as np
import pytest

from harness_jax.harness.executor import ExecutorConfig, run_episodes
from harness_jax.harness.store import TrajectoryStore
from harness_jax.train import evaluation

from . import loopkit


@pytest.fixture(scope="module")
def world(qwen_tok):
    ts = loopkit.tasks(["counting", "aggregation-SUM"], n_per_cat=2)
    return ts, loopkit.policy_for(qwen_tok, ts)


def _env():
    from harness_jax.envs import dbbench
    return dbbench.DBBenchEnv(engine="sqlite", protocol="text")


def test_executor_runs_a_sibling_with_its_overlay(world, qwen_tok):
    ts, policy = world
    counting = [t for t in ts if t.category == "counting"]
    h0 = loopkit.h0()
    sib = loopkit.child(h0, "inspect_before_answer")
    cfg = ExecutorConfig(infra_retries=0, seed=1)
    base = asyncio.run(run_episodes(policy, _env, counting, h0, tokenizer=qwen_tok, config=cfg))
    trajs = asyncio.run(run_episodes(policy, _env, counting, sib, tokenizer=qwen_tok, config=cfg))
    assert not any(t.success for t in base)             # H0: answers at once, wrong
    assert all(t.success for t in trajs)                # the guard rule makes it inspect first
    for t in trajs:
        assert t.meta["sibling_id"] == sib.sibling_id != h0.sibling_id
        assert t.overlay_id == sib.patch.patch_id
        assert t.turns[0].interventions[0]["hook"] == "on_before_action"
    assert base[0].meta["sibling_id"] == h0.spec.harness_id
    with pytest.raises(TypeError, match="not a Sibling and an overlay"):
        from harness_jax.harness.executor import Executor
        Executor(policy, _env, sib, tokenizer=qwen_tok, overlay=sib.patch)


def test_runner_overlay_pool_per_sibling_reused_and_sampling_override(world, qwen_tok, tmp_path):
    ts, policy = world
    agg = [t for t in ts if t.category.startswith("aggregation")]
    c = loopkit.config(**{"rollout.temperature": 1.0})
    store = TrajectoryStore(str(tmp_path / "traces"))
    runner = loopkit.runner(loopkit.resolve(c), policy, _env, qwen_tok, store, pool_version="pool123")
    h0 = loopkit.h0(c)
    # a sibling with a sandboxed code hook, whose own sampling settings differ from the run's
    sib = loopkit.child(h0, "block_answer_after_error")
    sib = dataclasses.replace(sib, spec=dataclasses.replace(sib.spec, temperature=0.3, top_p=0.5))
    assert sib.patch.code_hooks()
    try:
        policy.temperatures.clear()
        eps1 = asyncio.run(runner.run(agg[0], sib, 2, "g1", seed=1))
        ov = runner._overlays[sib.sibling_id]
        pool_obj = ov.sandbox
        eps2 = asyncio.run(runner.run(agg[1], sib, 2, "g2", seed=2))
        assert runner._overlays[sib.sibling_id] is ov and ov.sandbox is pool_obj   # reused
        assert ov.stats["on_before_action"]["calls"] >= 4                           # both calls used it
        assert set(policy.temperatures) == {1.0}        # the run's temperature, not the sibling's 0.3
        assert all(e.success for e in eps1 + eps2)      # the hook blocked the answer after the error
        for e in eps1 + eps2:
            assert e.sibling_id == sib.sibling_id and e.pool_version == "pool123"
            assert e.trajectory.meta["pool_version"] == "pool123"
        rec = store.get(eps1[0].episode_id)
        assert rec.meta["sibling_id"] == sib.sibling_id and rec.meta["pool_version"] == "pool123"
        # evaluation accepts a sibling too (and a per-task choice)
        res = evaluation.evaluate_tasks(runner, agg, sib, k=1, temperature=0.0)
        assert res["success_rate"] == 1.0
        per = evaluation.run_attempts(runner, agg, lambda t: h0, k=1, temperature=0.0, tag="x")
        assert [e.sibling_id for eps in per for e in eps] == [h0.sibling_id] * 2
    finally:
        runner.close()
    assert runner._overlays == {}


def test_overridden_turns_are_masked_out_of_the_loss(world, qwen_tok):
    """Credit rule: the blocked first answer stays in the context but carries no loss; the
    policy's own later turns train as usual."""
    ts, policy = world
    counting = [t for t in ts if t.category == "counting"]
    c = loopkit.config()
    runner = loopkit.runner(loopkit.resolve(c), policy, _env, qwen_tok)
    sib = loopkit.child(loopkit.h0(c), "inspect_before_answer")
    try:
        ep = asyncio.run(runner.run(counting[0], sib, 1, "g", seed=3))[0]
    finally:
        runner.close()
    traj = ep.trajectory
    assert ep.success and ep.masked_turns == 1 and len(traj.overridden_turns()) == 1
    blocked = traj.turns[0]
    seg_all = traj.to_token_segments()[0]
    seg = ep.segments[0]
    assert seg.token_ids == seg_all.token_ids                      # same context
    span = slice(blocked.start, blocked.start + blocked.n_sampled)
    assert all(m == 1 for m in seg_all.loss_mask[span])            # sampled ...
    assert all(m == 0 for m in seg.loss_mask[span])                # ... but not credited
    later = traj.turns[1]
    assert all(m == 1 for m in seg.loss_mask[later.start:later.start + later.n_sampled])
    assert int(np.sum(seg.loss_mask)) == int(np.sum(seg_all.loss_mask)) - blocked.n_sampled
