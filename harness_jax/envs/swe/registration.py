"""The SWE family's registry entry (registered by ``envs/swe/__init__.py``).

``SPEC`` is registered under the name ``"swe"``:
``registry.make("swe", protocol="function")`` and ``registry.load_split("swe", split, n=..,
seed=..)`` (generated instances; ``path=`` reads a SWE-bench/SWE-Gym instance file instead and
partitions it by content hash). The sealed test split is enforced where a ``Task`` is made, and
by ``generate_instances`` for callers that take raw instance dicts.
"""
from __future__ import annotations

from typing import Optional, Sequence

import ml_collections

from harness_jax.config_schema import EnvSection, or_none
from harness_jax.envs.registry import EnvSpec
from harness_jax.envs.splits import partition_tasks
from harness_jax.envs.swe.prompts import h0
from harness_jax.envs.swe import generate, instances
from harness_jax.envs.swe.env import SWEEnv
from harness_jax.envs.swe.sandbox import SandboxLimits


def make_env(**kw):
    return SWEEnv(**kw)


def load_split(split: str, n: int = 20, seed: int = 0, path: Optional[str] = None,
               fractions: Optional[dict] = None, projects: Optional[Sequence[str]] = None,
               kinds: Optional[Sequence[str]] = None) -> list:
    if path is not None:
        tasks = [instances.make_task(i, "train") for i in instances.load_instances(path)]
        return partition_tasks(tasks, split, fractions)
    insts = generate.generate_instances(n, seed=seed, split=split, projects=projects,
                                        kinds=kinds, fractions=fractions)
    return [instances.make_task(i, split) for i in insts]


def _section() -> ml_collections.ConfigDict:
    """The typed ``config.env.swe`` section."""
    s = ml_collections.ConfigDict()
    s.max_steps = 50                  # the environment's own tool-call limit per episode
    s.command_timeout_s = 120.0       # wall-clock limit of one sandboxed command
    s.grade_timeout_s = 300.0         # wall-clock limit of grading a submitted patch (FAIL_TO_PASS + PASS_TO_PASS)
    s.memory_mb = 4096                # address-space limit per sandboxed process (RLIMIT_AS, MiB)
    s.disk_mb = 256                   # working copy + /tmp size limit of an episode (MiB)
    s.instances_path = ""             # SWE-bench / SWE-Gym instance file, split by content hash ("" = generated instances)
    s.projects = ()                   # generated: corpus projects (() = all)
    s.kinds = ()                      # generated: bug-injection kinds (() = all; envs.swe.MUTATION_KINDS)
    return s


def _env_kwargs(env) -> dict:
    s = env.swe
    limits = SandboxLimits(timeout_s=float(s.command_timeout_s), as_mb=int(s.memory_mb),
                           disk_mb=int(s.disk_mb))
    return dict(protocol=env.protocol, max_steps=int(s.max_steps), limits=limits,
                grade_timeout_s=float(s.grade_timeout_s))


def _split_kwargs(env) -> dict:
    s = env.swe
    return dict(n=int(env.num_tasks), seed=int(env.task_seed), path=or_none(s.instances_path),
                projects=or_none(tuple(s.projects)), kinds=or_none(tuple(s.kinds)))


SECTION = EnvSection(section=_section, env_kwargs=_env_kwargs, split_kwargs=_split_kwargs,
                     at_least={"max_steps": 1, "command_timeout_s": 1e-3, "grade_timeout_s": 1e-3,
                               "memory_mb": 64, "disk_mb": 1})

SPEC = EnvSpec("swe", make_env, load_split,
               "SWE-Gym-style repository repair: bug-injected corpus projects, sandboxed bash "
               "and editor tools, FAIL_TO_PASS/PASS_TO_PASS grading", config=SECTION, h0=h0)
