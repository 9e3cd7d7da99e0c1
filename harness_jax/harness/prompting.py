"""What the executor writes for the policy and reads back from it: the system prompt (skills and
tool notes from ``on_init``), the tool list (with ``on_init``'s tool hints), harness-inserted
text (control tokens neutralised, capped) and the parsing of a reply into actions under the
harness's calling convention (Qwen XML tool calls, a JSON tool-call block, ReAct text, or plain
text). Pure functions of the harness spec and the text; the turn loop (``turns``) calls them.
"""
from __future__ import annotations

import json
import re
from typing import Any, Optional

from harness_jax.envs.base import ToolCall
from harness_jax.harness.specs import HarnessSpec
from harness_jax.sampling import chat

HINT_PREFIX = "[Harness hint] "
NOTE_PREFIX = "[Harness] "


# ------------------------------------------------------------------------------------- actions
def action_json(action: Any) -> Any:
    """An action as JSON (a string, or ``{"name", "arguments"}`` for a tool call)."""
    if isinstance(action, ToolCall):
        return {"name": action.name, "arguments": action.arguments}
    return action


def action_key(action: Any) -> str:
    """A canonical string of an action (repeated-action accounting)."""
    return json.dumps(action_json(action), sort_keys=True, default=str)


def to_action(action: Any) -> Any:
    """A hook/rule action (str or {"name","arguments"}) as an environment action."""
    if isinstance(action, dict):
        return ToolCall(str(action["name"]), dict(action.get("arguments") or {}))
    return action


# -------------------------------------------------------------------------------------- text
def inserted(text: Any, cap: Optional[int] = None) -> str:
    """Harness-inserted text: control tokens neutralised, optionally capped."""
    text = chat.neutralize_control_tokens(str(text))
    return text[:cap] if cap else text


def capped(text: Any, n: int) -> str:
    """``text`` cut to ``n`` characters around the middle (hook contexts)."""
    s = str(text if text is not None else "")
    return s if len(s) <= n else s[:n // 2] + " [...] " + s[-(n // 2):]


# ----------------------------------------------------------------------------- prompt and tools
def tool_list(harness: HarnessSpec, env, init_effect) -> list[dict]:
    """The tools shown to the policy: the harness's own list (else ``env.tool_specs()``) with the
    per-tool hints of ``on_init`` applied (append / prepend / replace the description)."""
    tools = harness.tools
    tools = [json.loads(json.dumps(t)) for t in (tools if tools is not None else env.tool_specs())]
    if init_effect is None:
        return tools
    for h in init_effect.result.get("tool_hints", []):
        for t in tools:
            fn = t.get("function", t)
            if h["tool"] not in ("*", fn.get("name")) or h["tool"] == "*":
                continue
            desc = fn.get("description", "")
            fn["description"] = {"append": f"{desc} {h['text']}".strip(),
                                 "prepend": f"{h['text']} {desc}".strip(),
                                 "replace": h["text"]}[h["mode"]]
    return tools


def json_tools_block(tools: list[dict]) -> str:
    """The tool section of the system prompt under the ``json`` calling convention."""
    return ("# Tools\n\nCall a tool by replying with <tool_call>{\"name\": <function-name>,"
            " \"arguments\": <args-json-object>}</tool_call>. Available functions:\n"
            + "\n".join(chat.tool_json(t) for t in tools))


def system_prompt(harness: HarnessSpec, init_effect, json_tools: str) -> str:
    """The harness's system prompt + ``on_init``'s skills and general tool notes (+ the JSON tool
    block under the ``json`` calling convention)."""
    parts = [harness.system_prompt.strip()]
    if init_effect is not None:
        skills = init_effect.result.get("skills") or []
        if skills:
            parts.append("# Skills\n" + "\n".join(f"- {s}" for s in skills))
        general = [h["text"] for h in init_effect.result.get("tool_hints", []) if h["tool"] == "*"]
        if general:
            parts.append("# Tool usage notes\n" + "\n".join(f"- {g}" for g in general))
    if json_tools and harness.calling_convention == "json":
        parts.append(json_tools)
    return "\n\n".join(p for p in parts if p)


# ----------------------------------------------------------------------------------- replies
_REACT_ACTION = re.compile(r"^\s*Action\s*:\s*(.+?)\s*$", re.M)
_REACT_INPUT = re.compile(r"^\s*Action Input\s*:\s*(.+)$", re.M | re.S)


def parse_react(text: str, function_protocol: bool) -> tuple[Any, list[str]]:
    """ReAct-style text action: the last ``Action:`` line (plus ``Action Input:`` JSON for tools)."""
    _, body = chat.split_thinking(text)
    acts = _REACT_ACTION.findall(body)
    if not acts:
        return None, ["no 'Action:' line found; end your reply with 'Action: <action>'"]
    act = acts[-1]
    if not function_protocol:
        return act, []
    m = _REACT_INPUT.search(body[body.rfind("Action:"):])
    args: dict = {}
    if m:
        try:
            args = json.loads(m.group(1).strip())
        except json.JSONDecodeError as e:
            return None, [f"'Action Input' is not valid JSON ({e.msg})"]
        if not isinstance(args, dict):
            return None, ["'Action Input' must be a JSON object"]
    return ToolCall(act.strip(), args), []


def parse_reply(harness: HarnessSpec, text: str, function_protocol: bool, tools) -> tuple[list, list[str]]:
    """``(actions, errors)`` of a reply under the harness's calling convention."""
    if harness.enable_thinking and chat.THINK_CLOSE not in text:
        # the prompt opened <think>: without </think> everything is still reasoning
        return [], ["the reply never closed its <think> block (no action after </think>)"]
    if harness.calling_convention == "react":
        act, errs = parse_react(text, function_protocol)
        return ([act] if act is not None else []), errs
    if not function_protocol:
        content = chat.split_thinking(text)[1].strip()
        return ([content] if content else []), ([] if content else ["empty reply"])
    content, calls, errs = chat.parse_tool_calls(text, tools=tools or None)
    if calls:
        return list(calls), errs
    if errs:
        return [], errs
    # no tool call at all: the environment decides what a plain reply means
    return ([content] if content else []), ([] if content else ["empty reply"])
