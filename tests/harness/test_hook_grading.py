"""Graded code cannot change its grade through the executor: effects that do not fit the episode
are ignored and counted, an environment failure on a hook's action is a task failure (never
infrastructure), the hook namespace is fresh for every call, and hook contexts carry no task or
episode identifier. Scripted engine and environment (test doubles: exact control of every reply
and of which action crashes the environment); the hooks run in the real sandbox worker."""
import asyncio
import json

import pytest

from harness_jax.envs.base import Task
from harness_jax.harness import hooks
from harness_jax.harness.executor import ExecutorConfig, run_episode
from harness_jax.harness.sandbox import HookSandbox
from harness_jax.harness.specs import ExecutionRules, HarnessSpec
from harness_jax.harness.validation import validate_patch

from .doubles import ScriptedEngine, ScriptedEnv

TASK = Task("toy", {"q": "what is six times seven?"})
H = HarnessSpec(rules=ExecutionRules(max_turns=3))


def overlay(hook, body, helpers=""):
    res = validate_patch({"schema_version": "harness-r1-patch-v1", "benchmark": "toy", "actions": [
        {"type": "add_code_hook", "hook": hook, "code": helpers + "def hook(ctx, nb):\n" + body}]},
        env_name="toy")
    assert res.ok, res.errors
    return res.patch


def episode(tok, replies, patch, *, surface="contract", **env_kw):
    log = []
    eng = ScriptedEngine(tok, replies)
    traj = asyncio.run(run_episode(eng, lambda: ScriptedEnv("text", log=log, **env_kw), TASK, H,
                                   overlay=patch, tokenizer=tok,
                                   config=ExecutorConfig(infra_retries=1, effect_surface=surface,
                                                         record_hook_contexts=True)))
    return traj, log


TOOL_CALL_REWRITE = overlay("on_before_action",
                            "    return {'kind': 'rewrite_action', 'action': {'name': 'submit', 'arguments': {}}}\n")
CRASH_REWRITE = overlay("on_before_action", "    return {'kind': 'rewrite_action', 'action': 'boom'}\n")


def test_a_tool_call_on_a_text_episode_is_ignored_and_counted(qwen_tok):
    # before: the ToolCall reached the text environment, which raised TypeError -> infrastructure
    traj, log = episode(qwen_tok, ["look", "ANSWER: 42"], TOOL_CALL_REWRITE)
    assert not traj.infra_error and traj.success and traj.status == "completed"
    assert [a for k, a in log if k == "step"] == ["look", "ANSWER: 42"]   # the policy's own actions
    st = traj.hook_stats["on_before_action"]
    assert st["effects"] == 2 and st["ignored"] == 2 and st["ignored:protocol"] == 2
    assert "ignored (protocol" in traj.turns[0].errors[-1]
    assert traj.turns[0].interventions[0]["ignored"].startswith("protocol")


def test_effect_surface_ignores_rewrites_where_the_public_runtime_does(qwen_tok):
    rewrite = overlay("on_before_action",
                      "    return {'kind': 'rewrite_action', 'action': 'ANSWER: 42'}\n")
    wide, _ = episode(qwen_tok, ["look", "look", "look"], rewrite, surface="contract")
    assert wide.success                                        # honoured: the overlay answered
    narrow, log = episode(qwen_tok, ["look", "look", "look"], rewrite, surface="public")
    assert not narrow.success and ("step", "ANSWER: 42") not in log
    assert narrow.hook_stats["on_before_action"]["ignored:surface"] == 3
    # the public runtime's surfaces (notes/harness_methods_public.md)
    assert hooks.honoured_kinds("dbbench", "on_before_action", "public") == ("block_and_prompt",)
    assert hooks.honoured_kinds("dbbench", "on_post_step", "public") == ("inject_hint",)
    assert "rewrite_action" in hooks.honoured_kinds("webshop", "on_before_action", "public")
    assert "force_action" in hooks.honoured_kinds("alfworld", "on_post_step", "public")
    assert hooks.honoured_kinds("swe", "on_before_action", "public") == ("block_and_prompt",)
    assert "rewrite_action" in hooks.honoured_kinds("dbbench", "on_before_action", "contract")
    with pytest.raises(ValueError, match="effect surface"):
        hooks.honoured_kinds("dbbench", "on_before_action", "wide")
    with pytest.raises(ValueError, match="effect_surface"):
        ExecutorConfig(effect_surface="wide")


