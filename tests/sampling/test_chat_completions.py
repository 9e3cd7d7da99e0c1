"""``/v1/chat/completions`` over real HTTP with the official ``openai`` package as the client:
streamed (SSE ``chat.completion.chunk``s) and not, with and without tools, and the
deltas adding up to the non-streamed reply."""
import json

import openai
import pytest

from harness_jax.sampling.chat import render_messages, reply_view
from harness_jax.sampling.http_util import http_json
from harness_jax.sampling.server import EngineServer

from .doubles import ScriptedEngine

TOOLS = [{"type": "function", "function": {"name": "search", "description": "web search",
                                           "parameters": {"type": "object", "properties": {
                                               "q": {"type": "string"}}, "required": ["q"]}}}]
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Find x."}]


@pytest.fixture(scope="module")
def chat_server(tiny_hf_dense_dir, tokenizer):
    """A random tiny model with the full Qwen3.5 vocabulary, so rendered chat prompts fit."""
    from flax import nnx

    from harness_jax.models import qwen3_5
    from harness_jax.sampling import JaxEngine
    cfg = qwen3_5.Qwen3_5Config.from_hf(tiny_hf_dense_dir).replace(vocab_size=248320)
    model = qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0))
    eng = JaxEngine(model, max_slots=2, max_len=1024, prefill_buckets=(128,), decode_steps=4,
                    tokenizer=tokenizer)
    srv = EngineServer(eng, tokenizer=tokenizer, served_model_name="tiny-chat")
    url = srv.start()
    yield srv, url
    srv.shutdown()
    eng.close()


def _client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def _collect(stream):
    """Accumulates a streamed reply the way OpenAI clients do."""
    chunks = list(stream)
    content, calls, finish, roles, usage = "", {}, None, [], None
    for c in chunks:
        if c.usage is not None:
            usage = c.usage
        for ch in c.choices:
            d = ch.delta
            if d.role:
                roles.append(d.role)
            content += d.content or ""
            for tc in d.tool_calls or []:
                call = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                call["id"] = tc.id or call["id"]
                call["name"] += tc.function.name or ""
                call["arguments"] += tc.function.arguments or ""
            finish = ch.finish_reason or finish
    return chunks, content, [calls[i] for i in sorted(calls)], finish, roles, usage


@pytest.mark.slow
@pytest.mark.parametrize("tools", [None, TOOLS], ids=["no_tools", "tools"])
def test_streamed_reply_adds_up_to_the_unstreamed_one(chat_server, tokenizer, tools):
    srv, url = chat_server
    c = _client(url)
    kw = dict(model="tiny-chat", messages=MESSAGES, temperature=0.0, max_tokens=24, seed=3,
              **({"tools": tools} if tools else {}))
    full = c.chat.completions.create(**kw, extra_body={"return_token_ids": True})
    assert full.object == "chat.completion" and full.model == "tiny-chat"
    ids = full.choices[0].model_extra["response_token_ids"]
    assert full.usage.completion_tokens == len(ids) and full.usage.prompt_tokens == len(
        tokenizer.encode(render_messages(MESSAGES, tools=tools), add_special_tokens=False))
    expected, _ = reply_view(tokenizer.decode(ids, skip_special_tokens=True), tools=tools)
    assert full.choices[0].message.content == expected

    stream = c.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True})
    chunks, content, calls, finish, roles, usage = _collect(stream)
    assert roles == ["assistant"] and chunks[0].choices[0].delta.role == "assistant"
    assert all(ch.object == "chat.completion.chunk" and ch.id == chunks[0].id for ch in chunks)
    assert content == full.choices[0].message.content and calls == []
    assert finish == full.choices[0].finish_reason
    # several content deltas (the engine sends up to 4 tokens per step), each non-empty
    deltas = [ch.choices[0].delta.content for ch in chunks[1:] if ch.choices
              and ch.choices[0].delta.content]
    assert len(deltas) >= 2 and "".join(deltas) == content
    # usage: null on every chunk but the last, which has no choices
    assert chunks[-1].choices == [] and usage == full.usage
    assert all(ch.usage is None for ch in chunks[:-1])
    assert chunks[-2].choices[0].finish_reason == finish


@pytest.mark.slow
def test_sse_wire_format_and_stream_errors(chat_server):
    import urllib.request
    srv, url = chat_server
    body = {"model": "tiny-chat", "messages": MESSAGES, "max_tokens": 5, "temperature": 0.0,
            "stream": True}
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        assert resp.getheader("Content-Type") == "text/event-stream"
        events = [ln for ln in resp.read().decode().split("\n\n") if ln]
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
    last = json.loads(events[-2][6:])
    assert last["choices"][0]["finish_reason"] == "length" and "usage" not in last
    for bad, field in (({"stream_options": {"include_usage": True}}, "stream_options"),
                       ({"stream": True, "stream_options": {"nope": 1}}, "stream_options"),
                       ({"stream": "yes"}, "stream")):
        r = http_json("POST", url + "/v1/chat/completions", {**body, "stream": False, **bad})
        assert r.status == 400 and r.json["error"]["field"] == field, (bad, r.json)
    with pytest.raises(openai.BadRequestError):
        _client(url).chat.completions.create(
            model="tiny-chat", messages=[{"role": "robot", "content": "x"}], stream=True)


