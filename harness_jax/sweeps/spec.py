"""Expanding a named sweep of an experiment config into resolved runs.

The only things assumed of a config module are ``get_config()`` (as the launchers load it, through
``ml_collections.config_flags``, optionally with a ``path:arg`` argument) and a module-level
``SWEEPS`` dict (name -> list of override dicts, or a zero-argument callable returning one; see
``hyper``). Each run's config is resolved by parsing exactly the flags its launcher will get
(``--config=PATH --config.<path>=<value> ...``) with ``config_flags`` in-process, so a misspelt
path or a value of the wrong type fails here, before anything is launched, and what
``config.json`` records is what the launcher sees.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys
from typing import Any, Callable, Mapping, Optional, Sequence

from absl import flags
from ml_collections import config_flags

from harness_jax.sweeps import hyper


class SweepError(ValueError):
    """A sweep cannot be expanded or resumed as asked; the message says what to change."""


@dataclasses.dataclass(frozen=True)
class RunSpec:
    name: str                 # directory name under the sweep root
    index: int                # position in the sweep's list
    overrides: dict           # {"dotted.path": value}
    flags: tuple              # ("--config.seed=1", ...) in the sweep's key order
    config: dict              # the resolved config (JSON form)

    def argv(self, python: str, launcher: str, config_arg: str, workdir: str) -> list[str]:
        return [python, launcher, f"--config={config_arg}", f"--workdir={workdir}", *self.flags]


def split_config_arg(config_arg: str) -> tuple[str, Optional[str]]:
    """``"path.py:arg"`` -> ``("path.py", "arg")`` (the config_flags convention)."""
    path, sep, arg = config_arg.partition(":")
    return path, (arg if sep else None)


def load_config_module(path: str, repo_root: str):
    """Imports a config file as config_flags does (the repo root on sys.path for its imports)."""
    if not os.path.isfile(path):
        raise SweepError(f"--config={path!r}: no such file")
    if repo_root not in sys.path:
        sys.path.insert(0, repo_root)
    name = "_hj_sweep_config_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sweep_names(module) -> list[str]:
    return sorted(getattr(module, "SWEEPS", {}) or {})


def get_sweep(module, name: str, config_path: str = "") -> list[dict]:
    """The override dicts of sweep ``name`` declared in ``module.SWEEPS``."""
    sweeps = getattr(module, "SWEEPS", None)
    if not isinstance(sweeps, Mapping) or not sweeps:
        raise SweepError(f"{config_path or module.__name__} declares no sweeps: add a module-level "
                         "SWEEPS = {'name': [override dicts] or a function returning them} "
                         "(see docs/experiments.md)")
    if name not in sweeps:
        raise SweepError(f"--sweep={name!r}: {config_path or module.__name__} declares "
                         f"{sorted(sweeps)}")
    runs = sweeps[name]
    if callable(runs):
        runs = runs()
    if not isinstance(runs, Sequence) or not runs or not all(isinstance(r, Mapping) for r in runs):
        raise SweepError(f"SWEEPS[{name!r}] must be a non-empty list of override dicts "
                         "(or a function returning one)")
    out = [{hyper.normalize_key(k): v for k, v in r.items()} for r in runs]
    seen: dict = {}
    for i, r in enumerate(out):
        c = hyper.canonical(r)
        if c in seen:
            raise SweepError(f"SWEEPS[{name!r}]: runs {seen[c]} and {i} have the same overrides {r}")
        seen[c] = i
    return out


def format_flag_value(v: Any) -> str:
    """A value as config_flags parses it back (checked after parsing)."""
    if isinstance(v, str):
        return v
    if isinstance(v, bool) or v is None:
        return repr(v)
    if isinstance(v, (list, tuple)):
        return repr(tuple(v))
    return repr(v)


def override_flags(overrides: Mapping[str, Any]) -> tuple:
    return tuple(f"--config.{k}={format_flag_value(v)}" for k, v in overrides.items())


def parse_launcher_config(config_arg: str, flags_: Sequence[str]):
    """The ConfigDict a launcher gets from ``--config=config_arg`` plus ``flags_`` (locked)."""
    argv = ["launcher", f"--config={config_arg}", *flags_]
    fv = flags.FlagValues()
    holder = config_flags.DEFINE_config_file("config", None, "experiment config", flag_values=fv,
                                             lock_config=True, sys_argv=argv)
    try:
        fv(argv)
    except Exception as e:  # absl / ml_collections raise several types; all mean a bad override
        raise SweepError(f"the launcher would reject --config={config_arg} {' '.join(flags_)}:\n"
                         f"  {type(e).__name__}: {e}") from e
    return holder.value


def _get_path(config, path: str):
    node = config
    for part in path.split("."):
        node = node[part]
    return node


def _plain(v):
    if hasattr(v, "to_dict"):
        v = v.to_dict()
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def config_to_json(config) -> dict:
    return json.loads(config.to_json_best_effort(sort_keys=True))


def resolve_run(config_arg: str, overrides: Mapping[str, Any]) -> tuple[tuple, dict]:
    """(flags, resolved config JSON) for one run; checks every override reached its field."""
    flags_ = override_flags(overrides)
    config = parse_launcher_config(config_arg, flags_)
    for k, v in overrides.items():
        got = _plain(_get_path(config, k))
        if got != _plain(v):
            raise SweepError(f"override {k}={v!r} reached the config as {got!r}; give a value of "
                             f"the field's type (flag --config.{k}={format_flag_value(v)})")
    return flags_, config_to_json(config)


def expand(config_arg: str, sweep_name: str, repo_root: str,
           loader: Callable = load_config_module, base: Optional[Mapping[str, Any]] = None) -> list[RunSpec]:
    """The sweep's runs, named, with their flags and resolved configs. ``base``: overrides every
    run gets under the sweep's own (``launch/sweep.py --set``); runs are named by the sweep's."""
    path, _ = split_config_arg(config_arg)
    module = loader(path, repo_root)
    runs = get_sweep(module, sweep_name, path)
    names = hyper.run_names(runs)
    out = []
    for i, (name, r) in enumerate(zip(names, runs)):
        r = {**dict(base or {}), **r}
        flags_, cfg = resolve_run(config_arg, r)
        out.append(RunSpec(name=name, index=i, overrides=r, flags=flags_, config=cfg))
    return out


def config_diff(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Dotted paths where two JSON configs differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            p = f"{prefix}.{k}" if prefix else str(k)
            if k not in a or k not in b:
                out.append(p)
            else:
                out.extend(config_diff(a[k], b[k], p))
        return out
    return [] if a == b else [prefix or "<root>"]
