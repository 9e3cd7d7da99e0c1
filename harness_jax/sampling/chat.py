"""Qwen3.5 chat format: rendering conversations and parsing the policy's tool calls.

Rendering follows Qwen3.5's published chat format (ChatML turns ``<|im_start|>role ...<|im_end|>``):

* with tools, the system turn opens with a ``# Tools`` block listing every tool as one JSON line
  inside ``<tools>``, then the XML calling instructions, then the caller's system text;
* assistant tool calls are ``<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n
  </function>\\n</tool_call>`` (strings verbatim, other values as JSON);
* consecutive ``tool`` messages share one user turn of ``<tool_response>`` blocks;
* assistant turns after the last real user query keep their ``<think>`` block, earlier ones drop
  it; the generation prompt is ``<|im_start|>assistant\\n<think>\\n`` with thinking on and adds an
  empty ``\\n\\n</think>\\n\\n`` with thinking off.

The executor never re-renders a running conversation: it renders the opening prompt once and
appends *deltas* (``tool_turn_delta``, ``user_turn_delta``) after the tokens the policy sampled.
``parse_tool_calls`` reads the policy's reply back; malformed calls are reported with a precise
reason in ``errors`` and never guessed into a call.
"""
from __future__ import annotations

import json
import re
from typing import Any, Iterable, Optional, Sequence

from harness_jax.types import ToolCall

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE = "<tool_response>", "</tool_response>"

TOOLS_HEADER = "# Tools\n\nYou have access to the following functions:\n\n<tools>"
TOOLS_INSTRUCTIONS = (
    "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:"
    "\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\n"
    "value_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second "
    "parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n"
    "<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner "
    "<function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your "
    "function call in natural language BEFORE the function call, but NOT after\n- If there is "
    "no function call available, answer the question like normal with your current knowledge "
    "and do not tell the user about function calls\n</IMPORTANT>")


_CONTROL_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")


def neutralize_control_tokens(text: str) -> str:
    """Makes ChatML control tokens inside harness-inserted text (environment observations, hook
    messages) plain text, so they cannot forge turn boundaries (``|`` becomes a full-width bar)."""
    for tok in _CONTROL_TOKENS:
        if tok in text:
            text = text.replace(tok, tok.replace("|", "\uff5c"))
    return text


def tool_json(tool: dict) -> str:
    """One tool as the template's ``tojson`` writes it (non-ASCII kept, default separators)."""
    return json.dumps(tool, ensure_ascii=False)


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI-style [{"type": "text", "text": ...}] parts
        out = []
        for part in content:
            if isinstance(part, dict) and "text" in part:
                out.append(str(part["text"]))
            else:
                raise ValueError(f"{where}: only text content parts are supported, got {part!r}")
        return "".join(out)
    raise ValueError(f"{where}: content must be a string, a list of text parts or None, "
                     f"got {type(content).__name__}")


def format_argument_value(value: Any) -> str:
    """A parameter value inside ``<parameter=...>``: strings verbatim, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _call_parts(call: Any, where: str) -> tuple[str, dict]:
    if isinstance(call, ToolCall):
        return call.name, dict(call.arguments)
    if not isinstance(call, dict):
        raise ValueError(f"{where}: a tool call must be a dict or ToolCall, got {call!r}")
    fn = call.get("function", call)
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: tool call has no 'name'")
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: tool call {name!r} has arguments that are not valid "
                             f"JSON ({e}); pass a dict") from e
    if not isinstance(args, dict):
        raise ValueError(f"{where}: tool call {name!r} arguments must be a mapping")
    return name, args


def render_tool_call(name: str, arguments: dict) -> str:
    """One call in Qwen3.5's XML format (no leading separator)."""
    parts = [f"{TOOL_CALL_OPEN}\n<function={name}>\n"]
    for key, value in arguments.items():
        parts.append(f"<parameter={key}>\n{format_argument_value(value)}\n</parameter>\n")
    parts.append(f"</function>\n{TOOL_CALL_CLOSE}")
    return "".join(parts)


def split_thinking(text: str) -> tuple[str, str]:
    """(reasoning, content) of an assistant text; reasoning is '' when there is no ``</think>``."""
    if THINK_CLOSE not in text:
        return "", text
    head, _, tail = text.rpartition(THINK_CLOSE)
    head = head.rstrip("\n")
    reasoning = head.split(THINK_OPEN)[-1].lstrip("\n")
    return reasoning, tail.lstrip("\n")


