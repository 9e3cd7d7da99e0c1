"""Client side of the AppWorld service boundary (HTTP over a Unix socket).

AppWorld runs in its own virtual environment (``scripts/appworld.sh``), behind the service in
``venv_side/service.py``. This module finds the installation and the socket from the same
environment variables the script reads, talks to the service with the standard library only, and
turns every way it can be missing or broken into one clear error naming the fixing command.

An episode is leased to the connection that opened it (``EpisodeConnection``): when that
connection closes or this process exits, the service closes the episode and frees its worker
within seconds.

    HARNESS_JAX_APPWORLD_HOME    (default ~/.cache/harness_jax/appworld)  venv/, service/, data/
    HARNESS_JAX_APPWORLD_SOCKET  (default $HOME/service/appworld.sock)
"""
from __future__ import annotations

import dataclasses
import http.client
import json
import os
import socket
import subprocess
import time
from typing import Any, Optional

from harness_jax.envs.base import InfraError

PROTOCOL_VERSION = 2
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
VENV_SIDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "venv_side")
SCRIPT = os.path.join(REPO_ROOT, "scripts", "appworld.sh")
START_CMD = "bash scripts/appworld.sh start"
INSTALL_CMD = "bash scripts/appworld.sh install"


class AppWorldUnavailable(InfraError):
    """AppWorld's installation, data or service is missing or down; the message names the fix.

    A subclass of ``InfraError``: executors treat it as an infrastructure failure."""


class AppWorldBusy(InfraError):
    """Every worker of the service holds an episode; the message names each holder (episode,
    task, client pid and command) and the fixes."""


class AppWorldTaskError(ValueError):
    """The task or data tree given to the service does not exist or is malformed (bad input)."""


@dataclasses.dataclass(frozen=True)
class RuntimePaths:
    home: str
    venv_python: str
    socket: str
    state_dir: str
    data_cache: str

    def installed(self) -> bool:
        marker = os.path.join(self.home, "venv", ".harness_jax_appworld_installed")
        return os.path.isfile(marker) and os.access(self.venv_python, os.X_OK)

    def require_installed(self) -> None:
        if not self.installed():
            raise AppWorldUnavailable(
                f"AppWorld is not installed (no virtual environment with appworld at "
                f"{os.path.dirname(os.path.dirname(self.venv_python))}): run `{INSTALL_CMD}` "
                "(or set HARNESS_JAX_APPWORLD_HOME to an existing installation)")


def runtime_paths() -> RuntimePaths:
    home = os.path.abspath(os.path.expanduser(os.environ.get(
        "HARNESS_JAX_APPWORLD_HOME", os.path.join("~", ".cache", "harness_jax", "appworld"))))
    state = os.path.join(home, "service")
    return RuntimePaths(
        home=home, venv_python=os.path.join(home, "venv", "bin", "python"),
        socket=os.environ.get("HARNESS_JAX_APPWORLD_SOCKET", os.path.join(state, "appworld.sock")),
        state_dir=state, data_cache=os.path.join(home, "data"))


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


