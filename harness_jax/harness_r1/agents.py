"""Agent wrappers over a frozen target: the paper's Self-Refine baseline (and what ReAct is).

**Self-Refine** (``SelfRefine``): for every decision the frozen target drafts its reply, then
critiques the draft in a side conversation (the running context plus a user turn holding the
candidate; it answers a JSON verdict ``keep`` / ``revise`` with the issue), and, unless it keeps
the draft, refines it in a second side conversation (the running context plus the candidate and
the critique). The selected reply (the draft when kept or when the refinement comes back empty)
is what the episode continues with; the side conversations never enter it. Three target calls
per decision at most, each seeded from the decision's own seed, so a Self-Refine rerun is paired
with the baseline's episodes like any other arm. It is a ``RolloutEngine`` wrapping the target's
engine, so it runs through the same executor, environments and hooks as every arm; the critique
and refinement are one-off requests (no engine cache is continued across them).

**ReAct** in the public Harness-R1 baselines is a prompt contract, not extra calls: a system
instruction to write ``Thought:`` (reasoning about the latest observation) before exactly one
action, one call per step. ``engineers.react_harness`` is that contract on the target's harness.

The counters ``stats`` (decisions, kept drafts, refinements, empty refinements) show what the
wrapper did; a target whose critiques never parse revises every draft.
"""
from __future__ import annotations

import collections
import dataclasses
import re
from typing import Optional

from harness_jax.sampling import chat
from harness_jax.sampling.types import GenerateRequest, GenerateResult, RolloutEngine

CRITIQUE_PROMPT = (
    "Check the candidate reply below before it is executed. It has not been executed yet. Name a "
    "concrete error only if there is one (wrong format, a wrong or missing step, an answer the "
    "observations do not support). Reply with one JSON object only: {{\"verdict\": \"keep\" or "
    "\"revise\", \"issue\": \"<the error, or empty>\"}}.\n\nCandidate reply:\n{candidate}")
REFINE_PROMPT = (
    "Rewrite the candidate reply below using the feedback. It has not been executed yet. Give "
    "the corrected reply in exactly the required format, with one action.\n\nCandidate reply:\n"
    "{candidate}\n\nFeedback:\n{feedback}")
_VERDICT = re.compile(r"[\"']?verdict[\"']?\s*:\s*[\"']?(keep|revise)", re.I)


def verdict(text: str) -> Optional[str]:
    """``"keep"`` / ``"revise"`` from a critique (JSON or a bare ``verdict: ...``), else None."""
    m = _VERDICT.search(text or "")
    return m.group(1).lower() if m else None


class SelfRefine(RolloutEngine):
    """Self-Refine over ``engine`` (module docstring). ``tokenizer``: the target's (chat format);
    ``enable_thinking``: the target harness's thinking mode (side turns use the same template)."""

    def __init__(self, engine: RolloutEngine, tokenizer, *, enable_thinking: bool = False,
                 critique_max_tokens: int = 128):
        self.engine = engine
        self.tok = tokenizer
        self.thinking = bool(enable_thinking)
        self.critique_max_tokens = int(critique_max_tokens)
        self.im_end = int(tokenizer.convert_tokens_to_ids("<|im_end|>"))
        self.stats: collections.Counter = collections.Counter()

    @property
    def weight_version(self) -> int:
        return self.engine.weight_version

    async def end_episode(self, episode_id: str) -> None:
        return None                          # no engine state is continued (one-off requests)

    def _text(self, ids) -> str:
        body = [int(t) for t in ids if int(t) != self.im_end]
        return chat.split_thinking(self.tok.decode(body, skip_special_tokens=False))[1].strip()

    def _side(self, request: GenerateRequest, prompt: str, tag: str, max_new: int,
              offset: int) -> GenerateRequest:
        """The running context up to its last finished turn + a user turn with ``prompt``."""
        ids = [int(t) for t in request.input_ids]
        cut = max(i for i, t in enumerate(ids) if t == self.im_end) + 1 if self.im_end in ids else 0
        delta = chat.user_turn_delta(prompt, enable_thinking=self.thinking)
        p = request.params
        params = dataclasses.replace(p, max_new_tokens=max_new,
                                     seed=None if p.seed is None else (p.seed + offset) % (2 ** 31))
        return GenerateRequest(ids[:cut] + list(self.tok.encode(delta, add_special_tokens=False)),
                               params, f"{request.request_id}-{tag}", episode_id=None)

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        self.stats["decisions"] += 1
        draft = await self.engine.generate(dataclasses.replace(request, episode_id=None))
        candidate = self._text(draft.token_ids)
        crit = await self.engine.generate(self._side(
            request, CRITIQUE_PROMPT.format(candidate=candidate), "critique",
            min(self.critique_max_tokens, request.params.max_new_tokens), 1))
        feedback = self._text(crit.token_ids)
        if verdict(feedback) == "keep":
            self.stats["kept"] += 1
            return draft
        refined = await self.engine.generate(self._side(
            request, REFINE_PROMPT.format(candidate=candidate, feedback=feedback), "refine",
            request.params.max_new_tokens, 2))
        if not self._text(refined.token_ids):
            self.stats["refined_empty"] += 1
            return draft
        self.stats["refined"] += 1
        return dataclasses.replace(refined, request_id=request.request_id)


def self_refine(tokenizer, *, enable_thinking: bool = False):
    """The Self-Refine wrapper as an arm's ``agent`` (``tables.Arm(agent=...)``): target -> engine."""
    def wrap(engine: RolloutEngine) -> SelfRefine:
        return SelfRefine(engine, tokenizer, enable_thinking=enable_thinking)
    return wrap
