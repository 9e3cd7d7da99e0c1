"""Agent environments: the protocol (``base``), splits and the sealed test split (``splits``),
environments by name (``registry``; each family registers itself on import), DBBench
(``dbbench``), ALFWorld (``alfworld``), TextWorld (``textworld_env``) and the shared text-game
protocol (``textgame``)."""
from harness_jax.envs.base import (SPLITS, Action, Env, InfraError, StepResult, Task, ToolCall,
                                   content_hash)

__all__ = ["SPLITS", "Action", "Env", "InfraError", "StepResult", "Task", "ToolCall",
           "content_hash"]
