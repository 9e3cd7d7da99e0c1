"""Engineers: anything that turns a failure packet into patch responses.

Every engineer has ``propose(packet, k=1, seed=0) -> list[str]``: ``k`` responses in the
engineer protocol (reasoning, ``</think>``, one ``<patch>`` block; ``prompt.py``).

* ``RuleBasedEngineer``: offline and deterministic. It reads the packet's failure-mode counters
  (``packet.features``) and composes the fixes of the shared library (``harness.fixes``, also
  Harness-S's edit operators) for the modes it sees: guards that refuse a final answer before
  anything was observed or right after an error, an answer fix for wrong answers (answer from the
  last result, or refuse a mismatching answer and show the result, whichever the effect surface
  honours), a repeat guard (``on_before_action``), error, format and turn-budget hints
  (``make_pre_hint``), recovery hints when the agent stalls (``on_post_step``), and short skills
  (``on_init``). It is the cold-start teacher that runs here and a baseline in the tables.
  Sample ``j > 0`` drops the ``j``-th fix, so K samples differ.
* ``PromptEngineer``: any OpenAI-compatible endpoint (a frontier model as a prompt-based
  engineer, or the SFT teacher) through the cached, costed ``OpenAIChatClient``.
* ``ModelEngineer``: a model behind a ``RolloutEngine`` (the SFT/GRPO engineer on the embedded
  JAX engine or SGLang): the prompt tokens, the prefilled ``<think>``, sampled continuations.
* ``FixedPatchEngineer``: one patch for every packet (the review-hint overlay, a saved patch).
"""
from __future__ import annotations

import asyncio
import json
import uuid
from typing import Optional, Protocol, Sequence
import dataclasses

from harness_jax.harness.validation import validate_patch
from harness_jax.harness_r1.baseline import run_sync
from harness_jax.harness import fixes
from harness_jax.harness_r1.packets import Packet
from harness_jax.harness_r1.prompt import (PromptSpec, engineer_messages, engineer_prompt_ids,
                                           format_response, normalise_response)
from harness_jax.sampling.types import GenerateRequest, SamplingParams

SCHEMA = "harness-r1-patch-v1"


class Engineer(Protocol):
    name: str

    def propose(self, packet: Packet, k: int = 1, seed: int = 0) -> list[str]:
        ...


# ------------------------------------------------------------------------------------------
# The rule-based engineer
# ------------------------------------------------------------------------------------------
# The library fixes it writes (``harness.fixes``), in the order it tries them; for wrong
# answers it writes ``answer_from_result`` where the effect surface honours rewritten actions
# and ``answer_check`` (refuse a mismatching answer, show the result's values) where it does not.
RULE_FIXES = ("inspect_before_answer", "no_answer_after_error", "answer_from_result",
              "answer_check", "break_repeats", "error_hint", "format_hint", "turn_budget",
              "recover_when_stuck", "skills")


class RuleBasedEngineer:
    """Deterministic overlays from packet features (module docstring); ``surface``: the effect
    surface the patches will run under (``hooks.EFFECT_SURFACES``; Harness-R1's default
    ``"public"``), so it never writes a fix whose effects the runtime would ignore."""

    name = "rule"

    def __init__(self, min_count: int = 1, surface: str = "public"):
        self.min_count = int(min_count)
        self.surface = surface

    def fixes_for(self, packet: Packet) -> list[fixes.Fix]:
        """The library fixes the packet's failure modes call for (applicable on its benchmark
        under the surface; one answer fix for wrong answers)."""
        modes = (packet.features or {}).get("failure_modes", {})
        protocol = (packet.meta.get("constraints") or {}).get("protocol")
        lib = fixes.library(packet.env_name, protocol)
        out: list[fixes.Fix] = []
        for name in RULE_FIXES:
            f = lib[name]
            if not fixes.applicable(f, packet.env_name, self.surface):
                continue
            if name == "answer_check" and any(g.name == "answer_from_result" for g in out):
                continue
            if sum(modes.get(m, 0) for m in f.families) >= self.min_count:
                out.append(f)
        return out

    def patch(self, packet: Packet, drop: Optional[int] = None) -> Optional[dict]:
        chosen = self.fixes_for(packet)
        if drop is not None and len(chosen) > 1:
            chosen = [f for i, f in enumerate(chosen) if i != drop % len(chosen)]
        if not chosen:
            return None
        return {"schema_version": SCHEMA, "benchmark": packet.env_name,
                "description": "Rule-based fixes: " + ", ".join(f.name for f in chosen),
                "actions": fixes.code_actions(chosen, packet.env_name)}

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
# Published harness baselines (Self-Refine, the agent wrapper, is ``agents.SelfRefine``)
# ------------------------------------------------------------------------------------------
REVIEW_HINT_CODE = """def hook(ctx, nb):
    if not ctx.turn:
        return None
    return {'message': 'Before acting, review your previous action and the feedback it got. If it did not work, state why in one sentence and correct it; otherwise continue.'}
"""
REACT_PROMPT = ("Use the ReAct procedure at every step. Thought: reason briefly about the task, the "
                "latest observation and what to do next. Action: then give exactly one action in "
                "the required format. Always write the Thought before the Action.")


def review_hint_patch(env_name: str) -> dict:
    """A fixed review hint before every decision after the first, as an overlay (one pre-decision
    hint: cheaper than, and not, Self-Refine's draft-critique-refine)."""
    return {"schema_version": SCHEMA, "benchmark": env_name,
            "description": "Review and correct the previous step before acting",
            "actions": [{"type": "add_code_hook", "hook": "make_pre_hint",
                         "code": REVIEW_HINT_CODE}]}


def react_harness(harness):
    """ReAct as the public baselines run it: a Thought/Action contract added to the system
    prompt, one call per step, the same calling convention (a text protocol keeps its action
    format, so the environment parses the same replies)."""
    system = (harness.system_prompt.strip() + "\n\n" + REACT_PROMPT).strip()
    return dataclasses.replace(harness, name=harness.name + "+react", system_prompt=system)


def patch_of(response: str, env_name: str) -> Optional[dict]:
    """The normalised patch dict of a response (None when invalid)."""
    res = validate_patch(response, env_name=env_name)
    return res.patch.to_dict() if res.ok else None


def responses_to_json(responses: Sequence[str]) -> str:
    return json.dumps(list(responses), ensure_ascii=False)
