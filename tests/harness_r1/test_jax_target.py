"""Paired reruns with the real embedded JAX engine as the sampling target (the tiny random
Qwen3.5 checkpoint with a byte-level tokenizer, as in tests/harness/test_executor_jax.py): a
patch that never fires reproduces every sampled token of the baseline (so Delta_B = 0 exactly),
while another seed samples different tokens."""
import dataclasses

import pytest

from harness_jax import harness_r1
from harness_jax.harness.executor import ExecutorConfig
from harness_jax.harness.specs import ExecutionRules, HarnessSpec, MemoryPolicy
from tests.harness.test_executor_jax import byte_tokenizer  # noqa: F401  (fixture)
from tests.harness_r1.doubles import dbbench_batch

NEVER = {"schema_version": "harness-r1-patch-v1", "benchmark": "dbbench", "actions": [
    {"type": "add_code_hook", "hook": "on_post_step",
     "code": "def hook(ctx, nb):\n    if ctx.turn > 999:\n"
             "        return {'kind': 'inject_hint', 'message': 'x'}\n    return None\n"}]}


@pytest.mark.slow
def test_noop_patch_replays_the_jax_targets_tokens(tiny_hf_dense_dir, byte_tokenizer):  # noqa: F811
    tok = byte_tokenizer
    spec = harness_r1.TargetSpec(kind="jax", model=tiny_hf_dense_dir, options={
        "max_slots": 4, "max_len": 512, "prefill_buckets": [64], "decode_steps": 4})
    target = spec.build(tok)
    try:
        tasks = dbbench_batch(1, 1, ["counting"])
        env = harness_r1.EnvRef("dbbench", {"engine": "sqlite", "protocol": "text"})
        h = HarnessSpec(system_prompt="Answer.", temperature=1.0,
                        rules=ExecutionRules(max_turns=2, max_tokens_per_turn=8,
                                             on_unparsable="pass_raw"),
                        memory=MemoryPolicy(max_context_tokens=512))
        cfg = ExecutorConfig(concurrency=2, infra_retries=0)
        base = harness_r1.run_baseline(target, env, tasks, h, n_per_task=2, seed=7, config=cfg,
                                       tokenizer=tok)
        assert base.complete
        rerun = []
        ev = harness_r1.evaluate_patch(NEVER, "dbbench", target, tasks, base, tokenizer=tok,
                                       store=rerun)
        assert ev.complete and ev.noop and ev.delta == 0.0
        sampled = {t.meta["sampling_key"]: t.segments[0].token_ids for t in base.trajectories}
        again = {t.meta["sampling_key"]: t.segments[0].token_ids for t in rerun}
        assert again == sampled and len(sampled) == 2
        other = harness_r1.run_baseline(target, env, tasks, h, n_per_task=2, seed=8,
                                        config=cfg, tokenizer=tok)
        assert {t.meta["sampling_key"]: t.segments[0].token_ids
                for t in other.trajectories} != sampled
        assert dataclasses.asdict(target.identity)["kind"] == "jax"
    finally:
        target.close()
