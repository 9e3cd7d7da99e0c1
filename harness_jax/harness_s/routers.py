"""Routers: which sibling harnesses should help on a task whose H0 attempts failed.

    router = harness_s.make_router(config.harness_s.router, pool)
    helpers = router.rank(task, failed_episodes)       # Top-K distinct sibling ids, best first
    router.record_outcome(router.last_decision_id, {sibling_id: [True, False, ...]})

Registered routers (``ROUTERS``):

* ``random`` — a seeded random order (the "random helpers" ablation);
* ``fixed_mixture`` — K draws without replacement from fixed weights (the "fixed harness
  mixture" baseline; uniform unless ``mixture_weights`` is set);
* ``validation_topk`` — the same K for every task: best validation rescue rate (success on the
  validation tasks H0 failed) or success rate; the Harness-S release's validation rule;
* ``features`` — a per-sibling logistic success model over interpretable features of H0's
  failed attempts (``features.py``), fitted on validation pairs;
* ``llm_vote`` — M OpenAI-compatible voters rank the candidates given the task, a summary of
  H0's failures, the behaviour profiles and validation rates; JSON rankings (repaired once or
  rejected) are fused by Borda count or reciprocal-rank fusion; falls back to ``features`` when
  every voter fails;
* ``hybrid`` — ``features`` first; the voters only order the candidates the features cannot
  separate (predicted probabilities within ``hybrid.margin`` of the K-th).

Rescue ranks siblings other than H0; ``include_base=True`` ranks H0 too (Rank-1 routing at
inference, where ``failed_episodes`` is empty and the models are fitted on every validation
task instead of H0's failures). Ties everywhere go to the better validation rate, then the
cheaper harness, then the smaller id.

Every decision is logged (task, inputs hash, features, each vote, the final Top-K, later the
outcome) in memory (the last ``log.max_decisions``, checkpointed with ``state_dict``) and, when
``log.path`` is set, appended to a JSONL file. ``reanchor`` refreshes validation statistics,
behaviour profiles and the fitted models from new validation results with the current policy.
"""
from __future__ import annotations

import concurrent.futures
import json
import logging
import math
import os
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from harness_jax.config_problems import ConfigValidationError, Problem
from harness_jax.envs.base import content_hash
from harness_jax.harness.traces import render_trace
from harness_jax.harness_s.config import (RouterConfig, VoterSpec, router_config_dict,
                                          router_config_problems)
from harness_jax.harness_s.features import (SuccessModel, as_trajectory, episode_features,
                                            task_features, task_text)
from harness_jax.harness_s.pool import SiblingPool, results_from_trajectories, success_rate
from harness_jax.harness_s.profiles import (BehaviourProfile, LLMProfiler, pair_trajectories,
                                            summarise_offline)
from harness_jax.harness_s.rootcause import extract_root_cause
from harness_jax.harness_s.config import harness_s_problems
from harness_jax.harness_s.llm import make_client, structured_call
from harness_jax.harness_s.pool import load_pool

log = logging.getLogger(__name__)
STATE_VERSION = 1


# ------------------------------------------------------------------------------------ aggregation
def aggregate_rankings(rankings: Sequence[Sequence[str]], candidates: Sequence[str], *,
                       method: str = "borda", rrf_k: float = 60.0,
                       tiebreak: Optional[Mapping[str, tuple]] = None) -> list[tuple[str, float]]:
    """Fuses rankings (best first) into ``[(id, score)]`` best first.

    borda: a candidate at 0-based position p of a ranking gets ``n - p`` points (n = number of
    candidates); unranked candidates get 0. rrf: ``1 / (rrf_k + p + 1)``. Ids outside
    ``candidates`` are ignored; ties are broken by ``tiebreak[id]`` (smaller first), then id.
    """
    if method not in ("borda", "rrf"):
        raise ValueError(f"aggregation method must be 'borda' or 'rrf', got {method!r}")
    cands = list(dict.fromkeys(candidates))
    n = len(cands)
    score = {c: 0.0 for c in cands}
    for r in rankings:
        seen = set()
        pos = 0
        for c in r:
            if c not in score or c in seen:
                continue
            seen.add(c)
            score[c] += (n - pos) if method == "borda" else 1.0 / (rrf_k + pos + 1)
            pos += 1
    tb = tiebreak or {}
    return sorted(score.items(), key=lambda kv: (-kv[1], tb.get(kv[0], ()), kv[0]))


