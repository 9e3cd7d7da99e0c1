"""Harness-S inside the GRPO loop: rescue, routing, re-anchoring, router state in checkpoints.

A run whose config has a ``harness_s`` section that uses a pool gets ``HarnessSExtension`` from
the method registry (``harness_s/method.py``; ``train.run.train`` asks it, so
``launch/train.py`` knows nothing of Harness-S). The extension (a ``train.extensions.Extension``):

* loads the frozen pool (``harness_s.pool``) and tags every episode with its version (the
  pool's content hash, first 16 characters);
* builds the router (``make_router(config.harness_s.router, pool)``) with its decision log in
  ``<workdir>/harness_s/routing.jsonl`` unless ``router.log.path`` names another file;
* adds ``RescueProcessor`` as a group post-processor (``rescue.enabled``);
* optionally replaces the harness selector by ``MixtureSelector`` (the fixed-mixture baseline);
* re-anchors every ``reanchor.every_steps`` steps: validation of H0 and every sibling with the
  current policy, all episodes in flight together, then ``reanchor_from_trajectories``;
* saves the router state (and how many decision-log lines it covers) in every checkpoint and
  restores both on resume (the log is cut back to the checkpoint, so a replayed step does not
  log its decisions twice);
* writes the per-step rescue metrics (``rescue/*``), per-sibling episode counts and the voters'
  usage.

Rescue (``RescueProcessor``): a group rolled out under H0 whose G episodes all failed, with no
infrastructure error, is handed to the router, which picks K distinct helpers; the G attempts
are split over them (``rescue.split="split"``) or each helper gets G (``"per_helper"``). The
helper episodes replace the group: each is trained in its own context (its sibling's prompt and
overlay), on the policy's tokens only (``train.rollout.to_episode`` masks turns an overlay
overrode). With ``rescue.calibration="with_original"`` (default) the G original failures join
the advantage statistics as the group's ``baseline_rewards`` (``train.groups.compute_advantages``,
the one advantage path): an all-success rescue then gets a positive advantage instead of zero.
A rescue whose helper episodes all hit infrastructure errors keeps the original group.
"""
from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import threading
import time
import zlib
from typing import Optional, Sequence

import numpy as np
from absl import logging

from harness_jax.harness_s.config import HarnessSSpec, LLMSpec
from harness_jax.harness_s.credit import credit_episode
from harness_jax.harness_s.llm import make_client
from harness_jax.harness_s.pool import SiblingPool, load_pool, select_siblings
from harness_jax.harness_s.profiles import LLMProfiler
from harness_jax.harness_s.rescue import (RescueRecord, rescue_step_metrics, rescue_trigger,
                                          split_attempts)
from harness_jax.harness_s.routers import Router, make_router, reanchor_from_trajectories
from harness_jax.train import builders
from harness_jax.train.console import QUIET
from harness_jax.train.extensions import Extension
from harness_jax.train.collect import harness_id
from harness_jax.train.groups import Group


def pool_version(pool: SiblingPool) -> str:
    """What episodes record as their pool version: the pool's content hash (16 hex digits)."""
    return (pool.content_hash or "")[:16]


def sibling_labels(pool: SiblingPool) -> dict[str, str]:
    """A short metric-safe label per sibling id (its name; ``name@id`` where names repeat)."""
    names = [e.name for e in pool.entries]
    out = {}
    for e in pool.entries:
        base = re.sub(r"[^A-Za-z0-9_.+-]", "_", e.name or e.sibling_id)[:60]
        out[e.sibling_id] = base if names.count(e.name) == 1 else f"{base}@{e.sibling_id[:10]}"
    return out


class RouterAccess:
    """The router behind a lock: the async rollout producer ranks and records outcomes while the
    learner thread re-anchors and checkpoints."""

    def __init__(self, router: Router):
        self.router = router
        self.lock = threading.Lock()

    def rank(self, task, episodes, step: int) -> tuple[list[str], int]:
        with self.lock:
            ids = self.router.rank(task, episodes, step=step)
            return ids, self.router.last_decision_id

    def record_outcome(self, decision_id: int, outcomes: dict) -> None:
        with self.lock:
            self.router.record_outcome(decision_id, outcomes)


