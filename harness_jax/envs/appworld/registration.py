"""The AppWorld family's registry entry (registered by ``envs/appworld/__init__.py``).

``registry.make("appworld", protocol="function", ...)`` builds an ``AppWorldEnv``;
``registry.load_split("appworld", split, n=..., seed=...)`` generates tasks from the split's own
seed stream, or with ``data_dir=...`` reads a real AppWorld data bundle's datasets
(train/search from ``train``, selection from ``dev``, test from ``test_normal``; sealed).
"""
from harness_jax.envs.registry import EnvSpec


def _make(**kw):
    from harness_jax.envs.appworld import AppWorldEnv
    return AppWorldEnv(**kw)


def _load_split(split: str, **kw):
    from harness_jax.envs.appworld import load_split
    return load_split(split, **kw)


SPEC = EnvSpec("appworld", _make, _load_split,
               "AppWorld on its real runtime (own venv + service); generated or real data/ trees")
