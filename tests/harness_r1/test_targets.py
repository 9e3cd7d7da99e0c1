"""Frozen targets: enforcement, identities, the chat-endpoint and SGLang adapters over real HTTP
(scripted servers as test doubles, see doubles.py), and spec validation."""
import asyncio
import json

import pytest

from harness_jax import harness_r1
from harness_jax.harness.executor import ExecutorConfig
from harness_jax.harness.presets import base_harness
from harness_jax.harness_r1 import FrozenTargetError, TargetSpec
from harness_jax.harness_r1.targets import parse_chatml, reply_text
from harness_jax.sampling.types import GenerateRequest, SamplingParams

from tests.harness_r1.doubles import (ChatServer, SeededDBBenchPolicy, SGLangServer, chat_policy_handler,
                      dbbench_batch, decide, item_index, reply)

ENV = harness_r1.EnvRef("dbbench", {"engine": "sqlite", "protocol": "text"})
CFG = ExecutorConfig(concurrency=8, infra_retries=0)


class Updatable(SeededDBBenchPolicy):
    """The scripted policy plus a weight-update method (like JaxEngine's)."""

    def update_weights(self, new, version=None):
        self.version = version or self.version + 1
        return self.version


def test_weight_updates_aimed_at_a_target_raise(qwen_tok):
    tasks = dbbench_batch(1, 1)
    eng = Updatable(qwen_tok, item_index(tasks))
    target = harness_r1.frozen(eng, model="scripted", version="3")
    with pytest.raises(FrozenTargetError, match="frozen"):
        target.update_weights({"w": 1})
    with pytest.raises(FrozenTargetError, match="frozen"):
        eng.update_weights({"w": 1})           # the inner engine refuses too
    with pytest.raises(FrozenTargetError):
        target.sync_model(None, "/tmp/x")
    assert eng.version == 3
    # weights changed behind the wrapper's back: every request fails, as infrastructure
    eng.version = 4
    req = GenerateRequest([1, 2], SamplingParams(max_new_tokens=4), "r1")
    with pytest.raises(FrozenTargetError, match="pinned at version 3"):
        asyncio.run(target.generate(req))
    base = harness_r1.run_baseline(target, ENV, tasks, base_harness("dbbench", "text"),
                                   config=CFG, attempts=2, tokenizer=qwen_tok)
    assert not base.complete and len(base.missing) == len(tasks)
    assert all(r == {} for r in base.rewards.values())
    assert "pinned at version 3" in base.stats["infra_errors"][0]


@pytest.mark.slow
def test_jax_target_from_an_hf_dir_is_frozen(tiny_hf_dense_dir):
    """The embedded JaxEngine target: identity from the weights directory; its update path
    (what a learner would call) raises."""
    spec = TargetSpec(kind="jax", model=tiny_hf_dense_dir,
                      options={"max_slots": 1, "max_len": 64, "prefill_buckets": [16]})
    target = spec.build()
    try:
        assert target.identity.version.startswith("w-")
        assert target.identity == spec.identity()
        with pytest.raises(FrozenTargetError):
            target.engine.update_weights(None)
        with pytest.raises(FrozenTargetError):
            target.update_weights(None)
    finally:
        target.close()


def test_identity_keys():
    a = TargetSpec(kind="chat", model="m", urls=("http://h/v1",), options={"cache_dir": "/a"})
    same = TargetSpec(kind="chat", model="m", urls=("http://h/v1",),
                      options={"cache_dir": "/b", "max_concurrency": 3})
    assert a.identity().key == same.identity().key            # how it is reached: same target
    for other in (TargetSpec(kind="chat", model="m2", urls=("http://h/v1",)),
                  TargetSpec(kind="chat", model="m", urls=("http://h2/v1",)),
                  TargetSpec(kind="chat", model="m", urls=("http://h/v1",), version="2026-01"),
                  TargetSpec(kind="chat", model="m", urls=("http://h/v1",),
                             options={"tool_mode": "text"})):
        assert other.identity().key != a.identity().key
    d = a.to_dict()
    assert TargetSpec.from_dict(json.loads(json.dumps(d))) == a