# ------------------------------------------------------------------------------------- the router
class Router:
    """Base class: statistics, decisions, state; subclasses implement ``_order``."""

    name = "base"

    def __init__(self, config: RouterConfig, pool: SiblingPool):
        self.config = config
        self.pool = pool
        self.base_id = pool.ids[0]
        self._candidates = [i for i in pool.ids if config.include_base or i != self.base_id]
        self.policy_version = str(pool.entries[0].policy_version)
        self.results: dict[str, dict] = {e.sibling_id: {k: list(v) for k, v in
                                                       e.validation.items()}
                                         for e in pool.entries}
        self.h0_failures: dict[str, list[dict]] = {k: list(v) for k, v in
                                                   pool.h0_failures.items()}
        self.profiles: dict[str, BehaviourProfile] = {
            k: BehaviourProfile.from_dict(v) for k, v in pool.profiles.items()}
        self.rng = np.random.Generator(np.random.PCG64(config.seed))
        self.decisions: list[dict] = []
        self.n_decisions = 0
        self.helper_stats: dict[str, dict] = {}
        self.reanchors: list[dict] = []
        self.models: dict[str, SuccessModel] = {}
        self._fit()

    # -- statistics --------------------------------------------------------------------------------
    @property
    def candidates(self) -> list[str]:
        return list(self._candidates)

    def h0_failed_tasks(self) -> list[str]:
        v = self.results.get(self.base_id, {})
        return [t for t, a in sorted(v.items())
                if any(x is not None for x in a) and not any(x is True for x in a)]

    def rescue_rate(self, sid: str) -> float:
        """Smoothed success rate on H0's failed validation tasks ((s + 1) / (n + 2))."""
        fails = set(self.h0_failed_tasks())
        vals = [x for t, a in self.results.get(sid, {}).items() if t in fails
                for x in a if x is not None]
        return (sum(vals) + 1.0) / (len(vals) + 2.0)

    def success_rate(self, sid: str) -> float:
        return success_rate(self.results.get(sid, {}))

    def metric(self, sid: str) -> float:
        """The validation rate that orders candidates (Rank-1 routing, which ranks H0 too,
        always uses the success rate: H0's rescue rate is 0 by definition)."""
        if self.config.metric == "rescue_rate" and not self.config.include_base:
            return self.rescue_rate(sid)
        return self.success_rate(sid)

    def tiebreak(self) -> dict[str, tuple]:
        costs = self.pool.costs()
        return {s: (-self.metric(s), costs.get(s, 0.0)) for s in self.pool.ids}

    def _fit(self) -> None:
        """Per-sibling success models on validation pairs (only the routers that use them)."""
        if self.name not in ("features", "llm_vote", "hybrid"):
            return
        info = self.pool.task_info
        if self.config.include_base:
            tasks = sorted({t for r in self.results.values() for t in r})
            rows = {t: task_features({"category": info.get(t, {}).get("category")}, [])
                    for t in tasks}
        else:
            tasks = self.h0_failed_tasks()
            rows = {t: task_features({"category": info.get(t, {}).get("category")},
                                     self.h0_failures.get(t, [])) for t in tasks}
        self.models = {}
        for sid in self.candidates:
            r = self.results.get(sid, {})
            xs, ys = [], []
            for t in tasks:
                att = [a for a in r.get(t, []) if a is not None]
                if att:
                    xs.append(rows[t])
                    ys.append(sum(att) / len(att))
            prior = (sum(ys) + 1.0) / (len(ys) + 2.0)
            self.models[sid] = SuccessModel.fit(xs, ys, l2=self.config.features_l2, prior=prior)

    def predict(self, feats: Mapping[str, float]) -> dict[str, float]:
        return {sid: self.models[sid].predict(feats) for sid in self.candidates}

    # -- ranking -----------------------------------------------------------------------------------
    def _order(self, task, failed: list, feats: dict, decision: dict) -> list[str]:
        raise NotImplementedError

    def rank(self, task, failed_episodes: Sequence[Any] = (), *, k: Optional[int] = None,
             step: Optional[int] = None) -> list[str]:
        """The Top-K distinct sibling ids for ``task``, best first (K = ``top_k`` unless
        ``k``). ``failed_episodes``: H0's failed attempts (trajectories, loop episodes or
        feature dicts); empty for Rank-1 routing before any rollout."""
        k = self.config.top_k if k is None else int(k)
        failed = [e for e in failed_episodes
                  if not getattr(as_trajectory(e), "infra_error", False)]
        feats = task_features(task, failed)
        task_id = str(task.get("task_id", "")) if isinstance(task, Mapping) else \
            str(getattr(task, "task_id", ""))
        decision = {"id": self.n_decisions, "step": step, "task_id": task_id,
                    "router": self.name, "policy_version": self.policy_version,
                    "inputs_hash": content_hash({"task": task_id, "features": feats,
                                                 "candidates": self.candidates,
                                                 "policy": self.policy_version}),
                    "features": {kk: round(v, 4) for kk, v in sorted(feats.items())},
                    "votes": [], "fallback": None, "outcome": None}
        order = self._order(task, failed, feats, decision)
        top = list(dict.fromkeys(order))[:max(0, k)]
        decision["top_k"] = top
        self.n_decisions += 1
        self.decisions.append(decision)
        if len(self.decisions) > self.config.max_decisions:
            del self.decisions[: len(self.decisions) - self.config.max_decisions]
        self._write_log({"decision": decision})
        return top

    def usage(self) -> dict:
        """LLM calls, cache hits, tokens and cost per voter (empty for routers without LLMs)."""
        return {}

    @property
    def last_decision_id(self) -> Optional[int]:
        return self.decisions[-1]["id"] if self.decisions else None

    def record_outcome(self, decision_id: int, outcomes: Mapping[str, Sequence[Optional[bool]]]
                       ) -> None:
        """The helpers' results for a logged decision (None entries = infrastructure errors)."""
        clean = {sid: [None if a is None else bool(a) for a in att]
                 for sid, att in outcomes.items()}
        for d in self.decisions:
            if d["id"] == decision_id:
                d["outcome"] = clean
        for sid, att in clean.items():
            st = self.helper_stats.setdefault(sid, {"calls": 0, "attempts": 0, "successes": 0})
            st["calls"] += 1
            st["attempts"] += sum(a is not None for a in att)
            st["successes"] += sum(a is True for a in att)
        self._write_log({"outcome": {"decision_id": decision_id, "results": clean}})

    def _write_log(self, record: dict) -> None:
        if not self.config.log_path:
            return
        os.makedirs(os.path.dirname(os.path.abspath(self.config.log_path)), exist_ok=True)
        with open(self.config.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")

    # -- re-anchoring ------------------------------------------------------------------------------
    def reanchor(self, results: Mapping[str, Mapping[str, Sequence[Optional[bool]]]], *,
                 policy_version: str, h0_failures: Optional[Mapping[str, Sequence]] = None,
                 pairs: Optional[Mapping[str, Sequence]] = None,
                 profiler: Optional[LLMProfiler] = None) -> dict:
        """New validation statistics with the current policy (see ``reanchor``)."""
        unknown = sorted(set(results) - set(self.pool.ids))
        if unknown:
            raise KeyError(f"reanchor: results for siblings not in the pool: {unknown}")
        before = {s: round(self.rescue_rate(s), 4) for s in self.candidates}
        for sid, r in results.items():
            self.results[sid] = {t: [None if a is None else bool(a) for a in att]
                                 for t, att in r.items()}
        if h0_failures is not None:
            self.h0_failures = {t: [f for f in (episode_features(e) for e in eps) if f]
                                for t, eps in h0_failures.items()}
        n_prof = 0
        for sid, prs in (pairs or {}).items():
            entry = self.pool.entry(sid)
            self.profiles[sid] = (profiler.summarise(sid, prs, policy_version,
                                                     description=entry.name)
                                  if profiler is not None else
                                  summarise_offline(sid, prs, policy_version))
            n_prof += 1
        self.policy_version = str(policy_version)
        self._fit()
        after = {s: round(self.rescue_rate(s), 4) for s in self.candidates}
        report = {"policy_version": self.policy_version, "refreshed": sorted(results),
                  "profiles": n_prof, "rescue_rate_before": before, "rescue_rate_after": after,
                  "h0_failed_tasks": len(self.h0_failed_tasks())}
        self.reanchors.append(report)
        self._write_log({"reanchor": report})
        return report

    # -- state -------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything a resumed run needs, as JSON-serialisable data."""
        return {"version": STATE_VERSION, "router": self.name,
                "pool_hash": self.pool.content_hash, "pool_ids": self.pool.ids,
                "policy_version": self.policy_version, "results": self.results,
                "h0_failures": self.h0_failures,
                "profiles": {k: v.to_dict() for k, v in self.profiles.items()},
                "models": {k: v.to_dict() for k, v in self.models.items()},
                "rng": self.rng.bit_generator.state, "decisions": self.decisions,
                "n_decisions": self.n_decisions, "helper_stats": self.helper_stats,
                "reanchors": self.reanchors}

    def load_state_dict(self, state: Mapping) -> None:
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"router state version {state.get('version')} is not "
                             f"{STATE_VERSION}; it was written by another harness_jax version")
        if state.get("router") != self.name:
            raise ValueError(f"router state is for {state.get('router')!r}, this router is "
                             f"{self.name!r}; resume with the same harness_s.router.name")
        if list(state.get("pool_ids") or []) != self.pool.ids:
            raise ValueError("router state was written for another sibling pool (its sibling "
                             "ids differ); resume with the pool file the run started with")
        self.policy_version = str(state["policy_version"])
        self.results = {k: {t: list(a) for t, a in v.items()} for k, v in state["results"].items()}
        self.h0_failures = {k: list(v) for k, v in state["h0_failures"].items()}
        self.profiles = {k: BehaviourProfile.from_dict(v) for k, v in state["profiles"].items()}
        self.models = {k: SuccessModel.from_dict(v) for k, v in state["models"].items()}
        self.rng.bit_generator.state = state["rng"]
        self.decisions = [dict(d) for d in state["decisions"]]
        self.n_decisions = int(state["n_decisions"])
        self.helper_stats = {k: dict(v) for k, v in state["helper_stats"].items()}
        self.reanchors = list(state["reanchors"])


    def adopt_statistics(self, state: Mapping) -> None:
        """Takes the validation statistics, H0's failure features and the behaviour profiles of
        another router's ``state_dict()`` over the same pool (e.g. a training run's re-anchored
        router, for Rank-1 routing of its final policy) and refits the models; the routing
        decisions, RNG and helper statistics stay this router's."""
        if list(state.get("pool_ids") or []) != self.pool.ids:
            raise ValueError("router state was written for another sibling pool; use the pool file "
                             "the training run used")
        self.policy_version = str(state["policy_version"])
        self.results = {k: {t: list(a) for t, a in v.items()} for k, v in state["results"].items()}
        self.h0_failures = {k: list(v) for k, v in state["h0_failures"].items()}
        self.profiles = {k: BehaviourProfile.from_dict(v) for k, v in state["profiles"].items()}
        self._fit()


