"""``SWEEnv``: one repository-repair episode with sandboxed tools.

``reset(task)`` builds the instance's buggy repository (tests of FAIL_TO_PASS hidden, one commit
whose id is checked against ``base_commit``) in a fresh ``Workspace`` and returns the task
prompt. Steps are tool calls (``protocol="function"``: ``bash``, ``str_replace_editor``,
``submit``) or replies with one ```bash block (``protocol="text"``; ``submit`` as the command
finishes). The episode ends at ``submit`` or after ``max_steps``; then the working copy's
``git diff`` against ``base_commit`` (made inside the sandbox) is graded by ``grading``, and the
reward is 1.0 iff resolved.

Malformed tool calls, unknown tools, editor misuse, commands that time out, blow the output or
disk limits, fork without limit or try the network all give an observation; the environment
never raises for what the agent does. A sandbox that cannot start is an ``InfraError``.
"""
from __future__ import annotations

from typing import Any, Optional, Union
import copy

from harness_jax.envs.base import Action, BlockingEnv, InfraError, StepResult, Task, ToolCall
from harness_jax.envs.swe import grading, prompts, tools
from harness_jax.envs.swe.instances import ENV_NAME, make_task
from harness_jax.envs.swe.sandbox import (SandboxLimits, SandboxUnavailable, Workspace,
                                          require_sandbox)

DIFF_COMMAND = ("git -c core.hooksPath=/dev/null -c core.fsmonitor=false add -A >/dev/null "
                "2>&1; git -c core.hooksPath=/dev/null -c core.fsmonitor=false diff --cached "
                "--no-color --no-ext-diff --no-textconv {base}")


