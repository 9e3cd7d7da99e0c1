"""The Ray Jobs backend. The job specs are checked without a cluster; the slow test starts a real
single-node Ray cluster on this machine (loopback only, 1 CPU for jobs) and runs a sweep of one
real training run and one failing run through the Jobs API: submitted with --detach, then
re-attached by the same command, which collects the outcomes and logs."""
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from harness_jax.sweeps import rundir, runner
from harness_jax.sweeps.ray_jobs import RayJobsBackend, submission_id
from harness_jax.sweeps.spec import SweepError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "tests", "sweeps", "sweep_config.py")


def test_job_specs_without_a_cluster(tmp_path):
    sw = runner.prepare(CONFIG, "e2e", str(tmp_path / "sw"), python="python", repo_root=ROOT)
    be = RayJobsBackend("http://head:8265", sw.name, ROOT, env={"JAX_PLATFORMS": "tpu"}, num_cpus=8,
                        num_gpus=0, resources={"TPU": 4}, memory=2**34,
                        runtime_env={"env_vars": {"A": "1"}, "pip": ["bm25s"]})
    specs = [item["job_spec"] for item in runner.dry_run(sw, be, reporter=runner.Reporter("e2e", lambda s: None))]
    s = specs[2]
    assert shlex.split(s["entrypoint"]) == ["python", "launch/train.py", "--config=tests/sweeps/sweep_config.py",
                                            f"--workdir={tmp_path}/sw/seed=2,group_size=1", "--config.seed=2",
                                            "--config.rl.group_size=1"]
    assert s["entrypoint_num_cpus"] == 8.0 and s["entrypoint_num_gpus"] == 0.0
    assert s["entrypoint_resources"] == {"TPU": 4.0} and s["entrypoint_memory"] == 2**34
    assert s["runtime_env"]["working_dir"] == ROOT and ".git" in s["runtime_env"]["excludes"]
    assert s["runtime_env"]["env_vars"] == {"A": "1", "JAX_PLATFORMS": "tpu"} and s["runtime_env"]["pip"] == ["bm25s"]
    assert s["metadata"]["run"] == "seed=2,group_size=1" and s["metadata"]["attempt"] == "1"
    ids = [x["submission_id"] for x in specs]
    assert len(set(ids)) == 3 and all(set(i) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
                                      for i in ids)
    assert submission_id("e2e", "seed=0", 2) != submission_id("e2e", "seed=0", 1)
    no_upload = RayJobsBackend("http://head:8265", sw.name, ROOT, upload_code=False)
    assert no_upload.job_spec(sw.run_dir(sw.runs[0]), sw.argv(sw.runs[0]), 1)["runtime_env"] is None
    with pytest.raises(SweepError, match="slot"):
        RayJobsBackend("http://head:8265", sw.name, ROOT, env={"CUDA_VISIBLE_DEVICES": "{slot}"})


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def _log_tails(head_log: str, temp_dir: str, n: int = 1500) -> str:
    """The ends of ``ray start``'s output and of the dashboard's own logs (for a failure message)."""
    import glob

    out = []
    for path in [head_log] + sorted(glob.glob(os.path.join(temp_dir, "session_latest", "logs", "dashboard*"))):
        try:
            with open(path, errors="replace") as f:
                out.append(f"--- {path}\n{f.read()[-n:]}")
        except OSError as e:
            out.append(f"--- {path}: {e}")
    return "\n".join(out)


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """A single-node Ray cluster bound to loopback (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps every
    Ray address on 127.0.0.1), in its own process group, stopped at the end."""
    pytest.importorskip("ray")
    dash = _free_port()
    tmp = f"/tmp/rayhj_{os.getpid()}"          # short: Ray's socket paths have a length limit
    # Ray >= 2.5x turns token authentication on by default; this private loopback cluster runs
    # without it, and so do the sweep driver and its Ray client in this process (restored after)
    saved_auth = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", JAX_PLATFORMS="cpu",
               NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    env.pop("XLA_FLAGS", None)
    log = open(tmp_path_factory.mktemp("ray") / "head.log", "w")
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")   # the CLI of this interpreter's Ray
    if not os.path.exists(ray_cli):
        ray_cli = shutil.which("ray") or "ray"
    p = subprocess.Popen([ray_cli, "start", "--head", "--block", f"--port={_free_port()}", f"--dashboard-port={dash}",
                          "--dashboard-host=127.0.0.1", "--num-cpus=1", f"--temp-dir={tmp}",
                          "--include-dashboard=true", "--disable-usage-stats"],
                         env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"http://127.0.0.1:{dash}"
    no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))   # loopback, never a proxy
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            no_proxy.open(address + "/api/version", timeout=2).read()
            break
        except urllib.error.HTTPError:   # it answered (e.g. 401 from an authenticating dashboard)
            break
        except OSError:
            if p.poll() is not None:
                pytest.fail(f"ray start exited with {p.returncode}:\n{_log_tails(log.name, tmp)}")
            time.sleep(1)
    else:
        # Ray's core runs but its dashboard (the Jobs API) never answered: a property of the machine
        # (seen once on a CI machine), not of the sweep code; say so with Ray's own logs.
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
        if saved_auth is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        pytest.skip("Ray's dashboard (Jobs API) did not answer in 300 s on this machine; Ray's logs:\n"
                    + _log_tails(log.name, tmp))
    yield address
    p.send_signal(signal.SIGTERM)              # ray start --block shuts its node down
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(p.pid, signal.SIGKILL)       # anything of this process group still alive
    except ProcessLookupError:
        pass
    log.close()
    shutil.rmtree(tmp, ignore_errors=True)
    if saved_auth is None:
        os.environ.pop("RAY_AUTH_MODE", None)
    else:
        os.environ["RAY_AUTH_MODE"] = saved_auth


