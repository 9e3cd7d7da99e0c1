"""What a person watching a run reads: library logs held back, one line per event, progress
bars, a PNG.

* ``Console(progress, echo)``: the run's console. ``line(text)`` logs one line (absl INFO) and,
  with ``echo``, also writes it to stderr above the progress bars (``launch/engineer.py``, whose
  absl output is quiet); ``bar(total, desc)`` is one progress bar (``telemetry.Progress``,
  ``log.progress_bar``). Every phase of every run (the loop, SFT, evaluation, re-anchoring,
  evolution, the Harness-R1 stages) writes through one.
* ``setup_logging(level)``: log records from outside ``harness_jax`` (Orbax, JAX, absl's own,
  grain, ...) below ``level`` are dropped (``log.library_level``, WARNING by default); the
  project's own INFO lines stay. ``"INFO"`` (or ``"DEBUG"``) shows everything again.
* ``step_line(step, total, metrics)``: one summary line per step: reward, success,
  zero-variance fraction, the learner's KL to the reference (the policy RL started from),
  entropy, clip fraction and update-to-weight RMS ratio (pooled over the step's mini-batches;
  or "no signal" when the batch made no optimizer step), rescue trigger/success rates (when
  rescue runs), the latest held-out evaluation, step time.
* ``plot_progress(workdir)``: ``<workdir>/progress.png`` from ``metrics.jsonl``: training
  success, held-out H0 success (Avg@k / success of each evaluation), zero-variance fraction
  before/after rescue, rescue trigger and success rates, over steps (matplotlib, Agg).

Progress bars (``telemetry.Progress``, one per phase: SFT, GRPO steps, evaluation, re-anchoring,
evolution) follow ``log.progress_bar``.
"""
from __future__ import annotations

import logging as pylogging
import os
import sys
from typing import Optional

from absl import logging as absl_logging

from harness_jax.rl.metrics import read_jsonl
from harness_jax.train import telemetry

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class _LibraryFilter(pylogging.Filter):
    """Drops records below ``level`` unless they come from harness_jax (or the launchers)."""

    def __init__(self, level: int):
        super().__init__()
        self.level = level

    def filter(self, record: pylogging.LogRecord) -> bool:
        if record.levelno >= self.level:
            return True
        path = record.pathname or ""
        return path.startswith(_PACKAGE_DIR) or f"{os.sep}launch{os.sep}" in path


_installed: Optional[_LibraryFilter] = None


class Console:
    """One line per event and progress bars (module docstring). ``progress``: ``"auto"`` (bars
    only on a TTY), ``"on"``, ``"off"``; ``echo``: lines also go to ``stream`` (default stderr)."""

    def __init__(self, progress: str = "auto", *, echo: bool = False, stream=None):
        self.progress = progress
        self.echo = echo
        self.stream = stream

    def line(self, text: str) -> None:
        absl_logging.info("%s", text)
        if self.echo:
            from tqdm import tqdm

            tqdm.write(text, file=self.stream or sys.stderr)

    def bar(self, total: int, desc: str, initial: int = 0) -> telemetry.Progress:
        return telemetry.Progress(total, initial, self.progress, desc=desc)


QUIET = Console("off")                    # library calls that have no console of their own


def setup_logging(level: str = "WARNING") -> None:
    """Holds library log records below ``level`` back (idempotent; the last call wins)."""
    global _installed
    lvl = pylogging.getLevelName(str(level).upper())
    if not isinstance(lvl, int):
        raise ValueError(f"log level {level!r}; use one of {', '.join(LEVELS)}")
    handlers = [absl_logging.get_absl_handler()]
    handlers += pylogging.getLogger().handlers
    for h in handlers:
        if _installed is not None:
            h.removeFilter(_installed)
    _installed = _LibraryFilter(lvl)
    for h in handlers:
        h.addFilter(_installed)


