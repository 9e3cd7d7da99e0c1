"""The engineer's prompt and response protocol: a failure packet in, one overlay patch out.

Messages: a system turn (``SYSTEM_PROMPT``: the engineer's job, the ``harness-r1-patch-v1``
format with its four lifecycle hooks, what hooks read and may return, the code rules, and the
answer format) and a user turn holding the packet. The assistant turn is prefilled with
``<think>\\n`` (Qwen3.5 thinking mode): the engineer writes its reasoning, ``</think>``, then
exactly one ``<patch>{json}</patch>`` block. Replies are validated with the
``prefill_think_patch`` protocol (a reply opening a second ``<think>`` is rejected) and the
LAST ``<patch>`` block counts. SFT, GRPO and evaluation use this one template; its version is
part of every SFT example's identity.

The system turn states the run's reward truthfully (``PromptSpec.reward``: Delta_B, negative when
the patch hurts, the valid bonus, what an invalid or never-firing patch earns) and which effect
kinds the runtime honours on the benchmark (``PromptSpec.effect_surface``,
``harness.hooks.honoured_kinds``). ``SYSTEM_PROMPT`` is the text under the defaults.
"""
from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Optional, Sequence

from harness_jax.harness.hooks import honoured_kinds
from harness_jax.harness.validation import validate_patch
from harness_jax.harness_r1.reward import RewardSpec
from harness_jax.sampling import chat

PROMPT_VERSION = "harness-r1-engineer-prompt-v2"
RESPONSE_PROTOCOL = "prefill_think_patch"


@dataclasses.dataclass(frozen=True)
class PromptSpec:
    """What the system turn states about the run: its reward and the effect surface."""

    reward: RewardSpec = RewardSpec()
    effect_surface: str = "public"       # harness.hooks.EFFECT_SURFACES


def reward_sentence(reward: RewardSpec) -> str:
    """The reward, as the engineer is told it (the numbers of ``reward``)."""
    bonus = (f", plus {reward.valid_bonus:g} for a valid patch that takes effect"
             if reward.valid_bonus else "")
    return ("The patch is installed and the same agent re-runs the same batch. Your reward is "
            "Delta_B, the change of the batch's mean success from -1 to +1: positive when the "
            f"patch helps, NEGATIVE when it makes the agent worse{bonus}. A patch that is invalid or "
            f"never takes effect earns {reward.invalid_reward:g}.")


def effects_sentence(env_name: str, surface: str) -> str:
    """Which effect kinds the runtime honours on ``env_name`` (empty when every kind is)."""
    if not env_name:
        return ""
    pre = honoured_kinds(env_name, "on_before_action", surface)
    post = honoured_kinds(env_name, "on_post_step", surface)
    if len(pre) == 3 and len(post) == 2:
        return ""
    return (f"On {env_name} the runtime honours only " + ", ".join(pre) + " (on_before_action) and "
            + ", ".join(post) + " (on_post_step); any other kind has no effect.\n")


_SYSTEM_TEMPLATE = """You are a harness engineer. A frozen agent (its weights never change) solved a batch of tasks inside a runtime harness and failed some of them. You read its failure packet and write ONE overlay patch for the harness. {reward}

The patch is JSON:
{{"schema_version": "harness-r1-patch-v1", "benchmark": "<benchmark>", "description": "<one sentence>", "actions": [{{"type": "add_code_hook", "hook": "<hook point>", "code": "def hook(ctx, nb):\\n    ..."}}]}}
with 1 to 12 actions and at most one code hook per hook point. The four hook points:
- on_init: at episode start. Return {{"skills": [up to 5 short guidance strings], "tool_hint": "<text>"}}; they join the system prompt.
- make_pre_hint: before each agent decision. Return {{"message": "<text>"}} to add a hint to the agent's next input.
- on_before_action: a guard on each action before it reaches the environment. Return {{"kind": "block_and_prompt", "message": "<why>"}} to refuse it and tell the agent, {{"kind": "rewrite_action", "action": <action>, "message": "<note>"}} to replace it, or {{"kind": "force_action", "action": <action>}}.
- on_post_step: after each environment step. Return {{"kind": "inject_hint", "message": "<text>"}} to add recovery advice, or {{"kind": "force_action", "action": <action>}}.
{effects}Return None for no effect. Anything that breaks a contract, raises or times out also has no effect. Texts are collapsed to one line and cut at 900 characters. An action is the agent's text reply (text protocols) or {{"name": <tool>, "arguments": {{...}}}} (function calling); an action of the wrong shape has no effect.

What a hook reads (attribute access; missing fields read as None): ctx.task (env, category, instruction = the task statement; no task id), ctx.turn, ctx.max_turns, ctx.turns_left, ctx.history (recent turns: turn, action = list of actions sent, observation), ctx.state (repeat_count, no_progress_turns, stalled, errors), ctx.admissible_actions (when the environment lists them); make_pre_hint: ctx.observation (the feedback the agent is about to read); on_before_action: ctx.action (name, arguments, text, parse_errors); on_post_step: ctx.action.sent, ctx.observation, ctx.reward, ctx.done. nb is a per-episode notebook dict that persists across the calls of one episode: it is the only state that does (keep counters in it).

Code rules: top-level def statements only, exactly one def hook(ctx, nb) plus at most 5 helpers; no import, class, lambda, while, with, raise, global, yield, del; no names or attributes starting with an underscore; try only with "except Exception"; at most 8000 characters. Available: abs all any bool dict enumerate Exception filter float int isinstance len list map max min range reversed round set sorted str sum tuple zip, re (search, match, findall, sub, split), math, SequenceMatcher.

Write general fixes for the recurring failure modes: never hard-code task ids, instance numbers, product ids or answers; block only on conditions the runtime can observe; prefer small guards and hints that fire when the failure is about to happen.

Answer format: reason about the failures, close your reasoning with </think>, then write exactly one <patch>{{...}}</patch> block and nothing after it."""


