"""SWE-Gym-style repository tasks offline (issue 17).

    from harness_jax.envs import swe
    instances = swe.generate_instances(n=20, seed=0)   # dicts in SWE-bench's instance schema
    swe.grade(instance, patch_text)                    # True iff FAIL_TO_PASS and PASS_TO_PASS pass
    env = swe.SWEEnv(protocol="function")              # bash / str_replace_editor / submit
    prompt = env.reset(swe.make_task(instances[0]))

Modules: ``repo`` (corpus, deterministic git repositories), ``mutate`` (AST bug injection),
``testing`` (pytest runs and log parsing), ``probe`` + ``statement`` (issue text from the
failure), ``generate`` (instances, splits, cache), ``instances`` (schema, loader for real
SWE-Gym/SWE-bench files), ``sandbox`` (bubblewrap), ``tools`` (editor, tool specs), ``env``,
``grading`` (+ predictions files), ``cli``, ``docker_runtime`` (optional, for real instances),
``registration`` (registry glue).
"""
from harness_jax.envs import registry
from harness_jax.lazy import lazy_getattr
from harness_jax.envs.swe.generate import generate_instances
from harness_jax.envs.swe.grading import (filter_patch, grade, grade_predictions, grade_report,
                                          load_predictions)
from harness_jax.envs.swe.instances import (ENV_NAME, InstanceError, load_instances, make_task,
                                            normalize_instance, save_instances)
from harness_jax.envs.swe.mutate import KINDS as MUTATION_KINDS
from harness_jax.envs.swe.sandbox import SandboxLimits, SandboxUnavailable, bwrap_status


# the env imports base's asyncio machinery: loaded on first use
__getattr__ = lazy_getattr(__name__, {"SWEEnv": "harness_jax.envs.swe.env",
                                      "reference_actions": "harness_jax.envs.swe.env"})


def generate_tasks(n: int, seed: int = 0, split: str = "train", **kw) -> list:
    """``n`` generated instances of ``split`` as ``Task`` objects."""
    return [make_task(i, split) for i in generate_instances(n, seed=seed, split=split, **kw)]


__all__ = ["ENV_NAME", "MUTATION_KINDS", "InstanceError", "SandboxLimits", "SandboxUnavailable",
           "SWEEnv", "bwrap_status", "filter_patch", "generate_instances", "generate_tasks",
           "grade", "grade_predictions", "grade_report", "load_instances", "load_predictions",
           "make_task", "normalize_instance", "reference_actions", "save_instances"]

from harness_jax.envs.swe.registration import SPEC as _SPEC  # noqa: E402

registry.register(_SPEC)
