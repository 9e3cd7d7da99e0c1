"""The AppWorld family's registry entry (registered by ``envs/appworld/__init__.py``).

``registry.make("appworld", protocol="function", ...)`` builds an ``AppWorldEnv``;
``registry.load_split("appworld", split, n=..., seed=...)`` generates tasks from the split's own
seed stream, or with ``data_dir=...`` reads a real AppWorld data bundle's datasets
(train/search from ``train``, selection from ``dev``, test from ``test_normal``; sealed).
"""
import ml_collections

from harness_jax.config_schema import EnvSection, or_none
from harness_jax.envs.appworld.protocol import h0
from harness_jax.envs.registry import EnvSpec


def _make(**kw):
    from harness_jax.envs.appworld import AppWorldEnv
    return AppWorldEnv(**kw)


def _load_split(split: str, **kw):
    from harness_jax.envs.appworld import load_split
    return load_split(split, **kw)


def _section() -> ml_collections.ConfigDict:
    """The typed ``config.env.appworld`` section."""
    s = ml_collections.ConfigDict()
    s.max_interactions = 50           # code cells per episode (AppWorld's max_interactions; evaluated when spent)
    s.timeout_seconds = 30            # per-cell time limit in whole seconds (AppWorld's timeout_seconds)
    s.raise_on_unsafe_syntax = True   # AppWorld's unsafe-syntax guard (keep on outside a sandbox)
    s.max_api_calls_per_interaction = 1000  # AppWorld's per-cell API-call cap
    s.kill_grace_s = 15.0             # how long past timeout_seconds a cell may run before its worker is killed
    s.auto_restart = False            # service down: start it (scripts/appworld.sh) and report the episode as an infrastructure failure
    s.socket_path = ""                # the service's socket ("" = $HARNESS_JAX_APPWORLD_SOCKET or scripts/appworld.sh's)
    s.acquire_timeout_s = 600.0       # how long reset waits for a free service worker (then an error names the holders)
    s.idle_timeout_s = 0.0            # the service closes an episode after this long without a request (0 = the service's limit)
    s.data_dir = ""                   # a real AppWorld data tree ("" = generated tasks, env.num_tasks per split)
    s.test_dataset = "test_normal"    # real data: the dataset of the test split ("test_normal" | "test_challenge")
    s.search_fraction = 0.2           # real data: share of AppWorld's train dataset used as the search split
    s.templates = ()                  # generated: scenario templates (() = all)
    s.difficulty = 0                  # AppWorld difficulty level 1-3 kept (0 = all)
    s.people = 20                     # generated: people in each generated world
    return s


def _env_kwargs(env) -> dict:
    s = env.appworld
    return dict(protocol=env.protocol, max_interactions=int(s.max_interactions),
                timeout_seconds=int(s.timeout_seconds), raise_on_unsafe_syntax=bool(s.raise_on_unsafe_syntax),
                max_api_calls_per_interaction=int(s.max_api_calls_per_interaction),
                kill_grace_s=float(s.kill_grace_s), auto_restart=bool(s.auto_restart),
                socket_path=or_none(s.socket_path), acquire_timeout_s=float(s.acquire_timeout_s),
                idle_timeout_s=float(s.idle_timeout_s))


def _split_kwargs(env) -> dict:
    s = env.appworld
    real = dict(data_dir=or_none(s.data_dir), test_dataset=s.test_dataset,
                search_fraction=float(s.search_fraction), difficulty=or_none(int(s.difficulty)))
    generated = dict(n=int(env.num_tasks), seed=int(env.task_seed), templates=or_none(tuple(s.templates)),
                     difficulty=or_none(int(s.difficulty)), people=int(s.people))
    return real if real["data_dir"] else generated


SECTION = EnvSection(section=_section, env_kwargs=_env_kwargs, split_kwargs=_split_kwargs,
                     choices={"test_dataset": ("test_normal", "test_challenge"),
                              "difficulty": (0, 1, 2, 3)},
                     at_least={"max_interactions": 1, "timeout_seconds": 1, "people": 1,
                               "search_fraction": 0.0, "kill_grace_s": 0.0, "acquire_timeout_s": 1e-3,
                               "idle_timeout_s": 0.0})

SPEC = EnvSpec("appworld", _make, _load_split,
               "AppWorld on its real runtime (own venv + service); generated or real data/ trees",
               config=SECTION, h0=h0)
