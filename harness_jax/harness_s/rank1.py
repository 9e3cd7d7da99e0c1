"""Rank-1 routing at inference: one harness per task from the whole pool (H0 included), chosen
before any rollout, against deploying H0 alone.

    python launch/evaluate.py --config=experiments/configs/harness_s/dbbench_cpu.py \
        --workdir=/tmp/hs/eval --checkpoint=/tmp/hs/run --routing=rank1 --k=3

``rank1_evaluate`` (library) and ``rank1_main`` (what the launcher runs):

* the router is ``make_router(harness_s.router with include_base=True, top_k=1, pool)``; when
  ``--checkpoint`` is a Harness-S training workdir, the router takes the statistics and
  profiles of that run's last checkpoint (its re-anchored view of the final policy), else the
  pool's own validation statistics;
* every task's harness is ``router.rank(task, [], k=1)[0]``, decided before any rollout;
* H0 (this config's base harness) runs ``k`` attempts per task; Rank-1 runs ``k`` attempts per
  task under its choice, reusing H0's attempts where the choice is H0 (same policy, same
  harness: a paired comparison, and no extra rollouts);
* the results JSON (schema ``harness-s-rank1-v1``, documented in docs/harness_s.md) has Pass@k /
  Avg@k / success under H0 and under Rank-1, their gaps (Rank-1 − H0), the share of tasks whose
  Rank-1 choice is H0, the choices per sibling and every task's choice and outcomes.
"""
from __future__ import annotations

import dataclasses
import json
import time
from typing import Optional, Sequence

from absl import logging

from harness_jax.config_problems import ConfigValidationError, Problem
from harness_jax.harness_s.pool import SiblingPool, load_pool
from harness_jax.harness_s.routers import Router, make_router
from harness_jax.harness_s.training import pool_version
from harness_jax.paths import resolve
from harness_jax.rl.checkpoint import restore_meta
from harness_jax.train import console as console_lib, evaluation, rollout, workdir as workdir_lib

FORMAT = "harness-s-rank1-v1"
GAP_KEYS_PREFIX = ("pass@", "avg@")


def rank1_evaluate(runner, tasks: Sequence, pool: SiblingPool, router: Router, h0, *, k: int,
                   temperature: float, console: console_lib.Console = console_lib.QUIET) -> dict:
    """Evaluates H0 and Rank-1 routing on ``tasks`` (``h0``: the deployment harness, a spec or
    Sibling); returns the ``harness-s-rank1-v1`` body (without run provenance)."""
    if k > 1 and temperature == 0:
        raise ValueError("rank1_evaluate: k > 1 attempts need temperature > 0")
    t0 = time.perf_counter()
    base = pool.ids[0]
    choices = {t.task_id: router.rank(t, [], k=1)[0] for t in tasks}     # before any rollout
    h0_per = evaluation.run_attempts(runner, tasks, h0, k=k, temperature=temperature, tag="rank1-h0",
                                     console=console)
    routed = [t for t in tasks if choices[t.task_id] != base]
    routed_per = evaluation.run_attempts(runner, routed, lambda t: pool.entry(choices[t.task_id]).sibling,
                                         k=k, temperature=temperature, tag="rank1-routed", console=console)
    by_task = dict(zip([t.task_id for t in routed], routed_per))
    r1_per = [by_task.get(t.task_id, eps) for t, eps in zip(tasks, h0_per)]
    h0_res = evaluation.summarize_attempts(tasks, h0_per, k)
    r1_res = evaluation.summarize_attempts(tasks, r1_per, k)
    gaps = {m: r1_res[m] - h0_res[m] for m in h0_res
            if m.startswith(GAP_KEYS_PREFIX) or m in ("success_rate", "score")}
    per_sibling: dict[str, dict] = {}
    per_task = []
    for t, h_eps, r_eps in zip(tasks, h0_per, r1_per):
        sid = choices[t.task_id]
        entry = pool.entry(sid)
        p = per_sibling.setdefault(sid, {"name": entry.name, "direction": entry.direction, "tasks": 0,
                                         "attempts": 0, "successes": 0})
        ok = [bool(e.success) for e in r_eps if not e.infra_error]
        p["tasks"] += 1
        p["attempts"] += len(ok)
        p["successes"] += sum(ok)
        per_task.append({"task_id": t.task_id, "category": t.category, "choice": sid,
                         "h0": [None if e.infra_error else bool(e.success) for e in h_eps],
                         "rank1": [None if e.infra_error else bool(e.success) for e in r_eps]})
    n = len(tasks)
    return {"format": FORMAT, "num_tasks": n, "k": int(k), "temperature": float(temperature),
            "h0": h0_res, "rank1": r1_res, "gap": gaps,
            "h0_rank1_share": sum(c == base for c in choices.values()) / n if n else 0.0,
            "choices": per_sibling, "per_task": per_task, "router": router.name,
            "router_policy_version": router.policy_version, "time_s": time.perf_counter() - t0}