def test_an_environment_failure_on_a_hooks_action_is_a_task_failure(qwen_tok):
    # the policy's own crashing action: infrastructure, retried, never scored
    traj, _ = episode(qwen_tok, ["boom", "boom"], None, crash_on="boom")
    assert traj.infra_error and traj.success is None and traj.infra_attempts == 2
    # the same crash caused by the overlay's rewrite: a task failure of that episode
    traj, log = episode(qwen_tok, ["ANSWER: 42"], CRASH_REWRITE, crash_on="boom")
    assert not traj.infra_error and traj.infra_attempts == 0
    assert traj.status == "hook_action_error" and traj.success is False and traj.reward == 0.0
    assert traj.hook_stats["on_before_action"]["env_errors"] == 1
    assert ("step", "boom") in log and "a task failure, not infrastructure" in traj.turns[0].errors[0]
    # a forced action after the step likewise
    force = overlay("on_post_step", "    return {'kind': 'force_action', 'action': 'boom'}\n")
    traj, _ = episode(qwen_tok, ["look"], force, crash_on="boom")
    assert traj.status == "hook_action_error" and not traj.infra_error
    assert traj.hook_stats["on_post_step"]["env_errors"] == 1


STATEFUL = '''def counter(acc=[]):
    acc.append(1)
    return len(acc)

def hook(ctx, nb):
    try:
        hook.seen.append(1)
    except Exception:
        hook.seen = [1]
    try:
        SequenceMatcher.calls.append(1)
    except Exception:
        SequenceMatcher.calls = [1]
    return {"message": str(len(hook.seen)) + "/" + str(counter()) + "/" + str(len(SequenceMatcher.calls))}
'''


def test_the_hook_namespace_is_fresh_for_every_call():
    assert hooks.lint_cached(STATEFUL)        # the lint already refuses the mutable default ...
    with HookSandbox() as box:                # ... the worker must hold even without the lint
        outs = [hooks.run_hook(STATEFUL, {"turn": i}, {}, hook="make_pre_hint", sandbox=box,
                               lint=False) for i in range(4)]
    # before: "1/1/1", "2/2/2", ... (state on the function, a mutable default, a shared class)
    assert [o["message"] for o in outs] == ["1/1/1"] * 4


def test_state_lives_only_in_nb_within_an_episode(qwen_tok):
    p = overlay("make_pre_hint", "    nb['n'] = nb.get('n', 0) + 1\n"
                "    try:\n        hook.seen.append(1)\n    except Exception:\n        hook.seen = [1]\n"
                "    return {'message': str(nb['n']) + ':' + str(len(hook.seen))}\n")
    for _ in range(2):                                          # a second episode starts from scratch
        traj, _ = episode(qwen_tok, ["look", "look", "look"], p)
        msgs = [i["result"]["message"] for t in traj.turns for i in t.interventions]
        assert msgs == ["1:1", "2:1", "3:1"]


def test_hook_contexts_carry_no_task_or_episode_identifier(qwen_tok):
    p = overlay("make_pre_hint", "    return {'message': 'id=' + str(ctx.task.id)}\n")
    traj, _ = episode(qwen_tok, ["look", "ANSWER: 42"], p)
    assert traj.turns[0].interventions[0]["result"]["message"] == "id=None"
    for rec in traj.hook_contexts:
        blob = json.dumps(rec["ctx"])
        assert set(rec["ctx"]["task"]) == {"env", "category", "instruction"}
        assert TASK.task_id not in blob and traj.episode_id not in blob
        assert traj.episode_id.split("-")[-1] not in blob
