"""The on-disk layout of a sweep, and the reader a tables/plots module uses.

::

    ROOT/                              --workdir of launch/sweep.py
      sweep.json                       the expansion: sweep name, config, launcher, backend, the runs
                                       (name, index, overrides, flags), code version at expansion
      .sweep.lock                      held (flock) by the one driver working on ROOT
      <run name>/                      the run's own --workdir: the launcher writes here
        checkpoints/ metrics.jsonl summary.json tb/ traces/ ...   (launcher outputs)
        sweep/                         written by the sweep driver only
          spec.json                    sweep name, run name, index, overrides, the exact argv
          config.json                  the resolved config the launcher parses (get_config() + overrides)
          status.json                  state, exit_code, attempts [...], log_tail, updated
          log.txt                      stdout+stderr of every attempt, each under a header line
          job_spec.json                cluster backends: the job as submitted (Ray)

Run states: ``pending`` (never started), ``running`` (started; a local pid or a cluster job id
is recorded), ``done`` (the launcher exited 0 and did not report itself preempted),
``interrupted`` (stopped before the end: by the driver, by preemption, or the driver died; the
next ``launch/sweep.py`` resumes it in the same workdir), ``failed`` (non-zero exit; its log tail
is in status.json and on the console). A launcher that stops early on SIGTERM says so with
``"preempted": true`` in ``<workdir>/summary.json`` (``launch/train.py`` does).

Every attempt records the code it ran: ``{"commit", "dirty", "branch", "diff_sha256"}`` from
git (``dirty``: tracked changes or untracked files; ``diff_sha256`` tells two dirty trees apart).
"""
from __future__ import annotations

import dataclasses
import json
import os
import socket
import tempfile
import time
from typing import Any, Optional

from harness_jax import provenance
from harness_jax.rl.metrics import read_jsonl

SWEEP_JSON = "sweep.json"
LOCK = ".sweep.lock"
META = "sweep"
STATES = ("pending", "running", "done", "interrupted", "failed")
LOG_TAIL_LINES = 40


def write_json(path: str, obj: Any) -> None:
    """Atomic write (temporary file + rename): a reader never sees half a file."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1, sort_keys=False, default=str)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_json(path: str, default: Any = None) -> Any:
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)


@dataclasses.dataclass(frozen=True)
class RunDir:
    """One run's workdir and the sweep driver's files inside it."""
    path: str

    @property
    def name(self) -> str:
        return os.path.basename(os.path.normpath(self.path))

    @property
    def meta(self) -> str:
        return os.path.join(self.path, META)

    def file(self, name: str) -> str:
        return os.path.join(self.meta, name)

    @property
    def log_path(self) -> str:
        return self.file("log.txt")

    def spec(self) -> Optional[dict]:
        return read_json(self.file("spec.json"))

    def config(self) -> Optional[dict]:
        return read_json(self.file("config.json"))

    def status(self) -> dict:
        return read_json(self.file("status.json"), default={"state": "pending", "attempts": []})

    def write_status(self, status: dict) -> None:
        status = dict(status, updated=time.time())
        if status.get("state") not in STATES:
            raise ValueError(f"run status state={status.get('state')!r}: expected one of {STATES}")
        write_json(self.file("status.json"), status)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return tail(self.log_path, lines)

    def metrics(self) -> list[dict]:
        """The launcher's ``metrics.jsonl`` records (a torn last line, from a run still writing or
        killed mid-write, is skipped)."""
        return read_jsonl(os.path.join(self.path, "metrics.jsonl"))

    def summary(self) -> Optional[dict]:
        """The launcher's ``summary.json`` when it wrote one."""
        try:
            return read_json(os.path.join(self.path, "summary.json"))
        except (OSError, json.JSONDecodeError):
            return None


def tail(path: str, lines: int = LOG_TAIL_LINES, max_bytes: int = 64 * 1024) -> str:
    if not os.path.exists(path):
        return ""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - max_bytes))
        data = f.read().decode("utf-8", errors="replace")
    return "\n".join(data.splitlines()[-lines:])


# ------------------------------------------------------------------------------ code version
code_version = provenance.code_version


def host() -> str:
    return socket.gethostname()


# ------------------------------------------------------------------------------ reading a sweep
def load_sweep(root: str) -> dict:
    """``sweep.json`` of ``root`` plus every run's spec, resolved config, status and summary:
    ``{"sweep": {...}, "runs": [{"name", "path", "spec", "config", "status", "summary"}, ...]}``
    in the sweep's order (``RunDir(path).metrics()`` reads a run's metrics.jsonl). The reader for
    tables and plots."""
    manifest = read_json(os.path.join(root, SWEEP_JSON))
    if manifest is None:
        raise FileNotFoundError(f"{root!r} holds no {SWEEP_JSON}: not a sweep root (run "
                                "launch/sweep.py --workdir=ROOT first)")
    runs = []
    for r in manifest["runs"]:
        rd = RunDir(os.path.join(root, r["name"]))
        runs.append({"name": r["name"], "path": rd.path, "spec": rd.spec(), "config": rd.config(),
                     "status": rd.status(), "summary": rd.summary()})
    return {"sweep": manifest, "runs": runs}
