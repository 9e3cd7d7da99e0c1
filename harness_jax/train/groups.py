"""Rollout groups: rewards -> group-relative advantages, dynamic sampling, and the two hooks.

A ``Group`` is the G episodes of one task. Between collection and packing, groups pass through
``GroupPostProcessor``s (the hook where Harness-S's rescue lives: when every rollout under H0
fails it replaces the group with attempts under helper harnesses) and then the dynamic-sampling
filter (DAPO-style: skip zero-variance groups, or over-sample replacement tasks). Which harness
a task is first rolled out under is the ``HarnessSelector`` hook (H0 by default; a fixed mixture
or a router later).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Awaitable, Callable, Optional, Protocol, Sequence

import numpy as np

from harness_jax.envs.base import Task
from harness_jax.rl import losses
from harness_jax.types import TokenSegment

DYNAMIC_SAMPLING = ("off", "skip", "oversample")   # what happens to zero-variance groups (``dynamic_sampling_filter``)


@dataclasses.dataclass
class Episode:
    """What the loop needs from one finished episode (adapted from the executor's trajectory)."""

    episode_id: str
    task: Task
    harness_id: str
    reward: float
    success: bool
    segments: list[TokenSegment]
    policy_version: int               # oldest weight version among the episode's sampled tokens
    num_turns: int = 0
    infra_error: bool = False         # the environment/engine failed; not a task failure
    trajectory: Any = None            # the executor's full record (for the store / post-processors)
    sibling_id: str = ""              # the harness (spec + overlay) that produced it (H0: its spec id)
    pool_version: str = ""            # the Harness-S pool it came from ("" = no pool)
    masked_turns: int = 0             # turns whose action an overlay overrode: not trained on
    credited_turns: int = 0           # rewritten turns trained on the executed action (Harness-S credit "executed_action")


@dataclasses.dataclass
class Group:
    group_id: str
    task: Task
    episodes: list[Episode]
    harness_id: str = ""
    # bookkeeping for logging and for post-processors (e.g. the original failures of a rescue)
    info: dict = dataclasses.field(default_factory=dict)
    # rewards that join the group's advantage statistics (mean, std) without being trained on:
    # a Harness-S rescue's original H0 failures under calibration "with_original"
    baseline_rewards: list = dataclasses.field(default_factory=list)

    @property
    def rewards(self) -> np.ndarray:
        return np.asarray([e.reward for e in self.episodes], np.float32)

    @property
    def stats_rewards(self) -> np.ndarray:
        """The rewards the advantage statistics are taken over: ``baseline_rewards`` first, then
        the trained episodes'."""
        return np.concatenate([np.asarray(self.baseline_rewards, np.float32), self.rewards])

    @property
    def zero_variance(self) -> bool:
        """All rewards of the statistics equal (or no episode): the group carries no GRPO signal
        (``rl.losses.zero_variance``, the one definition)."""
        r = self.stats_rewards
        return len(self.episodes) == 0 or bool(losses.zero_variance(r[None, :])[0])

    @property
    def trained_zero_variance(self) -> bool:
        """All *trained* episodes share one reward (or none): no contrast among the attempts
        themselves, whatever ``baseline_rewards`` add (the ``"replaced"`` reading of a Harness-S
        rescue: injected original failures are not signal)."""
        return len(self.episodes) == 0 or bool(losses.zero_variance(self.rewards[None, :])[0])

    @property
    def first_successes(self) -> list:
        """Outcomes of the group's first rollouts, under the harness the selector chose: the
        episodes a post-processor replaced (``info["replaced_successes"]``) when it replaced
        them, else the group's own (what "training success" counts)."""
        rep = self.info.get("replaced_successes")
        return [bool(x) for x in rep] if rep is not None else [bool(e.success) for e in self.episodes]

    @property
    def success_rate(self) -> float:
        return float(np.mean([e.success for e in self.episodes])) if self.episodes else 0.0


# A rollout function the hooks may call: (task, harness, n, group_id) -> n episodes.
RolloutFn = Callable[[Task, Any, int, str], Awaitable[list[Episode]]]


class GroupPostProcessor(Protocol):
    """Transforms a finished group before advantages are computed.

    Return the group (possibly with replaced/extra episodes) or None to drop it. ``rollout`` runs
    more episodes on the same engine (same policy version rules as the main collection).
    """

    async def __call__(self, group: Group, rollout: RolloutFn, step: int) -> Optional[Group]: ...


class HarnessSelector(Protocol):
    """Chooses the harness a task's group is rolled out under (default: the base harness H0)."""

    def __call__(self, task: Task, step: int) -> Any: ...


@dataclasses.dataclass
class FixedHarness:
    """The default selector: every task under one harness (H0)."""

    harness: Any

    def __call__(self, task: Task, step: int) -> Any:
        return self.harness


def compute_advantages(groups: Sequence[Group], *, eps: float, scale: str = "std",
                       baseline: str = "mean") -> dict:
    """Fills ``segment.advantage`` (and reward/group id) for every segment of every group: the
    one advantage path of the project.

    Each group is normalised on its own (groups may differ in size after a rescue) over its
    *episodes*: an episode counts once however many segments (sliding-window pieces, context
    resets) it produced, and all of its segments share its advantage. A group's
    ``baseline_rewards`` join its statistics but get no advantage of their own (Harness-S
    rescue calibration: the G original failures next to the rescue attempts, so an all-success
    rescue still teaches; ``harness_s.rescue_advantages_G`` is the same math).
    """
    zero = trained_zero = 0
    for g in groups:
        r_1N = g.stats_rewards[None, :]
        nb = len(g.baseline_rewards)
        if r_1N.shape[1] < 2:
            adv = np.zeros_like(r_1N)
        else:
            adv = np.asarray(losses.group_advantages(r_1N, eps=eps, scale=scale, baseline=baseline))
        zero += int(g.zero_variance)
        trained_zero += int(g.trained_zero_variance)
        for ep, a in zip(g.episodes, adv[0, nb:]):
            for seg in ep.segments:
                seg.advantage = float(a)
                seg.reward = float(ep.reward)
                seg.group_id = g.group_id
    return {"groups": len(groups), "zero_variance_groups": zero,
            "zero_variance_fraction": zero / max(len(groups), 1),
            "trained_zero_variance_groups": trained_zero,
            "trained_zero_variance_fraction": trained_zero / max(len(groups), 1)}


def dynamic_sampling_filter(groups: Sequence[Group], mode: str) -> tuple[list[Group], list[Group]]:
    """Splits groups into (kept, dropped) by the dynamic-sampling mode.

    "off" keeps everything; "skip" and "oversample" drop zero-variance groups (oversampling then
    asks the stream for replacement tasks, see ``loop``).
    """
    if mode not in DYNAMIC_SAMPLING:
        raise ValueError(f"dynamic_sampling={mode!r}; use one of {DYNAMIC_SAMPLING}")
    if mode == "off":
        return list(groups), []
    kept = [g for g in groups if not g.zero_variance]
    dropped = [g for g in groups if g.zero_variance]
    return kept, dropped


def staleness_histogram(groups: Sequence[Group], learner_version: int) -> dict[int, int]:
    """Counts episodes by (learner version - policy version that generated them)."""
    hist: dict[int, int] = {}
    for g in groups:
        for e in g.episodes:
            lag = int(learner_version - e.policy_version)
            hist[lag] = hist.get(lag, 0) + 1
    return dict(sorted(hist.items()))
