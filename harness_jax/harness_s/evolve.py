"""Directional evolution: H0 -> repair directions -> children -> joint-coverage parents -> pool.

``evolve`` is a library function over two callables, so the training loop can plug in policy
rollouts and tests a scripted policy or a pure function:

* ``rollout(sibling, tasks) -> list[Trajectory]`` runs the current policy under a sibling
  (used for H0's validation episodes, whose failures feed the router's features, and for
  the parents' failures on training tasks, which give the repair directions);
* ``evaluate(sibling, tasks) -> {task_id: [True | False | None, ...]}`` scores a child on the
  validation split, k attempts per task (``None`` = infrastructure error). Optional: by default
  the children are scored by ``rollout`` itself, which also yields each child's offline
  behaviour profile against H0 (paired validation episodes) for the frozen pool.

Per generation: parents (generation 1: H0; later: greedy joint validation coverage over the
valid siblings not yet expanded, ties to the cheaper harness) -> their failures on the training
tasks -> root causes (extractor, optional LLM diagnoser) -> directions (labels with at least
``min_failures`` failures, most frequent first) -> ``children_per_direction`` proposals per
direction from the editor -> validation (editor checks; duplicates of a seen sibling rejected) ->
evaluation on the validation split (a child with a task that has only infrastructure errors is
incomplete and rejected, never scored; one solving fewer than ``min_val_solved`` tasks is
dropped) -> accepted children join the pool. Stops at ``max_generations``, when
``max_child_evaluations`` is spent, or when a generation adds nothing and no parent is left.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable, Mapping, Optional, Sequence
import asyncio

from harness_jax.envs.base import Task
from harness_jax.harness.traces import render_trace
from harness_jax.harness.siblings import Sibling
from harness_jax.harness.trajectory import Trajectory
from harness_jax.harness_s.coverage import coverage_select, joint_coverage
from harness_jax.harness_s.editors import EditContext, Editor
from harness_jax.harness_s.features import episode_features, task_text
from harness_jax.harness_s.pool import (PoolEntry, SiblingPool, freeze_pool, harness_cost,
                                        results_from_trajectories, solved_tasks)
from harness_jax.harness_s.profiles import pair_trajectories, summarise_offline
from harness_jax.harness_s.rootcause import LLMDiagnoser, label_failures, repair_directions
from harness_jax.envs import registry
from harness_jax.harness.executor import ExecutorConfig, run_episodes

log = logging.getLogger(__name__)

Rollout = Callable[[Sibling, Sequence[Task]], Sequence[Trajectory]]
Evaluate = Callable[[Sibling, Sequence[Task]], Mapping[str, Sequence[Optional[bool]]]]


def _pos_int(name, v, lo=1):
    if not isinstance(v, int) or isinstance(v, bool) or v < lo:
        raise ValueError(f"EvolutionConfig.{name} must be an integer >= {lo}, got {v!r}")


@dataclasses.dataclass(frozen=True)
class EvolutionConfig:
    env_name: str                        # environment (patch benchmark, operator texts)
    protocol: str = "text"               # the environment's action protocol: text | function
    max_generations: int = 3             # generations of children
    max_child_evaluations: int = 32      # budget: children evaluated on the validation split
    parents_per_generation: int = 2      # parents chosen by greedy joint coverage (gen >= 2)
    max_directions: int = 3              # directions edited per parent (most frequent first)
    children_per_direction: int = 2      # proposals per (parent, direction)
    min_failures: int = 2                # failures a root cause needs to become a direction
    min_val_solved: int = 1              # a child must solve at least this many validation tasks
    excerpts_per_direction: int = 3      # failure traces shown to an LLM editor
    policy_version: str = ""             # recorded with every sibling's validation results

    def __post_init__(self):
        if not self.env_name:
            raise ValueError("EvolutionConfig.env_name is empty; name the environment")
        if self.protocol not in ("text", "function"):
            raise ValueError(f"EvolutionConfig.protocol must be 'text' or 'function', got "
                             f"{self.protocol!r}")
        for f in ("max_generations", "parents_per_generation", "max_directions",
                  "children_per_direction", "min_failures", "excerpts_per_direction"):
            _pos_int(f, getattr(self, f))
        _pos_int("max_child_evaluations", self.max_child_evaluations, 0)
        _pos_int("min_val_solved", self.min_val_solved, 0)


@dataclasses.dataclass
class EvolutionResult:
    entries: list[PoolEntry]                  # H0 first, then accepted children in order
    rejected: list[dict]                      # every rejected proposal with its reasons
    generations: list[dict]                   # per-generation log
    h0_failures: dict                         # val task_id -> [failure features of H0]
    task_info: dict                           # task_id -> {"category", "text"}
    val_task_ids: list[str]
    stop_reason: str
    child_evaluations: int
    wall_s: float
    config: EvolutionConfig
    profiles: dict = dataclasses.field(default_factory=dict)  # child id -> offline profile

    def pool(self) -> SiblingPool:
        meta = {"generations": self.generations, "stop_reason": self.stop_reason,
                "child_evaluations": self.child_evaluations,
                "config": dataclasses.asdict(self.config),
                "rejected": self.rejected[:500], "n_rejected": len(self.rejected)}
        return SiblingPool(self.entries, env_name=self.config.env_name,
                           val_task_ids=self.val_task_ids, task_info=self.task_info,
                           h0_failures=self.h0_failures, profiles=self.profiles, meta=meta)

    def freeze(self, directory: str) -> SiblingPool:
        """Writes the content-addressed, read-only pool file and its report."""
        return freeze_pool(self.pool(), directory)


def executor_rollout(engine, env_factory: Callable, *, tokenizer=None, n_per_task: int = 1,
                     config=None, run_id: str = "evolve", backend=None) -> Rollout:
    """A ``rollout`` that runs a sibling (spec + overlay) through the harness executor:
    ``n_per_task`` episodes per task with the policy behind ``engine`` (synchronous; for
    ``launch/evolve.py`` and tests, not for use inside a running event loop). ``backend``:
    episode workers (``harness.workers``) for the validation episodes; None runs them here."""
    cfg = config or ExecutorConfig()

    def rollout(sibling: Sibling, tasks: Sequence[Task]) -> list[Trajectory]:
        return asyncio.run(run_episodes(engine, env_factory, list(tasks), sibling.spec,
                                        sibling.patch, n_per_task=n_per_task,
                                        tokenizer=tokenizer, config=cfg, run_id=run_id,
                                        backend=backend))
    return rollout


def _complete(results: Mapping[str, Sequence[Optional[bool]]], tasks: Sequence[Task]) -> list[str]:
    """Validation tasks without a single non-infrastructure attempt."""
    return [t.task_id for t in tasks if not any(a is not None for a in results.get(t.task_id, []))]


class _Evolution:
    """The state of one evolution run (the steps of ``evolve``)."""

    def __init__(self, base, train_tasks, val_tasks, rollout, evaluate, editor, cfg, diagnoser):
        self.base, self.train, self.val = base, list(train_tasks), list(val_tasks)
        self.rollout, self.custom_evaluate, self.editor = rollout, evaluate, editor
        self.cfg, self.diagnoser = cfg, diagnoser
        self.entries: list[PoolEntry] = []
        self.seen = {base.sibling_id}
        self.expanded: set[str] = set()
        self.failures: dict[str, tuple] = {}
        self.rejected: list[dict] = []
        self.evals = 0
        self.budget_hit = False
        self.h0_failures: dict[str, list] = {}
        self.h0_val: list[Trajectory] = []
        self.profiles: dict[str, dict] = {}
        self.categories = {t.task_id: t.category for t in self.val}

    def run_h0(self) -> None:
        """H0 on the validation split: its results and the features of its failures."""
        h0_val = self.h0_val = list(self.rollout(self.base, self.val))
        res = results_from_trajectories(h0_val)
        missing = _complete(res, self.val)
        if missing:
            raise RuntimeError(f"H0's validation run is incomplete (only infrastructure errors "
                               f"on {len(missing)} tasks, e.g. {missing[:3]}); fix the "
                               "environment before evolving")
        for t in h0_val:
            f = episode_features(t)
            if f:
                self.h0_failures.setdefault(t.task_id, []).append(f)
        self.entries.append(PoolEntry(self.base, 0, None, None, "base", res,
                                      self.cfg.policy_version, harness_cost(self.base), "H0"))

    def parents(self, gen: int) -> list[str]:
        """Generation 1: H0. Later: greedy joint coverage over the unexpanded siblings."""
        cands = [e.sibling_id for e in self.entries if e.sibling_id not in self.expanded]
        if gen == 1 or not cands:
            return cands[:1] if gen == 1 else []
        return coverage_select({e.sibling_id: e.solved() for e in self.entries},
                               self.cfg.parents_per_generation,
                               {e.sibling_id: e.cost for e in self.entries}, cands)

    def directions(self, parent: Sibling):
        """The parent's repair directions from its failures on the training tasks (cached)."""
        pid = parent.sibling_id
        if pid not in self.failures:
            trajs = list(self.rollout(parent, self.train))
            causes, report = label_failures(trajs, self.diagnoser)
            self.failures[pid] = ({t.episode_id: t for t in trajs}, causes, report)
        by_ep, causes, report = self.failures[pid]
        dirs = repair_directions(causes, self.cfg.min_failures, self.cfg.max_directions)
        return dirs, by_ep, report.get("labels", {})

    def consider(self, o, gen: int, direction: str) -> bool:
        """Validates, evaluates and keeps (or records the rejection of) one proposal."""
        rec = {"generation": gen, **o.to_dict()}
        reason = None
        if not o.ok:
            self.rejected.append(rec)
            return False
        if o.child.sibling_id in self.seen:
            reason = "duplicate of an existing sibling"
        elif self.evals >= self.cfg.max_child_evaluations:
            self.budget_hit = True
            reason = "not evaluated: budget spent"
        if reason:
            self.rejected.append({**rec, "errors": [reason]})
            return False
        self.seen.add(o.child.sibling_id)
        res, trajs = self.evaluate(o.child)
        self.evals += 1
        missing = _complete(res, self.val)
        n_solved = len(solved_tasks(res))
        if missing:
            reason = (f"incomplete evaluation: only infrastructure errors on {len(missing)} "
                      "validation tasks")
        elif n_solved < self.cfg.min_val_solved:
            reason = (f"solves {n_solved} validation tasks (< min_val_solved="
                      f"{self.cfg.min_val_solved})")
        if reason:
            self.rejected.append({**rec, "errors": [reason], "validation": res})
            return False
        self.entries.append(PoolEntry(o.child, gen, o.parent_id, direction, o.editor, res,
                                      self.cfg.policy_version, harness_cost(o.child), o.notes))
        if trajs is not None:        # rollout-based evaluation: profile the child for free
            pairs = pair_trajectories(self.h0_val, trajs, self.categories)
            self.profiles[o.child.sibling_id] = summarise_offline(
                o.child.sibling_id, pairs, self.cfg.policy_version).to_dict()
        return True

    def evaluate(self, child: Sibling):
        """``(results, trajectories or None)`` of a child on the validation split."""
        if self.custom_evaluate is not None:
            res = self.custom_evaluate(child, self.val)
            return {k: list(v) for k, v in res.items()}, None
        trajs = list(self.rollout(child, self.val))
        return results_from_trajectories(trajs), trajs

    def generation(self, gen: int) -> dict:
        cfg = self.cfg
        parents = self.parents(gen)
        glog = {"generation": gen, "parents": parents, "directions": [], "proposed": 0,
                "accepted": 0, "labels": {}}
        by_id = {e.sibling_id: e.sibling for e in self.entries}
        for pid in parents:
            self.expanded.add(pid)
            dirs, by_ep, glog["labels"][pid] = self.directions(by_id[pid])
            for d in dirs:
                glog["directions"].append(d.name)
                excerpts = tuple(render_trace(by_ep[e], i + 1) for i, e in
                                 enumerate(d.episode_ids[:cfg.excerpts_per_direction])
                                 if e in by_ep)
                ctx = EditContext(cfg.env_name, cfg.protocol, excerpts, seed=gen)
                for o in self.editor.propose(by_id[pid], d, n=cfg.children_per_direction,
                                             context=ctx):
                    glog["proposed"] += 1
                    glog["accepted"] += self.consider(o, gen, d.name)
        glog["rejected"] = glog["proposed"] - glog["accepted"]
        glog["joint_coverage"] = len(joint_coverage({e.sibling_id: e.solved()
                                                     for e in self.entries},
                                                    [e.sibling_id for e in self.entries]))
        return glog


