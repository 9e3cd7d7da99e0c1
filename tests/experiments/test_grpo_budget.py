"""harness_s/grpo_budget (issue 25 item 5): the config resolves and validates, differs from the
GRPO-only control only in the update budget and evaluation its docstring names, and its
docstring carries the pre-registered criterion, the commands and the measured result."""
from harness_jax.train import spec
from experiments.configs.harness_s import grpo_budget, grpo_only


def _leaves(c, prefix=""):
    out = {}
    for k, v in c.items():
        p = f"{prefix}{k}"
        if hasattr(v, "items"):
            out.update(_leaves(v, p + "."))
        else:
            out[p] = v
    return out


def test_config_resolves_with_its_update_budget():
    cfg = grpo_budget.get_config()
    cfg.model.init_from = "/tmp/hs/sft"      # the README main job's warm start (not read here)
    cfg.sft.enabled = False
    run = spec.resolve(cfg, num_devices=1, check_paths=False)
    assert run.learner.loss.neg_adv_weight == cfg.rl.neg_adv_weight
    assert run.loop.eval.num_tasks >= 256 and run.loop.eval.greedy


def test_only_the_named_fields_differ_from_the_control():
    a, b = _leaves(grpo_budget.get_config()), _leaves(grpo_only.get_config())
    assert set(a) == set(b)
    changed = {k for k in a if a[k] != b[k]}
    assert changed == set(grpo_budget.CHANGED), changed ^ set(grpo_budget.CHANGED)


def test_docstring_preregisters_the_criterion_and_states_the_result():
    doc = " ".join(grpo_budget.__doc__.split())
    assert "launch/train.py --config=experiments/configs/harness_s/grpo_budget.py" in doc
    assert "launch/evaluate.py" in doc and "--baseline=" in doc
    assert "Pre-registered criterion" in doc and "Expected result (measured" in doc
