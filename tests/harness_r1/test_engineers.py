"""The engineer's prompt and response protocol, the engineers (rule-based offline, prompt-based
on an OpenAI-compatible endpoint, a model behind a RolloutEngine), cold-start SFT examples and
the dataset CLI. Endpoints are scripted servers over real HTTP and the target is the scripted
sampling policy (test doubles, see doubles.py)."""
import json

import pytest

from harness_jax import harness_r1
from harness_jax.sampling import chat
from harness_jax.harness.executor import ExecutorConfig
from harness_jax.harness.presets import base_harness
from harness_jax.harness_r1 import dataset, prompt
from harness_jax.harness_r1.engineers import PromptEngineer, RuleBasedEngineer
from harness_jax.sampling.openai_client import ChatClientConfig, OpenAIChatClient
from harness_jax.sampling.types import FINISH_STOP, GenerateResult, RolloutEngine
from tests.harness_r1.doubles import ChatServer, SeededDBBenchPolicy, dbbench_batch, item_index

ENV = harness_r1.EnvRef("dbbench", {"engine": "sqlite", "protocol": "text"})
CFG = ExecutorConfig(concurrency=8, infra_retries=0)
H = base_harness("dbbench", "text")


@pytest.fixture(scope="module")
def world(qwen_tok):
    train, held = dbbench_batch(11, 3), dbbench_batch(12, 3, split="search")
    policy = SeededDBBenchPolicy(qwen_tok, item_index(train + held))
    target = harness_r1.frozen(policy, model="scripted", version="3")
    base = harness_r1.run_baseline(target, ENV, train, H, n_per_task=2, seed=0, config=CFG,
                                   tokenizer=qwen_tok)
    held_base = harness_r1.run_baseline(target, ENV, held, H, n_per_task=2, seed=0,
                                        config=CFG, tokenizer=qwen_tok)
    packet = harness_r1.packet_from_baseline(base, 6000, split="train")
    return train, held, target, base, held_base, packet


def test_prompt_template_and_protocol(world, qwen_tok):
    *_, packet = world
    msgs = harness_r1.engineer_messages(packet)
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert "harness-r1-patch-v1" in msgs[0]["content"]
    for hook in ("on_init", "make_pre_hint", "on_before_action", "on_post_step"):
        assert hook in msgs[0]["content"]
    assert packet.text in msgs[1]["content"]
    ids = harness_r1.engineer_prompt_ids(packet, qwen_tok)
    assert qwen_tok.decode(ids).endswith("<|im_start|>assistant\n<think>\n")
    response = RuleBasedEngineer().propose(packet)[0]
    assert prompt.validate_response(response, "dbbench").ok
    # under the prefilled-think protocol a second <think> is rejected
    assert not prompt.validate_response("<think>" + response, "dbbench").ok
    # prompt + response tokens are exactly the conversation the chat template renders
    ex = harness_r1.sft_example(packet, response, qwen_tok)
    reasoning, content = chat.split_thinking("<think>\n" + response)
    full = chat.render_messages(msgs + [{"role": "assistant", "content": content,
                                         "reasoning_content": reasoning}],
                                add_generation_prompt=False)
    assert qwen_tok.decode(ex["prompt_ids"] + ex["response_ids"]) == full.rstrip("\n")


def test_normalise_teacher_replies():
    p = {"schema_version": "harness-r1-patch-v1", "benchmark": "dbbench", "actions": [
        {"type": "add_code_hook", "hook": "make_pre_hint",
         "code": "def hook(ctx, nb):\n    return {'message': 'Check the table first.'}\n"}]}
    reply = ("<think>The agent guesses.</think>\nHere is my patch:\n<patch>\n```json\n"
             + json.dumps(p) + "\n```\n</patch>")
    norm, errs = harness_r1.normalise_response(reply, "dbbench")
    assert not errs and norm.startswith("The agent guesses.\nHere is my patch:\n</think>")
    assert prompt.validate_response(norm, "dbbench").ok
    assert prompt.validate_response(norm, "dbbench").patch.to_dict() == \
        harness_r1.engineers.patch_of(reply, "dbbench")
    bad, errs = harness_r1.normalise_response("I would add a hint.", "dbbench")
    assert bad is None and "no <patch>" in errs[0]