def evolve(base: Sibling, *, train_tasks: Sequence[Task], val_tasks: Sequence[Task],
           rollout: Rollout, editor: Editor, config: EvolutionConfig,
           evaluate: Optional[Evaluate] = None, diagnoser: Optional[LLMDiagnoser] = None,
           on_generation: Optional[Callable[[dict], None]] = None) -> EvolutionResult:
    """Evolves children of ``base`` along repair directions (see the module docstring). Runs
    inside ``registry.training_scope``: nothing it calls (rollouts, editors, callbacks) can make
    test-split tasks, and test tasks given as inputs are refused."""
    if not train_tasks or not val_tasks:
        raise ValueError("evolve needs training tasks (for failures) and validation tasks")
    registry.assert_no_test_tasks(list(train_tasks) + list(val_tasks), "harness_s.evolve")
    with registry.training_scope("harness_s.evolve"):
        return _evolve(base, train_tasks, val_tasks, rollout, editor, config, evaluate, diagnoser,
                       on_generation)


def _evolve(base, train_tasks, val_tasks, rollout, editor, config, evaluate, diagnoser,
            on_generation) -> EvolutionResult:
    t0 = time.perf_counter()
    ev = _Evolution(base, train_tasks, val_tasks, rollout, evaluate, editor, config, diagnoser)
    ev.run_h0()
    generations: list[dict] = []
    stop = f"reached max_generations={config.max_generations}"
    for gen in range(1, config.max_generations + 1):
        if not ev.parents(gen):
            stop = "no unexpanded sibling left to edit"
            break
        glog = ev.generation(gen)
        generations.append(glog)
        log.info("evolution generation %d: parents %s, directions %s, %d/%d accepted, joint "
                 "coverage %d/%d", gen, glog["parents"], glog["directions"], glog["accepted"],
                 glog["proposed"], glog["joint_coverage"], len(val_tasks))
        if on_generation is not None:
            on_generation(glog)
        if ev.budget_hit or ev.evals >= config.max_child_evaluations:
            stop = f"evaluation budget spent ({ev.evals} child evaluations)"
            break
    task_info = {t.task_id: {"category": t.category, "text": task_text(t, 300)}
                 for t in val_tasks}
    return EvolutionResult(ev.entries, ev.rejected, generations, ev.h0_failures, task_info,
                           [t.task_id for t in val_tasks], stop, ev.evals,
                           time.perf_counter() - t0, config, ev.profiles)
