"""Pallas Gated DeltaNet: the chunked rule of ``kernels.chunk_gated_delta_rule`` as kernels that
walk the chunks of a sequence with the recurrent state held on chip, plus a fused decode step.

Same math and signature as the jnp reference (``kernels.chunk_gated_delta_rule``, tested against
it on the whole stress grid of ``tests/models/test_gdn_numerics.py``); the model picks one with
``Qwen3_5Config.gdn_impl`` ("jnp" | "pallas"). Shape letters as in ``kernels``; here also
``Tp`` padded length, ``BE`` the value-dim block of one program, ``nE = E / BE``.

Design (docs/model.md, "Pallas Gated DeltaNet"):

* **What stays in XLA.** O(T) elementwise preprocessing: fp32 L2 norms of q and k, the ``1/sqrt(A)``
  query scale, the decay clamp to ``[G_FLOOR, 0]``, the in-chunk cumulative log-decay ``c`` and the
  segment index ``r`` of every token inside its chunk. Autodiff differentiates through these
  (the reverse cumsum that turns ``dc`` into ``dg`` included), the kernels only see chunk-local math.
* **Forward kernel.** One program per (row, value head, value block); it walks the chunks in order
  (TPU: the last, "arbitrary" grid axis with the ``[A, BE]`` fp32 state in a VMEM scratch; GPU:
  a ``fori_loop`` inside one Triton program with the state as the loop carry). Per chunk: the
  ``[L, L]`` decay, ``beta k k^T`` and ``q k^T`` matrices are built on chip and never written out;
  the unit lower-triangular system ``(I + N)`` is inverted by the same blocked merge as the
  reference (``[[T11, 0], [-T22 N21 T11, T22]]``), written as masked full-tile matmuls
  ``T <- T - T (N * mask_s) T`` for ``s = 1, 2, 4, ...``: every intermediate is a block of the
  inverse itself (nothing grows, no powers of N); log2(L) - 1 levels of two full-tile fp32
  matmuls (``s = 1`` needs none). Full tiles do ~20x the FLOPs of the merge's own blocks at
  L = 64 (Triton has no static value slices; a 64-wide tile is one MXU pass). GQA: the q/k block of a value head is read from its key head (no repeat in memory).
* **Precision.** The state is fp32, and so is everything that flows into it: the keys (passed
  L2-normalised in fp32), the chunk system ``beta k k^T``, its inverse, ``T (beta v)``,
  ``T (beta exp(c) k)``, the state read ``kcum S`` and the update ``k^T u``, all at full fp32
  matmul precision (their backward products too). The readout, ``q S`` and ``(q k^T * D) u``
  (and their backward products), takes its matmul inputs in the input dtype (bf16 in a bf16 model)
  with fp32 accumulation: its rounding reaches the outputs only, never the state. Measured on the
  stress grid with bf16 inputs: state within 3e-5 of the fp32 recurrence (the jnp rule's figure);
  bf16 state-path products instead left 1e-2 state errors, most of it from the update ``k^T u``
  and from keys rounded to bf16 (docs/model.md).
* **Backward** (``jax.custom_vjp``): a reverse walk over the chunks carrying ``dS`` on chip; each
  chunk recomputes its intra-chunk matrices from the inputs and its chunk-start state. Residual
  policy (``residuals``): "recompute" saves only the inputs, and the backward first reruns the
  forward kernel in a states-only mode that writes the fp32 chunk-start states (transient,
  ``[B, N, M, A, E]``); "states" has the forward write them and keeps them as residuals (the model
  uses it when decoder blocks are rematerialised, where the forward runs again inside the
  backward anyway; "recompute" otherwise: no ``M x A x E`` residual per head lives between the
  passes).
* **Decode** (``decode_step``): one token per row, one program per (row, value head): L2 norms,
  decay, delta update and readout on the fp32 state in one kernel, the state updated in place
  (``input_output_aliases``); no matmul (reductions over the key dim), so it lowers for Mosaic
  and Triton alike.

Backends: "mosaic" (TPU; on CPU it runs in Pallas interpret mode, which is what the tests run),
"triton" (GPU through Pallas Triton; also runs in interpret mode on CPU). ``backend=None`` picks
by ``jax.default_backend()``.
"""
from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.sharding import PartitionSpec as P

from .kernels import F32, G_FLOOR, l2norm

BACKENDS = ("mosaic", "triton")
RESIDUALS = ("recompute", "states")
_HI = lax.Precision.HIGHEST


def default_backend() -> str:
    return "triton" if jax.default_backend() == "gpu" else "mosaic"


def _interpret() -> bool:
    return jax.default_backend() not in ("tpu", "gpu")


# ---------------------------------------------------------------------------------------------
# chunk math on values (shared by every kernel and backend)
# ---------------------------------------------------------------------------------------------
def _dot(a, b, mm_dtype):
    """``a @ b`` with ``mm_dtype`` operands and fp32 accumulation (full precision when fp32)."""
    mm = jnp.dtype(mm_dtype)
    return lax.dot_general(a.astype(mm), b.astype(mm), (((1,), (0,)), ((), ())), preferred_element_type=F32,
                           precision=_HI if mm == jnp.dtype(F32) else None)


def _dot32(a, b):
    return _dot(a, b, F32)


def _kv_head(n, G):
    """Key head of value head ``n`` in an index map (``lax.div``: ``//`` lowers through ``sign``,
    which Mosaic cannot lower without a TPU attached)."""
    return n if G == 1 else lax.div(n, jnp.int32(G))


