"""Baselines: content-addressed cache (hits, misses on a changed seed/target/harness/batch),
seed pairing of reruns under a sampling target, infrastructure failures never scored.
The target is the scripted sampling policy (a test double, see doubles.py) on generated
DBBench tasks in SQLite."""
import dataclasses

import pytest

from harness_jax import harness_r1
from harness_jax.harness.executor import ExecutorConfig
from harness_jax.harness.presets import base_harness
from harness_jax.harness_r1 import BaselineCache
from tests.harness_r1.doubles import SeededDBBenchPolicy, dbbench_batch, item_index

ENV = harness_r1.EnvRef("dbbench", {"engine": "sqlite", "protocol": "text"})
CFG = ExecutorConfig(concurrency=8, infra_retries=0)
H = base_harness("dbbench", "text")
NEVER_FIRES = {"schema_version": "harness-r1-patch-v1", "benchmark": "dbbench", "actions": [
    {"type": "add_code_hook", "hook": "on_before_action",
     "code": "def hook(ctx, nb):\n    if ctx.turn > 99:\n"
             "        return {'kind': 'block_and_prompt', 'message': 'no'}\n    return None\n"}]}


@pytest.fixture(scope="module")
def world(qwen_tok):
    tasks = dbbench_batch(1, 3)
    policy = SeededDBBenchPolicy(qwen_tok, item_index(tasks))
    return tasks, policy, harness_r1.frozen(policy, model="scripted", version="3")


def test_cache_hits_and_misses(world, qwen_tok, tmp_path):
    tasks, policy, target = world
    cache = BaselineCache(str(tmp_path))
    kw = dict(n_per_task=2, config=CFG, tokenizer=qwen_tok, cache=cache)
    b = harness_r1.run_baseline(target, ENV, tasks, H, seed=0, **kw)
    assert not b.cached and b.complete and len(b.trajectories) == 2 * len(tasks)
    calls = policy.calls
    again = harness_r1.run_baseline(target, ENV, tasks, H, seed=0, **kw)
    assert again.cached and policy.calls == calls and again.key == b.key
    assert again.rewards == b.rewards and again.fingerprint() == b.fingerprint()
    # the cached trajectories are complete, with their sampling keys and task statements
    by_id = {t.task_id: t for t in tasks}
    for tr in again.trajectories:
        assert tr.meta["sampling_key"].startswith(tr.task_id + "#")
        assert tr.meta["task_statement"].startswith(by_id[tr.task_id].data["description"])
    assert [len(t.turns) for t in again.trajectories] == [len(t.turns) for t in b.trajectories]
    # a changed seed, target, harness, batch or episode count is a different baseline
    other_target = harness_r1.frozen(policy, model="scripted", version="4")
    variants = [dict(seed=1), dict(target=other_target), dict(n_per_task=1),
                dict(harness=dataclasses.replace(H, temperature=0.5)),
                dict(tasks=tasks[:-1]),
                dict(config=dataclasses.replace(CFG, hook_timeout_s=2.0))]
    keys = {b.key}
    for v in variants:
        args = dict(target=target, env=ENV, tasks=tasks, harness=H, seed=0, **kw)
        args.update(v)
        before = policy.calls
        res = harness_r1.run_baseline(args.pop("target"), args.pop("env"), args.pop("tasks"),
                                      args.pop("harness"), **args)
        assert not res.cached and policy.calls > before, v
        keys.add(res.key)
    assert len(keys) == len(variants) + 1
    assert cache.hits == 1 and cache.misses == len(variants) + 1
    # concurrency and retries are not part of the identity (they do not change episodes)
    same = harness_r1.run_baseline(target, ENV, tasks, H, seed=0, n_per_task=2,
                                   config=dataclasses.replace(CFG, concurrency=2,
                                                              infra_retries=1),
                                   tokenizer=qwen_tok, cache=cache)
    assert same.cached


