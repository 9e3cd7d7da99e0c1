"""Causal GQA attention implementations, chosen by name (``Qwen3_5Config.attention_impl``).

One call, one mask semantics, several implementations::

    o_BTNH = attention(q_BTNH, k_BSKH, v_BSKH, *, impl="xla", scale=None,
                       segment_ids_BT=None, q_positions_BT=None,
                       block_q=0, block_kv=0, mesh=None, rules=None)

q has N heads, k/v have K heads (N % K == 0; query head n reads kv head n // (N/K)). Which key a
query may see:

* **self-attention** (training, cache-free prefill; ``q_positions_BT is None``): S == T, key s is
  visible to query t iff ``s <= t`` and ``segment_ids_BT[b, s] == segment_ids_BT[b, t]``
  (``None``: one segment per row). Segments are contiguous runs of one id (``rl.batch`` packs
  ids 1, 2, ... and 0 for the trailing padding); the kernels skip key blocks before a run starts.
* **cache attention** (the engine's ``extend``: prefill into a cache, decode): keys are cache
  slots 0..S-1 in order and slot s is visible to query t iff ``s <= q_positions_BT[b, t]`` (the
  slot the query's own key was written to). A query that sees no slot returns zeros.

Implementations (``IMPLS``; ``register`` adds more, e.g. a paged kernel, under the same contract):

* ``reference``: ``kernels.gqa_attention`` on a materialised ``[B, T, S]`` mask, fp32 scores
  ``[B, K, G, T, S]``. The oracle; O(T x S) memory.
* ``xla``: memory-efficient XLA, any backend. Online softmax over key blocks inside a loop over
  query blocks, ``custom_vjp`` with a flash-attention backward (recomputes scores per block from
  the saved output and log-sum-exp): nothing ``T x S`` is held, forward or backward; key blocks
  outside the causal / segment range of a query block are never visited (loop bounds, not masks).
* ``splash``: TPU Pallas splash attention (``jax.experimental.pallas.ops.tpu.splash_attention``),
  causal mask + segment ids, GQA as one MQA kernel per kv head. Self-attention only; the cache
  path runs ``xla``.
* ``pallas_gpu``: the Pallas (Triton) flash attention of ``jax.experimental.pallas.ops.gpu``,
  causal + segment ids (kv heads repeated to N). Self-attention only; the cache path runs ``xla``.

Pallas kernels run in interpret mode where the default backend is CPU (tests, ``--smoke``), or as
set by ``pallas_interpret(...)`` (cross-platform lowering on CPU sets it to False). With a mesh,
the kernels run under ``shard_map`` over the rows' batch axes (and kv heads over ``tensor`` where
they divide), which the Pallas calls need (GSPMD cannot partition a custom call).

Numerics: scores, softmax statistics and accumulators are fp32 whatever the input dtype;
probabilities are cast to v's dtype for the PV product (as the reference does).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from typing import Callable, Optional

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P

from harness_jax import sharding as shd

from . import kernels as K

F32 = jnp.float32
_NEG = -1e30


# ---------------------------------------------------------------------------------------------
# the registry
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class AttentionImpl:
    """A registered implementation: ``fn(q, k, v, spec) -> o`` (``spec`` an ``AttnSpec``)."""
    name: str
    fn: Callable
    cache: bool              # handles cache attention itself (else the cache path runs ``xla``)
    platforms: tuple         # where it runs natively ("cpu", "gpu", "tpu"); CPU runs Pallas interpreted
    doc: str


_IMPLS: dict[str, AttentionImpl] = {}


def register(impl: AttentionImpl) -> None:
    """Add an implementation (same mask contract; see the module docstring)."""
    _IMPLS[impl.name] = impl


def names() -> tuple[str, ...]:
    return tuple(_IMPLS)


def get(name: str) -> AttentionImpl:
    if name not in _IMPLS:
        raise ValueError(f"attention impl {name!r} is not registered; use one of {', '.join(_IMPLS)}")
    return _IMPLS[name]


@dataclasses.dataclass(frozen=True)
class AttnSpec:
    """The mask and tiling of one call (arrays) plus static settings."""
    segment_ids_BT: Optional[jax.Array]
    q_positions_BT: Optional[jax.Array]
    scale: float
    block_q: int
    block_kv: int


_INTERPRET: contextvars.ContextVar = contextvars.ContextVar("pallas_interpret", default=None)


@contextlib.contextmanager
def pallas_interpret(value: Optional[bool]):
    """Force Pallas interpret mode on (True) or off (False; e.g. to lower for TPU/GPU on CPU)."""
    tok = _INTERPRET.set(value)
    try:
        yield
    finally:
        _INTERPRET.reset(tok)


def interpret_pallas() -> bool:
    v = _INTERPRET.get()
    return jax.default_backend() == "cpu" if v is None else bool(v)


# ---------------------------------------------------------------------------------------------
# the entry point
# ---------------------------------------------------------------------------------------------
def attention(q_BTNH, k_BSKH, v_BSKH, *, impl: str = "xla", scale: Optional[float] = None,
              segment_ids_BT=None, q_positions_BT=None, block_q: int = 0, block_kv: int = 0,
              mesh=None, rules=None):
    """Causal GQA attention ``[B, T, N, H]`` by ``impl``; see the module docstring for the mask.

    ``block_q`` / ``block_kv``: tile sizes (0 = the implementation's default). ``mesh`` /
    ``rules``: run the kernel per shard (``shard_map``) over the batch axes of ``rules``.
    """
    B, T, N, H = q_BTNH.shape
    S, Kh = k_BSKH.shape[1], k_BSKH.shape[2]
    if N % Kh or v_BSKH.shape[:3] != (B, S, Kh) or k_BSKH.shape[0] != B:
        raise ValueError(f"attention: q {q_BTNH.shape}, k {k_BSKH.shape}, v {v_BSKH.shape}: need "
                         "[B, T, N, H], [B, S, K, H], [B, S, K, H'] with N % K == 0")
    if q_positions_BT is None and S != T:
        raise ValueError(f"attention: self-attention needs S == T (got T={T}, S={S}); pass "
                         "q_positions_BT for attention over a cache")
    if q_positions_BT is not None and segment_ids_BT is not None:
        raise ValueError("attention: segment_ids_BT (self-attention) and q_positions_BT (cache "
                         "attention) are exclusive")
    chosen = get(impl)
    if q_positions_BT is not None and not chosen.cache:
        chosen = get("xla")
    spec = AttnSpec(segment_ids_BT, q_positions_BT, float(H ** -0.5 if scale is None else scale),
                    int(block_q), int(block_kv))
    if mesh is None or chosen.name == "reference" or mesh.size == 1:
        return chosen.fn(q_BTNH, k_BSKH, v_BSKH, spec)
    return _per_shard(chosen.fn, q_BTNH, k_BSKH, v_BSKH, spec, mesh, rules)


def _per_shard(fn, q, k, v, spec: AttnSpec, mesh, rules):
    """``fn`` under ``shard_map``: rows over the batch axes, kv heads over ``tensor`` if they divide."""
    b = shd.logical_to_mesh(("batch",), mesh, rules, shape=(q.shape[0],))[0]
    # kv heads over their mesh axis where it divides K (then it divides N = K * G too, and query
    # head shard r holds exactly the groups of kv head shard r)
    h = shd.logical_to_mesh(("kv_heads",), mesh, rules, shape=(k.shape[2],))[0]
    qs = ks = P(b, None, h, None)
    rows = P(b, None)
    arrays = {"seg": spec.segment_ids_BT, "pos": spec.q_positions_BT}
    present = {n: a for n, a in arrays.items() if a is not None}

    def body(q, k, v, extra):
        s = dataclasses.replace(spec, segment_ids_BT=extra.get("seg"), q_positions_BT=extra.get("pos"))
        return fn(q, k, v, s)

    return jax.shard_map(body, mesh=mesh, in_specs=(qs, ks, ks, {n: rows for n in present}),
                         out_specs=qs, check_vma=False)(q, k, v, present)


# ---------------------------------------------------------------------------------------------
# masks shared by the implementations
# ---------------------------------------------------------------------------------------------
def run_starts(segment_ids_BT):
    """Index of the first token of each token's contiguous segment run ``[B, T]`` int32."""
    T = segment_ids_BT.shape[1]
    return jnp.arange(T, dtype=jnp.int32)[None, :] - K.positions_from_segments(segment_ids_BT)


def dense_mask(spec: AttnSpec, B: int, T: int, S: int):
    """The ``[B, T, S]`` boolean mask of the contract (for the reference and the tests)."""
    if spec.q_positions_BT is not None:
        return jnp.arange(S, dtype=jnp.int32)[None, None, :] <= spec.q_positions_BT[:, :, None]
    seg = (jnp.zeros((B, T), jnp.int32) if spec.segment_ids_BT is None
           else spec.segment_ids_BT.astype(jnp.int32))
    return K.causal_segment_mask(seg)


def _reference(q, k, v, spec: AttnSpec):
    B, T = q.shape[:2]
    return K.gqa_attention(q, k, v, dense_mask(spec, B, T, k.shape[1]), spec.scale)


# ---------------------------------------------------------------------------------------------
# xla: blocked online softmax with a flash-attention backward
# ---------------------------------------------------------------------------------------------
def _pad_to(x, n, axis, value=0):
    pad = n - x.shape[axis]
    if pad == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, pad)
    return jnp.pad(x, widths, constant_values=value)