def _iota(L, axis):
    return lax.broadcasted_iota(jnp.int32, (L, L), axis)


def _col(row_1L):
    """A ``[1, L]`` row as an ``[L, 1]`` column (masked lane reduction: no vector transpose)."""
    L = row_1L.shape[1]
    return jnp.sum(jnp.where(_iota(L, 0) == _iota(L, 1), row_1L, 0.0), axis=1, keepdims=True)


def _row(col_L1):
    L = col_L1.shape[0]
    return jnp.sum(jnp.where(_iota(L, 0) == _iota(L, 1), col_L1, 0.0), axis=0, keepdims=True)


def _last(row_1L):
    """The last entry of a ``[1, L]`` row as ``[1, 1]`` (a masked reduction: Triton has no slice)."""
    L = row_1L.shape[1]
    lane = lax.broadcasted_iota(jnp.int32, (1, L), 1)
    return jnp.sum(jnp.where(lane == L - 1, row_1L, 0.0), axis=1, keepdims=True)


def _masked_exp(x, mask):
    """``kernels._masked_exp``: exp of a masked, clamped-to-<=0 log-decay difference, else 0."""
    ok = mask & (x <= 0)
    return jnp.where(mask, jnp.exp(jnp.where(ok, x, 0.0)), 0.0), ok


def _unit_lower_inverse(n_LL):
    """``(I + N)^-1`` for strictly lower-triangular fp32 ``N``: the reference's blocked merge
    (``kernels.unit_lower_inverse``) on full tiles. With ``T`` block-diagonal in blocks of size s
    (inverses of the diagonal blocks), ``T - T (N * lower-left blocks of the 2s-blocks) T`` is
    block-diagonal in blocks of 2s: ``[[T11, 0], [-T22 N21 T11, T22]]``."""
    L = n_LL.shape[0]
    i, j = _iota(L, 0), _iota(L, 1)
    t = jnp.where(i == j, 1.0, 0.0).astype(F32)
    s, lg = 1, 0
    while s < L:
        same_pair = (i >> (lg + 1)) == (j >> (lg + 1))
        lower_left = ((i >> lg) & 1) == 1
        upper_right = ((j >> lg) & 1) == 0
        m = jnp.where(same_pair & lower_left & upper_right, n_LL, 0.0)
        t = t - m if s == 1 else t - _dot32(_dot32(t, m), t)     # s = 1: T = I, so T M T = M
        s, lg = 2 * s, lg + 1
    return t


def _chunk_common(k, c_row, b_row, r_row):
    """The chunk's masks, decays and inverse (everything that does not depend on the state)."""
    L = k.shape[0]
    i, j = _iota(L, 0), _iota(L, 1)
    c_col, b_col, r_col = _col(c_row), _col(b_row), _col(r_row)
    pair = (i >= j) & (r_col == r_row)
    strict = pair & (i > j)
    diff = c_col - c_row
    D, d_ok = _masked_exp(diff, pair)
    kk = _dot32(k, k.T)
    n_mat = jnp.where(strict, kk * b_col * D, 0.0)
    t = _unit_lower_inverse(n_mat)
    c_last, r_last = _last(c_row), _last(r_row)                       # [1, 1]
    in_dec, in_ok = _masked_exp(c_col, r_col == 0)                    # [L, 1]
    out_dec, out_ok = _masked_exp(c_last - c_col, r_col == r_last)    # [L, 1]
    cdec, c_ok = _masked_exp(c_last, r_last == 0)                     # [1, 1]
    return dict(pair=pair, strict=strict, D=D, d_ok=d_ok, kk=kk, t=t, b_col=b_col, in_dec=in_dec, in_ok=in_ok,
                out_dec=out_dec, out_ok=out_ok, cdec=cdec, c_ok=c_ok)


def _chunk_forward(q, k, v, c_row, b_row, r_row, s_AE, mm_dtype, want_out=True):
    """One chunk: ``(o [L, BE] fp32 or None, state after the chunk [A, BE] fp32)``."""
    x = _chunk_common(k, c_row, b_row, r_row)
    bv = x["b_col"] * v.astype(F32)
    bk = (x["b_col"] * x["in_dec"]) * k
    newv, kcum = _dot32(x["t"], bv), _dot32(x["t"], bk)
    u = newv - _dot32(kcum, s_AE)
    o = None
    if want_out:
        qkd = jnp.where(x["pair"], _dot(q, k.T, mm_dtype) * x["D"], 0.0)
        o = x["in_dec"] * _dot(q, s_AE, mm_dtype) + _dot(qkd, u, mm_dtype)
    s_new = x["cdec"] * s_AE + _dot32(k.T, u * x["out_dec"])
    return o, s_new


