"""Registry, splits and the sealed test split (enforced: outside evaluation entry points,
inside training scopes, and from training/evolution modules)."""
import json

import pytest

from harness_jax.envs import Task, registry
from harness_jax.envs import dbbench
from harness_jax.envs.dbbench import generator


def test_make_by_name_and_unknown_names():
    env = registry.make("dbbench", engine="sqlite", protocol="function")
    assert isinstance(env, dbbench.DBBenchEnv) and env.protocol == "function"
    env.close()
    assert {"dbbench", "alfworld", "textworld"} <= set(registry.names())
    with pytest.raises(KeyError, match="registered"):
        registry.make("no_such_env")
    with pytest.raises(ValueError, match="split="):
        registry.load_split("dbbench", "validation")


def test_generated_splits_are_deterministic_and_disjoint():
    by_split = {s: registry.load_split("dbbench", s, n=12, seed=3)
                for s in ("train", "search", "selection")}
    again = registry.load_split("dbbench", "train", n=12, seed=3)
    assert [t.task_id for t in again] == [t.task_id for t in by_split["train"]]
    ids = [{t.task_id for t in ts} for ts in by_split.values()]
    assert all(len(x) == 12 for x in ids)
    assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    assert all(t.split == s for s, ts in by_split.items() for t in ts)
    assert registry.split_seed("train", 0) != registry.split_seed("test", 0)


def test_test_split_is_sealed_outside_evaluation():
    with pytest.raises(registry.SealedSplitError, match="sealed_test_access"):
        registry.load_split("dbbench", "test", n=2)
    with pytest.raises(registry.SealedSplitError):
        dbbench.generate_tasks(2, split="test")
    with pytest.raises(registry.SealedSplitError):
        dbbench.tasks_from_items(generator.generate_items(1, seed=0), split="test")
    from harness_jax.envs import textworld_env
    with pytest.raises(registry.SealedSplitError):
        textworld_env.make_task("tw-coin_collector", {"level": 1}, split="test")
    with registry.sealed_test_access("final evaluation in a unit test"):
        tasks = registry.load_split("dbbench", "test", n=2)
        assert registry.current_test_access() == "final evaluation in a unit test"
    assert [t.split for t in tasks] == ["test", "test"]
    assert registry.current_test_access() is None
    with pytest.raises(ValueError, match="reason"):
        with registry.sealed_test_access(""):
            pass


def test_training_scopes_and_training_modules_cannot_unseal():
    with registry.training_scope("grpo run"):
        with pytest.raises(registry.SealedSplitError, match="training_scope"):
            with registry.sealed_test_access("sneaky"):
                pass
    with registry.sealed_test_access("evaluation"):
        with registry.training_scope("callback inside eval"):
            with pytest.raises(registry.SealedSplitError, match="training_scope"):
                registry.load_split("dbbench", "test", n=1)
    # code living in a training module (here: compiled as harness_jax.rl.<name>) is refused
    # even when it tries to open the seal itself
    src = ("def load():\n"
           "    with registry.sealed_test_access('trying'):\n"
           "        return registry.load_split('dbbench', 'test', n=1)\n")
    ns = {"__name__": "harness_jax.rl.sim_trainer", "registry": registry}
    exec(compile(src, "sim_trainer.py", "exec"), ns)
    with pytest.raises(registry.SealedSplitError, match="harness_jax.rl.sim_trainer"):
        ns["load"]()
    ns_eval = {"__name__": "harness_jax.eval.sim_eval", "registry": registry}
    exec(compile(src, "sim_eval.py", "exec"), ns_eval)
    assert len(ns_eval["load"]()) == 1


def test_assert_no_test_tasks_guards_training_inputs():
    ok = [Task("dbbench", {"x": 1}, split="train")]
    registry.assert_no_test_tasks(ok)
    with pytest.raises(registry.SealedSplitError, match="1 test-split"):
        registry.assert_no_test_tasks(ok + [Task("dbbench", {"x": 2}, split="test")])


def test_file_backed_splits_partition_by_content_hash(tmp_path):
    items = generator.generate_items(60, seed=11)
    path = tmp_path / "items.jsonl"
    path.write_text("\n".join(json.dumps(i) for i in items))
    parts = {s: registry.load_split("dbbench", s, path=str(path))
             for s in ("train", "search", "selection")}
    with registry.sealed_test_access("partition test"):
        parts["test"] = registry.load_split("dbbench", "test", path=str(path))
    ids = [t.task_id for ts in parts.values() for t in ts]
    assert len(ids) == len(set(ids)) == 60
    assert len(parts["train"]) > len(parts["test"])
    fr = {"train": 0.5, "search": 0, "selection": 0, "test": 0.5}
    assert registry.load_split("dbbench", "search", path=str(path), fractions=fr) == []
    with pytest.raises(ValueError, match="unknown split"):
        registry.hash_partition("x", {"dev": 1.0})
