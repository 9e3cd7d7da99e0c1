"""Harness specs (serialisation, identity, diffs) and the trajectory store, metrics and CLI."""
import asyncio
import io
import json

import pytest

from harness_jax.envs.base import Task
from harness_jax.harness import cli
from harness_jax.harness.executor import ExecutorConfig, run_episodes
from harness_jax.harness.specs import ExecutionRules, HarnessSpec, MemoryPolicy, diff_specs
from harness_jax.harness.store import TrajectoryStore
from harness_jax.harness.trajectory import Trajectory

from .doubles import ScriptedEngine, ScriptedEnv

TOOL = {"type": "function", "function": {"name": "execute_sql", "description": "Run SQL",
                                         "parameters": {"type": "object", "properties": {}}}}


def test_spec_roundtrip_and_content_id(tmp_path):
    h = HarnessSpec(name="H0", system_prompt="You are a DB agent.", tools=[TOOL],
                    rules=ExecutionRules(max_turns=7, stop_strings=["FINISH"]))
    for path in (tmp_path / "h.json", tmp_path / "h.yaml"):
        h.save(str(path))
        back = HarnessSpec.load(str(path))
        assert back == h and back.harness_id == h.harness_id
    assert HarnessSpec.from_json(h.to_json()).rules.stop_strings == ("FINISH",)
    # the id is a content hash: names and notes do not change it, content does
    assert HarnessSpec(name="other", notes="x", system_prompt="You are a DB agent.",
                       tools=[TOOL], rules=h.rules).harness_id == h.harness_id
    assert h.child(system_prompt="changed").harness_id != h.harness_id


def test_child_lineage_and_readable_diff():
    h0 = HarnessSpec(name="H0", system_prompt="Line one.\nLine two.", tools=[TOOL])
    h1 = h0.child(name="H1", system_prompt="Line one.\nCheck the schema first.\nLine two.",
                  rules=ExecutionRules(max_turns=30), calling_convention="json")
    assert h1.parent_id == h0.harness_id and h1.version == 2
    d = diff_specs(h0, h1)
    assert 'calling_convention: "qwen_xml" -> "json"' in d
    assert "rules.max_turns: 20 -> 30" in d
    assert any(x.startswith("system_prompt:") and "+Check the schema first." in x for x in d)
    assert diff_specs(h0, h0) == []


