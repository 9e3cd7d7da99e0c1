"""Generation cache for Qwen3.5: KV for full-attention layers, conv + recurrent state for GDN.

A plain pytree (jit-friendly, shardable on the batch axis). Arrays are stacked per layer type
in layer order: the j-th full-attention layer owns ``k_LBSKH[j]``, the j-th linear-attention
layer owns ``conv_LBCW[j]`` and ``state_LBNAE[j]``. Rows are independent sequences.
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