@dataclasses.dataclass(frozen=True)
class _Tiles:
    S: int        # real key count (keys at index >= S are padding)
    bq: int
    bk: int
    nq: int
    nk: int
    scale: float


def _block_mask(qpos_BQ, qseg_BQ, kseg_BC, j, t: _Tiles):
    """Visible (query, key) pairs of one tile ``[B, bq, bk]``: causal on positions vs slots, same
    segment, real keys only."""
    kidx_C = j * t.bk + jnp.arange(t.bk, dtype=jnp.int32)
    m = (kidx_C[None, None, :] <= qpos_BQ[:, :, None]) & (kidx_C < t.S)[None, None, :]
    return m & (qseg_BQ[:, :, None] == kseg_BC[:, None, :])


def _tile_scores(q_BQKGH, k_BCKH, mask_BQC, scale):
    s_BKGQC = jnp.einsum("bqkgh,bckh->bkgqc", q_BQKGH, k_BCKH, preferred_element_type=F32) * scale
    return jnp.where(mask_BQC[:, None, None], s_BKGQC, _NEG)


def _slice(x, i, size, axis=1):
    return lax.dynamic_slice_in_dim(x, i * size, size, axis=axis)


def _flash_fwd_impl(q, k, v, qpos, qseg, kseg, kv_lo, kv_hi, t: _Tiles):
    """o ``[B, Tp, K, G, E]`` (q's dtype) and lse ``[B, K, G, Tp]`` fp32 (``-inf``: nothing seen)."""
    B, _, Kh, G, _ = q.shape
    E = v.shape[-1]

    def q_block(i):
        q_i, qpos_i, qseg_i = _slice(q, i, t.bq), _slice(qpos, i, t.bq), _slice(qseg, i, t.bq)

        def kv_step(j, carry):
            m, l, acc = carry
            mask = _block_mask(qpos_i, qseg_i, _slice(kseg, j, t.bk), j, t)
            s = _tile_scores(q_i, _slice(k, j, t.bk), mask, t.scale)
            m_new = jnp.maximum(m, jnp.max(s, axis=-1))
            p = jnp.where(mask[:, None, None], jnp.exp(s - m_new[..., None]), 0.0)
            corr = jnp.exp(m - m_new)
            l = l * corr + jnp.sum(p, axis=-1)
            pv = jnp.einsum("bkgqc,bcke->bkgqe", p.astype(v.dtype), _slice(v, j, t.bk),
                            preferred_element_type=F32)
            return m_new, l, acc * corr[..., None] + pv

        init = (jnp.full((B, Kh, G, t.bq), _NEG, F32), jnp.zeros((B, Kh, G, t.bq), F32),
                jnp.zeros((B, Kh, G, t.bq, E), F32))
        m, l, acc = lax.fori_loop(kv_lo[i], kv_hi[i] + 1, kv_step, init)
        seen = l > 0
        o = jnp.where(seen[..., None], acc / jnp.where(seen, l, 1.0)[..., None], 0.0)
        lse = jnp.where(seen, m + jnp.log(jnp.where(seen, l, 1.0)), -jnp.inf)
        return jnp.moveaxis(o, 3, 1).astype(q.dtype), lse   # [B, bq, K, G, E], [B, K, G, bq]

    o_QBqKGE, lse_QBKGq = lax.map(q_block, jnp.arange(t.nq))
    o = jnp.moveaxis(o_QBqKGE, 0, 1).reshape(B, t.nq * t.bq, Kh, G, E)
    lse = jnp.moveaxis(lse_QBKGq, 0, 3).reshape(B, Kh, G, t.nq * t.bq)
    return o, lse


