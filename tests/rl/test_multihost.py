"""2 processes on localhost (gloo CPU collectives, 4 fake devices each) == 1 process with 8."""
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from harness_jax import distributed

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "multihost_worker.py")


def free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def launch(out, nproc, ndev):
    port = str(free_port())
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    procs = [subprocess.Popen([sys.executable, WORKER, str(out), str(i), str(nproc), port, str(ndev)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
             for i in range(nproc)]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=400)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-3000:]
    return logs


@pytest.mark.slow
def test_two_processes_equal_one_process(tmp_path):
    two = tmp_path / "two.npz"
    one = tmp_path / "one.npz"
    logs = launch(two, 2, 4)
    assert "process 1 of 2" in "".join(logs)
    launch(one, 1, 8)
    a, b = np.load(two), np.load(one)
    assert set(a.files) == set(b.files)
    for k in a.files:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-5, err_msg=k)


def test_resolve_from_env_and_errors(monkeypatch):
    monkeypatch.setenv("HJ_COORDINATOR_ADDRESS", "host:1234")
    monkeypatch.setenv("HJ_NUM_PROCESSES", "4")
    monkeypatch.setenv("HJ_PROCESS_ID", "3")
    assert distributed.resolve() == distributed.DistributedConfig("host:1234", 4, 3)
    assert distributed.resolve(process_id=1).process_id == 1
    monkeypatch.setenv("HJ_PROCESS_ID", "4")
    with pytest.raises(ValueError, match="process_id"):
        distributed.resolve()
    monkeypatch.delenv("HJ_COORDINATOR_ADDRESS")
    monkeypatch.setenv("HJ_PROCESS_ID", "0")
    with pytest.raises(ValueError, match="coordinator"):
        distributed.resolve()
    monkeypatch.setenv("HJ_NUM_PROCESSES", "1")
    assert distributed.initialize() is False      # single process: nothing to do
