"""Engineers: anything that turns a failure packet into patch responses.

Every engineer has ``propose(packet, k=1, seed=0) -> list[str]``: ``k`` responses in the
engineer protocol (reasoning, ``</think>``, one ``<patch>`` block; ``prompt.py``).

* ``RuleBasedEngineer``: offline and deterministic. It reads the packet's failure-mode counters
  (``packet.features``) and writes real code hooks for the modes it sees: guards that refuse a
  final answer before anything was observed or right after an error (``on_before_action``),
  error, format and turn-budget hints (``make_pre_hint``), recovery hints when the agent repeats
  itself or its actions have no effect (``on_post_step``), and short skills (``on_init``). It is
  the cold-start teacher that runs here and a baseline in the tables. Sample ``j > 0`` drops the
  ``j``-th fix, so K samples differ.
* ``PromptEngineer``: any OpenAI-compatible endpoint (a frontier model as a prompt-based
  engineer, or the SFT teacher) through the cached, costed ``OpenAIChatClient``.
* ``ModelEngineer``: a model behind a ``RolloutEngine`` (the SFT/GRPO engineer on the embedded
  JAX engine or SGLang): the prompt tokens, the prefilled ``<think>``, sampled continuations.
* ``FixedPatchEngineer``: one patch for every packet (Self-Refine, a saved patch).
"""
from __future__ import annotations

import asyncio
import json
import uuid
from typing import Optional, Protocol, Sequence
import dataclasses

from harness_jax.harness.validation import validate_patch
from harness_jax.harness_r1.baseline import run_sync
from harness_jax.harness_r1.packets import Packet, env_profile
from harness_jax.harness_r1.prompt import (PromptSpec, engineer_messages, engineer_prompt_ids,
                                           format_response, normalise_response)
from harness_jax.sampling.types import GenerateRequest, SamplingParams

SCHEMA = "harness-r1-patch-v1"
ERROR_RE = r"error|exception|invalid|not found|failed|unknown column|no such"


class Engineer(Protocol):
    name: str

    def propose(self, packet: Packet, k: int = 1, seed: int = 0) -> list[str]:
        ...


# ------------------------------------------------------------------------------------------
# The rule-based engineer
# ------------------------------------------------------------------------------------------
ENV_TEXTS: dict[str, dict] = {
    "dbbench": {
        "inspect": ("Do not answer yet: first run a SELECT that looks at the rows the question "
                    "is about, then answer with the values exactly as the database returns them."),
        "answer": ("Copy answer values exactly as the database returns them; for counts and "
                   "totals compute them with SQL instead of guessing."),
        "format": {"text": ("Every reply must end with either 'Action: Operation' and one ```sql "
                            "block with a single statement, or 'Action: Answer' and 'Final "
                            "Answer: [...]'."),
                   "function": ("Call execute_sql with one statement at a time, then "
                                "commit_final_answer with the answer values.")},
    },
    "webshop": {
        "inspect": ("Do not buy yet: open the item page and check every attribute the "
                    "instruction asks for (options, size, colour, price) first."),
        "answer": ("Choose the options the instruction asks for on the item page before "
                   "clicking Buy Now; respect the price limit."),
        "format": {"text": "End your reply with 'Action:' and one action, e.g. search[...] or "
                           "click[...], using only the available actions.",
                   "function": "Call search_action or click_action with exactly one value."},
    },
    "alfworld": {
        "inspect": "Look around and open receptacles before deciding where the object is.",
        "answer": ("Work through the goal step by step: find the object, take it, process it "
                   "if asked (heat, cool, clean), then put it in the target receptacle."),
        "format": {"text": "Reply with exactly one admissible command, e.g. 'go to <place>'.",
                   "function": "Call the action tool with exactly one admissible command."},
    },
}
DEFAULT_TEXTS = {
    "inspect": "Gather the information the task needs before committing an answer.",
    "answer": "Base the final answer only on what the environment showed you.",
    "format": {"text": "Follow the required reply format exactly.",
               "function": "Use the provided tools with valid arguments."},
}


def _texts(env: str, protocol: Optional[str]) -> dict:
    t = dict(DEFAULT_TEXTS, **ENV_TEXTS.get(env, {}))
    fmt = t["format"]
    t["format"] = fmt.get(protocol or "text", fmt["text"]) if isinstance(fmt, dict) else fmt
    return t


