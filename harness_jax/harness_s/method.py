"""Harness-S registered as a training method: it owns the ``harness_s`` config section (checked
and resolved into ``config.HarnessSSpec``) and gives a plain training run its extension
(``training.HarnessSExtension``) when the section uses a pool or resamples all-fail groups under
H0 (``HarnessSSpec.trains``), and ``launch/evaluate.py`` its
Rank-1 routing (``rank1.rank1_main``)."""
from __future__ import annotations

from harness_jax.harness_s.config import harness_s_spec
from harness_jax.harness_s.rank1 import rank1_main
from harness_jax.harness_s.routers import find_harness_s_problems
from harness_jax.harness_s.training import HarnessSExtension
from harness_jax.train import extensions


def resolve(config, bad, check_paths: bool = True):
    """The ``harness_s`` section's spec; every problem of it goes to ``bad``."""
    problems = find_harness_s_problems(config, check_paths=check_paths)
    for p in problems:
        bad(p.path, p.value, p.problem, p.fix)
    return harness_s_spec(config.harness_s)


def run_extensions(hs, run) -> list:
    return [HarnessSExtension(hs)] if hs.trains else []


extensions.register(extensions.Method(section="harness_s", resolve=resolve, extensions=run_extensions,
                                      routings={"rank1": rank1_main}))
