"""``ALFWorldEnv``: ALFWorld text games on the real engine (``textworld`` PDDL backend with the
ALFRED domain, grammar and ``AlfredDemangler`` of the ``alfworld`` wheel).

Tasks are either generated records (``generator.generate_game``: the PDDL problem and goal
text are in ``task.data``) or real ALFWorld game files (``task.data["game_file"]``, a path
relative to ``data_dir`` or absolute) found by ``load_game_dir``.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
from typing import Optional, Sequence

from harness_jax.envs import splits
from harness_jax.envs.base import Task
from harness_jax.envs.alfworld import generator as gen
from harness_jax.envs.textgame import GameObs, TextGameEnv

ENV_NAME = "alfworld"

INSTRUCTION = """Interact with a household to solve a task. You are an agent in a household environment; your goal is to complete the task given at the start, by taking one action per turn.
At the beginning you get a description of the room and your task. Every turn you get the list of available actions; choose exactly one of them.
Reply in the format:
THOUGHT: <optional short reasoning>
ACTION: <one of the available actions>
If the environment answers "Nothing happens.", the previous action had no effect; try something else. Repeating the same action three times in a row ends the episode as a failure."""

FUNCTION_INSTRUCTION = """Interact with a household to solve a task. You are an agent in a household environment; your goal is to complete the task given at the start. Every turn call the tool `take_action` with exactly one of the available actions listed in the last observation. If the environment answers "Nothing happens.", the action had no effect; try something else. Repeating the same action three times in a row ends the episode as a failure."""


def make_task(record: dict, split: str = "train") -> Task:
    tt = record.get("task_type")
    if tt not in gen.TASK_TYPES:
        raise ValueError(f"ALFWorld record: task_type={tt!r}; expected one of {gen.TASK_TYPES}")
    if "pddl_problem" not in record and "game_file" not in record:
        raise ValueError("ALFWorld record: needs pddl_problem (generated) or game_file (real "
                         "ALFWorld data)")
    return Task(env_name=ENV_NAME, data=record, split=split, category=tt)


def load_game_dir(data_dir: str, split: str = "train", task_types: Optional[Sequence] = None,
                  limit: Optional[int] = None) -> list[Task]:
    """Real ALFWorld games: every ``*/traj_data.json`` + ``game.tw-pddl`` under ``data_dir``
    whose game is marked solvable (as ``AlfredTWEnv.collect_game_files`` does)."""
    if not os.path.isdir(data_dir):
        raise FileNotFoundError(f"ALFWorld data_dir {data_dir!r} is not a directory (expected "
                                "e.g. json_2.1.1/valid_seen with one folder per trial)")
    tasks = []
    for root, _, files in sorted(os.walk(data_dir)):
        if "traj_data.json" not in files or "game.tw-pddl" not in files:
            continue
        if "movable" in root or "Sliced" in root:
            continue
        with open(os.path.join(root, "traj_data.json")) as f:
            traj = json.load(f)
        if traj.get("task_type") not in gen.TASK_TYPES:
            continue
        if task_types and traj["task_type"] not in task_types:
            continue
        with open(os.path.join(root, "game.tw-pddl")) as f:
            if not json.load(f).get("solvable", False):
                continue
        rel = os.path.relpath(os.path.join(root, "game.tw-pddl"), data_dir)
        tasks.append(make_task({"task_type": traj["task_type"], "game_file": rel,
                                "data_dir": os.path.abspath(data_dir)}, split))
        if limit is not None and len(tasks) >= limit:
            break
    return tasks


class ALFWorldEnv(TextGameEnv):
    """AgentBench-style ALFWorld episodes (``max_steps`` 35 text / 20 function by default)."""

    name = ENV_NAME
    process_concurrency = 1     # concurrent resets of the PDDL engine in one process fail

    def __init__(self, protocol: str = "text", max_steps: Optional[int] = None,
                 data_dir: Optional[str] = None, with_expert: bool = False, **kw):
        super().__init__(protocol=protocol, max_steps=max_steps, **kw)
        self.data_dir = data_dir
        self.with_expert = with_expert
        self._game = None

    @property
    def instruction(self) -> str:
        return INSTRUCTION if self.protocol == "text" else FUNCTION_INSTRUCTION

    def _game_source(self, task: Task):
        d = task.data
        if "game_file" in d:
            path = d["game_file"]
            if not os.path.isabs(path):
                base = self.data_dir or d.get("data_dir")
                if not base:
                    raise ValueError("ALFWorld task with a relative game_file: give "
                                     "ALFWorldEnv(data_dir=...) or task.data['data_dir']")
                path = os.path.join(base, path)
            return path
        return gen.game_data(d)

    def _load(self, task: Task) -> GameObs:
        gen._require_alfworld()
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert
        from textworld.envs.pddl import PddlEnv
        infos = textworld.EnvInfos(won=True, admissible_commands=True,
                                   facts=self.with_expert,
                                   extras=["expert_plan"] if self.with_expert else [])
        env = AlfredDemangler(shuffle=False)(PddlEnv(infos))
        src = self._game_source(task)
        if self.with_expert:
            if not isinstance(src, str):
                raise ValueError("with_expert=True needs game files on disk (the expert reads "
                                 "traj_data.json): use generator.write_game first")
            env = AlfredExpert()(env)
        with contextlib.redirect_stdout(io.StringIO()):
            env.load(src)
            gs = env.reset()
        self._game = env
        return self._obs(gs, first=True)

    def _obs(self, gs, first: bool = False) -> GameObs:
        text = gs.feedback or ""
        if first and "\n\n" in text:
            # AgentBench drops the "-= Welcome to TextWorld, ALFRED! =-" banner
            text = "\n\n".join(text.split("\n\n")[1:])
        info = {}
        if self.with_expert and gs.get("extra.expert_plan"):
            info["expert_plan"] = list(gs["extra.expert_plan"])
        return GameObs(text=text, admissible=list(gs["admissible_commands"] or []),
                       won=bool(gs["won"]), done=bool(gs["won"]), info=info)

    def _play(self, command: str) -> GameObs:
        with contextlib.redirect_stdout(io.StringIO()):
            gs, _, done = self._game.step(command)
        return self._obs(gs)



def generated_tasks(n: int, seed: int = 0, split: str = "train",
                    task_types: Optional[Sequence[str]] = None) -> list[Task]:
    return [make_task(r, split) for r in gen.generate_games(n, seed=seed, task_types=task_types)]


def load_split(split: str, n: int = 12, seed: int = 0, data_dir: Optional[str] = None,
               task_types: Optional[Sequence[str]] = None, cache_dir: Optional[str] = None,
               ) -> list[Task]:
    """Registry loader: real games under ``data_dir/<split-dir>`` when given (``train`` ->
    ``train``, ``selection``/``search`` -> ``valid_seen``, ``test`` -> ``valid_unseen``), else
    ``n`` generated games from the split's own seed stream, cached as JSON in ``cache_dir``
    (generation plays the expert: about 2-6 s per game)."""
    splits.check_split(split)
    if data_dir is not None:
        sub = {"train": "train", "search": "valid_seen", "selection": "valid_seen",
               "test": "valid_unseen"}[split]
        return load_game_dir(os.path.join(data_dir, sub), split, task_types, limit=n)
    s = splits.split_seed(split, seed)
    path = None
    if cache_dir:
        tt = ",".join(task_types) if task_types else "all"
        path = os.path.join(cache_dir, f"alfworld_{split}_{seed}_{n}_{tt}.json")
        if os.path.exists(path):
            with open(path) as f:
                return [make_task(r, split) for r in json.load(f)]
    records = gen.generate_games(n, seed=s, task_types=task_types)
    if path:
        os.makedirs(cache_dir, exist_ok=True)
        with open(path, "w") as f:
            json.dump(records, f)
    return [make_task(r, split) for r in records]
