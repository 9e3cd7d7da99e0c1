"""Records that cross package boundaries: tool calls (environments, chat format, executor,
server) and token segments (harness executor -> RL batches)."""
from __future__ import annotations

import dataclasses
from typing import Optional


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """A function call: what a policy's parsed reply asks for and what a function-protocol
    environment receives."""

    name: str
    arguments: dict


UNSAMPLED_LOGP = float("nan")   # rollout log-probability of a credited token no sampler drew


@dataclasses.dataclass
class TokenSegment:
    """One token-exact training sequence produced by the executor.

    ``loss_mask[i] == 1`` exactly on tokens the policy sampled; ``rollout_logprobs[i]`` is the
    engine's log-probability of token i where the mask is 1 and 0.0 elsewhere. One exception:
    tokens credited without being sampled (Harness-S ``rescue.credit="executed_action"``: an
    overlay's rewritten action) have mask 1 and ``UNSAMPLED_LOGP``; the learner then uses its
    recomputed log-probability (no sampler to correct for). All three lists
    have the same length. ``turn_starts`` lists the indices where assistant turns begin (legal
    split points for over-long sequences).
    """

    token_ids: list[int]
    loss_mask: list[int]
    rollout_logprobs: list[float]
    reward: float = 0.0
    advantage: float = 0.0
    group_id: str = ""
    episode_id: str = ""
    task_id: str = ""
    harness_id: str = ""
    policy_version: int = 0
    turn_starts: list[int] = dataclasses.field(default_factory=list)
    success: Optional[bool] = None

    def __post_init__(self):
        n = len(self.token_ids)
        if len(self.loss_mask) != n or len(self.rollout_logprobs) != n:
            raise ValueError(
                f"TokenSegment: token_ids ({n}), loss_mask ({len(self.loss_mask)}) and "
                f"rollout_logprobs ({len(self.rollout_logprobs)}) must have the same length")
