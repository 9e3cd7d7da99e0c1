"""An installed overlay: a validated patch turned into the four lifecycle hook points.

Typed actions (skills, tool hints, guard/recovery rules, config) are interpreted host-side by pure
code; code hooks run in the isolated worker (``sandbox.HookSandbox``) under their return
contracts. Every call is counted per hook point (calls, effects, failures) so the degrade-to-no-op
behaviour is visible in the logs and the trajectory.

Order at each point: ``on_init`` = selected skills + tool hints, then the code hook's skills and
tool hint; ``on_before_action`` = guard rules in patch order (first match wins), else the code
hook; ``on_post_step`` = recovery rules (first match), else the code hook; ``make_pre_hint`` = the
code hook.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import os
from typing import Any, Optional, Sequence, Union

from harness_jax.harness.hooks import normalise_action, normalise_hook_result, one_line
from harness_jax.harness.patches import Patch, eval_condition, predicates_for
from harness_jax.harness.sandbox import HookSandbox, HookSandboxPool

log = logging.getLogger(__name__)


@dataclasses.dataclass
class HookEffect:
    """What one hook point decided; ``source`` says which rule/hook produced it."""

    hook: str
    result: dict
    source: str


def condition_view(ctx: dict) -> dict:
    """The namespace conditions read: action.*, state.*, task.*, obs.* (``obs.text``: the latest
    feedback; ``obs.error``: the error it reports, "" when none)."""
    return {"action": ctx.get("action") or {}, "state": ctx.get("state") or {},
            "task": ctx.get("task") or {}, "obs": {"text": ctx.get("observation") or "",
                                                   "error": ctx.get("last_error") or ""}}


class Overlay:
    """A patch installed for one executor (share it across episodes; state lives in ``nb``)."""

    def __init__(self, patch: Optional[Patch], env_name: Optional[str] = None,
                 sandbox: Union[None, HookSandbox, HookSandboxPool] = None, timeout_s: float = 1.0,
                 workers: Optional[int] = None):
        self.patch = patch
        self.workers = workers          # own pool size (None: $HARNESS_JAX_OVERLAY_WORKERS or 2)
        self.env_name = env_name
        self.timeout_s = timeout_s
        self._sandbox = sandbox
        self._owns_sandbox = False
        self.preds = predicates_for(env_name)
        self.code = patch.code_hooks() if patch else {}
        self.config = patch.config() if patch else {}
        self.stats: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)

    @property
    def overlay_id(self) -> str:
        return self.patch.patch_id if self.patch else ""

    @property
    def sandbox(self) -> Union[HookSandbox, HookSandboxPool]:
        """The workers of this overlay. Unless one is passed in, each overlay gets its own small
        pool, so hostile code of one patch can never touch the hooks of another (e.g. the K
        candidate patches of one GRPO group evaluated side by side)."""
        if self._sandbox is None:
            n = self.workers or int(os.environ.get("HARNESS_JAX_OVERLAY_WORKERS", "2"))
            self._sandbox = HookSandboxPool(size=max(1, n))
            self._owns_sandbox = True
        return self._sandbox

    def close(self) -> None:
        """Stops this overlay's own workers (a shared sandbox passed in is left running)."""
        if self._owns_sandbox and self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None
            self._owns_sandbox = False

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # -- code hooks ------------------------------------------------------------------------------
    def _code(self, hook: str, ctx: dict, nb: dict) -> Optional[dict]:
        src = self.code.get(hook)
        if src is None:
            return None
        st = self.stats[hook]
        st["calls"] += 1
        out = self.sandbox.call(src, ctx, nb, timeout_s=self.timeout_s)
        if not out.ok:
            st["timeouts" if out.timed_out else "failures"] += 1
            log.info("overlay %s %s failed: %s", self.overlay_id, hook, out.error)
            return None
        if isinstance(out.nb, dict):
            nb.clear()
            nb.update(out.nb)
        res = normalise_hook_result(hook, out.result)
        if res is None and out.result not in (None, {}):
            st["contract_violations"] += 1
        return res

    # -- hook points -----------------------------------------------------------------------------
    def on_init(self, ctx: dict, nb: dict) -> Optional[HookEffect]:
        if self.patch is None:
            return None
        skills: list[str] = []
        tool_hints: list[dict] = []
        task = ctx.get("task") or {}
        text = " ".join(str(task.get(k) or "") for k in ("instruction", "category")).lower()
        for s in self.patch.of_type("add_or_edit_skill"):
            kws = [k.lower() for k in s.get("keywords") or []]
            types = [t.lower() for t in s.get("task_types") or []]
            if (not kws and not types) or any(k in text for k in kws) or (
                    str(task.get("category") or "").lower() in types):
                skills.append(one_line(s["text"]))
        for h in self.patch.of_type("edit_tool_hint"):
            tool_hints.append({"tool": h["tool"], "mode": h["mode"], "text": one_line(h["text"])})
        res = self._code("on_init", ctx, nb) or {}
        skills += res.get("skills", [])
        if res.get("tool_hint"):
            tool_hints.append({"tool": "*", "mode": "append", "text": res["tool_hint"]})
        if not skills and not tool_hints:
            return None
        self.stats["on_init"]["effects"] += 1
        return HookEffect("on_init", {"skills": skills, "tool_hints": tool_hints},
                          "overlay")

    def make_pre_hint(self, ctx: dict, nb: dict) -> Optional[HookEffect]:
        res = self._code("make_pre_hint", ctx, nb)
        if res is None:
            return None
        self.stats["make_pre_hint"]["effects"] += 1
        return HookEffect("make_pre_hint", res, "code")

    def _rules(self, typ: str, hook: str, ctx: dict) -> Optional[HookEffect]:
        if self.patch is None:
            return None
        view = condition_view(ctx)
        for r in self.patch.of_type(typ):
            if eval_condition(r["when"], view, self.preds):
                res = {"kind": r["effect"], "message": one_line(r.get("message") or "")}
                if r["effect"] in ("force_action", "rewrite_action"):
                    act = normalise_action(r.get("action"))
                    if act is None:
                        continue
                    res["action"] = act
                self.stats[hook]["effects"] += 1
                self.stats[hook]["rule:" + r["id"]] += 1
                return HookEffect(hook, res, "rule:" + r["id"])
        return None

    def on_before_action(self, ctx: dict, nb: dict) -> Optional[HookEffect]:
        eff = self._rules("add_guard_rule", "on_before_action", ctx)
        if eff is not None:
            return eff
        res = self._code("on_before_action", ctx, nb)
        if res is None:
            return None
        self.stats["on_before_action"]["effects"] += 1
        return HookEffect("on_before_action", res, "code")

    def on_post_step(self, ctx: dict, nb: dict) -> Optional[HookEffect]:
        eff = self._rules("add_recovery_rule", "on_post_step", ctx)
        if eff is not None:
            return eff
        res = self._code("on_post_step", ctx, nb)
        if res is None:
            return None
        self.stats["on_post_step"]["effects"] += 1
        return HookEffect("on_post_step", res, "code")

    def call(self, hook: str, ctx: dict, nb: dict) -> Optional[HookEffect]:
        return {"on_init": self.on_init, "make_pre_hint": self.make_pre_hint,
                "on_before_action": self.on_before_action,
                "on_post_step": self.on_post_step}[hook](ctx, nb)

    def stats_dict(self) -> dict:
        return {k: dict(v) for k, v in self.stats.items()}

    def fired(self) -> bool:
        """Whether the patch has changed anything so far: a hook point took an effect the
        runtime honoured, or the patch sets runtime config. A patch that never fires is a
        runtime no-op."""
        return bool(self.config) or took_effect(self.stats)


