"""The ``kv_lookup`` family (harness_jax/envs/kv_lookup): reward 1 for the queried value and 0
otherwise; held-out splits share no set of values with training (as the module claims); the weak
teacher is right about 1/num_pairs of the time and is what the SFT warm start plays; a config
out of range names its field. Fast: no model."""
import types

import pytest

from experiments.configs import grpo_learns_cpu
from harness_jax.envs import kv_lookup, registry
from harness_jax.train import sft_warmstart, spec


def _play(task, reply):
    env = registry.make("kv_lookup")
    obs = env.reset(task)
    res = env.step(reply)
    return obs, res, env.evaluate()


def test_reward_is_one_for_the_queried_value_and_zero_otherwise():
    task = registry.load_split("kv_lookup", "train", n=1, seed=3, num_pairs=3)[0]
    pairs, query = task.data["pairs"], task.data["query"]
    assert dict(pairs)[query] == task.data["answer"]
    obs, res, ev = _play(task, f" {task.data['answer']}\n")
    assert obs == " ".join(f"{k}={v}" for k, v in pairs) + f" ? {query}"
    assert res.reward == 1.0 and res.done and ev == {"success": True, "score": 1.0}
    for k, v in pairs:
        if k != query:
            _, res, ev = _play(task, v)                     # another listed value
            assert res.reward == 0.0 and res.done and ev["success"] is False
    assert _play(task, query)[1].reward == 0.0              # the key itself
    assert _play(task, task.data["answer"] + " x")[1].reward == 0.0


def test_held_out_splits_share_no_value_set_with_train():
    """Every split draws from its own value sets (by hash of the set), and the tasks drawn obey it:
    no held-out task's set of values appears in any training task; every held-out word does."""
    by_split = {s: set(kv_lookup.value_sets(s, 2, len(kv_lookup.WORDS))) for s in registry.SPLITS}
    assert sum(map(len, by_split.values())) == len(kv_lookup.WORDS) * (len(kv_lookup.WORDS) - 1) // 2
    for s in ("search", "selection", "test"):
        assert by_split[s] and not by_split[s] & by_split["train"]
    train = registry.load_split("kv_lookup", "train", n=4000, seed=0)
    held = registry.load_split("kv_lookup", "selection", n=1000, seed=0)
    with registry.sealed_test_access("test_kv_lookup: split disjointness"):
        held += registry.load_split("kv_lookup", "test", n=500, seed=0)

    def vset(t):
        return frozenset(v for _, v in t.data["pairs"])
    train_sets = {vset(t) for t in train}
    assert not train_sets & {vset(t) for t in held}
    assert {frozenset(c) for c in by_split["train"]} >= train_sets
    train_words = {v for t in train for _, v in t.data["pairs"]}
    assert {v for t in held for _, v in t.data["pairs"]} <= train_words     # words are shared, sets are not
    assert len({t.task_id for t in held}) == len(held)
    # the same seed gives the same tasks; another seed other tasks
    again = registry.load_split("kv_lookup", "selection", n=1000, seed=0)
    assert [t.task_id for t in again] == [t.task_id for t in held[:1000]]
    assert registry.load_split("kv_lookup", "selection", n=5, seed=1)[0].task_id != held[0].task_id


@pytest.mark.parametrize("num_pairs", [2, 3])
def test_the_weak_teacher_is_right_about_one_time_in_num_pairs(num_pairs):
    tasks = registry.load_split("kv_lookup", "train", n=4000, seed=0, num_pairs=num_pairs, num_keys=4)
    assert all(len(t.data["pairs"]) == num_pairs for t in tasks)
    assert all(t.data["teacher"] in {v for _, v in t.data["pairs"]} for t in tasks)
    rate = sum(t.data["teacher"] == t.data["answer"] for t in tasks) / len(tasks)
    assert abs(rate - 1 / num_pairs) < 0.03, rate
    # every position of the list is queried about equally often (categories position_1..n)
    counts = {f"position_{i + 1}": 0 for i in range(num_pairs)}
    for t in tasks:
        counts[t.category] += 1
    assert min(counts.values()) > len(tasks) / num_pairs * 0.9, counts


def test_keys_in_order_make_the_query_name_a_position():
    tasks = registry.load_split("kv_lookup", "train", n=200, seed=0, num_keys=2, shuffle_keys=False)
    assert {tuple(k for k, _ in t.data["pairs"]) for t in tasks} == {("a", "b")}
    assert all(t.category == ("position_1" if t.data["query"] == "a" else "position_2") for t in tasks)
    shuffled = registry.load_split("kv_lookup", "train", n=200, seed=0, num_keys=2)
    assert {tuple(k for k, _ in t.data["pairs"]) for t in shuffled} == {("a", "b"), ("b", "a")}


def test_sft_plays_the_teacher_and_keeps_its_failures():
    """The family registers the teacher as its demonstrations (what launch/train.py's SFT phase
    records), and the experiment's warm start keeps the failed ones too."""
    env = types.SimpleNamespace(name="kv_lookup", protocol="text")
    task = registry.load_split("kv_lookup", "train", n=1, seed=0)[0]
    assert sft_warmstart.demo_replies(env, task) == [task.data["teacher"]]
    with pytest.raises(ValueError, match="sft.enabled=False"):
        sft_warmstart.demo_replies(types.SimpleNamespace(name="textworld", protocol="text"), task)
    cfg = grpo_learns_cpu.get_config()
    cfg.sft.enabled = True
    run = spec.resolve(cfg, num_devices=1, check_paths=False)
    assert run.sft.keep_failed_demos and run.env.name == "kv_lookup"
    kv = cfg.env.kv_lookup
    assert run.env.split_kwargs == {"n": cfg.env.num_tasks, "seed": cfg.env.task_seed, "num_pairs": kv.num_pairs,
                                    "num_keys": kv.num_keys, "num_values": kv.num_values,
                                    "shuffle_keys": kv.shuffle_keys}
    assert run.loop.eval.num_tasks >= 256 and run.loop.eval.greedy


@pytest.mark.parametrize("kw,field", [
    (dict(num_pairs=5, num_keys=4), "env.kv_lookup.num_pairs"),
    (dict(num_pairs=1), "env.kv_lookup.num_pairs"),
    (dict(num_keys=9), "env.kv_lookup.num_keys"),
    (dict(num_pairs=3, num_values=4), "env.kv_lookup.num_values"),
    (dict(num_values=99), "env.kv_lookup.num_values"),
])
def test_bad_options_name_the_field(kw, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        registry.load_split("kv_lookup", "train", n=1, **kw)


def test_config_problems_name_the_field():
    cfg = grpo_learns_cpu.get_config()
    cfg.env.kv_lookup.num_pairs = 1
    cfg.env.kv_lookup.num_values = 2
    paths = {p.path for p in spec.find_problems(cfg)}
    assert {"env.kv_lookup.num_pairs", "env.kv_lookup.num_values"} <= paths


def test_docstring_preregisters_the_criterion_and_the_commands():
    doc = " ".join(grpo_learns_cpu.__doc__.split())
    assert "launch/train.py --config=experiments/configs/grpo_learns_cpu.py" in doc
    assert "launch/evaluate.py" in doc and "--baseline=" in doc and "Pre-registered criterion" in doc