class RandomRouter(Router):
    name = "random"

    def _order(self, task, failed, feats, decision):
        return [self.candidates[i] for i in self.rng.permutation(len(self.candidates))]


class FixedMixtureRouter(Router):
    name = "fixed_mixture"

    def __init__(self, config, pool):
        super().__init__(config, pool)
        w = {self.pool.resolve(k): v for k, v in config.mixture_weights}
        self.weights = {c: float(w.get(c, 0.0 if w else 1.0)) for c in self.candidates}

    def _order(self, task, failed, feats, decision):
        # weighted sampling without replacement (Gumbel top-k); weight 0 goes last
        cands = self.candidates
        g = self.rng.gumbel(size=len(cands))
        keys = [(math.log(self.weights[c]) + g[i]) if self.weights[c] > 0 else -math.inf
                for i, c in enumerate(cands)]
        return [cands[i] for i in sorted(range(len(cands)), key=lambda i: (-keys[i], cands[i]))]


class ValidationTopKRouter(Router):
    name = "validation_topk"

    def _order(self, task, failed, feats, decision):
        tb = self.tiebreak()
        decision["scores"] = {c: round(self.metric(c), 4) for c in self.candidates}
        return sorted(self.candidates, key=lambda c: (tb[c], c))


class FeaturesRouter(Router):
    name = "features"

    def feature_order(self, feats: dict, decision: dict) -> tuple[list[str], dict[str, float]]:
        p = self.predict(feats)
        tb = self.tiebreak()
        order = sorted(self.candidates, key=lambda c: (-p[c], tb[c], c))
        decision["scores"] = {c: round(p[c], 4) for c in order[:16]}
        decision["explain"] = {c: self.models[c].explain(feats) for c in order[:3]}
        return order, p

    def _order(self, task, failed, feats, decision):
        return self.feature_order(feats, decision)[0]