def system_prompt(spec: Optional[PromptSpec] = None, env_name: str = "") -> str:
    """The engineer's system turn for a run with ``spec`` on ``env_name`` (module docstring)."""
    spec = spec or PromptSpec()
    return _SYSTEM_TEMPLATE.format(reward=reward_sentence(spec.reward),
                                   effects=effects_sentence(env_name, spec.effect_surface))


SYSTEM_PROMPT = system_prompt()


def engineer_messages(packet, spec: Optional[PromptSpec] = None) -> list[dict]:
    """The chat messages of the engineer's prompt for ``packet`` (a ``Packet`` or its text) in
    a run with ``spec`` (the reward and effect surface the system turn states)."""
    text = packet if isinstance(packet, str) else packet.text
    bench = "" if isinstance(packet, str) else packet.env_name
    user = (f"Benchmark: {bench}\n\n" if bench else "") + text.strip() + (
        "\n\nWrite the patch for this benchmark now.")
    return [{"role": "system", "content": system_prompt(spec, bench)},
            {"role": "user", "content": user}]


def engineer_prompt_text(packet, spec: Optional[PromptSpec] = None) -> str:
    """The rendered prompt (Qwen3.5 chat format, thinking on: ends with ``<think>\\n``)."""
    return chat.render_messages(engineer_messages(packet, spec), enable_thinking=True)


def engineer_prompt_ids(packet, tokenizer, spec: Optional[PromptSpec] = None) -> list[int]:
    return list(tokenizer.encode(engineer_prompt_text(packet, spec), add_special_tokens=False))


def format_response(reasoning: str, patch: dict) -> str:
    """A response in the engineer's protocol (what follows the prefilled ``<think>\\n``)."""
    reasoning = re.sub(r"</?think>", "", reasoning or "").strip()
    body = json.dumps(patch, ensure_ascii=False, indent=1)
    return f"{reasoning}\n</think>\n\n<patch>{body}</patch>"


def split_response(text: str) -> tuple[str, Optional[str]]:
    """``(reasoning, patch block or None)`` of a reply in any of the usual shapes (a leading
    ``<think>``, none, prose around the block)."""
    t = text or ""
    blocks = re.findall(r"<patch>(.*?)</patch>", t, re.S)
    before = t[:t.rfind("<patch>")] if blocks else t
    reasoning = re.sub(r"</?think>", "", before).strip()
    return reasoning, (blocks[-1].strip() if blocks else None)


def normalise_response(text: str, env_name: str, **validate_kw) -> tuple[Optional[str], list]:
    """A teacher's reply (any endpoint, any thinking format) in the engineer's protocol, with
    the patch normalised; ``(None, errors)`` when it holds no valid patch."""
    reasoning, _ = split_response(text)
    res = validate_patch(text, env_name=env_name, **validate_kw)
    if not res.ok:
        return None, list(res.errors)
    return format_response(reasoning or "The failures share a pattern; patch it.",
                           res.patch.to_dict()), []


def response_ids(response: str, tokenizer) -> list[int]:
    """Tokens of a response, closed with ``<|im_end|>`` (the SFT target)."""
    ids = list(tokenizer.encode(response, add_special_tokens=False))
    return ids + [tokenizer.convert_tokens_to_ids("<|im_end|>")]


def sft_example(packet, response: str, tokenizer, spec: Optional[PromptSpec] = None) -> dict:
    """One cold-start SFT example: ``prompt_ids`` (through the prefilled ``<think>\\n``) and
    ``response_ids`` (the loss covers these), ready for ``rl.sft.sft_segment``."""
    return {"prompt_ids": engineer_prompt_ids(packet, tokenizer, spec),
            "response_ids": response_ids(response, tokenizer),
            "packet_id": getattr(packet, "packet_id", ""), "prompt_version": PROMPT_VERSION}


def validate_response(text: str, env_name: str, **kw):
    """``validate_patch`` under the engineer's response protocol."""
    return validate_patch(text, env_name=env_name, response_protocol=RESPONSE_PROTOCOL, **kw)


def responses_valid(texts: Sequence[Any], env_name: str) -> list[bool]:
    return [validate_response(t, env_name).ok for t in texts]
