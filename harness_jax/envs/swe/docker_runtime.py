"""Optional Docker-backed runtime for real SWE-Gym / SWE-bench instances (not run here).

The real instances need one prebuilt image each (SWE-Gym:
``docker.io/xingyaoww/sweb.eval.x86_64.<instance_id with "__" -> "_s_">:latest``, the repository
at ``/testbed`` and its conda environment ``testbed`` ready). Neither Docker nor the images are
reachable on this project's machines, so this module is documented and unit-tested only for the
commands it would issue; it is never executed in CI.

Usage on a machine with Docker and the images::

    from harness_jax.envs import swe
    from harness_jax.envs.swe.docker_runtime import DockerRuntime
    inst = swe.load_instances("swe-gym.jsonl")[0]
    rt = DockerRuntime(inst)
    rt.start()                      # docker run -d --network none ... sleep infinity
    print(rt.run("git status"))     # the agent's bash tool
    patch = rt.diff()               # git diff against base_commit
    rt.stop()
    resolved = DockerRuntime.grade(inst, patch)   # fresh container: apply, test_patch, tests

Grading follows SWE-bench: apply the model patch, check out the ``test_patch`` files at
``base_commit`` and apply ``test_patch``, run the repository's test command on the
FAIL_TO_PASS and PASS_TO_PASS tests, parse the log (``testing.parse_log`` for pytest), resolved
iff all pass. Repositories whose tests are not run with pytest need SWE-bench's per-repository
test commands and log parsers (the ``swebench`` package provides both).
"""
from __future__ import annotations

import shlex
import subprocess
from typing import Optional

from harness_jax.envs.swe import testing
from harness_jax.envs.swe.repo import patch_paths


def image_name(instance_id: str, namespace: str = "xingyaoww") -> str:
    return f"docker.io/{namespace}/sweb.eval.x86_64.{instance_id.replace('__', '_s_')}:latest"


class DockerRuntime:
    def __init__(self, instance: dict, image: Optional[str] = None, cpus: float = 1.0,
                 memory: str = "2g", docker: str = "docker"):
        self.instance = instance
        self.image = image or image_name(instance["instance_id"])
        self.cpus = cpus
        self.memory = memory
        self.docker = docker
        self.container: Optional[str] = None

    def start_command(self) -> list[str]:
        return [self.docker, "run", "-d", "--rm", "--network", "none", "--cpus",
                str(self.cpus), "--memory", self.memory, "--pids-limit", "512", "-w",
                "/testbed", self.image, "sleep", "infinity"]

    def exec_command(self, command: str) -> list[str]:
        if self.container is None:
            raise RuntimeError("DockerRuntime.exec_command before start()")
        inner = "source /opt/miniconda3/bin/activate testbed 2>/dev/null; " + command
        return [self.docker, "exec", "-w", "/testbed", self.container, "bash", "-lc", inner]

    def start(self) -> str:
        out = subprocess.run(self.start_command(), capture_output=True, text=True, check=True)
        self.container = out.stdout.strip()
        return self.container

    def run(self, command: str, timeout_s: float = 120.0) -> str:
        r = subprocess.run(self.exec_command(command), capture_output=True, text=True,
                           timeout=timeout_s)
        return r.stdout + r.stderr

    def diff(self) -> str:
        return self.run(f"git add -A && git diff --cached --no-color "
                        f"{shlex.quote(self.instance['base_commit'])}")

    def stop(self) -> None:
        if self.container:
            subprocess.run([self.docker, "rm", "-f", self.container], capture_output=True)
            self.container = None

    def grading_script(self, patch: str) -> str:
        inst = self.instance
        test_files = [p for p in _patch_files(inst.get("test_patch", ""))]
        tests = list(inst["FAIL_TO_PASS"]) + list(inst["PASS_TO_PASS"])
        lines = ["set -u", "cd /testbed",
                 "git apply -v - <<'HJ_EOF'\n" + patch + "\nHJ_EOF"]
        if test_files:
            lines.append(f"git checkout {shlex.quote(inst['base_commit'])} -- " +
                         " ".join(shlex.quote(f) for f in test_files))
            lines.append("git apply -v - <<'HJ_EOF'\n" + inst["test_patch"] + "\nHJ_EOF")
        lines.append(testing.pytest_command(tests))
        return "\n".join(lines)

    @classmethod
    def grade(cls, instance: dict, patch: str, **kw) -> bool:
        rt = cls(instance, **kw)
        rt.start()
        try:
            log = rt.run(rt.grading_script(patch), timeout_s=1800)
        finally:
            rt.stop()
        statuses, _ = testing.parse_log(log)
        return all(statuses.get(t) in testing.PASS_STATUSES
                   for t in list(instance["FAIL_TO_PASS"]) + list(instance["PASS_TO_PASS"]))


def _patch_files(patch: str) -> list[str]:
    return patch_paths(patch)