def _chunk_backward(q, k, v, c_row, b_row, r_row, s_AE, do, ds_new, mm_dtype):
    """Gradients of one chunk given the state at its start, ``dO`` and ``d(state after)``:
    ``(dq, dk [L, A], dv [L, BE], dc_row, db_row [1, L], d(state before) [A, BE])``, all fp32."""
    x = _chunk_common(k, c_row, b_row, r_row)
    b_col, in_dec, out_dec, D, t = x["b_col"], x["in_dec"], x["out_dec"], x["D"], x["t"]
    vf = v.astype(F32)
    bv, bk = b_col * vf, (b_col * in_dec) * k
    newv, kcum = _dot32(t, bv), _dot32(t, bk)
    u = newv - _dot32(kcum, s_AE)
    qk = _dot(q, k.T, mm_dtype)
    qkd = jnp.where(x["pair"], qk * D, 0.0)
    # state after = cdec S + k^T (u * out_dec)
    ds = x["cdec"] * ds_new
    dcdec = jnp.sum(jnp.sum(s_AE * ds_new, axis=1, keepdims=True), axis=0, keepdims=True)   # [1, 1]
    kds = _dot32(k, ds_new)                                                                # [L, BE]
    du = out_dec * kds
    dout = jnp.sum(kds * u, axis=1, keepdims=True)                                         # [L, 1]
    dk = _dot32(u * out_dec, ds_new.T)
    # o = in_dec (q S) + qkd u  (the readout: mm_dtype products, except what flows into dS)
    qs = _dot(q, s_AE, mm_dtype)
    dq = in_dec * _dot(do, s_AE.T, mm_dtype)
    ds = ds + _dot32(q.astype(F32).T, in_dec * do.astype(F32))
    din = jnp.sum(do.astype(F32) * qs, axis=1, keepdims=True)                              # [L, 1]
    du = du + _dot(qkd.T, do, mm_dtype)
    dqkd = jnp.where(x["pair"], _dot(do, u.T, mm_dtype), 0.0)
    dqk = dqkd * D
    dD = dqkd * qk
    dq = dq + _dot(dqk, k, mm_dtype)
    dk = dk + _dot(dqk.T, q, mm_dtype)
    # u = newv - kcum S
    dkcum = -_dot32(du, s_AE.T)
    ds = ds - _dot32(kcum.T, du)
    # newv = T bv, kcum = T bk (fp32)
    dt = _dot32(du, bv.T) + _dot32(dkcum, bk.T)
    dbv, dbk = _dot32(t.T, du), _dot32(t.T, dkcum)
    # T = (I + N)^-1:  dN = -T^T dT T^T on the strict lower triangle
    dn = jnp.where(x["strict"], -_dot32(_dot32(t.T, dt), t.T), 0.0)
    kk = x["kk"]
    dkk = dn * b_col * D
    db = jnp.sum(dn * kk * D, axis=1, keepdims=True)
    dD = dD + dn * kk * b_col
    dk = dk + _dot32(dkk + dkk.T, k)
    # bv = beta v, bk = beta in_dec k
    dv = b_col * dbv
    rk = jnp.sum(dbk * k, axis=1, keepdims=True)
    db = db + jnp.sum(dbv * vf, axis=1, keepdims=True) + in_dec * rk
    din = din + b_col * rk
    dk = dk + (b_col * in_dec) * dbk
    # the decays: D_ij = exp(c_i - c_j), in_dec_i = exp(c_i), out_dec_i = exp(c_L - c_i), cdec = exp(c_L)
    g = jnp.where(x["d_ok"], dD * D, 0.0)
    dc_col = jnp.sum(g, axis=1, keepdims=True) + jnp.where(x["in_ok"], din * in_dec, 0.0)
    gw = jnp.where(x["out_ok"], dout * out_dec, 0.0)
    dc_col = dc_col - gw
    dc_last = jnp.sum(gw, axis=0, keepdims=True) + jnp.where(x["c_ok"], dcdec * x["cdec"], 0.0)   # [1, 1]
    L = k.shape[0]
    last = lax.broadcasted_iota(jnp.int32, (1, L), 1) == L - 1
    dc_row = _row(dc_col) - jnp.sum(g, axis=0, keepdims=True) + jnp.where(last, dc_last, 0.0)
    return dq, dk, dv, dc_row, _row(db), ds


# ---------------------------------------------------------------------------------------------
# kernels: TPU (grid walks the chunks, state in a VMEM scratch) and GPU (fori_loop in a program)
# ---------------------------------------------------------------------------------------------
def _fwd_kernel_grid(q_ref, k_ref, v_ref, c_ref, b_ref, r_ref, s0_ref, *refs, mm_dtype, want_out, want_states):
    refs = list(refs)
    o_ref = refs.pop(0) if want_out else None
    sfin_ref = refs.pop(0)
    st_ref = refs.pop(0) if want_states else None
    (s_scr,) = refs
    m = pl.program_id(3)

    @pl.when(m == 0)
    def _():
        s_scr[...] = s0_ref[...]

    s = s_scr[...]
    if want_states:
        st_ref[...] = s
    o, s_new = _chunk_forward(q_ref[...], k_ref[...], v_ref[...], c_ref[...], b_ref[...], r_ref[...], s,
                              mm_dtype, want_out)
    if want_out:
        o_ref[...] = o.astype(o_ref.dtype)
    s_scr[...] = s_new

    @pl.when(m == pl.num_programs(3) - 1)
    def _():
        sfin_ref[...] = s_new


def _fwd_kernel_loop(q_ref, k_ref, v_ref, c_ref, b_ref, r_ref, s0_ref, *refs, mm_dtype, want_out, want_states,
                     L, M, A):
    refs = list(refs)
    o_ref = refs.pop(0) if want_out else None
    sfin_ref = refs.pop(0)
    st_ref = refs.pop(0) if want_states else None

    def body(m, s):
        t = pl.ds(m * L, L)
        if want_states:
            st_ref[pl.ds(m * A, A), :] = s
        o, s_new = _chunk_forward(q_ref[t, :], k_ref[t, :], v_ref[t, :], c_ref[t][None, :], b_ref[t][None, :],
                                  r_ref[t][None, :], s, mm_dtype, want_out)
        if want_out:
            o_ref[t, :] = o.astype(o_ref.dtype)
        return s_new

    sfin_ref[...] = lax.fori_loop(0, M, body, s0_ref[...].astype(F32))


