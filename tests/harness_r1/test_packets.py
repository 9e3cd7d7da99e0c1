"""Failure packets: golden text, determinism, the token budget, sanitising, selection, features,
and the packet dataset drawn from the environments' own splits (test split sealed).

Goldens live in tests/harness_r1/golden/; after an intended format change regenerate them with
``HARNESS_JAX_UPDATE_GOLDENS=1 python3 -m pytest tests/harness_r1/test_packets.py`` and review
the diff."""
import json
import os
import random

import pytest

from harness_jax import harness_r1
from harness_jax.envs import registry
from harness_jax.harness.executor import ExecutorConfig
from harness_jax.harness.presets import base_harness
from harness_jax.harness.trajectory import Trajectory, TurnEvent

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")
Q1 = ("How many films have director R. Duarte?\nThe name of this table is Films, and the headers "
      "of this table are Title,Director.")
Q2 = ("What is the total stock of the products?\nThe name of this table is Products, and the "
      "headers of this table are Product,Stock.")
ANS = 'Action: Answer\nFinal Answer: ["999"]'
BAD = "Action: Operation\n```sql\nSELECT SUM(no_such_col) FROM t;\n```"


def traj(task, key, turns, reward=0.0, status="completed", statement=None, category=None,
         infra=False, answer=None):
    evs = [TurnEvent(index=i, segment=0, raw_text=a, action=[a], policy_action=[a],
                     observation=o) for i, (a, o) in enumerate(turns)]
    ev = {"success": reward >= 1.0, "score": reward, "status": status, "rounds": len(turns),
          "label": ["GOLD"]}
    if answer is not None:
        ev["answer"] = answer
    return Trajectory(episode_id=f"run-x/{key}", task_id=task, env_name="dbbench", harness_id="h",
                      turns=evs, reward=reward, success=reward >= 1.0, status=status,
                      infra_error=infra, evaluation=ev,
                      meta={"sampling_key": key, "task_statement": statement,
                            "category": category})


def batch():
    return [
        traj("dbbench-a", "dbbench-a#0", [(ANS, "")], statement=Q1, category="counting",
             answer=' ["999"]'),
        traj("dbbench-a", "dbbench-a#1", [("Action: Operation\n```sql\nSELECT 1;\n```", "[(1,)]"),
                                          ('Action: Answer\nFinal Answer: ["2"]', "")],
             reward=1.0, statement=Q1, category="counting"),
        traj("dbbench-b", "dbbench-b#0", [(BAD, "no such table: t"),
                                          ('Action: Answer\nFinal Answer: ["0"]', "")],
             statement=Q2 + " Files are under /home/alice/data, product B0ABCDEFGH.",
             category="aggregation-SUM", answer=' ["0"]'),
        traj("dbbench-b", "dbbench-b#1", [(ANS, "")], statement=Q2, category="aggregation-SUM",
             answer=' ["999"]'),
        traj("dbbench-c", "dbbench-c#0", [], infra=True, status="infra_error"),
    ]


