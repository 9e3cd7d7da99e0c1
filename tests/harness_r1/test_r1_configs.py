"""Harness-R1 presets (experiments/configs/harness_r1): they resolve, document their command and
expected result, name their sweeps, reject bad values with the path and the fix (all at once,
before anything is built), and the TPU preset's engineer train step lowers for its 16-device mesh
on CPU fake devices (the GPU preset's is compiled at its real pack_len by
tests/experiments/test_aot.py, beside the agent presets)."""
import os

import pytest

from experiments.configs.harness_r1 import gpu8, tiny_cpu, tpu
from harness_jax.config_problems import ConfigValidationError
from harness_jax.envs import registry
from harness_jax.harness_r1 import config as r1_config
from harness_jax.train import spec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCHES = [b for b in gpu8.BENCHMARKS if b in registry.config_sections()]


@pytest.mark.parametrize("mod,n", [(gpu8, 4), (tpu, 16)])
@pytest.mark.parametrize("bench", BENCHES)
def test_accelerator_presets_validate(mod, n, bench):
    c = mod.get_config(bench)
    run = spec.resolve(c, num_devices=n)
    assert run.method("r1").target.spec().kind == "sglang"
    assert c.env.name == bench and c.rl.agg == "seq_mean_token_mean" and c.rl.tis_mode == "cap"
    assert c.rl.async_mode and c.rl.max_staleness == 4 and c.rl.group_size == 8
    assert c.r1.target.kind == "sglang"


def test_tiny_preset_validates_and_documents_itself():
    c = tiny_cpu.get_config()
    r1 = spec.resolve(c, num_devices=1).method("r1")
    assert r1.target.spec().options == {"kwargs": {"seed": 0}}       # typed options, no JSON strings
    for mod, cmd in ((tiny_cpu, "launch/engineer.py --config=experiments/configs/harness_r1/tiny_cpu.py"),
                     (gpu8, "launch/engineer.py --config=experiments/configs/harness_r1/gpu8.py:dbbench"),
                     (tpu, "launch/engineer.py --config=experiments/configs/harness_r1/tpu.py:dbbench")):
        doc = " ".join(mod.__doc__.split())
        assert cmd in doc and "Expected result" in doc, mod.__name__
    assert set(tiny_cpu.SWEEPS) == {"seeds"}
    with pytest.raises(ValueError, match="benchmark"):
        gpu8.get_config("swe")


def test_every_r1_field_has_a_comment_and_a_type():
    from tests.experiments.test_configs import _leaves, _section_fields

    fields = _section_fields(r1_config.__file__)
    assert len(fields) > 40
    for target, line in fields:
        assert "#" in line, f"field without a one-line comment: {target}"
    d = r1_config.r1_section()
    leaves = list(_leaves(d))
    assert "target.options.kwargs" in leaves or "target.options.max_len" in leaves

    def value(path):
        node = d
        for part in path.split("."):
            node = node[part]
        return node
    json_like = [k for k in leaves if isinstance(value(k), str) and value(k).strip()[:1] in ("{", "[")]
    assert not json_like, f"JSON strings in the r1 section: {json_like}"


def test_the_seed_sweep_resolves_through_the_launchers_flags():
    from harness_jax.sweeps.spec import expand

    runs = expand(os.path.join(ROOT, "experiments/configs/harness_r1/tiny_cpu.py"), "seeds", ROOT)
    assert [r.overrides for r in runs] == [{"seed": 0}, {"seed": 1}, {"seed": 2}]
    assert [r.config["seed"] for r in runs] == [0, 1, 2]


def _bad(mutate):
    c = tiny_cpu.get_config()
    mutate(c)
    with pytest.raises(ConfigValidationError) as ei:
        spec.resolve(c, num_devices=1)
    return ei.value


@pytest.mark.parametrize("mutate,path,fix_word", [
    (lambda c: setattr(c.r1.target, "kind", "grpc"), "r1.target.kind", "sglang"),
    (lambda c: setattr(c.r1.target.options, "tool_mode", "xml"), "r1.target.options", "unknown option"),
    (lambda c: setattr(c.r1.target.options.kwargs, "seed", 5), "r1.target.options.kwargs", "kwargs.seed=0"),
    (lambda c: (setattr(c.r1.target, "kind", "sglang"), setattr(c.r1.target.options, "kwargs", {})),
     "r1.target.urls", "server URL"),
    (lambda c: (setattr(c.r1.target, "kind", "jax"), setattr(c.r1.target, "model", "/no/such/hf"),
                setattr(c.r1.target.options, "kwargs", {})), "r1.target.model", "save_hf"),
    (lambda c: setattr(c.r1.packets, "train_batches", 0), "r1.packets.train_batches", "train_batches >= 1"),
    (lambda c: setattr(c.r1.packets, "budget_tokens", 50), "r1.packets.budget_tokens", ">= 200"),
    (lambda c: setattr(c.r1.teacher, "kind", "oracle"), "r1.teacher.kind", "endpoint"),
    (lambda c: setattr(c.r1.teacher, "kind", "endpoint"), "r1.teacher.base_url", "kind=rule"),
    (lambda c: (setattr(c.r1.teacher, "kind", "endpoint"), setattr(c.r1.teacher, "base_url", "http://h/v1"),
                setattr(c.r1.teacher, "api_key_env", "sk-123 secret")), "r1.teacher.api_key_env", "NAME"),
    (lambda c: setattr(c.r1, "sft_agg", "sum"), "r1.sft_agg", "dataset_token_mean"),
    (lambda c: setattr(c.r1, "eval_attempts", 0), "r1.eval_attempts", ">= 1"),
    (lambda c: (setattr(c.rl, "async_mode", True), setattr(c.rl, "max_staleness", 8)),
     "rl.max_staleness", "1..4"),
    (lambda c: setattr(c.rl, "tis_mode", "clip"), "rl.tis_mode", "literal"),
    (lambda c: setattr(c.r1.table, "arms", ("default", "oracle")), "r1.table.arms[1]", "grpo"),
    (lambda c: setattr(c.r1.table, "arms", ("prompt",)), "r1.table.prompt_base_url", "prompt_model"),
    (lambda c: setattr(c.r1.table, "transfer_targets", ({"kind": "chat"},)), "r1.table.transfer_targets[0]",
     "'kind': 'chat'"),
    (lambda c: (setattr(c.env, "name", "alfworld"), setattr(c.r1.target, "concurrency", 4)),
     "r1.target.concurrency", "concurrency=1"),
])
def test_bad_r1_config_reports_path_and_fix(mutate, path, fix_word):
    err = _bad(mutate)
    hits = [p for p in err.problems if p.path == path]
    assert hits, f"expected a problem at {path}, got {[str(p) for p in err.problems]}"
    assert fix_word in hits[0].fix + hits[0].problem, str(hits[0])
    assert f"config.{path}" in str(err)
    assert "sk-123" not in str(err)                       # a key given by mistake is never echoed


