"""Append-only on-disk store of complete episode traces, with an index and metrics.

Layout under ``root``: ``traces.jsonl`` (one full ``Trajectory`` JSON per line, never rewritten)
and ``index.jsonl`` (one small record per episode: ids, outcome, byte offset of its trace).
Appends take an exclusive ``flock`` so several processes can share one store. Full traces are
kept on purpose: Meta-Harness found full traces beat summaries for proposing harness edits.

Metrics come from the index: success rate, unbiased pass@k and avg@k (``harness_jax.scoring``),
excluding infrastructure failures, which are not task outcomes.
"""
from __future__ import annotations

import fcntl
import json
import os
from typing import Any, Iterator, Optional, Sequence

from harness_jax.harness.trajectory import Trajectory
from harness_jax.scoring import summarize

INDEX_FIELDS = ("episode_id", "run_id", "task_id", "env_name", "harness_id", "overlay_id",
                "group_id", "policy_version", "success", "reward", "status", "infra_error",
                "created_at")


class TrajectoryStore:
    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        self.traces_path = os.path.join(self.root, "traces.jsonl")
        self.index_path = os.path.join(self.root, "index.jsonl")
        self.lock_path = os.path.join(self.root, ".lock")

    def append(self, traj: Trajectory) -> dict:
        """Appends one trajectory; returns its index record."""
        if not isinstance(traj, Trajectory):
            raise TypeError(f"TrajectoryStore.append takes a Trajectory, got {type(traj).__name__}")
        line = (json.dumps(traj.to_dict(), ensure_ascii=False, default=str) + "\n").encode("utf-8")
        rec = {k: getattr(traj, k) for k in INDEX_FIELDS}
        rec["category"] = traj.meta.get("category")
        rec["score"] = float(traj.evaluation.get("score", traj.reward or 0.0)) \
            if traj.evaluation else float(traj.reward or 0.0)
        rec["num_turns"] = len(traj.turns)
        with open(self.lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                with open(self.traces_path, "ab") as f:
                    f.seek(0, os.SEEK_END)
                    rec["offset"] = f.tell()
                    rec["length"] = len(line)
                    f.write(line)
                with open(self.index_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        return rec

    def index(self, run_id: Optional[str] = None, task_id: Optional[str] = None,
              harness_id: Optional[str] = None, policy_version: Optional[int] = None,
              include_infra: bool = True) -> list[dict]:
        """Index records matching every given filter (in append order)."""
        if not os.path.exists(self.index_path):
            return []
        out = []
        with open(self.index_path, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                rec = json.loads(line)
                if run_id is not None and rec.get("run_id") != run_id:
                    continue
                if task_id is not None and rec.get("task_id") != task_id:
                    continue
                if harness_id is not None and rec.get("harness_id") != harness_id:
                    continue
                if policy_version is not None and rec.get("policy_version") != policy_version:
                    continue
                if not include_infra and rec.get("infra_error"):
                    continue
                out.append(rec)
        return out

    def _read_at(self, rec: dict) -> Trajectory:
        with open(self.traces_path, "rb") as f:
            f.seek(rec["offset"])
            data = f.read(rec["length"])
        return Trajectory.from_dict(json.loads(data))

    def get(self, episode_id: str) -> Trajectory:
        """The full trace of one episode (the last one stored under that id)."""
        recs = [r for r in self.index() if r["episode_id"] == episode_id]
        if not recs:
            raise KeyError(f"no episode {episode_id!r} in {self.root}; list them with "
                           "`python -m harness_jax.harness.cli list --store ...`")
        return self._read_at(recs[-1])

    def trajectories(self, **filters) -> Iterator[Trajectory]:
        for rec in self.index(**filters):
            yield self._read_at(rec)

    def metrics(self, ks: Sequence[int] = (1, 3), **filters) -> dict[str, Any]:
        """Success rate, pass@k and avg@k over stored episodes (infrastructure failures excluded)."""
        recs = self.index(include_infra=True, **filters)
        n_infra = sum(1 for r in recs if r.get("infra_error"))
        good = [{"task_id": r["task_id"], "success": bool(r.get("success")),
                 "score": r.get("score", 0.0), "category": r.get("category")}
                for r in recs if not r.get("infra_error")]
        summary = summarize(good, ks=ks).as_dict()
        summary["infra_errors"] = n_infra
        return summary


def episode_diff(a: Trajectory, b: Trajectory) -> list[str]:
    """A readable turn-by-turn comparison of two episodes (e.g. H0 vs a sibling on one task)."""
    lines = [f"A {a.episode_id} harness={a.harness_id} overlay={a.overlay_id or '-'} "
             f"success={a.success} turns={len(a.turns)} status={a.status}",
             f"B {b.episode_id} harness={b.harness_id} overlay={b.overlay_id or '-'} "
             f"success={b.success} turns={len(b.turns)} status={b.status}"]
    for i in range(max(len(a.turns), len(b.turns))):
        ta = a.turns[i] if i < len(a.turns) else None
        tb = b.turns[i] if i < len(b.turns) else None
        act_a = json.dumps(ta.action, ensure_ascii=False)[:160] if ta else "<none>"
        act_b = json.dumps(tb.action, ensure_ascii=False)[:160] if tb else "<none>"
        mark = "=" if act_a == act_b else "≠"
        lines.append(f"turn {i} {mark}\n  A: {act_a}\n  B: {act_b}")
        ia = [x["source"] for x in ta.interventions] if ta else []
        ib = [x["source"] for x in tb.interventions] if tb else []
        if ia or ib:
            lines.append(f"  hooks A: {ia}  B: {ib}")
    return lines
