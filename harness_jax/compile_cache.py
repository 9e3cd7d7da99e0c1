"""JAX's persistent compilation cache, one setting for the launchers, the tests and CI.

XLA compiles every program once per process. With the cache on, a later process (a resumed run,
a sweep's next run, a test's launcher subprocess, a developer's rerun) loads the executable from
disk instead of compiling it again; the key is the program, its shapes and shardings, the
compiler flags and the jax/XLA versions, so a code change that changes a program misses it and
nothing stale is ever loaded.

Where the cache lives, first match wins:

=================================  =========================================================
``JAX_COMPILATION_CACHE_DIR``      jax's own variable (``.ci/run`` sets it to the run's temp dir)
``HARNESS_JAX_COMPILATION_CACHE``  a directory, or ``off`` to disable the cache
(neither)                          ``~/.cache/harness_jax/jax_compilation``
=================================  =========================================================

Every program is cached, however small or quick to compile (both jax thresholds 0: the tests
and the tiny CI configs compile many small programs), unless ``JAX_PERSISTENT_CACHE_MIN_*`` say
otherwise. The size is bounded (``JAX_COMPILATION_CACHE_MAX_SIZE``, default 4 GiB, least
recently used entries evicted); the bound also makes jax lock the directory around each read and
write, so concurrent processes never read a half-written entry.

``enable()`` is called by ``distributed.initialize()`` (every launcher's first step);
``export_env()`` is for a parent process that starts JAX processes (tests/conftest.py before it
imports jax, so the test session and every launcher subprocess it starts share one cache).
"""
from __future__ import annotations

import os
from typing import MutableMapping, Optional

ENV = "HARNESS_JAX_COMPILATION_CACHE"
JAX_DIR_ENV = "JAX_COMPILATION_CACHE_DIR"
DEFAULT_MAX_BYTES = 4 << 30
# jax's own variables and the values we give them when they are not set
_JAX_DEFAULTS = {
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    "JAX_COMPILATION_CACHE_MAX_SIZE": str(DEFAULT_MAX_BYTES),
}


def default_dir() -> str:
    return os.path.join(os.path.expanduser("~"), ".cache", "harness_jax", "jax_compilation")


def resolve_dir(environ: Optional[MutableMapping[str, str]] = None) -> Optional[str]:
    """The cache directory the variables above select, or None when the cache is off."""
    env = os.environ if environ is None else environ
    if env.get(JAX_DIR_ENV):
        return env[JAX_DIR_ENV]
    choice = env.get(ENV, "")
    if choice.lower() in ("off", "0", "false", "none"):
        return None
    return os.path.expanduser(choice) if choice else default_dir()


def export_env(environ: Optional[MutableMapping[str, str]] = None) -> Optional[str]:
    """Write the cache settings into ``environ`` (default ``os.environ``) as jax's variables, so
    a jax imported afterwards in this process, and every child process, uses the cache. Variables
    already set are kept. Returns the directory (None: off)."""
    env = os.environ if environ is None else environ
    path = resolve_dir(env)
    if path is None:
        return None
    env[JAX_DIR_ENV] = path
    for k, v in _JAX_DEFAULTS.items():
        env.setdefault(k, v)
    return path


def enable() -> Optional[str]:
    """Turn the cache on in this process's jax (before its first compilation); returns the
    directory, or None when it is off. Values set through jax's variables are kept."""
    path = resolve_dir()
    if path is None:
        return None
    import jax

    if not jax.config.jax_compilation_cache_dir:
        jax.config.update("jax_compilation_cache_dir", path)
    for k, v in _JAX_DEFAULTS.items():
        if k not in os.environ:
            name = k.lower()
            jax.config.update(name, float(v) if "SECS" in k else int(v))
    return path
