"""Scalar metrics to a JSONL file and TensorBoard event files (tensorboardX): the one writer of
the project (learner tests, SFT, the training loop).

One writer per run directory, active on process 0 only (other processes get a no-op writer so
multi-host loops can call it unconditionally). Layout: ``<logdir>/metrics.jsonl`` (one JSON object
per ``write``: ``step``, ``time`` and the scalars) and ``<logdir>/tb/`` (TensorBoard). Names are
written as given (callers prefix them by phase: ``learner/``, ``rollout/``, ``sft/`` ...).
Non-finite values are written to JSONL as ``null`` and skipped in TensorBoard; non-numeric values
go to JSONL only (strings). ``logdir`` may be a URI (``gs://...``, through etils ``epath``); object
stores cannot append, so there the JSONL file is rewritten whole at every write.
"""
from __future__ import annotations

import json
import math
import time
from typing import Any, Mapping, Optional

from etils import epath

from harness_jax.paths import is_local


def _num(v) -> Optional[float]:
    if isinstance(v, (str, bytes)):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


class MetricsWriter:
    def __init__(self, logdir, *, tensorboard: bool = True, active: Optional[bool] = None):
        if active is None:
            import jax
            active = jax.process_index() == 0
        self.active = active
        self.logdir = epath.Path(logdir)
        self.path = self.logdir / "metrics.jsonl"
        self._tb = None
        self._f = None
        self._lines: Optional[list[str]] = None      # object stores: the whole file, rewritten
        if not active:
            return
        self.logdir.mkdir(parents=True, exist_ok=True)
        if is_local(self.logdir):
            self._f = open(str(self.path), "a", buffering=1)
        else:
            self._lines = self.path.read_text().splitlines() if self.path.exists() else []
        if tensorboard:
            from tensorboardX import SummaryWriter
            self._tb = SummaryWriter(logdir=str(self.logdir / "tb"), flush_secs=10)

    def write(self, step: int, scalars: Mapping[str, Any], prefix: str = "") -> None:
        if not self.active:
            return
        rec: dict = {"step": int(step), "time": time.time()}
        for k, v in scalars.items():
            name = prefix + k
            f = _num(v)
            if f is None:
                rec[name] = v if isinstance(v, (str, bool, type(None))) else str(v)
                continue
            finite = math.isfinite(f)
            rec[name] = f if finite else None
            if self._tb is not None and finite:
                self._tb.add_scalar(name, f, int(step))
        line = json.dumps(rec)
        if self._f is not None:
            self._f.write(line + "\n")
        else:
            self._lines.append(line)
            self.path.write_text("\n".join(self._lines) + "\n")

    def flush(self):
        if self._tb is not None:
            self._tb.flush()
        if self._f is not None:
            self._f.flush()

    def close(self):
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._f is not None:
            self._f.close()
            self._f = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_jsonl(path) -> list[dict]:
    """The records of a ``metrics.jsonl`` (path or URI); [] when it does not exist. A line that is
    not JSON (the torn last line of a run killed mid-write, or one still writing) is skipped."""
    p = epath.Path(path)
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def flatten(d: dict, prefix: str = "") -> dict:
    """A nested dict as one level with ``/``-joined keys (``{"a": {"b": 1}}`` -> ``{"a/b": 1}``)."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "/"))
        else:
            out[key] = v
    return out
