"""Golden tests of the Qwen3.5 chat rendering and precise tool-call parsing."""
import pytest

from harness_jax.envs.base import ToolCall
from harness_jax.sampling import chat

TOOL = {"type": "function", "function": {
    "name": "execute_sql", "description": "Run one SQL statement",
    "parameters": {"type": "object", "properties": {"sql": {"type": "string"},
                                                    "limit": {"type": "integer"}},
                   "required": ["sql"]}}}


def test_plain_conversation_golden():
    msgs = [{"role": "system", "content": "Be brief. "},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello!"},
            {"role": "user", "content": "Again"}]
    assert chat.render_messages(msgs) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n"       # thinking of an old turn is dropped
        "<|im_start|>user\nAgain<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert chat.render_messages(msgs, enable_thinking=True).endswith(
        "<|im_start|>assistant\n<think>\n")
    assert not chat.render_messages(msgs, add_generation_prompt=False).endswith("assistant\n")


def test_tools_block_tool_calls_and_responses_golden():
    msgs = [{"role": "system", "content": "You are a DB agent."},
            {"role": "user", "content": "Count users"},
            {"role": "assistant", "content": "Let me query.", "reasoning_content": "think",
             "tool_calls": [{"function": {"name": "execute_sql",
                                          "arguments": {"sql": "SELECT 1", "limit": 5}}},
                            ToolCall("execute_sql", {"sql": "SELECT 2"})]},
            {"role": "tool", "content": "[(1,)]"},
            {"role": "tool", "content": "[(2,)]"}]
    out = chat.render_messages(msgs, tools=[TOOL])
    expected = (
        "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
        '{"type": "function", "function": {"name": "execute_sql", "description": "Run one SQL '
        'statement", "parameters": {"type": "object", "properties": {"sql": {"type": "string"}, '
        '"limit": {"type": "integer"}}, "required": ["sql"]}}}\n</tools>'
        + chat.TOOLS_INSTRUCTIONS + "\n\nYou are a DB agent.<|im_end|>\n"
        "<|im_start|>user\nCount users<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nthink\n</think>\n\nLet me query.\n\n"
        "<tool_call>\n<function=execute_sql>\n<parameter=sql>\nSELECT 1\n</parameter>\n"
        "<parameter=limit>\n5\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=execute_sql>\n<parameter=sql>\nSELECT 2\n</parameter>\n"
        "</function>\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n[(1,)]\n</tool_response>\n<tool_response>\n[(2,)]\n"
        "</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert out == expected
    assert "If you choose to call a function ONLY reply" in chat.TOOLS_INSTRUCTIONS


def test_deltas_extend_a_rendered_prefix_exactly():
    msgs = [{"role": "user", "content": "q"},
            {"role": "assistant", "content": "",
             "tool_calls": [{"name": "f", "arguments": {"x": [1, 2]}}]}]
    prefix = chat.render_messages(msgs, add_generation_prompt=False)
    assert prefix.endswith("<parameter=x>\n[1, 2]\n</parameter>\n</function>\n</tool_call>"
                           "<|im_end|>\n")
    full = chat.render_messages(msgs + [{"role": "tool", "content": "ok"}])
    # the executor appends the delta right after the sampled <|im_end|> (no trailing newline)
    assert prefix[:-1] + chat.tool_turn_delta(["ok"]) == full
    # a new user query makes the template drop earlier thinking blocks, so a user delta is
    # checked against its own rendering (the executor never re-renders the prefix)
    assert chat.user_turn_delta(" next ") == (
        "\n<|im_start|>user\nnext<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")


@pytest.mark.parametrize("msgs,tools", [
    ([{"role": "user", "content": "hi"}], None),
    ([{"role": "system", "content": "s"}, {"role": "user", "content": " hi "},
      {"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}], None),
    ([{"role": "user", "content": "hi"},
      {"role": "assistant", "content": "x</think>\n\ny",
       "tool_calls": [{"name": "execute_sql", "arguments": {"sql": "S", "limit": 2}}]},
      {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"},
      {"role": "assistant", "content": "done"}], [TOOL]),
])
def test_tokenizer_chat_template_agrees_with_renderer(tokenizer, msgs, tools):
    for thinking in (False, True):
        ours = chat.render_messages(msgs, tools=tools, enable_thinking=thinking)
        theirs = tokenizer.apply_chat_template(msgs, tools=tools, tokenize=False,
                                              add_generation_prompt=True,
                                              enable_thinking=thinking)
        assert ours == theirs


def test_render_errors_are_clear():
    with pytest.raises(ValueError, match="messages is empty"):
        chat.render_messages([])
    with pytest.raises(ValueError, match="no user query"):
        chat.render_messages([{"role": "system", "content": "s"}])
    with pytest.raises(ValueError, match=r"messages\[1\] is a system message"):
        chat.render_messages([{"role": "user", "content": "u"}, {"role": "system", "content": "s"}])
    with pytest.raises(ValueError, match="role"):
        chat.render_messages([{"role": "bot", "content": "u"}])


def test_parse_xml_calls_with_schema_conversion():
    text = ("I will query.\n\n<tool_call>\n<function=execute_sql>\n<parameter=sql>\n"
            "SELECT *\nFROM t\n</parameter>\n<parameter=limit>\n10\n</parameter>\n</function>\n"
            "</tool_call>")
    content, calls, errors = chat.parse_tool_calls(text, tools=[TOOL])
    assert errors == []
    assert content == "I will query."
    assert calls == [ToolCall("execute_sql", {"sql": "SELECT *\nFROM t", "limit": 10})]
    # without a schema values stay strings (no guessing)
    _, calls, _ = chat.parse_tool_calls(text)
    assert calls[0].arguments["limit"] == "10"


def test_parse_json_calls_and_thinking_is_ignored():
    text = ('<think>maybe <tool_call>{"name": "nope"}</tool_call></think>\n\n'
            '<tool_call>\n{"name": "execute_sql", "arguments": {"sql": "S"}}\n</tool_call>')
    content, calls, errors = chat.parse_tool_calls(text)
    assert (content, calls, errors) == ("", [ToolCall("execute_sql", {"sql": "S"})], [])


@pytest.mark.parametrize("text,fragment", [
    ("<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>",
     "<parameter=a> is not closed"),
    ("<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n", "not closed by </tool_call>"),
    ("<tool_call>\nf(a=1)\n</tool_call>", "expected '<function=NAME>'"),
    ("<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</tool_call>",
     "missing </function>"),
    ("<tool_call>\n<function=>\n</function>\n</tool_call>", "empty function name"),
    ("<tool_call>\n<function=f>\nhello\n</function>\n</tool_call>", "unexpected text 'hello'"),
    ("<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=a>\n2\n</parameter>\n"
     "</function>\n</tool_call>", "parameter 'a' given twice"),
    ('<tool_call>{"name": "f", "arguments": {</tool_call>', "not valid JSON"),
    ("answer </tool_call>", "stray </tool_call>"),
])
def test_malformed_calls_reported_precisely(text, fragment):
    _, calls, errors = chat.parse_tool_calls(text)
    assert calls == []
    assert len(errors) == 1 and fragment in errors[0], errors


def test_schema_errors():
    bad_type = ("<tool_call>\n<function=execute_sql>\n<parameter=sql>\nS\n</parameter>\n"
                "<parameter=limit>\nten\n</parameter>\n</function>\n</tool_call>")
    _, calls, errors = chat.parse_tool_calls(bad_type, tools=[TOOL])
    assert calls == [] and "not a valid integer" in errors[0]
    missing = "<tool_call>\n<function=execute_sql>\n</function>\n</tool_call>"
    assert "missing required parameter(s) ['sql']" in chat.parse_tool_calls(missing, [TOOL])[2][0]
    unknown = "<tool_call>\n<function=drop_db>\n</function>\n</tool_call>"
    assert "unknown function 'drop_db'" in chat.parse_tool_calls(unknown, [TOOL])[2][0]
    # one good and one bad call: the good one is kept, the bad one reported
    both = ("<tool_call>\n<function=execute_sql>\n<parameter=sql>\nS\n</parameter>\n</function>\n"
            "</tool_call>\n" + unknown)
    _, calls, errors = chat.parse_tool_calls(both, [TOOL])
    assert len(calls) == 1 and len(errors) == 1 and errors[0].startswith("tool call 2")
