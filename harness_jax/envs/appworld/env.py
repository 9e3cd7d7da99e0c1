"""``AppWorldEnv``: one AppWorld episode on the real runtime, through the AppWorld service.

``reset(task)`` opens an episode on the service: a worker process of AppWorld's own environment
server initializes the task (its own in-memory copy of the task's databases, AppWorld's clock
frozen at the task's datetime). Each ``step`` executes one code cell with AppWorld's
``execute`` (unsafe-syntax guard on by default, per-cell timeout) and returns its output or
trimmed traceback. The episode ends when the agent calls ``apis.supervisor.complete_task(...)``
or the interaction budget runs out; AppWorld's own evaluator then runs the task's
``ground_truth/evaluation.py`` on the database diff and the answer. Reward 1 iff every test
passes (task goal completion); ``evaluate()`` also gives the passed/failed requirements with
AppWorld's failure traces.

Each episode runs in its own sandboxed process that sees only its task's start state (no ground
truth: AppWorld's evaluator runs elsewhere), and is leased to this env's connection: ``close()``,
a dropped connection or this process exiting frees it within seconds; ``idle_timeout_s`` bounds
how long an open episode may go without a request.

Failures of the machinery (the service down, a worker process that died) are reported as
``info["infra_error"]`` (and ``reset`` raises ``InfraError``), never as task failures. A cell
that keeps running past its timeout (code that defeats AppWorld's own SIGALRM timeout) gets its
worker killed; that episode ends as a task failure with status ``cell_killed``.
"""
from __future__ import annotations

import logging
from typing import Any, Optional, Union

from harness_jax.envs.appworld import data as awdata
from harness_jax.envs.appworld import protocol as proto
from harness_jax.envs.appworld.service import (AppWorldUnavailable, EpisodeConnection,
                                               ServiceClient, start_service)
from harness_jax.envs.base import Action, BlockingEnv, InfraError, StepResult, Task, ToolCall

log = logging.getLogger(__name__)

KILL_GRACE_S = 15.0


