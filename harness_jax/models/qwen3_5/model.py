"""Qwen3.5 text decoder (dense and MoE) as thin Flax NNX modules over ``kernels``.

Parameter paths and layouts mirror Hugging Face (``model.layers[i].linear_attn.in_proj_qkv.weight``
holds ``[out, in]``), so the checkpoint mapping is nearly the identity. Every parameter carries
logical axis names in its ``out_sharding`` metadata (see ``harness_jax/sharding.py``).

With ``cfg.scan_layers`` the decoder is stored as ``model.cycles[j]``: one module per position j
of the repeated layer cycle (e.g. 3 linear + 1 full), each holding parameters stacked over the
cycle repetitions on a leading ``layers`` axis, and the forward is a ``lax.scan`` over cycles,
so compile time does not grow with depth.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp
from flax import nnx
from flax import struct
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import NamedSharding, PartitionSpec as P

from . import attention as A
from . import gdn_pallas
from . import kernels as K
from . import moe as moe_lib
from . import paged_attention as PA
from .cache import Qwen3_5Cache, Qwen3_5PagedCache, kv_arrays, layer_arrays, set_layer_arrays, with_kv
from .config import FULL, LINEAR, Qwen3_5Config
from .remat import LAYER_INPUT, ordered_remat, remat_policy

from harness_jax import sharding as shd

Array = jax.Array


def _param(value, axes):
    return nnx.Param(value, out_sharding=tuple(axes), eager_sharding=False)


def _normal(rngs, shape, std, dtype):
    return (std * jax.random.normal(rngs.params(), shape, jnp.float32)).astype(dtype)


# ---------------------------------------------------------------------------------------------
# leaf modules
# ---------------------------------------------------------------------------------------------
class Linear(nnx.Module):
    """``y = x W^T (+ b)`` with the HF ``[out, in]`` weight layout.

    ``in_out = True`` (set only by ``decode_layout``, for serving) stores the weight transposed.
    """

    def __init__(self, in_features, out_features, axes, *, rngs, std, dtype, param_dtype, bias=False):
        self.weight = _param(_normal(rngs, (out_features, in_features), std, param_dtype), axes)
        self.bias = _param(jnp.zeros((out_features,), param_dtype), axes[:1]) if bias else None
        self.dtype = dtype
        self.in_out = False

    def __call__(self, x):
        mm = K.linear_in_out if self.in_out else K.linear
        y = mm(x.astype(self.dtype), self.weight[...].astype(self.dtype))
        if self.bias is not None:
            y = y + self.bias[...].astype(self.dtype)
        return y


class RMSNorm(nnx.Module):
    """Zero-centred RMSNorm (``(1 + w)``; HF initialises ``w`` to zeros)."""

    def __init__(self, dim, eps, *, param_dtype, axes=("norm",)):
        self.weight = _param(jnp.zeros((dim,), param_dtype), axes)
        self.eps = eps

    def __call__(self, x):
        return K.rms_norm(x, self.weight[...], self.eps)


class GatedRMSNorm(nnx.Module):
    """Plain-weight RMSNorm times ``silu(gate)`` on the Gated DeltaNet output."""

    def __init__(self, dim, eps, *, param_dtype):
        self.weight = _param(jnp.ones((dim,), param_dtype), ("norm",))
        self.eps = eps

    def __call__(self, x, gate):
        return K.gated_rms_norm(x, gate, self.weight[...].astype(x.dtype), self.eps)


class Conv1dWeight(nnx.Module):
    """Depthwise conv kernel, HF layout ``[C, 1, W]`` (applied by ``kernels.causal_conv1d``)."""

    def __init__(self, channels, width, *, rngs, std, param_dtype):
        self.weight = _param(_normal(rngs, (channels, 1, width), std, param_dtype), ("linear_conv", None, None))


class Embed(nnx.Module):
    def __init__(self, vocab, dim, *, rngs, std, dtype, param_dtype):
        self.weight = _param(_normal(rngs, (vocab, dim), std, param_dtype), ("vocab", "embed"))
        self.dtype = dtype

    def __call__(self, ids_BT):
        return jnp.take(self.weight[...], ids_BT, axis=0).astype(self.dtype)


# ---------------------------------------------------------------------------------------------
# per-call context shared by every layer
# ---------------------------------------------------------------------------------------------
@struct.dataclass
class LayerCtx:
    """Arrays every layer needs for one call; built once per forward by the model."""
    cos_BTR: Array
    sin_BTR: Array
    seg_start_BT: Optional[Array] = None     # packed forward: GDN resets
    segment_ids_BT: Optional[Array] = None   # cache-free forward: attention stays inside a segment (None: one per row)
    q_positions_BT: Optional[Array] = None   # cache path: position of each new token; attention sees positions <= it
                                             # (paged cache: -1 for padding tokens)
    write_pos_BT: Optional[Array] = None     # cache path: position of each new token (>= max_len: drop)
    valid_BT: Optional[Array] = None         # cache path: token t < num_new_B[b]
    num_new_B: Optional[Array] = None
    token_mask_BT: Optional[Array] = None    # tokens the MoE routers count and dispatch (None: valid_BT, else all)
    slots_B: Optional[Array] = None          # cache path: cache slot of each row (None: row b = slot b;
                                             # an out-of-range slot is a padding row: reads 0, writes dropped)
    block_tables_BM: Optional[Array] = None  # paged cache: page ids of each row's slot
    kv_lens_B: Optional[Array] = None        # paged cache: each row's length after this call
    decode: bool = struct.field(pytree_node=False, default=False)  # T == 1 with cache
    paged_impl: str = struct.field(pytree_node=False, default="auto")  # paged_attention impl (paged cache)
    mesh: Optional[jax.sharding.Mesh] = struct.field(pytree_node=False, default=None)  # the model's mesh (set_mesh)
    rules: Optional[tuple] = struct.field(pytree_node=False, default=None)            # its logical-axis rules


def _rows_of(a_L, j, slots_B):
    """Entry ``j`` of a stacked per-slot cache array, for the rows of this call."""
    if slots_B is None:
        return a_L[j]
    return jnp.take(a_L[j], slots_B, axis=0, mode="fill", fill_value=0)


def _set_rows(a_L, j, slots_B, new):
    """Writes the rows' new values into entry ``j`` (padding rows' writes are dropped)."""
    new = new.astype(a_L.dtype)
    if slots_B is None:
        return a_L.at[j].set(new)
    return a_L.at[j, slots_B].set(new, mode="drop")


# ---------------------------------------------------------------------------------------------
# mixers
# ---------------------------------------------------------------------------------------------
class GatedDeltaNet(nnx.Module):
    """Linear-attention mixer: fused qkv -> causal conv -> gated delta rule -> gated norm."""

    def __init__(self, cfg: Qwen3_5Config, *, rngs, dtype, param_dtype):
        D, std = cfg.hidden_size, cfg.initializer_range
        kw = dict(rngs=rngs, std=std, dtype=dtype, param_dtype=param_dtype)
        self.cfg = cfg
        self.dtype = dtype
        C, W, N = cfg.linear_conv_dim, cfg.linear_conv_kernel_dim, cfg.linear_num_value_heads
        self.conv1d = Conv1dWeight(C, W, rngs=rngs, std=std, param_dtype=param_dtype)
        self.dt_bias = _param(jnp.ones((N,), param_dtype), ("linear_heads",))
        A = jax.random.uniform(rngs.params(), (N,), jnp.float32, 0.01, 16.0)
        self.A_log = _param(jnp.log(A).astype(param_dtype), ("linear_heads",))
        self.norm = GatedRMSNorm(cfg.linear_value_head_dim, cfg.rms_norm_eps, param_dtype=param_dtype)
        self.out_proj = Linear(cfg.linear_value_dim, D, ("linear_v", "embed"), **kw)
        self.in_proj_qkv = Linear(D, C, ("linear_conv", "embed"), **kw)
        self.in_proj_z = Linear(D, cfg.linear_value_dim, ("linear_v", "embed"), **kw)
        self.in_proj_b = Linear(D, N, ("linear_heads", "embed"), **kw)
        self.in_proj_a = Linear(D, N, ("linear_heads", "embed"), **kw)

    def __call__(self, x_BTD, ctx: LayerCtx, cache=None):
        cfg = self.cfg
        B, T, _ = x_BTD.shape
        Kh, A = cfg.linear_num_key_heads, cfg.linear_key_head_dim
        N, E = cfg.linear_num_value_heads, cfg.linear_value_head_dim
        qkv_BTC = self.in_proj_qkv(x_BTD)
        z_BTNE = self.in_proj_z(x_BTD).reshape(B, T, N, E)
        b_BTN = self.in_proj_b(x_BTD)
        a_BTN = self.in_proj_a(x_BTD)
        w_CW = self.conv1d.weight[...][:, 0, :].astype(self.dtype)
        # cache: (conv_LBCW, state_LBNAE, slot) -- the stacked arrays of every linear layer and
        # this layer's index in them; the new state is written straight back into them
        conv_state = rec_state = None
        if cache is not None:
            conv_L, state_L, slot = cache
            if state_L.dtype != jnp.float32:  # a bf16 state would re-quantise the memory every token
                raise ValueError(f"Qwen3_5Cache.state_LBNAE is {state_L.dtype}; the Gated DeltaNet recurrent "
                                 "state must be float32 whatever the compute dtype (build caches with "
                                 "qwen3_5.init_cache)")
            conv_state, rec_state = _rows_of(conv_L, slot, ctx.slots_B), _rows_of(state_L, slot, ctx.slots_B)
        y_BTC = K.causal_conv1d(qkv_BTC, w_CW, seg_start_BT=ctx.seg_start_BT, state_BCW=conv_state)
        kd = cfg.linear_key_dim
        q_BTKA = y_BTC[..., :kd].reshape(B, T, Kh, A)
        k_BTKA = y_BTC[..., kd:2 * kd].reshape(B, T, Kh, A)
        v_BTNE = y_BTC[..., 2 * kd:].reshape(B, T, N, E)
        beta_BTN, g_BTN = K.gdn_gates(b_BTN, a_BTN, self.A_log[...], self.dt_bias[...])
        if ctx.valid_BT is not None:  # right-padding of a ragged extend: leave the state alone
            beta_BTN = jnp.where(ctx.valid_BT[..., None], beta_BTN, 0.0)
            g_BTN = jnp.where(ctx.valid_BT[..., None], g_BTN, 0.0)
        o_BTNE, new_state = gdn_rule(cfg, ctx)(q_BTKA, k_BTKA, v_BTNE, g_BTN, beta_BTN, rec_state, ctx.seg_start_BT)
        o_BTNE = self.norm(o_BTNE.astype(self.dtype), z_BTNE)
        out_BTD = self.out_proj(o_BTNE.reshape(B, T, N * E))
        if cache is None:
            return out_BTD, None
        new_conv = K.conv_state_after(qkv_BTC, conv_state, ctx.num_new_B)
        return out_BTD, (_set_rows(conv_L, slot, ctx.slots_B, new_conv),
                         _set_rows(state_L, slot, ctx.slots_B, new_state))


def gdn_rule(cfg: Qwen3_5Config, ctx: LayerCtx):
    """The gated delta rule this call uses, as ``f(q, k, v, g, beta, state, seg_start) -> (o, state)``:
    ``cfg.gdn_impl`` "jnp" (``kernels``: chunked, recurrent for decode) or "pallas" (``gdn_pallas``:
    the chunk-walking kernels, the fused decode step; under a mesh, one kernel call per shard)."""
    if cfg.gdn_impl == "jnp":
        if ctx.decode:
            return lambda q, k, v, g, b, s, st: K.recurrent_gated_delta_rule(q, k, v, g, b, state_BNAE=s,
                                                                           seg_start_BT=st)
        return lambda q, k, v, g, b, s, st: K.chunk_gated_delta_rule(q, k, v, g, b, state_BNAE=s, seg_start_BT=st,
                                                                   chunk_size=cfg.gdn_chunk_size)
    if ctx.decode:
        fn = lambda q, k, v, g, b, s, st: gdn_pallas.decode_step(q, k, v, g, b, state_BNAE=s, seg_start_BT=st)
    else:
        # layers rematerialised in the backward recompute their forward anyway: keep its chunk states
        res = "recompute" if cfg.remat == "none" else "states"
        fn = lambda q, k, v, g, b, s, st: gdn_pallas.chunk_gated_delta_rule(
            q, k, v, g, b, state_BNAE=s, seg_start_BT=st, chunk_size=cfg.gdn_chunk_size, residuals=res)
    return gdn_pallas.on_mesh(fn, ctx.mesh, ctx.rules)


class Attention(nnx.Module):
    """Gated full attention: q doubled for a sigmoid output gate, QK-norm, GQA, partial RoPE."""

    def __init__(self, cfg: Qwen3_5Config, *, rngs, dtype, param_dtype):
        D, Nh, Kv, H = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        kw = dict(rngs=rngs, std=cfg.initializer_range, dtype=dtype, param_dtype=param_dtype,
                  bias=cfg.attention_bias)
        self.cfg = cfg
        self.dtype = dtype
        self.q_proj = Linear(D, Nh * H * 2, ("q_heads", "embed"), **kw)
        self.k_proj = Linear(D, Kv * H, ("kv_heads", "embed"), **kw)
        self.v_proj = Linear(D, Kv * H, ("kv_heads", "embed"), **kw)
        self.o_proj = Linear(Nh * H, D, ("embed", "q_heads"), **kw)
        self.q_norm = RMSNorm(H, cfg.rms_norm_eps, param_dtype=param_dtype)
        self.k_norm = RMSNorm(H, cfg.rms_norm_eps, param_dtype=param_dtype)

    def __call__(self, x_BTD, ctx: LayerCtx, cache=None):
        cfg = self.cfg
        B, T, _ = x_BTD.shape
        Nh, Kv, H = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        qg_BTN2H = self.q_proj(x_BTD).reshape(B, T, Nh, 2 * H)
        q_BTNH, gate_BTNH = qg_BTN2H[..., :H], qg_BTN2H[..., H:]
        q_BTNH = self.q_norm(q_BTNH)
        k_BTKH = self.k_norm(self.k_proj(x_BTD).reshape(B, T, Kv, H))
        v_BTKH = self.v_proj(x_BTD).reshape(B, T, Kv, H)
        q_BTNH = K.apply_partial_rope(q_BTNH, ctx.cos_BTR, ctx.sin_BTR)
        k_BTKH = K.apply_partial_rope(k_BTKH, ctx.cos_BTR, ctx.sin_BTR)
        new_cache = None
        if cache is None:
            k_BSKH, v_BSKH = k_BTKH, v_BTKH
        elif ctx.block_tables_BM is not None:
            o_BTNH, new_cache = self._paged(q_BTNH, k_BTKH, v_BTKH, ctx, cache)
        else:
            # cache: (k_LBSKH, v_LBSKH, slot) -- the stacked arrays of every attention layer; the
            # new tokens are scattered straight into them (in place when the cache is donated;
            # no per-layer copy of the whole [B, S, K, H] slab)
            k_LBSKH, v_LBSKH, slot = cache
            rows = jnp.arange(B) if ctx.slots_B is None else ctx.slots_B
            r_BT = jnp.broadcast_to(rows[:, None], (B, T))
            k_LBSKH = k_LBSKH.at[slot, r_BT, ctx.write_pos_BT].set(k_BTKH.astype(k_LBSKH.dtype), mode="drop")
            v_LBSKH = v_LBSKH.at[slot, r_BT, ctx.write_pos_BT].set(v_BTKH.astype(v_LBSKH.dtype), mode="drop")
            new_cache = (k_LBSKH, v_LBSKH)
            k_BSKH = _rows_of(k_LBSKH, slot, ctx.slots_B).astype(self.dtype)
            v_BSKH = _rows_of(v_LBSKH, slot, ctx.slots_B).astype(self.dtype)
        if ctx.block_tables_BM is None:
            o_BTNH = A.attention(q_BTNH, k_BSKH, v_BSKH, impl=cfg.attention_impl, scale=H ** -0.5,
                                 segment_ids_BT=ctx.segment_ids_BT, q_positions_BT=ctx.q_positions_BT,
                                 block_q=cfg.attention_block_q, block_kv=cfg.attention_block_kv,
                                 mesh=ctx.mesh, rules=ctx.rules)
        o_BTF = o_BTNH.reshape(B, T, Nh * H) * jax.nn.sigmoid(gate_BTNH.reshape(B, T, Nh * H))
        return self.o_proj(o_BTF), new_cache

    def _paged(self, q_BTNH, k_BTKH, v_BTKH, ctx: LayerCtx, cache):
        """Paged cache: scatter the new keys/values into the rows' pages (padding tokens and
        padding rows are dropped), then ragged paged attention over each row's pages."""
        k_LPZKH, v_LPZKH, slot = cache
        L, P, Z, Kv, H = k_LPZKH.shape
        M = ctx.block_tables_BM.shape[1]
        page_BT = jnp.take_along_axis(ctx.block_tables_BM, jnp.clip(ctx.write_pos_BT // Z, 0, M - 1), axis=1)
        flat_BT = jnp.where(ctx.q_positions_BT >= 0, page_BT * Z + ctx.write_pos_BT % Z, P * Z)   # P*Z: dropped

        def put(a_LPZKH, x_BTKH):
            a = a_LPZKH.reshape(L, P * Z, Kv, H).at[slot, flat_BT].set(x_BTKH.astype(a_LPZKH.dtype), mode="drop")
            return a.reshape(L, P, Z, Kv, H)

        k_LPZKH, v_LPZKH = put(k_LPZKH, k_BTKH), put(v_LPZKH, v_BTKH)
        o_BTNH = PA.paged_attention(q_BTNH, k_LPZKH[slot], v_LPZKH[slot], ctx.block_tables_BM, ctx.kv_lens_B,
                                    ctx.q_positions_BT, scale=H ** -0.5, impl=ctx.paged_impl)
        return o_BTNH, (k_LPZKH, v_LPZKH)


class MLP(nnx.Module):
    def __init__(self, cfg: Qwen3_5Config, width: int, *, rngs, dtype, param_dtype, axes=("mlp", "embed")):
        kw = dict(rngs=rngs, std=cfg.initializer_range, dtype=dtype, param_dtype=param_dtype)
        D = cfg.hidden_size
        self.gate_proj = Linear(D, width, axes, **kw)
        self.up_proj = Linear(D, width, axes, **kw)
        self.down_proj = Linear(width, D, axes[::-1], **kw)

    def __call__(self, x_BTD):
        return self.down_proj(jax.nn.silu(self.gate_proj(x_BTD)) * self.up_proj(x_BTD))


class Experts(nnx.Module):
    """Routed experts, fused as in HF's in-memory layout: gate_up ``[X, 2I, D]``, down ``[X, D, I]``."""

    def __init__(self, cfg: Qwen3_5Config, *, rngs, dtype, param_dtype):
        X, I, D, std = cfg.num_experts, cfg.moe_intermediate_size, cfg.hidden_size, cfg.initializer_range
        self.gate_up_proj = _param(_normal(rngs, (X, 2 * I, D), std, param_dtype), ("experts", "expert_mlp", "embed"))
        self.down_proj = _param(_normal(rngs, (X, D, I), std, param_dtype), ("experts", "embed", "expert_mlp"))


class Router(nnx.Module):
    def __init__(self, cfg: Qwen3_5Config, *, rngs, param_dtype):
        self.weight = _param(_normal(rngs, (cfg.num_experts, cfg.hidden_size), cfg.initializer_range, param_dtype),
                             ("experts", "embed"))


class SparseMoeBlock(nnx.Module):
    """Top-k routed experts plus a sigmoid-gated shared expert (Qwen3.5-MoE); the routed part is
    ``moe.routed_experts`` (``cfg.moe_impl``: expert parallel on a multi-device mesh)."""

    def __init__(self, cfg: Qwen3_5Config, *, rngs, dtype, param_dtype):
        self.cfg = cfg
        self.dtype = dtype
        self.gate = Router(cfg, rngs=rngs, param_dtype=param_dtype)
        self.experts = Experts(cfg, rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        self.shared_expert = MLP(cfg, cfg.shared_expert_intermediate_size, rngs=rngs, dtype=dtype,
                                 param_dtype=param_dtype)
        self.shared_expert_gate = Linear(cfg.hidden_size, 1, (None, "embed"), rngs=rngs,
                                         std=cfg.initializer_range, dtype=dtype, param_dtype=param_dtype)

    def __call__(self, x_BTD, ctx: Optional[LayerCtx] = None):
        """``(out_BTD, moe.MoeStats)``."""
        cfg = self.cfg
        B, T, D = x_BTD.shape
        x_SD = x_BTD.reshape(B * T, D).astype(self.dtype)
        mask = mesh = rules = None
        if ctx is not None:
            mask = ctx.token_mask_BT if ctx.token_mask_BT is not None else ctx.valid_BT
            mesh = ctx.mesh
        if mesh is not None:   # the layer's weights arrive gathered over the FSDP axes (_run_layer)
            rules = shd.gathered_rules(ctx.rules)
        routed_SD, stats = moe_lib.routed_experts(
            x_SD, self.gate.weight[...].astype(self.dtype), self.experts.gate_up_proj[...].astype(self.dtype),
            self.experts.down_proj[...].astype(self.dtype), top_k=cfg.num_experts_per_tok,
            renormalize=cfg.norm_topk_prob, impl=cfg.moe_impl, mesh=mesh, rules=rules,
            mask_S=None if mask is None else mask.reshape(-1),
            capacity_factor=cfg.moe_capacity_factor, dispatch=cfg.moe_dispatch, gmm=cfg.moe_gmm)
        shared_SD = jax.nn.sigmoid(self.shared_expert_gate(x_SD)) * self.shared_expert(x_SD)
        return (routed_SD + shared_SD).reshape(B, T, D), stats


class DecoderLayer(nnx.Module):
    def __init__(self, cfg: Qwen3_5Config, layer_type: str, *, rngs, dtype, param_dtype):
        kw = dict(rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        self.layer_type = layer_type
        if layer_type == LINEAR:
            self.linear_attn = GatedDeltaNet(cfg, **kw)
        else:
            self.self_attn = Attention(cfg, **kw)
        if cfg.is_moe:
            self.mlp = SparseMoeBlock(cfg, **kw)
        else:
            self.mlp = MLP(cfg, cfg.intermediate_size, **kw)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=param_dtype)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=param_dtype)

    def __call__(self, x_BTD, ctx: LayerCtx, cache=None):
        """``(x_BTD, new cache, moe.MoeStats or None)``."""
        mixer = self.linear_attn if self.layer_type == LINEAR else self.self_attn
        if isinstance(x_BTD, tuple):
            return self._call_groups(mixer, x_BTD, ctx, cache)
        h_BTD, new_cache = mixer(self.input_layernorm(x_BTD), ctx, cache)
        x_BTD = x_BTD + h_BTD
        stats = None
        if isinstance(self.mlp, SparseMoeBlock):
            m_BTD, stats = self.mlp(self.post_attention_layernorm(x_BTD), ctx)
        else:
            m_BTD = self.mlp(self.post_attention_layernorm(x_BTD))
        return x_BTD + m_BTD, new_cache, stats

    def _call_groups(self, mixer, xs, ctxs, cache):
        """Row groups of one call (an engine step: decode rows ``[B, 1]`` next to prefill rows
        ``[B', T]``), each with its own ``LayerCtx``: the mixer runs per group over the shared
        cache (one group's writes are visible to the next), the MLP once over all their tokens (an MoE
        block routes only their valid tokens). ``(tuple of x_BTD, new cache, moe.MoeStats or None)``."""
        hs = []
        for x_BTD, ctx in zip(xs, ctxs):
            h_BTD, new = mixer(self.input_layernorm(x_BTD), ctx, cache)
            cache = (new[0], new[1], cache[2])
            hs.append(x_BTD + h_BTD)
        x_1ND = jnp.concatenate([h.reshape(1, -1, h.shape[-1]) for h in hs], axis=1)
        stats = None
        if isinstance(self.mlp, SparseMoeBlock):
            # the routers count and dispatch every group's valid tokens (not the right-padding)
            mask_1N = jnp.concatenate([c.valid_BT.reshape(1, -1) for c in ctxs], axis=1)
            m_1ND, stats = self.mlp(self.post_attention_layernorm(x_1ND), ctxs[0].replace(token_mask_BT=mask_1N))
        else:
            m_1ND = self.mlp(self.post_attention_layernorm(x_1ND))
        x_1ND = x_1ND + m_1ND
        out, i = [], 0
        for h in hs:
            n = h.shape[0] * h.shape[1]
            out.append(x_1ND[0, i:i + n].reshape(h.shape))
            i += n
        return tuple(out), cache[:2], stats


# ---------------------------------------------------------------------------------------------
# layer-cycle helpers
# ---------------------------------------------------------------------------------------------
def layer_cycle(layer_types) -> int:
    """Length of the shortest cycle that tiles ``layer_types`` exactly."""
    n = len(layer_types)
    for p in range(1, n + 1):
        if n % p == 0 and tuple(layer_types[:p]) * (n // p) == tuple(layer_types):
            return p
    return n


@dataclasses.dataclass(frozen=True)
class WeightPlan:
    """How a layer's weights reach its matmuls: cast to ``compute_dtype`` on their FSDP shards,
    then all-gathered (so the gather moves compute-dtype bytes); the weight-gradient matmuls of
    ``kernels.linear`` emit ``reduce_dtype``, the dtype their partial sums are reduce-scattered
    in. Static (hashable): part of the remat'd call's key."""
    compute_dtype: jnp.dtype
    reduce_dtype: jnp.dtype


def _run_layer(static, state, x_BTD, ctx, cache):
    graphdef, plan = static
    x_BTD = checkpoint_name(x_BTD, LAYER_INPUT)
    c0 = ctx[0] if isinstance(ctx, tuple) else ctx     # row groups (an engine step) share mesh and rules
    if c0.mesh is not None:
        state = shd.gather_params_for_compute(state, c0.mesh, c0.rules, plan.compute_dtype)
    layer = nnx.merge(graphdef, state)
    with K.weight_grad_dtype(plan.reduce_dtype):
        return layer(x_BTD, ctx, cache)


class TextModel(nnx.Module):
    """``model.*`` of HF: embeddings, decoder layers, final norm."""

    def __init__(self, cfg: Qwen3_5Config, *, rngs, dtype, param_dtype):
        self.cfg = cfg
        self.dtype = dtype
        self.embed_tokens = Embed(cfg.vocab_size, cfg.hidden_size, rngs=rngs, std=cfg.initializer_range,
                                  dtype=dtype, param_dtype=param_dtype)
        kw = dict(rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        if cfg.scan_layers:
            p = layer_cycle(cfg.layer_types)
            n_cycles = cfg.num_hidden_layers // p
            cycles = []
            for j in range(p):
                mods = [DecoderLayer(cfg, cfg.layer_types[j], **kw) for _ in range(n_cycles)]
                gd, _ = nnx.split(mods[0])
                stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *[nnx.split(m)[1] for m in mods])
                for _, var in nnx.to_flat_state(stacked):
                    var.set_metadata(out_sharding=("layers",) + tuple(var.get_metadata()["out_sharding"]))
                cycles.append(nnx.merge(gd, stacked))
            self.cycles = nnx.List(cycles)
        else:
            self.layers = nnx.List([DecoderLayer(cfg, t, **kw) for t in cfg.layer_types])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=param_dtype)
        self.mesh = None   # set by set_mesh: activations are pinned to batch sharding per block
        self.rules = None

    def constrain(self, x, between_layers: bool = False):
        """Pin a ``[B, ...]`` activation to the batch sharding of the mesh (block boundaries only).

        Without it GSPMD may shard activations along the hidden dim and partition the GDN scan
        with collectives inside every chunk step; with it weights are all-gathered (FSDP) and the
        mixers run locally per batch shard. ``between_layers``: ``x`` is a decoder layer's input
        ``[B, T, D]``, whose hidden dim also follows the ``activation_embed`` rule (split over the
        ``tensor`` axis on a tensor-parallel mesh, e.g. ``harness_r1/gpu8``; whole by default).
        """
        if self.mesh is None:
            return x
        if isinstance(x, tuple):
            return tuple(self.constrain(a, between_layers) for a in x)
        axes = ("batch",) + (None,) * (x.ndim - 1)
        if between_layers and x.ndim == 3 and shd.has_rule(self.rules, "activation_embed"):
            axes = ("batch", None, "activation_embed")
        spec = shd.logical_to_mesh(axes, self.mesh, self.rules, shape=x.shape)
        return jax.lax.with_sharding_constraint(x, jax.sharding.NamedSharding(self.mesh, spec))

    def compute_weight(self, var):
        """A weight Variable as the matmul reads it: the compute dtype, gathered over the FSDP
        axes after the cast when the model has a mesh (``sharding.gather_for_compute``)."""
        if self.mesh is None:
            return var[...].astype(self.dtype)
        return shd.gather_for_compute(var[...], shd.var_logical_axes(var), self.mesh, self.rules, self.dtype)

    def embed(self, ids_BT):
        """Token embeddings. On a mesh the table stays sharded over the FSDP axes of its hidden
        dim: every device looks up all rows' ids in its slice of the table, then the rows go back
        to batch sharding (an all-to-all of activations, never an all-gather of the [V, D] table;
        the gradient is a local scatter-add into the shard)."""
        if self.mesh is None:
            return self.embed_tokens(ids_BT)
        var = self.embed_tokens.weight
        spec = shd.logical_to_mesh(shd.var_logical_axes(var), self.mesh, self.rules, var.shape)
        ids_BT = jax.lax.with_sharding_constraint(ids_BT, NamedSharding(self.mesh, P()))
        x_BTD = jnp.take(var[...].astype(self.dtype), ids_BT, axis=0)
        x_BTD = jax.lax.with_sharding_constraint(x_BTD, NamedSharding(self.mesh, P(None, None, spec[1])))
        return self.constrain(x_BTD)

    # -------------------------------------------------------------------------------------
    def decoder(self, x_BTD, ctx: LayerCtx, cache: Optional[Qwen3_5Cache] = None):
        """Run all decoder layers (unrolled or scanned, with optional remat):
        ``(x_BTD, new cache or None, moe.MoeStats summed over layers or None)``."""
        cfg = self.cfg
        stats = moe_lib.MoeStats.zeros(cfg.num_experts) if cfg.is_moe else None
        add = (lambda a, b: a if b is None else a + b)
        run = _run_layer
        if cfg.remat in ("full", "offload"):
            run = ordered_remat(_run_layer, offload=cfg.remat == "offload")
        elif cfg.remat != "none":
            run = jax.checkpoint(_run_layer, static_argnums=(0,), policy=remat_policy(cfg.remat))
        plan = WeightPlan(jnp.dtype(self.dtype), jnp.dtype(cfg.reduce_scatter_dtype))
        slots = _slots(cfg.layer_types)
        if not cfg.scan_layers:
            for i, layer in enumerate(self.layers):
                t = cfg.layer_types[i]
                lc = None if cache is None else layer_arrays(cache, t, slots[i])
                gd, st = nnx.split(layer)
                x_BTD, nc, ls = run((gd, plan), st, self.constrain(x_BTD, between_layers=True), ctx, lc)
                stats = add(stats, ls)
                if cache is not None:
                    cache = set_layer_arrays(cache, t, nc)
            return x_BTD, cache, stats
        p = len(self.cycles)
        types = cfg.layer_types[:p]
        n_cycles = cfg.num_hidden_layers // p
        n_full_c = sum(t == FULL for t in types)
        n_lin_c = p - n_full_c
        gds, sts = zip(*(nnx.split(m) for m in self.cycles))
        cache_xs = None
        if cache is not None:
            def cyc(a, per):  # [n_layers_of_type, ...] -> [n_cycles, per, ...]
                return a.reshape((n_cycles, per) + a.shape[1:])
            k_L, v_L = kv_arrays(cache)
            cache_xs = (cyc(k_L, n_full_c), cyc(v_L, n_full_c),
                        cyc(cache.conv_LBCW, n_lin_c), cyc(cache.state_LBNAE, n_lin_c))

        def body(carry, xs):
            x_BTD, stats = carry
            states, cxs = xs   # cxs: this cycle's cache arrays, [per-cycle layers of a type, ...]
            fi = li = 0
            for j in range(p):
                if cxs is None:
                    lc = None
                elif types[j] == FULL:
                    lc = (cxs[0], cxs[1], fi)
                else:
                    lc = (cxs[2], cxs[3], li)
                x_BTD, nc, ls = run((gds[j], plan), states[j], self.constrain(x_BTD, between_layers=True), ctx, lc)
                stats = add(stats, ls)
                if cxs is not None:
                    if types[j] == FULL:
                        cxs = (nc[0], nc[1]) + cxs[2:]
                        fi += 1
                    else:
                        cxs = cxs[:2] + (nc[0], nc[1])
                        li += 1
            return (x_BTD, stats), cxs

        (x_BTD, stats), ys = jax.lax.scan(body, (x_BTD, stats), (tuple(sts), cache_xs))
        if cache is None:
            return x_BTD, None, stats
        flat = [y.reshape((-1,) + y.shape[2:]) for y in ys]
        return (x_BTD, dataclasses.replace(with_kv(cache, flat[0], flat[1]), conv_LBCW=flat[2],
                                           state_LBNAE=flat[3]), stats)


def _slots(layer_types):
    """Index of each layer among the layers of its own type (its slot in the cache arrays)."""
    counts = {FULL: 0, LINEAR: 0}
    out = []
    for t in layer_types:
        out.append(counts[t])
        counts[t] += 1
    return out


# ---------------------------------------------------------------------------------------------
# the causal LM
# ---------------------------------------------------------------------------------------------
class Qwen3_5ForCausalLM(nnx.Module):
    """Qwen3.5 causal LM. ``model(ids)`` -> logits; ``extend`` appends to a generation cache."""

    def __init__(self, cfg: Qwen3_5Config, *, rngs: nnx.Rngs, dtype=jnp.float32, param_dtype=jnp.float32):
        self.config = cfg
        self.dtype = jnp.dtype(dtype)
        self.model = TextModel(cfg, rngs=rngs, dtype=self.dtype, param_dtype=param_dtype)
        if cfg.tie_word_embeddings:
            self.lm_head = None
        else:
            self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size, ("vocab", "embed"), rngs=rngs,
                                  std=cfg.initializer_range, dtype=self.dtype, param_dtype=param_dtype)

    def decode_layout(self):
        """``(graphdef, state, convert)`` of a serving copy with ``[in, out]`` weights; see the
        module-level ``decode_layout``."""
        return decode_layout(self)

    def set_mesh(self, mesh, rules=None):
        """Record the mesh so activations are constrained to batch sharding at block boundaries."""
        self.model.mesh = mesh
        self.model.rules = None if rules is None else tuple(rules)
        return self

    # -------------------------------------------------------------------------------------
    def hidden_states(self, input_ids_BT, segment_ids=None, positions=None):
        """Final-normed hidden states ``[B, T, D]`` of a full (cache-free) forward.

        ``segment_ids [B, T]``: packed sequences; attention stays inside a segment, positions
        restart per segment (unless given) and the GDN conv/recurrent state resets at segment
        starts. ``positions``: ``[B, T]`` or ``[3, B, T]`` (multimodal RoPE streams).
        """
        return self.hidden_states_with_router_stats(input_ids_BT, segment_ids, positions)[0]

    def hidden_states_with_router_stats(self, input_ids_BT, segment_ids=None, positions=None, token_mask=None):
        """``(hidden_states, moe.MoeStats summed over the MoE layers, or None for a dense model)``;
        ``token_mask [B, T]`` (bool): the tokens the routers count and send to experts (padding
        is left out of the load-balancing statistics and of expert capacity; None: all)."""
        cfg = self.config
        input_ids_BT = jnp.asarray(input_ids_BT)
        if input_ids_BT.ndim != 2:
            raise ValueError(f"input_ids: expected shape [batch, seq], got {input_ids_BT.shape}")
        B, T = input_ids_BT.shape
        if segment_ids is None:
            seg_BT = jnp.zeros((B, T), jnp.int32)
            seg_start = None
        else:
            seg_BT = jnp.asarray(segment_ids)
            if seg_BT.shape != (B, T):
                raise ValueError(f"segment_ids: shape {seg_BT.shape} must equal input_ids shape {(B, T)}")
            seg_start = K.segment_starts(seg_BT)
        if positions is None:
            positions = (jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T)) if segment_ids is None
                         else K.positions_from_segments(seg_BT))
        cos, sin = K.rope_cos_sin(jnp.asarray(positions), cfg.rotary_dim, cfg.rope_theta, cfg.mrope_section,
                                  cfg.mrope_interleaved)
        ctx = LayerCtx(cos_BTR=cos, sin_BTR=sin, seg_start_BT=seg_start,
                       segment_ids_BT=None if segment_ids is None else seg_BT, mesh=self.model.mesh,
                       rules=self.model.rules,
                       token_mask_BT=None if token_mask is None else jnp.asarray(token_mask, bool))
        x_BTD = self.model.embed(input_ids_BT)
        x_BTD, _, stats = self.model.decoder(x_BTD, ctx)
        return self.model.constrain(self.model.norm(x_BTD)), stats

    def lm_logits(self, hidden_BTD):
        """Logits (fp32) from hidden states; lets callers compute log-probs chunk by chunk. On a
        mesh the head is gathered in the compute dtype per call (``TextModel.compute_weight``)."""
        var = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        mm = K.linear_in_out if self.lm_head is not None and self.lm_head.in_out else K.linear
        with K.weight_grad_dtype(self.config.reduce_scatter_dtype):
            return mm(hidden_BTD.astype(self.dtype), self.model.compute_weight(var), jnp.float32)

    def __call__(self, input_ids_BT, segment_ids=None, positions=None):
        return self.lm_logits(self.hidden_states(input_ids_BT, segment_ids, positions))

    # -------------------------------------------------------------------------------------
    def extend(self, input_ids_BT, cache, num_new_B=None, slots_B=None, paged_impl: str = "auto"):
        """Append ``num_new_B[b]`` right-padded tokens to row ``b`` of ``cache``.

        Positions continue from the cache's lengths; rows with ``num_new_B[b] == 0`` are left
        untouched. Prefill, single-token decode and multi-turn continuation are the same call.
        ``slots_B``: the cache slot of each row (default: row b is slot b; an out-of-range slot
        marks a padding row). ``paged_impl``: the ``paged_attention`` implementation (paged
        caches). Returns ``(logits_BTV fp32, new cache)``; logits at padded slots are meaningless.
        """
        hidden_BTD, new_cache = self.extend_hidden(input_ids_BT, cache, num_new_B, slots_B, paged_impl)
        return self.lm_logits(hidden_BTD), new_cache

    def extend_hidden(self, input_ids_BT, cache, num_new_B=None, slots_B=None, paged_impl: str = "auto"):
        """``extend`` without the LM head: ``(final-normed hidden_BTD, new cache)``.

        Samplers project only the positions they sample from (one per row), which matters with
        a 248k-token vocabulary: a full ``[B, T, V]`` prefill logit tensor is never built.
        """
        hidden, new_cache = self.extend_groups_hidden(((input_ids_BT, num_new_B, slots_B),), cache, paged_impl)
        return hidden[0], new_cache

    def extend_groups_hidden(self, groups, cache, paged_impl: str = "auto"):
        """Several row groups in one call: ``groups`` is a sequence of ``(input_ids_BT,
        num_new_B, slots_B)`` (e.g. decode rows ``[B, 1]`` and prefill chunks ``[B', T]``), whose
        slots are disjoint. Returns ``(tuple of hidden_BTD per group, new cache)``; the layers'
        projections and MLPs see every group's tokens once (``DecoderLayer._call_groups``)."""
        ctxs, xs, lengths_B = [], [], cache.lengths_B
        for ids_BT, num_new_B, slots_B in groups:
            ids_BT = jnp.asarray(ids_BT)
            ctx, num_new_B = self._cache_ctx(ids_BT, cache, num_new_B, slots_B, paged_impl)
            ctxs.append(ctx)
            xs.append(self.model.embed(ids_BT))
            lengths_B = (lengths_B + num_new_B if slots_B is None
                         else lengths_B.at[slots_B].add(num_new_B, mode="drop"))
        if len(xs) == 1:
            x_BTD, new_cache, _ = self.model.decoder(xs[0], ctxs[0], cache)
            hidden = (x_BTD,)
        else:
            hidden, new_cache, _ = self.model.decoder(tuple(xs), tuple(ctxs), cache)
        new_cache = dataclasses.replace(new_cache, lengths_B=lengths_B)
        return tuple(self.model.norm(h) for h in hidden), new_cache

    def _cache_ctx(self, input_ids_BT, cache, num_new_B, slots_B, paged_impl):
        """The ``LayerCtx`` of one row group appending to ``cache``; and its ``num_new_B``."""
        cfg = self.config
        B, T = input_ids_BT.shape
        if slots_B is None and cache.lengths_B.shape[0] != B:
            raise ValueError(f"extend: input batch {B} != cache batch {cache.lengths_B.shape[0]}; "
                             "pass slots_B to address a subset of the cache's slots")
        num_new_B = (jnp.full((B,), T, jnp.int32) if num_new_B is None
                     else jnp.asarray(num_new_B, jnp.int32).reshape(B))
        if slots_B is not None:
            slots_B = jnp.asarray(slots_B, jnp.int32).reshape(B)
        len_B = (cache.lengths_B if slots_B is None
                 else jnp.take(cache.lengths_B, slots_B, mode="fill", fill_value=0))
        S = cache.max_len
        t_T = jnp.arange(T, dtype=jnp.int32)
        pos_BT = len_B[:, None] + t_T[None, :]
        valid_BT = t_T[None, :] < num_new_B[:, None]
        write_BT = jnp.where(valid_BT, pos_BT, S)  # out of range -> dropped
        cos, sin = K.rope_cos_sin(pos_BT, cfg.rotary_dim, cfg.rope_theta, cfg.mrope_section, cfg.mrope_interleaved)
        kw = dict(cos_BTR=cos, sin_BTR=sin, write_pos_BT=write_BT, valid_BT=valid_BT, num_new_B=num_new_B,
                  slots_B=slots_B, decode=(T == 1), paged_impl=paged_impl, mesh=self.model.mesh,
                  rules=self.model.rules)
        if isinstance(cache, Qwen3_5PagedCache):
            bt_BM = (cache.block_tables_BM if slots_B is None
                     else jnp.take(cache.block_tables_BM, slots_B, axis=0, mode="fill", fill_value=0))
            # rows feeding nothing have no queries: length 0 keeps paged attention off their pages
            return LayerCtx(block_tables_BM=bt_BM, kv_lens_B=jnp.where(num_new_B > 0, len_B + num_new_B, 0),
                            q_positions_BT=jnp.where(valid_BT, pos_BT, -1), **kw), num_new_B
        return LayerCtx(q_positions_BT=pos_BT, **kw), num_new_B


