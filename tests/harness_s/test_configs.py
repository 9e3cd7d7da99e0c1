"""Harness-S experiment configs (``experiments/configs/harness_s/``): each validates against a
pool of the right size and environment, documents its command and expected result, declares
sweeps that resolve through ``harness_jax.sweeps``; bad ``harness_s`` sections are rejected when the
config is resolved (the method resolves its own section) with the path and the fix; the accelerator presets train
the steps whose memory budgets tests/experiments/test_aot.py compiles."""
import importlib
import os
import pkgutil

import pytest

from experiments.configs import harness_s as hs_configs
from harness_jax.config_problems import ConfigValidationError
from harness_jax.train import aot, spec
from harness_jax.sweeps import runner

from . import loopkit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAMES = sorted(m.name for m in pkgutil.iter_modules(hs_configs.__path__) if m.name != "common")
ACCELERATOR = ("dbbench_gpu8", "dbbench_tpu", "appworld_gpu8", "swe_gpu8")


def _module(name):
    return importlib.import_module(f"experiments.configs.harness_s.{name}")


@pytest.fixture(scope="module")
def pools(tmp_path_factory):
    d = tmp_path_factory.mktemp("pools")
    return {env: loopkit.synthetic_pool(d / env, env, n_children=9).path
            for env in ("dbbench", "appworld", "swe")}


def _devices(c):
    return c.mesh.num_devices if c.mesh.num_devices > 0 else 1


def test_the_method_baselines_ablations_and_presets_exist():
    assert {"dbbench_cpu", "grpo_only", "fixed_mixture", "random_helpers", "top_k", "fixed_profiles",
            "llm_vote", *ACCELERATOR} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_config_validates_documents_itself_and_declares_sweeps(name, pools, monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")           # llm_vote's voters read it
    mod = _module(name)
    c = mod.get_config()
    pool = pools[c.env.name]
    c = mod.get_config(pool)
    assert c.harness_s.pool == pool
    run = spec.resolve(c, num_devices=_devices(c))
    assert run.method("harness_s").pool == pool
    doc = " ".join(mod.__doc__.split())
    assert f"--config=experiments/configs/harness_s/{name}.py" in doc and "Expected result" in doc
    assert mod.SWEEPS, name
    for sweep in mod.SWEEPS:          # every override reaches its field through the launcher's flags
        sw = runner.prepare(f"experiments/configs/harness_s/{name}.py:{pool}", sweep, str(tmp_path / sweep),
                            repo_root=ROOT)
        assert len(sw.runs) >= 2 and all(r.config["harness_s"]["pool"] == pool for r in sw.runs)


def test_grpo_only_needs_no_pool_and_the_method_does():
    from experiments.configs.harness_s import dbbench_cpu, grpo_only
    assert not spec.resolve(grpo_only.get_config(), num_devices=1).method("harness_s").uses_pool
    with pytest.raises(ConfigValidationError) as ei:
        spec.resolve(dbbench_cpu.get_config(), num_devices=1)
    p = [p for p in ei.value.problems if p.path == "harness_s.pool"]
    assert p and "launch/evolve.py" in p[0].fix


def _bad(pool, mutate, environ_unset=()):
    from experiments.configs.harness_s import dbbench_cpu
    c = dbbench_cpu.get_config(pool)
    mutate(c)
    with pytest.raises(ConfigValidationError) as ei:
        spec.resolve(c, num_devices=1)
    return ei.value


def _voter(key_env):
    return ({"name": "v0", "base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": key_env,
             "temperature": 0.0, "seed": 0},)


@pytest.mark.parametrize("mutate,path,fix_word", [
    (lambda c: setattr(c.harness_s.router, "name", "oracle"), "harness_s.router.name", "features"),
    (lambda c: setattr(c.harness_s.router, "top_k", 12), "harness_s.router.top_k", "at most 9"),
    (lambda c: (setattr(c.harness_s.router, "name", "llm_vote"),
                setattr(c.harness_s.router.votes, "voters", _voter("HS_TEST_UNSET_KEY"))),
     "harness_s.router.votes.voters[0].api_key_env", "export HS_TEST_UNSET_KEY"),
    (lambda c: setattr(c.harness_s.router, "name", "llm_vote"), "harness_s.router.votes.voters", "features"),
    (lambda c: setattr(c.harness_s.rescue, "split", "half"), "harness_s.rescue.split", "split"),
    (lambda c: setattr(c.harness_s.rescue, "calibration", "none"), "harness_s.rescue.calibration", "with_original"),
    (lambda c: setattr(c.harness_s.selector, "name", "best"), "harness_s.selector.name", "h0"),
    (lambda c: setattr(c.harness_s.validation, "split", "test"), "harness_s.validation.split", "search"),
    (lambda c: setattr(c.harness_s.evolve, "editor", "magic"), "harness_s.evolve.editor", "deterministic"),
    (lambda c: setattr(c.harness_s.evolve, "diagnoser", True), "harness_s.llm.base_url", "offline"),
    (lambda c: setattr(c.harness_s, "pool", "/no/such/pool.json"), "harness_s.pool", "launch/evolve.py"),
])
def test_bad_harness_s_config_reports_path_and_fix(pools, mutate, path, fix_word):
    err = _bad(pools["dbbench"], mutate)
    hits = [p for p in err.problems if p.path == path]
    assert hits, f"expected a problem at {path}, got {[str(p) for p in err.problems]}"
    assert fix_word in hits[0].fix + hits[0].problem, str(hits[0])
    assert f"config.{path}" in str(err)


def test_empty_pool_and_wrong_environment_are_rejected(tmp_path):
    only_h0 = loopkit.synthetic_pool(tmp_path / "h0", "dbbench", n_children=0).path
    err = _bad(only_h0, lambda c: None)
    p = [p for p in err.problems if p.path == "harness_s.router"]
    assert p and "empty" in p[0].problem and "launch/evolve.py" in p[0].fix
    other = loopkit.synthetic_pool(tmp_path / "aw", "appworld", n_children=3).path
    err = _bad(other, lambda c: None)
    assert any(p.path == "harness_s.pool" and "appworld" in p.problem for p in err.problems)


# each accelerator preset's train step is the one of the preset that tests/experiments/test_aot.py
# compiles at its real pack_len for its memory budget (and lowers for TPU and CUDA)
TRAIN_STEP_OF = {"dbbench_gpu8": "experiments.configs.gpu8_qwen35_4b_dbbench",
                 "appworld_gpu8": "experiments.configs.gpu8_qwen35_4b_appworld",
                 "swe_gpu8": "experiments.configs.gpu8_qwen35_4b_appworld",
                 "dbbench_tpu": "experiments.configs.tpu_qwen35_9b"}


@pytest.mark.parametrize("name", ACCELERATOR)
def test_accelerator_presets_train_the_step_whose_budget_is_compiled(name, pools, monkeypatch):
    """A Harness-S accelerator preset resolves to exactly the train step of the preset whose AOT
    budget test_aot compiles on fake devices (same model, mesh, learner config and pack_len), so
    that compile covers it; a preset that drifts from it fails here and needs its own budget."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    mod = _module(name)
    c = mod.get_config(pools[mod.get_config().env.name])
    run = spec.resolve(c, num_devices=c.mesh.num_devices)
    base = importlib.import_module(TRAIN_STEP_OF[name]).get_config()
    assert aot.train_step_key(run) == aot.train_step_key(spec.resolve(base, num_devices=base.mesh.num_devices)), name
    assert run.mesh.num_devices == (16 if name.endswith("tpu") else 4) and run.mesh.shape[2:] == (1, 1)   # FSDP only
