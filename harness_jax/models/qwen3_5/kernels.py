"""Pure-function kernels of the Qwen3.5 text decoder.

Everything heavy lives here as plain functions on arrays so it can be tested against the
`transformers` torch reference in isolation and reused by the modules, the cache path and the
benchmarks. Shape letters used in names and einsums:

  B batch, T query/new tokens, S key positions (cache length), D hidden, V vocab,
  N query heads, K kv heads (attention) or key heads (GDN), G = N // K group size,
  H head dim, C conv channels, W conv kernel width, L chunk length, M number of chunks,
  A key dim of the delta-rule state, E value dim of the delta-rule state, X experts, I mlp width.

Segments (packed sequences): ``segment_ids_BT`` marks which sequence each token belongs to;
tokens attend only inside their segment, and the GDN conv / delta-rule state is reset where a
new segment starts. ``seg_start_BT`` (bool) is True on the first token of every segment.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
from jax import lax

F32 = jnp.float32


# ---------------------------------------------------------------------------------------------
# linear layers
# ---------------------------------------------------------------------------------------------
def _linear_fwd_impl(x, w, out_dtype):
    return jnp.einsum("...d,fd->...f", x, w, preferred_element_type=out_dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _linear(x, w, out_dtype, wgrad_dtype):
    return _linear_fwd_impl(x, w, out_dtype)


def _linear_fwd(x, w, out_dtype, wgrad_dtype):
    return _linear_fwd_impl(x, w, out_dtype), (x, w)


def _linear_bwd(out_dtype, wgrad_dtype, res, g):
    # Same math as autodiff of the einsum, written as two plain 2-D matmuls over the flattened
    # token axis: ``dx = g w`` and ``dw = g^T x`` straight into the ``[out, in]`` layout. Autodiff
    # of the einsum made XLA:CPU materialise a transposed copy of the (large) output cotangent
    # before the weight-gradient matmul, and a multi-axis contraction was slower than the 2-D
    # one (MLP fwd+bwd on 4x512 tokens: 258 -> 234 ms). ``dw`` leaves the matmul in
    # ``wgrad_dtype``: with FSDP that is the dtype its partial sums are reduce-scattered in.
    x, w = res
    dx = jnp.einsum("...f,fd->...d", g, w, preferred_element_type=F32).astype(x.dtype)
    x_ND = x.reshape(-1, x.shape[-1])
    g_NF = g.reshape(-1, g.shape[-1])
    dw = jnp.einsum("nf,nd->fd", g_NF, x_ND, preferred_element_type=wgrad_dtype).astype(w.dtype)
    return dx, dw


_linear.defvjp(_linear_fwd, _linear_bwd)

_WGRAD_DTYPE: contextvars.ContextVar = contextvars.ContextVar("linear_wgrad_dtype", default=F32)


@contextlib.contextmanager
def weight_grad_dtype(dtype):
    """Within this block (at trace time), ``linear``'s weight gradients leave their matmul in
    ``dtype`` (default fp32) before the cast to the weight's dtype: the dtype GSPMD reduces
    their partial sums over the batch devices in (``Qwen3_5Config.reduce_scatter_dtype``)."""
    tok = _WGRAD_DTYPE.set(jnp.dtype(dtype))
    try:
        yield
    finally:
        _WGRAD_DTYPE.reset(tok)


def linear(x, w_FD, out_dtype=None):
    """``x @ w^T`` with an HF ``[out, in]`` weight (``out_dtype`` defaults to x's dtype)."""
    return _linear(x, w_FD, jnp.dtype(out_dtype or x.dtype), jnp.dtype(_WGRAD_DTYPE.get()))


def linear_in_out(x, w_DF, out_dtype=None):
    """``x @ w`` with a transposed ``[in, out]`` weight: the decode layout (``decode_layout``).

    Same math as ``linear``; with few rows (decode) XLA:CPU streams an ``[in, out]`` weight
    ~1.3x faster than the HF layout (medium_80m batch-8 decode step 34 -> 27 ms).
    """
    return jnp.einsum("...d,df->...f", x, w_DF, preferred_element_type=jnp.dtype(out_dtype or x.dtype))


# ---------------------------------------------------------------------------------------------
# norms
# ---------------------------------------------------------------------------------------------
def rms_norm(x, weight, eps: float):
    """Zero-centred RMSNorm (Qwen3.5): ``x / rms(x) * (1 + w)``, computed in fp32."""
    xf = x.astype(F32)
    y = xf * lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return (y * (1.0 + weight.astype(F32))).astype(x.dtype)


def gated_rms_norm(x, gate, weight, eps: float):
    """RMSNorm with a plain (not zero-centred) weight, then times ``silu(gate)`` (GDN output)."""
    xf = x.astype(F32)
    y = xf * lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    y = weight * y.astype(x.dtype)
    return (y.astype(F32) * jax.nn.silu(gate.astype(F32))).astype(x.dtype)


def l2norm(x, eps: float = 1e-6):
    """``x / sqrt(sum(x^2) + eps)`` over the last axis (the FLA / HF convention)."""
    return x * lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + eps)


