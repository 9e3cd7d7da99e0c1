"""Experiment configs: every preset validates, overrides work, and bad values are reported with
their path and fix, all at once, before anything is built or compiled."""
import os
import subprocess
import sys

import pytest

from harness_jax import config_validation as cv
from experiments.configs import common, gpu8_qwen35_4b_dbbench, tiny_cpu, tpu_qwen35_9b

PRESETS = {"tiny_cpu": tiny_cpu, "gpu8_qwen35_4b_dbbench": gpu8_qwen35_4b_dbbench,
           "tpu_qwen35_9b": tpu_qwen35_9b}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_validate(name):
    cfg = PRESETS[name].get_config()
    n = cfg.mesh.num_devices if cfg.mesh.num_devices > 0 else 1
    cv.validate(cfg, num_devices=n)


def test_presets_have_docstring_command_and_result():
    for name, mod in PRESETS.items():
        doc = mod.__doc__
        assert "launch/train.py" in doc and f"experiments/configs/{name}.py" in doc, name
        assert "Expected result" in doc, name
    for mod in (gpu8_qwen35_4b_dbbench, tpu_qwen35_9b):
        assert "Memory arithmetic" in mod.__doc__


def test_every_field_of_the_schema_has_a_comment():
    src = open(common.__file__).read().splitlines()
    for line in src:
        s = line.strip()
        if (s.startswith("c.") and "=" in s and not s.endswith("ml_collections.ConfigDict()")
                and not s.startswith("c.model.overrides =")):
            assert "#" in s, f"field without a one-line comment: {s}"


def _bad(mutate, num_devices=1):
    cfg = tiny_cpu.get_config()
    mutate(cfg)
    with pytest.raises(cv.ConfigValidationError) as ei:
        cv.validate(cfg, num_devices=num_devices)
    return ei.value


@pytest.mark.parametrize("mutate,path,fix_word", [
    (lambda c: setattr(c.env, "name", "no_such_env"), "env.name", "use one of"),
    (lambda c: setattr(c.rl, "group_size", 1), "rl.group_size", "group_size=4"),
    (lambda c: setattr(c.mesh, "shape", (1, 3, 1, 1)), "mesh.shape", "equal 1"),
    (lambda c: setattr(c.mesh, "shape", (1, -1, -1, 1)), "mesh.shape", "-1"),
    (lambda c: setattr(c.model, "init_from", "/no/such/ckpt"), "model.init_from", "existing"),
    (lambda c: setattr(c.model, "hf_path", "/no/such/hf"), "model.hf_path", "checkpoint directory"),
    (lambda c: setattr(c.model, "preset", "no_such_preset"), "model.preset", "use one of"),
    (lambda c: setattr(c.env, "train_split", "test"), "env.train_split", "selection"),
    (lambda c: setattr(c.env, "eval_split", "test"), "env.eval_split", "evaluate.py"),
    (lambda c: setattr(c.rollout, "temperature", 0.0), "rollout.temperature", "1.0"),
    (lambda c: setattr(c.rollout, "mode", "disaggregated"), "rollout.engine", "sglang"),
    (lambda c: (setattr(c.rollout, "mode", "disaggregated"), setattr(c.rollout, "engine", "sglang")),
     "rollout.server_urls", "serve.py"),
    (lambda c: setattr(c.rollout, "mode", "sideways"), "rollout.mode", "colocated"),
    (lambda c: setattr(c.rl, "agg", "mean_of_means"), "rl.agg", "token_mean"),
    (lambda c: setattr(c.rl, "eps_low", 1.5), "rl.eps_low", "0.2"),
    (lambda c: setattr(c.rl, "dynamic_sampling", "maybe"), "rl.dynamic_sampling", "oversample"),
    (lambda c: (setattr(c.rl, "async_mode", True), setattr(c.rl, "max_staleness", 0)),
     "rl.max_staleness", ">= 1"),
    (lambda c: setattr(c.rl, "pack_len", 64), "rl.pack_len", "max_new_tokens"),
    (lambda c: setattr(c.opt, "lr", 0.0), "opt.lr", "1e-6"),
    (lambda c: setattr(c.eval, "k", 3), "eval.k", "temperature"),
    (lambda c: setattr(c.sft, "num_demos", 2), "sft.num_demos", "batch_size"),
    (lambda c: setattr(c.model, "dtype", "float8"), "model.dtype", "bfloat16"),
    (lambda c: c.model.overrides.__setitem__("hidden_sizes", 3), "model.overrides.hidden_sizes", "remove"),
    (lambda c: c.model.overrides.__setitem__("num_key_value_heads", 3), "model.overrides", "consistent"),
    (lambda c: setattr(c.harness, "spec", "/no/such/harness.json"), "harness.spec", "JSON/YAML"),
])
def test_bad_config_reports_path_and_fix(mutate, path, fix_word):
    err = _bad(mutate)
    hits = [p for p in err.problems if p.path == path]
    assert hits, f"expected a problem at {path}, got {[str(p) for p in err.problems]}"
    assert fix_word in hits[0].fix + hits[0].problem, str(hits[0])
    assert f"config.{path}" in str(err)


def test_all_problems_reported_at_once():
    def mutate(c):
        c.rl.group_size = 1
        c.opt.lr = -1.0
        c.env.name = "nope"
    err = _bad(mutate)
    assert {"rl.group_size", "opt.lr", "env.name"} <= {p.path for p in err.problems}


def test_mesh_device_count_mismatch_for_preset():
    cfg = gpu8_qwen35_4b_dbbench.get_config()
    with pytest.raises(cv.ConfigValidationError) as ei:
        cv.validate(cfg, num_devices=8)
    assert any(p.path == "mesh.num_devices" for p in ei.value.problems)


def test_resolve_mesh_shape():
    assert cv.resolve_mesh_shape((1, -1, 2, 1), 8) == (1, 4, 2, 1)
    assert cv.resolve_mesh_shape((2, 2, 2, 1), 8) == (2, 2, 2, 1)


def test_command_line_overrides_and_lock(tmp_path):
    """The launcher's flag parsing: overrides apply, unknown fields are refused (lock_config)."""
    code = (
        "import sys; from absl import flags; from ml_collections import config_flags;"
        "cfg = config_flags.DEFINE_config_file('config', lock_config=True);"
        "flags.FLAGS(sys.argv); c = flags.FLAGS.config;"
        "print(c.rl.group_size, c.rollout.max_len, c.model.overrides.hidden_size)")
    base = [sys.executable, "-c", code, "--config=experiments/configs/tiny_cpu.py"]
    out = subprocess.run(base + ["--config.rl.group_size=8", "--config.rollout.max_len=1024",
                                 "--config.model.overrides.hidden_size=64"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["8", "1024", "64"]
    bad = subprocess.run(base + ["--config.rl.group_sizes=8"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode != 0 and "group_sizes" in bad.stderr