def render_messages(messages: Sequence[dict], tools: Optional[Sequence[dict]] = None,
                    add_generation_prompt: bool = True, enable_thinking: bool = False) -> str:
    """Renders a conversation exactly as Qwen3.5's chat template does.

    ``messages``: dicts with ``role`` in system/user/assistant/tool, ``content`` (str), and for
    assistants optional ``tool_calls`` (``{"name", "arguments"}``, OpenAI ``{"function": ...}``
    or ``ToolCall``) and ``reasoning_content``. ``tools``: JSON tool specs (OpenAI style).
    """
    if not messages:
        raise ValueError("render_messages: messages is empty; pass at least one user message")
    msgs = list(messages)
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool"):
            raise ValueError(f"render_messages: messages[{i}] must be a dict with role in "
                             f"system/user/assistant/tool, got {m!r}")
    out: list[str] = []
    first_is_system = msgs[0]["role"] == "system"
    system_text = _text(msgs[0].get("content"), "messages[0]").strip() if first_is_system else ""
    if tools:
        out.append(f"{IM_START}system\n{TOOLS_HEADER}")
        for tool in tools:
            out.append("\n" + tool_json(tool))
        out.append("\n</tools>" + TOOLS_INSTRUCTIONS)
        if system_text:
            out.append("\n\n" + system_text)
        out.append(f"{IM_END}\n")
    elif first_is_system:
        out.append(f"{IM_START}system\n{system_text}{IM_END}\n")

    last_query = None
    for i in range(len(msgs) - 1, -1, -1):
        if msgs[i]["role"] == "user":
            c = _text(msgs[i].get("content"), f"messages[{i}]").strip()
            if not (c.startswith(TOOL_RESPONSE_OPEN) and c.endswith(TOOL_RESPONSE_CLOSE)):
                last_query = i
                break
    if last_query is None:
        raise ValueError("render_messages: no user query found in messages (Qwen3.5's template "
                         "requires at least one user message that is not a tool response)")

    for i, m in enumerate(msgs):
        role = m["role"]
        content = _text(m.get("content"), f"messages[{i}]").strip()
        if role == "system":
            if i != 0:
                raise ValueError(f"render_messages: messages[{i}] is a system message; only the "
                                 "first message may be a system message")
        elif role == "user":
            out.append(f"{IM_START}user\n{content}{IM_END}\n")
        elif role == "assistant":
            if isinstance(m.get("reasoning_content"), str):
                reasoning = m["reasoning_content"]
            elif THINK_CLOSE in content:
                # the template's split: reasoning from the first "</think>", content after the last
                reasoning = content.split(THINK_CLOSE)[0].rstrip("\n").split(THINK_OPEN)[-1]
                reasoning = reasoning.lstrip("\n")
                content = content.split(THINK_CLOSE)[-1].lstrip("\n")
            else:
                reasoning = ""
            reasoning = reasoning.strip()
            if i > last_query:
                out.append(f"{IM_START}assistant\n{THINK_OPEN}\n{reasoning}\n{THINK_CLOSE}\n\n"
                           f"{content}")
            else:
                out.append(f"{IM_START}assistant\n{content}")
            for j, call in enumerate(m.get("tool_calls") or []):
                name, args = _call_parts(call, f"messages[{i}].tool_calls[{j}]")
                if j == 0:
                    sep = "\n\n" if content.strip() else ""
                else:
                    sep = "\n"
                out.append(sep + render_tool_call(name, args))
            out.append(f"{IM_END}\n")
        else:  # tool
            if i == 0 or msgs[i - 1]["role"] != "tool":
                out.append(f"{IM_START}user")
            out.append(f"\n{TOOL_RESPONSE_OPEN}\n{content}\n{TOOL_RESPONSE_CLOSE}")
            if i == len(msgs) - 1 or msgs[i + 1]["role"] != "tool":
                out.append(f"{IM_END}\n")
    if add_generation_prompt:
        out.append(generation_prompt(enable_thinking))
    return "".join(out)


def generation_prompt(enable_thinking: bool = False) -> str:
    """What follows the last turn so the model answers as the assistant."""
    if enable_thinking:
        return f"{IM_START}assistant\n{THINK_OPEN}\n"
    return f"{IM_START}assistant\n{THINK_OPEN}\n\n{THINK_CLOSE}\n\n"


