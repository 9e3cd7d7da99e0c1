"""The AgentBench-style protocol shared by the text-game families (ALFWorld, TextWorld).

* text protocol: the reply holds ``ACTION: <command>`` (an optional ``THOUGHT: ...`` before
  it); function protocol: the tool ``take_action(action)``;
* observations end with ``AVAILABLE ACTIONS: a, b, ...`` (the admissible commands);
* free text is snapped to the nearest admissible command (exact match first, else the
  highest smoothed sentence-BLEU, as AgentBench does with nltk);
* three identical consecutive actions end the episode as a failure; the step limit is 35
  (v0.2) or 20 (FC) by default; reward 1 when the game is won.

Subclasses implement ``_load(task)`` and ``_play(command)`` on the real game engine.
"""
from __future__ import annotations

import abc
import dataclasses
import math
import re
from collections import Counter
from typing import Optional, Sequence

from harness_jax.envs.base import Action, BlockingEnv, StepResult, Task, ToolCall

_ACTION_RE = re.compile(r"ACTION:\s*(.*)", re.IGNORECASE)
_TOKEN_RE = re.compile(r"[a-z0-9]+")


def _tokens(text: str) -> list:
    return _TOKEN_RE.findall(text.lower())


def sentence_bleu(candidate: Sequence[str], reference: Sequence[str], max_n: int = 4) -> float:
    """Sentence BLEU of ``candidate`` against one ``reference`` (token lists), with add-one
    smoothing of the n-gram precisions (so short commands still get graded scores)."""
    if not candidate or not reference:
        return 0.0
    log_p = 0.0
    for n in range(1, max_n + 1):
        cand = Counter(tuple(candidate[i:i + n]) for i in range(len(candidate) - n + 1))
        ref = Counter(tuple(reference[i:i + n]) for i in range(len(reference) - n + 1))
        overlap = sum(min(c, ref[g]) for g, c in cand.items())
        total = max(sum(cand.values()), 0)
        log_p += math.log((overlap + 1.0) / (total + 1.0))
    bp = 1.0 if len(candidate) >= len(reference) else math.exp(1 - len(reference) / len(candidate))
    return bp * math.exp(log_p / max_n)


def snap_to_admissible(text: str, admissible: Sequence[str]) -> tuple[Optional[str], bool]:
    """``(command, exact)``: the admissible command ``text`` names, or the closest one by BLEU
    (``exact`` False); ``(None, False)`` when there is nothing to choose from."""
    if not admissible:
        return None, False
    norm = " ".join(text.strip().strip(".").lower().split())
    for a in admissible:
        if " ".join(a.lower().split()) == norm:
            return a, True
    cand = _tokens(norm)
    best, best_s = admissible[0], -1.0
    for a in admissible:
        s = sentence_bleu(cand, _tokens(a))
        if s > best_s:
            best, best_s = a, s
    return best, False


def parse_action_text(reply: str) -> Optional[str]:
    """The command after ``ACTION:`` (first line only), or None."""
    m = _ACTION_RE.search(reply)
    if m is None:
        return None
    line = m.group(1).strip().splitlines()[0].strip() if m.group(1).strip() else ""
    return line.strip("`\"' ") or None


TOOL_SPECS = [{"type": "function", "function": {
    "name": "take_action",
    "description": "Perform one action in the environment; it must be one of the available "
                   "actions listed in the last observation.",
    "parameters": {"type": "object",
                   "properties": {"action": {"type": "string",
                                             "description": "the action to take"}},
                   "required": ["action"]}}}]


@dataclasses.dataclass
class GameObs:
    text: str
    admissible: list
    won: bool = False
    lost: bool = False
    done: bool = False
    score: float = 0.0
    info: dict = dataclasses.field(default_factory=dict)


