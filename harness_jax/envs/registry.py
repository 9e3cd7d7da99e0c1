"""Environments by name.

    env = registry.make("dbbench", engine="sqlite", protocol="text")
    tasks = registry.load_split("dbbench", "train", n=256, seed=0)

Each environment family registers itself when its package is imported; the registry never
imports a family by name in code, so families depend on the registry and never the other way
round. A family's package (``harness_jax/envs/<family>/__init__.py``) ends with::

    from harness_jax.envs import registry
    registry.register(registry.EnvSpec(
        name="webshop",                      # the name users pass to make/load_split
        make=WebShopEnv,                     # (**kw) -> Env: one environment per episode
        load_split=load_split,               # (split, **kw) -> list[Task] marked with `split`
        description="WebShop on the real search engine; goals partitioned by hash",
        config=SECTION,                      # config_schema.EnvSection: the typed config.env.webshop
        h0=protocol.h0,                      # (protocol) -> base harness H0 as a spec dict
        demos=None))                         # (task, protocol) -> a demonstration's replies (SFT)

and keeps that import cheap (heavy runtimes are imported inside ``make``/``load_split``).

``config`` is the family's typed experiment-config section (``harness_jax.config_schema``):
``experiments/configs/common.base_config()`` adds ``config.env.<name>`` for every registered
family and the builders turn it into ``make``/``load_split`` arguments. ``h0(protocol)`` returns the
benchmark's published base harness as a dict in the JSON format of harness spec files
(``HarnessSpec.to_dict``; nested ``rules``/``observation`` as dicts), so envs never import
``harness_jax.harness``; ``harness.presets.base_harness`` builds the ``HarnessSpec`` from it (a
family without ``h0`` gets a neutral H0: the first observation is the task).
``demos(task, protocol)`` returns the replies (``str`` or ``ToolCall``, one per turn) that the SFT
warm start plays through the executor (``train.sft_warmstart``): DBBench's gold policy, or a weak
teacher's replies (``kv_lookup``); a family without ``demos`` has no SFT warm start.
``make``/``load_split``/``spec``/``names`` find a family that is not registered yet by
importing ``harness_jax.envs.<name>`` and then, if needed, every module of ``harness_jax.envs``
(a family whose import fails is reported with its error when its name is asked for). Families
outside this package register the same way from their own import.

Splits and the sealed test split live in ``harness_jax.envs.splits`` (re-exported here): the
seal is enforced once, where a ``Task`` with ``split="test"`` is made, so loaders never check it
themselves. Callers open it with ``registry.sealed_test_access("why")``; training loops enter
``registry.training_scope(name)``.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import pkgutil
from typing import Any, Callable, Optional

from harness_jax.config_schema import EnvSection
from harness_jax.envs.base import Env
from harness_jax.envs.splits import (DEFAULT_FRACTIONS, SPLITS, SealedSplitError,
                                     assert_no_test_tasks, check_split, check_test_access,
                                     current_test_access, hash_partition, partition_tasks,
                                     sealed_test_access, split_seed, training_scope)

__all__ = ["EnvFactory", "EnvSpec", "register", "make", "load_split", "spec", "names", "config_section",
           "config_sections", "SPLITS",
           "DEFAULT_FRACTIONS", "SealedSplitError", "assert_no_test_tasks", "check_split",
           "check_test_access", "current_test_access", "hash_partition", "partition_tasks",
           "sealed_test_access", "split_seed", "training_scope"]


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """One environment family.

    ``make(**kw) -> Env`` builds one environment (one episode at a time); ``load_split(split,
    **kw) -> list[Task]`` returns the tasks of ``split``, each marked with it; ``config`` is the
    typed ``config.env.<name>`` section; ``h0(protocol) -> dict`` the base harness's spec fields;
    ``demos(task, protocol) -> list`` a demonstration's replies for the SFT warm start (module
    docstring).
    """

    name: str
    make: Callable[..., Env]
    load_split: Callable[..., list]
    description: str = ""
    config: Optional[EnvSection] = None
    h0: Optional[Callable[[str], dict]] = None
    demos: Optional[Callable[[Any, str], list]] = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"EnvSpec.name={self.name!r}: use a lowercase identifier such as "
                             "'webshop' (it is also the family's module name)")
        for field in ("make", "load_split"):
            if not callable(getattr(self, field)):
                raise TypeError(f"EnvSpec.{field} of {self.name!r} must be callable")
        if self.config is not None and not isinstance(self.config, EnvSection):
            raise TypeError(f"EnvSpec.config of {self.name!r} must be a "
                            f"harness_jax.config_schema.EnvSection, got {type(self.config).__name__}")
        if self.h0 is not None and not callable(self.h0):
            raise TypeError(f"EnvSpec.h0 of {self.name!r} must be callable: (protocol) -> dict")
        if self.demos is not None and not callable(self.demos):
            raise TypeError(f"EnvSpec.demos of {self.name!r} must be callable: (task, protocol) -> list")


_REGISTRY: dict[str, EnvSpec] = {}
_IMPORT_ERRORS: dict[str, str] = {}   # module -> why importing it failed (shown on lookups)
_ALL_DISCOVERED = False


def _origin(s: EnvSpec) -> str:
    return getattr(s.make, "__module__", "") or ""


def register(spec: EnvSpec) -> EnvSpec:
    """Adds a family. Registering the same name again from the same module (a re-import)
    replaces it; another module claiming a taken name is an error."""
    if not isinstance(spec, EnvSpec):
        raise TypeError(f"register() takes an EnvSpec, got {type(spec).__name__}")
    old = _REGISTRY.get(spec.name)
    if old is not None and _origin(old) != _origin(spec):
        raise ValueError(f"environment {spec.name!r} is already registered by {_origin(old)}; "
                         f"{_origin(spec)} must use another name")
    _REGISTRY[spec.name] = spec
    return spec


def _import(module: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError as e:
        if getattr(e, "name", None) == module:   # no such module: nothing to report
            return
        _IMPORT_ERRORS[module] = f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - a broken family must not hide the others
        _IMPORT_ERRORS[module] = f"{type(e).__name__}: {e}"


def _discover(name: Optional[str] = None) -> None:
    """Imports ``harness_jax.envs.<name>``, then (if still missing) every module of the
    package, so families register themselves."""
    global _ALL_DISCOVERED
    if name is not None and name not in _REGISTRY:
        _import(f"{__package__}.{name}")
    if (name is None or name not in _REGISTRY) and not _ALL_DISCOVERED:
        _ALL_DISCOVERED = True
        here = os.path.dirname(os.path.abspath(__file__))
        for mod in pkgutil.iter_modules([here]):
            if not mod.name.startswith("_"):
                _import(f"{__package__}.{mod.name}")


def names() -> list[str]:
    _discover()
    return sorted(_REGISTRY)


def spec(name: str) -> EnvSpec:
    _discover(name)
    if name not in _REGISTRY:
        broken = "".join(f"\n  {m}: {err}" for m, err in sorted(_IMPORT_ERRORS.items()))
        raise KeyError(f"unknown environment {name!r}; registered: {sorted(_REGISTRY)}"
                       + (f"; families that failed to import:{broken}" if broken else ""))
    return _REGISTRY[name]


def config_section(name: str) -> EnvSection:
    """The typed config section of family ``name`` (KeyError naming the fix if it has none)."""
    s = spec(name)
    if s.config is None:
        raise KeyError(f"environment {name!r} registers no config section: pass "
                       "config=harness_jax.config_schema.EnvSection(...) to its registry.EnvSpec")
    return s.config


def config_sections() -> dict[str, EnvSection]:
    """``{name: EnvSection}`` of every registered family that has a config section."""
    return {n: _REGISTRY[n].config for n in names() if _REGISTRY[n].config is not None}


def make(name: str, **kw: Any) -> Env:
    """A new environment instance (one episode at a time)."""
    return spec(name).make(**kw)


def load_split(name: str, split: str, **kw: Any) -> list:
    """The tasks of ``split`` for environment ``name`` (see each family's loader for ``kw``).
    Test tasks can only be made inside ``sealed_test_access`` (``harness_jax.envs.splits``)."""
    check_split(split)
    tasks = spec(name).load_split(split, **kw)
    for t in tasks:
        if t.split != split:
            raise RuntimeError(f"load_split({name!r}, {split!r}) produced a task marked "
                               f"{t.split!r}: loader bug")
    return tasks


@dataclasses.dataclass(frozen=True)
class EnvFactory:
    """``EnvFactory(name, kwargs)()`` = ``make(name, **kwargs)``: a picklable no-argument factory
    (episode workers rebuild environments from it in their own processes)."""

    name: str
    kwargs: dict = dataclasses.field(default_factory=dict)

    def __call__(self) -> Env:
        return make(self.name, **self.kwargs)

    @property
    def process_concurrency(self) -> Optional[int]:
        """The family's ``Env.process_concurrency`` (1: not thread-safe)."""
        return getattr(spec(self.name).make, "process_concurrency", None)
