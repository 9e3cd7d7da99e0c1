"""The method registry (methods found by their package's ``method.py``, their sections resolved
with the config, their extensions picked for a plain run; a method that trains elsewhere is
refused), the resumable stage runner, and the asynchronous producer's admission bound."""
import time

import pytest

from harness_jax.train import extensions, spec
from harness_jax.train.collect import Batch
from harness_jax.train.producer import AsyncProducer
from harness_jax.train.stages import StageMismatch, Stages

from tests.train import doubles


def test_methods_register_themselves_and_the_launcher_imports_none():
    found = extensions.methods()
    assert {"harness_s", "r1"} <= set(found)
    assert found["r1"].trained_by == "launch/engineer.py" and "rank1" in found["harness_s"].routings
    src = open("launch/train.py").read()
    assert "harness_s" not in src.split('"""', 2)[2] and "harness_r1" not in src      # only in the docstring


def test_a_plain_config_has_no_method_and_a_methods_section_is_resolved(tmp_path):
    from experiments.configs.harness_r1 import tiny_cpu
    from experiments.configs.harness_s import grpo_only

    assert spec.resolve(doubles.tiny_config(), num_devices=1).methods == {}
    assert extensions.for_run(spec.resolve(doubles.tiny_config(), num_devices=1)) == []
    hs = spec.resolve(grpo_only.get_config(), num_devices=1)
    assert set(hs.methods) == {"harness_s"} and extensions.for_run(hs) == []     # GRPO only: no pool, no extension
    r1 = spec.resolve(tiny_cpu.get_config(), num_devices=1)
    with pytest.raises(ValueError, match="config.r1: this method trains with launch/engineer.py"):
        extensions.for_run(r1)


def test_a_registered_method_resolves_its_section_and_reports_its_problems(monkeypatch):
    import ml_collections

    from harness_jax.train.extensions import Extension, Method

    class Probe(Extension):
        name = "probe"

    def resolve(config, bad, check_paths):
        if config.probe.level < 0:
            bad("probe.level", config.probe.level, "must be >= 0", "set --config.probe.level=1")
        return int(config.probe.level)

    monkeypatch.setattr(extensions, "_METHODS", dict(extensions.methods()))
    extensions.register(Method(section="probe", resolve=resolve, extensions=lambda level, run: [Probe()] * level))
    c = doubles.tiny_config()
    c.probe = ml_collections.ConfigDict({"level": 2})
    run = spec.resolve(c, num_devices=1)
    assert run.method("probe") == 2 and [e.name for e in extensions.for_run(run)] == ["probe", "probe"]
    c.probe.level = -1
    c.rl.group_size = 1
    assert {p.path for p in spec.find_problems(c, num_devices=1)} >= {"probe.level", "rl.group_size"}
    with pytest.raises(ValueError, match="already owned"):      # a second module cannot take the section
        extensions.register(Method(section="probe", resolve=spec.find_problems))


def test_stages_skip_what_finished_and_refuse_other_inputs(tmp_path):
    stages = Stages(str(tmp_path), "v1")
    calls = []
    info = stages.run("a", {"x": 1}, lambda: calls.append(1) or {"n": 3})
    assert info["n"] == 3 and info["wall_s"] >= 0 and calls == [1]
    assert stages.run("a", {"x": 1}, lambda: calls.append(2) or {"n": 4})["n"] == 3 and calls == [1]
    assert stages.marker("a")["key"] == stages.key({"x": 1}) != Stages(str(tmp_path), "v2").key({"x": 1})
    with pytest.raises(StageMismatch, match="stage 'a' already ran with a different configuration"):
        stages.run("a", {"x": 2}, lambda: {"n": 5})
    assert stages.done("b", "k") is None


def test_the_producer_admits_batch_i_only_within_the_staleness_bound():
    done = {"steps": 0}
    admitted = []

    def collect(i):
        admitted.append((i, done["steps"]))
        return Batch(step=i, groups=[], stream_state_before={"i": i})

    stream = type("S", (), {"state": lambda self: {"i": -1}})()
    producer = AsyncProducer(collect, stream, num_steps=6, max_staleness=2)
    producer.start(0)
    try:
        for step in range(6):
            batch = producer.get()
            assert batch.step == step
            time.sleep(0.05)                              # the learner is slower than collection
            done["steps"] = step + 1
            producer.step_done(step + 1)
    finally:
        producer.close()
    assert [i for i, _ in admitted] == list(range(6))
    assert all(i - steps <= 2 for i, steps in admitted)  # never more than max_staleness ahead
    assert any(i - steps == 2 for i, steps in admitted)  # and it does run ahead


def test_a_failing_producer_surfaces_in_the_learner_thread():
    def collect(i):
        raise KeyError("no tasks")

    stream = type("S", (), {"state": lambda self: {}})()
    producer = AsyncProducer(collect, stream, num_steps=2, max_staleness=1)
    producer.start(0)
    try:
        with pytest.raises(RuntimeError, match="rollout producer failed"):
            producer.get()
    finally:
        producer.close()