class TextGameEnv(BlockingEnv):
    """Base of the text-game environments (see module docstring)."""

    instruction_text = ""

    def __init__(self, protocol: str = "text", max_steps: Optional[int] = None,
                 snap: bool = True, repeat_limit: int = 3, show_admissible: bool = True):
        if protocol not in ("text", "function"):
            raise ValueError(f"protocol={protocol!r}: expected 'text' or 'function'")
        if repeat_limit < 0:
            raise ValueError(f"repeat_limit={repeat_limit} must be >= 0 (0 disables the rule)")
        self.protocol = protocol
        self.max_steps = int(max_steps) if max_steps is not None else (
            35 if protocol == "text" else 20)
        if self.max_steps < 1:
            raise ValueError(f"max_steps={max_steps} must be >= 1")
        self.snap = snap
        self.repeat_limit = repeat_limit
        self.show_admissible = show_admissible
        self.task: Optional[Task] = None
        self._state: Optional[GameObs] = None
        self._reset_counters()

    # -- engine hooks --------------------------------------------------------------------
    @abc.abstractmethod
    def _load(self, task: Task) -> GameObs:
        """Loads and resets the task's game; returns the first observation."""

    @abc.abstractmethod
    def _play(self, command: str) -> GameObs:
        """Sends one admissible (or free) command to the game."""

    def _close_game(self) -> None:
        """Closes the engine's game object (``self._game``, set by ``_load``), if any."""
        game = getattr(self, "_game", None)
        if game is not None:
            try:
                game.close()
            finally:
                self._game = None

    # -- protocol ------------------------------------------------------------------------
    @property
    def instruction(self) -> str:
        return self.instruction_text

    def tool_specs(self) -> list:
        return [dict(s) for s in TOOL_SPECS] if self.protocol == "function" else []

    def _reset_counters(self):
        self.steps = 0
        self.done = False
        self.won = False
        self.status = "running"
        self.actions: list = []
        self.raw_actions: list = []
        self.score = 0.0

    def render(self, obs: GameObs) -> str:
        text = obs.text.strip()
        if self.show_admissible and obs.admissible and not obs.done:
            text += "\nAVAILABLE ACTIONS: " + ", ".join(obs.admissible)
        return text

    def _reset_sync(self, task: Task) -> str:
        if not isinstance(task, Task):
            raise TypeError(f"reset(task): expected a Task, got {type(task).__name__}")
        self._close_game()
        self._reset_counters()
        self.task = task
        self._state = self._load(task)
        return self.render(self._state)


    def _finish(self, obs_text: str, status: str, info: dict) -> StepResult:
        self.done = True
        self.status = status
        info.update(won=self.won, status=status, success=self.won)
        return StepResult(observation=obs_text, reward=1.0 if self.won else 0.0, done=True,
                          info=info)

    def _command_from(self, action: Action, info: dict) -> Optional[str]:
        if self.protocol == "text":
            if not isinstance(action, str):
                raise TypeError(f"protocol='text' takes str actions, got {type(action).__name__}"
                                "; use protocol='function' for ToolCall actions")
            cmd = parse_action_text(action)
            if cmd is None:
                info["invalid_action"] = (
                    "Your response must contain a line `ACTION: <one of the available "
                    "actions>` (optionally preceded by `THOUGHT: ...`).")
            return cmd
        if isinstance(action, str):
            info["invalid_action"] = ("No tool was called. Call `take_action` with "
                                      "{\"action\": \"<one of the available actions>\"}.")
            return None
        if not isinstance(action, ToolCall):
            raise TypeError(f"protocol='function' takes ToolCall actions, got "
                            f"{type(action).__name__}")
        if action.name != "take_action":
            info["invalid_action"] = f"Unknown tool {action.name!r}; the tool is `take_action`."
            return None
        cmd = (action.arguments or {}).get("action")
        if not isinstance(cmd, str) or not cmd.strip():
            info["invalid_action"] = "take_action needs the argument `action`: a string."
            return None
        return cmd.strip()

    def _step_sync(self, action: Action) -> StepResult:
        if self.task is None or self._state is None:
            raise RuntimeError("step() before reset(task): start an episode first")
        if self.done:
            raise RuntimeError("the episode is over; call reset(task) for a new one")
        self.steps += 1
        info: dict = {"step": self.steps}
        cmd = self._command_from(action, info)
        if cmd is None:
            info["error"] = info["invalid_action"]
            text = info["invalid_action"] + "\n" + self.render(self._state)
            if self.steps >= self.max_steps:
                return self._finish(text, "limit_reached", info)
            return StepResult(observation=text, reward=0.0, done=False, info=info)
        snapped, exact = (snap_to_admissible(cmd, self._state.admissible) if self.snap
                          else (cmd, cmd in self._state.admissible))
        command = snapped if snapped is not None else cmd
        info.update(command=command, raw_command=cmd, snapped=not exact)
        self.actions.append(command)
        # the repetition rule looks at what the agent said (as AgentBench does)
        self.raw_actions.append(" ".join(cmd.lower().split()))
        recent = self.raw_actions[-self.repeat_limit:] if self.repeat_limit else []
        if self.repeat_limit and len(recent) == self.repeat_limit and len(set(recent)) == 1:
            return self._finish(f"The same action was repeated {self.repeat_limit} times: the "
                                "episode ends as a failure.", "repeated_action", info)
        obs = self._play(command)
        if obs.text.strip().lower().startswith("nothing happens"):
            info["error"] = "Nothing happens."   # the engine's word for an action with no effect
        self._state = obs
        self.won = bool(obs.won)
        self.score = obs.score
        info.update(obs.info)
        text = self.render(obs)
        if obs.won:
            return self._finish(text, "won", info)
        if obs.lost or obs.done:
            return self._finish(text, "lost", info)
        if self.steps >= self.max_steps:
            return self._finish(text, "limit_reached", info)
        return StepResult(observation=text, reward=0.0, done=False, info=info)


    def _evaluate_sync(self) -> dict:
        if self.task is None:
            raise RuntimeError("evaluate() before reset(task): nothing to score")
        return {"success": bool(self.won), "score": 1.0 if self.won else 0.0,
                "game_score": self.score, "steps": self.steps, "status": self.status,
                "category": self.task.category}

    @property
    def admissible_commands(self) -> list:
        return list(self._state.admissible) if self._state is not None else []

    def _close_sync(self) -> None:
        self._close_game()