def _final_helper(env: str) -> str:
    """Hook helper ``final(ctx)``: whether the proposed action commits the answer."""
    prof = env_profile(env)
    lines = ["def final(ctx):", "    a = ctx.action", "    if a is None:", "        return False",
             f"    tools = {dict(prof['final_tools'])!r}",
             "    name = str(a.name or '')",
             "    if name in tools:",
             "        pat = tools[name]",
             "        return pat is None or re.search(pat, str(a.arguments), re.I) is not None"]
    if prof["final_text"]:
        lines.append(f"    return re.search({prof['final_text']!r}, str(a.text or ''), re.I) "
                     "is not None")
    else:
        lines.append("    return False")
    return "\n".join(lines)


_LAST_OBS = """def last_obs(ctx):
    h = ctx.history or []
    if not h:
        return None
    return str(h[-1].observation or '')"""


def _once(key: str, limit: int) -> str:
    return (f"nb.get({key!r}, 0) < {limit}:\n"
            f"        nb[{key!r}] = nb.get({key!r}, 0) + 1")


# A fix: (name, failure modes that trigger it, hook point, code body lines inside hook()).
def _fixes(env: str, texts: dict) -> list[tuple[str, tuple, str, str]]:
    return [
        ("inspect_before_answer", ("answered_without_inspecting",), "on_before_action",
         f"    if final(ctx) and last_obs(ctx) is None and {_once('early', 2)}\n"
         f"        return {{'kind': 'block_and_prompt', 'message': {texts['inspect']!r}}}"),
        ("no_answer_after_error", ("answered_after_error",), "on_before_action",
         f"    obs = last_obs(ctx)\n"
         f"    if final(ctx) and obs is not None and re.search({ERROR_RE!r}, obs, re.I) and "
         f"{_once('after_error', 2)}\n"
         "        return {'kind': 'block_and_prompt', 'message': 'The previous action failed "
         "(see the error above). Fix the action and run it again before answering.'}"),
        ("break_repeats", ("repeated_actions", "no_effect_actions"), "on_before_action",
         "    if (ctx.state.repeat_count or 0) >= 2:\n"
         "        return {'kind': 'block_and_prompt', 'message': 'You already sent this exact "
         "action several times without progress. Choose a different action.'}"),
        ("error_hint", ("answered_after_error", "saw_errors"), "make_pre_hint",
         f"    obs = str(ctx.observation or '')\n"
         f"    if ctx.turn and re.search({ERROR_RE!r}, obs, re.I):\n"
         "        line = [s for s in obs.splitlines() if s.strip()][:1]\n"
         "        return {'message': 'The last action failed: ' + (line[0][:200] if line else "
         "'see above') + '. Correct it (names, quoting, syntax) before going on.'}"),
        ("format_hint", ("format_errors",), "make_pre_hint",
         "    obs = str(ctx.observation or '').lower()\n"
         "    if ctx.turn and (ctx.state.errors or 0) > 0 and ('parse' in obs or 'format' in "
         "obs or 'could not' in obs):\n"
         f"        return {{'message': {texts['format']!r}}}"),
        ("turn_budget", ("ran_out_of_turns",), "make_pre_hint",
         "    left = ctx.turns_left\n"
         "    if left is not None and 0 < left <= 2:\n"
         "        return {'message': 'Only ' + str(left) + ' turn(s) left: finish the task now "
         "with your best answer.'}"),
        ("recover_when_stuck", ("repeated_actions", "no_effect_actions", "ran_out_of_turns"),
         "on_post_step",
         "    obs = str(ctx.observation or '').lower()\n"
         "    st = ctx.state\n"
         "    if (st.stalled or (st.repeat_count or 0) >= 1 or 'nothing happens' in obs) and "
         f"{_once('recover', 3)}\n"
         "        return {'kind': 'inject_hint', 'message': 'That action made no progress. Do "
         "not repeat it; look at the current state and try a different action.'}"),
        ("skills", ("wrong_answer", "answered_without_inspecting", "format_errors"), "on_init",
         f"    return {{'skills': [{texts['answer']!r}, {texts['format']!r}]}}"),
    ]