VOTE_SCHEMA = {"type": "object",
               "properties": {"ranking": {"type": "array", "items": {"type": "string"}},
                              "reason": {"type": "string"}},
               "required": ["ranking"]}


class LLMVoteRouter(FeaturesRouter):
    """M voters, each an OpenAI-compatible endpoint + model + temperature + seed."""

    name = "llm_vote"

    def __init__(self, config, pool, clients: Optional[Sequence] = None):
        super().__init__(config, pool)

        self.voters: list[VoterSpec] = list(config.voters)
        self.clients = list(clients) if clients is not None else [
            make_client(v.base_url, v.model, api_key_env=v.api_key_env or None,
                        cache_dir=config.cache_dir or None, timeout_s=config.vote_timeout_s,
                        max_retries=1) for v in self.voters]

    def usage(self) -> dict:
        return {v.name: c.usage_summary() for v, c in zip(self.voters, self.clients)}

    def failure_summary(self, failed: list) -> str:
        trajs = [t for t in (as_trajectory(e) for e in failed) if t is not None]
        if not trajs:
            return "(no H0 attempt yet)" if not failed else f"{len(failed)} failed attempts"
        causes = [extract_root_cause(t) for t in trajs]
        labels: dict[str, int] = {}
        for c in causes:
            if c is not None:
                labels[c.label] = labels.get(c.label, 0) + 1
        lines = [f"{len(trajs)} failed attempts under H0; root causes: "
                 + ", ".join(f"{k} x{v}" for k, v in sorted(labels.items(), key=lambda x: -x[1]))]
        ev = next((c.evidence for c in causes if c is not None and c.evidence), "")
        if ev:
            lines.append(f"evidence: {ev}")
        if self.config.excerpt_chars:
            lines.append(render_trace(trajs[0], 1)[: self.config.excerpt_chars])
        return "\n".join(lines)

    def candidate_lines(self, cands: Sequence[str]) -> str:
        out = []
        for c in cands:
            e = self.pool.entry(c)
            prof = self.profiles.get(c)
            out.append(json.dumps({
                "id": c, "name": e.name, "direction": e.direction or ("base harness H0" if
                                                                     c == self.base_id else ""),
                "validation_success": round(self.success_rate(c), 3),
                "rescue_rate_on_H0_failures": round(self.rescue_rate(c), 3),
                "profile": prof.brief() if prof else None}, ensure_ascii=False))
        return "\n".join(out)

    def messages(self, task, failed: list, cands: Sequence[str], k: int) -> list[dict]:
        return [
            {"role": "system", "content":
             "You route an agent task to helper harnesses. The same policy will retry the task "
             "under the harnesses you pick. Rank the candidate harnesses, best first, by how "
             "likely the policy is to SOLVE this task under each, using the task, why it failed "
             "under the base harness H0, the behaviour profiles and the validation rates. Reply "
             'with JSON only: {"ranking": [candidate ids, best first], "reason": str}. Rank at '
             f"least {k} distinct candidate ids, and only ids from the list."},
            {"role": "user", "content":
             f"Task ({getattr(task, 'category', None) or '-'}):\n{task_text(task)}\n\n"
             f"H0 failure summary:\n{self.failure_summary(failed)}\n\nCandidates (one JSON per "
             f"line):\n{self.candidate_lines(cands)}"}]

    def _vote_check(self, cands: Sequence[str], k: int):
        allowed = set(cands)

        def check(value):
            ranking = [str(x) for x in value.get("ranking") or []]
            unknown = [x for x in ranking if x not in allowed]
            if unknown:
                return None, [f"ranking contains ids that are not candidates: {unknown[:5]}; "
                              f"candidates: {sorted(allowed)}"]
            ranking = list(dict.fromkeys(ranking))
            need = min(k, len(cands))
            if len(ranking) < need:
                return None, [f"rank at least {need} distinct candidates, got {len(ranking)}"]
            return ranking, []
        return check

    def vote(self, task, failed: list, cands: Sequence[str], k: int) -> list[dict]:
        """One vote per voter (in parallel): ``{voter, ok, ranking, errors, cached}``."""
        msgs = self.messages(task, failed, cands, k)
        check = self._vote_check(cands, k)

        def one(i):
            v = self.voters[i]
            res = structured_call(self.clients[i], msgs, schema=VOTE_SCHEMA, check=check,
                                  role=f"voter:{v.name}", temperature=v.temperature, seed=v.seed,
                                  max_tokens=self.config.vote_max_tokens)
            return {"voter": v.name, "model": v.model, "ok": res.ok,
                    "ranking": res.value if res.ok else None, "errors": res.errors[:3],
                    "attempts": res.attempts, "cached": res.cached}

        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(self.voters))) as ex:
            return list(ex.map(one, range(len(self.voters))))

    def fused_order(self, task, failed, cands: Sequence[str], k: int, decision: dict
                    ) -> Optional[list[str]]:
        votes = self.vote(task, failed, cands, k)
        decision["votes"].extend(votes)
        good = [v["ranking"] for v in votes if v["ok"]]
        if not good:
            return None
        fused = aggregate_rankings(good, cands, method=self.config.aggregation,
                                   rrf_k=self.config.rrf_k, tiebreak=self.tiebreak())
        decision["vote_scores"] = {c: round(s, 4) for c, s in fused}
        return [c for c, _ in fused]

    def _order(self, task, failed, feats, decision):
        k = min(self.config.top_k, len(self.candidates))
        fused = self.fused_order(task, failed, self.candidates, k, decision)
        if fused is None:
            decision["fallback"] = "features: every voter failed"
            return self.feature_order(feats, decision)[0]
        return fused


