"""Base harnesses (H0) per benchmark, and the registry of named harnesses.

``base_harness(env_name, protocol)`` returns the harness the papers' baselines use. Each
environment family provides its own H0 when it registers itself: ``registry.EnvSpec.h0(protocol)``
returns the spec's fields as a dict in the JSON format of harness spec files, next to the
protocol texts it quotes (``envs/dbbench/protocol.py``, ``envs/webshop/protocol.py``,
``envs/appworld/protocol.py``, ``envs/swe/prompts.py``), so envs never import this package and the
two never drift apart. A family without ``h0`` (or an environment that is not registered) gets a
neutral H0 (its first observation is the task, 50 turns). There is no list of families here.
"""
from __future__ import annotations

import dataclasses
import os

from harness_jax.harness.specs import HarnessSpec
from harness_jax.envs import registry

PROTOCOLS = ("text", "function")


def base_harness(env_name: str, protocol: str = "function", **overrides) -> HarnessSpec:
    """H0 for ``env_name`` (``protocol``: "text" or "function"); ``overrides`` replace fields."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"base_harness: protocol must be 'text' or 'function', got {protocol!r}")
    try:
        h0 = registry.spec(env_name).h0
    except KeyError:    # an environment outside the registry (a test's toy env): neutral H0
        h0 = None
    if h0 is None:
        fields = {"name": f"{env_name}-H0-{protocol}", "rules": {"max_turns": 50}}
    else:
        fields = h0(protocol)
        if not isinstance(fields, dict):
            raise TypeError(f"registry.spec({env_name!r}).h0({protocol!r}) must return a dict of "
                            f"HarnessSpec fields, got {type(fields).__name__}")
    spec = HarnessSpec.from_dict(fields)
    return dataclasses.replace(spec, **overrides) if overrides else spec


# Named harnesses: ``config.harness.spec`` may name one (built for the run's env and protocol).
_NAMED = {"H0": base_harness}


def register(name: str, factory) -> None:
    """Registers ``factory(env_name, protocol) -> HarnessSpec`` under ``name``."""
    _NAMED[name] = factory


def names() -> list:
    return sorted(_NAMED)


def named(name: str, env_name: str, protocol: str) -> HarnessSpec:
    if name not in _NAMED:
        raise KeyError(f"harness {name!r} is not registered; registered: {names()}")
    return _NAMED[name](env_name, protocol)


def resolve(spec: str, env_name: str, protocol: str) -> HarnessSpec:
    """A run's harness: ``spec`` = '' (the benchmark's H0), a registered name, or a JSON/YAML file."""
    if not spec:
        return base_harness(env_name, protocol)      # the published protocol of the benchmark
    if spec in names():
        return named(spec, env_name, protocol)
    if os.path.exists(spec):
        return HarnessSpec.load(spec)
    raise FileNotFoundError(f"harness spec {spec!r}: neither a file nor a registered name "
                            f"({names()}); give a JSON/YAML spec, a name, or '' for H0")
