"""Builds the run's tasks and environments from their resolved spec (``train.spec.EnvSpec``), and
the MFU peak, so that the loop, ``launch/evaluate.py``, Harness-S's evolution and tests draw
exactly what training uses. The policy (model, mesh, initial weights, learner) is built by
``rl.policy``.
"""
from __future__ import annotations

from typing import Optional

from harness_jax.data import tasksets
from harness_jax.envs import registry
from harness_jax.train import telemetry

PLATFORMS = ("cpu", "gpu", "tpu")                              # what the mesh runs on (``peak_flops``)
# mesh.chip: accelerators a preset can be sized for, with their HBM (bytes) and bf16 dense peak
# (FLOP/s) as the vendors state them (train/aot.py budgets; the MFU peak without log.peak_flops)
CHIP_HBM = {"h100": 80e9, "h200": 141e9, "v5p": 95e9, "v6e": 32e9}
CHIP_BF16_PEAK = {"h100": 989e12, "h200": 989e12, "v5p": 459e12, "v6e": 918e12}


# --------------------------------------------------------------------------------- MFU peak
def peak_flops(peak: float, platform: str, chip: str = "") -> float:
    """Per-device peak FLOP/s for MFU: ``log.peak_flops``, else the bf16 dense peak of
    ``mesh.chip``, else measured on CPU (0 = unknown)."""
    if peak:
        return float(peak)
    if chip:
        return CHIP_BF16_PEAK[chip]
    return telemetry.measure_matmul_peak_flops() if platform == "cpu" else 0.0


# ------------------------------------------------------------------------------ environment
def split_options(env, n: Optional[int] = None, seed_offset: int = 0) -> dict:
    """``registry.load_split`` arguments of the environment spec (``train.spec.EnvSpec``): ``n``
    replaces ``env.num_tasks``; ``seed_offset`` shifts the generator seed."""
    kw = dict(env.split_kwargs)
    if n is not None and "n" in kw:
        kw["n"] = int(n)
    if seed_offset and "seed" in kw:
        kw["seed"] = int(kw["seed"]) + int(seed_offset)
    return kw


def task_source(env, split: str, n: Optional[int] = None):
    """The tasks of ``split``: the built task set ``env.taskset`` read lazily (a random-access
    ``tasksets.TaskSetSource`` of the whole split, what ``TaskStream`` takes) when its
    ``data_dir`` is set, else ``registry.load_split`` with the family's section (``n`` replaces
    ``env.num_tasks`` there). The test split is sealed either way (open it inside
    ``registry.sealed_test_access``; a test source makes its tasks on access, so materialise
    them there, as ``load_tasks`` does)."""
    ts = env.taskset
    if ts.data_dir:
        return tasksets.open_split(ts.data_dir, env.name, split, config=ts.config, version=ts.version or None)
    return registry.load_split(env.name, split, **split_options(env, n))


def load_tasks(env, split: str, n: Optional[int] = None, seed_offset: int = 0) -> list:
    """The first ``n`` tasks (all when None) of ``split`` as a list: from ``task_source``, or, with
    ``seed_offset`` (auxiliary draws such as SFT demonstrations, disjoint from the task stream),
    from the registry's generator with the seed shifted (also when a task set is configured)."""
    if seed_offset:
        tasks = registry.load_split(env.name, split, **split_options(env, n, seed_offset))
        return tasks[:n] if n is not None else tasks
    src = task_source(env, split, n)
    m = len(src) if n is None else min(int(n), len(src))
    return list(src[:m]) if isinstance(src, list) else [src[i] for i in range(m)]


def env_factory(env):
    """A no-argument (picklable) factory of fresh environments of the spec's family."""
    return registry.EnvFactory(env.name, dict(env.env_kwargs))