class SWEEnv(BlockingEnv):
    """SWE-Gym-style environment on generated (or any corpus-backed) instances.

    Args:
      protocol: ``"function"`` (tools) or ``"text"`` (one ```bash block per reply).
      max_steps: tool calls per episode before it ends and is graded as it stands.
      limits: sandbox limits (per command and per workspace).
      command_timeout_s: default wall-clock limit of one ``bash`` call.
    """

    name = ENV_NAME

    def __init__(self, protocol: str = "function", max_steps: int = 50,
                 limits: Optional[SandboxLimits] = None, command_timeout_s: float = 120.0,
                 grade_timeout_s: float = grading.GRADE_TIMEOUT_S):
        if protocol not in ("function", "text"):
            raise ValueError(f"protocol={protocol!r}: expected 'function' or 'text'")
        if max_steps < 1:
            raise ValueError(f"max_steps={max_steps} must be >= 1")
        self.protocol = protocol
        self.max_steps = max_steps
        self.limits = limits or SandboxLimits(timeout_s=command_timeout_s)
        self.grade_timeout_s = grade_timeout_s
        self.task: Optional[Task] = None
        self.ws: Optional[Workspace] = None
        self.editor: Optional[tools.Editor] = None
        self._reset_state()

    def tool_specs(self) -> list[dict]:
        return copy.deepcopy(tools.TOOL_SPECS) if self.protocol == "function" else []

    @property
    def instruction(self) -> str:
        return prompts.SYSTEM_PROMPT if self.protocol == "function" else \
            prompts.SYSTEM_PROMPT + "\n\n" + prompts.TEXT_PROTOCOL

    def _reset_state(self):
        self.steps = 0
        self.done = False
        self.status = "running"
        self.patch: Optional[str] = None
        self._result: Optional[dict] = None
        self.tool_errors = 0

    # -- episode ---------------------------------------------------------------------------
    def _reset_sync(self, task: Union[Task, dict]) -> str:
        if isinstance(task, dict):
            task = make_task(task)
        if not isinstance(task, Task):
            raise TypeError(f"reset(task): expected a Task or an instance dict, got "
                            f"{type(task).__name__}")
        try:
            require_sandbox()
        except SandboxUnavailable as e:
            raise InfraError(str(e)) from e
        self._close_workspace()
        self._reset_state()
        self.task = task
        self.ws = Workspace(self.limits)
        grading.build_base(task.data, self.ws.testbed)
        self.ws.hand_over()
        self.editor = tools.Editor(self.ws)
        return prompts.task_prompt(task.data)

    def _close_workspace(self):
        if self.ws is not None:
            self.ws.close()
            self.ws = None
            self.editor = None

    def _obs(self, text: str, info: dict, error: bool = False) -> StepResult:
        if error:
            self.tool_errors += 1
            info["tool_error"] = True
            text = "ERROR: " + text
        if self.steps >= self.max_steps:
            return self._finish(text + f"\n[step limit of {self.max_steps} reached: the "
                                "current changes are submitted]", "step_limit", info)
        return StepResult(observation=text, reward=0.0, done=False, info=info)

    def _run_bash(self, command: Any, timeout: Any, info: dict) -> StepResult:
        if not isinstance(command, str) or not command.strip():
            return self._obs("bash needs `command`: a non-empty string", info, error=True)
        t = None
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
                return self._obs("bash `timeout` must be a positive number of seconds", info,
                                 error=True)
            t = float(timeout)
        try:
            r = self.ws.run(command, timeout_s=t)
        except SandboxUnavailable as e:
            info["infra_error"] = True
            self.done = True
            self.status = "infra_error"
            return StepResult(observation=str(e), reward=0.0, done=True, info=info)
        info.update(exit_code=r.exit_code, timed_out=r.timed_out, truncated=r.truncated,
                    command_s=round(r.elapsed_s, 3))
        text = r.output.rstrip("\n")
        if r.timed_out:
            text += (f"\n[the command did not finish within "
                     f"{min(t or self.limits.timeout_s, self.limits.max_timeout_s):.0f}s and was "
                     "killed, with every process it started]")
        else:
            text += f"\n[exit code: {r.exit_code}]"
        if r.disk_exceeded:
            info["disk_exceeded"] = True
            return self._finish(text + f"\n[the working copy exceeds {self.limits.disk_mb} MB: "
                                "the episode ends and the current changes are graded]",
                                "disk_limit", info)
        return self._obs(text, info)

    def _step_sync(self, action: Action) -> StepResult:
        if self.task is None:
            raise RuntimeError("step() before reset(task): start an episode first")
        if self.done:
            raise RuntimeError("the episode is over; call reset(task) for a new one")
        self.steps += 1
        info: dict = {"step": self.steps}
        if self.protocol == "text":
            if not isinstance(action, str):
                return self._obs("the text protocol takes a reply with one ```bash block",
                                 info, error=True)
            cmd, err = tools.parse_text_action(action)
            if err:
                return self._obs(err, info, error=True)
            if cmd == "submit":
                return self._finish("", "submitted", info)
            return self._run_bash(cmd, None, info)
        if isinstance(action, str):
            return self._obs("no tool was called. Call `bash`, `str_replace_editor` or `submit`.",
                             info, error=True)
        if not isinstance(action, ToolCall):
            return self._obs(f"expected a tool call, got {type(action).__name__}", info,
                             error=True)
        args = action.arguments if isinstance(action.arguments, dict) else None
        if args is None:
            return self._obs(f"the arguments of {action.name!r} must be a JSON object", info,
                             error=True)
        info["tool"] = action.name
        if action.name == "bash":
            unknown = set(args) - {"command", "timeout"}
            if unknown:
                return self._obs(f"bash got unknown argument(s) {sorted(unknown)}; it takes "
                                 "`command` and optionally `timeout`", info, error=True)
            return self._run_bash(args.get("command"), args.get("timeout"), info)
        if action.name == "str_replace_editor":
            try:
                return self._obs(self.editor(args), info)
            except tools.ToolError as e:
                return self._obs(str(e), info, error=True)
            except OSError as e:
                return self._obs(f"the editor could not complete the operation ({e.strerror})",
                                 info, error=True)
        if action.name == "submit":
            return self._finish("", "submitted", info)
        return self._obs(f"unknown tool {action.name!r}; the tools are "
                         f"{', '.join(tools.TOOL_NAMES)}", info, error=True)

    def _finish(self, observation: str, status: str, info: dict) -> StepResult:
        self.done = True
        self.status = status
        self._result = self._score()
        info.update(success=self._result["success"], status=status)
        if self._result.get("infra_error"):
            info["infra_error"] = True
        obs = (observation + "\n" if observation else "") + "Submitted."
        return StepResult(observation=obs.strip(), reward=self._result["score"], done=True,
                          info=info)

    def current_patch(self) -> str:
        """The working copy's diff against ``base_commit`` (computed inside the sandbox)."""
        r = self.ws.run(DIFF_COMMAND.format(base=self.task.data["base_commit"]), timeout_s=60)
        if r.timed_out or r.exit_code not in (0, None):
            return ""
        return r.output if "diff --git" in r.output else ""

    def _score(self) -> dict:
        out = {"instance_id": self.task.data["instance_id"], "steps": self.steps,
               "status": self.status, "tool_errors": self.tool_errors}
        try:
            self.patch = self.current_patch()
            rep = grading.grade_report(self.task.data, self.patch, self.limits,
                                       timeout_s=self.grade_timeout_s)
        except SandboxUnavailable as e:
            out.update(success=False, score=0.0, infra_error=True, error=str(e))
            return out
        out.update(success=bool(rep["resolved"]), score=1.0 if rep["resolved"] else 0.0,
                   resolved=bool(rep["resolved"]), patch=self.patch,
                   patch_applied=rep["patch_applied"], grade_error=rep["error"],
                   dropped_paths=rep["dropped_paths"],
                   fail_to_pass=rep["FAIL_TO_PASS"], pass_to_pass=rep["PASS_TO_PASS"])
        return out

    def _evaluate_sync(self) -> dict:
        if self.task is None:
            raise RuntimeError("evaluate() before reset(task): nothing to score")
        if self._result is None:
            if self.ws is None:
                raise RuntimeError("evaluate(): the episode's workspace is closed")
            return self._score()
        return dict(self._result)

    def _close_sync(self) -> None:
        self._close_workspace()


def reference_actions(instance: dict, protocol: str = "function") -> list:
    """A scripted policy that applies the reference patch and submits (tests, benchmarks)."""
    patch = instance["patch"]
    cmd = "cd /testbed && git apply - <<'HJ_PATCH_EOF'\n" + patch + ("" if patch.endswith("\n") else "\n") + \
        "HJ_PATCH_EOF"
    if protocol == "text":
        return [f"```bash\n{cmd}\n```", "```bash\nsubmit\n```"]
    return [ToolCall("bash", {"command": cmd}), ToolCall("submit", {})]