def step_line(step: int, total: int, m: dict, last_eval: Optional[dict] = None) -> str:
    """One readable line for a finished GRPO step."""
    parts = [f"step {step}/{total}",
             f"reward {m.get('rollout/reward_mean', 0.0):.3f}",
             f"success {m.get('rollout/success_rate', 0.0):.3f}",
             f"zero-var {m.get('groups/zero_variance_fraction', 0.0):.2f}"]
    if m.get("learner/skipped_no_signal"):
        parts.append("no signal: no optimizer step")
    elif "learner/loss" in m:
        learn = [f"KL(ref) {m['learner/kl_to_ref']:.2e}" if "learner/kl_to_ref" in m else "",
                 f"entropy {m['learner/entropy']:.3f}" if "learner/entropy" in m else "",
                 f"clip {m.get('learner/pg_clipfrac_low', 0.0) + m.get('learner/pg_clipfrac_high', 0.0):.3f}",
                 f"upd/w {m.get('learner/update_ratio', 0.0):.1e}"]
        parts.append(" ".join(x for x in learn if x))
    if "rescue/trigger_rate" in m:
        parts.append(f"rescue {m['rescue/trigger_rate']:.2f} (rescued {m.get('rescue/success_rate', 0.0):.2f}, "
                     f"zero-var before {m.get('rescue/zero_variance_before', 0.0):.2f})")
    if last_eval:
        keys = [k for k in last_eval if k.startswith("avg@")]
        k = max(keys, key=lambda x: int(x.split("@")[1])) if keys else "success_rate"
        parts.append(f"held-out {k} {float(last_eval.get(k, 0.0)):.3f} ({last_eval.get('tag')}@{last_eval.get('step')})")
    parts.append(f"{m.get('time/step_s', 0.0):.1f}s")
    return " | ".join(parts)


def eval_line(tag: str, step: int, res: dict) -> str:
    """One line for an evaluation: success and every pass@k / avg@k."""
    at = {k: round(float(v), 4) for k, v in res.items() if k.startswith(("pass@", "avg@"))}
    return f"eval[{tag}] step {step}: success {float(res.get('success_rate', 0.0)):.3f} {at}"


def series(rows, key) -> tuple[list, list]:
    """``(steps, values)`` of ``key`` over the rows of ``metrics.jsonl`` that have it."""
    pts = [(r["step"], r[key]) for r in rows if key in r]
    return [p[0] for p in pts], [p[1] for p in pts]


def plot_progress(workdir: str, out: str = "") -> Optional[str]:
    """Writes ``<workdir>/progress.png`` (or ``out``); None when there are no step metrics yet."""
    rows = [r for r in read_jsonl(os.path.join(workdir, "metrics.jsonl")) if "step" in r]
    if not any("rollout/success_rate" in r for r in rows):
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    ax = axes[0]
    ax.plot(*series(rows, "rollout/success_rate"), marker=".", label="training rollouts (first attempts: H0)")
    ev_keys = sorted({k for r in rows for k in r if k.startswith("eval/avg@")})
    for k in ev_keys or ["eval/success_rate"]:
        xs, ys = series(rows, k)
        if xs:
            ax.plot(xs, ys, marker="o", label=f"held-out H0 {k.split('/', 1)[1]}")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("success")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("success")
    ax.legend(fontsize=8)
    ax = axes[1]
    for key, lab, style in (("groups/zero_variance_fraction", "zero-variance fraction (trained groups)", "-o"),
                            ("rescue/zero_variance_before", "zero-variance before rescue", "--s"),
                            ("rescue/trigger_rate", "rescue trigger rate", ":^"),
                            ("rescue/success_rate", "rescue success rate", "-.v")):
        xs, ys = series(rows, key)
        if xs:                            # distinct styles: equal curves stay visible on top of each other
            ax.plot(xs, ys, style, markersize=5, fillstyle="none", label=lab)
    ax.set_xlabel("GRPO step")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("GRPO signal and rescue")
    ax.legend(fontsize=8)
    return save_figure(fig, out or os.path.join(workdir, "progress.png"))


def save_figure(fig, out: str, dpi: int = 110) -> str:
    """Writes a matplotlib figure atomically (a temporary file renamed into place) and closes it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    tmp = out + ".tmp.png"
    fig.savefig(tmp, dpi=dpi)
    plt.close(fig)
    os.replace(tmp, out)
    return out
