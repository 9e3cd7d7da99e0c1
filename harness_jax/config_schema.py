"""The environment families' typed config sections (the run's own sections are typed in
``harness_jax.train.schema``).

* **Environment sections.** Each environment family owns one typed section of the experiment
  config, ``config.env.<family>`` (its constructor and task-split options, one comment per field),
  described by an ``EnvSection`` that the family passes to ``registry.EnvSpec(config=...)`` when it
  registers itself (``harness_jax/envs/registry.py``), next to its code::

      SECTION = config_schema.EnvSection(section=_section, env_kwargs=_env_kwargs,
                                         split_kwargs=_split_kwargs,
                                         choices={"partition": ("hash", "agentbench")})

  ``env_kwargs(env)`` / ``split_kwargs(env)`` receive the whole ``config.env`` (so they can read the
  shared fields ``protocol``, ``num_tasks``, ``task_seed`` and their own ``env.<family>``) and return
  ``registry.make`` / ``registry.load_split`` keyword arguments. ``choices`` and ``at_least`` are
  facts about the section's fields that the run's spec checks for the selected family.
  ``experiments/configs/common.base_config()`` adds the section of every registered family, so
  ``--config.env.dbbench.engine=mariadb`` works for any preset; there is no central list to edit for
  a new family.

This module imports nothing from the rest of ``harness_jax``, so every layer (env families
included) can import it.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import ml_collections


# ---------------------------------------------------------------------------------------------
# environment sections
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class EnvSection:
    """The typed ``config.env.<family>`` section of one environment family."""

    section: Callable[[], ml_collections.ConfigDict]  # the typed section, defaults = the family's
    env_kwargs: Callable[[Any], dict]                 # config.env -> registry.make(name, **kw)
    split_kwargs: Callable[[Any], dict]               # config.env -> registry.load_split(name, split, **kw)
    choices: Mapping[str, tuple] = dataclasses.field(default_factory=dict)   # field -> allowed values
    at_least: Mapping[str, float] = dataclasses.field(default_factory=dict)  # field -> smallest allowed value

    def __post_init__(self):
        for field in ("section", "env_kwargs", "split_kwargs"):
            if not callable(getattr(self, field)):
                raise TypeError(f"EnvSection.{field} must be callable")
        fields = set(self.section().keys())
        unknown = sorted((set(self.choices) | set(self.at_least)) - fields)
        if unknown:
            raise ValueError(f"EnvSection: choices/at_least name field(s) {unknown} that the "
                             f"section does not have ({sorted(fields)})")


def or_none(v):
    """'' / () / 0 in a typed field mean "the family's default" (None)."""
    return None if v in ("", (), 0, None) else v