class HybridRouter(LLMVoteRouter):
    """Features decide; votes break what the features cannot separate."""

    name = "hybrid"

    def _order(self, task, failed, feats, decision):
        order, p = self.feature_order(feats, decision)
        k = min(self.config.top_k, len(order))
        if k == 0 or k >= len(order):
            decision["votes_used"] = False
            return order
        kth = p[order[k - 1]]
        m = self.config.hybrid_margin
        fixed = [c for c in order if p[c] > kth + m]
        amb = [c for c in order if abs(p[c] - kth) <= m]
        if len(fixed) + len(amb) <= k:       # the boundary is clear: no vote needed
            decision["votes_used"] = False
            return order
        decision["votes_used"] = True
        decision["ambiguous"] = amb
        fused = self.fused_order(task, failed, amb, k - len(fixed), decision)
        if fused is None:
            decision["fallback"] = "features: every voter failed"
            return order
        rest = [c for c in order if c not in fixed and c not in amb]
        return fixed + fused + rest


ROUTERS: dict[str, type] = {}


def register_router(cls: type) -> type:
    ROUTERS[cls.name] = cls
    return cls


for _cls in (RandomRouter, FixedMixtureRouter, ValidationTopKRouter, FeaturesRouter,
             LLMVoteRouter, HybridRouter):
    register_router(_cls)