@pytest.mark.slow
def test_project_chat_client_against_the_server(chat_server, tokenizer, tmp_path):
    """``OpenAIChatClient`` (cached, costed) against the real endpoint."""
    from harness_jax.sampling.openai_client import ChatClientConfig, OpenAIChatClient
    url = chat_server[1]
    c = OpenAIChatClient(ChatClientConfig(base_url=url + "/v1", model="tiny-chat",
                                          cache_dir=str(tmp_path / "cache")))
    r = c.chat(MESSAGES, tools=TOOLS, temperature=0.0, max_tokens=6, seed=1, role="teacher",
               return_token_ids=True)
    choice = r.raw["choices"][0]
    assert choice["prompt_token_ids"] == tokenizer.encode(render_messages(MESSAGES, tools=TOOLS),
                                                          add_special_tokens=False)
    assert len(choice["response_token_ids"]) == r.completion_tokens <= 6
    assert r.prompt_tokens == len(choice["prompt_token_ids"])
    r2 = c.chat(MESSAGES, tools=TOOLS, temperature=0.0, max_tokens=6, seed=1, role="teacher",
                return_token_ids=True)
    assert r2.cached and r2.content == r.content
    assert c.usage_summary()["teacher"]["cache_hits"] == 1


def test_tool_call_deltas_streamed_and_not(tokenizer):
    reply = ("I will search.\n<tool_call>\n<function=search>\n<parameter=q>\nx y\n</parameter>\n"
             "</function>\n</tool_call>")
    ids = tokenizer.encode(reply, add_special_tokens=False) + [
        tokenizer.convert_tokens_to_ids("<|im_end|>")]
    srv = EngineServer(ScriptedEngine(ids, step=2), tokenizer=tokenizer)
    url = srv.start()
    try:
        c = _client(url)
        full = c.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS)
        msg = full.choices[0].message
        assert full.choices[0].finish_reason == "tool_calls" and msg.content == "I will search."
        assert [(t.function.name, json.loads(t.function.arguments)) for t in msg.tool_calls] == [
            ("search", {"q": "x y"})]
        chunks, content, calls, finish, _, _ = _collect(c.chat.completions.create(
            model="m", messages=MESSAGES, tools=TOOLS, stream=True, logprobs=True))
        assert content == "I will search." and finish == "tool_calls"
        assert [(x["name"], json.loads(x["arguments"])) for x in calls] == [("search", {"q": "x y"})]
        assert calls[0]["id"].startswith("call_")
        # no markup leaks into the content deltas; every sampled token's logprob is reported once
        assert not any("<tool" in (ch.choices[0].delta.content or "") for ch in chunks
                       if ch.choices)
        lps = [t for ch in chunks if ch.choices and ch.choices[0].logprobs
               for t in ch.choices[0].logprobs.content]
        assert len(lps) == len(ids) and all(t.logprob == -0.5 for t in lps)
    finally:
        srv.shutdown()


def test_reply_views_of_a_growing_text_extend_each_other(tokenizer):
    """The streaming invariant, on every prefix of replies with reasoning, tool calls, stop
    strings and whitespace that later becomes interior."""
    texts = [("Let me see.\n\n<tool_call>\n<function=search>\n<parameter=q>\nab\n</parameter>\n"
              "</function>\n</tool_call>\nDone.  ", TOOLS, False, ()),
             ("hmm, the table\n</think>\n\nAnswer: 42 STOP trailing", None, True, ("STOP",)),
             ("plain text with <tool but no call", TOOLS, False, ())]
    for text, tools, thinking, stops in texts:
        final_text = text[:text.find("STOP")] if stops else text
        final = reply_view(final_text, tools=tools, thinking=thinking)
        prev = ("", [])
        for n in range(len(text) + 1):
            view = reply_view(text[:n], tools=tools, thinking=thinking, final=False, stops=stops)
            assert view[0].startswith(prev[0]) and view[1][:len(prev[1])] == prev[1], (text[:n],)
            assert final[0].startswith(view[0]), (text[:n], view, final)
            prev = view
    assert reply_view("a<tool_call>\n<function=search>\n<parameter=q>\nz\n</parameter>\n"
                      "</function>\n</tool_call>", tools=TOOLS)[1][0].arguments == {"q": "z"}