@pytest.mark.parametrize("kw,field", [
    (dict(kind="gpu"), "TargetSpec.kind"),
    (dict(kind="chat", model="m"), "TargetSpec.urls"),
    (dict(kind="chat", urls=("http://h/v1",)), "TargetSpec.model"),
    (dict(kind="jax"), "TargetSpec.model"),
    (dict(kind="sglang"), "TargetSpec.urls"),
    (dict(kind="sglang", urls=("host:30000",)), "TargetSpec.urls"),
    (dict(kind="factory", factory="nomodule"), "TargetSpec.factory"),
    (dict(kind="chat", model="m", urls=("http://h/v1",), options={"tool_mode": "xml"}),
     "TargetSpec.options.tool_mode"),
    (dict(kind="chat", model="m", urls=("http://h/v1",), options={"api_key": "sk-1"}),
     "TargetSpec.options"),
])
def test_bad_specs_name_the_field(kw, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        TargetSpec(**kw)
    with pytest.raises(ValueError, match="unknown field"):
        TargetSpec.from_dict({"kind": "chat", "modle": "m"})
    with pytest.raises(TypeError, match="no identity"):
        harness_r1.as_target(SeededDBBenchPolicy.__new__(SeededDBBenchPolicy))


def test_chatml_round_trip_with_tools(qwen_tok):
    from harness_jax.sampling import chat

    tools = [{"type": "function", "function": {"name": "execute_sql", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}}}}]
    msgs = [{"role": "system", "content": "Be exact."}, {"role": "user", "content": "Q?"},
            {"role": "assistant", "content": "Let me look.",
             "tool_calls": [{"name": "execute_sql", "arguments": {"query": "SELECT 1"}}]},
            {"role": "tool", "content": "[(1,)]"}]
    text = chat.render_messages(msgs, tools=tools)
    got, got_tools, thinking = parse_chatml(text)
    assert got_tools == tools and not thinking
    assert got[0] == {"role": "system", "content": "Be exact."}
    assert got[2]["tool_calls"][0]["function"] == {"name": "execute_sql",
                                                   "arguments": '{"query": "SELECT 1"}'}
    assert got[3] == {"role": "tool", "tool_call_id": got[2]["tool_calls"][0]["id"],
                      "content": "[(1,)]"}
    # the endpoint's structured reply comes back as the Qwen XML the executor parses
    back = reply_text("", [{"name": "execute_sql", "arguments": '{"query": "SELECT 2"}'}])
    _, calls, errs = chat.parse_tool_calls(back, tools=tools)
    assert not errs and calls[0].arguments == {"query": "SELECT 2"}
    with pytest.raises(ValueError, match="open assistant turn"):
        parse_chatml(text[: text.rfind("<|im_start|>assistant")])


def test_chat_endpoint_target_runs_the_executor_and_pairs_reruns(qwen_tok, tmp_path):
    """An API target over real HTTP (scripted server): text replies without token ids run in
    the executor; seeded requests are cached, so an unchanged rerun replays the baseline."""
    tasks = dbbench_batch(2, 2)
    log = []
    srv = ChatServer(chat_policy_handler(item_index(tasks), log))
    try:
        spec = TargetSpec(kind="chat", model="scripted-api", urls=(srv.url,),
                          options={"cache_dir": str(tmp_path / "resp"), "tool_mode": "text"})
        target = spec.build(qwen_tok)
        h = base_harness("dbbench", "text")
        base = harness_r1.run_baseline(target, ENV, tasks, h, n_per_task=2, seed=5, config=CFG,
                                       tokenizer=qwen_tok)
        assert base.complete and base.target["kind"] == "chat"
        assert 0.0 < base.success_rate < 1.0         # the scripted API target samples mistakes
        seeds = {b.get("seed") for b in log}
        assert None not in seeds and len(seeds) > 3
        first = log[0]
        assert first["model"] == "scripted-api" and first["messages"][-1]["role"] == "user"
        n_calls = len(log)
        never = {"schema_version": "harness-r1-patch-v1", "benchmark": "dbbench", "actions": [
            {"type": "add_code_hook", "hook": "on_post_step",
             "code": "def hook(ctx, nb):\n    return None\n"}]}
        ev = harness_r1.evaluate_patch(never, "dbbench", target, tasks, base,
                                       tokenizer=qwen_tok)
        assert ev.complete and ev.noop and ev.delta == 0.0 and ev.reward == 0.0
        assert len(log) == n_calls                    # every request was a cache hit
        usage = target.usage()["usage"]["target"]
        assert usage["cache_hits"] >= n_calls and usage["calls"] == 2 * n_calls
    finally:
        srv.close()


