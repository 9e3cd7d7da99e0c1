"""Which tokens of a rescue episode are credited (``harness_s.rescue.credit``).

* ``"policy_tokens"`` (default; the paper's rule): only tokens the policy sampled and the
  environment executed are trained. A turn whose action an overlay's ``on_before_action``
  rewrote, forced or blocked is masked out of the loss (``train.rollout.to_episode``), so a rescue
  that succeeds through a rewritten answer (``answer_from_result``) credits only the policy's
  other turns (the SQL query), never the answer the environment actually received.
* ``"executed_action"``: additionally, every turn whose action an overlay *rewrote or forced*
  (an executed action the policy did not sample; blocked turns executed nothing and stay masked)
  becomes one extra training sequence of the episode: the context the policy saw before that
  turn, then the executed action rendered as the policy would have written it (a Qwen tool call
  for the function protocol, the action text for the text protocol) closed by ``<|im_end|>``.
  Those tokens carry the episode's advantage like its other tokens; having no sampling
  log-probability they are marked ``types.UNSAMPLED_LOGP`` and the learner takes its own
  recomputed one (truncated importance weight 1; ``rl.recompute_old_logp`` must be on). The
  policy is thereby pushed toward the action that succeeded, an off-policy imitation of the
  overlay weighted by the group advantage.
"""
from __future__ import annotations

from typing import Any

from harness_jax.sampling.chat import render_tool_call
from harness_jax.sampling.tokenizer import special_token_ids
from harness_jax.types import UNSAMPLED_LOGP, TokenSegment

CREDITS = ("policy_tokens", "executed_action")
EXECUTED_KINDS = ("rewrite_action", "force_action")


def executed_rewrites(traj) -> list:
    """The turns of ``traj`` whose executed action an overlay's ``on_before_action`` rewrote or
    forced (an effect the runtime honoured) and that sampled tokens."""
    out = []
    for ev in traj.turns:
        hits = [i for i in ev.interventions if i.get("hook") == "on_before_action" and not i.get("ignored")
                and (i.get("result") or {}).get("kind") in EXECUTED_KINDS]
        if hits and ev.action and ev.n_sampled:
            out.append(ev)
    return out


def render_actions(actions: Any) -> str:
    """Executed actions (``TurnEvent.action``: JSON strings or ``{"name", "arguments"}``) as the
    assistant text that would have produced them."""
    acts = actions if isinstance(actions, list) else [actions]
    return "\n".join(render_tool_call(a["name"], dict(a.get("arguments") or {})) if isinstance(a, dict)
                     else str(a) for a in acts)


def executed_action_segments(traj, tokenizer) -> list[TokenSegment]:
    """One extra training sequence per ``executed_rewrites(traj)`` turn (module docstring);
    advantage 0 until ``train.groups.compute_advantages`` sets the episode's."""
    if traj.infra_error:
        return []
    end = special_token_ids(tokenizer)["<|im_end|>"]
    out = []
    for ev in executed_rewrites(traj):
        if not 0 <= ev.segment < len(traj.segments):
            continue
        seg = traj.segments[ev.segment]
        prefix = list(seg.token_ids[:ev.start])
        ids = list(tokenizer.encode(render_actions(ev.action), add_special_tokens=False)) + [int(end)]
        pv = seg.policy_versions
        out.append(TokenSegment(
            token_ids=prefix + ids, loss_mask=[0] * len(prefix) + [1] * len(ids),
            rollout_logprobs=[0.0] * len(prefix) + [UNSAMPLED_LOGP] * len(ids), reward=float(traj.reward or 0.0),
            group_id=traj.group_id, episode_id=traj.episode_id, task_id=traj.task_id,
            harness_id=traj.harness_id, policy_version=min(pv) if pv else int(traj.policy_version),
            turn_starts=[len(prefix)], success=traj.success))
    return out


def credit_episode(episode, tokenizer, credit: str):
    """``episode`` with the segments ``credit`` adds (``"policy_tokens"``: unchanged); sets
    ``episode.credited_turns``."""
    if credit not in CREDITS:
        raise ValueError(f"harness_s.rescue.credit={credit!r}; use one of {CREDITS}")
    if credit == "policy_tokens" or episode.trajectory is None:
        return episode
    extra = executed_action_segments(episode.trajectory, tokenizer)
    episode.segments = list(episode.segments) + extra
    episode.credited_turns = len(extra)
    return episode
