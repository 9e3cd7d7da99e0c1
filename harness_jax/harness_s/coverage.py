"""Joint validation coverage: which tasks a set of siblings solves together, and greedy selection.

Harness-S picks the next generation's parents (and the pool report ranks siblings) by the tasks
they solve *together*, not by individual score: a set-cover style choice. Exact maximum coverage
is NP-hard, so ``coverage_select`` is the classic greedy algorithm, which achieves at least
(1 - 1/e) of the optimum and is exact for k = 1.

Greedy rule, per step: the candidate with the largest number of newly covered tasks; ties go to
the cheaper harness (``costs``, default 0 for all), then to the one solving more tasks on its
own, then to the smaller id (so the result is deterministic). Once everything reachable is
covered, the remaining picks follow the same order (marginal gain 0).
"""
from __future__ import annotations

from typing import Hashable, Iterable, Mapping, Optional, Sequence


def joint_coverage(solved: Mapping[str, Iterable[Hashable]], ids: Iterable[str]) -> set:
    """The tasks solved by at least one of ``ids``."""
    out: set = set()
    for i in ids:
        out |= set(solved[i])
    return out


def coverage_select(solved: Mapping[str, Iterable[Hashable]], k: int,
                    costs: Optional[Mapping[str, float]] = None,
                    candidates: Optional[Sequence[str]] = None) -> list[str]:
    """Greedy maximum coverage: ``min(k, #candidates)`` distinct sibling ids, in pick order.

    solved: ``{sibling_id: set(task_id)}`` (tasks each sibling solves on validation).
    k: how many to pick (>= 0).
    costs: ``{sibling_id: cost}``; among equal marginal gains the cheaper harness wins.
    candidates: restrict the choice to these ids (default: every key of ``solved``).
    """
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        raise ValueError(f"coverage_select: k must be an integer >= 0, got {k!r}")
    pool = list(solved) if candidates is None else list(dict.fromkeys(candidates))
    missing = [c for c in pool if c not in solved]
    if missing:
        raise KeyError(f"coverage_select: candidates {missing} have no entry in solved")
    sets = {c: set(solved[c]) for c in pool}
    cost = {c: float((costs or {}).get(c, 0.0)) for c in pool}
    chosen: list[str] = []
    covered: set = set()
    remaining = sorted(pool)
    while remaining and len(chosen) < k:
        best = min(remaining, key=lambda c: (-len(sets[c] - covered), cost[c], -len(sets[c]), c))
        chosen.append(best)
        covered |= sets[best]
        remaining.remove(best)
    return chosen


def exclusive_tasks(solved: Mapping[str, Iterable[Hashable]]) -> dict[str, set]:
    """``{sibling_id: tasks only this sibling solves}``."""
    sets = {k: set(v) for k, v in solved.items()}
    out = {}
    for k, s in sets.items():
        others: set = set()
        for k2, s2 in sets.items():
            if k2 != k:
                others |= s2
        out[k] = s - others
    return out
