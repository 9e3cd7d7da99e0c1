"""How worker processes are started and stopped: local processes (a fresh interpreter each) or Ray
actors. A launcher only places and starts workers; every worker then connects back to the pool's
listener (``pool.WorkerPool``) and is served the same way whatever started it."""
from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Optional

from harness_jax.harness.workers.wire import PICKLE
from harness_jax.harness.workers.worker import RayWorker


@dataclasses.dataclass
class Spawned:
    """A started worker as its launcher knows it."""

    handle: Any                          # subprocess.Popen | Ray actor handle
    serve_ref: Any = None                # Ray: the ObjectRef of serve()
    log_path: str = ""                   # processes: the worker's stdout/stderr


class ProcessLauncher:
    """Workers as local processes: a fresh interpreter (not multiprocessing's spawn: that
    re-imports the driver's ``__main__``) that imports what the driver can (its ``sys.path``) and
    reads its connection details from stdin, so the key never shows on a command line."""

    name = "processes"

    def __init__(self):
        self.logdir = ""

    def default_host(self) -> str:
        return "127.0.0.1"

    def spawn(self, wid: int, address, authkey: bytes) -> Spawned:
        if not self.logdir:
            self.logdir = tempfile.mkdtemp(prefix="harness_jax_workers_")
        log_path = os.path.join(self.logdir, f"worker-{wid}.log")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
                   TOKENIZERS_PARALLELISM="false")
        with open(log_path, "wb") as logf:
            proc = subprocess.Popen(
                [sys.executable, "-c", "from harness_jax.harness.workers.worker import main; main()"],
                stdin=subprocess.PIPE, stdout=logf, stderr=subprocess.STDOUT, env=env)
        proc.stdin.write(pickle.dumps((address, authkey, wid), PICKLE))
        proc.stdin.close()
        return Spawned(proc, log_path=log_path)

    def stop(self, w: Spawned, graceful: bool) -> None:
        try:
            w.handle.wait(timeout=5 if graceful else 0.01)
        except subprocess.TimeoutExpired:
            w.handle.kill()
            w.handle.wait(timeout=5)

    def ended(self, w: Spawned) -> Optional[str]:
        """Why a worker that has not connected yet is gone (None while it may still connect)."""
        if w.handle.poll() is None:
            return None
        return f"exited with code {w.handle.returncode} before connecting; its output ends with:\n{_tail(w.log_path)}"

    def close(self) -> None:
        if self.logdir:
            shutil.rmtree(self.logdir, ignore_errors=True)


class RayLauncher:
    """Workers as Ray actors: the cluster at ``address`` (``"auto"``: the running one), or a
    private single-node Ray on this machine, loopback only, when ``address`` is empty."""

    name = "ray"

    def __init__(self, address: str = "", cpus: float = 1.0):
        self.address = address
        self.cpus = float(cpus)
        self._owns_ray = False
        self._actor_cls = None

    def default_host(self) -> str:
        ray = _ray()
        self._init()
        return ray.util.get_node_ip_address() if self.address else "127.0.0.1"

    def _init(self) -> None:
        ray = _ray()
        if not ray.is_initialized():
            if self.address:
                ray.init(address=self.address, log_to_driver=False)
            else:   # a private single-node Ray on this machine, loopback only
                os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
                ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False,
                         _node_ip_address="127.0.0.1", log_to_driver=False,
                         configure_logging=False)
            self._owns_ray = True
        self._actor_cls = ray.remote(num_cpus=self.cpus, max_restarts=0)(RayWorker)

    def spawn(self, wid: int, address, authkey: bytes) -> Spawned:
        if self._actor_cls is None:
            self._init()
        actor = self._actor_cls.remote()
        return Spawned(actor, serve_ref=actor.serve.remote(address, authkey, wid))

    def stop(self, w: Spawned, graceful: bool) -> None:
        try:
            _ray().kill(w.handle, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass

    def ended(self, w: Spawned) -> Optional[str]:
        ready, _ = _ray().wait([w.serve_ref], timeout=0)
        return "the Ray actor ended before connecting" if ready else None

    def close(self) -> None:
        # no Ray call may follow the shutdown: one would auto-connect to the stopped cluster,
        # and Ray ends the process when it cannot reach that cluster's GCS within 60 s
        if self._owns_ray:
            _ray().shutdown()
            self._owns_ray = False


def make(backend: str, ray_address: str = "", ray_cpus: float = 1.0):
    """The launcher of a remote backend (``"processes"`` or ``"ray"``)."""
    if backend == "processes":
        return ProcessLauncher()
    if backend == "ray":
        return RayLauncher(ray_address, ray_cpus)
    raise ValueError(f"WorkerPool backend={backend!r}: use 'processes' or 'ray' "
                     "('inprocess' needs no pool: pass backend=None to the executor)")


def _ray():
    """Ray, imported on first use (an optional dependency: ``pip install -e '.[ray]'``)."""
    try:
        import ray
    except ImportError as e:
        raise ImportError("backend='ray' needs Ray: pip install -e '.[ray]'") from e
    return ray


def _tail(path: str, n: int = 1500) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return "(no output)"
