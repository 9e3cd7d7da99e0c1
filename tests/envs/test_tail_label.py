"""The ``tail_label`` family (harness_jax/envs/tail_label): reward 1 for the last word's label and
0 otherwise (a distractor's label is always wrong); held-out splits share no set of words with
training while every word occurs last in training; the weak teacher is right at its configured
rate and otherwise labels an earlier word, and is what the SFT warm start plays; a config out of
range names its field. Fast: no model."""
import types

import pytest

from experiments.configs import grpo_learns_cpu_tail
from harness_jax.envs import registry, tail_label
from harness_jax.train import sft_warmstart, spec


def _play(task, reply):
    env = registry.make("tail_label")
    obs = env.reset(task)
    res = env.step(reply)
    return obs, res, env.evaluate()


def test_reward_is_one_for_the_last_words_label_and_zero_otherwise():
    task = registry.load_split("tail_label", "train", n=1, seed=3, list_len=4)[0]
    words = task.data["words"]
    assert len(words) == 4 and len(set(words)) == 4
    assert task.data["answer"] == tail_label.label_of(words[-1])
    assert len({tail_label.label_of(w) for w in words}) == 4          # distinct labels
    obs, res, ev = _play(task, f" {task.data['answer']}\n")
    assert obs == " ".join(words)
    assert res.reward == 1.0 and res.done and ev == {"success": True, "score": 1.0}
    for w in words[:-1]:
        _, res, ev = _play(task, tail_label.label_of(w))             # a distractor's label
        assert res.reward == 0.0 and res.done and ev["success"] is False
    assert _play(task, words[-1])[1].reward == 0.0                    # the word itself
    assert _play(task, task.data["answer"] + " x")[1].reward == 0.0


def test_the_label_table_is_fixed_and_balanced():
    labels = [tail_label.label_of(w) for w in tail_label.WORDS]
    assert labels[:5] == ["a", "b", "c", "d", "a"]
    assert {lab: labels.count(lab) for lab in tail_label.LABELS} == {lab: 6 for lab in tail_label.LABELS}


def test_held_out_splits_share_no_word_set_with_train():
    """Every split draws from its own word sets (by hash of the set), and the tasks drawn obey it:
    no held-out task's set of words appears in any training task; every held-out word appears in
    training, in the last place too."""
    by_split = {s: set(tail_label.word_sets(s, 3, len(tail_label.WORDS))) for s in registry.SPLITS}
    assert sum(map(len, by_split.values())) == 4 * 6 ** 3               # 3 of 4 labels, one word each
    for s in ("search", "selection", "test"):
        assert by_split[s] and not by_split[s] & by_split["train"]
    train = registry.load_split("tail_label", "train", n=4000, seed=0)
    held = registry.load_split("tail_label", "selection", n=1000, seed=0)
    with registry.sealed_test_access("test_tail_label: split disjointness"):
        held += registry.load_split("tail_label", "test", n=500, seed=0)

    def wset(t):
        return frozenset(t.data["words"])
    train_sets = {wset(t) for t in train}
    assert not train_sets & {wset(t) for t in held}
    assert {frozenset(c) for c in by_split["train"]} >= train_sets
    train_last = {t.data["words"][-1] for t in train}
    assert {t.data["words"][-1] for t in held} <= train_last == set(tail_label.WORDS)
    assert len({t.task_id for t in held}) == len(held)
    again = registry.load_split("tail_label", "selection", n=1000, seed=0)
    assert [t.task_id for t in again] == [t.task_id for t in held[:1000]]
    assert registry.load_split("tail_label", "selection", n=5, seed=1)[0].task_id != held[0].task_id


@pytest.mark.parametrize("acc", [0.0, 0.5, 0.8])
def test_the_weak_teacher_is_right_at_its_rate_and_otherwise_labels_an_earlier_word(acc):
    tasks = registry.load_split("tail_label", "train", n=4000, seed=0, teacher_accuracy=acc)
    rate = sum(t.data["teacher"] == t.data["answer"] for t in tasks) / len(tasks)
    assert abs(rate - acc) < 0.03, rate
    for t in tasks:
        if t.data["teacher"] != t.data["answer"]:
            assert t.data["teacher"] in {tail_label.label_of(w) for w in t.data["words"][:-1]}
    counts = {f"last_{lab}": 0 for lab in tail_label.LABELS}
    for t in tasks:
        counts[t.category] += 1
    assert min(counts.values()) > len(tasks) / 4 * 0.85, counts


def test_the_first_word_teacher_errs_by_labelling_the_first_word_only():
    """``teacher_mistake="first"``: every wrong teacher reply is the first word's label, so the
    teacher holds two readings (last word, first word) at its configured odds."""
    tasks = registry.load_split("tail_label", "train", n=4000, seed=0, teacher_accuracy=0.5,
                                teacher_mistake="first")
    first = [t for t in tasks if t.data["teacher"] != t.data["answer"]]
    assert all(t.data["teacher"] == tail_label.label_of(t.data["words"][0]) for t in first)
    assert abs(len(first) / len(tasks) - 0.5) < 0.03
    # the last word's label is never the first word's, so these replies all score 0
    assert all(_play(t, t.data["teacher"])[1].reward == 0.0 for t in first[:50])


def test_sft_plays_the_teacher_and_the_experiment_keeps_its_failures():
    env = types.SimpleNamespace(name="tail_label", protocol="text")
    task = registry.load_split("tail_label", "train", n=1, seed=0)[0]
    assert sft_warmstart.demo_replies(env, task) == [task.data["teacher"]]
    cfg = grpo_learns_cpu_tail.get_config()
    cfg.sft.enabled = True
    run = spec.resolve(cfg, num_devices=1, check_paths=False)
    assert run.sft.keep_failed_demos and run.env.name == "tail_label"
    t = cfg.env.tail_label
    assert run.env.split_kwargs == {"n": cfg.env.num_tasks, "seed": cfg.env.task_seed, "list_len": t.list_len,
                                    "num_words": t.num_words, "teacher_accuracy": t.teacher_accuracy,
                                    "teacher_mistake": t.teacher_mistake}
    assert run.loop.eval.num_tasks >= 256 and run.loop.eval.greedy


@pytest.mark.parametrize("kw,field", [
    (dict(list_len=1), "env.tail_label.list_len"),
    (dict(list_len=5), "env.tail_label.list_len"),
    (dict(num_words=7), "env.tail_label.num_words"),
    (dict(num_words=99), "env.tail_label.num_words"),
    (dict(teacher_accuracy=1.5), "env.tail_label.teacher_accuracy"),
    (dict(teacher_mistake="last"), "env.tail_label.teacher_mistake"),
])
def test_bad_options_name_the_field(kw, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        registry.load_split("tail_label", "train", n=1, **kw)


def test_config_problems_name_the_field():
    cfg = grpo_learns_cpu_tail.get_config()
    cfg.env.tail_label.list_len = 1
    cfg.env.tail_label.num_words = 2
    cfg.env.tail_label.teacher_mistake = "middle"
    paths = {p.path for p in spec.find_problems(cfg)}
    assert {"env.tail_label.list_len", "env.tail_label.num_words", "env.tail_label.teacher_mistake"} <= paths


def test_docstring_preregisters_the_criterion_and_the_commands():
    doc = " ".join(grpo_learns_cpu_tail.__doc__.split())
    assert "launch/train.py --config=experiments/configs/grpo_learns_cpu_tail.py" in doc
    assert "launch/evaluate.py" in doc and "--baseline=" in doc and "Pre-registered criterion" in doc