def test_paired_rerun_reproduces_the_baseline_exactly(world, qwen_tok):
    """Under a sampling target, a patch that changes nothing gives exactly Delta_B = 0: each
    rerun episode replays its baseline episode's seeds. The control (another seed) shows the
    target really samples, so the equality is not vacuous."""
    tasks, policy, target = world
    n0 = policy.calls
    b = harness_r1.run_baseline(target, ENV, tasks, H, n_per_task=3, seed=11, config=CFG,
                                tokenizer=qwen_tok)
    base_seeds = policy.seeds[n0:]
    flat = [r for per in b.rewards.values() for r in per.values()]
    assert 0 < sum(flat) < len(flat)                  # a mix of successes and failures
    ev = harness_r1.evaluate_patch(NEVER_FIRES, "dbbench", target, tasks, b,
                                   tokenizer=qwen_tok)
    assert ev.valid and ev.complete and ev.noop
    assert ev.delta == 0.0 and ev.reward == 0.0
    assert ev.patched == ev.baseline
    # the rerun asked for exactly the baseline's seeds
    rerun_seeds = policy.seeds[n0 + len(base_seeds):]
    assert sorted(rerun_seeds) == sorted(base_seeds) and None not in rerun_seeds
    # control: the same episodes with another base seed do not reproduce the rewards
    other = harness_r1.run_baseline(target, ENV, tasks, H, n_per_task=3, seed=12, config=CFG,
                                    tokenizer=qwen_tok)
    assert other.rewards != b.rewards


class Flaky(SeededDBBenchPolicy):
    """Fails the first ``fail`` requests (an unreachable server)."""

    def __init__(self, *a, fail=0, **k):
        super().__init__(*a, **k)
        self.fail = fail

    async def generate(self, request):
        if self.fail > 0:
            self.fail -= 1
            raise ConnectionError("target unreachable (scripted)")
        return await super().generate(request)


def test_infrastructure_failures_are_retried_and_never_scored(world, qwen_tok, tmp_path):
    tasks, _, _ = world
    flaky = Flaky(qwen_tok, item_index(tasks), fail=2)
    target = harness_r1.frozen(flaky, model="flaky", version="1")
    cache = BaselineCache(str(tmp_path))
    b = harness_r1.run_baseline(target, ENV, tasks, H, config=CFG, tokenizer=qwen_tok,
                                cache=cache, attempts=2)
    assert b.complete and len(b.stats["infra_errors"]) == 2       # retried, then complete
    down = Flaky(qwen_tok, item_index(tasks), fail=10 ** 6)
    t2 = harness_r1.frozen(down, model="down", version="1")
    inc = harness_r1.run_baseline(t2, ENV, tasks, H, config=CFG, tokenizer=qwen_tok,
                                  cache=cache, attempts=2)
    assert not inc.complete and len(inc.missing) == len(tasks)
    assert cache.get(inc.key) is None                              # never cached
    with pytest.raises(ValueError, match="incomplete"):
        cache.put(inc)
    with pytest.raises(ValueError, match="no complete baseline"):
        harness_r1.evaluate_patch(NEVER_FIRES, "dbbench", t2, tasks, inc, tokenizer=qwen_tok)


def test_bad_batches_are_rejected(world, qwen_tok):
    tasks, _, target = world
    with pytest.raises(ValueError, match="tasks is empty"):
        harness_r1.run_baseline(target, ENV, [], H)
    with pytest.raises(ValueError, match="duplicate tasks"):
        harness_r1.run_baseline(target, ENV, tasks + tasks[:1], H)
    with pytest.raises(ValueError, match="environment"):
        harness_r1.run_baseline(target, harness_r1.EnvRef("alfworld"), tasks, H)
    with pytest.raises(ValueError, match="EnvRef.kwargs"):
        harness_r1.EnvRef("dbbench", {"engine": object()})
    with pytest.raises(ValueError, match="n_per_task"):
        harness_r1.run_baseline(target, ENV, tasks, H, n_per_task=0)