class AppWorldEnv(BlockingEnv):
    """AppWorld episodes.

    Args:
      protocol: ``"text"`` (a ```python block per reply, AppWorld's ReAct agent) or
        ``"function"`` (the ``execute_python(code)`` tool).
      max_interactions: code cells per episode (AppWorld's ``max_interactions``); the episode is
        evaluated when the budget is spent.
      timeout_seconds: per-cell limit (AppWorld's ``timeout_seconds``; its default is 100).
      raise_on_unsafe_syntax: AppWorld's unsafe-syntax guard (keep it on outside a sandbox).
      max_api_calls_per_interaction: AppWorld's per-cell API-call cap.
      kill_grace_s: how long past ``timeout_seconds`` a cell may run before its worker is killed.
      auto_restart: when the service is down, start it (``scripts/appworld.sh start``) and report
        the interrupted episode as an infrastructure failure.
      socket_path: the service's socket (default: ``HARNESS_JAX_APPWORLD_SOCKET`` or the
        script's default).
      acquire_timeout_s: how long ``reset`` waits for a free worker when all are busy (then
        ``AppWorldBusy`` names the holders).
      idle_timeout_s: the service closes this env's episode after this long without a request
        (0: the service's limit, ``HARNESS_JAX_APPWORLD_IDLE_S``; it can only be lowered).
    """

    name = awdata.ENV_NAME

    def __init__(self, protocol: str = "text", max_interactions: int = 50,
                 timeout_seconds: int = 30, raise_on_unsafe_syntax: bool = True,
                 max_api_calls_per_interaction: int = 1000, kill_grace_s: float = KILL_GRACE_S,
                 auto_restart: bool = False, socket_path: Optional[str] = None,
                 acquire_timeout_s: float = 600.0, idle_timeout_s: float = 0.0,
                 client: Optional[ServiceClient] = None):
        if protocol not in ("text", "function"):
            raise ValueError(f"protocol={protocol!r}: expected 'text' or 'function'")
        if max_interactions < 1:
            raise ValueError(f"max_interactions={max_interactions} must be >= 1")
        if int(timeout_seconds) < 1:
            raise ValueError(f"timeout_seconds={timeout_seconds} must be >= 1 (whole seconds: "
                             "AppWorld uses SIGALRM)")
        if kill_grace_s < 0:
            raise ValueError(f"kill_grace_s={kill_grace_s} must be >= 0")
        if idle_timeout_s < 0:
            raise ValueError(f"idle_timeout_s={idle_timeout_s} must be >= 0 (0: the service's)")
        self.protocol = protocol
        self.max_interactions = int(max_interactions)
        self.timeout_seconds = int(timeout_seconds)
        self.raise_on_unsafe_syntax = bool(raise_on_unsafe_syntax)
        self.max_api_calls_per_interaction = int(max_api_calls_per_interaction)
        self.kill_grace_s = float(kill_grace_s)
        self.auto_restart = bool(auto_restart)
        self.acquire_timeout_s = float(acquire_timeout_s)
        self.idle_timeout_s = float(idle_timeout_s)
        self.client = client or ServiceClient(socket_path)
        self.task: Optional[Task] = None
        self.episode_id: Optional[str] = None
        self._conn: Optional[EpisodeConnection] = None
        self._reset_state()

    # -- prompts ---------------------------------------------------------------------------------
    @property
    def instruction(self) -> str:
        """AppWorld's ReAct-style instructions for this protocol (H0 puts them before the task)."""
        return proto.REACT_INSTRUCTION if self.protocol == "text" else proto.FUNCTION_INSTRUCTION

    def tool_specs(self) -> list:
        return [dict(s) for s in proto.TOOL_SPECS] if self.protocol == "function" else []

    # -- episode ---------------------------------------------------------------------------------
    def _reset_state(self) -> None:
        self.interactions = 0
        self.done = False
        self.status = "running"
        self.task_completed = False
        self.worker: Optional[dict] = None
        self.timings: dict = {}        # the service's phases of this reset (seconds)
        self.eval_timings: dict = {}   # ... of the last evaluation
        self._result: Optional[dict] = None
        self.history: list = []

    def _close_episode(self) -> None:
        conn, self._conn = self._conn, None
        eid, self.episode_id = self.episode_id, None
        try:
            if eid is not None and conn is not None:
                conn.close_episode(eid)
        except Exception as e:  # noqa: BLE001 - the service may be gone; closing the lease frees it
            log.debug("closing AppWorld episode %s failed: %s", eid, e)
        finally:
            if conn is not None:
                conn.close()

    def _open(self, data_dir: str, task_id: str, opts: dict) -> dict:
        self._conn = self.client.connect()
        return self._conn.open_episode(data_dir, task_id, **opts)

    def _restart_if_down(self) -> None:
        if self.auto_restart and not self.client.available():
            log.warning("the AppWorld service is down; restarting it (scripts/appworld.sh start)")
            start_service()

    def _reset_sync(self, task: Union[Task, dict]) -> str:
        if isinstance(task, dict):
            task = awdata.make_task(task)
        if not isinstance(task, Task) or task.env_name != self.name:
            raise TypeError(f"reset(task): expected an appworld Task (or a task record dict), got "
                            f"{task!r:.120}")
        data_dir = awdata.check_data_dir(task.data["data_dir"])
        self._close_episode()
        self._reset_state()
        self.task = task
        opts = dict(max_interactions=self.max_interactions + 1,  # our budget ends it first
                    timeout_seconds=self.timeout_seconds,
                    raise_on_unsafe_syntax=self.raise_on_unsafe_syntax,
                    max_api_calls_per_interaction=self.max_api_calls_per_interaction,
                    kill_grace_s=self.kill_grace_s, acquire_timeout_s=self.acquire_timeout_s,
                    idle_timeout_s=self.idle_timeout_s)
        try:
            out = self._open(data_dir, task.data["task_id"], opts)
        except AppWorldUnavailable:
            self._close_episode()
            if not self.auto_restart:
                raise
            self._restart_if_down()
            out = self._open(data_dir, task.data["task_id"], opts)
        except BaseException:
            self._close_episode()
            raise
        self.episode_id = out["episode_id"]
        self.worker = out.get("worker")
        self.timings = dict(out.get("timings") or {})
        info = out.get("task") or {}
        return proto.task_prompt(info.get("instruction", task.data.get("instruction", "")),
                                 info.get("supervisor") or {})

    def _infra(self, message: str, info: dict) -> StepResult:
        self.done = True
        self.status = "infra_error"
        self._result = self._base_result(success=False, infra_error=True, error=message)
        info.update(infra_error=True, status=self.status, error=message)
        try:
            self._restart_if_down()
        except Exception as e:  # noqa: BLE001 - reported with the episode's infra error
            info["restart_error"] = str(e)
        return StepResult(observation=f"[infrastructure error] {message}", reward=0.0,
                          done=True, info=info)

    def _finish(self, observation: str, status: str, info: dict) -> StepResult:
        self.done = True
        self.status = status
        res = self._evaluate_now()
        info.update(status=self.status, success=res["success"], infra_error=res.get(
            "infra_error", False))
        if res.get("infra_error"):
            info["error"] = res.get("error")
        return StepResult(observation=observation, reward=res["score"], done=True, info=info)

    def _step_sync(self, action: Action) -> StepResult:
        if self.task is None:
            raise RuntimeError("step() before reset(task): start an episode first")
        if self.done:
            raise RuntimeError("the episode is over; call reset(task) for a new one")
        if self.episode_id is None:
            raise RuntimeError("step(): no open episode (reset failed or the env was closed); "
                               "call reset(task)")
        self.interactions += 1
        info: dict = {"interaction": self.interactions}
        code = self._code_of(action, info)
        if code is None:
            self.history.append({"code": None, "output": info["invalid_action"]})
            if self.interactions >= self.max_interactions:
                return self._finish(info["invalid_action"], "limit_reached", info)
            return StepResult(observation=info["invalid_action"], info=info)
        try:
            out = self._conn.execute(self.episode_id, code,
                                     timeout_s=self.timeout_seconds + self.kill_grace_s + 90)
        except InfraError as e:
            return self._infra(str(e), info)
        if out.get("infra_error"):
            return self._infra(out.get("error", "AppWorld worker failure"), info)
        output = out.get("output", "")
        info["elapsed_s"] = out.get("elapsed_s")
        self.history.append({"code": code, "output": output})
        if out.get("killed"):
            self.done = True
            self.status = "cell_killed"
            self._result = self._base_result(success=False)
            info.update(status=self.status, success=False, killed=True)
            return StepResult(observation=output, reward=0.0, done=True, info=info)
        if out.get("task_completed"):
            self.task_completed = True
            return self._finish(output, "completed", info)
        if self.interactions >= self.max_interactions:
            return self._finish(output, "limit_reached", info)
        return StepResult(observation=output, info=info)

    def _code_of(self, action: Action, info: dict) -> Optional[str]:
        if self.protocol == "text":
            if not isinstance(action, str):
                raise TypeError(f"protocol='text' takes str actions (a reply with a ```python "
                                f"block), got {type(action).__name__}")
            code = proto.extract_code(action)
            if code is None or not code.strip():
                info["invalid_action"] = proto.NO_CODE_MESSAGE
                return None
            return code
        if isinstance(action, str):
            info["invalid_action"] = proto.NO_TOOL_MESSAGE
            return None
        if not isinstance(action, ToolCall):
            raise TypeError(f"protocol='function' takes ToolCall (or str) actions, got "
                            f"{type(action).__name__}")
        if action.name != proto.TOOL_NAME:
            info["invalid_action"] = (f"Unknown tool {action.name!r}; the only tool is "
                                      f"`{proto.TOOL_NAME}`.")
            return None
        code = (action.arguments or {}).get("code") if isinstance(action.arguments, dict) else None
        if not isinstance(code, str) or not code.strip():
            info["invalid_action"] = (f"`{proto.TOOL_NAME}` needs the argument `code`: the Python "
                                      "code to run, as a string.")
            return None
        return code

    # -- scoring -------------------------------------------------------------------------------
    def _base_result(self, success: bool, **extra: Any) -> dict:
        d = self.task.data
        out = {"success": bool(success), "score": 1.0 if success else 0.0,
               "task_id": d["task_id"], "scenario_id": d.get("scenario_id"),
               "difficulty": d.get("difficulty"), "template": d.get("template"),
               "status": self.status, "interactions": self.interactions,
               "task_completed": self.task_completed, "pass_count": 0, "num_tests": None,
               "passes": [], "failures": []}
        out.update(extra)
        return out

    def _evaluate_now(self) -> dict:
        try:
            out = self._conn.evaluate(self.episode_id)
        except InfraError as e:
            self._result = self._base_result(False, infra_error=True, error=str(e))
            return self._result
        self.eval_timings = dict(out.get("timings") or {})
        if "tracker" not in out:
            self._result = self._base_result(False, infra_error=bool(out.get("infra_error")),
                                             error=out.get("error"))
            return self._result
        tr = out["tracker"]
        self._result = self._base_result(
            bool(tr.get("success")), pass_count=len(tr.get("passes", [])),
            num_tests=tr.get("num_tests"), difficulty=tr.get("difficulty"),
            passes=[p["requirement"] for p in tr.get("passes", [])],
            failures=[{"requirement": f["requirement"], "trace": f.get("trace", "")}
                      for f in tr.get("failures", [])])
        return self._result

    def _evaluate_sync(self) -> dict:
        if self.task is None:
            raise RuntimeError("evaluate() before reset(task): nothing to score")
        if self._result is not None:
            return dict(self._result)
        if self.episode_id is None:
            raise RuntimeError("evaluate(): the episode is closed")
        res = dict(self._evaluate_now())
        if not self.done:  # a mid-episode look: the state may still change
            self._result = None
        return res

    def _close_sync(self) -> None:
        self._close_episode()