def test_chat_endpoint_structured_tool_calls(qwen_tok):
    """Function protocol: tools go out as the API's ``tools``, structured ``tool_calls`` come
    back as Qwen XML, and tool results go out as ``tool`` messages answering the call ids."""
    tasks = dbbench_batch(3, 1, ["counting"])
    item = tasks[0].data
    gold = item["sql"]["query"]
    bodies = []

    def handler(body):
        bodies.append(body)
        if not any(m["role"] == "tool" for m in body["messages"]):
            call = {"id": "x", "type": "function", "function": {
                "name": "execute_sql", "arguments": json.dumps({"query": gold})}}
        else:
            call = {"id": "y", "type": "function", "function": {
                "name": "commit_final_answer", "arguments": json.dumps(
                    {"answers": item["label"]})}}
        out = reply("")
        out["choices"][0]["message"]["tool_calls"] = [call]
        out["choices"][0]["finish_reason"] = "tool_calls"
        return 200, out

    srv = ChatServer(handler)
    try:
        target = TargetSpec(kind="chat", model="api-fc", urls=(srv.url,)).build(qwen_tok)
        env = harness_r1.EnvRef("dbbench", {"engine": "sqlite", "protocol": "function"})
        base = harness_r1.run_baseline(target, env, tasks, base_harness("dbbench", "function"),
                                       config=CFG, tokenizer=qwen_tok)
    finally:
        srv.close()
    assert base.success_rate == 1.0
    assert [t["function"]["name"] for t in bodies[0]["tools"]] == ["execute_sql",
                                                                  "commit_final_answer"]
    second = bodies[1]["messages"]
    call_ids = [c["id"] for m in second if m["role"] == "assistant"
                for c in m.get("tool_calls", [])]
    tool_msgs = [m for m in second if m["role"] == "tool"]
    assert tool_msgs and tool_msgs[0]["tool_call_id"] in call_ids
    assert tool_msgs[0]["content"].startswith("[(")


def test_sglang_target_pins_the_served_version(qwen_tok):
    """An SGLang-API target over real HTTP (scripted server): the identity takes the served
    weight version from /model_info; a reply served with other weights fails as infrastructure
    (never scored)."""
    tasks = dbbench_batch(4, 1, ["counting"])
    items = item_index(tasks)
    srv = SGLangServer(qwen_tok, lambda text, seed: decide(items, text, seed, 0.0, 0.0))
    try:
        target = TargetSpec(kind="sglang", urls=(srv.url,)).build(qwen_tok)
        assert target.identity.version == "5" and target.identity.model == "scripted-sglang"
        with pytest.raises(FrozenTargetError):
            target.engine.update_weights_from_disk("/ckpt")
        h = base_harness("dbbench", "text")
        base = harness_r1.run_baseline(target, ENV, tasks, h, config=CFG, tokenizer=qwen_tok)
        assert base.complete and base.success_rate == 1.0
        assert srv.requests[0]["sampling_params"]["sampling_seed"] is not None
        srv.weight_version = "6"          # someone updated the server's weights
        again = harness_r1.run_baseline(target, ENV, tasks, h, seed=1, config=CFG,
                                        tokenizer=qwen_tok, attempts=1)
        assert not again.complete and "pinned at version 5" in again.stats["infra_errors"][0]
    finally:
        srv.close()


def test_factory_target_builds_from_an_import_path(qwen_tok):
    spec = TargetSpec(kind="factory", factory="tests.harness_r1.doubles:make_policy",
                      model="scripted", version="3", options={"kwargs": {"seed": 1, "n": 1}})
    t = spec.build(qwen_tok)
    assert isinstance(t.engine, SeededDBBenchPolicy) and t.identity.version == "3"
    bad = TargetSpec(kind="factory", factory="tests.harness_r1.doubles:nothing_here")
    with pytest.raises(ValueError, match="cannot import"):
        bad.build(qwen_tok)
