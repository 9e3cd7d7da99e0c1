"""Agent environments: the protocol (``base``), the registry with sealed test splits
(``registry``), DBBench (``dbbench``), ALFWorld (``alfworld``), TextWorld (``textworld_env``)
and the shared text-game protocol (``textgame``). Heavy families import lazily."""
from harness_jax.envs.base import (SPLITS, Action, Env, InfraError, StepResult, Task, ToolCall,
                                   content_hash)

__all__ = ["SPLITS", "Action", "Env", "InfraError", "StepResult", "Task", "ToolCall",
           "content_hash"]