class RescueProcessor:
    """The rescue ``GroupPostProcessor`` (see the module docstring). ``base``: H0 as the run
    executes it (required for ``helpers="h0"``, which re-rolls the attempts under it and needs
    neither pool nor router); ``tokenizer``: required for ``credit="executed_action"``."""

    def __init__(self, pool: Optional[SiblingPool], router: Optional[RouterAccess], *, group_size: int,
                 split: str = "split", calibration: str = "with_original", base_ids: Sequence[str] = (),
                 helpers: str = "router", base=None, credit: str = "policy_tokens", tokenizer=None):
        if helpers == "router" and (pool is None or router is None):
            raise ValueError("RescueProcessor: helpers='router' needs the pool and the router")
        if helpers == "h0" and base is None:
            raise ValueError("RescueProcessor: helpers='h0' needs the base harness (base=)")
        if credit != "policy_tokens" and tokenizer is None:
            raise ValueError(f"RescueProcessor: credit={credit!r} needs the policy's tokenizer")
        self.pool = pool
        self.router = router
        self.group_size = int(group_size)
        self.split = split
        self.calibration = calibration
        self.helpers = helpers
        self.base = base
        self.credit = credit
        self.tokenizer = tokenizer
        self.base_ids = set(base_ids) | ({pool.ids[0]} if pool is not None else set())   # groups rolled out under H0
        if base is not None:
            self.base_ids.add(harness_id(base))
        self._records: dict[int, list[RescueRecord]] = {}
        self._lock = threading.Lock()

    async def _plan(self, group: Group, step: int) -> tuple[list, Optional[int]]:
        """``([(helper id, harness, attempts)], router decision id or None)``."""
        if self.helpers == "h0":
            return [(harness_id(self.base), self.base, self.group_size)], None
        ids, decision = await asyncio.to_thread(self.router.rank, group.task, group.episodes, step)
        return [(sid, self.pool.entry(sid).sibling, n) for sid, n in split_attempts(self.group_size, ids, self.split)], decision

    def _record(self, step: int, rec: RescueRecord) -> None:
        with self._lock:
            self._records.setdefault(int(step), []).append(rec)

    def pop_records(self, step: int) -> list[RescueRecord]:
        with self._lock:
            return self._records.pop(int(step), [])

    async def __call__(self, group: Group, rollout, step: int) -> Optional[Group]:
        infra = int(group.info.get("infra_errors", 0)) > 0
        rec = RescueRecord(original_rewards=[float(r) for r in group.rewards], triggered=False,
                           infra_error=infra)
        under_h0 = group.harness_id in self.base_ids
        if not under_h0 or not rescue_trigger([e.success for e in group.episodes],
                                              [infra] * len(group.episodes)):
            rec.final_rewards = list(rec.original_rewards)
            self._record(step, rec)
            return group
        rec.triggered = True
        rec.started = time.perf_counter()
        plan, decision = await self._plan(group, step)

        async def helper(i, sid, harness, n):
            seed = zlib.crc32(f"{group.group_id}/rescue/{sid}".encode()) % (2 ** 31 - 1)
            return await rollout(group.task, harness, n, f"{group.group_id}-r{i}", seed=seed)

        results = await asyncio.gather(*[helper(i, *p) for i, p in enumerate(plan)])
        outcomes = {sid: [None if e.infra_error else bool(e.success) for e in eps]
                    for (sid, _, _), eps in zip(plan, results)}
        if decision is not None:
            await asyncio.to_thread(self.router.record_outcome, decision, outcomes)
        rec.helper_results = outcomes
        rec.ended = time.perf_counter()
        rec.wall_s = rec.ended - rec.started
        new = [credit_episode(e, self.tokenizer, self.credit) for eps in results for e in eps if not e.infra_error]
        info = dict(group.info, rescue={
            "decision_id": decision, "helpers": [sid for sid, _, _ in plan], "helper_kind": self.helpers,
            "attempts": {sid: n for sid, _, n in plan}, "original_episodes": [e.episode_id for e in group.episodes],
            "original_rewards": rec.original_rewards, "calibration": self.calibration, "credit": self.credit,
            "helper_infra_errors": sum(e.infra_error for eps in results for e in eps)})
        if not new:          # every helper attempt failed on infrastructure: nothing to score
            rec.final_rewards = list(rec.original_rewards)
            self._record(step, rec)
            return dataclasses.replace(group, info=info)
        info["replaced_successes"] = [bool(e.success) for e in group.episodes]   # training success counts these
        baseline = list(rec.original_rewards) if self.calibration == "with_original" else []
        out = Group(group.group_id, group.task, new, harness_id="rescue" if self.helpers == "router" else "resample",
                    info=info, baseline_rewards=baseline)
        rec.final_rewards = [float(r) for r in out.stats_rewards]
        rec.trained_rewards = [float(r) for r in out.rewards]
        self._record(step, rec)
        return out


