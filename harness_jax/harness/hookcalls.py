"""Hook dispatch of the turn loop: the context each lifecycle hook reads (``hooks`` documents
every field), the overlay call (a failing hook only loses its effect; its time and effect are
recorded on the turn), the per-episode limits a patch's ``set_config`` may override, and which of
a hook's effects the runtime honours. ``ep`` is the turn loop's ``EpisodeState``.

An effect is honoured only when it fits the episode (``HookCalls.honoured``): its kind is in the
effect surface of the benchmark (``hooks.honoured_kinds``, ``ExecutorConfig.effect_surface``), its
action has the shape of the episode's protocol (text protocol: a string; function protocol: a
call ``{"name", "arguments"}`` of a tool the episode offers) and, when the environment lists
admissible actions, it is one of them. Anything else has no effect and is counted in the
overlay's ``stats[hook]["ignored"]`` (and ``ignored:<reason>``) and on the turn; an ignored
effect does not make a patch "fire" (``Overlay.fired``).
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any, Optional

from harness_jax.harness import prompting
from harness_jax.harness.hooks import honoured_kinds
from harness_jax.harness.overlay import HookEffect, Overlay
from harness_jax.harness.specs import HarnessSpec
from harness_jax.harness.trajectory import TurnEvent

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Limits:
    """Per-episode knobs a patch's ``set_config`` may override."""

    max_obs: int
    hint_cap: int
    repeat_limit: int
    stall_turns: int


class HookCalls:
    """The hooks of one executor's overlay as the turn loop calls them."""

    def __init__(self, harness: HarnessSpec, overlay: Optional[Overlay], config):
        self.harness = harness
        self.overlay = overlay
        self.config = config                   # the executor's ExecutorConfig
        self.surface = config.effect_surface or "contract"

    def cap(self, text: Any) -> str:
        return prompting.capped(text, self.config.ctx_text_chars)

    def limits(self) -> Limits:
        cfg = self.overlay.config if self.overlay else {}
        h = self.harness
        return Limits(max_obs=int(cfg.get("max_observation_chars", h.observation.max_chars)),
                      hint_cap=int(cfg.get("max_hint_chars", 900)),
                      repeat_limit=int(cfg.get("repeated_action_limit", h.rules.repeated_action_limit)),
                      stall_turns=int(cfg.get("stall_turns", 3)))

    def ctx(self, ep: Any, hook: str, **extra) -> dict:
        """What hook ``hook`` reads (documented per hook in ``harness.hooks``)."""
        rules = self.harness.rules
        ctx = {"hook": hook, "env": ep.task_info["env"], "task": dict(ep.task_info), "turn": ep.turn,
               "max_turns": rules.max_turns, "turns_left": rules.max_turns - ep.turn,
               "history": ep.history[-self.config.ctx_history_turns:],
               "state": self.state(ep),
               "observation": self.cap("\n".join(ep.pending) if ep.pending else ep.observation),
               "last_action": ep.last_action, "last_error": ep.last_error}
        if ep.admissible is not None:
            ctx["admissible_actions"] = ep.admissible[:200]
        ctx.update(extra)
        return ctx

    @staticmethod
    def state(ep: Any, repeat_count: Optional[int] = None) -> dict:
        return {"turn": ep.turn,
                "repeat_count": ep.repeat_count if repeat_count is None else repeat_count,
                "no_progress_turns": ep.no_progress,
                "stalled": ep.no_progress >= ep.limits.stall_turns, "errors": ep.n_errors,
                "notes": len(ep.nb)}

    async def call(self, ep: Any, hook: str, ctx: dict, event: Optional[TurnEvent]
                    ) -> Optional[HookEffect]:
        if self.config.record_hook_contexts:
            ep.hook_contexts.append({"hook": hook, "ctx": ctx, "episode": ep.episode_id})
        ov = self.overlay
        if ov is None or ov.patch is None:
            return None
        t0 = time.perf_counter()
        try:
            if ov.code.get(hook):
                eff = await asyncio.to_thread(ov.call, hook, ctx, ep.nb)
            else:
                eff = ov.call(hook, ctx, ep.nb)
        except Exception as e:  # noqa: BLE001 - a broken overlay only loses its effect
            log.warning("overlay %s: %s raised %s: %s", ov.overlay_id, hook, type(e).__name__, e)
            ov.stats[hook]["failures"] += 1
            eff = None
        reason = self.unfit(ep, hook, eff) if eff is not None else None
        if event is not None:
            event.timings["hooks_s"] = event.timings.get("hooks_s", 0.0) + time.perf_counter() - t0
            if eff is not None:
                event.interventions.append({"hook": hook, "source": eff.source, "result": eff.result,
                                            **({"ignored": reason} if reason else {})})
        if reason:
            st = ov.stats[hook]
            st["ignored"] += 1
            st["ignored:" + reason.split(":", 1)[0]] += 1
            if event is not None:
                event.errors.append(f"{hook} effect ignored ({reason})")
            return None
        return eff

    def unfit(self, ep: Any, hook: str, eff: HookEffect) -> Optional[str]:
        """Why the runtime does not honour ``eff`` (None: it does; module docstring)."""
        kind = eff.result.get("kind")
        if kind is not None and kind not in honoured_kinds(ep.task.env_name, hook, self.surface):
            return f"surface: {kind} is not honoured on {ep.task.env_name} ({self.surface} surface)"
        if "action" not in eff.result:
            return None
        action = eff.result["action"]
        if ep.function_protocol:
            names = {(t.get("function") or t).get("name") for t in ep.tools}
            if not isinstance(action, dict):
                return "protocol: a text action on a function-calling episode"
            if names and action["name"] not in names:
                return f"protocol: {action['name'][:40]!r} is not a tool of this episode"
        elif not isinstance(action, str):
            return "protocol: a tool call on a text-protocol episode"
        if isinstance(action, str) and ep.admissible is not None and action not in ep.admissible:
            return f"inadmissible: {action[:80]!r} is not admissible"
        return None

    def action_failed(self, ep: Any, hook: str, error: Exception, event: TurnEvent) -> None:
        """The environment failed on an action ``hook`` supplied: counted; the turn loop ends
        the episode as a task failure."""
        if self.overlay is not None:
            self.overlay.stats[hook]["env_errors"] += 1
        event.errors.append(f"the environment failed on the action {hook} supplied "
                            f"(a task failure, not infrastructure): {str(error)[:200]}")