# ---------------------------------------------------------------------------------------------
# serving layout
# ---------------------------------------------------------------------------------------------
def _to_decode_layout(m: Qwen3_5ForCausalLM) -> Qwen3_5ForCausalLM:
    """In place: every ``Linear`` weight transposed to ``[in, out]`` (``in_out=True``); a tied
    LM head gets its own transposed copy of the embedding (the lookup keeps ``[V, D]``)."""
    def transposed(var):
        meta = dict(var.get_metadata()) if hasattr(var, "get_metadata") else {}
        axes = meta.get("out_sharding")
        w = jnp.swapaxes(var[...], -1, -2)    # scanned stacks keep their leading layer axis
        if axes is None:
            return nnx.Param(w)
        axes = tuple(axes)
        return nnx.Param(w, out_sharding=axes[:-2] + (axes[-1], axes[-2]), eager_sharding=False)

    for _, node in list(nnx.iter_graph(m)):
        if isinstance(node, Linear) and not node.in_out:
            node.weight = transposed(node.weight)
            node.in_out = True
    if m.lm_head is None:
        emb = m.model.embed_tokens.weight
        V, D = emb.shape
        # an abstract module (no weight allocated), then the transposed embedding as its weight
        head = nnx.eval_shape(lambda: Linear(D, V, ("vocab", "embed"), rngs=nnx.Rngs(0), std=1.0,
                                             dtype=m.dtype, param_dtype=emb.dtype))
        head.weight = transposed(emb)
        head.in_out = True
        m.lm_head = nnx.data(head)   # was a static None (tied)
    return m


def decode_layout(model: Qwen3_5ForCausalLM):
    """A serving copy of ``model`` with ``[in, out]`` weights, and the converter that keeps it
    in sync with the learner.

    Returns ``(graphdef, state, convert)``: ``nnx.merge(graphdef, state)`` computes what
    ``model`` computes (same math, different matmul operand layout: results agree to float
    rounding); ``convert(hf_state) -> state`` is a jitted on-device transpose of a learner
    state (``nnx.state(model)``) into this layout (no host copy; it holds a second copy of
    the weights). Why: XLA:CPU's few-row decode matmuls stream ``[in, out]`` weights ~1.3x
    faster; on accelerators the HF layout is already right (``JaxEngine(weight_layout=...)``).
    """
    graphdef, state = nnx.split(model)

    def convert(hf_state):
        return nnx.split(_to_decode_layout(nnx.merge(graphdef, hf_state)))[1]

    m = _to_decode_layout(nnx.merge(graphdef, state))
    dgraph, dstate = nnx.split(m)
    return dgraph, dstate, jax.jit(convert)
