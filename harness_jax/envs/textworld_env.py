"""``TextWorldEnv``: TextWorld games made with ``tw-make`` (coin collector, treasure hunter,
cooking, simple, custom quests), played with the AgentBench-style protocol of
``harness_jax.envs.textgame``.

A task names a game by its recipe, e.g. ``{"challenge": "tw-coin_collector", "args":
{"level": 5}, "seed": 1}`` or ``{"challenge": "custom", "args": {"world-size": 5,
"nb-objects": 10, "quest-length": 5}, "seed": 1234}``. The game file is built on first use with
the ``tw-make`` command (Inform7 ships in the textworld wheel; 5-20 s per game on 2 cores) and
cached under ``cache_dir`` by the task's content hash, so each recipe is compiled once per
machine. Reward 1 when the game is won; ``info["game_score"]`` carries TextWorld's points.
"""
from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import warnings
from typing import Optional, Sequence

import ml_collections

from harness_jax.config_schema import EnvSection, or_none
from harness_jax.envs import registry, splits
from harness_jax.envs.base import InfraError, Task, content_hash
from harness_jax.envs.textgame import GameObs, TextGameEnv

ENV_NAME = "textworld"
CHALLENGES = ("tw-coin_collector", "tw-treasure_hunter", "tw-simple", "tw-cooking", "custom")

INSTRUCTION = """You are playing a text adventure game. Reach the goal described at the start by taking one action per turn.
Every turn you get the list of available actions; choose exactly one of them.
Reply in the format:
THOUGHT: <optional short reasoning>
ACTION: <one of the available actions>
Repeating the same action three times in a row ends the episode as a failure."""


def default_cache_dir() -> str:
    return os.environ.get("HARNESS_JAX_TEXTWORLD_CACHE",
                          os.path.join(os.path.expanduser("~"), ".cache", "harness_jax",
                                       "textworld"))


def make_task(challenge: str, args: Optional[dict] = None, seed: int = 0,
              split: str = "train") -> Task:
    if challenge not in CHALLENGES:
        raise ValueError(f"challenge={challenge!r}: expected one of {CHALLENGES}")
    args = dict(args or {})
    for k, v in args.items():
        if not isinstance(k, str) or not k.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"args: bad option name {k!r} (use tw-make's option names, e.g. "
                             "'level' or 'quest-length')")
        if not isinstance(v, (bool, int, float, str)):
            raise ValueError(f"args[{k!r}]={v!r}: expected a bool, number or string")
    return Task(env_name=ENV_NAME, data={"challenge": challenge, "args": args,
                                         "seed": int(seed)},
                split=split, category=challenge)


def tw_make_command(data: dict, output: str) -> list:
    exe = shutil.which("tw-make")
    cmd = [exe] if exe else [sys.executable, "-m", "textworld.scripts.tw_make"]
    cmd += [data["challenge"]]
    for k, v in sorted(data.get("args", {}).items()):
        opt = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            if v:
                cmd.append(opt)
        else:
            cmd += [opt, str(v)]
    cmd += ["--seed", str(int(data.get("seed", 0))), "--output", output, "-f", "--silent"]
    return cmd


def build_game(task: Task, cache_dir: Optional[str] = None, timeout_s: float = 300) -> str:
    """Path of the task's ``.z8`` game, running ``tw-make`` if it is not cached yet."""
    cache_dir = cache_dir or default_cache_dir()
    os.makedirs(cache_dir, exist_ok=True)
    key = content_hash(task.data)
    path = os.path.join(cache_dir, f"{key}.z8")
    if os.path.exists(path) and os.path.exists(path[:-3] + ".json"):
        return path
    tmp = os.path.join(cache_dir, f"{key}.tmp{os.getpid()}.z8")
    cmd = tw_make_command(task.data, tmp)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        raise InfraError(f"tw-make timed out after {timeout_s} s: {' '.join(cmd)}") from e
    if proc.returncode != 0 or not os.path.exists(tmp):
        raise InfraError(f"tw-make failed ({proc.returncode}): {' '.join(cmd)}\n"
                         f"{proc.stderr[-2000:]}")
    for ext in (".json", ".ni", ".z8"):  # the .z8 last: its presence marks a complete build
        if os.path.exists(tmp[:-3] + ext):
            os.replace(tmp[:-3] + ext, path[:-3] + ext)
    return path