def tool_turn_delta(responses: Iterable[str], enable_thinking: bool = False,
                    add_generation_prompt: bool = True) -> str:
    """Text appended after an assistant turn's ``<|im_end|>`` to relay tool results.

    Matches what ``render_messages`` produces for trailing ``tool`` messages: the newline that
    closes the assistant turn, one user turn of ``<tool_response>`` blocks, then the next
    generation prompt.
    """
    parts = [f"\n{IM_START}user"]
    n = 0
    for r in responses:
        parts.append(f"\n{TOOL_RESPONSE_OPEN}\n{r.strip()}\n{TOOL_RESPONSE_CLOSE}")
        n += 1
    if n == 0:
        raise ValueError("tool_turn_delta: pass at least one tool response")
    parts.append(f"{IM_END}\n")
    if add_generation_prompt:
        parts.append(generation_prompt(enable_thinking))
    return "".join(parts)


def user_turn_delta(text: str, enable_thinking: bool = False,
                    add_generation_prompt: bool = True) -> str:
    """Text appended after an assistant turn's ``<|im_end|>`` for a plain user turn."""
    out = f"\n{IM_START}user\n{text.strip()}{IM_END}\n"
    if add_generation_prompt:
        out += generation_prompt(enable_thinking)
    return out


# ------------------------------------------------------------------------------------------
# Parsing tool calls
# ------------------------------------------------------------------------------------------
_FUNC_OPEN = re.compile(r"<function=([^>\n]*)>")
_PARAM_OPEN = re.compile(r"<parameter=([^>\n]*)>")


def _schema_index(tools: Optional[Sequence[dict]]) -> Optional[dict[str, dict]]:
    if not tools:
        return None
    index = {}
    for t in tools:
        fn = t.get("function", t)
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            index[fn["name"]] = fn.get("parameters") or {}
    return index


def _convert(value: str, schema: Optional[dict], where: str, errors: list[str]):
    """Converts a raw parameter string by its declared JSON-schema type (strings stay as-is)."""
    if not schema:
        return value
    typ = schema.get("type")
    if isinstance(typ, list):
        typ = next((t for t in typ if t != "null"), None)
    if typ in (None, "string"):
        return value
    s = value.strip()
    try:
        if typ == "integer":
            return int(s)
        if typ == "number":
            v = float(s)
            return int(v) if re.fullmatch(r"-?\d+", s) else v
        if typ == "boolean":
            if s.lower() in ("true", "false"):
                return s.lower() == "true"
            raise ValueError("expected true or false")
        if typ in ("object", "array"):
            v = json.loads(s)
            if typ == "object" and not isinstance(v, dict):
                raise ValueError("expected a JSON object")
            if typ == "array" and not isinstance(v, list):
                raise ValueError("expected a JSON array")
            return v
    except (ValueError, json.JSONDecodeError) as e:
        errors.append(f"{where}: value {value[:60]!r} is not a valid {typ} ({e})")
        return None
    return value


def _parse_xml_call(body: str, where: str, schemas, errors: list[str]) -> Optional[ToolCall]:
    s = body.strip()
    m = _FUNC_OPEN.match(s)
    if not m:
        errors.append(f"{where}: expected '<function=NAME>' right after <tool_call>, got "
                      f"{s[:40]!r}")
        return None
    name = m.group(1).strip()
    if not name:
        errors.append(f"{where}: empty function name in <function=>")
        return None
    where = f"{where} ({name})"
    end = s.rfind("</function>")
    if end < 0:
        errors.append(f"{where}: missing </function> before </tool_call>")
        return None
    if s[end + len("</function>"):].strip():
        errors.append(f"{where}: unexpected text after </function>: "
                      f"{s[end + len('</function>'):].strip()[:40]!r}")
        return None
    inner = s[m.end():end]
    schema = None
    if schemas is not None:
        if name not in schemas:
            errors.append(f"{where}: unknown function {name!r}; available: {sorted(schemas)}")
            return None
        schema = schemas[name]
    props = (schema or {}).get("properties") or {}
    args: dict = {}
    pos = 0
    ok = True
    while True:
        rest = inner[pos:]
        if not rest.strip():
            break
        pm = _PARAM_OPEN.search(inner, pos)
        if pm is None or inner[pos:pm.start()].strip():
            errors.append(f"{where}: unexpected text {rest.strip()[:40]!r} where a "
                          "<parameter=KEY> was expected")
            ok = False
            break
        key = pm.group(1).strip()
        close = inner.find("</parameter>", pm.end())
        nxt = _PARAM_OPEN.search(inner, pm.end())
        if close < 0 or (nxt is not None and nxt.start() < close):
            errors.append(f"{where}: <parameter={key}> is not closed by </parameter>")
            ok = False
            break
        raw = inner[pm.end():close]
        if raw.startswith("\n"):
            raw = raw[1:]
        if raw.endswith("\n"):
            raw = raw[:-1]
        if not key:
            errors.append(f"{where}: empty parameter name in <parameter=>")
            ok = False
        elif key in args:
            errors.append(f"{where}: parameter {key!r} given twice")
            ok = False
        else:
            n_err = len(errors)
            val = _convert(raw, props.get(key) if schema is not None else None,
                           f"{where} parameter {key!r}", errors)
            if len(errors) > n_err:
                ok = False
            args[key] = val
        pos = close + len("</parameter>")
    if ok and schema is not None:
        missing = [r for r in (schema.get("required") or []) if r not in args]
        if missing:
            errors.append(f"{where}: missing required parameter(s) {missing}")
            ok = False
    return ToolCall(name, args) if ok else None


