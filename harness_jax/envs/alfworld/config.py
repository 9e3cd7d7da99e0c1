"""The typed ``config.env.alfworld`` section (registered with the family in ``__init__``)."""
from __future__ import annotations

import ml_collections

from harness_jax.config_schema import EnvSection, or_none


def _section() -> ml_collections.ConfigDict:
    s = ml_collections.ConfigDict()
    s.max_steps = 0                   # the environment's own step limit (0 = the family default)
    s.data_dir = ""                   # real ALFWorld games (train / valid_seen / valid_unseen dirs; "" = generated games)
    s.task_types = ()                 # generated task types (() = all six)
    s.cache_dir = ""                  # cache of generated games as JSON ("" = no cache)
    return s


def _env_kwargs(env) -> dict:
    s = env.alfworld
    return dict(protocol=env.protocol, max_steps=or_none(int(s.max_steps)), data_dir=or_none(s.data_dir))


def _split_kwargs(env) -> dict:
    s = env.alfworld
    return dict(n=int(env.num_tasks), seed=int(env.task_seed), data_dir=or_none(s.data_dir),
                task_types=or_none(tuple(s.task_types)), cache_dir=or_none(s.cache_dir))


SECTION = EnvSection(section=_section, env_kwargs=_env_kwargs, split_kwargs=_split_kwargs,
                     at_least={"max_steps": 0})