# ---------------------------------------------------------------------------------------------
# positions and segments
# ---------------------------------------------------------------------------------------------
def segment_starts(segment_ids_BT):
    """True on the first token of each segment (and on token 0 of every row)."""
    first_B1 = jnp.ones(segment_ids_BT.shape[:1] + (1,), bool)
    return jnp.concatenate([first_B1, segment_ids_BT[:, 1:] != segment_ids_BT[:, :-1]], axis=1)


def positions_from_segments(segment_ids_BT):
    """Positions that restart at 0 at every segment start."""
    T = segment_ids_BT.shape[1]
    t_BT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), segment_ids_BT.shape)
    start_BT = lax.cummax(jnp.where(segment_starts(segment_ids_BT), t_BT, 0), axis=1)
    return t_BT - start_BT


def rope_cos_sin(positions, rotary_dim: int, theta: float, mrope_section: Sequence[int] = (),
                 mrope_interleaved: bool = True):
    """cos/sin tables ``[B, T, rotary_dim]`` in the rotate-half layout.

    ``positions`` is ``[B, T]`` (text: the same position on the temporal/height/width streams,
    which makes multimodal RoPE collapse to plain RoPE) or ``[3, B, T]`` (one row per stream).
    With three streams the frequency slots are assigned interleaved as in Qwen3.5
    (slot i -> height if i % 3 == 1 and i < 3*sec[1], width if i % 3 == 2 and i < 3*sec[2],
    temporal otherwise), or in contiguous sections when ``mrope_interleaved`` is False.
    """
    half = rotary_dim // 2
    inv_freq_F = 1.0 / (theta ** (jnp.arange(0, rotary_dim, 2, dtype=F32) / rotary_dim))
    pos = positions.astype(F32)
    if pos.ndim == 2:
        freqs_BTF = pos[..., None] * inv_freq_F
    elif pos.ndim == 3 and pos.shape[0] == 3:
        freqs_3BTF = pos[..., None] * inv_freq_F
        slot = jnp.arange(half)
        if mrope_interleaved:
            stream = jnp.where((slot % 3 == 1) & (slot < 3 * mrope_section[1]), 1,
                               jnp.where((slot % 3 == 2) & (slot < 3 * mrope_section[2]), 2, 0))
        else:
            bounds = jnp.cumsum(jnp.asarray(mrope_section))
            stream = jnp.searchsorted(bounds, slot, side="right")
            stream = jnp.minimum(stream, 2)
        onehot_3F = jax.nn.one_hot(stream, 3, dtype=F32).T
        freqs_BTF = jnp.einsum("sbtf,sf->btf", freqs_3BTF, onehot_3F)
    else:
        raise ValueError(f"positions: expected shape [B, T] or [3, B, T], got {positions.shape}")
    emb_BTR = jnp.concatenate([freqs_BTF, freqs_BTF], axis=-1)
    return jnp.cos(emb_BTR), jnp.sin(emb_BTR)