class MixtureSelector:
    """The fixed-mixture baseline's ``HarnessSelector``: each task's group is rolled out under a
    sibling drawn from fixed weights over the whole pool (H0 included), independently per
    (step, task), reproducibly from the seed."""

    def __init__(self, pool: SiblingPool, weights: dict, seed: int = 0):
        w = {pool.resolve(str(k)): float(v) for k, v in (weights or {}).items()}
        self.pool = pool
        self.seed = int(seed)
        p = np.asarray([w.get(i, 0.0 if w else 1.0) for i in pool.ids], np.float64)
        self.p = p / p.sum()

    def __call__(self, task, step: int):
        rng = np.random.default_rng([self.seed, int(step), zlib.crc32(str(task.task_id).encode())])
        return self.pool[int(rng.choice(len(self.pool), p=self.p))]


class HarnessSExtension(Extension):
    """Harness-S's plug-in of the training loop (module docstring); ``hs``: the resolved
    ``harness_s`` section (``config.HarnessSSpec``)."""

    name = "harness_s"

    def __init__(self, hs: HarnessSSpec):
        self.hs = hs
        self.pool: Optional[SiblingPool] = None
        self.access: Optional[RouterAccess] = None
        self.rescue: Optional[RescueProcessor] = None
        self.selector: Optional[MixtureSelector] = None
        self.val_tasks: list = []
        self.labels: dict[str, str] = {}
        self.log_path = ""
        self.profiler = None
        self.num_steps = 0
        self.async_mode = False
        self.temperature = 1.0
        self.base_id = ""

    # -- set-up -------------------------------------------------------------------------------------
    def attach(self, run) -> None:
        hs, spec = self.hs, run.spec
        self.num_steps, self.async_mode = spec.num_steps, spec.rl.async_mode
        self.temperature = spec.rollout.temperature
        self.base_id = run.harness.harness_id
        if not hs.uses_pool:          # resampling under H0 only (rescue.helpers="h0"): no pool, no router
            self.rescue = RescueProcessor(None, None, group_size=spec.rl.group_size, split=hs.rescue.split,
                                          calibration=hs.rescue.calibration, helpers="h0", base=run.harness,
                                          credit=hs.rescue.credit, tokenizer=getattr(run, "tokenizer", None))
            run.console.line("harness_s: no pool; all-fail H0 groups are re-rolled under H0 "
                             f"({spec.rl.group_size} attempts, calibration {hs.rescue.calibration})")
            return
        self.pool = select_siblings(load_pool(hs.pool), hs.pool_siblings)
        self.labels = sibling_labels(self.pool)
        run.runner.pool_version = pool_version(self.pool)
        h0 = self.pool.entries[0].sibling
        if h0.patch is not None or h0.spec.content() != run.harness.content():
            logging.warning("harness_s: the pool's H0 (%s) differs from this run's base harness (%s): the "
                            "pool was evolved under other settings; rescue still triggers on this run's H0",
                            h0.spec.harness_id, run.harness.harness_id)
        llm_cache = run.paths.local(os.path.join("harness_s", "llm_cache"))
        self.log_path = run.paths.local(os.path.join("harness_s", "routing.jsonl"), hs.router.log_path)
        rc = dataclasses.replace(hs.router, log_path=self.log_path, cache_dir=hs.router.cache_dir or llm_cache,
                                 include_base=False)
        self.access = RouterAccess(make_router(rc, self.pool))
        if hs.rescue.enabled:
            self.rescue = RescueProcessor(self.pool, self.access, group_size=spec.rl.group_size,
                                          split=hs.rescue.split, calibration=hs.rescue.calibration,
                                          base_ids=[run.harness.harness_id], helpers=hs.rescue.helpers,
                                          base=run.harness, credit=hs.rescue.credit, tokenizer=getattr(run, "tokenizer", None))
        if hs.selector_name == "mixture":
            self.selector = MixtureSelector(self.pool, dict(hs.selector_weights), seed=spec.seed)
        if hs.reanchor_every_steps:
            v = hs.validation
            tasks = builders.load_tasks(spec.env, v.split, n=v.num_tasks)
            known = set(self.pool.val_task_ids)
            same = [t for t in tasks if t.task_id in known]
            if known and not same:
                logging.warning("harness_s: none of the %d re-anchoring tasks (%s split) is one of the pool's %d "
                                "validation tasks: the pool was evolved with other harness_s.validation "
                                "settings; re-anchoring replaces its statistics with these tasks'",
                                len(tasks), v.split, len(known))
            self.val_tasks = same or tasks     # the pool's own validation tasks when this config has them
            if hs.reanchor_llm_profiles:
                self.profiler = LLMProfiler(llm_client(hs.llm, llm_cache), seed=int(hs.llm.seed))
        dropped = self.pool.meta.get("siblings_dropped")
        run.console.line(f"harness_s: pool {self.pool.path} ({len(self.pool)} siblings"
                         f"{f', {dropped} action-rewriting left out' if dropped is not None else ''}, version "
                         f"{pool_version(self.pool)}), router {rc.name}, rescue {'on' if self.rescue else 'off'}, "
                         f"selector {hs.selector_name}, re-anchoring every {hs.reanchor_every_steps or '-'} steps")

    def post_processors(self, run):
        return [self.rescue] if self.rescue is not None else []

    def harness_selector(self, run):
        return self.selector

    # -- re-anchoring -------------------------------------------------------------------------------
    def reanchor(self, runner, policy_version: str, *, console=None) -> dict:
        """Validation of H0 and every sibling with the engine's current policy (all in flight
        together), then ``reanchor_from_trajectories``. Returns the router's report."""
        v = self.hs.validation
        temperature = float(v.temperature) or float(self.temperature)
        jobs = [(j, sib, i, t) for j, sib in enumerate(self.pool) for i, t in enumerate(self.val_tasks)]
        bar = (console or QUIET).bar(len(jobs), "reanchor")

        async def one(j, sib, i, t):
            eps = await runner.run(t, sib, int(v.k), f"reanchor{policy_version}-s{j}-t{i}",
                                   seed=50_000 + 1000 * j + i, temperature=temperature)
            bar.update(1)
            return sib.sibling_id, eps

        async def all_jobs():
            return await asyncio.gather(*[one(*job) for job in jobs])

        try:
            done = asyncio.run(all_jobs())
        finally:
            bar.close()
        trajs: dict[str, list] = {}
        for sid, eps in done:
            trajs.setdefault(sid, []).extend(e.trajectory for e in eps)
        with self.access.lock:
            return reanchor_from_trajectories(self.access.router, trajs, policy_version=str(policy_version),
                                              profiler=self.profiler)

    def after_update(self, run, step: int, timer) -> dict:
        every = int(self.hs.reanchor_every_steps)
        if not every or step % every or step >= self.num_steps:
            return {}
        if int(run.engine.weight_version) != int(run.learner.policy_version):
            run.sync_weights()        # validate the current policy, not the last synced one
        with timer.phase("reanchor"):
            rep = self.reanchor(run.runner, str(run.learner.policy_version), console=run.console)
        router = self.access.router
        rates = list(rep["rescue_rate_after"].values())
        h0 = router.results.get(router.base_id, {})
        vals = [a for att in h0.values() for a in att if a is not None]
        run.console.line(f"harness_s: re-anchored at step {step}: H0 validation success "
                         f"{float(np.mean(vals)) if vals else 0.0:.3f}, {rep['h0_failed_tasks']} H0-failed tasks, "
                         f"mean helper rescue rate {float(np.mean(rates)) if rates else 0.0:.3f}")
        return {"reanchor/h0_val_success": float(np.mean(vals)) if vals else 0.0,
                "reanchor/h0_failed_tasks": float(rep["h0_failed_tasks"]),
                "reanchor/mean_rescue_rate": float(np.mean(rates)) if rates else 0.0,
                "reanchor/profiles": float(rep["profiles"])}

    # -- metrics ------------------------------------------------------------------------------------
    def step_metrics(self, run, batch, metrics: dict) -> dict:
        out: dict[str, float] = {}
        for g in batch.groups:
            for e in g.episodes:
                lab = self.labels.get(e.sibling_id)
                if lab:
                    key = f"rollout/episodes_by_sibling/{lab}"
                    out[key] = out.get(key, 0.0) + 1.0
        out.update(success_by_harness(batch.groups, self.base_ids()))
        out["rollout/overlay_masked_turns"] = float(sum(e.masked_turns for g in batch.groups
                                                        for e in g.episodes))
        out["rollout/credited_rewritten_turns"] = float(sum(e.credited_turns for g in batch.groups
                                                            for e in g.episodes))
        if self.rescue is not None:
            wall = float(metrics.get("time/step_s", 0.0))
            if self.async_mode:   # the batch was collected while an earlier step trained
                wall = float(batch.rollout_s)
            m = rescue_step_metrics(self.rescue.pop_records(batch.step), wall)
            for k in ("groups", "rescue_triggered", "rescue_trigger_rate", "rescue_success_rate",
                      "helper_attempt_success_rate", "zero_variance_before", "zero_variance_after",
                      "zero_variance_after_with_original", "infra_groups", "rescue_wall_s", "rescue_wall_fraction"):
                out["rescue/" + k.replace("rescue_", "")] = float(m[k])
            for sid, p in m["per_helper"].items():
                lab = self.labels.get(sid, sid)
                for k, v in p.items():
                    out[f"rescue/helper/{lab}/{k}"] = float(v)
        for voter, u in (self.access.router.usage() if self.access else {}).items():
            for k, v in (u or {}).items():
                if isinstance(v, (int, float)):
                    out[f"router/usage/{voter}/{k}"] = float(v)
        return out

    # -- state --------------------------------------------------------------------------------------
    def _log_lines(self) -> int:
        if not os.path.exists(self.log_path):
            return 0
        with open(self.log_path, "rb") as f:
            return sum(1 for _ in f)

    def base_ids(self) -> set:
        """Ids an H0 episode carries (the run's base harness, the pool's H0)."""
        return {self.base_id} | ({self.pool.ids[0]} if self.pool is not None else set())

    def state_dict(self) -> dict:
        if self.access is None:
            return {}
        with self.access.lock:
            return {"router": self.access.router.state_dict(), "log_lines": self._log_lines(),
                    "pool_hash": self.pool.content_hash}

    def load_state_dict(self, state: dict) -> None:
        if self.access is None:
            return
        if state.get("pool_hash") != self.pool.content_hash:
            raise ValueError(f"this run's checkpoint was written with another sibling pool "
                             f"({str(state.get('pool_hash'))[:16]}, now {pool_version(self.pool)}); resume "
                             "with --config.harness_s.pool set to the pool file the run started with")
        with self.access.lock:
            self.access.router.load_state_dict(state["router"])
            n = int(state.get("log_lines", 0))
            if os.path.exists(self.log_path):           # drop what was logged after the checkpoint
                with open(self.log_path, "rb") as f:
                    lines = f.readlines()
                if len(lines) > n:
                    with open(self.log_path, "wb") as f:
                        f.writelines(lines[:n])
        logging.info("harness_s: router state restored (%d decisions, %d re-anchorings)",
                     self.access.router.n_decisions, len(self.access.router.reanchors))

    def summary(self) -> dict:
        if self.access is None:
            return {"pool": "", "rescue_helpers": self.hs.rescue.helpers, "credit": self.hs.rescue.credit}
        router = self.access.router
        return {"pool": self.pool.path, "pool_version": pool_version(self.pool), "router": router.name,
                "decisions": router.n_decisions, "decision_log": self.log_path,
                "helper_stats": {self.labels.get(k, k): v for k, v in router.helper_stats.items()},
                "reanchors": router.reanchors, "usage": router.usage(), "pool_siblings": self.hs.pool_siblings,
                "rescue_helpers": self.hs.rescue.helpers, "credit": self.hs.rescue.credit}