@functools.partial(jax.custom_vjp, nondiff_argnums=(8,))
def _flash(q, k, v, qpos, qseg, kseg, kv_lo, kv_hi, t: _Tiles):
    return _flash_fwd_impl(q, k, v, qpos, qseg, kseg, kv_lo, kv_hi, t)[0]


def _flash_fwd(q, k, v, qpos, qseg, kseg, kv_lo, kv_hi, t: _Tiles):
    o, lse = _flash_fwd_impl(q, k, v, qpos, qseg, kseg, kv_lo, kv_hi, t)
    return o, (q, k, v, qpos, qseg, kseg, kv_lo, kv_hi, o, lse)


def _flash_bwd(t: _Tiles, res, do):
    """FlashAttention-2 backward: outer loop over key blocks (dk, dv of the block), inner loop over
    the query blocks that see it (dq accumulated in an fp32 carry); scores recomputed per tile."""
    q, k, v, qpos, qseg, kseg, kv_lo, kv_hi, o, lse = res
    B, Tp, Kh, G, H = q.shape
    E = v.shape[-1]
    delta = jnp.einsum("bqkge,bqkge->bkgq", do.astype(F32), o.astype(F32))      # rowsum(dO * O)
    lse_safe = jnp.where(jnp.isfinite(lse), lse, 0.0)
    q_ids = jnp.arange(t.nq, dtype=jnp.int32)

    def kv_block(dq, j):
        k_j, v_j, kseg_j = _slice(k, j, t.bk), _slice(v, j, t.bk), _slice(kseg, j, t.bk)
        # the query blocks whose key range contains j (a contiguous range: kv_lo/kv_hi are monotone)
        sees = (kv_lo <= j) & (kv_hi >= j)
        i_lo = jnp.min(jnp.where(sees, q_ids, t.nq))
        i_hi = jnp.max(jnp.where(sees, q_ids, -1))

        def q_step(i, carry):
            dq, dk, dv = carry
            q_i, do_i = _slice(q, i, t.bq), _slice(do, i, t.bq)
            mask = _block_mask(_slice(qpos, i, t.bq), _slice(qseg, i, t.bq), kseg_j, j, t)
            s = _tile_scores(q_i, k_j, mask, t.scale)
            lse_i = lax.dynamic_slice_in_dim(lse_safe, i * t.bq, t.bq, axis=3)
            p = jnp.where(mask[:, None, None], jnp.exp(s - lse_i[..., None]), 0.0)     # [B,K,G,q,c]
            dv = dv + jnp.einsum("bkgqc,bqkge->bcke", p.astype(do.dtype), do_i, preferred_element_type=F32)
            dp = jnp.einsum("bqkge,bcke->bkgqc", do_i, v_j, preferred_element_type=F32)
            d_i = lax.dynamic_slice_in_dim(delta, i * t.bq, t.bq, axis=3)
            ds = p * (dp - d_i[..., None]) * t.scale
            dk = dk + jnp.einsum("bkgqc,bqkgh->bckh", ds.astype(q.dtype), q_i, preferred_element_type=F32)
            dq_i = jnp.einsum("bkgqc,bckh->bqkgh", ds.astype(k.dtype), k_j, preferred_element_type=F32)
            dq = lax.dynamic_update_slice_in_dim(dq, _slice(dq, i, t.bq) + dq_i, i * t.bq, axis=1)
            return dq, dk, dv

        init = (dq, jnp.zeros((B, t.bk, Kh, H), F32), jnp.zeros((B, t.bk, Kh, E), F32))
        dq, dk, dv = lax.fori_loop(i_lo, i_hi + 1, q_step, init)
        return dq, (dk.astype(k.dtype), dv.astype(v.dtype))

    dq, (dk_N, dv_N) = lax.scan(kv_block, jnp.zeros(q.shape, F32), jnp.arange(t.nk))
    dk = jnp.moveaxis(dk_N, 0, 1).reshape(B, t.nk * t.bk, Kh, H)
    dv = jnp.moveaxis(dv_N, 0, 1).reshape(B, t.nk * t.bk, Kh, E)
    return dq.astype(q.dtype), dk, dv, None, None, None, None, None


