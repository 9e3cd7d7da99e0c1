"""Delta_B evaluations on the local pool of worker processes: the same rewards as in-process
evaluation, duplicates evaluated once, a shared reward cache, and a worker that dies gives an
infrastructure result (never scored). The target is the scripted policy of doubles.py (a test
double) rebuilt in each worker from its TargetSpec."""
import pytest

from harness_jax import harness_r1
from harness_jax.harness.executor import ExecutorConfig
from harness_jax.harness.presets import base_harness
from harness_jax.harness_r1.engineers import RuleBasedEngineer
from harness_jax.harness_r1.pool import EvaluationPool
from tests.harness_r1.doubles import dbbench_batch

ENV = harness_r1.EnvRef("dbbench", {"engine": "sqlite", "protocol": "text"})
SPEC = harness_r1.TargetSpec(kind="factory", factory="tests.harness_r1.doubles:make_policy",
                             model="scripted", version="3",
                             options={"kwargs": {"seed": 5, "n": 2,
                                                 "crash_marker": "CRASH-THE-TARGET"}})
CRASH = {"schema_version": "harness-r1-patch-v1", "benchmark": "dbbench", "actions": [
    {"type": "add_code_hook", "hook": "make_pre_hint",
     "code": "def hook(ctx, nb):\n    return {'message': 'CRASH-THE-TARGET'}\n"}]}


@pytest.mark.slow
def test_pool_matches_in_process_evaluation(qwen_tok, tmp_path):
    tasks = dbbench_batch(5, 2)
    target = SPEC.build(qwen_tok)
    base = harness_r1.run_baseline(target, ENV, tasks, base_harness("dbbench", "text"),
                                   n_per_task=2, seed=0, tokenizer=qwen_tok,
                                   config=ExecutorConfig(concurrency=8, infra_retries=0))
    pk = harness_r1.packet_from_baseline(base, 6000)
    responses = RuleBasedEngineer().propose(pk, k=3) + [RuleBasedEngineer().propose(pk)[0]]
    local = harness_r1.evaluate_group(responses, "dbbench", target, tasks, base,
                                      tokenizer=qwen_tok)
    cache_dir = str(tmp_path / "rc")
    with EvaluationPool(SPEC, workers=2, cache_dir=cache_dir) as pool:
        pooled = harness_r1.evaluate_group(responses, "dbbench", target, tasks, base,
                                           pool=pool, tokenizer=qwen_tok)
        assert pool.submitted == local.unique_patches == 3
        assert [e.reward for e in pooled.evaluations] == [e.reward for e in local.evaluations]
        assert pooled.evaluations[3].duplicate_of == 0
        # the workers share the on-disk reward cache
        again = pool.evaluate([responses[0]], "dbbench", tasks, base)[0]
        assert again.cached and again.reward == local.evaluations[0].reward
        # the target process dies mid-evaluation: infrastructure, not a score; the pool recovers
        dead = pool.evaluate([CRASH], "dbbench", tasks, base)[0]
        assert not dead.complete and dead.infra_error and not dead.scored
        assert "worker died" in dead.errors[0] and pool.lost == 1
        after = pool.evaluate([responses[1]], "dbbench", tasks, base)[0]
        assert after.complete and after.reward == local.evaluations[1].reward
