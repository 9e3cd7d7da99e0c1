"""What every Harness-S config shares: the ``harness_s`` section and the sweeps.

``with_harness_s(c, pool=...)`` mounts ``harness_jax.harness_s.harness_s_section()`` as
``c.harness_s`` (typed fields with one comment each; validated by
``harness_jax.config_validation`` through ``harness_s.find_harness_s_problems``) and sets the
method's defaults. A config takes its pool file as the config argument
(``--config=experiments/configs/harness_s/<name>.py:/path/pool-<hash>.json``, which sweeps keep)
or as ``--config.harness_s.pool=...``.

The pipeline of every DBBench CPU config (each step's command in the config docstrings):

1. SFT warm start, once: ``launch/train.py --config=.../grpo_only.py --config.num_steps=0`` (the
   warm start is cached in ``sft.cache_dir`` by its config, so every config here reuses it);
2. ``launch/evolve.py`` with that policy writes the frozen pool;
3. ``launch/train.py`` with the method or a baseline, the pool as the config argument;
4. ``launch/evaluate.py --routing=rank1`` on a trained run.
"""
from harness_jax import harness_s
from harness_jax.sweeps import hyper

SEEDS = (0, 1, 2)


def with_harness_s(c, pool: str = ""):
    """Adds the ``harness_s`` section: the method (rescue, router, re-anchoring) by default."""
    c.harness_s = harness_s.harness_s_section()
    c.harness_s.pool = pool or ""          # the config argument (or --config.harness_s.pool)
    return c


def seeds():
    return hyper.sweep("seed", list(SEEDS))


def seeds_x(path: str, values):
    """Seeds crossed with one field (e.g. the router)."""
    return lambda: hyper.product(seeds(), hyper.sweep(path, list(values)))
