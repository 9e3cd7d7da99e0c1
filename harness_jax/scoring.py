"""Episode metrics shared by every environment, the harness store and the evaluation tables.

Definitions (see shared/notes/environments.md, section 6):

* success rate: mean of binary outcomes;
* score: mean of a real-valued reward (WebShop-style scores are this times 100);
* pass@k: the unbiased estimator of Chen et al. (2021): for ``n`` samples of one task with
  ``c`` successes, ``1 - C(n - c, k) / C(n, k)``, i.e. the chance that at least one of ``k``
  samples drawn without replacement succeeds; averaged over tasks;
* avg@k: the mean success over the (first) ``k`` samples of each task, an unbiased pass@1
  estimate, averaged over tasks;
* paired bootstrap: the mean per-task difference of two policies on the same tasks with its
  percentile bootstrap interval (``paired_bootstrap``);
* per-category accuracy: success rate within each category (DBBench ``type``, ALFWorld task
  type), and DBBench's ``overall_cat_accuracy`` = mean of the SELECT, INSERT and UPDATE
  accuracies, where SELECT pools every non-mutation category.

All functions are pure and take plain Python data (lists of bools/floats, dicts), so they can
be used on stored results without importing any environment.
"""
from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from typing import Hashable, Iterable, Mapping, Optional, Sequence

import numpy as np

MUTATION_CATEGORIES = ("INSERT", "UPDATE", "DELETE")


def success_rate(successes: Iterable) -> float:
    """Mean of binary outcomes (bools or 0/1); 0.0 for an empty input."""
    vals = list(successes)
    if not vals:
        return 0.0
    return sum(1.0 if bool(v) else 0.0 for v in vals) / len(vals)