def success_by_harness(groups, base_ids: set) -> dict:
    """Training success split by harness: ``rollout/success_rate_h0`` over every episode rolled
    out under H0 (first rollouts, including the failures a rescue replaced, and re-rolls under H0)
    and ``rollout/success_rate_helpers`` over the episodes of pool siblings (helpers), with their
    counts; ``rollout/success_rate`` (the loop's) stays the first rollouts alone."""
    h0, helpers = [], []
    for g in groups:
        if "replaced_successes" in g.info:   # the H0 failures a rescue replaced
            h0 += [bool(x) for x in g.info["replaced_successes"]]
        for e in g.episodes:
            (h0 if e.sibling_id in base_ids else helpers).append(bool(e.success))
    return {"rollout/success_rate_h0": float(np.mean(h0)) if h0 else 0.0, "rollout/episodes_h0": float(len(h0)),
            "rollout/success_rate_helpers": float(np.mean(helpers)) if helpers else 0.0,
            "rollout/episodes_helpers": float(len(helpers))}


def llm_client(llm: LLMSpec, default_cache_dir: str = ""):
    """The ``harness_s.llm`` endpoint as an ``OpenAIChatClient`` (editor, diagnoser, profiler);
    its response cache is ``llm.cache_dir``, else ``default_cache_dir``."""
    return make_client(llm.base_url, llm.model, api_key_env=llm.api_key_env or None,
                       cache_dir=llm.cache_dir or default_cache_dir or None, timeout_s=float(llm.timeout_s))