def check_golden(name, text):
    path = os.path.join(GOLDEN, name)
    if os.environ.get("HARNESS_JAX_UPDATE_GOLDENS") == "1":
        os.makedirs(GOLDEN, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    with open(path, encoding="utf-8") as f:
        assert text == f.read(), f"{name} changed (see the module docstring to regenerate)"


def test_packet_golden_and_deterministic():
    trajs = batch()
    pk = harness_r1.extract_packet(trajs, 4000, constraints={"max_turns": 20,
                                                             "protocol": "text"})
    check_golden("packet_dbbench.md", pk.text)
    # the same trajectories in any order give the same packet
    shuffled = list(trajs)
    random.Random(3).shuffle(shuffled)
    again = harness_r1.extract_packet(shuffled, 4000, constraints={"max_turns": 20,
                                                                   "protocol": "text"})
    assert again.text == pk.text and again.packet_id == pk.packet_id
    # round-robin over tasks: a's failure, then b's two (b#0 before b#1), never the success
    assert pk.included == ["dbbench-a#0", "dbbench-b#0", "dbbench-b#1"]
    assert pk.num_failures == 3 and pk.task_ids == ["dbbench-a", "dbbench-b"]
    # sanitised, no gold labels, no infrastructure failure
    assert "[PATH]" in pk.text and "[PRODUCT_ID]" in pk.text and "/home/alice" not in pk.text
    assert "GOLD" not in pk.text and "B0ABCDEFGH" not in pk.text
    assert pk.features["failure_modes"] == {"answered_after_error": 1,
                                            "answered_without_inspecting": 2, "saw_errors": 1}
    assert pk.features["categories"] == {"aggregation-SUM": 2, "counting": 1}
    lowest = harness_r1.extract_packet(trajs, 4000, strategy="lowest_reward")
    assert lowest.included == ["dbbench-a#0", "dbbench-b#0", "dbbench-b#1"]


@pytest.mark.parametrize("budget,n", [(220, 1), (300, 1), (400, 2), (4000, 3)])
def test_budget_is_never_exceeded(budget, n):
    pk = harness_r1.extract_packet(batch(), budget)
    assert pk.est_tokens <= budget and len(pk.text) <= 4 * budget
    assert len(pk.included) == n
    # the first failure alone is truncated rather than dropped
    assert ("[... trace truncated to fit the packet budget ...]" in pk.text) == (budget == 220)
    assert len(harness_r1.extract_packet(batch(), 4000, max_traces=2).included) == 2


def test_bad_inputs_are_rejected():
    with pytest.raises(ValueError, match="too small.*need"):
        harness_r1.extract_packet(batch(), 100)
    with pytest.raises(ValueError, match="budget_tokens"):
        harness_r1.extract_packet(batch(), 0)
    with pytest.raises(TypeError, match=r"trajectories\[0\]"):
        harness_r1.extract_packet([{"task_id": "x"}], 1000)
    mixed = batch()
    mixed[0].env_name = "alfworld"
    with pytest.raises(ValueError, match="several environments"):
        harness_r1.extract_packet(mixed, 1000)
    with pytest.raises(ValueError, match="strategy"):
        harness_r1.extract_packet(batch(), 1000, strategy="random")


def test_no_failures_gives_an_empty_packet():
    ok = [t for t in batch() if t.reward >= 1.0]
    pk = harness_r1.extract_packet(ok, 1000)
    assert pk.num_failures == 0 and pk.included == [] and "failures: 0" in pk.text


def test_packet_dataset_from_environment_splits(qwen_tok, tmp_path):
    """Packets per packet split from the matching environment split, with cached baselines;
    the test split stays sealed."""
    from tests.harness_r1.doubles import SeededDBBenchPolicy, item_index

    splits = {"train": 2, "validation": 1, "held_out": 1}
    kw = dict(n=4, seed=0, categories=["counting", "aggregation-SUM"])
    items = {}
    for split, env_split in harness_r1.PACKET_SPLITS.items():
        items.update(item_index(registry.load_split("dbbench", env_split, **kw)))
    target = harness_r1.frozen(SeededDBBenchPolicy(qwen_tok, items), model="s", version="1")
    env = harness_r1.EnvRef("dbbench", {"engine": "sqlite", "protocol": "text"})
    cache = harness_r1.BaselineCache(str(tmp_path / "cache"))
    seen = []
    ds = harness_r1.build_packet_dataset(
        target, env, base_harness("dbbench", "text"), str(tmp_path / "ds"), batches=splits,
        batch_size=2, budget_tokens=3000, cache=cache, tokenizer=qwen_tok,
        config=ExecutorConfig(concurrency=8, infra_retries=0),
        split_kwargs={"categories": kw["categories"]},
        progress=lambda s, i, n: seen.append((s, i, n)))
    m = ds.manifest()
    assert {s: v["batches"] for s, v in m["splits"].items()} == splits
    assert seen[-1] == ("held_out", 1, 1)
    for split, env_split in harness_r1.PACKET_SPLITS.items():
        packets = ds.load(split)
        info = m["splits"][split]
        assert len(packets) == info["packets"] == splits[split] - info["no_failure_batches"]
        assert info["env_split"] == env_split
        for pk in packets:
            assert pk.split == split and pk.est_tokens <= 3000
            batch_tasks = ds.batch(pk)
            assert {t.split for t in batch_tasks} == {env_split}
            assert cache.get(pk.baseline_key) is not None
    # packets round-trip through JSON
    pk = ds.load("train")[0]
    assert harness_r1.Packet.from_dict(json.loads(json.dumps(pk.to_dict()))) == pk
    # a rebuild reads every baseline from the cache; it runs inside training_scope (the engineer's
    # training data): its callbacks cannot even open the seal
    sealed = []

    def try_unseal(s, i, n):
        try:
            with registry.sealed_test_access("a callback of the packet builder"):
                sealed.append(False)
        except registry.SealedSplitError:
            sealed.append(True)

    ds2 = harness_r1.build_packet_dataset(
        target, env, base_harness("dbbench", "text"), str(tmp_path / "ds2"), batches=splits,
        batch_size=2, budget_tokens=3000, cache=cache, tokenizer=qwen_tok,
        config=ExecutorConfig(concurrency=8, infra_retries=0),
        split_kwargs={"categories": kw["categories"]}, progress=try_unseal)
    assert all(v["target_episodes"] == 0 for v in ds2.manifest()["splits"].values())
    assert sealed and all(sealed)
    # held-out packets from the sealed test split: refused outside an evaluation entry point
    with pytest.raises(registry.SealedSplitError):
        harness_r1.build_packet_dataset(
            target, env, base_harness("dbbench", "text"), str(tmp_path / "ds3"),
            batches={"held_out": 1}, batch_size=2, env_splits={"held_out": "test"},
            cache=cache, tokenizer=qwen_tok)
    with pytest.raises(ValueError, match="unknown packet split"):
        harness_r1.build_packet_dataset(target, env, base_harness("dbbench", "text"),
                                        str(tmp_path / "ds4"), batches={"dev": 1})


def test_final_actions_per_benchmark():
    from harness_jax.harness_r1.packets import is_final_action

    assert is_final_action({"name": "commit_final_answer", "arguments": {"answers": []}},
                           "dbbench")
    assert is_final_action('Action: Answer\nFinal Answer: ["1"]', "dbbench")
    assert not is_final_action("Action: Operation\n```sql\nSELECT 1;\n```", "dbbench")
    assert is_final_action({"name": "click_action", "arguments": {"value": "Buy Now"}}, "webshop")
    assert not is_final_action({"name": "click_action", "arguments": {"value": "B0X"}}, "webshop")
    assert is_final_action("Thought: ok\nAction:\nclick[Buy Now]", "webshop")
    assert not is_final_action("ACTION: go to desk 1", "alfworld")