class RuleBasedEngineer:
    """Deterministic overlays from packet features (module docstring)."""

    name = "rule"

    def __init__(self, min_count: int = 1):
        self.min_count = int(min_count)

    def fixes_for(self, packet: Packet) -> list[tuple[str, str, str]]:
        """``(fix name, hook point, hook body)`` of the fixes the packet's failures call for."""
        modes = (packet.features or {}).get("failure_modes", {})
        protocol = (packet.meta.get("constraints") or {}).get("protocol")
        texts = _texts(packet.env_name, protocol)
        out = []
        for name, triggers, hook, body in _fixes(packet.env_name, texts):
            prof = env_profile(packet.env_name)
            if name in ("inspect_before_answer", "no_answer_after_error") and not (
                    prof["final_tools"] or prof["final_text"]):
                continue                      # no final-answer action in this benchmark
            if sum(modes.get(m, 0) for m in triggers) >= self.min_count:
                out.append((name, hook, body))
        return out

    def patch(self, packet: Packet, drop: Optional[int] = None) -> Optional[dict]:
        fixes = self.fixes_for(packet)
        if drop is not None and len(fixes) > 1:
            fixes = [f for i, f in enumerate(fixes) if i != drop % len(fixes)]
        if not fixes:
            return None
        actions = []
        for hook in ("on_init", "make_pre_hint", "on_before_action", "on_post_step"):
            bodies = [b for _, h, b in fixes if h == hook]
            if not bodies:
                continue
            joined = "\n".join(bodies)
            helpers = ([_final_helper(packet.env_name)] if "final(ctx)" in joined else []) + (
                [_LAST_OBS] if "last_obs(ctx)" in joined else [])
            code = "\n\n".join(helpers + ["def hook(ctx, nb):\n" + "\n".join(bodies)
                                          + ("\n    return None" if hook != "on_init" else "")])
            actions.append({"type": "add_code_hook", "hook": hook, "code": code + "\n"})
        names = [n for n, _, _ in fixes]
        return {"schema_version": SCHEMA, "benchmark": packet.env_name,
                "description": "Rule-based fixes: " + ", ".join(names), "actions": actions}

    def reasoning(self, packet: Packet, patch: dict) -> str:
        f = packet.features or {}
        modes = ", ".join(f"{k}={v}" for k, v in f.get("failure_modes", {}).items()) or "none"
        return (f"The packet shows {packet.num_failures} failed episode(s). Failure modes: "
                f"{modes}. {patch['description']}: each fix is a hook that fires only when its "
                "failure is about to happen.")

    def propose(self, packet: Packet, k: int = 1, seed: int = 0) -> list[str]:
        out = []
        for j in range(k):
            p = self.patch(packet, drop=None if j == 0 else j - 1)
            if p is None:
                out.append("No recurring failure mode I can address.\n</think>\n\nNo patch.")
            else:
                out.append(format_response(self.reasoning(packet, p), p))
        return out


# ------------------------------------------------------------------------------------------
# Endpoint- and model-backed engineers
# ------------------------------------------------------------------------------------------
class PromptEngineer:
    """A prompt-based engineer behind any OpenAI-compatible endpoint (cached, costed).

    ``normalise=True`` rewrites valid replies into the engineer protocol (the SFT teacher);
    otherwise the raw reply is returned (evaluated as the endpoint wrote it)."""

    def __init__(self, client, *, name: str = "", temperature: float = 0.7,
                 max_tokens: int = 4096, normalise: bool = False, role: str = "engineer",
                 prompt: Optional[PromptSpec] = None):
        self.client = client
        self.prompt = prompt
        self.name = name or f"prompt:{client.config.model}"
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.normalise = normalise
        self.role = role
        self.rejected = 0

    def propose(self, packet: Packet, k: int = 1, seed: int = 0) -> list[str]:
        out = []
        for j in range(k):
            resp = self.client.chat(engineer_messages(packet, self.prompt), role=self.role,
                                    temperature=self.temperature, max_tokens=self.max_tokens,
                                    seed=seed * 1000 + j)
            text = resp.content
            if self.normalise:
                norm, _ = normalise_response(text, packet.env_name)
                if norm is None:
                    self.rejected += 1
                text = norm if norm is not None else text
            out.append(text)
        return out

    def usage(self) -> dict:
        return self.client.usage_summary()


