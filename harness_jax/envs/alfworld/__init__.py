"""ALFWorld on the real engine: generated ``game.tw-pddl`` problems (all six task types,
validated by the shipped handcoded expert), real game files when available, and the
AgentBench-style protocol (``harness_jax.envs.textgame``)."""
from harness_jax.envs.alfworld.env import (ENV_NAME, INSTRUCTION, ALFWorldEnv, generated_tasks,
                                           load_game_dir, load_split, make_task)
from harness_jax.envs.alfworld.generator import (SHORT_NAMES, TASK_TYPES, build_problem,
                                                 game_data, generate_game, generate_games,
                                                 run_expert, write_game)

__all__ = ["ENV_NAME", "INSTRUCTION", "ALFWorldEnv", "SHORT_NAMES", "TASK_TYPES",
           "build_problem", "game_data", "generate_game", "generate_games", "generated_tasks",
           "load_game_dir", "load_split", "make_task", "run_expert", "write_game"]

from harness_jax.envs import registry  # noqa: E402
from harness_jax.envs.alfworld.config import SECTION  # noqa: E402

registry.register(registry.EnvSpec(
    name=ENV_NAME, make=ALFWorldEnv, load_split=load_split,
    description="ALFWorld text games on the real alfworld engine; generated game.tw-pddl",
    config=SECTION))
