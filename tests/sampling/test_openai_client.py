"""OpenAI-compatible chat client: cache, retries, key handling, accounting, structured output.

Uses a scripted local HTTP server (``doubles.ChatServer``) as a test double: a real OpenAI-compatible provider cannot be
reached from CI, and rate-limit / 5xx / malformed-reply behaviour must be provoked on demand.
(The client is also run against the real ``EngineServer`` chat endpoint in
test_chat_completions.py.)
"""
import functools
import json

import pytest

from harness_jax.sampling.openai_client import (ChatClientConfig, ChatClientError, OpenAIChatClient,
                                                StructuredOutputError, extract_json, request_key,
                                                validate_schema)

from .doubles import ChatServer, reply


class _Scripted:
    """Replies of the scripted server (``ChatServer``, see doubles.py) in order, then the default."""

    def __init__(self):
        self.script = []       # list of (status, body_dict_or_str, headers)
        self.default = (200, None, {})
        self.server = ChatServer(self.answer)
        self.url = self.server.url

    def answer(self, body):
        status, out, headers = self.script.pop(0) if self.script else self.default
        return status, (_reply("ok") if out is None else out), headers

    @property
    def requests(self):
        """(headers, body) of every request so far."""
        return list(zip(self.server.headers, self.server.requests))


@pytest.fixture()
def fake():
    state = _Scripted()
    yield state
    state.server.close()


_reply = functools.partial(reply, pt=10, ct=5)


def _client(fake, tmp_path, **kw):
    cfg = ChatClientConfig(base_url=fake.url, model="m", cache_dir=str(tmp_path / "cache"),
                           backoff_s=0.01, price_input_per_mtok=1.0, price_output_per_mtok=2.0, **kw)
    return OpenAIChatClient(cfg)


MSG = [{"role": "user", "content": "hi"}]


def test_cache_is_content_addressed_and_free_on_rerun(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("HJ_TEST_KEY", "secret-key-123")
    c = _client(fake, tmp_path, api_key_env="HJ_TEST_KEY")
    r1 = c.chat(MSG, role="editor", temperature=0.0, seed=1)
    r2 = c.chat(MSG, role="editor", temperature=0.0, seed=1)
    assert r1.content == r2.content == "ok" and not r1.cached and r2.cached
    assert len(fake.requests) == 1
    assert fake.requests[0][0]["Authorization"] == "Bearer secret-key-123"
    assert fake.requests[0][1]["seed"] == 1 and fake.requests[0][1]["model"] == "m"
    c.chat(MSG, role="editor", temperature=0.0, seed=2)       # any field change -> new call
    assert len(fake.requests) == 2
    u = c.usage_summary()["editor"]
    assert u["calls"] == 3 and u["cache_hits"] == 1 and u["prompt_tokens"] == 20
    assert u["cost_usd"] == pytest.approx((20 * 1.0 + 10 * 2.0) / 1e6)
    # the key is never written to the cache
    for p in (tmp_path / "cache").rglob("*.json"):
        assert "secret-key-123" not in p.read_text()
    # a fresh client (rerun) reads the same cache
    c2 = _client(fake, tmp_path, api_key_env="HJ_TEST_KEY")
    assert c2.chat(MSG, role="editor", temperature=0.0, seed=1).cached
    assert len(fake.requests) == 2
    assert request_key(fake.url, {"a": 1, "b": 2}) == request_key(fake.url + "/", {"b": 2, "a": 1})


def test_retries_on_429_and_5xx_then_clear_error(fake, tmp_path):
    c = _client(fake, tmp_path, max_retries=2)
    fake.script = [(429, {"error": "slow down"}, {"Retry-After": "0"}), (503, "busy", {})]
    assert c.chat(MSG, use_cache=False).content == "ok"
    assert len(fake.requests) == 3
    fake.script = [(500, "boom", {})] * 3
    with pytest.raises(ChatClientError, match="after 3 attempts"):
        c.chat(MSG, use_cache=False, seed=5)
    fake.script = [(400, {"error": {"message": "bad model"}}, {})]
    with pytest.raises(ChatClientError, match="rejected"):
        c.chat(MSG, use_cache=False, seed=6)
    fake.script = [(200, {"nochoices": 1}, {})]
    with pytest.raises(ChatClientError, match="malformed"):
        c.chat(MSG, use_cache=False, seed=7)


def test_key_handling(fake, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="NAME"):
        ChatClientConfig(base_url=fake.url, model="m", api_key_env="sk-abc-123")
    monkeypatch.delenv("HJ_MISSING_KEY", raising=False)
    c = _client(fake, tmp_path, api_key_env="HJ_MISSING_KEY")
    with pytest.raises(ChatClientError, match="HJ_MISSING_KEY"):
        c.chat(MSG)


def test_tool_calls_are_parsed(fake, tmp_path):
    c = _client(fake, tmp_path)
    fake.script = [(200, _reply(None, [{"id": "c1", "type": "function", "function": {
        "name": "search", "arguments": "{\"q\": \"x\"}"}}]), {})]
    r = c.chat(MSG, tools=[{"type": "function", "function": {"name": "search"}}])
    assert r.tool_calls == [{"id": "c1", "name": "search", "arguments": {"q": "x"}}]
    assert fake.requests[-1][1]["tools"][0]["function"]["name"] == "search"


SCHEMA = {"type": "object", "required": ["rank"], "properties": {"rank": {"type": "array", "items": {"type": "integer"}}}}


def test_chat_json_parse_repair_reject(fake, tmp_path):
    c = _client(fake, tmp_path)
    fake.script = [(200, _reply("Sure:\n```json\n{\"rank\": [2, 1]}\n```"), {})]
    assert c.chat_json(MSG, schema=SCHEMA, seed=1) == {"rank": [2, 1]}
    fake.script = [(200, _reply("{\"rank\": \"2,1\"}"), {}), (200, _reply("{\"rank\": [1]}"), {})]
    assert c.chat_json(MSG, schema=SCHEMA, seed=2) == {"rank": [1]}
    repair_msgs = fake.requests[-1][1]["messages"]
    assert repair_msgs[-1]["role"] == "user" and "$.rank" in repair_msgs[-1]["content"]
    fake.script = [(200, _reply("no json here"), {}), (200, _reply("still none"), {})]
    with pytest.raises(StructuredOutputError, match="no JSON"):
        c.chat_json(MSG, schema=SCHEMA, seed=3)


def test_extract_and_validate_helpers():
    assert extract_json('pre {"a": {"b": "}"}} post') == {"a": {"b": "}"}}
    assert extract_json("[1, 2]") == [1, 2]
    with pytest.raises(ValueError):
        extract_json("{broken")
    assert validate_schema({"rank": [1, True]}, SCHEMA) == ["$.rank[1]: expected integer, got bool"]
    assert validate_schema({}, SCHEMA) == ["$: missing required key 'rank'"]