def _bwd_kernel_grid(q_ref, k_ref, v_ref, c_ref, b_ref, r_ref, st_ref, do_ref, dsf_ref,
                     dq_ref, dk_ref, dv_ref, dc_ref, db_ref, ds0_ref, ds_scr, *, mm_dtype):
    m = pl.program_id(3)

    @pl.when(m == 0)
    def _():
        ds_scr[...] = dsf_ref[...]

    dq, dk, dv, dc, db, ds = _chunk_backward(q_ref[...], k_ref[...], v_ref[...], c_ref[...], b_ref[...],
                                             r_ref[...], st_ref[...], do_ref[...], ds_scr[...], mm_dtype)
    dq_ref[...], dk_ref[...], dv_ref[...] = dq, dk, dv
    dc_ref[...], db_ref[...] = dc, db
    ds_scr[...] = ds

    @pl.when(m == pl.num_programs(3) - 1)
    def _():
        ds0_ref[...] = ds


def _bwd_kernel_loop(q_ref, k_ref, v_ref, c_ref, b_ref, r_ref, st_ref, do_ref, dsf_ref,
                     dq_ref, dk_ref, dv_ref, dc_ref, db_ref, ds0_ref, *, mm_dtype, L, M, A):
    def body(i, ds_new):
        m = M - 1 - i
        t = pl.ds(m * L, L)
        dq, dk, dv, dc, db, ds = _chunk_backward(
            q_ref[t, :], k_ref[t, :], v_ref[t, :], c_ref[t][None, :], b_ref[t][None, :], r_ref[t][None, :],
            st_ref[pl.ds(m * A, A), :], do_ref[t, :], ds_new, mm_dtype)
        dq_ref[t, :], dk_ref[t, :], dv_ref[t, :] = dq, dk, dv
        dc_ref[t], db_ref[t] = dc[0], db[0]
        return ds

    ds0_ref[...] = lax.fori_loop(0, M, body, dsf_ref[...].astype(F32))


