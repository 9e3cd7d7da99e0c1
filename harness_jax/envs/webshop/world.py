"""A WebShop *world*: one catalog, its BM25 index and (for WebShop's own files) its goals,
shared by every episode in the process.

``get_world(spec)`` returns the process-wide instance for a world spec (a small JSON dict that
tasks carry), building it on first use:

* ``{"kind": "generated", "n_products": N, "seed": S}``: ``generator.GeneratedCatalog``;
* ``{"kind": "files", "products": path, "attributes": path, "human_instructions": path|None,
  "num_products": N|None}``: WebShop's own data files (``data.ProductTable``).

Environments hold a reference, never a copy; the index is built once, under a lock, on the
first search (or loaded from ``index_dir``, where it is also saved after a build).
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Optional

from harness_jax.envs.base import content_hash
from harness_jax.envs.webshop import reward as rw
from harness_jax.envs.webshop.search import SEARCH_RETURN_N, SearchIndex
from harness_jax.envs.webshop.data import ProductTable
from harness_jax.envs.webshop.generator import GeneratedCatalog

WORLD_KINDS = ("generated", "files")


def check_spec(spec: dict, where: str = "world") -> dict:
    """Validates a world spec; returns it normalised (errors name the field and the fix)."""
    if not isinstance(spec, dict):
        raise ValueError(f"{where}: expected a dict like {{'kind': 'generated', 'n_products': "
                         f"1000, 'seed': 0}}, got {type(spec).__name__}")
    kind = spec.get("kind")
    if kind == "generated":
        n = spec.get("n_products")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"{where}.n_products={n!r}: give the catalog size, an int >= 1")
        seed = spec.get("seed", 0)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"{where}.seed={seed!r}: expected an int")
        return {"kind": kind, "n_products": n, "seed": seed}
    if kind == "files":
        out = {"kind": kind}
        for key, file, required in (("products", "items_shuffle*.json", True),
                                    ("attributes", "items_ins_v2*.json", True),
                                    ("human_instructions", "items_human_ins.json", False)):
            v = spec.get(key)
            if v is None and not required:
                out[key] = None
                continue
            if not isinstance(v, str) or not v:
                raise ValueError(f"{where}.{key}: give the path of WebShop's {file}")
            out[key] = os.path.abspath(v)
        n = spec.get("num_products")
        if n is not None and (not isinstance(n, int) or n < 1):
            raise ValueError(f"{where}.num_products={n!r}: an int >= 1 or None (all products)")
        out["num_products"] = n
        return out
    raise ValueError(f"{where}.kind={kind!r}: expected one of {WORLD_KINDS}")


class World:
    """Catalog + search index (+ goals for file-backed worlds); read-only after building."""

    def __init__(self, catalog, index: Optional[SearchIndex] = None,
                 index_dir: Optional[str] = None):
        self.catalog = catalog
        self.spec = catalog.spec
        self.index_dir = index_dir
        self._index = index
        self._lock = threading.Lock()
        self.build_stats: dict = {}

    # -- catalog -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.catalog)

    def product(self, i: int) -> dict:
        return self.catalog.product(i)

    def price(self, i: int) -> float:
        return self.catalog.price(i)

    def index_of(self, asin: str) -> Optional[int]:
        return self.catalog.index_of(asin)

    @property
    def goals(self) -> Optional[list]:
        """WebShop's shuffled goal list (file-backed worlds), else None."""
        return getattr(self.catalog, "goals", None)

    # -- search --------------------------------------------------------------------------------
    @property
    def index(self) -> SearchIndex:
        if self._index is None:
            with self._lock:
                if self._index is None:
                    self._index = self._load_or_build()
        return self._index

    def _index_path(self) -> Optional[str]:
        if not self.index_dir:
            return None
        return os.path.join(self.index_dir, "webshop-" + content_hash(self.spec))

    def _load_or_build(self) -> SearchIndex:
        path = self._index_path()
        if path and os.path.exists(os.path.join(path, "params.index.json")):
            t0 = time.perf_counter()
            idx = SearchIndex.load(path, mmap=True)
            self.build_stats = {"loaded_from": path, "load_s": time.perf_counter() - t0}
            return idx
        t0 = time.perf_counter()
        idx = SearchIndex.build(self.catalog.documents())
        self.build_stats = {"build_s": time.perf_counter() - t0, **idx.stats}
        if path:
            tmp = path + f".tmp{os.getpid()}"
            idx.save(tmp)
            try:
                os.rename(tmp, path)      # atomic; another process may have won the race
            except OSError:
                import shutil
                shutil.rmtree(tmp, ignore_errors=True)
        return idx

    def search(self, text: str, k: int = SEARCH_RETURN_N) -> list:
        return self.index.search(text, k)

    # -- reward --------------------------------------------------------------------------------
    def reward(self, i: int, goal: dict, options: dict) -> tuple:
        """``(reward, info)`` of buying product ``i`` with ``options`` for ``goal``."""
        return rw.get_reward(self.product(i), goal, price=self.price(i), options=dict(options),
                             verbose=True)


_WORLDS: dict = {}
_WORLDS_LOCK = threading.Lock()


def make_catalog(spec: dict):
    spec = check_spec(spec)
    if spec["kind"] == "generated":
        return GeneratedCatalog(spec["n_products"], spec["seed"])
    return ProductTable.from_files(spec["products"], spec["attributes"],
                                   spec["human_instructions"], spec["num_products"])


def get_world(spec: dict, index_dir: Optional[str] = None) -> World:
    """The process-wide ``World`` of ``spec`` (built once; later ``index_dir`` values are
    ignored once the world exists)."""
    spec = check_spec(spec)
    key = json.dumps(spec, sort_keys=True)
    with _WORLDS_LOCK:
        w = _WORLDS.get(key)
        if w is None:
            w = _WORLDS[key] = World(make_catalog(spec), index_dir=index_dir)
    return w


def clear_worlds() -> None:
    """Drops the cached worlds (tests and benchmarks that measure memory)."""
    with _WORLDS_LOCK:
        _WORLDS.clear()