def _parse_json_call(body: str, where: str, schemas, errors: list[str]) -> Optional[ToolCall]:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        errors.append(f"{where}: JSON tool call is not valid JSON ({e.msg} at char {e.pos})")
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        errors.append(f"{where}: JSON tool call must be an object with a non-empty 'name'")
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError as e:
            errors.append(f"{where} ({obj['name']}): 'arguments' string is not JSON ({e.msg})")
            return None
    if not isinstance(args, dict):
        errors.append(f"{where} ({obj['name']}): 'arguments' must be a JSON object")
        return None
    if schemas is not None and obj["name"] not in schemas:
        errors.append(f"{where}: unknown function {obj['name']!r}; available: {sorted(schemas)}")
        return None
    if schemas is not None:
        missing = [r for r in (schemas[obj["name"]].get("required") or []) if r not in args]
        if missing:
            errors.append(f"{where} ({obj['name']}): missing required parameter(s) {missing}")
            return None
    return ToolCall(obj["name"], args)


def parse_tool_calls(text: str, tools: Optional[Sequence[dict]] = None
                     ) -> tuple[str, list[ToolCall], list[str]]:
    """Reads the tool calls out of an assistant reply.

    Returns ``(content, tool_calls, errors)``: ``content`` is the reply without its reasoning
    (anything up to the last ``</think>``) and without the ``<tool_call>`` blocks, stripped;
    ``tool_calls`` the well-formed calls in order (XML ``<function=...>`` bodies, or JSON
    ``{"name", "arguments"}`` bodies); ``errors`` one precise message per malformed call (a
    malformed call is never turned into a call). With ``tools``, parameter values are converted
    by their schema types and unknown functions / missing required parameters are errors;
    without it every parameter value stays a string.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_tool_calls: text must be a str, got {type(text).__name__}")
    _, body = split_thinking(text)
    schemas = _schema_index(tools)
    calls: list[ToolCall] = []
    errors: list[str] = []
    content_parts: list[str] = []
    pos = 0
    idx = 0
    while True:
        start = body.find(TOOL_CALL_OPEN, pos)
        stray = body.find(TOOL_CALL_CLOSE, pos)
        if stray >= 0 and (start < 0 or stray < start):
            errors.append(f"stray </tool_call> at char {stray} without a matching <tool_call>")
            content_parts.append(body[pos:stray])
            pos = stray + len(TOOL_CALL_CLOSE)
            continue
        if start < 0:
            content_parts.append(body[pos:])
            break
        content_parts.append(body[pos:start])
        idx += 1
        where = f"tool call {idx}"
        end = body.find(TOOL_CALL_CLOSE, start)
        nested = body.find(TOOL_CALL_OPEN, start + len(TOOL_CALL_OPEN))
        if end < 0 or (0 <= nested < end):
            stop = nested if 0 <= nested and (end < 0 or nested < end) else len(body)
            errors.append(f"{where}: <tool_call> at char {start} is not closed by </tool_call>")
            pos = stop
            if stop == len(body):
                break
            continue
        inner = body[start + len(TOOL_CALL_OPEN):end]
        if inner.strip().startswith("{"):
            call = _parse_json_call(inner.strip(), where, schemas, errors)
        else:
            call = _parse_xml_call(inner, where, schemas, errors)
        if call is not None:
            calls.append(call)
        pos = end + len(TOOL_CALL_CLOSE)
    content = "".join(content_parts).strip()
    return content, calls, errors


def _held_prefix(text: str, markers: Iterable[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of a marker."""
    best = 0
    for m in markers:
        for n in range(min(len(m) - 1, len(text)), best, -1):
            if text.endswith(m[:n]):
                best = n
                break
    return best