def test_rule_based_engineer_writes_valid_overlays_that_help(world, qwen_tok):
    """Its overlays are valid and change the scripted target's behaviour: a positive Delta_B
    on the packet's own batch AND on a held-out batch of the same benchmark."""
    train, held, target, base, held_base, packet = world
    assert packet.features["failure_modes"]["answered_without_inspecting"] > 0
    eng = RuleBasedEngineer()
    responses = eng.propose(packet, k=3)
    patches = [prompt.validate_response(r, "dbbench").patch for r in responses]
    assert all(p is not None for p in patches)
    assert len({p.patch_id for p in patches}) == 3          # the K samples differ
    hooks = {a["hook"] for a in patches[0].actions}
    assert {"on_before_action", "make_pre_hint"} <= hooks
    own = harness_r1.evaluate_patch(responses[0], "dbbench", target, train, base,
                                    tokenizer=qwen_tok, response_protocol="prefill_think_patch")
    held_ev = harness_r1.evaluate_patch(responses[0], "dbbench", target, held, held_base,
                                        tokenizer=qwen_tok)
    assert own.reward > 0.2 and held_ev.reward > 0.2
    assert base.success_rate + own.reward == pytest.approx(
        sum(own.patched.values()) / len(own.patched))
    # a packet without failures gets no patch (and such a response earns 0)
    empty = harness_r1.extract_packet([t for t in base.trajectories if t.reward >= 1], 2000)
    none = eng.propose(empty)[0]
    assert not prompt.validate_response(none, "dbbench").ok


def test_prompt_engineer_on_an_endpoint_with_cost_accounting(world, tmp_path):
    """A prompt-based engineer / SFT teacher behind a scripted OpenAI-compatible server."""
    *_, packet = world
    rule = RuleBasedEngineer()

    def handler(body):
        assert body["messages"][0]["content"] == prompt.system_prompt(None, "dbbench")
        text = rule.propose(packet)[0]
        return 200, {"choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": "<think>" + text.replace("<patch>", "<patch>\n")}}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 500}}

    srv = ChatServer(handler)
    try:
        client = OpenAIChatClient(ChatClientConfig(
            base_url=srv.url, model="frontier", cache_dir=str(tmp_path / "c"),
            price_input_per_mtok=2.0, price_output_per_mtok=8.0))
        eng = PromptEngineer(client, temperature=0.7)
        out = eng.propose(packet, k=2, seed=1)
        assert len(srv.requests) == 2 and {r["seed"] for r in srv.requests} == {1000, 1001}
        assert all(harness_r1.engineers.patch_of(o, "dbbench") for o in out)
        u = eng.usage()["engineer"]
        assert u["prompt_tokens"] == 2000 and u["cost_usd"] == pytest.approx(
            (2000 * 2.0 + 1000 * 8.0) / 1e6)
        eng.propose(packet, k=2, seed=1)                     # cached: free and reproducible
        assert len(srv.requests) == 2 and eng.usage()["engineer"]["cache_hits"] == 2
    finally:
        srv.close()


class ScriptedEngineerEngine(RolloutEngine):
    """Stands in for the engineer model's engine: answers every prompt with a fixed response
    (test double: no trained engineer exists here)."""

    def __init__(self, tok, text):
        self.tok, self.text, self.requests = tok, text, []

    @property
    def weight_version(self):
        return 1

    async def generate(self, request):
        self.requests.append(request)
        ids = self.tok.encode(self.text, add_special_tokens=False)
        ids = ids + [self.tok.convert_tokens_to_ids("<|im_end|>")]
        return GenerateResult(request.request_id, ids, [-0.1] * len(ids), FINISH_STOP, 1)


def test_model_engineer_samples_k_responses(world, qwen_tok):
    *_, packet = world
    text = RuleBasedEngineer().propose(packet)[0]
    eng_engine = ScriptedEngineerEngine(qwen_tok, text)
    eng = harness_r1.ModelEngineer(eng_engine, qwen_tok, max_new_tokens=4096)
    out = eng.propose(packet, k=3, seed=2)
    assert out == [text] * 3
    reqs = eng_engine.requests
    assert [list(r.input_ids) for r in reqs] == [harness_r1.engineer_prompt_ids(packet,
                                                                                qwen_tok)] * 3
    assert len({r.params.seed for r in reqs}) == 3 and reqs[0].params.temperature == 0.7
    assert len(eng.last) == 3                   # prompt ids + results with log-probs for GRPO