class ServiceClient:
    """Thin JSON client of the AppWorld service; thread-safe (one connection per request)."""

    def __init__(self, socket_path: Optional[str] = None, timeout_s: float = 60.0):
        self.paths = runtime_paths()
        self.socket = socket_path or self.paths.socket
        self.timeout_s = timeout_s

    def _down(self, why: str) -> AppWorldUnavailable:
        if not self.paths.installed() and self.socket == self.paths.socket:
            return AppWorldUnavailable(
                f"the AppWorld service is not running ({why}) and AppWorld is not installed: "
                f"run `{START_CMD}` (it installs AppWorld into its own virtual environment first)")
        return AppWorldUnavailable(
            f"the AppWorld service is not running at {self.socket} ({why}): run `{START_CMD}` "
            "(or point HARNESS_JAX_APPWORLD_SOCKET at a running service)")

    def _connection(self, timeout_s: float) -> _UnixHTTPConnection:
        if not os.path.exists(self.socket):
            raise self._down("no socket file")
        return _UnixHTTPConnection(self.socket, timeout_s)

    def exchange(self, conn: _UnixHTTPConnection, method: str, path: str,
                 body: Optional[dict] = None, timeout_s: Optional[float] = None) -> dict:
        """One request on ``conn`` (kept open for the next one); every failure is an
        ``InfraError`` naming what broke, bad input an ``AppWorldTaskError``."""
        timeout = timeout_s or self.timeout_s
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        try:
            data = None if body is None else json.dumps(body).encode()
            conn.request(method, path, body=data,
                         headers={"Content-Type": "application/json"} if data else {})
            resp = conn.getresponse()
            raw = resp.read()
        except (ConnectionRefusedError, FileNotFoundError) as e:
            raise self._down(type(e).__name__) from e
        except socket.timeout as e:
            raise InfraError(f"the AppWorld service did not answer {method} {path} within "
                             f"{timeout:.0f} s") from e
        except (ConnectionError, http.client.HTTPException, OSError) as e:
            raise InfraError(f"the AppWorld service connection failed during {method} {path}: "
                             f"{e!r}") from e
        try:
            out = json.loads(raw.decode() or "null")
        except ValueError as e:
            raise InfraError(f"the AppWorld service answered {method} {path} with non-JSON "
                             f"(HTTP {resp.status}): {raw[:200]!r}") from e
        if resp.status == 200:
            return out
        msg = out.get("error", out) if isinstance(out, dict) else out
        if resp.status == 400 or (resp.status == 404 and isinstance(out, dict)
                                  and out.get("missing") in ("task", "data")):
            raise AppWorldTaskError(str(msg))
        if resp.status == 503 and isinstance(out, dict) and out.get("busy"):
            raise AppWorldBusy(str(msg))
        raise InfraError(f"AppWorld service error on {method} {path} (HTTP {resp.status}): {msg}")

    def request(self, method: str, path: str, body: Optional[dict] = None,
                timeout_s: Optional[float] = None) -> dict:
        """One request on a connection of its own (not for episodes: see ``connect``)."""
        conn = self._connection(timeout_s or self.timeout_s)
        try:
            return self.exchange(conn, method, path, body, timeout_s)
        finally:
            conn.close()

    # -- API ------------------------------------------------------------------------------------
    def check_protocol(self, reply: dict) -> dict:
        if reply.get("protocol") != PROTOCOL_VERSION:
            raise AppWorldUnavailable(
                f"the AppWorld service at {self.socket} speaks protocol {reply.get('protocol')}, "
                f"this client {PROTOCOL_VERSION}: restart it with `bash scripts/appworld.sh stop "
                f"&& {START_CMD}`")
        return reply

    def health(self) -> dict:
        return self.check_protocol(self.request("GET", "/health", timeout_s=10))

    def available(self) -> bool:
        try:
            self.health()
            return True
        except Exception:  # noqa: BLE001
            return False

    def connect(self) -> "EpisodeConnection":
        """A persistent connection that leases the episodes opened on it."""
        return EpisodeConnection(self)


class EpisodeConnection:
    """One connection to the service, kept open for an episode's life. The service ties the
    episodes opened on it to it: closing it (``close``), or this process exiting, closes them
    and frees their workers within seconds. One caller at a time."""

    def __init__(self, client: ServiceClient):
        self.client = client
        self._conn: Optional[_UnixHTTPConnection] = None

    def request(self, method: str, path: str, body: Optional[dict] = None,
                timeout_s: Optional[float] = None) -> dict:
        if self._conn is None:
            self._conn = self.client._connection(timeout_s or self.client.timeout_s)
        try:
            return self.client.exchange(self._conn, method, path, body, timeout_s)
        except InfraError:
            self.close()              # the lease is gone with it: the service frees the episode
            raise

    def open_episode(self, data_dir: str, task_id: str, **options: Any) -> dict:
        body = {"data_dir": os.path.abspath(data_dir), "task_id": task_id}
        body.update(options)
        wait = float(options.get("acquire_timeout_s", 600))
        out = self.request("POST", "/episodes", body, timeout_s=wait + 420)
        try:
            return self.client.check_protocol(out)
        except AppWorldUnavailable:
            self.close()        # an older service does not lease episodes: do not use it
            raise

    def execute(self, episode_id: str, code: str, timeout_s: float) -> dict:
        return self.request("POST", f"/episodes/{episode_id}/execute", {"code": code},
                            timeout_s=timeout_s)

    def evaluate(self, episode_id: str) -> dict:
        return self.request("POST", f"/episodes/{episode_id}/evaluate", {}, timeout_s=360)

    def close_episode(self, episode_id: str) -> dict:
        return self.request("DELETE", f"/episodes/{episode_id}", {}, timeout_s=120)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def start_service(timeout_s: float = 600.0) -> str:
    """Runs ``scripts/appworld.sh start`` (installs first if needed); returns its output."""
    if not os.path.isfile(SCRIPT):
        raise AppWorldUnavailable(f"{SCRIPT} not found: start the service from a checkout of the "
                                  "repository with `bash scripts/appworld.sh start`")
    t0 = time.perf_counter()
    p = subprocess.run(["bash", SCRIPT, "start"], capture_output=True, text=True,
                       timeout=timeout_s)
    if p.returncode != 0:
        raise AppWorldUnavailable(f"`{START_CMD}` failed after {time.perf_counter() - t0:.0f} s:\n"
                                  f"{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p.stdout + p.stderr
