"""What an episode records: token-exact segments, per-turn events, outcome and provenance."""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Optional

from harness_jax.types import TokenSegment


@dataclasses.dataclass
class Segment:
    """One token-exact training sequence. ``loss_mask`` is 1 exactly on sampled tokens."""

    token_ids: list[int] = dataclasses.field(default_factory=list)
    loss_mask: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    turn_starts: list[int] = dataclasses.field(default_factory=list)
    policy_versions: list[int] = dataclasses.field(default_factory=list)

    def append_context(self, ids: list[int]) -> None:
        """Harness-written tokens (prompt, observations, inserted text): never trained on."""
        self.token_ids.extend(int(t) for t in ids)
        self.loss_mask.extend([0] * len(ids))
        self.logprobs.extend([0.0] * len(ids))

    def append_sampled(self, ids: list[int], logprobs: list[float]) -> None:
        if len(ids) != len(logprobs):
            raise ValueError(f"engine returned {len(ids)} tokens but {len(logprobs)} logprobs")
        self.turn_starts.append(len(self.token_ids))
        self.token_ids.extend(int(t) for t in ids)
        self.loss_mask.extend([1] * len(ids))
        self.logprobs.extend(float(x) for x in logprobs)

    def __len__(self) -> int:
        return len(self.token_ids)


@dataclasses.dataclass
class TurnEvent:
    """Everything that happened in one turn (raw text, action, hook interventions, feedback)."""

    index: int
    segment: int
    start: int = 0                       # index of the first sampled token in the segment
    n_sampled: int = 0
    raw_text: str = ""
    finish_reason: str = ""
    weight_version: int = 0
    action: Any = None                   # what the environment received (JSON form)
    policy_action: Any = None            # what the policy asked for (before any rewrite)
    parse_errors: list[str] = dataclasses.field(default_factory=list)
    interventions: list[dict] = dataclasses.field(default_factory=list)
    observation: str = ""
    reward: float = 0.0
    done: bool = False
    errors: list[str] = dataclasses.field(default_factory=list)
    timings: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Trajectory:
    episode_id: str
    task_id: str
    env_name: str
    harness_id: str
    overlay_id: str = ""
    group_id: str = ""
    run_id: str = ""
    policy_version: int = 0
    segments: list[Segment] = dataclasses.field(default_factory=list)
    turns: list[TurnEvent] = dataclasses.field(default_factory=list)
    reward: float = 0.0
    success: Optional[bool] = None
    evaluation: dict = dataclasses.field(default_factory=dict)
    status: str = "running"              # completed | max_turns | context_full | stopped | ...
    infra_error: bool = False
    infra_attempts: int = 0
    errors: list[str] = dataclasses.field(default_factory=list)
    hook_contexts: list[dict] = dataclasses.field(default_factory=list)
    hook_stats: dict = dataclasses.field(default_factory=dict)
    timings: dict = dataclasses.field(default_factory=dict)
    created_at: float = dataclasses.field(default_factory=time.time)
    meta: dict = dataclasses.field(default_factory=dict)

    def overridden_turns(self) -> list[TurnEvent]:
        """Turns whose proposed action an overlay's ``on_before_action`` rewrote, forced or
        blocked: the environment did not execute what the policy sampled."""
        return [ev for ev in self.turns
                if any(i.get("hook") == "on_before_action" for i in ev.interventions)]

    def to_token_segments(self, advantage: float = 0.0, *,
                          mask_overridden: bool = False) -> list[TokenSegment]:
        """Training segments for the learner (empty for infrastructure failures).

        ``mask_overridden``: the sampled tokens of ``overridden_turns()`` get loss mask 0 (they
        stay in the context): the policy is never credited for an action it did not take.
        """
        if self.infra_error:
            return []
        masks = [list(seg.loss_mask) for seg in self.segments]
        if mask_overridden:
            for ev in self.overridden_turns():
                if 0 <= ev.segment < len(masks) and ev.n_sampled:
                    m = masks[ev.segment]
                    m[ev.start:ev.start + ev.n_sampled] = [0] * len(m[ev.start:ev.start + ev.n_sampled])
        out = []
        for seg, mask in zip(self.segments, masks):
            if not any(mask):
                continue
            out.append(TokenSegment(
                token_ids=list(seg.token_ids), loss_mask=mask,
                rollout_logprobs=list(seg.logprobs), reward=float(self.reward),
                advantage=advantage, group_id=self.group_id, episode_id=self.episode_id,
                task_id=self.task_id, harness_id=self.harness_id,
                policy_version=min(seg.policy_versions) if seg.policy_versions else
                self.policy_version, turn_starts=list(seg.turn_starts), success=self.success))
        return out

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Trajectory":
        d = dict(d)
        d["segments"] = [Segment(**s) for s in d.get("segments", [])]
        d["turns"] = [TurnEvent(**t) for t in d.get("turns", [])]
        return cls(**d)

    @property
    def num_sampled_tokens(self) -> int:
        return sum(sum(s.loss_mask) for s in self.segments)
