"""The SWE family's registry entry (registered by ``envs/swe/__init__.py``).

``SPEC`` is registered under the name ``"swe"``:
``registry.make("swe", protocol="function")`` and ``registry.load_split("swe", split, n=..,
seed=..)`` (generated instances; ``path=`` reads a SWE-bench/SWE-Gym instance file instead and
partitions it by content hash). The sealed test split is enforced where a ``Task`` is made, and
by ``generate_instances`` for callers that take raw instance dicts.
"""
from __future__ import annotations

from typing import Optional, Sequence

from harness_jax.envs.registry import EnvSpec
from harness_jax.envs.splits import partition_tasks


def make_env(**kw):
    from harness_jax.envs.swe.env import SWEEnv
    return SWEEnv(**kw)


def load_split(split: str, n: int = 20, seed: int = 0, path: Optional[str] = None,
               fractions: Optional[dict] = None, projects: Optional[Sequence[str]] = None,
               kinds: Optional[Sequence[str]] = None) -> list:
    from harness_jax.envs.swe import generate, instances
    if path is not None:
        tasks = [instances.make_task(i, "train") for i in instances.load_instances(path)]
        return partition_tasks(tasks, split, fractions)
    insts = generate.generate_instances(n, seed=seed, split=split, projects=projects,
                                        kinds=kinds, fractions=fractions)
    return [instances.make_task(i, split) for i in insts]


SPEC = EnvSpec("swe", make_env, load_split,
               "SWE-Gym-style repository repair: bug-injected corpus projects, sandboxed bash "
               "and editor tools, FAIL_TO_PASS/PASS_TO_PASS grading")
