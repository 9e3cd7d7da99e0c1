"""Cluster backend: every run is a Ray job (Ray Jobs API, ``ray.job_submission``).

The driver submits ``python <launcher> --config=... --workdir=<run dir> <flags>`` as the job's
entrypoint, with the repository as the job's ``working_dir`` (uploaded by Ray; or code already on
the nodes' image with ``upload_code=False``) and the run's resources
(``entrypoint_num_cpus/_gpus/_resources``, e.g. ``{"TPU": 4}`` for one v5p host). The job as
submitted is written to ``<run>/sweep/job_spec.json`` first. The sweep root must be a path every
node sees (NFS, a GCS FUSE mount). The driver polls the jobs; when it is interrupted (or given
``--detach``) it leaves them running, and the same ``launch/sweep.py`` command re-attaches to
them through the job ids recorded in ``status.json``. A job that was stopped or lost is
resubmitted under a new submission id and the launcher resumes from its checkpoint.
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
import shlex
import time
from typing import Optional

from harness_jax.sweeps.local import Outcome
from harness_jax.sweeps.rundir import RunDir, write_json
from harness_jax.sweeps.spec import SweepError

CODE_EXCLUDES = [".git", "**/__pycache__", "*.egg-info", ".pytest_cache", "/workdir*/"]   # root-level run dirs only (not harness_jax/train/workdir.py)


@dataclasses.dataclass
class RayHandle:
    run: RunDir
    submission_id: str
    started: float
    stop_sent: Optional[float] = None
    last_status: str = "PENDING"


def submission_id(sweep: str, run: str, attempt: int) -> str:
    """``hj-<sweep>-<run>-<hash>-a<attempt>`` with only [A-Za-z0-9_-] (unique per attempt)."""
    h = hashlib.sha256(f"{sweep}/{run}".encode()).hexdigest()[:8]
    safe = re.sub(r"[^A-Za-z0-9_-]+", "_", f"{sweep}-{run}")[:60]
    return f"hj-{safe}-{h}-a{int(attempt)}"


class RayJobsBackend:
    name = "ray"
    on_interrupt = "detach"               # cluster jobs outlive the driver; re-running re-attaches

    def __init__(self, address: str, sweep_name: str, repo_root: str, max_parallel: int = 0,
                 env: Optional[dict] = None, num_cpus: Optional[float] = None,
                 num_gpus: Optional[float] = None, resources: Optional[dict] = None,
                 memory: Optional[int] = None, upload_code: bool = True,
                 runtime_env: Optional[dict] = None):
        self.address = address
        self.sweep_name = sweep_name
        self.repo_root = repo_root
        self.max_parallel = int(max_parallel) if int(max_parallel) > 0 else 1 << 30
        self.env = {k: str(v) for k, v in (env or {}).items()}
        for k, v in self.env.items():
            if "{slot}" in v:
                raise SweepError(f"--run_env {k}={v}: {{slot}} only means something for the local "
                                 "backend; on Ray, ask for resources (--ray_num_gpus, --ray_resources)")
        self.num_cpus, self.num_gpus, self.resources, self.memory = num_cpus, num_gpus, resources, memory
        self.upload_code = bool(upload_code)
        self.runtime_env = dict(runtime_env or {})
        self._client = None

    def describe(self) -> dict:
        return {"backend": self.name, "address": self.address, "max_parallel": self.max_parallel,
                "env": self.env, "num_cpus": self.num_cpus, "num_gpus": self.num_gpus,
                "resources": self.resources, "upload_code": self.upload_code}

    @property
    def client(self):
        if self._client is None:
            try:
                from ray.job_submission import JobSubmissionClient
            except ImportError as e:
                raise SweepError(f"--backend=ray needs Ray: pip install -e '.[ray]' ({e})") from e
            self._client = JobSubmissionClient(self.address)
        return self._client

    def job_spec(self, run: RunDir, argv: list[str], attempt: int) -> dict:
        """The keyword arguments of ``JobSubmissionClient.submit_job`` for one attempt."""
        runtime_env = dict(self.runtime_env)
        if self.upload_code:
            runtime_env.setdefault("working_dir", self.repo_root)
            runtime_env.setdefault("excludes", list(CODE_EXCLUDES))
        if self.env:
            runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), **self.env}
        spec = {"entrypoint": shlex.join(argv),
                "submission_id": submission_id(self.sweep_name, run.name, attempt),
                "runtime_env": runtime_env or None,
                "metadata": {"harness_jax_sweep": self.sweep_name, "run": run.name,
                             "attempt": str(attempt), "workdir": run.path}}
        if self.num_cpus is not None:
            spec["entrypoint_num_cpus"] = float(self.num_cpus)
        if self.num_gpus is not None:
            spec["entrypoint_num_gpus"] = float(self.num_gpus)
        if self.resources:
            spec["entrypoint_resources"] = {k: float(v) for k, v in self.resources.items()}
        if self.memory is not None:
            spec["entrypoint_memory"] = int(self.memory)
        return spec

    def start(self, run: RunDir, argv: list[str], attempt: int) -> RayHandle:
        spec = self.job_spec(run, argv, attempt)
        write_json(run.file("job_spec.json"), spec)
        with open(run.log_path, "a") as log:
            log.write(f"\n===== attempt {attempt} (ray job {spec['submission_id']} at {self.address}) "
                      f"{time.strftime('%Y-%m-%d %H:%M:%S')}: {spec['entrypoint']}\n")
        sid = self.client.submit_job(**{k: v for k, v in spec.items() if v is not None})
        return RayHandle(run=run, submission_id=sid, started=time.time())

    def attempt_info(self, h: RayHandle) -> dict:
        return {"job_id": h.submission_id, "address": self.address}

    def poll(self, h: RayHandle) -> Optional[Outcome]:
        try:
            info = self.client.get_job_info(h.submission_id)
        except RuntimeError as e:          # the cluster forgot the job (restarted head)
            return Outcome(exit_code=None, interrupted=True, detail=f"ray job lost: {e}")
        status = getattr(info.status, "value", str(info.status))
        h.last_status = status
        if status in ("PENDING", "RUNNING"):
            return None
        try:
            logs = self.client.get_job_logs(h.submission_id)
        except RuntimeError as e:
            logs = f"(logs unavailable: {e})\n"
        first = (info.message or "").strip().splitlines()[:1]
        detail = f"ray job {status}" + (f": {first[0][:200]}" if first else "")
        if status == "STOPPED":
            return Outcome(exit_code=None, interrupted=True, detail=detail, log=logs)
        code = getattr(info, "driver_exit_code", None)
        if code is None:                   # older Ray, or the job failed before its entrypoint ran
            code = 0 if status == "SUCCEEDED" else None
        return Outcome(exit_code=code, detail=detail, log=logs)

    def stop(self, h: RayHandle) -> None:
        if h.stop_sent is None:
            h.stop_sent = time.time()
            self.client.stop_job(h.submission_id)

    def kill(self, h: RayHandle) -> None:
        self.stop(h)

    def reattach(self, run: RunDir, attempt: dict) -> Optional[RayHandle]:
        """Re-attaches to a job recorded in ``status.json`` (its outcome is polled as usual)."""
        sid = attempt.get("job_id")
        if not sid:
            return None
        return RayHandle(run=run, submission_id=sid, started=float(attempt.get("started", time.time())))