def apply_partial_rope(x_BTNH, cos_BTR, sin_BTR):
    """Rotate the first ``R`` dims of every head (rotate-half convention); pass the rest."""
    R = cos_BTR.shape[-1]
    x_rot, x_pass = x_BTNH[..., :R], x_BTNH[..., R:]
    x1, x2 = x_rot[..., : R // 2], x_rot[..., R // 2:]
    rotated = jnp.concatenate([-x2, x1], axis=-1)
    cos = cos_BTR[:, :, None, :].astype(x_BTNH.dtype)
    sin = sin_BTR[:, :, None, :].astype(x_BTNH.dtype)
    return jnp.concatenate([x_rot * cos + rotated * sin, x_pass], axis=-1)


# ---------------------------------------------------------------------------------------------
# attention
# ---------------------------------------------------------------------------------------------
def gqa_attention(q_BTNH, k_BSKH, v_BSKH, mask_BTS, scale: float):
    """Softmax attention with grouped kv heads; ``mask_BTS`` True where a query may attend.

    Scores and softmax are fp32. Rows with no allowed key (only padding) give zeros. The mask
    is applied as an additive ``[B, T, S]`` bias and the empty-row zeroing on the ``[B, T, N, H]``
    output, so the ``[B, K, G, T, S]`` score tensor is touched by as few passes as possible.
    """
    B, T, N, H = q_BTNH.shape
    K = k_BSKH.shape[2]
    q_BTKGH = (q_BTNH * jnp.asarray(scale, q_BTNH.dtype)).reshape(B, T, K, N // K, H)
    s_BKGTS = jnp.einsum("btkgh,bskh->bkgts", q_BTKGH, k_BSKH, preferred_element_type=F32)
    bias_BTS = jnp.where(mask_BTS, 0.0, -1e30).astype(F32)
    p_BKGTS = jax.nn.softmax(s_BKGTS + bias_BTS[:, None, None], axis=-1).astype(v_BSKH.dtype)
    o_BTKGH = jnp.einsum("bkgts,bskh->btkgh", p_BKGTS, v_BSKH)
    row_ok_BT = jnp.any(mask_BTS, axis=-1)
    o_BTKGH = jnp.where(row_ok_BT[:, :, None, None, None], o_BTKGH, 0)
    return o_BTKGH.reshape(B, T, N, H)


def causal_segment_mask(segment_ids_BT):
    """``[B, T, T]`` mask: causal and inside the same segment."""
    T = segment_ids_BT.shape[1]
    causal_TT = jnp.tril(jnp.ones((T, T), bool))
    same_BTT = segment_ids_BT[:, :, None] == segment_ids_BT[:, None, :]
    return causal_TT[None] & same_BTT


# ---------------------------------------------------------------------------------------------
# depthwise causal conv1d (GDN)
# ---------------------------------------------------------------------------------------------
def causal_conv1d(x_BTC, w_CW, seg_start_BT=None, state_BCW=None):
    """Depthwise causal conv with SiLU: ``y_t = silu(sum_j w[:, j] * x_{t-W+1+j})``.

    ``state_BCW`` (W-1 previous inputs, oldest first) continues a sequence; without it the past
    is zeros. With ``seg_start_BT`` inputs from an earlier segment (or the state, once a new
    segment started in this call) are masked out, so packed rows equal separate forwards.
    Computed as W shifted multiply-adds (W is 4): cheaper than a general conv on every backend.
    """
    B, T, C = x_BTC.shape
    W = w_CW.shape[-1]
    if state_BCW is None:
        past_BPC = jnp.zeros((B, W - 1, C), x_BTC.dtype)
    else:
        past_BPC = jnp.swapaxes(state_BCW, 1, 2).astype(x_BTC.dtype)
    xx_BPC = jnp.concatenate([past_BPC, x_BTC], axis=1)  # P = W - 1 + T
    if seg_start_BT is not None:
        # segment index of every token (state positions belong to "segment 0" = the past)
        seg_BT = jnp.cumsum(seg_start_BT.astype(jnp.int32), axis=1)
        if state_BCW is None:
            seg_BT = seg_BT - 1  # token 0 always starts a segment; nothing to continue
        seg_BP = jnp.concatenate([jnp.zeros((B, W - 1), jnp.int32), seg_BT], axis=1)
    acc_BTC = jnp.zeros((B, T, C), F32)
    for j in range(W):
        lag = W - 1 - j
        tap_BTC = lax.dynamic_slice_in_dim(xx_BPC, j, T, axis=1)
        if seg_start_BT is not None and lag > 0:
            keep_BT = lax.dynamic_slice_in_dim(seg_BP, j, T, axis=1) == seg_BT
            tap_BTC = jnp.where(keep_BT[..., None], tap_BTC, 0)
        acc_BTC = acc_BTC + tap_BTC.astype(F32) * w_CW[:, j].astype(F32)
    return jax.nn.silu(acc_BTC).astype(x_BTC.dtype)


def conv_state_after(x_BTC, state_BCW, num_new_B):
    """The conv state after appending ``num_new_B[b]`` (right-padded) tokens to each row."""
    Wm1 = state_BCW.shape[-1]
    xx_BCP = jnp.concatenate([state_BCW, jnp.swapaxes(x_BTC, 1, 2).astype(state_BCW.dtype)], axis=2)
    idx_BW = num_new_B[:, None] + jnp.arange(Wm1)[None, :]
    return jnp.take_along_axis(xx_BCP, idx_BW[:, None, :], axis=2)


# ---------------------------------------------------------------------------------------------
# gated delta rule
# ---------------------------------------------------------------------------------------------
# Every product of the gated delta rule runs at full fp32 precision, also on backends whose
# default fp32 matmul is reduced (TPU: bf16 passes, GPU: TF32): inputs of any dtype are cast to
# fp32 on entry, the state is fp32, only the output is cast back.
_HI = lax.Precision.HIGHEST
_ein = functools.partial(jnp.einsum, precision=_HI, preferred_element_type=F32)

# Per-token log-decays are clamped to [G_FLOOR, 0]. exp(-110) is below half the smallest fp32
# subnormal, so a clamped token's decay factor is exactly 0, as it was; what the clamp buys is
# finite in-chunk cumulative sums (g = -inf, e.g. from an overflowing exp(A_log), would make
# -inf - -inf = NaN) and no exponential of a positive number (g > 0 breaks the rule's contract).
G_FLOOR = -110.0

# exp(A_log) is clamped at exp(A_LOG_MAX): finite in fp32 (overflow starts at 88.7), so the
# decay rate ``-A * softplus(.)`` is never ``inf * 0 = NaN`` when softplus underflows.
A_LOG_MAX = 80.0


def gdn_gates(b_BTN, a_BTN, A_log_N, dt_bias_N):
    """Write strength and log-decay of the Gated DeltaNet, in fp32 whatever the input dtype.

    ``beta = sigmoid(b)``; ``g = -exp(min(A_log, A_LOG_MAX)) * softplus(a + dt_bias)`` (<= 0).
    """
    beta_BTN = jax.nn.sigmoid(b_BTN.astype(F32))
    rate_N = jnp.exp(jnp.minimum(A_log_N.astype(F32), A_LOG_MAX))
    g_BTN = -rate_N * jax.nn.softplus(a_BTN.astype(F32) + dt_bias_N.astype(F32))
    return beta_BTN, g_BTN


def _log_decay(g):
    """fp32 ``g`` clamped to ``[G_FLOOR, 0]`` (``where``, so the gradient is 1 inside, also at 0)."""
    g = g.astype(F32)
    return jnp.where(g < G_FLOOR, G_FLOOR, jnp.where(g > 0, 0.0, g))


def _expand_kv_heads(x_BTKA, num_v_heads: int):
    K = x_BTKA.shape[2]
    return x_BTKA if K == num_v_heads else jnp.repeat(x_BTKA, num_v_heads // K, axis=2)


def recurrent_gated_delta_rule(q_BTKA, k_BTKA, v_BTNE, g_BTN, beta_BTN, state_BNAE=None,
                               seg_start_BT=None, use_qk_l2norm: bool = True):
    """Token-by-token gated delta rule (the reference recurrence; used for decode).

    ``S <- exp(g_t) S;  u = beta_t (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T q_t / sqrt(A)``.
    All in fp32 whatever the input dtype. Returns ``(o_BTNE in q's dtype, final state fp32)``.
    """
    B, T, _, A = q_BTKA.shape
    N, E = v_BTNE.shape[2:]
    dtype = q_BTKA.dtype
    q, k = (_expand_kv_heads(x, N).astype(F32) for x in (q_BTKA, k_BTKA))
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    q = q * (A ** -0.5)
    v, g, beta = v_BTNE.astype(F32), _log_decay(g_BTN), beta_BTN.astype(F32)
    keep_BT = jnp.ones((B, T), F32) if seg_start_BT is None else 1.0 - seg_start_BT.astype(F32)
    S0 = jnp.zeros((B, N, A, E), F32) if state_BNAE is None else state_BNAE.astype(F32)

    def step(S_BNAE, inp):
        q_t, k_t, v_t, g_t, b_t, keep_t = inp
        S_BNAE = S_BNAE * (jnp.exp(g_t) * keep_t[:, None])[..., None, None]
        kv_BNE = _ein("bnae,bna->bne", S_BNAE, k_t)
        u_BNE = (v_t - kv_BNE) * b_t[..., None]
        S_BNAE = S_BNAE + _ein("bna,bne->bnae", k_t, u_BNE)
        o_BNE = _ein("bnae,bna->bne", S_BNAE, q_t)
        return S_BNAE, o_BNE

    xs = tuple(jnp.moveaxis(x, 1, 0) for x in (q, k, v, g, beta, keep_BT))
    S, o_TBNE = lax.scan(step, S0, xs)
    return jnp.moveaxis(o_TBNE, 0, 1).astype(dtype), S


def _bmm(a, b):
    """Batched matmul over the last two axes at full fp32 precision (also on TPU/GPU)."""
    return _ein("...ij,...jk->...ik", a, b)


def _diag_blocks(x_XLL, s: int):
    """The ``[..., L/s, s, s]`` diagonal blocks of ``[..., L, L]`` matrices."""
    *batch, L, _ = x_XLL.shape
    x = x_XLL.reshape(tuple(batch) + (L // s, s, L // s, s))
    return jnp.moveaxis(jnp.diagonal(x, axis1=-4, axis2=-2), -1, -3)


def _unit_lower_inverse_recursive(a_XLL):
    L = a_XLL.shape[-1]
    Lp = 1 << (L - 1).bit_length()       # padded to a power of two with identity rows/columns
    n_XLL = a_XLL.astype(F32) - jnp.eye(L, dtype=F32)
    if Lp != L:
        n_XLL = jnp.pad(n_XLL, [(0, 0)] * (n_XLL.ndim - 2) + [(0, Lp - L), (0, Lp - L)])
    t_XPss = jnp.ones(n_XLL.shape[:-2] + (Lp, 1, 1), F32)     # the 1x1 diagonal blocks: exactly 1
    s = 1
    while s < Lp:  # merge pairs of inverted diagonal blocks: [[T11, 0], [-T22 N21 T11, T22]]
        t11, t22 = t_XPss[..., 0::2, :, :], t_XPss[..., 1::2, :, :]
        n21 = _diag_blocks(n_XLL[..., s:, :Lp - s], s)[..., 0::2, :, :]
        t21 = -_bmm(_bmm(t22, n21), t11)
        t_XPss = jnp.concatenate([jnp.concatenate([t11, jnp.zeros_like(t11)], -1),
                                  jnp.concatenate([t21, t22], -1)], -2)
        s *= 2
    return t_XPss[..., 0, :L, :L]


@jax.custom_vjp
def unit_lower_inverse(a_XLL):
    """Inverse of unit lower-triangular matrices, fp32, by blocked forward substitution in
    recursive form: neighbouring inverted diagonal blocks are merged pairwise,
    ``[[A11, 0], [A21, A22]]^-1 = [[T11, 0], [-T22 A21 T11, T22]]``, from the 1x1 blocks (exactly
    1) up to the whole chunk: log2(L) levels of two batched matmuls each.

    Every intermediate is a block of the inverse itself, so nothing grows beyond the result; for
    the delta rule's systems (unit keys, beta in [0, 1]) the inverse's entries stay O(1) and the
    error is that of forward substitution (~1e-7 in fp32, measured up to L = 128 with key cosine
    0.999 and beta = 1). The doubling products ``(I - N)(I + N^2)(I + N^4)...`` used before are
    exact algebra, but their factors grow combinatorially before they cancel: fp32 lost every digit
    once keys inside a chunk were correlated and beta near 1 (issue #19).

    Matmul-only: it partitions trivially over batch axes and maps to the MXU / tensor cores; a
    ``lax.linalg.triangular_solve`` (LAPACK custom call) is as accurate but several times slower
    on CPU (``benchmarks/bench_gdn.py --trsm``). Solving 16x16 diagonal blocks by row substitution
    first (FLA's layout) measured no more accurate and no faster on CPU. The VJP is the closed
    form ``dA = -A^-T dY A^-T``: two matmuls with the (bounded) inverse, as stable as the forward.
    """
    return _unit_lower_inverse_recursive(a_XLL)


def _unit_lower_inverse_fwd(a_XLL):
    inv_XLL = _unit_lower_inverse_recursive(a_XLL)
    return inv_XLL, inv_XLL


def _unit_lower_inverse_bwd(inv_XLL, d_XLL):
    inv_t_XLL = jnp.swapaxes(inv_XLL, -1, -2)
    return (-_bmm(_bmm(inv_t_XLL, d_XLL.astype(F32)), inv_t_XLL),)


unit_lower_inverse.defvjp(_unit_lower_inverse_fwd, _unit_lower_inverse_bwd)


def _masked_exp(x, mask):
    """``exp(x)`` where ``mask``, else 0. Masked entries are log-decay differences, non-positive
    in exact arithmetic; the clamp to ``<= 0`` guards against rounding, and unmasked entries never
    reach ``exp``. ``where(x <= 0, x, 0)`` keeps the gradient 1 at ``x = 0`` (no decay)."""
    x = jnp.where(mask & (x <= 0), x, 0.0)
    return jnp.where(mask, jnp.exp(x), 0.0)


def chunk_gated_delta_rule(q_BTKA, k_BTKA, v_BTNE, g_BTN, beta_BTN, state_BNAE=None,
                           seg_start_BT=None, chunk_size: int = 64, use_qk_l2norm: bool = True):
    """Chunked (WY / UT-transform) gated delta rule; exact, O(T) in sequence length.

    Within a chunk of L tokens with cumulative log-decay c_t, the per-token updates
    ``u = (I + tril(beta k k^T * exp(c_t - c_s), -1))^-1 (beta v - beta exp(c) k S0)`` are
    solved with ``unit_lower_inverse`` (blocked forward substitution); a ``lax.scan`` over chunks
    carries the state ``S <- exp(c_L) S0 + sum_s exp(c_L - c_s) k_s u_s^T``. Segment starts cut
    every term that would cross a boundary (intra-chunk pairs, the incoming state, the outgoing
    state), which is the same as resetting the state to zero there. Returns
    ``(o_BTNE in q's dtype, final state fp32)``.

    Numerics: everything inside is fp32 at full matmul precision whatever the input dtype; every
    exponential is of a masked, non-positive log-decay difference (``_masked_exp``), and ``g`` is
    clamped to ``[G_FLOOR, 0]``. The one error the recurrence does not have: ``c_t - c_s`` is a
    difference of in-chunk cumulative sums, so it carries about ``(t - s) * ulp(|c_t|)`` of
    rounding; it matters only when large decays early in a chunk (|c| in the hundreds) are
    followed by near-1 decays, and shrinks with the chunk size (docs/model.md, "Gated DeltaNet
    numerics").

    Layout: inputs are moved once to chunk-major, head-major ``[M, B, H, (G,) L, X]`` (H = key
    heads, G = value heads per key head), so the per-chunk einsums need no transposes and the scan
    slices its leading axis; q/k stay at H heads (GQA shared across the G value heads, never
    repeated). On CPU this halved the forward against a token-major layout with moveaxis calls.
    """
    B, T, Hk, A = q_BTKA.shape
    N, E = v_BTNE.shape[2:]
    G = N // Hk
    dtype = q_BTKA.dtype
    L = int(min(chunk_size, T)) if T > 0 else 1
    pad = (-T) % L
    M = (T + pad) // L
    q, k = q_BTKA.astype(F32), k_BTKA.astype(F32)
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    q = q * (A ** -0.5)

    def to_chunks(x, feat):  # [B, T, *heads, (X)] -> [M, B, *heads, L, (X)]
        x = jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
        x = x.reshape((B, M, L) + x.shape[2:])
        nh = x.ndim - 3 - feat
        perm = (1, 0) + tuple(range(3, 3 + nh)) + (2,) + tuple(range(3 + nh, x.ndim))
        return x.transpose(perm)

    q_MBHLA, k_MBHLA = to_chunks(q, 1), to_chunks(k, 1)
    v_MBHGLE = to_chunks(v_BTNE.astype(F32).reshape(B, T, Hk, G, E), 1)
    g_MBHGL = to_chunks(_log_decay(g_BTN).reshape(B, T, Hk, G), 0)
    beta_MBHGL = to_chunks(beta_BTN.astype(F32).reshape(B, T, Hk, G), 0)
    starts = jnp.zeros((B, T), bool) if seg_start_BT is None else seg_start_BT
    if state_BNAE is None:  # token 0 "starts" with a zero state either way
        starts = starts.at[:, 0].set(False)
    r_MBL = jnp.cumsum(to_chunks(starts.astype(jnp.int32), 0), axis=-1)
    c_MBHGL = jnp.cumsum(g_MBHGL, axis=-1)
    bc = lambda x: x[:, :, None, None]   # [M, B, ...] -> [M, B, 1, 1, ...]

    tril_LL = jnp.tril(jnp.ones((L, L), bool))
    pair_MBLL = tril_LL & (r_MBL[..., :, None] == r_MBL[..., None, :])
    decay_MBHGLL = _masked_exp(c_MBHGL[..., :, None] - c_MBHGL[..., None, :], bc(pair_MBLL))
    kk_MBHLL = _ein("mbhla,mbhsa->mbhls", k_MBHLA, k_MBHLA)
    strict_LL = jnp.tril(jnp.ones((L, L), bool), -1)
    a_MBHGLL = jnp.where(strict_LL, kk_MBHLL[:, :, :, None] * beta_MBHGL[..., :, None] * decay_MBHGLL, 0.0) \
        + jnp.eye(L, dtype=F32)
    in_decay_MBHGL = _masked_exp(c_MBHGL, bc(r_MBL == 0))
    rhs_MBHGLX = jnp.concatenate([
        v_MBHGLE * beta_MBHGL[..., None],
        k_MBHLA[:, :, :, None] * (beta_MBHGL * in_decay_MBHGL)[..., None]], axis=-1)
    sol_MBHGLX = _ein("mbhgls,mbhgsx->mbhglx", unit_lower_inverse(a_MBHGLL), rhs_MBHGLX)
    newv_MBHGLE, kcum_MBHGLA = sol_MBHGLX[..., :E], sol_MBHGLX[..., E:]
    qk_MBHGLL = _ein("mbhla,mbhsa->mbhls", q_MBHLA, k_MBHLA)[:, :, :, None] * decay_MBHGLL
    last_c_MBHG = c_MBHGL[..., -1]
    out_ok_MBL = r_MBL == r_MBL[..., -1:]
    out_decay_MBHGL = _masked_exp(last_c_MBHG[..., None] - c_MBHGL, bc(out_ok_MBL))
    chunk_decay_MBHG = _masked_exp(last_c_MBHG, bc(r_MBL[..., -1] == 0))
    S0 = (jnp.zeros((B, Hk, G, A, E), F32) if state_BNAE is None
          else state_BNAE.astype(F32).reshape(B, Hk, G, A, E))

    def step(S_BHGAE, inp):
        newv, kcum, qk, q, k, in_dec, out_dec, cdec = inp
        u_BHGLE = newv - _ein("bhgla,bhgae->bhgle", kcum, S_BHGAE)
        o_BHGLE = (_ein("bhla,bhgae->bhgle", q, S_BHGAE) * in_dec[..., None]
                   + _ein("bhgls,bhgse->bhgle", qk, u_BHGLE))
        S_BHGAE = S_BHGAE * cdec[..., None, None] + _ein("bhla,bhgle->bhgae", k, u_BHGLE * out_dec[..., None])
        return S_BHGAE, o_BHGLE

    xs = (newv_MBHGLE, kcum_MBHGLA, qk_MBHGLL, q_MBHLA, k_MBHLA, in_decay_MBHGL, out_decay_MBHGL, chunk_decay_MBHG)
    S, o_MBHGLE = lax.scan(step, S0, xs)
    o_BTNE = o_MBHGLE.transpose(1, 0, 4, 2, 3, 5).reshape(B, M * L, N, E)[:, :T]
    return o_BTNE.astype(dtype), S.reshape(B, N, A, E)


# ---------------------------------------------------------------------------------------------
# MLP / MoE
# ---------------------------------------------------------------------------------------------
def swiglu(x_BTD, gate_ID, up_ID, down_DI):
    """``down(silu(gate(x)) * up(x))`` with HF ``[out, in]`` weights."""
    h = jax.nn.silu(jnp.einsum("btd,id->bti", x_BTD, gate_ID)) * jnp.einsum("btd,id->bti", x_BTD, up_ID)
    return jnp.einsum("bti,di->btd", h, down_DI)


def route_topk(x_SD, router_XD, top_k: int, renormalize: bool = True):
    """Softmax router in fp32, top-k experts per token, optional renormalisation."""
    logits_SX = jnp.einsum("sd,xd->sx", x_SD, router_XD)
    probs_SX = jax.nn.softmax(logits_SX.astype(F32), axis=-1)
    w_SK, idx_SK = lax.top_k(probs_SX, top_k)
    if renormalize:
        w_SK = w_SK / jnp.sum(w_SK, axis=-1, keepdims=True)
    return logits_SX, w_SK.astype(x_SD.dtype), idx_SK


def moe_experts(x_SD, w_SK, idx_SK, gate_up_XFD, down_XDI, impl: str = "sorted"):
    """Apply the selected experts (fused ``gate_up [X, 2I, D]``, ``down [X, D, I]``) and combine.

    ``impl="sorted"``: tokens are sorted by expert and run through ``lax.ragged_dot`` (compute
    proportional to top_k; exact). ``impl="dense"``: every expert on every token, weighted by a
    sparse combine matrix (X/top_k times the FLOPs; simplest to shard over an expert axis).
    """
    S, D = x_SD.shape
    X, F2, _ = gate_up_XFD.shape
    I = F2 // 2
    Kk = idx_SK.shape[1]
    if impl == "dense":
        comb_SX = jnp.einsum("sk,skx->sx", w_SK.astype(F32), jax.nn.one_hot(idx_SK, X, dtype=F32))
        h_SXF = jnp.einsum("sd,xfd->sxf", x_SD, gate_up_XFD)
        a_SXI = jax.nn.silu(h_SXF[..., :I]) * h_SXF[..., I:]
        y_SXD = jnp.einsum("sxi,xdi->sxd", a_SXI, down_XDI)
        return jnp.einsum("sxd,sx->sd", y_SXD.astype(F32), comb_SX).astype(x_SD.dtype)
    if impl != "sorted":
        raise ValueError(f"moe impl {impl!r}: use 'sorted' or 'dense'")
    flat_idx_R = idx_SK.reshape(-1)                       # R = S * top_k routed rows
    order_R = jnp.argsort(flat_idx_R, stable=True)
    tok_R = order_R // Kk
    xs_RD = x_SD[tok_R]
    sizes_X = jnp.bincount(flat_idx_R, length=X).astype(jnp.int32)
    h_RF = lax.ragged_dot(xs_RD, jnp.swapaxes(gate_up_XFD, 1, 2), sizes_X)
    a_RI = jax.nn.silu(h_RF[:, :I]) * h_RF[:, I:]
    y_RD = lax.ragged_dot(a_RI, jnp.swapaxes(down_XDI, 1, 2), sizes_X)
    wr_R = w_SK.reshape(-1)[order_R]
    y_RD = y_RD.astype(F32) * wr_R[:, None].astype(F32)
    out_SD = jnp.zeros((S, D), F32).at[tok_R].add(y_RD)
    return out_SD.astype(x_SD.dtype)
