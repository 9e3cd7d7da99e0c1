"""The SWE family's registry glue, in one place (ported by the lead when the registry changes).

``SPEC`` is what ``registry._ensure_builtins`` registers under the name ``"swe"``:
``registry.make("swe", protocol="function")`` and ``registry.load_split("swe", split, n=..,
seed=..)`` (generated instances; ``path=`` reads a SWE-bench/SWE-Gym instance file instead and
partitions it by content hash). The sealed test split is enforced by ``registry.load_split``
itself and again by ``generate_instances`` / ``make_task`` for direct callers.
"""
from __future__ import annotations

from typing import Optional, Sequence

from harness_jax.envs.registry import EnvSpec, partition_tasks


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
