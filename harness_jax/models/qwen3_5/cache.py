"""Generation caches for Qwen3.5: KV for full-attention layers, conv + recurrent state for GDN.

Two kinds, both plain pytrees (jit-friendly, shardable) whose arrays are stacked per layer type
in layer order (the j-th full-attention layer owns entry j of the KV arrays, the j-th
linear-attention layer entry j of ``conv_LBCW`` / ``state_LBNAE``). Rows ("slots") are
independent sequences; the Gated DeltaNet states are per slot, fp32, in both kinds.

* ``Qwen3_5Cache`` (contiguous): ``k_LBSKH[j, b]`` holds ``max_len`` positions for slot b,
  whatever its length (``init_cache``).
* ``Qwen3_5PagedCache`` (paged): keys/values live in a pool of ``num_pages`` pages of
  ``page_size`` tokens shared by all slots; ``block_tables_BM[b]`` lists slot b's pages in order
  (``init_paged_cache``). Memory is ``num_pages * page_size`` tokens, sized for the live tokens,
  not ``slots * max_len``; which page belongs to whom is decided by the caller (the engine's
  page allocator) and written into the block table before a call.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from .config import FULL, LINEAR, Qwen3_5Config

from harness_jax import sharding as shd


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Qwen3_5Cache:
    lengths_B: jax.Array        # int32: tokens already in each row
    k_LBSKH: jax.Array          # [n_full, B, max_len, kv_heads, head_dim]
    v_LBSKH: jax.Array
    conv_LBCW: jax.Array        # [n_linear, B, conv_channels, kernel - 1] last inputs, oldest first
    state_LBNAE: jax.Array      # [n_linear, B, v_heads, key_dim, value_dim] fp32 delta-rule state

    @property
    def max_len(self) -> int:
        return self.k_LBSKH.shape[2]

    @property
    def batch_size(self) -> int:
        return self.lengths_B.shape[0]


def init_cache(cfg: Qwen3_5Config, batch_size: int, max_len: int, dtype=jnp.float32) -> Qwen3_5Cache:
    """An empty cache (all rows length 0). KV and conv state in ``dtype``, recurrent state fp32."""
    if batch_size < 1 or max_len < 1:
        raise ValueError(f"init_cache: batch_size={batch_size} and max_len={max_len} must be >= 1")
    n_full = sum(t == FULL for t in cfg.layer_types)
    n_lin = sum(t == LINEAR for t in cfg.layer_types)
    B = batch_size
    return Qwen3_5Cache(
        lengths_B=jnp.zeros((B,), jnp.int32),
        k_LBSKH=jnp.zeros((n_full, B, max_len, cfg.num_key_value_heads, cfg.head_dim), dtype),
        v_LBSKH=jnp.zeros((n_full, B, max_len, cfg.num_key_value_heads, cfg.head_dim), dtype),
        conv_LBCW=jnp.zeros((n_lin, B, cfg.linear_conv_dim, cfg.linear_conv_kernel_dim - 1), dtype),
        state_LBNAE=jnp.zeros((n_lin, B, cfg.linear_num_value_heads, cfg.linear_key_head_dim,
                               cfg.linear_value_head_dim), jnp.float32),
    )


def reset_cache_rows(cache: Qwen3_5Cache, reset_B) -> Qwen3_5Cache:
    """Zero every array of the rows where ``reset_B`` is True (slot reuse); others untouched."""
    reset_B = jnp.asarray(reset_B, bool)

    def zero(a, axis):
        shape = [1] * a.ndim
        shape[axis] = a.shape[axis]
        return jnp.where(reset_B.reshape(shape), jnp.zeros((), a.dtype), a)

    return Qwen3_5Cache(
        lengths_B=zero(cache.lengths_B, 0), k_LBSKH=zero(cache.k_LBSKH, 1), v_LBSKH=zero(cache.v_LBSKH, 1),
        conv_LBCW=zero(cache.conv_LBCW, 1), state_LBNAE=zero(cache.state_LBNAE, 1))


def cache_logical_axes() -> Qwen3_5Cache:
    """Logical axis names of every cache array (for sharding a cache on a mesh)."""
    return Qwen3_5Cache(
        lengths_B=("batch",),
        k_LBSKH=(None, "batch", "cache_seq", "kv_heads_cache", None),
        v_LBSKH=(None, "batch", "cache_seq", "kv_heads_cache", None),
        conv_LBCW=(None, "batch", None, None),
        state_LBNAE=(None, "batch", "linear_heads_cache", None, None),
    )


def shard_cache(cache: Qwen3_5Cache, mesh, rules=None) -> Qwen3_5Cache:
    """Place a cache on ``mesh``: rows on the batch axes, KV heads / GDN heads on ``tensor``
    where they divide (see ``harness_jax.sharding`` rules)."""
    axes = cache_logical_axes()
    return Qwen3_5Cache(**{
        f.name: jax.device_put(getattr(cache, f.name),
                               shd.named_sharding(getattr(axes, f.name), mesh, rules, getattr(cache, f.name).shape))
        for f in dataclasses.fields(Qwen3_5Cache)})


# ---------------------------------------------------------------------------------------------
# paged cache
# ---------------------------------------------------------------------------------------------
@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Qwen3_5PagedCache:
    lengths_B: jax.Array        # int32: tokens already in each slot
    block_tables_BM: jax.Array  # int32 [slots, pages_per_slot]: page ids of each slot, in order
    k_LPZKH: jax.Array          # [n_full, num_pages, page_size, kv_heads, head_dim]
    v_LPZKH: jax.Array
    conv_LBCW: jax.Array        # [n_linear, slots, conv_channels, kernel - 1]
    state_LBNAE: jax.Array      # [n_linear, slots, v_heads, key_dim, value_dim] fp32

    @property
    def page_size(self) -> int:
        return self.k_LPZKH.shape[2]

    @property
    def num_pages(self) -> int:
        return self.k_LPZKH.shape[1]

    @property
    def max_len(self) -> int:
        return self.block_tables_BM.shape[1] * self.page_size

    @property
    def batch_size(self) -> int:
        return self.lengths_B.shape[0]


def init_paged_cache(cfg: Qwen3_5Config, batch_size: int, max_len: int, num_pages: int, page_size: int = 16,
                     dtype=jnp.float32) -> Qwen3_5PagedCache:
    """An empty paged cache: ``batch_size`` slots of up to ``max_len`` tokens sharing a pool of
    ``num_pages`` pages of ``page_size`` tokens (KV and conv state in ``dtype``, recurrent
    state fp32). Block tables start pointing at page 0; the caller assigns pages."""
    if batch_size < 1 or max_len < 1 or num_pages < 1 or page_size < 1:
        raise ValueError(f"init_paged_cache: batch_size={batch_size}, max_len={max_len}, num_pages={num_pages} "
                         f"and page_size={page_size} must be >= 1")
    n_full = sum(t == FULL for t in cfg.layer_types)
    n_lin = sum(t == LINEAR for t in cfg.layer_types)
    B, M = batch_size, -(-max_len // page_size)
    kv = (n_full, num_pages, page_size, cfg.num_key_value_heads, cfg.head_dim)
    return Qwen3_5PagedCache(
        lengths_B=jnp.zeros((B,), jnp.int32), block_tables_BM=jnp.zeros((B, M), jnp.int32),
        k_LPZKH=jnp.zeros(kv, dtype), v_LPZKH=jnp.zeros(kv, dtype),
        conv_LBCW=jnp.zeros((n_lin, B, cfg.linear_conv_dim, cfg.linear_conv_kernel_dim - 1), dtype),
        state_LBNAE=jnp.zeros((n_lin, B, cfg.linear_num_value_heads, cfg.linear_key_head_dim,
                               cfg.linear_value_head_dim), jnp.float32),
    )


def reset_paged_rows(cache: Qwen3_5PagedCache, reset_B) -> Qwen3_5PagedCache:
    """Zero the length and GDN states of the slots where ``reset_B`` is True. Their pages are
    not touched: a slot only ever reads positions below its length, and pages are reassigned by
    the allocator."""
    reset_B = jnp.asarray(reset_B, bool)

    def zero(a, axis):
        shape = [1] * a.ndim
        shape[axis] = a.shape[axis]
        return jnp.where(reset_B.reshape(shape), jnp.zeros((), a.dtype), a)

    return dataclasses.replace(cache, lengths_B=zero(cache.lengths_B, 0), conv_LBCW=zero(cache.conv_LBCW, 1),
                               state_LBNAE=zero(cache.state_LBNAE, 1))


def paged_cache_logical_axes() -> Qwen3_5PagedCache:
    """Logical axis names of every paged-cache array. The page pool is shared by all slots, so
    it is not split over the batch axes (with a data-parallel layout each data shard holds the
    whole pool); its kv heads go on ``tensor``."""
    return Qwen3_5PagedCache(
        lengths_B=("batch",), block_tables_BM=(None, None),
        k_LPZKH=(None, None, None, "kv_heads_cache", None),
        v_LPZKH=(None, None, None, "kv_heads_cache", None),
        conv_LBCW=(None, "batch", None, None),
        state_LBNAE=(None, "batch", "linear_heads_cache", None, None),
    )


def cache_bytes(cache) -> int:
    """Bytes held by the attention KV arrays of a cache (either kind)."""
    if isinstance(cache, Qwen3_5PagedCache):
        return int(cache.k_LPZKH.nbytes + cache.v_LPZKH.nbytes)
    return int(cache.k_LBSKH.nbytes + cache.v_LBSKH.nbytes)


def kv_arrays(cache):
    """The stacked key/value arrays of either cache kind."""
    if isinstance(cache, Qwen3_5PagedCache):
        return cache.k_LPZKH, cache.v_LPZKH
    return cache.k_LBSKH, cache.v_LBSKH


def with_kv(cache, k, v):
    """``cache`` with its stacked key/value arrays replaced (either cache kind)."""
    if isinstance(cache, Qwen3_5PagedCache):
        return dataclasses.replace(cache, k_LPZKH=k, v_LPZKH=v)
    return dataclasses.replace(cache, k_LBSKH=k, v_LBSKH=v)


def layer_arrays(cache, t, slot):
    """What a layer's mixer gets: the stacked arrays of its layer type and its index in them
    (the mixer updates its own entry in place instead of returning a per-layer copy)."""
    if t == FULL:
        return kv_arrays(cache) + (slot,)
    return cache.conv_LBCW, cache.state_LBNAE, slot


def set_layer_arrays(cache, t, new):
    """``cache`` with a layer type's stacked arrays replaced by what its mixer returned."""
    if t == FULL:
        return with_kv(cache, new[0], new[1])
    return dataclasses.replace(cache, conv_LBCW=new[0], state_LBNAE=new[1])