def took_effect(stats: dict) -> bool:
    """Whether per-hook counters (``Overlay.stats``, possibly summed over workers) show an effect
    the runtime honoured: effects the executor ignored (outside the effect surface, not fitting
    the protocol, inadmissible) do not count."""
    return any(int(st.get("effects", 0)) - int(st.get("ignored", 0)) > 0 for st in stats.values())


def reject_runtime_noop(patch: Patch, contexts: Sequence[dict], env_name: Optional[str] = None,
                        sandbox: Union[None, HookSandbox, HookSandboxPool] = None) -> Optional[str]:
    """Dry-runs a patch on recorded hook contexts; returns an error when nothing would change.

    ``contexts``: ``[{"hook": name, "ctx": {...}, "episode": key?}, ...]`` as recorded by the
    executor (``Trajectory.hook_contexts``). Contexts of one ``episode`` share a notebook, in
    order. Also set_config values that differ from nothing count as a change.
    """
    if not contexts:
        return "runtime no-op check: no recorded contexts to dry-run the patch on"
    ov = Overlay(patch, env_name=env_name, sandbox=sandbox)
    notebooks: dict[Any, dict] = {}
    try:
        for rec in contexts:
            if ov.fired():
                return None
            ov.call(rec["hook"], rec["ctx"], notebooks.setdefault(rec.get("episode"), {}))
        if ov.fired():
            return None
    finally:
        ov.close()
    return (f"runtime no-op: the patch changed nothing on {len(contexts)} recorded hook calls "
            "(it is valid but never fires)")
