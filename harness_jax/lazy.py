"""The one PEP 562 lazy-import helper: a package's ``__getattr__`` that imports heavy submodules
only when one of their names is first used.

    _LAZY = {"JaxEngine": "harness_jax.sampling.engine", ...}
    __getattr__ = lazy_getattr(__name__, _LAZY)
"""
from __future__ import annotations

import importlib
from typing import Callable, Mapping


def lazy_getattr(package: str, table: Mapping[str, str]) -> Callable[[str], object]:
    """``__getattr__`` for ``package``: ``name`` -> ``getattr(import_module(table[name]), name)``."""
    def __getattr__(name: str):
        if name in table:
            return getattr(importlib.import_module(table[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return __getattr__
