"""``evolve_run.evolve_main`` (what ``launch/evolve.py`` runs) in process, with the scripted policy
(``ReactivePolicy``, a test double for a trained policy on the engine) behind a real
``EpisodeRunner``: the pool is written with provenance, a rerun replays every finished rollout and
writes the same pool; and every field of the ``harness_s`` section is read when the config is
resolved (the config wrapped in the schema test's recorder) and used by the code that evolves,
trains (the loop extension), re-anchors and routes at evaluation."""
import dataclasses
import json

import pytest

from harness_jax import harness_s
from harness_jax.envs import dbbench
from harness_jax.harness_s import config as hs_config, evolve_run, rank1, training
from harness_jax.train import builders, evaluation
from harness_jax.train.workdir import RunPaths
from tests.experiments.test_configs import _code_attribute_reads, _leaves, _Recorder

from . import loopkit


def _config():
    c = loopkit.config()
    c.env.num_tasks = 64
    c.env.dbbench.categories = ("counting", "aggregation-SUM", "DELETE")
    hs = c.harness_s
    hs.validation.num_tasks = 6
    hs.validation.k = 1
    hs.evolve.num_train_tasks = 6
    hs.evolve.max_generations = 1
    hs.evolve.max_child_evaluations = 6
    return c


@pytest.fixture()
def scripted(monkeypatch, qwen_tok):
    """``policy_runner`` replaced by the scripted policy on a real runner (records the configs)."""
    c = _config()
    e = c.harness_s.evolve
    env = loopkit.resolve(c).env
    tasks = (builders.load_tasks(env, env.train_split, n=e.num_train_tasks, seed_offset=e.seed_offset)
             + builders.load_tasks(env, c.harness_s.validation.split, n=c.harness_s.validation.num_tasks))
    policy = loopkit.policy_for(qwen_tok, tasks)

    def policy_runner(run, workdir, *, checkpoint="", pool_version=""):
        runner = loopkit.runner(run, policy, lambda: dbbench.DBBenchEnv(engine="sqlite", protocol="text"),
                                qwen_tok, pool_version=pool_version)
        return evaluation.PolicyRunner(runner, policy, qwen_tok, "scripted-v7", RunPaths.of(workdir))
    monkeypatch.setattr(evaluation, "policy_runner", policy_runner)
    return c, policy


def test_evolve_main_writes_a_pool_and_a_rerun_replays_it(scripted, tmp_path):
    c, _ = scripted
    s1 = evolve_run.evolve_main(c, str(tmp_path / "w"))
    pool = harness_s.load_pool(s1["pool"])
    assert len(pool) > 1 and pool.entries[0].policy_version == "scripted-v7"
    assert s1["joint_coverage"] >= s1["best_single_solved"] >= s1["h0_solved"]
    assert s1["joint_coverage"] > s1["h0_solved"]                     # children fix H0's failures
    assert s1["rollouts_run"] >= 3 and s1["rollouts_replayed"] == 0
    s2 = evolve_run.evolve_main(c, str(tmp_path / "w"))
    assert s2["pool"] == s1["pool"] and s2["rollouts_run"] == 0 and s2["rollouts_replayed"] == s1["rollouts_run"]
    gens = [json.loads(x) for x in open(tmp_path / "w" / "evolve" / "generations.jsonl")]
    assert len(gens) == 1 and gens[0]["accepted"] == len(pool) - 1


def test_every_field_of_the_harness_s_section_is_read(scripted, tmp_path, chat_server):
    c, policy = scripted
    s = evolve_run.evolve_main(c, str(tmp_path / "evo"))
    c.harness_s.pool = s["pool"]
    c.harness_s.reanchor.every_steps = 1
    c.harness_s.selector.name = "mixture"
    c.harness_s.reanchor.llm_profiles = True          # profiles by the scripted endpoint (real HTTP)
    c.harness_s.llm.base_url, c.harness_s.llm.model = chat_server.url, "m"
    log = set()
    run = loopkit.resolve(_Recorder(c, log))
    want = {"harness_s." + k for k in _leaves(harness_s.harness_s_section())}
    assert not sorted(want - log), f"harness_s fields the resolution does not read: {sorted(want - log)}"
    hs = run.method("harness_s")
    runner = loopkit.runner(run, policy, lambda: dbbench.DBBenchEnv(engine="sqlite", protocol="text"), policy.tok)
    try:
        ext = training.HarnessSExtension(hs)
        ext.attach(loopkit.context(run, runner, RunPaths.of(str(tmp_path / "run"))))
        ext.reanchor(runner, "1")
        rank1.rank1_router(hs, ext.pool)
    finally:
        runner.close()
    assert chat_server.requests                       # the profiler asked (and fell back offline)
    used = _code_attribute_reads(exclude=(hs_config.__file__,))
    specs = [hs_config.HarnessSSpec, hs_config.RescueSpec, hs_config.ValidationSpec, hs_config.EvolveSpec,
             hs_config.LLMSpec, hs_config.RouterConfig]
    unused = sorted(f"{cls.__name__}.{f.name}" for cls in specs for f in dataclasses.fields(cls) if f.name not in used)
    assert not unused, f"harness_s spec fields no code reads: {unused}"
