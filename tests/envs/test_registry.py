"""Registry (families register themselves), splits and the sealed test split (enforced where
a task is made: outside evaluation entry points and inside training scopes)."""
import asyncio
import dataclasses
import json

import pytest

from harness_jax.envs import Env, StepResult, Task, registry, textworld_env
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


def test_test_split_is_sealed_wherever_a_task_is_made():
    # every route to a test task meets the one check in Task: loaders, generators, direct
    # construction and re-marking an existing task
    routes = [
        lambda: registry.load_split("dbbench", "test", n=2),
        lambda: dbbench.generate_tasks(2, split="test"),
        lambda: dbbench.tasks_from_items(generator.generate_items(1, seed=0), split="test"),
        lambda: textworld_env.make_task("tw-coin_collector", {"level": 1}, split="test"),
        lambda: Task("dbbench", {"x": 1}, split="test"),
        lambda: dataclasses.replace(Task("dbbench", {"x": 1}), split="test"),
    ]
    for route in routes:
        with pytest.raises(registry.SealedSplitError, match="sealed_test_access"):
            route()
    with registry.sealed_test_access("final evaluation in a unit test"):
        tasks = registry.load_split("dbbench", "test", n=2)
        assert registry.current_test_access() == "final evaluation in a unit test"
        made = [route() for route in routes[1:]]
        assert all(t.split == "test" for m in made for t in (m if isinstance(m, list) else [m]))
    assert [t.split for t in tasks] == ["test", "test"]
    assert registry.current_test_access() is None
    with pytest.raises(ValueError, match="reason"):
        with registry.sealed_test_access(""):
            pass
    with pytest.raises(ValueError, match="split="):
        Task("dbbench", {"x": 1}, split="dev")


def test_training_scopes_cannot_unseal_even_in_tasks_and_threads():
    with registry.training_scope("grpo run"):
        with pytest.raises(registry.SealedSplitError, match="training_scope"):
            with registry.sealed_test_access("sneaky"):
                pass
    with registry.sealed_test_access("evaluation"):
        with registry.training_scope("callback inside eval"):
            with pytest.raises(registry.SealedSplitError, match="training_scope"):
                registry.load_split("dbbench", "test", n=1)

    def make_test_task():
        with registry.sealed_test_access("a callback trying to unseal"):
            return Task("dbbench", {"x": 3}, split="test")

    async def from_worker_thread_and_task():
        with pytest.raises(registry.SealedSplitError, match="training_scope"):
            await asyncio.to_thread(make_test_task)
        with pytest.raises(registry.SealedSplitError, match="training_scope"):
            await asyncio.create_task(asyncio.to_thread(make_test_task))

    with registry.training_scope("loop"):
        asyncio.run(from_worker_thread_and_task())
    assert make_test_task().split == "test"      # outside the scope the callback is fine


def test_assert_no_test_tasks_guards_training_inputs():
    ok = [Task("dbbench", {"x": 1}, split="train")]
    registry.assert_no_test_tasks(ok)
    with registry.sealed_test_access("a test task to guard against"):
        bad = Task("dbbench", {"x": 2}, split="test")
    with pytest.raises(registry.SealedSplitError, match="1 test-split"):
        registry.assert_no_test_tasks(ok + [bad])


class _ToyEnv(Env):
    name = "toyfamily"

    async def areset(self, task):
        return "q"

    async def astep(self, action):
        return StepResult("done", 1.0, True)

    async def aevaluate(self):
        return {"success": True, "score": 1.0}


def _toy_split(split, n=2):
    return [Task("toyfamily", {"i": i}, split=split) for i in range(n)]


def test_a_family_registers_itself_and_names_are_owned():
    spec = registry.register(registry.EnvSpec("toyfamily", _ToyEnv, _toy_split, "a test family"))
    assert "toyfamily" in registry.names() and registry.spec("toyfamily") is spec
    assert isinstance(registry.make("toyfamily"), _ToyEnv)
    assert [t.split for t in registry.load_split("toyfamily", "search", n=3)] == ["search"] * 3
    # the same module may register again (a re-import); another module may not take the name
    registry.register(registry.EnvSpec("toyfamily", _ToyEnv, _toy_split))
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.EnvSpec("dbbench", _ToyEnv, _toy_split))
    with pytest.raises(ValueError, match="identifier"):
        registry.EnvSpec("web shop", _ToyEnv, _toy_split)
    registry.register(registry.EnvSpec("mislabels", _ToyEnv, lambda split: _toy_split("train")))
    with pytest.raises(RuntimeError, match="loader bug"):
        registry.load_split("mislabels", "search")


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