_flash.defvjp(_flash_fwd, _flash_bwd)


def _xla(q_BTNH, k_BSKH, v_BSKH, spec: AttnSpec):
    B, T, N, H = q_BTNH.shape
    S, Kh = k_BSKH.shape[1], k_BSKH.shape[2]
    G = N // Kh
    bq = min(spec.block_q or 512, T)
    bk = min(spec.block_kv or 512, S)
    nq, nk = -(-T // bq), -(-S // bk)
    Tp, Sp = nq * bq, nk * bk
    if spec.q_positions_BT is None:
        seg = (jnp.zeros((B, T), jnp.int32) if spec.segment_ids_BT is None
               else spec.segment_ids_BT.astype(jnp.int32))
        qpos = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
        start = run_starts(seg) if spec.segment_ids_BT is not None else jnp.zeros((B, T), jnp.int32)
        kseg = _pad_to(seg, Sp, 1)
    else:
        seg = jnp.zeros((B, T), jnp.int32)
        qpos = spec.q_positions_BT.astype(jnp.int32)
        start = jnp.zeros((B, T), jnp.int32)
        kseg = jnp.zeros((B, Sp), jnp.int32)
    # padded queries see nothing (position -1); block ranges from the real ones only
    qpos = _pad_to(qpos, Tp, 1, -1)
    seg = _pad_to(seg, Tp, 1, -1)
    start_Q = jnp.min(_pad_to(start, Tp, 1, S).reshape(B, nq, bq), axis=(0, 2))
    last_Q = jnp.max(qpos.reshape(B, nq, bq), axis=(0, 2))
    kv_lo = jnp.clip(start_Q // bk, 0, nk - 1).astype(jnp.int32)
    kv_hi = jnp.clip(jnp.minimum(last_Q, S - 1) // bk, -1, nk - 1).astype(jnp.int32)
    kv_hi = jnp.where(last_Q < 0, -1, kv_hi)
    q = _pad_to(q_BTNH.reshape(B, T, Kh, G, H), Tp, 1)
    k, v = _pad_to(k_BSKH, Sp, 1), _pad_to(v_BSKH, Sp, 1)
    t = _Tiles(S=S, bq=bq, bk=bk, nq=nq, nk=nk, scale=spec.scale)
    o = _flash(q, k, v, qpos, seg, kseg, kv_lo, kv_hi, t)
    return o[:, :T].reshape(B, T, N, v_BSKH.shape[-1])


# ---------------------------------------------------------------------------------------------
# Pallas kernels (self-attention only)
# ---------------------------------------------------------------------------------------------
def _pad_self(q, k, v, seg, block):
    """Pad T up to a multiple of ``block``; padding tokens get segment id -1 (they see only each
    other, so no row is empty and real tokens never see them)."""
    B, T = q.shape[:2]
    Tp = -(-T // block) * block
    seg = jnp.zeros((B, T), jnp.int32) if seg is None else seg.astype(jnp.int32)
    return (_pad_to(q, Tp, 1), _pad_to(k, Tp, 1), _pad_to(v, Tp, 1), _pad_to(seg, Tp, 1, -1))


@functools.lru_cache(maxsize=32)
def _splash_kernel(T: int, G: int, bq: int, bk: int, interpret: bool):
    from jax.experimental.pallas.ops.tpu import splash_attention as sa

    mask = sa.MultiHeadMask([sa.CausalMask((T, T)) for _ in range(G)])
    bs = sa.BlockSizes(block_q=bq, block_kv=bk, block_kv_compute=bk, block_q_dkv=bq, block_kv_dkv=bk,
                       block_kv_dkv_compute=bk, block_q_dq=bq, block_kv_dq=bk)
    # the mask tables are concrete constants even when first built inside a trace (cached)
    with jax.ensure_compile_time_eval():
        return sa.make_splash_mqa_single_device(mask, block_sizes=bs, interpret=interpret)


def _splash(q_BTNH, k_BSKH, v_BSKH, spec: AttnSpec):
    from jax.experimental.pallas.ops.tpu import splash_attention as sa

    B, T, N, H = q_BTNH.shape
    Kh = k_BSKH.shape[2]
    G = N // Kh
    blk = min(spec.block_q or 512, -(-T // 128) * 128)
    q, k, v, seg = _pad_self(q_BTNH * jnp.asarray(spec.scale, q_BTNH.dtype), k_BSKH, v_BSKH,
                             spec.segment_ids_BT, blk)
    Tp = q.shape[1]
    bk = min(spec.block_kv or blk, Tp)
    kern = _splash_kernel(Tp, G, blk, bk if Tp % bk == 0 else blk, interpret_pallas())
    q_BKGTH = q.reshape(B, Tp, Kh, G, H).transpose(0, 2, 3, 1, 4)
    k_BKTH, v_BKTH = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)

    def one(q_GTH, k_TH, v_TH, s_T):
        return kern(q_GTH, k_TH, v_TH, segment_ids=sa.SegmentIds(q=s_T, kv=s_T))

    per_head = jax.vmap(one, in_axes=(0, 0, 0, None))
    o = jax.vmap(per_head, in_axes=(0, 0, 0, 0))(q_BKGTH, k_BKTH, v_BKTH, seg)     # [B, K, G, Tp, H]
    return o.transpose(0, 3, 1, 2, 4).reshape(B, Tp, N, -1)[:, :T]


def _pallas_gpu(q_BTNH, k_BSKH, v_BSKH, spec: AttnSpec):
    from jax.experimental.pallas.ops.gpu import attention as ga

    B, T, N, H = q_BTNH.shape
    G = N // k_BSKH.shape[2]
    bq = min(spec.block_q or 128, max(16, 1 << (T - 1).bit_length()))   # powers of two: every
    bk = min(spec.block_kv or 64, bq)                                    # tile divides the padded T
    q, k, v, seg = _pad_self(q_BTNH, k_BSKH, v_BSKH, spec.segment_ids_BT, max(bq, bk))
    if G > 1:
        k, v = jnp.repeat(k, G, axis=2), jnp.repeat(v, G, axis=2)
    bs = ga.BlockSizes(block_q=bq, block_k=bk, block_q_dkv=min(bq, 64), block_kv_dkv=min(bk, 64),
                       block_q_dq=min(bq, 64), block_kv_dq=min(bk, 64))
    o = ga.mha(q, k, v, seg, sm_scale=spec.scale, causal=True, block_sizes=bs,
               interpret=interpret_pallas())
    return o[:, :T]


register(AttentionImpl("reference", _reference, cache=True, platforms=("cpu", "gpu", "tpu"),
                       doc="kernels.gqa_attention on a dense [B, T, S] mask (the oracle)"))
register(AttentionImpl("xla", _xla, cache=True, platforms=("cpu", "gpu", "tpu"),
                       doc="blocked online softmax, flash backward, causal/segment block skipping"))
register(AttentionImpl("splash", _splash, cache=False, platforms=("tpu",),
                       doc="TPU Pallas splash attention (causal + segment ids, GQA via MQA per kv head)"))
register(AttentionImpl("pallas_gpu", _pallas_gpu, cache=False, platforms=("gpu",),
                       doc="Pallas Triton flash attention (causal + segment ids, kv heads repeated)"))

IMPLS = names()
