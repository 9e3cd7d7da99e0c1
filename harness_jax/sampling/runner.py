"""The engine's device side: the generation cache, the jitted programs, dispatch and read-back.

``DeviceRunner.dispatch(plan)`` starts a ``StepPlan`` on the device and returns at once (JAX
dispatch is asynchronous); ``read(plan, out)`` waits for it and brings the sampled tokens to the
host. The engine's loop dispatches the next decode step before reading the previous one, so the
device computes while the host turns tokens into results.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from harness_jax.sampling import programs
from harness_jax.sampling.planner import StepPlan

CACHE_KINDS = ("paged", "contiguous")


class _Graph:
    """A graph definition as a jit static argument: hashed once, and one object per distinct
    graph (``_canonical``), so engines serving the same model share compiled programs while a
    call's cache lookup costs an identity check, not a walk over the graph."""

    def __init__(self, graphdef):
        self.graphdef, self._hash = graphdef, hash(graphdef)

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return self is other or (isinstance(other, _Graph) and self._hash == other._hash
                                 and self.graphdef == other.graphdef)


_GRAPHS: dict = {}


def _canonical(graphdef) -> _Graph:
    g = _Graph(graphdef)
    return _GRAPHS.setdefault(g, g)


@functools.partial(jax.jit, static_argnums=(0, 1), donate_argnums=(3,))
def _mixed(graph: _Graph, attn_impl, state, cache, groups, sampling):
    return programs.mixed_step(graph.graphdef, attn_impl, state, cache, groups, sampling)


@functools.partial(jax.jit, static_argnums=(0, 1, 2), donate_argnums=(4,))
def _decode(graph: _Graph, n_steps, attn_impl, state, cache, tok, active, budget, stop, sampling):
    return programs.decode_loop(graph.graphdef, n_steps, attn_impl, state, cache, tok, active, budget, stop, sampling)


@functools.partial(jax.jit, static_argnums=(0,), donate_argnums=(1,))
def _reset(paged: bool, cache, mask):
    from harness_jax.models import qwen3_5
    return (qwen3_5.reset_paged_rows if paged else qwen3_5.reset_cache_rows)(cache, mask)