def mean_score(scores: Iterable[float]) -> float:
    """Mean of real-valued rewards; 0.0 for an empty input."""
    vals = [float(v) for v in scores]
    if not vals:
        return 0.0
    return sum(vals) / len(vals)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task: ``1 - C(n-c, k) / C(n, k)``.

    ``n`` samples were drawn, ``c`` of them succeeded. Requires ``0 <= c <= n`` and
    ``1 <= k <= n``. Computed as a product to stay exact for large ``n``.
    """
    n, c, k = int(n), int(c), int(k)
    if n < 1:
        raise ValueError(f"pass_at_k: n={n} must be >= 1 (number of samples of the task)")
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: c={c} must be between 0 and n={n} (number of successes)")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: k={k} must be between 1 and n={n}; draw at least k samples "
                         "per task or lower k")
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
    prob_all_fail = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_fail *= 1.0 - k / i
    return 1.0 - prob_all_fail


def avg_at_k(successes: Sequence, k: Optional[int] = None) -> float:
    """Mean success over the first ``k`` samples of one task (all samples when ``k`` is None)."""
    vals = list(successes)
    if k is not None:
        if k < 1 or k > len(vals):
            raise ValueError(f"avg_at_k: k={k} must be between 1 and the number of samples "
                             f"({len(vals)})")
        vals = vals[:k]
    if not vals:
        raise ValueError("avg_at_k: no samples given")
    return success_rate(vals)


def group_by_task(records: Iterable[Mapping], key: str = "task_id",
                  success_key: str = "success") -> dict:
    """Groups episode records (dicts with ``task_id`` and ``success``) into task -> [success]."""
    out: dict = defaultdict(list)
    for i, rec in enumerate(records):
        if key not in rec:
            raise ValueError(f"group_by_task: record {i} has no field {key!r}")
        if success_key not in rec:
            raise ValueError(f"group_by_task: record {i} has no field {success_key!r}")
        out[rec[key]].append(bool(rec[success_key]))
    return dict(out)


def mean_pass_at_k(samples_by_task: Mapping[Hashable, Sequence], k: int) -> float:
    """pass@k averaged over tasks; ``samples_by_task`` maps task -> list of successes."""
    if not samples_by_task:
        return 0.0
    vals = []
    for task, samples in samples_by_task.items():
        samples = list(samples)
        if len(samples) < k:
            raise ValueError(f"mean_pass_at_k: task {task!r} has {len(samples)} samples, fewer "
                             f"than k={k}")
        vals.append(pass_at_k(len(samples), sum(bool(s) for s in samples), k))
    return sum(vals) / len(vals)


def mean_avg_at_k(samples_by_task: Mapping[Hashable, Sequence], k: Optional[int] = None) -> float:
    """avg@k averaged over tasks."""
    if not samples_by_task:
        return 0.0
    vals = [avg_at_k(s, k) for s in samples_by_task.values()]
    return sum(vals) / len(vals)


def per_category_accuracy(categories: Sequence, successes: Sequence) -> dict:
    """Success rate per category: ``{category: accuracy}`` (insertion order of first sight)."""
    categories, successes = list(categories), list(successes)
    if len(categories) != len(successes):
        raise ValueError(f"per_category_accuracy: {len(categories)} categories but "
                         f"{len(successes)} outcomes; pass one category per outcome")
    buckets: dict = {}
    for cat, ok in zip(categories, successes):
        buckets.setdefault(cat, []).append(ok)
    return {cat: success_rate(v) for cat, v in buckets.items()}


def dbbench_accuracies(categories: Sequence[str], successes: Sequence) -> dict:
    """AgentBench DB metrics: per-type accuracies, ``SELECT_accuracy`` (all non-mutation
    types pooled), and ``overall_cat_accuracy`` = mean of the SELECT, INSERT and UPDATE
    accuracies over the groups that are present (DELETE, when present, joins the mean too)."""
    per_type = per_category_accuracy(categories, successes)
    select_ok = [ok for cat, ok in zip(categories, successes) if cat not in MUTATION_CATEGORIES]
    groups = {}
    if select_ok:
        groups["SELECT"] = success_rate(select_ok)
    for cat in MUTATION_CATEGORIES:
        if cat in per_type:
            groups[cat] = per_type[cat]
    out = {f"{cat}_accuracy": acc for cat, acc in per_type.items()}
    if "SELECT" in groups:
        out["SELECT_accuracy"] = groups["SELECT"]
    out["overall_cat_accuracy"] = (sum(groups.values()) / len(groups)) if groups else 0.0
    return out


@dataclasses.dataclass
class EvalSummary:
    """One row of an evaluation table."""
    num_tasks: int
    num_episodes: int
    success_rate: float
    score: float
    pass_at: dict          # k -> pass@k
    avg_at: dict           # k -> avg@k
    per_category: dict     # category -> success rate (over episodes)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def summarize(records: Sequence[Mapping], ks: Sequence[int] = (1, 3)) -> EvalSummary:
    """Summarises episode records ``{"task_id", "success", "score"?, "category"?}``.

    pass@k/avg@k are reported for every ``k`` in ``ks`` that every task has enough samples for.
    """
    records = list(records)
    by_task = group_by_task(records)
    min_n = min((len(v) for v in by_task.values()), default=0)
    pass_at = {k: mean_pass_at_k(by_task, k) for k in ks if 1 <= k <= min_n}
    avg_at = {k: mean_avg_at_k(by_task, k) for k in ks if 1 <= k <= min_n}
    cats = [r.get("category") for r in records]
    per_cat = (per_category_accuracy(cats, [r["success"] for r in records])
               if any(c is not None for c in cats) else {})
    return EvalSummary(
        num_tasks=len(by_task), num_episodes=len(records),
        success_rate=success_rate(r["success"] for r in records),
        score=mean_score(float(r.get("score", float(bool(r["success"])))) for r in records),
        pass_at=pass_at, avg_at=avg_at, per_category=per_cat)


def tgc_sgc(task_success: Mapping[Hashable, bool],
            scenario_of: Mapping[Hashable, Hashable]) -> dict:
    """AppWorld-style task goal completion (TGC) and scenario goal completion (SGC, a scenario
    counts only if all of its tasks succeed)."""
    if not task_success:
        return {"tgc": 0.0, "sgc": 0.0}
    scen: dict = defaultdict(list)
    for t, ok in task_success.items():
        if t not in scenario_of:
            raise ValueError(f"tgc_sgc: task {t!r} has no scenario in scenario_of")
        scen[scenario_of[t]].append(bool(ok))
    return {"tgc": success_rate(task_success.values()),
            "sgc": success_rate(all(v) for v in scen.values())}


def binomial_stderr(p: float, n: int) -> float:
    """Standard error of a success rate estimated from ``n`` outcomes."""
    return math.sqrt(max(p * (1 - p), 0.0) / n) if n > 0 else 0.0


def paired_bootstrap(a: Sequence[float], b: Sequence[float], *, samples: int = 10_000, level: float = 0.95,
                     seed: int = 0) -> dict:
    """Mean of the paired differences ``a_i - b_i`` (one value per task, the same tasks in the
    same order) with its percentile bootstrap interval: tasks are resampled with replacement,
    ``samples`` times, and the interval is the ``(1 - level) / 2`` and ``(1 + level) / 2``
    quantiles of the resampled mean difference. ``significant`` says whether the interval
    excludes 0. Deterministic for a given ``seed``."""
    x, y = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"paired_bootstrap: a and b must be 1-D and of equal length (one value per "
                         f"task, paired), got shapes {x.shape} and {y.shape}")
    if x.size == 0:
        raise ValueError("paired_bootstrap: no tasks to compare")
    if not 0 < level < 1:
        raise ValueError(f"paired_bootstrap: level={level} must be in (0, 1)")
    d = x - y
    idx = np.random.default_rng(seed).integers(0, d.size, size=(int(samples), d.size))
    means = d[idx].mean(axis=1)
    lo, hi = (float(np.quantile(means, q)) for q in ((1 - level) / 2, (1 + level) / 2))
    return {"diff": float(d.mean()), "ci_low": lo, "ci_high": hi, "level": float(level),
            "n_tasks": int(d.size), "a": float(x.mean()), "b": float(y.mean()),
            "wins": int(np.sum(d > 0)), "losses": int(np.sum(d < 0)),
            "significant": bool(lo > 0 or hi < 0)}