def find_router_problems(cfg: Any, *, pool: Optional[Sequence] = None,
                         pool_size: Optional[int] = None, path: str = "harness_s.router",
                         environ: Optional[Mapping[str, str]] = None) -> list[Problem]:
    """Every problem of a router config section, each with its dotted path, the bad value and
    the fix (``config_validation.Problem``); empty when fine. For the central validator.

    pool / pool_size: the pool the router will rank (H0 included), when known; environ: where
    the voters' key variables must be set (default ``os.environ``).
    """
    return router_config_problems(cfg, router_names=list(ROUTERS), pool=pool,
                                  pool_size=pool_size, path=path, environ=environ)


def find_harness_s_problems(config: Any, *, check_paths: bool = True,
                            environ: Optional[Mapping[str, str]] = None) -> list[Problem]:
    """Every problem of an experiment config's ``harness_s`` section (pool, rescue, router,
    selector, validation, re-anchoring, evolution, LLM endpoint); for the central validator."""
    return harness_s_problems(config, check_paths=check_paths, router_names=list(ROUTERS),
                              environ=environ)


def validate_router_config(cfg: Any, pool: Optional[Sequence] = None, *,
                           path: str = "harness_s.router",
                           environ: Optional[Mapping[str, str]] = None) -> RouterConfig:
    """Raises ``ConfigValidationError`` listing every problem; returns the parsed config."""
    if isinstance(cfg, RouterConfig):
        cfg = router_config_dict(cfg)
    problems = find_router_problems(cfg, pool=pool, path=path, environ=environ)
    if problems:
        raise ConfigValidationError(problems)
    return RouterConfig.from_config(cfg)


