"""Interpretable features of failed base-harness attempts and a per-sibling success model.

``failure_features(trajectory)`` turns one failed H0 episode into named features: its root-cause
family and error class, the failing tool, the final status, trajectory length, repeated calls,
format failures, error observations, whether it answered on the first turn, and the policy's
confidence (mean per-token probability of its sampled tokens). ``task_features(task, failed)``
averages them over a task's failed attempts (one-hot features become fractions) and adds the task
category. Names are readable (``cause=tool_error``), so a fitted model explains itself.

``SuccessModel`` is an L2-regularised logistic regression on such dicts, fitted by Newton's method
(numpy), one per sibling: P(sibling solves the task | features of H0's failures). Targets are
success fractions over the sibling's validation attempts. The intercept's prior is the sibling's
smoothed rescue rate, so with few pairs the model falls back to that rate. State is plain JSON.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from harness_jax.harness.trajectory import Trajectory
from harness_jax.harness_s.rootcause import episode_signals, extract_root_cause, mean_confidence

_TEXT_KEYS = ("instruction", "description", "add_description", "question", "q", "goal", "task",
              "problem_statement", "prompt")


def task_text(task: Any, max_chars: int = 1500) -> str:
    """A readable statement of a task (``Task.data``'s text fields, else its JSON)."""
    data = getattr(task, "data", task)
    if isinstance(data, Mapping):
        parts = [str(data[k]) for k in _TEXT_KEYS if isinstance(data.get(k), str) and data[k]]
        text = "\n".join(parts) if parts else json.dumps(data, ensure_ascii=False, default=str)
    else:
        text = str(data)
    return text[:max_chars]


def as_trajectory(ep: Any) -> Optional[Trajectory]:
    """A Trajectory from an executor trajectory or a loop episode (``.trajectory``)."""
    if isinstance(ep, Trajectory):
        return ep
    t = getattr(ep, "trajectory", None)
    return t if isinstance(t, Trajectory) else None


def failure_features(traj: Trajectory) -> dict[str, float]:
    """Named features of one failed episode (empty for successes and infra failures)."""
    cause = extract_root_cause(traj)
    if cause is None:
        return {}
    sig = cause.signals or episode_signals(traj)
    turns = max(1, int(sig.get("turns", 0)))
    feats = {f"cause={cause.family}": 1.0, f"status={traj.status}": 1.0,
             "turns": min(float(sig.get("turns", 0)), 50.0) / 10.0,
             "repeated_calls": min(float(sig.get("repeated_actions", 0)), 10.0) / 5.0,
             "format_failure_frac": float(sig.get("format_failures", 0)) / turns,
             "error_obs_frac": float(sig.get("error_observations", 0)) / turns,
             "answered_first_turn": 1.0 if sig.get("first_answer_turn") == 0 else 0.0,
             "confidence": mean_confidence(sig)}
    if ":" in cause.label:
        feats[f"error={cause.label.split(':', 1)[1]}"] = 1.0
    if sig.get("last_tool"):
        feats[f"tool={sig['last_tool']}"] = 1.0
    return feats


def episode_features(ep: Any) -> Optional[dict]:
    """Features of an item of ``failed_episodes``: a Trajectory, a loop Episode, or a dict of
    precomputed features (as stored in a pool file)."""
    if isinstance(ep, Mapping):
        return {str(k): float(v) for k, v in ep.items()}
    t = as_trajectory(ep)
    if t is None or t.infra_error or t.success:
        return None
    return failure_features(t)


def task_features(task: Any, failed_episodes: Iterable[Any] = ()) -> dict[str, float]:
    """Mean of the failures' features, plus ``category=<c>`` and ``n_failed`` (0 attempts:
    category only, e.g. Rank-1 routing before any rollout)."""
    rows = [f for f in (episode_features(e) for e in failed_episodes) if f is not None]
    out: dict[str, float] = {}
    for r in rows:
        for k, v in r.items():
            out[k] = out.get(k, 0.0) + v / len(rows)
    cat = getattr(task, "category", None)
    if cat is None and isinstance(task, Mapping):
        cat = task.get("category")
    if cat:
        out[f"category={cat}"] = 1.0
    out["has_failures"] = 1.0 if rows else 0.0
    return out


def _logit(p: float) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return math.log(p / (1 - p))


@dataclasses.dataclass
class SuccessModel:
    """Logistic regression over named features; ``predict`` returns a probability."""

    vocab: list[str] = dataclasses.field(default_factory=list)
    weights: list[float] = dataclasses.field(default_factory=list)
    bias: float = 0.0
    prior: float = 0.5
    n_train: int = 0

    def _x(self, rows: Sequence[Mapping[str, float]]) -> np.ndarray:
        idx = {k: i for i, k in enumerate(self.vocab)}
        x = np.zeros((len(rows), len(self.vocab)), np.float64)
        for r, row in enumerate(rows):
            for k, v in row.items():
                if k in idx:
                    x[r, idx[k]] = float(v)
        return x

    @classmethod
    def fit(cls, rows: Sequence[Mapping[str, float]], targets: Sequence[float], *,
            l2: float = 1.0, prior: Optional[float] = None, iters: int = 25) -> "SuccessModel":
        """Newton's method on the L2-penalised log-likelihood (the intercept is penalised
        towards ``logit(prior)``, the weights towards 0)."""
        y = np.clip(np.asarray(targets, np.float64), 0.0, 1.0)
        if prior is None:
            prior = (float(y.sum()) + 1.0) / (len(y) + 2.0)
        vocab = sorted({k for r in rows for k in r})
        m = cls(vocab=vocab, weights=[0.0] * len(vocab), bias=_logit(prior), prior=prior,
                n_train=len(rows))
        if not rows:
            return m
        x = np.concatenate([np.ones((len(rows), 1)), m._x(rows)], axis=1)
        w = np.zeros(x.shape[1])
        w[0] = m.bias
        w0 = w.copy()
        reg = np.full(x.shape[1], float(l2))
        for _ in range(iters):
            p = 1.0 / (1.0 + np.exp(-(x @ w)))
            grad = x.T @ (p - y) + reg * (w - w0)
            hess = (x * (p * (1 - p))[:, None]).T @ x + np.diag(reg + 1e-9)
            step = np.linalg.solve(hess, grad)
            w = w - step
            if float(np.max(np.abs(step))) < 1e-8:
                break
        m.bias, m.weights = float(w[0]), [float(v) for v in w[1:]]
        return m

    def logit(self, row: Mapping[str, float]) -> float:
        x = self._x([row])[0]
        return float(self.bias + x @ np.asarray(self.weights, np.float64)) if self.vocab else \
            float(self.bias)

    def predict(self, row: Mapping[str, float]) -> float:
        return 1.0 / (1.0 + math.exp(-self.logit(row)))

    def explain(self, row: Mapping[str, float], top: int = 3) -> list[tuple[str, float]]:
        """The features that moved this prediction most (name, contribution to the logit)."""
        w = dict(zip(self.vocab, self.weights))
        contrib = [(k, w[k] * v) for k, v in row.items() if k in w and v]
        return sorted(contrib, key=lambda kv: -abs(kv[1]))[:top]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> "SuccessModel":
        return cls(**dict(d))
