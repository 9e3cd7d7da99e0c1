"""The one experiment schema every preset starts from (ml_collections ConfigDict).

The schema is declared once, as the typed sections of ``harness_jax.train.schema`` (every field's
type, default and one comment there, with its allowed values or bounds); ``base_config()`` is
their ConfigDict plus every registered environment family's typed section ``env.<family>``
(defined next to the family, ``registry.EnvSpec.config``; ``env.name`` selects which one is
used). Presets change values, never the structure, so ``harness_jax.train.spec.resolve`` checks
any preset and command-line overrides (``--config.rl.group_size=8``) only touch fields that exist
(the launchers lock the dict). Every field is read by the code
(``tests/experiments/test_configs.py`` proves it). Values are the tiny CPU defaults.
"""
from __future__ import annotations

import ml_collections

from harness_jax.envs import registry
from harness_jax.train import schema


def base_config() -> ml_collections.ConfigDict:
    c = schema.defaults()                 # name, seed, num_steps and every typed section of harness_jax.train.schema
    for name, section in sorted(registry.config_sections().items()):
        c.env[name] = section.section()   # typed constructor / split options of each env family
    return c


def use_dbbench_mariadb(c: ml_collections.ConfigDict) -> None:
    """The accelerator presets' DBBench set-up (shared so GPU and TPU runs are comparable)."""
    c.env.name = "dbbench"                # AgentBench DB
    c.env.protocol = "function"           # tool calls (AgentBench-FC)
    c.env.dbbench.engine = "mariadb"      # faithful MySQL engine
    c.env.dbbench.max_rounds = 15         # AgentBench's 15 rounds
    c.env.num_tasks = 20000               # generated training tasks per split
    c.env.max_turns = 15                  # AgentBench's 15 rounds