def rank1_router(hs, pool: SiblingPool, checkpoint: str = "") -> Router:
    """The Rank-1 router: ``harness_s.router`` (``hs``: the resolved ``harness_s`` section) with
    ``include_base=True`` and ``top_k=1``, with the statistics of the training run's last
    checkpoint when ``checkpoint`` is one."""
    rc = dataclasses.replace(hs.router, include_base=True, top_k=1, log_path="")
    router = make_router(rc, pool)
    state = run_router_state(checkpoint) if checkpoint else None
    if state is not None:
        router.adopt_statistics(state)
        logging.info("rank1: router statistics of %s (policy version %s)", checkpoint, router.policy_version)
    return router


def run_router_state(path: str) -> Optional[dict]:
    """The Harness-S router state in the latest checkpoint of a training workdir (None if none)."""
    p = resolve(path)
    ckpt = p / "checkpoints"
    if not ckpt.exists():
        return None
    meta, _ = restore_meta(ckpt)
    ext = ((meta or {}).get("data_state") or {}).get("extensions") or {}
    if "harness_s" not in ext:
        return None
    return json.loads(ext["harness_s"])["router"]


def rank1_main(run, workdir, *, tasks: Sequence, checkpoint: str = "", k: int = 0, split: str = "selection",
               pool: str = "", out: str = "") -> dict:
    """``launch/evaluate.py --routing=rank1``: loads the policy and the pool, evaluates, writes the
    results JSON (``<workdir>/eval_<split>_rank1.json`` unless ``out``) and returns it. ``pool``:
    the pool file ('' = ``harness_s.pool``). ``run``:
    the resolved ``train.spec.RunSpec`` (the entry point resolves the config)."""
    hs = run.method("harness_s")
    if hs is None:
        raise ConfigValidationError([Problem(
            "harness_s", None, "--routing=rank1 needs a Harness-S config (its pool and router)",
            "use a config from experiments/configs/harness_s/")])
    path = pool or hs.pool
    if not path:
        raise ConfigValidationError([Problem(
            "harness_s.pool", path, "Rank-1 routing needs a sibling pool",
            "pass --pool=<pool-<hash>.json> or --config.harness_s.pool=...")])
    siblings = load_pool(path)
    k = int(k or run.loop.eval.k)
    temperature = evaluation.eval_temperature(run.loop.eval, k)
    router = rank1_router(hs, siblings, checkpoint)
    pr = evaluation.policy_runner(run, workdir, checkpoint=checkpoint, pool_version=pool_version(siblings))
    try:
        res = rank1_evaluate(pr.runner, tasks, siblings, router, rollout.base_harness(run), k=k,
                             temperature=temperature, console=console_lib.Console(run.loop.log.progress_bar))
    finally:
        pr.close()
    res.update(split=split, policy=pr.policy, env=run.env.name, config_name=run.name,
               pool={"path": siblings.path, "content_hash": siblings.content_hash, "siblings": len(siblings)})
    dest = resolve(out) if out else pr.paths.root / f"eval_{split}_rank1.json"
    workdir_lib.write_json(dest, res)
    km = f"avg@{k}"
    logging.info("rank1 on %d %s tasks: H0 %s %.3f, Rank-1 %.3f (gap %+.3f); H0 is Rank-1 on %.0f%% of tasks; wrote %s",
                 len(tasks), split, km, res["h0"].get(km, 0.0), res["rank1"].get(km, 0.0), res["gap"].get(km, 0.0),
                 100 * res["h0_rank1_share"], dest)
    return res


def load_results(path: str) -> dict:
    """Reads a ``harness-s-rank1-v1`` results file (for tables), refusing other formats."""
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    if d.get("format") != FORMAT:
        raise ValueError(f"{path}: format {d.get('format')!r}, expected {FORMAT!r} (launch/evaluate.py --routing=rank1)")
    return d


def table_row(res: dict, metric: str = "") -> dict:
    """One table row of a results file: H0, Rank-1 and the gap on ``metric`` (default avg@k)."""
    metric = metric or f"avg@{res['k']}"
    return {"env": res.get("env"), "split": res.get("split"), "policy": res.get("policy"), "metric": metric,
            "h0": res["h0"][metric], "rank1": res["rank1"][metric], "gap": res["gap"][metric],
            "h0_rank1_share": res["h0_rank1_share"], "tasks": res["num_tasks"]}
