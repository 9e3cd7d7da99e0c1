"""Routed experts of Qwen3.5-MoE: the router with its load-balancing statistics, grouped matmuls,
and expert parallelism under ``jax.shard_map``.

Shape letters as in ``kernels``; also ``R`` routed rows (token, choice), ``P`` tile-padded rows,
``Q`` tiles, ``Xl`` experts held by one device, ``C`` rows a device sends to one other device.

Paths (``Qwen3_5Config.moe_impl``; docs/model.md, "Expert parallelism"):

* ``"ep"``: expert parallelism. The expert weights are sharded on their expert axis over the
  ``ep`` mesh axes (the rules' ``experts`` entry, ``expert`` by default), the tokens over the batch
  axes (which include the ``ep`` axes). Inside ``shard_map`` every device routes its own tokens,
  orders its routed rows by destination device, and sends them with one ``all_to_all`` over the
  ``ep`` axes into fixed ``[ep, C, D]`` buffers; the receiver sorts what it got by local expert,
  runs the grouped SwiGLU, and a second ``all_to_all`` brings the rows back, where they are
  weighted and added in token order. Expert weights never cross devices (FSDP / tensor shards
  of a device's own experts are gathered inside, as FSDP does for every weight).
  ``C`` is every local row (dropless, ``moe_capacity_factor = 0``: exact, buffers sized for the
  worst case) or ``ceil(capacity_factor * R / ep)`` (rows past it are dropped, later tokens
  first, and counted: ``MoeStats.dropped``). ``moe_dispatch="ragged"`` sends only the real rows
  with ``jax.lax.ragged_all_to_all`` into the same buffers (accelerators: XLA:CPU does not
  implement it).
* ``"sorted"``: one device (or no mesh): the same grouped SwiGLU on all routed rows.
* ``"dense"``: every expert on every token (``kernels.moe_experts``): the reference.
* ``"auto"``: ``"ep"`` on a multi-device mesh, else ``"sorted"``.

Grouped matmul (``moe_gmm``): ``"ragged_dot"`` (``lax.ragged_dot``: native grouped matmul on TPU;
XLA:CPU and, by default, XLA:GPU expand it to a dense product over every group) or ``"blocked"``
(rows sorted by expert, each expert's run padded to whole tiles of ``tm`` rows, one batched
matmul of every tile with its expert's weight gathered: static shapes, FLOPs of the real rows
plus at most one tile per expert). ``"auto"``: ragged_dot on TPU, blocked elsewhere.
"""
from __future__ import annotations

import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax import lax
from jax.sharding import PartitionSpec as P

from . import kernels as K

F32 = jnp.float32
IMPLS = ("auto", "ep", "sorted", "dense")
DISPATCHES = ("all_to_all", "ragged")
GMMS = ("auto", "ragged_dot", "blocked")
GATE_UP_AXES = ("experts", "expert_mlp", "embed")    # logical axes of Experts.gate_up_proj
DOWN_AXES = ("experts", "embed", "expert_mlp")       # logical axes of Experts.down_proj


@struct.dataclass
class MoeStats:
    """Router statistics summed over MoE layers (and tokens): what the load-balancing loss
    (``rl.losses.load_balancing_loss``) and the routing metrics need. Sums, so layers add up."""
    counts_X: jax.Array      # routed (token, choice) assignments per expert, valid tokens only
    probs_X: jax.Array       # sum over valid tokens of the router's softmax probability per expert
    tokens: jax.Array        # valid tokens routed (summed over layers, like HF's concatenated rows)
    dropped: jax.Array       # routed assignments dropped by the capacity limit

    @classmethod
    def zeros(cls, num_experts: int) -> "MoeStats":
        z = jnp.zeros((), F32)
        return cls(jnp.zeros((num_experts,), F32), jnp.zeros((num_experts,), F32), z, z)

    def __add__(self, other: "MoeStats") -> "MoeStats":
        return jax.tree.map(jnp.add, self, other)


