"""Harness-R1 on the real ALFWorld engine (generated games): baseline, packet, a rule-based
overlay that validates for ALFWorld, and exact pairing (a patch that never fires gives
Delta_B = 0) under a sampling target (``doubles.RandomWalker``, a test double)."""
import pytest

pytest.importorskip("alfworld")
pytest.importorskip("fast_downward")

from harness_jax import harness_r1  # noqa: E402
from harness_jax.envs import registry  # noqa: E402
from harness_jax.harness.executor import ExecutorConfig  # noqa: E402
from harness_jax.harness.presets import base_harness  # noqa: E402
from harness_jax.harness.specs import ExecutionRules  # noqa: E402
from harness_jax.harness_r1 import prompt  # noqa: E402
from harness_jax.harness_r1.engineers import RuleBasedEngineer  # noqa: E402
from tests.harness_r1.doubles import RandomWalker  # noqa: E402

NEVER = {"schema_version": "harness-r1-patch-v1", "benchmark": "alfworld", "actions": [
    {"type": "add_code_hook", "hook": "on_post_step",
     "code": "def hook(ctx, nb):\n    if ctx.turn > 999:\n"
             "        return {'kind': 'inject_hint', 'message': 'x'}\n    return None\n"}]}


@pytest.mark.slow
def test_alfworld_baseline_packet_and_pairing(qwen_tok, tmp_path):
    tasks = registry.load_split("alfworld", "train", n=2, seed=0, cache_dir=str(tmp_path))
    env = harness_r1.EnvRef("alfworld", {"protocol": "text"})
    h = base_harness("alfworld", "text", rules=ExecutionRules(max_turns=6))
    target = harness_r1.frozen(RandomWalker(qwen_tok), model="random-walker", version="1")
    cfg = ExecutorConfig(concurrency=1, infra_retries=0)   # the engine is not thread-safe
    base = harness_r1.run_baseline(target, env, tasks, h, n_per_task=2, seed=0, config=cfg,
                                   tokenizer=qwen_tok,
                                   cache=harness_r1.BaselineCache(str(tmp_path / "bl")))
    assert base.complete and len(base.trajectories) == 4
    pk = harness_r1.packet_from_baseline(base, 3000)
    assert pk.num_failures >= 1 and pk.est_tokens <= 3000
    assert "AVAILABLE ACTIONS" in pk.text and "TASK: " in pk.text
    assert pk.features["failure_modes"].get("ran_out_of_turns", 0) >= 1
    response = RuleBasedEngineer().propose(pk)[0]
    res = prompt.validate_response(response, "alfworld")
    assert res.ok, res.errors
    hooks = {a["hook"] for a in res.patch.actions}
    # ALFWorld has no answer action: no answer guards; stalls get the repeat guard and recovery
    assert "def final" not in response and {"on_before_action", "on_post_step"} <= hooks
    ev = harness_r1.evaluate_patch(response, "alfworld", target, tasks, base,
                                   tokenizer=qwen_tok)
    assert ev.valid and ev.complete
    noop = harness_r1.evaluate_patch(NEVER, "alfworld", target, tasks, base, tokenizer=qwen_tok)
    assert noop.noop and noop.delta == 0.0 and noop.patched == noop.baseline
