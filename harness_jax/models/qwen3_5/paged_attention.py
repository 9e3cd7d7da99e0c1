"""Ragged paged attention: queries of each row attend over that row's keys, stored in fixed-size
pages of a shared pool and found through the row's block table.

Layout (shape letters as in ``kernels``, plus P pool pages, Z tokens per page, M pages per row):
  * ``k_pages_PZKH`` / ``v_pages_PZKH``: the pool of one layer, page ``p`` holds ``Z`` tokens;
  * ``block_tables_BM``: page ids of row ``b`` in order (entries past the row's pages are
    ignored; any value is safe, they are clamped and masked);
  * ``kv_lens_B``: tokens row ``b`` holds (its new tokens included: they are written before the
    call);
  * ``q_pos_BT``: absolute position of each query token (``-1`` for padding: output 0).
A query at position ``p`` of row ``b`` attends to the keys at positions ``s <= p`` and
``s < kv_lens_B[b]`` (causal inside the row, so a chunk of new tokens attends to itself). Rows
are ragged twice: each has its own number of query tokens (``q_pos_BT >= 0``) and its own key
length, and no implementation looks at pages past a row's length except to skip them.

Implementations, chosen by ``impl`` (``"auto"``: ``pallas_tpu`` on TPU, ``pallas_gpu`` on GPU,
``xla`` elsewhere):
  * ``reference``: gathers every page of the rows into a contiguous ``[B, M*Z]`` slab and runs
    ``kernels.gqa_attention`` (the oracle the others are tested against);
  * ``xla``: online softmax over blocks of ``pages_per_block`` pages, a ``while`` loop that
    stops at the longest row, so memory is one block of pages per row and the work follows the
    live tokens (the CPU path);
  * ``pallas_tpu``: a Pallas kernel over a ``(row, kv head, page)`` grid; the block tables and
    lengths are scalar-prefetched and drive which page each grid step DMAs; pages past a row's
    length repeat its last page (no new DMA) and are skipped;
  * ``pallas_gpu``: a Pallas (Triton) kernel over a ``(row, kv head)`` grid that loops over the
    row's live pages with dynamic loads from the pool.
Both kernels run in interpret mode where the default backend is CPU (tests), as the attention
module's kernels do (``attention.pallas_interpret`` overrides it, e.g. to lower for GPU on CPU).
Scores, softmax statistics and accumulators are fp32 in every implementation. (The attention
module's registry takes contiguous keys; a paged pool and block tables are a different call, so
this module keeps its own entry point with the same naming.)
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from . import attention as A
from . import kernels as K

F32 = jnp.float32
IMPLS = ("reference", "xla", "pallas_tpu", "pallas_gpu")
_NEG = -1e30


def default_impl() -> str:
    """The implementation ``impl="auto"`` picks on the current default backend."""
    backend = jax.default_backend()
    return {"tpu": "pallas_tpu", "gpu": "pallas_gpu", "cuda": "pallas_gpu"}.get(backend, "xla")


def paged_attention(q_BTNH, k_pages_PZKH, v_pages_PZKH, block_tables_BM, kv_lens_B, q_pos_BT, *,
                    scale: float, impl: str = "auto", pages_per_block: int = 8, interpret=None):
    """Attention of ``q_BTNH`` over the paged keys/values of each row; returns ``o_BTNH``
    (in ``q``'s dtype). See the module docstring for the layout and ``impl``. ``interpret``:
    run a Pallas kernel interpreted (None: ``attention.interpret_pallas()``)."""
    impl = default_impl() if impl == "auto" else impl
    interpret = A.interpret_pallas() if interpret is None else bool(interpret)
    if impl not in IMPLS:
        raise ValueError(f"paged_attention: impl={impl!r}; use 'auto' or one of {IMPLS}")
    if q_BTNH.shape[2] % k_pages_PZKH.shape[2]:
        raise ValueError(f"paged_attention: {q_BTNH.shape[2]} query heads are not a multiple of "
                         f"{k_pages_PZKH.shape[2]} kv heads")
    kv_lens_B = kv_lens_B.astype(jnp.int32)
    q_pos_BT = q_pos_BT.astype(jnp.int32)
    block_tables_BM = jnp.clip(block_tables_BM.astype(jnp.int32), 0, k_pages_PZKH.shape[0] - 1)
    if impl == "reference":
        return _reference(q_BTNH, k_pages_PZKH, v_pages_PZKH, block_tables_BM, kv_lens_B, q_pos_BT, scale)
    if impl == "xla":
        return _xla(q_BTNH, k_pages_PZKH, v_pages_PZKH, block_tables_BM, kv_lens_B, q_pos_BT, scale,
                    pages_per_block)
    if impl == "pallas_tpu":
        return _pallas_tpu(q_BTNH, k_pages_PZKH, v_pages_PZKH, block_tables_BM, kv_lens_B, q_pos_BT, scale,
                           interpret)
    return _pallas_gpu(q_BTNH, k_pages_PZKH, v_pages_PZKH, block_tables_BM, kv_lens_B, q_pos_BT, scale,
                       interpret)


def _mask(q_pos_BT, kv_lens_B, s_S):
    """``[B, T, S]``: key position ``s_S`` is visible to the query (causal, inside the row)."""
    return (s_S[None, None, :] <= q_pos_BT[:, :, None]) & (s_S[None, None, :] < kv_lens_B[:, None, None])


def _reference(q_BTNH, k_PZKH, v_PZKH, bt_BM, kv_lens_B, q_pos_BT, scale):
    B, M = bt_BM.shape
    Z = k_PZKH.shape[1]
    k_BSKH = k_PZKH[bt_BM].reshape((B, M * Z) + k_PZKH.shape[2:])
    v_BSKH = v_PZKH[bt_BM].reshape((B, M * Z) + v_PZKH.shape[2:])
    mask_BTS = _mask(q_pos_BT, kv_lens_B, jnp.arange(M * Z, dtype=jnp.int32))
    return K.gqa_attention(q_BTNH, k_BSKH.astype(q_BTNH.dtype), v_BSKH.astype(q_BTNH.dtype), mask_BTS, scale)


def _online_update(m_prev, l_prev, acc_prev, s, v, visible):
    """One online-softmax block: scores ``s`` (fp32, already masked with -inf-like values where
    not ``visible``) against values ``v``; returns the new (max, sum, accumulator)."""
    m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
    p = jnp.where(visible, jnp.exp(s - m_new), 0.0)
    corr = jnp.exp(m_prev - m_new)
    l_new = l_prev * corr + jnp.sum(p, axis=-1, keepdims=True)
    acc_new = acc_prev * corr + jnp.einsum("...s,...sh->...h", p.astype(v.dtype), v, preferred_element_type=F32)
    return m_new, l_new, acc_new


def _xla(q_BTNH, k_PZKH, v_PZKH, bt_BM, kv_lens_B, q_pos_BT, scale, pages_per_block):
    B, T, N, H = q_BTNH.shape
    _, Z, Kh, _ = k_PZKH.shape
    G = N // Kh
    M = bt_BM.shape[1]
    ppb = max(1, min(int(pages_per_block), M))
    n_blocks = -(-M // ppb)
    bt_BM = jnp.pad(bt_BM, ((0, 0), (0, n_blocks * ppb - M)))
    W = ppb * Z                                             # keys per block
    q_BKGTH = (q_BTNH * jnp.asarray(scale, q_BTNH.dtype)).reshape(B, T, Kh, G, H).transpose(0, 2, 3, 1, 4)
    live = (jnp.max(kv_lens_B) + W - 1) // W              # blocks holding any live key

    def body(i, carry):
        m, l, acc = carry
        pages_BW = lax.dynamic_slice_in_dim(bt_BM, i * ppb, ppb, axis=1)
        k_BWKH = k_PZKH[pages_BW].reshape(B, W, Kh, H).astype(q_BTNH.dtype)
        v_BWKH = v_PZKH[pages_BW].reshape(B, W, Kh, H).astype(q_BTNH.dtype)
        s_W = i * W + jnp.arange(W, dtype=jnp.int32)
        vis_BTW = _mask(q_pos_BT, kv_lens_B, s_W)
        s = jnp.einsum("bkgth,bwkh->bkgtw", q_BKGTH, k_BWKH, preferred_element_type=F32)
        vis = vis_BTW[:, None, None]
        s = jnp.where(vis, s, _NEG)
        return _online_update(m, l, acc, s, v_BWKH.transpose(0, 2, 1, 3)[:, :, None, None], vis)

    m0 = jnp.full((B, Kh, G, T, 1), _NEG, F32)
    l0 = jnp.zeros((B, Kh, G, T, 1), F32)
    acc0 = jnp.zeros((B, Kh, G, T, H), F32)
    _, l, acc = lax.fori_loop(0, live, body, (m0, l0, acc0))
    o = jnp.where(l > 0, acc / jnp.where(l > 0, l, 1.0), 0.0)
    return o.transpose(0, 3, 1, 2, 4).reshape(B, T, N, H).astype(q_BTNH.dtype)


# ---------------------------------------------------------------------------------------------
# Pallas kernels. Both see queries grouped per kv head as [B, K, T*G, H] (row-major over (t, g))
# and the pool per head as [P, K, Z, H]; their softmax update is ``_online_update``.
# ---------------------------------------------------------------------------------------------
def _group_queries(q_BTNH, q_pos_BT, scale, Kh):
    B, T, N, H = q_BTNH.shape
    G = N // Kh
    q_BKRH = (q_BTNH * jnp.asarray(scale, q_BTNH.dtype)).reshape(B, T, Kh, G, H).transpose(0, 2, 1, 3, 4)
    q_BKRH = q_BKRH.reshape(B, Kh, T * G, H)
    qpos_B1R = jnp.repeat(q_pos_BT, G, axis=1)[:, None, :]          # position of every (t, g) row
    return q_BKRH, qpos_B1R


def _ungroup(o_BKRH, B, T, N, H, dtype):
    Kh = o_BKRH.shape[1]
    return o_BKRH.reshape(B, Kh, T, N // Kh, H).transpose(0, 2, 1, 3, 4).reshape(B, T, N, H).astype(dtype)


def _pallas_tpu(q_BTNH, k_PZKH, v_PZKH, bt_BM, kv_lens_B, q_pos_BT, scale, interpret):
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    B, T, N, H = q_BTNH.shape
    P, Z, Kh, _ = k_PZKH.shape
    M = bt_BM.shape[1]
    R = T * (N // Kh)
    q_BKRH, qpos_B1R = _group_queries(q_BTNH, q_pos_BT, scale, Kh)
    k_PKZH = k_PZKH.transpose(0, 2, 1, 3)
    v_PKZH = v_PZKH.transpose(0, 2, 1, 3)

    def page_of(b, m, bt_ref, lens_ref):
        # pages past the row's last one map to the last one: same block index, no new DMA
        last = jnp.maximum((lens_ref[b] + Z - 1) // Z - 1, 0)
        return bt_ref[b * M + jnp.minimum(m, last)]

    def kernel(bt_ref, lens_ref, q_ref, pos_ref, k_ref, v_ref, o_ref, m_sc, l_sc, acc_sc):
        b, m = pl.program_id(0), pl.program_id(2)

        @pl.when(m == 0)
        def _init():
            m_sc[...] = jnp.full(m_sc.shape, _NEG, F32)
            l_sc[...] = jnp.zeros(l_sc.shape, F32)
            acc_sc[...] = jnp.zeros(acc_sc.shape, F32)

        @pl.when(m * Z < lens_ref[b])
        def _page():
            q = q_ref[0, 0]                                        # [R, H]
            k = k_ref[0, 0].astype(q.dtype)                        # [Z, H]
            s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=F32)   # [R, Z]
            key_pos = m * Z + lax.broadcasted_iota(jnp.int32, (R, Z), 1)
            vis = (key_pos <= pos_ref[0, 0][:, None]) & (key_pos < lens_ref[b])
            s = jnp.where(vis, s, _NEG)
            m_new, l_new, acc_new = _online_update(m_sc[...], l_sc[...], acc_sc[...], s,
                                                   v_ref[0, 0].astype(q.dtype), vis)
            m_sc[...], l_sc[...], acc_sc[...] = m_new, l_new, acc_new

        @pl.when(m == M - 1)
        def _out():
            l = l_sc[...]
            o_ref[0, 0] = jnp.where(l > 0, acc_sc[...] / jnp.where(l > 0, l, 1.0), 0.0).astype(o_ref.dtype)

    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2, grid=(B, Kh, M),
        in_specs=[
            pl.BlockSpec((1, 1, R, H), lambda b, k, m, bt, ln: (b, k, 0, 0)),
            pl.BlockSpec((1, 1, R), lambda b, k, m, bt, ln: (b, 0, 0)),
            pl.BlockSpec((1, 1, Z, H), lambda b, k, m, bt, ln: (page_of(b, m, bt, ln), k, 0, 0)),
            pl.BlockSpec((1, 1, Z, H), lambda b, k, m, bt, ln: (page_of(b, m, bt, ln), k, 0, 0)),
        ],
        out_specs=pl.BlockSpec((1, 1, R, H), lambda b, k, m, bt, ln: (b, k, 0, 0)),
        scratch_shapes=[pltpu.VMEM((R, 1), F32), pltpu.VMEM((R, 1), F32), pltpu.VMEM((R, H), F32)])
    out = pl.pallas_call(
        kernel, grid_spec=grid_spec,
        out_shape=jax.ShapeDtypeStruct((B, Kh, R, H), q_BTNH.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
        interpret=pltpu.InterpretParams() if interpret else False,
    )(bt_BM.reshape(-1), kv_lens_B, q_BKRH, qpos_B1R, k_PKZH, v_PKZH)
    return _ungroup(out, B, T, N, H, q_BTNH.dtype)


def _pallas_gpu(q_BTNH, k_PZKH, v_PZKH, bt_BM, kv_lens_B, q_pos_BT, scale, interpret):
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as pltr

    B, T, N, H = q_BTNH.shape
    P, Z, Kh, _ = k_PZKH.shape
    M = bt_BM.shape[1]
    if Z & (Z - 1) or H & (H - 1):
        raise ValueError(f"paged_attention impl='pallas_gpu': page size {Z} and head dim {H} must be powers "
                         "of 2 (Triton blocks); choose such a page size or impl='xla'")
    q_BKRH, qpos_B1R = _group_queries(q_BTNH, q_pos_BT, scale, Kh)
    R = 1 << max(T * (N // Kh) - 1, 0).bit_length()      # query rows padded to a power of 2 (Triton)
    pad = R - T * (N // Kh)
    q_BKRH = jnp.pad(q_BKRH, ((0, 0), (0, 0), (0, pad), (0, 0)))
    qpos_B1R = jnp.pad(qpos_B1R, ((0, 0), (0, 0), (0, pad)), constant_values=-1)
    k_PKZH = k_PZKH.transpose(0, 2, 1, 3)
    v_PKZH = v_PZKH.transpose(0, 2, 1, 3)

    def kernel(bt_ref, lens_ref, q_ref, pos_ref, k_ref, v_ref, o_ref):
        b, kh = pl.program_id(0), pl.program_id(1)
        n = lens_ref[b]
        q = q_ref[0, 0]                                            # [R, H]
        pos = pos_ref[0, 0]                                        # [R]

        def page(m, carry):
            p = bt_ref[b, m]
            k = k_ref[p, kh].astype(q.dtype)                       # [Z, H]
            v = v_ref[p, kh].astype(q.dtype)
            s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=F32)
            key_pos = m * Z + lax.broadcasted_iota(jnp.int32, (R, Z), 1)
            vis = (key_pos <= pos[:, None]) & (key_pos < n)
            return _online_update(*carry, jnp.where(vis, s, _NEG), v, vis)

        init = (jnp.full((R, 1), _NEG, F32), jnp.zeros((R, 1), F32), jnp.zeros((R, H), F32))
        _, l, acc = lax.fori_loop(0, (n + Z - 1) // Z, page, init)
        o_ref[0, 0] = jnp.where(l > 0, acc / jnp.where(l > 0, l, 1.0), 0.0).astype(o_ref.dtype)

    out = pl.pallas_call(
        kernel, grid=(B, Kh),
        in_specs=[
            pl.BlockSpec((B, M), lambda b, k: (0, 0)),
            pl.BlockSpec((B,), lambda b, k: (0,)),
            pl.BlockSpec((1, 1, R, H), lambda b, k: (b, k, 0, 0)),
            pl.BlockSpec((1, 1, R), lambda b, k: (b, 0, 0)),
            pl.BlockSpec((P, Kh, Z, H), lambda b, k: (0, 0, 0, 0)),
            pl.BlockSpec((P, Kh, Z, H), lambda b, k: (0, 0, 0, 0)),
        ],
        out_specs=pl.BlockSpec((1, 1, R, H), lambda b, k: (b, k, 0, 0)),
        out_shape=jax.ShapeDtypeStruct((B, Kh, R, H), q_BTNH.dtype),
        compiler_params=pltr.CompilerParams(num_warps=4, num_stages=2),
        interpret=interpret,
    )(bt_BM, kv_lens_B, q_BKRH, qpos_B1R, k_PKZH, v_PKZH)
    return _ungroup(out[:, :, :R - pad], B, T, N, H, q_BTNH.dtype)


@functools.partial(jax.jit, static_argnames=("scale", "impl", "pages_per_block", "interpret"))
def paged_attention_jit(q_BTNH, k_pages_PZKH, v_pages_PZKH, block_tables_BM, kv_lens_B, q_pos_BT, *,
                        scale: float, impl: str = "auto", pages_per_block: int = 8, interpret=None):
    """``paged_attention`` as one jitted call (tests, benchmarks, lowering checks)."""
    return paged_attention(q_BTNH, k_pages_PZKH, v_pages_PZKH, block_tables_BM, kv_lens_B, q_pos_BT,
                           scale=scale, impl=impl, pages_per_block=pages_per_block, interpret=interpret)
