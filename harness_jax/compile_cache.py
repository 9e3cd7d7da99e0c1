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
otherwise. The size is bounded once per process, not per write: ``export_env()`` and ``enable()``
prune the directory to ``HARNESS_JAX_COMPILATION_CACHE_MAX_BYTES`` (default 4 GiB, oldest entries
first) and give jax ``JAX_COMPILATION_CACHE_MAX_SIZE=-1``. jax's own bound scans the whole
directory (a stat and an access-time file read per entry) under a directory lock on EVERY write,
which makes a test session quadratic in its number of programs: a clean-clone CI run of 2026-12-02
ended with 2,288 cached programs, where one such scan takes 0.17 s on an idle core, so about 200 s
of scanning over the run, each scan holding the lock the other worker and every launcher
subprocess wait on (py-spy caught a worker in it on two of three samples late in that run,
2 shared cores). Without the lock a
process can meet an entry another one is still writing, or one a pruner just removed: jax treats a
read error as a miss (a warning, then it compiles), so nothing wrong is ever loaded.

``enable()`` is called by ``distributed.initialize()`` (every launcher's first step);
``export_env()`` is for a parent process that starts JAX processes (tests/conftest.py before it
imports jax, so the test session and every launcher subprocess it starts share one cache).
"""
from __future__ import annotations

import contextlib
import os
from typing import MutableMapping, Optional

ENV = "HARNESS_JAX_COMPILATION_CACHE"
JAX_DIR_ENV = "JAX_COMPILATION_CACHE_DIR"
MAX_BYTES_ENV = "HARNESS_JAX_COMPILATION_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 4 << 30
_ENTRY = "-cache"          # jax's file suffix of a cached executable (its "-atime" files beside)
# jax's own variables and the values we give them when they are not set
_JAX_DEFAULTS = {
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    "JAX_COMPILATION_CACHE_MAX_SIZE": "-1",    # no per-write eviction scan (``prune`` instead)
}


def prune(path: str, max_bytes: Optional[int] = None) -> int:
    """Remove the oldest entries (by modification time) of the cache at ``path`` until its
    executables take at most ``max_bytes`` (default ``HARNESS_JAX_COMPILATION_CACHE_MAX_BYTES``
    or 4 GiB). One directory scan; returns the number of entries removed. Entries that vanish
    meanwhile (another process pruning) are skipped."""
    if max_bytes is None:
        max_bytes = int(os.environ.get(MAX_BYTES_ENV, DEFAULT_MAX_BYTES))
    try:
        names = [n for n in os.listdir(path) if n.endswith(_ENTRY)]
    except FileNotFoundError:
        return 0
    entries, total = [], 0
    for n in names:
        try:
            st = os.stat(os.path.join(path, n))
        except FileNotFoundError:
            continue
        entries.append((st.st_mtime, n, st.st_size))
        total += st.st_size
    removed = 0
    for _, n, size in sorted(entries):
        if total <= max_bytes:
            break
        for f in (n, n[: -len(_ENTRY)] + "-atime"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(path, f))
        total -= size
        removed += 1
    return removed


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
    prune(path)
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
    prune(jax.config.jax_compilation_cache_dir)
    return path


@contextlib.contextmanager
def bypassed():
    """Compilations inside run for real (nothing read from or written to the persistent cache):
    for code that inspects what the compiler does, e.g. XLA's pass dumps, which a cache hit skips."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache as cc

    was = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    cc.reset_cache()
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", was)
        cc.reset_cache()
