"""WebShop through the harness runtime: the H0 presets, the token-exact executor, and a
Harness-R1 overlay whose pre-action guard (a sandboxed ``on_before_action`` code hook) repairs
malformed ``click[...]`` values.

The policy is ``ScriptedEngine`` (tests/harness/doubles.py, a test double: a real model cannot
be scripted to make exactly these mistakes); the environment, tokenizer, executor, patch
validation and hook sandbox are the real ones.
"""
import asyncio
import importlib.util
import pathlib

import pytest

from harness_jax.envs import webshop
from harness_jax.envs.webshop import agents
from harness_jax.envs.webshop import protocol as wsp
from harness_jax.harness.executor import run_episode
from harness_jax.harness.overlay import Overlay
from harness_jax.harness.presets import base_harness
from harness_jax.harness.sandbox import HookSandbox
from harness_jax.sampling.tokenizer import load_tokenizer
from harness_jax.harness.validation import validate_patch

_DOUBLES = pathlib.Path(__file__).resolve().parents[1] / "harness" / "doubles.py"
_spec = importlib.util.spec_from_file_location("harness_test_doubles", _DOUBLES)
doubles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(doubles)

GUARD = r'''
def clickables(ctx):
    obs = ""
    if ctx.history:
        obs = ctx.history[-1].observation or ""
    else:
        obs = ctx.task.instruction or ""
    found = re.search(r"'clickables': \[(.*?)\]", obs)
    if found is None:
        return []
    return re.findall(r"'([^']*)'", found.group(1))

def hook(ctx, nb):
    text = ctx.action.text or ""
    m = re.search(r"click\[(.+?)\]", text)
    if m is None:
        return None
    raw = m.group(1)
    options = clickables(ctx)
    if raw.lower() in options:
        return None
    value = raw.strip().strip(".!'\"").lower()
    best = None
    best_score = 0.0
    for c in options:
        s = SequenceMatcher(None, c, value).ratio()
        if s > best_score:
            best = c
            best_score = s
    if best is None or best_score < 0.75:
        return None
    nb["repairs"] = nb.get("repairs", 0) + 1
    return {"kind": "rewrite_action", "message": "",
            "action": "Thought:\nrepaired\n\nAction:\nclick[" + best + "]"}
'''


def _malformed(action: str, k: int) -> str:
    """A click whose value a sloppy policy garbled (quotes, case, punctuation, spaces)."""
    name, _, arg = action.partition("[")
    arg = arg[:-1]
    if name != "click":
        return action
    garble = ("'{}'", "{}.", " {} ", "{}!")[k % 4]
    return "click[" + garble.format(arg.upper() if k % 2 else arg.title()) + "]"


@pytest.fixture(scope="module")
def episode():
    """A generated goal and the oracle's actions for it, plus a garbled copy of them."""
    task = webshop.generate_tasks(1, split="train", seed=11, n_products=1000)[0]
    replies = agents.oracle_replies(task, "text")
    actions = [wsp.parse_text_action(r) for r in replies]
    garbled = [_malformed(a, k) for k, a in enumerate(actions)]
    assert sum(g != a for g, a in zip(garbled, actions)) >= 3
    return task, actions, garbled


def _run(task, replies, protocol, overlay=None):
    tok = load_tokenizer()
    engine = doubles.ScriptedEngine(tok, replies)
    return asyncio.run(run_episode(engine, lambda: webshop.WebShopEnv(protocol=protocol), task,
                                   base_harness("webshop", protocol), overlay=overlay,
                                   tokenizer=tok))


def test_h0_text_episode_through_the_executor(episode):
    task, actions, _ = episode
    traj = _run(task, [agents.as_reply(a, "text") for a in actions], "text")
    assert traj.success and traj.reward == 1.0 and traj.status == "completed"
    text = load_tokenizer().decode(traj.segments[0].token_ids)
    assert text.count("Observation:\n") >= len(actions) and "\nOk.<|im_end|>" in text


def test_h0_function_episode_through_the_executor(episode):
    task, actions, _ = episode
    from harness_jax.sampling import chat
    replies = []
    for a in actions:
        call = agents.as_reply(a, "function")
        replies.append(chat.render_tool_call(call.name, call.arguments))
    traj = _run(task, replies, "function")
    assert traj.success and traj.reward == 1.0


def test_pre_action_guard_repairs_malformed_clicks(episode):
    task, _, garbled = episode
    replies = [agents.as_reply(a, "text") for a in garbled]
    plain = _run(task, list(replies), "text")
    assert not plain.success and plain.reward == 0.0       # garbled clicks are WebShop no-ops
    res = validate_patch({"schema_version": "harness-r1-patch-v1", "benchmark": "webshop",
                          "description": "repair click values that are not clickable",
                          "actions": [{"type": "add_code_hook", "hook": "on_before_action",
                                       "code": GUARD}]}, env_name="webshop")
    assert res.ok, res.errors
    box = HookSandbox()
    try:
        ov = Overlay(res.patch, env_name="webshop", sandbox=box, timeout_s=5.0)
        fixed = _run(task, list(replies), "text", overlay=ov)
    finally:
        box.close()
    assert fixed.success and fixed.reward == 1.0, (fixed.status, fixed.errors)
    rewrites = [i for t in fixed.turns for i in t.interventions
                if i["hook"] == "on_before_action"]
    n_bad = sum(g != a for g, a in zip(garbled, episode[1]))
    assert len(rewrites) == n_bad and fixed.hook_stats["on_before_action"]["effects"] == n_bad
    assert all(t.policy_action != t.action for t in fixed.turns
               if any(i["hook"] == "on_before_action" for i in t.interventions))