def test_too_long_engineer_sequences_are_refused(tmp_path):
    """Nothing is truncated silently: prompts that do not fit the engine or the packer fail with
    the field and the fix."""
    from types import SimpleNamespace

    from harness_jax.harness_r1 import pipeline

    c = tiny_cpu.get_config()
    c.rollout.max_len = 256
    c.rollout.max_new_tokens = 96
    pk = SimpleNamespace(text="x " * 400, env_name="dbbench")

    class DS:
        def splits(self):
            return ["train"]

        def load(self, split):
            return [pk]

    class Tok:
        def encode(self, text, add_special_tokens=False):
            return list(range(len(text) // 4))

    with pytest.raises(ValueError, match="config.rollout.max_len.*Fix: raise"):
        pipeline.check_lengths(spec.resolve(c, num_devices=1), DS(), Tok(), [])
    c.rollout.max_len, c.rl.pack_len = 4096, 600
    with pytest.raises(ValueError, match="config.rl.pack_len.*Fix: set"):
        pipeline.check_lengths(spec.resolve(c, num_devices=1), DS(), Tok(),
                               [{"prompt_ids": [0] * 700, "response_ids": [1] * 200}])


# The GPU preset's engineer train step (9B, tensor 4, 32 micro-batches of one row) is compiled at
# its real 32k pack_len by tests/experiments/test_aot.py::test_gpu_presets_memory_budget_at_their_real_pack_len,
# which also asserts its mesh, parameter count and rows (a compile at 256 tokens here repeated it).


def test_tpu_preset_trains_one_step_for_every_benchmark():
    """The TPU engineer preset's train step is the same for every benchmark argument (same model,
    mesh, learner config and pack_len), so tests/experiments/test_aot.py's budget compile of its
    'dbbench' form (16 fake devices, real pack_len; 9B parameters, 32 rows) covers them all."""
    from experiments.configs.harness_r1 import gpu8, tpu
    from harness_jax.train import aot

    keys = {b: aot.train_step_key(spec.resolve(tpu.get_config(b), num_devices=16, check_paths=False))
            for b in gpu8.BENCHMARKS}
    assert len(keys) == 3 and all(k == keys["dbbench"] for k in keys.values())
    assert keys["dbbench"][1]["num_devices"] == 16


def test_policy_target_preset_validates_and_rejects_a_missing_hf_dir(tiny_hf_dense_dir, tmp_path):
    """tiny_cpu_policy: a trained policy (an HF dir, config argument) on its own DBBench family; a
    missing or incomplete dir, and a dir whose own tokenizer would be ignored, are rejected with
    the path and the fix before anything is built."""
    from experiments.configs import cpu_learnable
    from experiments.configs.harness_r1 import tiny_cpu_policy

    c = tiny_cpu_policy.get_config(str(tiny_hf_dense_dir))
    spec.resolve(c, num_devices=1)
    assert c.r1.target.kind == "jax" and c.r1.target.model == c.r1.target.tokenizer == str(tiny_hf_dense_dir)
    assert c.harness.spec == cpu_learnable.H0_MINIMAL and c.r1.target.temperature == 0.0   # greedy re-runs
    assert (c.r1.effect_surface, c.r1.reward.invalid_reward, c.r1.teacher.filter_by_delta,
            c.r1.packets.n_per_task) == ("contract", -0.25, True, 1)   # as pre-registered in its docstring
    assert (c.env.dbbench.domain, c.env.dbbench.table_name, c.env.dbbench.describe_table) == ("player", "players", False)
    assert "tiny_cpu_policy.py:" in " ".join(tiny_cpu_policy.__doc__.split())

    with pytest.raises(ConfigValidationError) as ei:
        spec.resolve(tiny_cpu_policy.get_config("/no/such/policy"), num_devices=1)
    [p] = [p for p in ei.value.problems if p.path == "r1.target.model"]
    assert p.value == "/no/such/policy" and "hf_final" in p.fix and "/no/such/policy" in str(ei.value)

    (tmp_path / "tokenizer.json").write_text("{}")        # a dir with no config/weights, own tokenizer
    c = tiny_cpu_policy.get_config(str(tmp_path))
    c.r1.target.tokenizer = ""
    with pytest.raises(ConfigValidationError) as ei:
        spec.resolve(c, num_devices=1)
    paths = {p.path: p for p in ei.value.problems}
    assert "config.json and *.safetensors" in paths["r1.target.model"].problem
    assert f"--config.r1.target.tokenizer={tmp_path}" in paths["r1.target.tokenizer"].fix