# ---------------------------------------------------------------------------------------------
# pallas_call wrappers
# ---------------------------------------------------------------------------------------------
def kernel_cost(B: int, N: int, Hk: int, T: int, A: int, E: int, L: int, mm_bytes: int, kind: str) -> dict:
    """Analytic cost of one kernel call (what ``pl.CostEstimate`` tells XLA, and what the
    benchmarks report; interpret mode on CPU has no meaningful cost analysis of its own).

    ``kind``: "forward" (with outputs), "states" (states-only walk), "backward". FLOPs count the
    matmuls (2 per multiply-add) of every chunk: the system ``k k^T`` and inverse (``4 L^3`` per
    doubling level), the solve, the state read/update, and for outputs ``q k^T``, ``q S``,
    ``(q k^T * D) u``; the backward is counted as its matmuls. Bytes: HBM traffic of the inputs
    and outputs (q per value head in the matmul dtype, k fp32, v, the per-token scalars, states).
    """
    M = -(-T // L)
    levels = max(0, (L - 1).bit_length() - 1)                                  # matmul levels (s = 2, 4, ...)
    system = 2 * L * L * A + 4 * L ** 3 * levels + 2 * L * L * (A + E)        # kk, inverse, T bv, T bk
    state = 2 * L * A * E * 2                                                  # kcum S, k^T u
    readout = 2 * L * L * A + 2 * L * A * E + 2 * L * L * E                   # q k^T, q S, qkd u
    tok_in = T * (mm_bytes * A + 4 * A + mm_bytes * E + 12)                    # q, k, v, c, beta, r per value head
    st = 4 * A * E
    if kind == "forward":
        flops, nbytes = system + state + readout, tok_in + T * mm_bytes * E + 2 * st
    elif kind == "states":
        flops, nbytes = system + state, tok_in + (M + 2) * st
    elif kind == "backward":
        # recompute (system, state read, q k^T, q S) + 19 gradient matmuls of the chunk
        flops = system + 2 * L * A * E + 2 * L * L * A + 2 * L * A * E
        flops += 2 * (6 * L * A * E + 5 * L * L * A + 4 * L * L * E + 2 * L ** 3 + L * L * (A + E))
        nbytes = tok_in + T * (mm_bytes * E + 4 * E + 8 * A + 8) + (M + 3) * st
    else:
        raise ValueError(f"kernel_cost kind {kind!r}")
    per = B * N
    return dict(flops=float(per * M * flops),
                transcendentals=float(per * M * (L * L + 3 * L)), bytes_accessed=float(per * nbytes))


def _cost_estimate(B, N, Hk, T, A, E, L, mm_dtype, kind):
    c = kernel_cost(B, N, Hk, T, A, E, L, jnp.dtype(mm_dtype).itemsize, kind)
    return pl.CostEstimate(flops=int(c["flops"]), transcendentals=int(c["transcendentals"]),
                           bytes_accessed=int(c["bytes_accessed"]))

def _compiler_params(backend, n_parallel):
    if backend == "mosaic":
        from jax.experimental.pallas import tpu as pltpu
        return pltpu.CompilerParams(dimension_semantics=("parallel",) * n_parallel + ("arbitrary",))
    from jax.experimental.pallas import triton as pltr
    return pltr.CompilerParams(num_warps=4, num_stages=1)


def _scratch(shape):
    from jax.experimental.pallas import tpu as pltpu
    return pltpu.VMEM(shape, F32)


def _forward(q, k, v, c, b, r, s0, o, want_out, want_states):
    """Run the forward kernel. Layouts: q, k ``[B, Hk, Tp, A]``; v ``[B, N, Tp, E]``; c, b
    ``[B, N, Tp]``; r ``[B, Tp]``; s0 ``[B, N, A, E]``. Returns (o ``[B, N, Tp, E]`` or None,
    final state, chunk-start states ``[B, N, M*A, E]`` or None)."""
    B, Hk, Tp, A = q.shape
    N, E = v.shape[1], v.shape[3]
    G, L, BE = N // Hk, o.L, o.block_e
    M, nE = Tp // L, E // BE
    out_shape = []
    if want_out:
        out_shape.append(jax.ShapeDtypeStruct((B, N, Tp, E), q.dtype))
    out_shape.append(jax.ShapeDtypeStruct((B, N, A, E), F32))
    if want_states:
        out_shape.append(jax.ShapeDtypeStruct((B, N, M * A, E), F32))
    kw = dict(mm_dtype=o.mm_dtype, want_out=want_out, want_states=want_states)
    cost = _cost_estimate(B, N, Hk, Tp, A, E, L, o.mm_dtype, "forward" if want_out else "states")
    if o.backend == "mosaic":
        qk_spec = pl.BlockSpec((None, None, L, A), lambda bb, n, e, m: (bb, _kv_head(n, G), m, 0))
        sc_spec = pl.BlockSpec((None, None, None, 1, L), lambda bb, n, e, m: (bb, n, m, 0, 0))
        in_specs = [qk_spec, qk_spec, pl.BlockSpec((None, None, L, BE), lambda bb, n, e, m: (bb, n, m, e)),
                    sc_spec, sc_spec, pl.BlockSpec((None, None, 1, L), lambda bb, n, e, m: (bb, m, 0, 0)),
                    pl.BlockSpec((None, None, A, BE), lambda bb, n, e, m: (bb, n, 0, e))]
        out_specs = []
        if want_out:
            out_specs.append(pl.BlockSpec((None, None, L, BE), lambda bb, n, e, m: (bb, n, m, e)))
        out_specs.append(pl.BlockSpec((None, None, A, BE), lambda bb, n, e, m: (bb, n, 0, e)))
        if want_states:
            out_specs.append(pl.BlockSpec((None, None, A, BE), lambda bb, n, e, m: (bb, n, m, e)))
        args = (q, k, v, c.reshape(B, N, M, 1, L), b.reshape(B, N, M, 1, L), r.reshape(B, M, 1, L), s0)
        call = pl.pallas_call(functools.partial(_fwd_kernel_grid, **kw), grid=(B, N, nE, M), in_specs=in_specs,
                              out_specs=out_specs, out_shape=out_shape, scratch_shapes=[_scratch((A, BE))],
                              compiler_params=_compiler_params("mosaic", 3), interpret=o.interpret,
                              cost_estimate=cost)
    else:
        qk_spec = pl.BlockSpec((None, None, Tp, A), lambda bb, n, e: (bb, _kv_head(n, G), 0, 0))
        sc_spec = pl.BlockSpec((None, None, Tp), lambda bb, n, e: (bb, n, 0))
        in_specs = [qk_spec, qk_spec, pl.BlockSpec((None, None, Tp, BE), lambda bb, n, e: (bb, n, 0, e)),
                    sc_spec, sc_spec, pl.BlockSpec((None, Tp), lambda bb, n, e: (bb, 0)),
                    pl.BlockSpec((None, None, A, BE), lambda bb, n, e: (bb, n, 0, e))]
        out_specs = []
        if want_out:
            out_specs.append(pl.BlockSpec((None, None, Tp, BE), lambda bb, n, e: (bb, n, 0, e)))
        out_specs.append(pl.BlockSpec((None, None, A, BE), lambda bb, n, e: (bb, n, 0, e)))
        if want_states:
            out_specs.append(pl.BlockSpec((None, None, M * A, BE), lambda bb, n, e: (bb, n, 0, e)))
        args = (q, k, v, c, b, r, s0)
        call = pl.pallas_call(functools.partial(_fwd_kernel_loop, L=L, M=M, A=A, **kw), grid=(B, N, nE),
                              in_specs=in_specs, out_specs=out_specs, out_shape=out_shape,
                              compiler_params=_compiler_params("triton", 0), interpret=o.interpret,
                              cost_estimate=cost)
    outs = list(call(*args))
    out = outs.pop(0) if want_out else None
    sfin = outs.pop(0)
    states = outs.pop(0) if want_states else None
    return out, sfin, states


def _backward(q, k, v, c, b, r, states, do, dsf, o):
    """Run the backward kernel; returns per-value-head, per-value-block partial gradients
    (dq, dk ``[B, N, nE, Tp, A]``; dv ``[B, N, Tp, E]``; dc, db ``[B, N, nE, Tp]``; ds0)."""
    B, Hk, Tp, A = q.shape
    N, E = v.shape[1], v.shape[3]
    G, L, BE = N // Hk, o.L, o.block_e
    M, nE = Tp // L, E // BE
    cost = _cost_estimate(B, N, Hk, Tp, A, E, L, o.mm_dtype, "backward")
    out_shape = [jax.ShapeDtypeStruct((B, N, nE, Tp, A), F32), jax.ShapeDtypeStruct((B, N, nE, Tp, A), F32),
                 jax.ShapeDtypeStruct((B, N, Tp, E), F32), jax.ShapeDtypeStruct((B, N, nE, Tp), F32),
                 jax.ShapeDtypeStruct((B, N, nE, Tp), F32), jax.ShapeDtypeStruct((B, N, A, E), F32)]
    if o.backend == "mosaic":
        rev = lambda m: M - 1 - m
        qk_spec = pl.BlockSpec((None, None, L, A), lambda bb, n, e, m: (bb, _kv_head(n, G), rev(m), 0))
        sc_spec = pl.BlockSpec((None, None, None, 1, L), lambda bb, n, e, m: (bb, n, rev(m), 0, 0))
        ve_spec = pl.BlockSpec((None, None, L, BE), lambda bb, n, e, m: (bb, n, rev(m), e))
        ae_spec = pl.BlockSpec((None, None, A, BE), lambda bb, n, e, m: (bb, n, 0, e))
        in_specs = [qk_spec, qk_spec, ve_spec, sc_spec, sc_spec,
                    pl.BlockSpec((None, None, 1, L), lambda bb, n, e, m: (bb, rev(m), 0, 0)),
                    pl.BlockSpec((None, None, A, BE), lambda bb, n, e, m: (bb, n, rev(m), e)), ve_spec, ae_spec]
        dqk_spec = pl.BlockSpec((None, None, None, L, A), lambda bb, n, e, m: (bb, n, e, rev(m), 0))
        dsc_spec = pl.BlockSpec((None, None, None, None, 1, L), lambda bb, n, e, m: (bb, n, e, rev(m), 0, 0))
        out_specs = [dqk_spec, dqk_spec, ve_spec, dsc_spec, dsc_spec, ae_spec]
        shapes = [s if i not in (3, 4) else jax.ShapeDtypeStruct((B, N, nE, M, 1, L), F32)
                  for i, s in enumerate(out_shape)]
        args = (q, k, v, c.reshape(B, N, M, 1, L), b.reshape(B, N, M, 1, L), r.reshape(B, M, 1, L), states, do, dsf)
        call = pl.pallas_call(functools.partial(_bwd_kernel_grid, mm_dtype=o.mm_dtype), grid=(B, N, nE, M),
                              in_specs=in_specs, out_specs=out_specs, out_shape=shapes,
                              scratch_shapes=[_scratch((A, BE))], compiler_params=_compiler_params("mosaic", 3),
                              interpret=o.interpret, cost_estimate=cost)
    else:
        qk_spec = pl.BlockSpec((None, None, Tp, A), lambda bb, n, e: (bb, _kv_head(n, G), 0, 0))
        sc_spec = pl.BlockSpec((None, None, Tp), lambda bb, n, e: (bb, n, 0))
        ve_spec = pl.BlockSpec((None, None, Tp, BE), lambda bb, n, e: (bb, n, 0, e))
        ae_spec = pl.BlockSpec((None, None, A, BE), lambda bb, n, e: (bb, n, 0, e))
        in_specs = [qk_spec, qk_spec, ve_spec, sc_spec, sc_spec, pl.BlockSpec((None, Tp), lambda bb, n, e: (bb, 0)),
                    pl.BlockSpec((None, None, M * A, BE), lambda bb, n, e: (bb, n, 0, e)), ve_spec, ae_spec]
        dqk_spec = pl.BlockSpec((None, None, None, Tp, A), lambda bb, n, e: (bb, n, e, 0, 0))
        dsc_spec = pl.BlockSpec((None, None, None, Tp), lambda bb, n, e: (bb, n, e, 0))
        out_specs = [dqk_spec, dqk_spec, ve_spec, dsc_spec, dsc_spec, ae_spec]
        shapes = out_shape
        args = (q, k, v, c, b, r, states, do, dsf)
        call = pl.pallas_call(functools.partial(_bwd_kernel_loop, mm_dtype=o.mm_dtype, L=L, M=M, A=A),
                              grid=(B, N, nE), in_specs=in_specs, out_specs=out_specs, out_shape=shapes,
                              compiler_params=_compiler_params("triton", 0), interpret=o.interpret,
                              cost_estimate=cost)
    dq, dk, dv, dc, db, ds0 = call(*args)
    return dq, dk, dv, dc.reshape(B, N, nE, Tp), db.reshape(B, N, nE, Tp), ds0


# ---------------------------------------------------------------------------------------------
# custom VJP over the kernels
# ---------------------------------------------------------------------------------------------
class _Opts(tuple):
    """Static kernel options (hashable): chunk L, value block, matmul dtype, residual policy,
    backend, interpret mode."""
    __slots__ = ()
    L = property(lambda s: s[0])
    block_e = property(lambda s: s[1])
    mm_dtype = property(lambda s: s[2])
    residuals = property(lambda s: s[3])
    backend = property(lambda s: s[4])
    interpret = property(lambda s: s[5])


@functools.partial(jax.custom_vjp, nondiff_argnums=(7,))
def _core(q, k, v, c, b, r, s0, o: _Opts):
    out, sfin, _ = _forward(q, k, v, c, b, r, s0, o, want_out=True, want_states=False)
    return out, sfin


def _core_fwd(q, k, v, c, b, r, s0, o: _Opts):
    keep = o.residuals == "states"
    out, sfin, states = _forward(q, k, v, c, b, r, s0, o, want_out=True, want_states=keep)
    return (out, sfin), (q, k, v, c, b, r, s0, states)


def _core_bwd(o: _Opts, res, cts):
    q, k, v, c, b, r, s0, states = res
    do, dsf = cts
    if states is None:   # "recompute": a states-only forward walk (no outputs) before the reverse walk
        _, _, states = _forward(q, k, v, c, b, r, s0, o, want_out=False, want_states=True)
    dq, dk, dv, dc, db, ds0 = _backward(q, k, v, c, b, r, states, do.astype(q.dtype), dsf.astype(F32), o)
    B, Hk, Tp, A = q.shape
    N = v.shape[1]

    def per_key_head(x):  # [B, N, nE, Tp, A] -> [B, Hk, Tp, A]: sum value blocks and the heads sharing a key
        return x.sum(2).reshape(B, Hk, N // Hk, Tp, A).sum(2)

    return (per_key_head(dq).astype(q.dtype), per_key_head(dk), dv.astype(v.dtype),
            dc.sum(2), db.sum(2), jnp.zeros_like(r), ds0)


_core.defvjp(_core_fwd, _core_bwd)


# ---------------------------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------------------------
def _log_decay(g):
    g = g.astype(F32)
    return jnp.where(g < G_FLOOR, G_FLOOR, jnp.where(g > 0, 0.0, g))


def chunk_gated_delta_rule(q_BTKA, k_BTKA, v_BTNE, g_BTN, beta_BTN, state_BNAE=None, seg_start_BT=None,
                           chunk_size: int = 64, use_qk_l2norm: bool = True, *, residuals: str = "recompute",
                           backend: Optional[str] = None, block_e: Optional[int] = None,
                           interpret: Optional[bool] = None):
    """``kernels.chunk_gated_delta_rule`` (same arguments, same results to fp32 rounding) on the
    Pallas kernels. ``(o_BTNE in q's dtype, final state fp32)``.

    ``residuals``: "recompute" | "states" (module docstring). ``backend``: "mosaic" | "triton"
    (default: by ``jax.default_backend()``). ``block_e``: value-dim block per program (default:
    the whole value dim on TPU, 64 on GPU, where the ``[A, BE]`` state lives in registers).
    ``interpret``: Pallas interpret mode (default: on when the backend is neither TPU nor GPU).
    Every chunk is ``chunk_size`` tokens (the sequence is padded), unlike the reference, whose
    chunk shrinks to T for short inputs: the kernels need fixed tiles.
    """
    B, T, Hk, A = q_BTKA.shape
    N, E = v_BTNE.shape[2:]
    if N % Hk:
        raise ValueError(f"gdn_pallas: value heads {N} must be a multiple of key heads {Hk}")
    backend = backend or default_backend()
    if backend not in BACKENDS:
        raise ValueError(f"gdn_pallas: backend {backend!r}; use one of {BACKENDS}")
    if residuals not in RESIDUALS:
        raise ValueError(f"gdn_pallas: residuals {residuals!r}; use one of {RESIDUALS}")
    dtype = q_BTKA.dtype
    mm_dtype = jnp.dtype(dtype) if jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)) else F32
    L = int(chunk_size)
    BE = int(block_e or (E if backend == "mosaic" else min(E, 64)))
    if E % BE:
        raise ValueError(f"gdn_pallas: block_e={BE} must divide the value head dim {E}")
    opts = _Opts((L, BE, jnp.dtype(mm_dtype).name, residuals, backend,
                  _interpret() if interpret is None else bool(interpret)))
    pad = (-T) % L
    Tp = T + pad
    q, k = q_BTKA.astype(F32), k_BTKA.astype(F32)
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    q = q * (A ** -0.5)

    def head_major(x):  # [B, T, H, X] -> [B, H, Tp, X]
        return jnp.pad(x, ((0, 0), (0, pad), (0, 0), (0, 0))).transpose(0, 2, 1, 3)

    q_k = head_major(q.astype(mm_dtype))
    k_k = head_major(k)             # fp32: keys build the chunk system and the state update
    v_k = head_major(v_BTNE.astype(mm_dtype))
    g = jnp.pad(_log_decay(g_BTN), ((0, 0), (0, pad), (0, 0))).transpose(0, 2, 1)          # [B, N, Tp]
    c = jnp.cumsum(g.reshape(B, N, Tp // L, L), axis=-1).reshape(B, N, Tp)
    b = jnp.pad(beta_BTN.astype(F32), ((0, 0), (0, pad), (0, 0))).transpose(0, 2, 1)
    starts = jnp.zeros((B, T), bool) if seg_start_BT is None else seg_start_BT
    if state_BNAE is None:  # token 0 "starts" with a zero state either way
        starts = starts.at[:, 0].set(False)
    starts = jnp.pad(starts.astype(jnp.int32), ((0, 0), (0, pad)))
    r = jnp.cumsum(starts.reshape(B, Tp // L, L), axis=-1).reshape(B, Tp).astype(F32)
    s0 = (jnp.zeros((B, N, A, E), F32) if state_BNAE is None else state_BNAE.astype(F32))
    o_BNTE, s = _core(q_k, k_k, v_k, c, b, lax.stop_gradient(r), s0, opts)
    return o_BNTE.transpose(0, 2, 1, 3)[:, :T].astype(dtype), s


# ---------------------------------------------------------------------------------------------
# fused single-token decode step
# ---------------------------------------------------------------------------------------------
def _decode_kernel(q_ref, k_ref, v_ref, a_ref, b_ref, s_ref, o_ref, snew_ref, *, use_l2: bool):
    q, k = q_ref[...].astype(F32), k_ref[...].astype(F32)          # [A, 1] columns
    A = q.shape[0]
    if use_l2:
        q = q * lax.rsqrt(jnp.sum(q * q, axis=0, keepdims=True) + 1e-6)
        k = k * lax.rsqrt(jnp.sum(k * k, axis=0, keepdims=True) + 1e-6)
    q = q * (A ** -0.5)
    s = s_ref[...] * a_ref[...]                                        # decay, [A, BE]
    kv = jnp.sum(s * k, axis=0, keepdims=True)                         # S^T k, [1, BE]
    u = b_ref[...] * (v_ref[...].astype(F32) - kv)
    s = s + k * u
    o_ref[...] = jnp.sum(s * q, axis=0, keepdims=True).astype(o_ref.dtype)
    snew_ref[...] = s


def decode_step(q_BTKA, k_BTKA, v_BTNE, g_BTN, beta_BTN, state_BNAE=None, seg_start_BT=None,
                use_qk_l2norm: bool = True, *, backend: Optional[str] = None, block_e: Optional[int] = None,
                interpret: Optional[bool] = None):
    """One token of ``kernels.recurrent_gated_delta_rule`` (same arguments, T must be 1) as one
    fused kernel per (row, value head, value block): L2 norms, decay, delta update and readout on
    the fp32 state, which is updated in place. ``(o_BTNE in q's dtype, new state fp32)``."""
    B, T, Hk, A = q_BTKA.shape
    N, E = v_BTNE.shape[2:]
    if T != 1:
        raise ValueError(f"gdn_pallas.decode_step: one token per row, got T={T}; use chunk_gated_delta_rule")
    backend = backend or default_backend()
    BE = int(block_e or (E if backend == "mosaic" else min(E, 64)))
    G = N // Hk
    s = jnp.zeros((B, N, A, E), F32) if state_BNAE is None else state_BNAE.astype(F32)
    decay = jnp.exp(_log_decay(g_BTN[:, 0]))                                                # [B, N]
    if seg_start_BT is not None:
        decay = decay * (1.0 - seg_start_BT[:, :1].astype(F32))
    col = lambda x: x[:, 0][..., None]                                                     # [B, H, A, 1]
    qk_spec = pl.BlockSpec((None, None, A, 1), lambda b, n, e: (b, _kv_head(n, G), 0, 0))
    sc_spec = pl.BlockSpec((None, None, 1, 1), lambda b, n, e: (b, n, 0, 0))
    row_spec = pl.BlockSpec((None, None, 1, BE), lambda b, n, e: (b, n, 0, e))
    st_spec = pl.BlockSpec((None, None, A, BE), lambda b, n, e: (b, n, 0, e))
    cp = None
    if backend == "triton":
        from jax.experimental.pallas import triton as pltr
        cp = pltr.CompilerParams(num_warps=4, num_stages=1)
    o, s_new = pl.pallas_call(
        functools.partial(_decode_kernel, use_l2=use_qk_l2norm), grid=(B, N, E // BE),
        in_specs=[qk_spec, qk_spec, row_spec, sc_spec, sc_spec, st_spec], out_specs=[row_spec, st_spec],
        out_shape=[jax.ShapeDtypeStruct((B, N, 1, E), q_BTKA.dtype), jax.ShapeDtypeStruct((B, N, A, E), F32)],
        input_output_aliases={5: 1}, compiler_params=cp,
        interpret=_interpret() if interpret is None else bool(interpret),
    )(col(q_BTKA), col(k_BTKA), v_BTNE.transpose(0, 2, 1, 3), decay[..., None, None],
      beta_BTN[:, 0].astype(F32)[..., None, None], s)
    return o.transpose(0, 2, 1, 3), s_new


# ---------------------------------------------------------------------------------------------
# sharded call
# ---------------------------------------------------------------------------------------------
def on_mesh(fn, mesh, rules=None):
    """``fn(q, k, v, g, beta, state, seg_start) -> (o, state)`` run once per batch shard of
    ``mesh`` under ``shard_map`` (a Pallas call is opaque to GSPMD, which would gather every input
    to every device). Heads stay whole on each device. Without a multi-device mesh, or when the
    rows do not split evenly over the batch axes, ``fn`` itself."""
    if mesh is None or mesh.size == 1:
        return fn
    from harness_jax import sharding as shd

    batch = shd.batch_axes(mesh, rules)
    n = shd.batch_devices(mesh, rules)

    def wrapped(*args):
        if not batch or args[0].shape[0] % n:
            return fn(*args)
        present = [a is not None for a in args]
        spec = lambda nd: P(batch, *([None] * (nd - 1)))

        def inner(*xs):
            it = iter(xs)
            return fn(*[next(it) if p else None for p in present])

        xs = [a for a in args if a is not None]
        return jax.shard_map(inner, mesh=mesh, in_specs=tuple(spec(a.ndim) for a in xs),
                             out_specs=(spec(4), spec(4)), check_vma=False)(*xs)

    return wrapped