def reply_view(text: str, tools: Optional[Sequence[dict]] = None, thinking: bool = False,
               final: bool = True, stops: Sequence[str] = ()) -> tuple[str, list[ToolCall]]:
    """What an OpenAI-style chat reply shows of assistant ``text``: ``(content, tool_calls)``.

    ``final=True`` (the whole reply): with ``tools`` the content and calls of
    ``parse_tool_calls``, else the text after the reasoning (``split_thinking``). ``final=False``
    (a reply still being generated) gives the same view of the text so far, minus whatever
    later tokens could still change: a partial ``<tool_call>``/``</think>``/stop string at the
    end, an unclosed ``<tool_call>`` block, trailing whitespace (the final content is stripped),
    and all of it while a thinking reply has not closed ``</think>``. Successive views of a
    growing text therefore extend each other, and their last one equals the final view, so a
    stream of their differences adds up to the non-streamed reply.
    """
    if not final:
        cut = [i for i in (text.find(s) for s in stops if s) if i >= 0]
        if cut:
            text = text[:min(cut)]
        text = text[:len(text) - _held_prefix(text, [*stops, TOOL_CALL_OPEN, THINK_CLOSE])]
        if thinking and THINK_CLOSE not in text:
            return "", []
    if not tools:
        content = split_thinking(text)[1]
        return (content if final else content.rstrip()), []
    if not final:
        last_open = text.rfind(TOOL_CALL_OPEN)
        if last_open >= 0 and text.find(TOOL_CALL_CLOSE, last_open) < 0:
            text = text[:last_open]
    content, calls, _ = parse_tool_calls(text, tools=tools)
    return content, calls


# ------------------------------------------------------------------------------------------
# The same format as a Jinja chat template, attached to the packaged tokenizer so that
# ``tokenizer.apply_chat_template`` agrees with ``render_messages`` (tested).
# ------------------------------------------------------------------------------------------
QWEN3_5_CHAT_TEMPLATE = (
    "{%- if not messages %}{{- raise_exception('No messages provided.') }}{%- endif %}"
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' + " + json.dumps(TOOLS_HEADER) + " }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>' + " + json.dumps(TOOLS_INSTRUCTIONS) + " }}"
    "{%- if messages[0].role == 'system' and messages[0].content | trim %}"
    "{{- '\\n\\n' + messages[0].content | trim }}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + (messages[0].content or '') | trim + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- set ns = namespace(q=-1) %}"
    "{%- for m in messages %}{%- if m.role == 'user' %}"
    "{%- set c = (m.content or '') | trim %}"
    "{%- if not (c.startswith('<tool_response>') and c.endswith('</tool_response>')) %}"
    "{%- set ns.q = loop.index0 %}{%- endif %}{%- endif %}{%- endfor %}"
    "{%- if ns.q < 0 %}{{- raise_exception('No user query found in messages.') }}{%- endif %}"
    "{%- for m in messages %}"
    "{%- set content = (m.content or '') | trim %}"
    "{%- if m.role == 'user' %}{{- '<|im_start|>user\\n' + content + '<|im_end|>\\n' }}"
    "{%- elif m.role == 'assistant' %}"
    "{%- set reasoning = '' %}"
    "{%- if m.reasoning_content is string %}{%- set reasoning = m.reasoning_content %}"
    "{%- elif '</think>' in content %}"
    "{%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{%- if loop.index0 > ns.q %}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning | trim + '\\n</think>\\n\\n' + content }}"
    "{%- else %}{{- '<|im_start|>assistant\\n' + content }}{%- endif %}"
    "{%- for tc in (m.tool_calls or []) %}"
    "{%- set f = tc.function if tc.function is defined else tc %}"
    "{%- if loop.first %}{{- '\\n\\n' if content | trim else '' }}{%- else %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n<function=' + f.name + '>\\n' }}"
    "{%- for k, v in (f.arguments or {}) | items %}"
    "{{- '<parameter=' + k + '>\\n' }}"
    "{{- v if v is string else v | tojson }}"
    "{{- '\\n</parameter>\\n' }}{%- endfor %}"
    "{{- '</function>\\n</tool_call>' }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}"
    "{%- if loop.first or loop.previtem.role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}"
    "{%- if loop.last or loop.nextitem.role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- else %}{{- '<think>\\n' }}{%- endif %}{%- endif %}"
)