def test_engineer_samples_become_grpo_segments(world, qwen_tok):
    """K sampled responses -> rewards on the target -> sequence-level advantages -> the
    learner's TokenSegments (prompt masked, one advantage per response)."""
    train, _, target, base, _, packet = world
    good = RuleBasedEngineer().propose(packet)[0]
    eng_engine = ScriptedEngineerEngine(qwen_tok, good)
    eng = harness_r1.ModelEngineer(eng_engine, qwen_tok)
    responses = eng.propose(packet, k=2) + ["no patch"]
    results = [r for _, r in eng.last] + [eng.last[0][1]]
    group = harness_r1.evaluate_group(responses, "dbbench", target, train, base,
                                      tokenizer=qwen_tok)
    segs = harness_r1.engineer_segments(eng.last[0][0], results, group, packet.packet_id)
    assert len(segs) == 3 and group.rewards_K[0] > 0 == group.rewards_K[2]
    n_p = len(eng.last[0][0])
    for s, adv, r in zip(segs, group.advantages_K, group.rewards_K):
        assert s.loss_mask[:n_p] == [0] * n_p and set(s.loss_mask[n_p:]) == {1}
        assert s.advantage == pytest.approx(float(adv)) and s.reward == pytest.approx(float(r))
        assert s.group_id == packet.packet_id
    assert segs[0].advantage > 0 > segs[2].advantage
    with pytest.raises(ValueError, match="2 results for 3"):
        harness_r1.engineer_segments(eng.last[0][0], results[:2], group)


def test_dataset_cli_packets_then_sft(qwen_tok, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HARNESS_JAX_PROGRESS", "1")
    cats = ["counting", "aggregation-SUM"]
    target = {"kind": "factory", "factory": "tests.harness_r1.doubles:make_split_policy",
              "model": "scripted", "version": "3", "options": {"kwargs": {
                  "sizes": {"train": 6, "selection": 3}, "categories": cats}}}
    rc = dataset.main([
        "packets", "--out", str(tmp_path / "ds"), "--env", "dbbench",
        "--env-kwargs", json.dumps({"engine": "sqlite", "protocol": "text"}),
        "--target", json.dumps(target), "--batches", "train=2,held_out=1", "--batch-size", "3",
        "--budget-tokens", "4000", "--cache", str(tmp_path / "cache"),
        "--split-kwargs", json.dumps({"categories": cats})])
    out = capsys.readouterr()
    assert rc == 0 and "baselines[train]" in out.err
    summary = json.loads(out.out)
    assert summary["splits"]["train"]["batches"] == 2 and summary["target_usage"]["requests"] > 0
    n_train = summary["splits"]["train"]["packets"]
    assert n_train >= 1
    rc = dataset.main(["sft", "--packets", str(tmp_path / "ds"), "--split", "train",
                       "--teacher", "rule", "--k", "2", "--out", str(tmp_path / "sft.jsonl")])
    out = capsys.readouterr()
    s = json.loads(out.out)
    assert rc == 0 and s["examples"] == 2 * n_train and s["rejected"] == 0
    assert "teacher[rule]" in out.err
    exs = dataset.load_sft_examples(str(tmp_path / "sft.jsonl"))
    segs = dataset.sft_segments(str(tmp_path / "sft.jsonl"))
    for e, seg in zip(exs, segs):
        n_p, n_r = len(e["prompt_ids"]), len(e["response_ids"])
        assert seg.loss_mask == [0] * n_p + [1] * n_r
        assert e["prompt_version"] == prompt.PROMPT_VERSION
    assert s["response_tokens"] == sum(len(e["response_ids"]) for e in exs)
    with pytest.raises(SystemExit, match="--batches"):
        dataset.main(["packets", "--out", "x", "--env", "dbbench", "--target", "{}",
                      "--cache", "c", "--batches", "train:2"])
    with pytest.raises(SystemExit, match="--target: not valid JSON"):
        dataset.main(["packets", "--out", "x", "--env", "dbbench", "--target", "{kind",
                      "--cache", "c"])


def test_sft_examples_are_built_inside_training_scope():
    """Building the engineer's SFT data is training: a teacher that tries to open the sealed test
    split fails (the teacher is a test double that only tries to unseal)."""
    from harness_jax.envs import registry

    class PeekingTeacher:
        name = "peeking"

        def propose(self, packet, k, seed):
            with registry.sealed_test_access("a teacher peeking at test data"):
                return []

    with pytest.raises(registry.SealedSplitError, match="training_scope"):
        dataset.build_sft_examples([object()], PeekingTeacher(), tokenizer=None)