@pytest.mark.parametrize("kwargs,fragment", [
    ({"calling_convention": "smoke_signals"}, "calling_convention"),
    ({"task_template": "no placeholder"}, "task_template"),
    ({"rules": ExecutionRules(max_turns=0)}, "rules.max_turns"),
    ({"rules": ExecutionRules(on_unparsable="ignore")}, "rules.on_unparsable"),
    ({"memory": MemoryPolicy(kind="magic")}, "memory.kind"),
    ({"tools": [{"description": "no name"}]}, "tools[0]"),
])
def test_bad_specs_name_the_field(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        HarnessSpec(**kwargs)


def test_unknown_fields_rejected():
    with pytest.raises(ValueError, match="unknown field"):
        HarnessSpec.from_dict({"name": "x", "max_turn": 3})
    with pytest.raises(ValueError, match=r"HarnessSpec.rules: unknown field"):
        HarnessSpec.from_dict({"rules": {"max_turn": 3}})


@pytest.fixture(scope="module")
def filled_store(tmp_path_factory, qwen_tok):
    """Two harnesses x 2 tasks x 3 episodes in one store (scripted engine and env)."""
    store = TrajectoryStore(str(tmp_path_factory.mktemp("store")))
    tasks = [Task("toy", {"q": "a"}), Task("toy", {"q": "b"})]
    h0 = HarnessSpec(name="H0")
    h1 = h0.child(name="H1", system_prompt="Answer with ANSWER: <n>.")
    # H0: task a succeeds 1/3, task b 0/3; H1: 3/3 and 2/3 (replies consumed in task order)
    for h, replies in ((h0, ["ANSWER: 42", "ANSWER: 1", "ANSWER: 1"] + ["ANSWER: 1"] * 3),
                       (h1, ["ANSWER: 42"] * 3 + ["ANSWER: 42", "ANSWER: 42", "ANSWER: 0"])):
        eng = ScriptedEngine(qwen_tok, replies)
        asyncio.run(run_episodes(eng, lambda: ScriptedEnv("text"), tasks, h, n_per_task=3,
                                 tokenizer=qwen_tok, store=store, run_id="r1",
                                 config=ExecutorConfig(concurrency=1)))
    # one infrastructure failure: stored, but never a task outcome
    eng = ScriptedEngine(qwen_tok, [], fail_times=5)
    asyncio.run(run_episodes(eng, lambda: ScriptedEnv("text"), tasks[:1], h0, tokenizer=qwen_tok,
                             store=store, run_id="r1", config=ExecutorConfig(infra_retries=0)))
    return store, h0, h1, tasks


def test_store_index_get_and_metrics(filled_store):
    store, h0, h1, tasks = filled_store
    assert len(store.index()) == 13
    assert len(store.index(harness_id=h1.harness_id)) == 6
    assert len(store.index(task_id=tasks[0].task_id, include_infra=False)) == 6
    rec = store.index(harness_id=h1.harness_id)[0]
    t = store.get(rec["episode_id"])
    assert isinstance(t, Trajectory) and t.harness_id == h1.harness_id and t.segments
    assert t.to_token_segments()[0].token_ids == t.segments[0].token_ids
    m1 = store.metrics(ks=(1, 3), harness_id=h1.harness_id)
    assert m1["success_rate"] == pytest.approx(5 / 6)
    assert m1["pass_at"][3] == pytest.approx(1.0) and m1["avg_at"][3] == pytest.approx(5 / 6)
    m0 = store.metrics(ks=(1, 2), harness_id=h0.harness_id)
    assert m0["infra_errors"] == 1 and m0["num_episodes"] == 6
    # task a: 1 of 3 -> pass@2 = 1 - C(2,2)/C(3,2) = 2/3; task b: 0
    assert m0["pass_at"][2] == pytest.approx((2 / 3 + 0) / 2)
    with pytest.raises(KeyError, match="no episode"):
        store.get("missing")


def test_cli_list_show_diff_metrics(filled_store, tmp_path):
    store, h0, h1, tasks = filled_store
    out = io.StringIO()
    assert cli.main(["list", "--store", store.root, "--harness", h1.harness_id], out=out) == 0
    lines = out.getvalue().strip().splitlines()
    assert len(lines) == 6 and all(h1.harness_id in x for x in lines)
    ep_a = store.index(harness_id=h0.harness_id, task_id=tasks[0].task_id)[0]["episode_id"]
    ep_b = store.index(harness_id=h1.harness_id, task_id=tasks[0].task_id)[0]["episode_id"]
    out = io.StringIO()
    cli.main(["show", "--store", store.root, ep_a], out=out)
    assert f"episode {ep_a}" in out.getvalue() and "policy: ANSWER: 42" in out.getvalue()
    out = io.StringIO()
    cli.main(["diff", "--store", store.root, ep_a, ep_b], out=out)
    assert "turn 0" in out.getvalue()
    out = io.StringIO()
    cli.main(["metrics", "--store", store.root, "--k", "1", "3"], out=out)
    assert json.loads(out.getvalue())["infra_errors"] == 1
    h0.save(str(tmp_path / "p.json"))
    h1.save(str(tmp_path / "c.yaml"))
    out = io.StringIO()
    cli.main(["spec-diff", str(tmp_path / "p.json"), str(tmp_path / "c.yaml")], out=out)
    assert "system_prompt" in out.getvalue()


def test_cli_validate(tmp_path):
    good = {"schema_version": "harness-r1-patch-v1", "benchmark": "dbbench", "actions": [
        {"type": "add_code_hook", "hook": "make_pre_hint",
         "code": "def hook(ctx, nb):\n    return {'message': 'Check the schema.'}\n"}]}
    f = tmp_path / "reply.txt"
    f.write_text("<think>x</think><patch>" + json.dumps(good) + "</patch>")
    out = io.StringIO()
    assert cli.main(["validate", str(f), "--env", "dbbench"], out=out) == 0
    assert json.loads(out.getvalue())["ok"] is True
    f.write_text("<patch>" + json.dumps({**good, "benchmark": "webshop"}) + "</patch>")
    out = io.StringIO()
    assert cli.main(["validate", str(f), "--env", "dbbench"], out=out) == 1
    assert "webshop" in json.loads(out.getvalue())["errors"][0]