class ModelEngineer:
    """The engineer model behind a ``RolloutEngine`` (SFT / GRPO checkpoints)."""

    def __init__(self, engine, tokenizer, *, name: str = "model", temperature: float = 0.7,
                 top_p: float = 0.95, max_new_tokens: int = 4096,
                 prompt: Optional[PromptSpec] = None):
        self.engine = engine
        self.prompt = prompt              # the run's PromptSpec (None: the defaults)
        self.tok = tokenizer
        self.name = name
        self.temperature = temperature
        self.top_p = top_p
        self.max_new_tokens = max_new_tokens
        self.last: list = []              # (prompt_ids, GenerateResult) of the last call

    async def asample(self, packet: Packet, k: int = 1, seed: int = 0,
                      temperature: Optional[float] = None) -> tuple[list[int], list, list[str]]:
        """``(prompt_ids, GenerateResults, response texts)`` of ``k`` seeded samples (no shared
        state: safe for concurrent packets; GRPO trains on the results' tokens)."""
        ids = engineer_prompt_ids(packet, self.tok, self.prompt)
        stops = tuple(self.tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>"))
        temp = self.temperature if temperature is None else float(temperature)
        reqs = [GenerateRequest(ids, SamplingParams(
            temperature=temp, top_p=self.top_p if temp > 0 else 1.0,
            max_new_tokens=self.max_new_tokens, stop_token_ids=stops, seed=seed * 1000 + j),
            f"eng-{uuid.uuid4().hex[:8]}-{j}") for j in range(k)]
        results = await asyncio.gather(*(self.engine.generate(r) for r in reqs))
        texts = [self.tok.decode([t for t in r.token_ids if t not in stops],
                                 skip_special_tokens=False) for r in results]
        return ids, list(results), texts

    async def apropose(self, packet: Packet, k: int = 1, seed: int = 0) -> list[str]:
        ids, results, texts = await self.asample(packet, k, seed)
        self.last = [(ids, r) for r in results]
        return texts

    def propose(self, packet: Packet, k: int = 1, seed: int = 0) -> list[str]:
        return run_sync(self.apropose(packet, k, seed), "ModelEngineer.propose")


class FixedPatchEngineer:
    """The same patch for every packet (its benchmark field follows the packet)."""

    def __init__(self, patch: dict, name: str):
        self.patch = dict(patch)
        self.name = name

    def propose(self, packet: Packet, k: int = 1, seed: int = 0) -> list[str]:
        p = dict(self.patch, benchmark=packet.env_name)
        return [format_response(f"Apply the fixed {self.name} overlay.", p)] * k


# ------------------------------------------------------------------------------------------
# Published harness baselines
# ------------------------------------------------------------------------------------------
SELF_REFINE_CODE = """def hook(ctx, nb):
    if not ctx.turn:
        return None
    return {'message': 'Before acting, review your previous action and the feedback it got. If it did not work, state why in one sentence and correct it; otherwise continue.'}
"""
REACT_PROMPT = ("Work in the ReAct style: before every action write 'Thought:' with your "
                "reasoning about the latest observation and what to do next, then give the "
                "action in the required format.")


def self_refine_patch(env_name: str) -> dict:
    """Self-Refine as an overlay: self-feedback before every decision after the first."""
    return {"schema_version": SCHEMA, "benchmark": env_name,
            "description": "Self-Refine: review and correct the previous step before acting",
            "actions": [{"type": "add_code_hook", "hook": "make_pre_hint",
                         "code": SELF_REFINE_CODE}]}


def react_harness(harness):
    """ReAct as a harness: reasoning before every action, same calling convention (a text
    protocol keeps its action format, so the environment parses the same replies)."""
    system = (harness.system_prompt.strip() + "\n\n" + REACT_PROMPT).strip()
    return dataclasses.replace(harness, name=harness.name + "+react", system_prompt=system)


def patch_of(response: str, env_name: str) -> Optional[dict]:
    """The normalised patch dict of a response (None when invalid)."""
    res = validate_patch(response, env_name=env_name)
    return res.patch.to_dict() if res.ok else None


def responses_to_json(responses: Sequence[str]) -> str:
    return json.dumps(list(responses), ensure_ascii=False)