def route(x_SD, router_XD, top_k: int, renormalize: bool, mask_S=None):
    """``(w_SK in x's dtype, idx_SK, MoeStats)``: ``kernels.route_topk`` plus the statistics of
    the valid tokens (``mask_S``; all when None)."""
    logits_SX, w_SK, idx_SK = K.route_topk(x_SD, router_XD, top_k, renormalize)
    X = router_XD.shape[0]
    m_S = jnp.ones(x_SD.shape[:1], F32) if mask_S is None else mask_S.astype(F32)
    probs_SX = jax.nn.softmax(logits_SX.astype(F32), axis=-1)
    counts_X = jnp.zeros((X,), F32).at[idx_SK.reshape(-1)].add(jnp.repeat(m_S, top_k))
    stats = MoeStats(counts_X=counts_X, probs_X=jnp.einsum("sx,s->x", probs_SX, m_S), tokens=jnp.sum(m_S),
                     dropped=jnp.zeros((), F32))
    return w_SK, idx_SK, stats


# ---------------------------------------------------------------------------------------------
# grouped SwiGLU over rows sorted by expert
# ---------------------------------------------------------------------------------------------
def default_gmm() -> str:
    return "ragged_dot" if jax.default_backend() == "tpu" else "blocked"


def _tile_rows(R: int, X: int) -> int:
    """Tile height of the blocked grouped matmul: a power of two with at most ~12.5% padding
    (``X * tm <= R / 8``), between 8 and 256."""
    tm = 1 << max(3, int(math.floor(math.log2(max(R // (8 * max(X, 1)), 1)))))
    return int(min(tm, 256))


def _blocked_matmul(xs_RD, w_XDF, sizes_X, tm: int):
    """``ragged_dot`` as one batched matmul over tiles: expert x's rows start at a tile boundary;
    tile q multiplies its rows by the weight of the expert that owns it."""
    R, D = xs_RD.shape
    X = w_XDF.shape[0]
    Q = -(-R // tm) + X                                 # enough tiles for any split of R rows
    tiles_X = -(-sizes_X // tm)
    tile_start_X = jnp.cumsum(tiles_X) - tiles_X
    row_start_X = jnp.cumsum(sizes_X) - sizes_X
    e_R = jnp.searchsorted(jnp.cumsum(sizes_X), jnp.arange(R), side="right")     # expert of each row (X: none)
    e_c = jnp.minimum(e_R, X - 1)
    dest_R = jnp.where(e_R < X, tile_start_X[e_c] * tm + jnp.arange(R) - row_start_X[e_c], Q * tm)
    x_PD = jnp.zeros((Q * tm, D), xs_RD.dtype).at[dest_R].set(xs_RD, mode="drop")
    owner_Q = jnp.searchsorted(jnp.cumsum(tiles_X), jnp.arange(Q), side="right")
    w_QDF = w_XDF[jnp.minimum(owner_Q, X - 1)]
    y_QtF = jnp.einsum("qtd,qdf->qtf", x_PD.reshape(Q, tm, D), w_QDF, preferred_element_type=F32)
    y_PF = y_QtF.reshape(Q * tm, -1)
    return jnp.where((e_R < X)[:, None], y_PF[jnp.minimum(dest_R, Q * tm - 1)], 0.0).astype(xs_RD.dtype)


def grouped_matmul(xs_RD, w_XDF, sizes_X, gmm: str):
    """Rows ``[sizes_X[0] of expert 0, sizes_X[1] of expert 1, ...]`` times their expert's
    ``[D, F]`` weight; rows past ``sum(sizes_X)`` give 0."""
    if gmm == "ragged_dot":
        return lax.ragged_dot(xs_RD, w_XDF, sizes_X)
    if gmm == "blocked":
        return _blocked_matmul(xs_RD, w_XDF, sizes_X, _tile_rows(xs_RD.shape[0], w_XDF.shape[0]))
    raise ValueError(f"moe_gmm {gmm!r}; use one of {GMMS}")


def expert_ffn(x_RD, e_R, gate_up_XFD, down_XDI, gmm: str):
    """SwiGLU of every row by its expert ``e_R`` (``e_R == X``: no expert, output 0), rows in any
    order: sorted by expert, two grouped matmuls, unsorted. fp32 result."""
    X, F2, _ = gate_up_XFD.shape
    I = F2 // 2
    order_R = jnp.argsort(e_R, stable=True)
    sizes_X = jnp.zeros((X + 1,), jnp.int32).at[e_R].add(1)[:X]
    xs_RD = x_RD[order_R]
    h_RF = grouped_matmul(xs_RD, jnp.swapaxes(gate_up_XFD, 1, 2), sizes_X, gmm)
    a_RI = jax.nn.silu(h_RF[:, :I]) * h_RF[:, I:]
    y_RD = grouped_matmul(a_RI, jnp.swapaxes(down_XDI, 1, 2), sizes_X, gmm)
    return jnp.zeros(y_RD.shape, F32).at[order_R].set(y_RD.astype(F32))


def _combine(y_RD, w_SK, S: int):
    """Weighted sum of each token's routed rows (row r = token r // top_k), fp32."""
    Kk = w_SK.shape[1]
    tok_R = jnp.arange(y_RD.shape[0]) // Kk
    return jnp.zeros((S, y_RD.shape[1]), F32).at[tok_R].add(y_RD * w_SK.reshape(-1, 1).astype(F32))


def sorted_experts(x_SD, w_SK, idx_SK, gate_up_XFD, down_XDI, gmm: str, mask_S=None):
    """All routed rows on this device (no expert parallelism); masked tokens skip the experts."""
    S, Kk = idx_SK.shape
    X = gate_up_XFD.shape[0]
    e_R = idx_SK.reshape(-1)
    if mask_S is not None:
        e_R = jnp.where(jnp.repeat(mask_S, Kk), e_R, X)
    y_RD = expert_ffn(jnp.repeat(x_SD, Kk, axis=0), e_R, gate_up_XFD, down_XDI, gmm)
    return _combine(y_RD, w_SK, S).astype(x_SD.dtype)


# ---------------------------------------------------------------------------------------------
# expert parallelism
# ---------------------------------------------------------------------------------------------
def _axes(part) -> tuple:
    return () if part is None else ((part,) if isinstance(part, str) else tuple(part))


def capacity(rows: int, ep: int, capacity_factor: float) -> int:
    """Rows one device may send to one other device: all of them (dropless) or the factor's share."""
    if capacity_factor <= 0:
        return rows
    return int(min(rows, max(1, math.ceil(capacity_factor * rows / ep))))


def _ep_local(x_sD, w_sK, idx_sK, m_s, gu, dn, *, ep_axes, ep, gather, X, C, dispatch, gmm):
    """One device's share of the expert-parallel block (inside ``shard_map``)."""
    for ax, d in gather["gate_up"]:
        gu = lax.all_gather(gu, ax, axis=d, tiled=True)
    for ax, d in gather["down"]:
        dn = lax.all_gather(dn, ax, axis=d, tiled=True)
    s, D = x_sD.shape
    Kk = idx_sK.shape[1]
    Xl = X // ep
    R = s * Kk
    e_R = idx_sK.reshape(-1)
    valid_R = jnp.repeat(m_s, Kk)
    dev_R = jnp.where(valid_R, e_R // Xl, ep)                          # ep: not sent
    counts = jnp.zeros((ep + 1,), jnp.int32).at[dev_R].add(1)
    order = jnp.argsort(dev_R, stable=True)
    start = jnp.cumsum(counts) - counts
    pos_R = jnp.zeros((R,), jnp.int32).at[order].set(jnp.arange(R, dtype=jnp.int32) - start[dev_R[order]])
    keep_R = valid_R & (pos_R < C)
    dropped = jnp.sum((valid_R & ~keep_R).astype(F32))
    slot_R = jnp.where(keep_R, dev_R * C + pos_R, ep * C)              # ep * C: out of range, dropped
    send_x = jnp.zeros((ep * C, D), x_sD.dtype).at[slot_R].set(jnp.repeat(x_sD, Kk, axis=0), mode="drop")
    send_e = jnp.full((ep * C,), Xl, jnp.int32).at[slot_R].set(e_R % Xl, mode="drop")
    if ep == 1:
        recv_x, recv_e = send_x, send_e
    elif dispatch == "ragged":
        sizes = jnp.minimum(counts[:ep], C).astype(jnp.int32)
        recv_x, recv_e, recv_sizes = _ragged_exchange(send_x, send_e, sizes, ep_axes, ep, C, Xl)
    else:
        recv_x = lax.all_to_all(send_x, ep_axes, 0, 0, tiled=True)
        recv_e = lax.all_to_all(send_e, ep_axes, 0, 0, tiled=True)
    y = expert_ffn(recv_x, recv_e, gu, dn, gmm).astype(x_sD.dtype)
    if ep == 1:
        back = y
    elif dispatch == "ragged":
        back = _ragged_return(y, recv_sizes, ep_axes, ep, C)
    else:
        back = lax.all_to_all(y, ep_axes, 0, 0, tiled=True)
    y_R = jnp.where(keep_R[:, None], back[jnp.minimum(slot_R, ep * C - 1)], 0)
    return _combine(y_R.astype(F32), w_sK, s).astype(x_sD.dtype), dropped[None]


def _ragged_exchange(send_x, send_e, sizes, ep_axes, ep, C, Xl):
    """Send ``sizes[d]`` rows starting at ``d * C`` to device d; they land at ``me * C`` there
    (rows nobody sent keep expert id ``Xl``: no expert)."""
    me = lax.axis_index(ep_axes)
    offs = jnp.arange(ep, dtype=jnp.int32) * C
    recv_sizes = lax.all_to_all(sizes, ep_axes, 0, 0, tiled=True)
    out_offs = jnp.full((ep,), me * C, jnp.int32)
    recv_x = lax.ragged_all_to_all(send_x, jnp.zeros_like(send_x), offs, sizes, out_offs, recv_sizes,
                                   axis_name=ep_axes)
    recv_e = lax.ragged_all_to_all(send_e, jnp.full_like(send_e, Xl), offs, sizes, out_offs,
                                   recv_sizes, axis_name=ep_axes)
    return recv_x, recv_e, recv_sizes


def _ragged_return(y, recv_sizes, ep_axes, ep, C):
    me = lax.axis_index(ep_axes)
    offs = jnp.arange(ep, dtype=jnp.int32) * C
    back_sizes = lax.all_to_all(recv_sizes, ep_axes, 0, 0, tiled=True)
    return lax.ragged_all_to_all(y, jnp.zeros_like(y), offs, recv_sizes, jnp.full((ep,), me * C, jnp.int32),
                                 back_sizes, axis_name=ep_axes)


def ep_experts(x_SD, w_SK, idx_SK, gate_up_XFD, down_XDI, *, mesh, rules=None, mask_S=None,
               capacity_factor: float = 0.0, dispatch: str = "all_to_all", gmm: str = "blocked"):
    """Expert-parallel routed experts on ``mesh`` (module docstring). ``(out_SD, dropped)``:
    the combined expert output in token order and the routed rows dropped by the capacity."""
    from harness_jax import sharding as shd

    S, D = x_SD.shape
    X = gate_up_XFD.shape[0]
    Kk = idx_SK.shape[1]
    gu_spec = shd.logical_to_mesh(GATE_UP_AXES, mesh, rules, shape=gate_up_XFD.shape)
    dn_spec = shd.logical_to_mesh(DOWN_AXES, mesh, rules, shape=down_XDI.shape)
    ep_axes = _axes(gu_spec[0])
    if _axes(dn_spec[0]) != ep_axes:
        raise ValueError(f"moe ep: gate_up experts sharded over {ep_axes} but down over {_axes(dn_spec[0])}")
    batch = shd.batch_axes(mesh, rules)
    missing = [a for a in ep_axes if a not in batch]
    if missing:
        raise ValueError(f"moe_impl='ep': the expert weights are sharded over mesh axes {ep_axes} but the batch "
                         f"only over {batch}; add {missing} to the rules' 'batch' entry (tokens must be split "
                         "over every axis the experts are)")
    ep = int(np.prod([mesh.shape[a] for a in ep_axes], dtype=np.int64))
    n_tok = int(np.prod([mesh.shape[a] for a in batch], dtype=np.int64))
    mask = jnp.ones((S,), bool) if mask_S is None else mask_S.astype(bool)
    pad = (-S) % n_tok
    if pad:   # token count not divisible by the token shards: padded tokens are masked out
        x_SD = jnp.pad(x_SD, ((0, pad), (0, 0)))
        w_SK = jnp.pad(w_SK, ((0, pad), (0, 0)))
        idx_SK = jnp.pad(idx_SK, ((0, pad), (0, 0)))
        mask = jnp.pad(mask, (0, pad))
    s = (S + pad) // n_tok
    C = capacity(s * Kk, ep, capacity_factor)
    gather = {"gate_up": [(a, d) for d in (1, 2) for a in _axes(gu_spec[d])],
              "down": [(a, d) for d in (1, 2) for a in _axes(dn_spec[d])]}
    tok = P(batch or None, None)
    axis = ep_axes[0] if len(ep_axes) == 1 else (ep_axes or None)     # the all_to_all axis name(s)
    fn = jax.shard_map(
        lambda *a: _ep_local(*a, ep_axes=axis, ep=ep, gather=gather, X=X, C=C, dispatch=dispatch, gmm=gmm),
        mesh=mesh, in_specs=(tok, tok, tok, P(batch or None), gu_spec, dn_spec),
        out_specs=(tok, P(batch or None)), check_vma=False)
    out, dropped = fn(x_SD, w_SK, idx_SK, mask, gate_up_XFD, down_XDI)
    return out[:S], jnp.sum(dropped)


# ---------------------------------------------------------------------------------------------
# the block's routed part
# ---------------------------------------------------------------------------------------------
def resolve_impl(impl: str, mesh) -> str:
    if impl not in IMPLS:
        raise ValueError(f"moe_impl {impl!r}; use one of {IMPLS}")
    if impl == "auto":
        return "ep" if mesh is not None and mesh.size > 1 else "sorted"
    return impl


def routed_experts(x_SD, router_XD, gate_up_XFD, down_XDI, *, top_k: int, renormalize: bool = True,
                   impl: str = "auto", mesh=None, rules=None, mask_S=None, capacity_factor: float = 0.0,
                   dispatch: str = "all_to_all", gmm: str = "auto"):
    """Route, run the selected experts and combine: ``(out_SD, MoeStats)``."""
    w_SK, idx_SK, stats = route(x_SD, router_XD, top_k, renormalize, mask_S)
    impl = resolve_impl(impl, mesh)
    gmm = default_gmm() if gmm == "auto" else gmm
    if impl == "dense":
        out = K.moe_experts(x_SD, w_SK, idx_SK, gate_up_XFD, down_XDI, impl="dense")
    elif impl == "ep" and mesh is not None and mesh.size > 1:
        if dispatch not in DISPATCHES:
            raise ValueError(f"moe_dispatch {dispatch!r}; use one of {DISPATCHES}")
        out, dropped = ep_experts(x_SD, w_SK, idx_SK, gate_up_XFD, down_XDI, mesh=mesh, rules=rules,
                                  mask_S=mask_S, capacity_factor=capacity_factor, dispatch=dispatch, gmm=gmm)
        stats = stats.replace(dropped=dropped)
    else:
        out = sorted_experts(x_SD, w_SK, idx_SK, gate_up_XFD, down_XDI, gmm, mask_S)
    return out, stats