class DeviceRunner:
    """Cache and programs of one engine.

    Args:
      graphdef: the served model's graph definition (``ServingWeights.graphdef``).
      config: the model config (cache shapes).
      cache_kind: ``"paged"`` (a pool of ``num_pages`` pages of ``page_size`` tokens shared by
        the slots, block tables from the engine's ``PagePool``) or ``"contiguous"`` (every slot
        holds ``max_len`` positions).
      cache_dtype: KV / conv cache dtype (the GDN recurrent state is always fp32).
      attn_impl: ``paged_attention`` implementation for the paged cache.
      mesh / rules: the serving mesh the cache is sharded on by its logical axes (None: the
        parameters' single device, ``devices``).
    """

    def __init__(self, graphdef, config, *, max_slots: int, max_len: int, decode_steps: int,
                 cache_kind: str, cache_dtype, page_size: int, num_pages: int, attn_impl: str,
                 mesh=None, rules=None, devices=()):
        from harness_jax.models import qwen3_5
        self._q = qwen3_5
        self.config, self.cache_kind = config, cache_kind
        self.max_slots, self.max_len = max_slots, max_len
        self.cache_dtype, self.page_size, self.num_pages = cache_dtype, page_size, num_pages
        self.mesh, self.rules, self.devices = mesh, rules, devices
        self._graph, self._attn_impl, self._steps = _canonical(graphdef), attn_impl, int(decode_steps)
        self._table_sharding = None
        self.cache = self.new_cache()

    def new_cache(self):
        """An empty cache, sharded on the serving mesh by its logical axes, or committed to the
        parameters' device (an uncommitted first cache would make every program compile twice)."""
        q = self._q
        if self.cache_kind == "paged":
            cache = q.init_paged_cache(self.config, self.max_slots, self.max_len, self.num_pages, self.page_size,
                                       dtype=self.cache_dtype)
            axes = q.cache.paged_cache_logical_axes()
        else:
            cache = q.init_cache(self.config, self.max_slots, self.max_len, dtype=self.cache_dtype)
            axes = q.cache.cache_logical_axes()
        if self.mesh is not None:
            from harness_jax import sharding as shd
            rules = shd.SAMPLE_RULES if self.rules is None else self.rules
            shardings = jax.tree_util.tree_map(lambda ax, a: shd.named_sharding(ax, self.mesh, rules, a.shape),
                                               axes, cache, is_leaf=lambda x: isinstance(x, tuple))
            cache = jax.device_put(cache, shardings)
        elif len(self.devices) == 1:
            cache = jax.device_put(cache, next(iter(self.devices)))
        if self.cache_kind == "paged":
            self._table_sharding = cache.block_tables_BM.sharding
        self._arg_sharding = cache.lengths_B.sharding if self.mesh is None else \
            jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec())
        return cache

    @property
    def kv_bytes(self) -> int:
        """Bytes the attention KV arrays of the cache hold (the whole pool when paged)."""
        return self._q.cache.cache_bytes(self.cache)

    def reset(self, rows) -> None:
        mask = np.zeros((self.max_slots,), dtype=bool)
        mask[list(rows)] = True
        self.cache = _reset(self.cache_kind == "paged", self.cache, jnp.asarray(mask))

    def set_block_tables(self, table: np.ndarray) -> None:
        self.cache = dataclasses.replace(self.cache, block_tables_BM=jax.device_put(table, self._table_sharding))

    # ------------------------------------------------------------------------- steps
    def _put(self, tree):
        """Host inputs (and a previous step's carry) placed the way every call gets them, so a
        chained step (device inputs) and a planned one (host inputs) share one compiled program."""
        return jax.device_put(tree, self._arg_sharding)

    def dispatch(self, plan: StepPlan):
        """Starts ``plan`` on the device; returns its (device) outputs without waiting."""
        a = self._put(plan.arrays)
        if plan.mixed:
            tok, lp, self.cache = _mixed(self._graph, self._attn_impl, plan.state, self.cache, a["groups"],
                                         a["sampling"])
            return dict(tok=tok, lp=lp)
        tok, lp, em, carry, self.cache = _decode(self._graph, self._steps, self._attn_impl, plan.state, self.cache,
                                                 a["tok"], a["active"], a["budget"], a["stop"], a["sampling"])
        return dict(tok=tok, lp=lp, emitted=em, carry=carry)

    @staticmethod
    def read(out: dict) -> dict:
        """Waits for a dispatched step; its sampled tokens on the host."""
        return {k: np.asarray(v) for k, v in out.items() if k != "carry"}

    def lower_decode(self, plan: StepPlan):
        """The lowered decode program for ``plan``'s shapes (HLO checks, memory analysis)."""
        a = self._put(plan.arrays)
        return _decode.lower(self._graph, self._steps, self._attn_impl, plan.state, self.cache, a["tok"],
                             a["active"], a["budget"], a["stop"], a["sampling"])

    def lower_mixed(self, plan: StepPlan):
        a = self._put(plan.arrays)
        return _mixed.lower(self._graph, self._attn_impl, plan.state, self.cache, a["groups"], a["sampling"])


def default_pages(max_slots: int, max_len: int, page_size: int) -> int:
    """A pool holding every slot at full length (no preemption ever; the contiguous cache's
    capacity): what ``num_pages=0`` means."""
    return max_slots * -(-max_len // page_size)


def check_cache_kind(cache_kind: str, page_size: int, num_pages: Optional[int], max_len: int) -> None:
    if cache_kind not in CACHE_KINDS:
        raise ValueError(f"JaxEngine.cache_kind={cache_kind!r}: use one of {CACHE_KINDS}")
    if cache_kind == "paged":
        if page_size < 1:
            raise ValueError(f"JaxEngine.page_size must be >= 1, got {page_size}")
        if num_pages and num_pages * page_size < max_len:
            raise ValueError(f"JaxEngine.num_pages={num_pages} x page_size={page_size} tokens cannot hold one "
                             f"request of max_len={max_len}; raise num_pages to >= {-(-max_len // page_size)}")
