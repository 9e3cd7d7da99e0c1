"""Scalar metrics to TensorBoard event files (tensorboardX) and a JSONL file.

One writer per run directory, active on process 0 only (other processes get a no-op writer so
multi-host loops can call it unconditionally). Names are written as given; callers prefix them
by phase (``learner/``, ``rollout/``, ``sampler_trainer/`` ...). Non-finite and non-numeric
values are skipped in TensorBoard and written to JSONL as ``null`` / strings.
"""
from __future__ import annotations

import json
import math
import os
import time
from typing import Any, Mapping, Optional


def _num(v) -> Optional[float]:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f


class MetricsWriter:
    def __init__(self, logdir: str, *, tensorboard: bool = True, jsonl_name: str = "metrics.jsonl",
                 active: Optional[bool] = None):
        if active is None:
            import jax
            active = jax.process_index() == 0
        self.active = active
        self.logdir = logdir
        self._tb = None
        self._f = None
        if not active:
            return
        os.makedirs(logdir, exist_ok=True)
        self._f = open(os.path.join(logdir, jsonl_name), "a", buffering=1)
        if tensorboard:
            from tensorboardX import SummaryWriter
            self._tb = SummaryWriter(logdir=logdir, flush_secs=10)

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
        self._f.write(json.dumps(rec) + "\n")

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


def read_jsonl(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