def _sweep(root, address, *extra):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "launch/sweep.py", f"--config={CONFIG}", "--sweep=fails_and_one", f"--workdir={root}",
           "--backend=ray", f"--ray_address={address}", f"--python={sys.executable}", "--ray_num_cpus=0.5",
           "--run_env=JAX_PLATFORMS=cpu", "--progress_every_s=30", *extra]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    return r.returncode, r.stdout + r.stderr


@pytest.mark.slow
def test_sweep_on_a_local_ray_cluster_detach_and_reattach(ray_head, tmp_path):
    root = str(tmp_path / "sw")
    rc, out = _sweep(root, ray_head, "--detach")
    assert rc == 3 and "detached: 2 job(s) running on ray" in out, out
    loaded = rundir.load_sweep(root)
    for r in loaded["runs"]:
        assert r["status"]["state"] == "running"
        a = r["status"]["attempts"][0]
        assert a["backend"] == "ray" and a["job_id"].startswith("hj-fails_and_one-")
        spec = json.load(open(os.path.join(r["path"], "sweep", "job_spec.json")))
        assert spec["submission_id"] == a["job_id"] and spec["runtime_env"]["env_vars"] == {"JAX_PLATFORMS": "cpu"}
    rc, out = _sweep(root, ray_head)                # the same command re-attaches and collects
    assert rc == 1, out
    assert "2 re-attached, 0 to start" in out and "FAILED group_size=1" in out, out
    by = {r["name"]: r for r in rundir.load_sweep(root)["runs"]}
    ok, bad = by["seed=0"], by["group_size=1"]
    assert ok["status"]["state"] == "done" and ok["summary"]["step"] == 3
    assert ok["status"]["attempts"][0]["detail"].startswith("ray job SUCCEEDED")
    assert bad["status"]["state"] == "failed" and bad["status"]["exit_code"] == 1
    assert "must be an integer >= 2" in bad["status"]["log_tail"]
    assert "ConfigValidationError" in open(os.path.join(bad["path"], "sweep", "log.txt")).read()