def make_router(config_router: Any, pool: Any, *, environ: Optional[Mapping[str, str]] = None,
                clients: Optional[Sequence] = None, path: str = "harness_s.router") -> Router:
    """The router named by ``config_router.name`` over ``pool`` (a ``SiblingPool`` or a pool
    file path). Bad configs raise ``ConfigValidationError`` naming the path and the fix.
    ``clients``: OpenAI-compatible clients replacing the voters' own (tests, shared clients)."""
    if isinstance(pool, (str, os.PathLike)):
        pool = load_pool(str(pool))
    if not isinstance(pool, SiblingPool):
        raise TypeError(f"make_router: pool must be a SiblingPool or a pool file path, got "
                        f"{type(pool).__name__} (harness_s.load_pool reads pool files)")
    rc = validate_router_config(config_router, pool, path=path, environ=environ)
    cls = ROUTERS[rc.name]
    if issubclass(cls, LLMVoteRouter):
        return cls(rc, pool, clients=clients)
    return cls(rc, pool)


def reanchor(router: Router, results: Mapping[str, Mapping[str, Sequence[Optional[bool]]]], *,
             policy_version: str, h0_failures: Optional[Mapping[str, Sequence]] = None,
             pairs: Optional[Mapping[str, Sequence]] = None,
             profiler: Optional[LLMProfiler] = None) -> dict:
    """Refreshes a router from new validation results with the current policy.

    results: ``{sibling_id: {task_id: [bool|None]}}`` (H0 and any siblings re-run);
    h0_failures: ``{task_id: [H0's failed trajectories or feature dicts]}``;
    pairs: ``{sibling_id: [PairedResult]}`` to rebuild behaviour profiles (offline summariser,
    or ``profiler``). Returns a report (rescue rates before/after, profiles rebuilt).
    """
    return router.reanchor(results, policy_version=policy_version, h0_failures=h0_failures,
                           pairs=pairs, profiler=profiler)


def reanchor_from_trajectories(router: Router, trajectories: Mapping[str, Sequence[Any]], *,
                               policy_version: str, profiler: Optional[LLMProfiler] = None,
                               excerpt_chars: int = 0) -> dict:
    """``reanchor`` from raw validation rollouts ``{sibling_id: [Trajectory]}`` (H0's included):
    computes the results, H0's failure features and the paired results itself."""
    base = router.base_id
    if base not in trajectories:
        raise KeyError(f"reanchor_from_trajectories: H0 ({base}) must be re-run too")
    results = {sid: results_from_trajectories(ts) for sid, ts in trajectories.items()}
    h0_fail: dict[str, list] = {}
    for t in trajectories[base]:
        if not t.infra_error and not t.success:
            h0_fail.setdefault(t.task_id, []).append(t)
    cats = {t: i.get("category") for t, i in router.pool.task_info.items()}
    pairs = {sid: pair_trajectories(trajectories[base], ts, cats, excerpt_chars)
             for sid, ts in trajectories.items() if sid != base}
    return router.reanchor(results, policy_version=policy_version, h0_failures=h0_fail,
                           pairs=pairs, profiler=profiler)