class TextWorldEnv(TextGameEnv):
    name = ENV_NAME
    instruction_text = INSTRUCTION

    def __init__(self, protocol: str = "text", max_steps: Optional[int] = None,
                 cache_dir: Optional[str] = None, **kw):
        super().__init__(protocol=protocol, max_steps=max_steps, **kw)
        self.cache_dir = cache_dir
        self._game = None
        self.walkthrough: list = []
        self.max_score = 0.0

    def _load(self, task: Task) -> GameObs:
        try:
            import textworld
        except ImportError as e:
            raise ImportError("the TextWorld environment needs the textworld package") from e
        path = build_game(task, self.cache_dir)
        infos = textworld.EnvInfos(admissible_commands=True, won=True, lost=True, score=True,
                                   max_score=True, extras=["walkthrough"])
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            # jericho warns that tw-make's own games lack its per-game score tables; TextWorld
            # tracks score and win itself, so the warning does not apply
            warnings.simplefilter("ignore")
            env = textworld.start(path, infos)
            gs = env.reset()
        self._game = env
        self.walkthrough = list(gs.get("extra.walkthrough") or [])
        self.max_score = float(gs.get("max_score") or 0)
        return self._obs(gs)

    @staticmethod
    def strip_banner(text: str) -> str:
        """Drops TextWorld's ASCII-art title (lines drawn with ``$$``, ``|`` and ``_``) and the
        interpreter's prompt/status line (``>   -= Room =-0/1``)."""
        keep = [ln for ln in text.splitlines()
                if not ("$$" in ln or ln.lstrip().startswith(">")
                        or (ln.strip() and set(ln.strip()) <= set("_|\\/ ")))]
        return "\n".join(keep).strip()

    def _obs(self, gs, done: bool = False) -> GameObs:
        return GameObs(text=self.strip_banner(gs.feedback or ""), admissible=list(gs["admissible_commands"] or []),
                       won=bool(gs["won"]), lost=bool(gs["lost"]), done=done,
                       score=float(gs["score"] or 0),
                       info={"game_score": float(gs["score"] or 0),
                             "max_score": self.max_score})

    def _play(self, command: str) -> GameObs:
        with contextlib.redirect_stdout(io.StringIO()):
            gs, _, done = self._game.step(command)
        return self._obs(gs, done=bool(done))



# A small mix of recipes per split; seeds come from the split's own stream.
DEFAULT_RECIPES = (
    ("tw-coin_collector", {"level": 5}),
    ("tw-cooking", {"recipe": 2, "take": 1, "go": 6, "cook": True, "cut": True, "open": True}),
    ("custom", {"world-size": 5, "nb-objects": 10, "quest-length": 5}),
)


def load_split(split: str, n: int = 6, seed: int = 0,
               recipes: Sequence = DEFAULT_RECIPES) -> list[Task]:
    """Registry loader: ``n`` game recipes cycling through ``recipes`` with seeds drawn from
    the split's own stream (games are compiled lazily at ``reset``)."""
    out = []
    for i in range(n):
        challenge, args = recipes[i % len(recipes)]
        s = splits.split_seed(split, seed, i) % 1_000_000
        out.append(make_task(challenge, args, s, split))
    return out


def _section() -> ml_collections.ConfigDict:
    """The typed ``config.env.textworld`` section."""
    s = ml_collections.ConfigDict()
    s.max_steps = 0                   # the environment's own step limit (0 = the family default)
    s.cache_dir = ""                  # compiled games ("" = $HARNESS_JAX_TEXTWORLD_CACHE or ~/.cache/harness_jax/textworld)
    return s


def _env_kwargs(env) -> dict:
    s = env.textworld
    return dict(protocol=env.protocol, max_steps=or_none(int(s.max_steps)), cache_dir=or_none(s.cache_dir))


def _split_kwargs(env) -> dict:
    return dict(n=int(env.num_tasks), seed=int(env.task_seed))


registry.register(registry.EnvSpec(
    name=ENV_NAME, make=TextWorldEnv, load_split=load_split,
    description="TextWorld tw-make games (coin collector, cooking, custom quests)",
    config=EnvSection(section=_section, env_kwargs=_env_kwargs, split_kwargs=_split_kwargs,
                      at_least={"max_steps": 0})))
