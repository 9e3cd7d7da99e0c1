"""GRPO / SFT loss numerics as pure functions.

Every loss here is returned as a ``(sum, denominator)`` pair (``LossTerms``) so that gradient
accumulation over micro-batches and data-parallel shards divides exactly once, by the global
denominator. Metrics follow the same rule: a mean metric is a ``(sum, count)`` pair, and extrema
are kept under names starting with ``max/`` or ``min/`` (reduced with max/min).

Formulas (see docs/rl.md and ../shared/METHODS.md):

* ratio           ``rho = exp(clip(logp - old_logp, -20, 20))``
* clipped PG loss ``max(-A*rho, -A*clip(rho, 1-eps_low, 1+eps_high))`` (the negated
  ``min(rho*A, clip(rho)*A)`` objective), optional dual-clip ``min(., -c*A)`` for ``A < 0``
* truncated importance weight (stop-gradient, multiplied into the per-token loss):
  ``"cap"`` (default) ``w = min(exp(old_logp - rollout_logp), C)``;
  ``"mask"`` ``w = exp(old_logp - rollout_logp)`` inside ``[low, high]``, 0 outside;
  ``"literal"`` the Harness-R1 paper's printed ``w = clip(old_logp - rollout_logp, 0, C)``;
  ``"none"`` ``w = 1``.
* aggregation ``token_mean`` (sum over all loss tokens / their number),
  ``seq_mean_token_mean`` (Harness-R1's ``1/K sum_k 1/T_k sum_t``), ``constant``
  (sum / (num_sequences * norm_constant), Dr.GRPO style).
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Optional

import jax
import jax.numpy as jnp

LOG_RATIO_CLIP = 20.0
AGG_MODES = ("token_mean", "seq_mean_token_mean", "constant")
TIS_MODES = ("cap", "mask", "literal", "none")
KL_TYPES = ("k1", "k2", "k3")
ADV_SCALES = ("std", "none")
ADV_BASELINES = ("mean", "loo")

Metrics = dict  # name -> (sum, count) for means; name "max/..." / "min/..." -> scalar


# ----------------------------------------------------------------------------------------------
# advantages
# ----------------------------------------------------------------------------------------------
def group_advantages(rewards_NG, eps: float = 1e-6, *, scale: str = "std", baseline: str = "mean",
                     ddof: int = 0):
    """Group-relative advantages, ``[num_groups, group_size] -> same shape`` (float32).

    ``scale="std"``: ``(r - b) / max(std, eps)`` (Harness-S; Harness-R1's ``(r - mu)/sigma``
    with the same guard). ``scale="none"``: ``r - b`` (Dr.GRPO). ``baseline="mean"`` uses the
    group mean, ``"loo"`` the mean of the *other* members (RLOO). ``ddof`` selects the
    population (0) or sample (1) standard deviation. Groups whose rewards are all equal get
    exactly zero advantage (no float residue), see ``zero_variance_fraction``.
    """
    if scale not in ADV_SCALES:
        raise ValueError(f"group_advantages: scale={scale!r}; use one of {ADV_SCALES}")
    if baseline not in ADV_BASELINES:
        raise ValueError(f"group_advantages: baseline={baseline!r}; use one of {ADV_BASELINES}")
    r_NG = jnp.asarray(rewards_NG, jnp.float32)
    if r_NG.ndim != 2:
        raise ValueError(f"group_advantages: rewards_NG must be [num_groups, group_size], got shape "
                         f"{r_NG.shape}; reshape the flat rewards by group first")
    G = r_NG.shape[1]
    if baseline == "loo" and G < 2:
        raise ValueError("group_advantages: baseline='loo' needs group_size >= 2")
    mean_N1 = jnp.mean(r_NG, axis=1, keepdims=True)
    if baseline == "mean":
        centred_NG = r_NG - mean_N1
    else:
        centred_NG = r_NG - (jnp.sum(r_NG, axis=1, keepdims=True) - r_NG) / (G - 1)
    if scale == "std":
        std_N1 = jnp.std(r_NG, axis=1, keepdims=True, ddof=ddof) if G > ddof else jnp.zeros_like(mean_N1)
        adv_NG = centred_NG / jnp.maximum(std_N1, eps)
    else:
        adv_NG = centred_NG
    equal_N1 = (jnp.max(r_NG, axis=1, keepdims=True) == jnp.min(r_NG, axis=1, keepdims=True))
    return jnp.where(equal_N1, 0.0, adv_NG)


def zero_variance_fraction(rewards_NG):
    """Fraction of groups whose rewards are all equal (they carry no GRPO signal)."""
    r_NG = jnp.asarray(rewards_NG, jnp.float32)
    return jnp.mean((jnp.max(r_NG, axis=1) == jnp.min(r_NG, axis=1)).astype(jnp.float32))


# ----------------------------------------------------------------------------------------------
# aggregation
# ----------------------------------------------------------------------------------------------
def _default_segments(mask_BT):
    return jnp.ones(mask_BT.shape, jnp.int32)


def token_weights(mask_BT, segment_ids_BT=None, *, agg: str = "token_mean", norm_constant: float = 1.0):
    """Per-token aggregation weights and the denominator for one (micro-)batch.

    Returns ``(weight_BT, denom)`` such that ``loss = sum(weight_BT * l_BT) / denom``; the
    denominator of a sum of micro-batches is the sum of their denominators. ``segment_ids_BT``
    (0 = padding, 1.. = packed sequences) identifies sequences inside a row; ``None`` means one
    sequence per row.
    """
    if agg not in AGG_MODES:
        raise ValueError(f"agg={agg!r}; use one of {AGG_MODES}")
    mask_BT = jnp.asarray(mask_BT, jnp.float32)
    if agg == "token_mean":
        return mask_BT, jnp.sum(mask_BT)
    seg_BT = _default_segments(mask_BT) if segment_ids_BT is None else jnp.asarray(segment_ids_BT, jnp.int32)
    B, T = mask_BT.shape
    # Sequence index unique over the batch: row * (T + 1) + segment id (segment ids are <= T).
    flat_ids = (jnp.arange(B, dtype=jnp.int32)[:, None] * (T + 1) + seg_BT).reshape(-1)
    num = B * (T + 1)
    count_S = jax.ops.segment_sum(mask_BT.reshape(-1), flat_ids, num_segments=num)
    num_seqs = jnp.sum((count_S > 0).astype(jnp.float32))
    if agg == "seq_mean_token_mean":
        count_BT = count_S[flat_ids].reshape(B, T)
        weight_BT = mask_BT / jnp.maximum(count_BT, 1.0)
        return weight_BT, num_seqs
    return mask_BT, num_seqs * norm_constant


# ----------------------------------------------------------------------------------------------
# per-token pieces
# ----------------------------------------------------------------------------------------------
def tis_weight(old_logp_BT, rollout_logp_BT, *, mode: str = "cap", cap: Optional[float] = 2.0,
               low: float = 0.0, high: float = 2.0):
    """Truncated importance weight between trainer (old) and rollout-engine log-probs.

    Always returned under ``stop_gradient``: it corrects the sampling distribution, it is not
    something to optimise. ``cap=None`` with ``mode="cap"`` means no truncation.
    """
    if mode not in TIS_MODES:
        raise ValueError(f"tis mode={mode!r}; use one of {TIS_MODES}")
    d_BT = jnp.asarray(old_logp_BT, jnp.float32) - jnp.asarray(rollout_logp_BT, jnp.float32)
    if mode == "none":
        w_BT = jnp.ones_like(d_BT)
    elif mode == "cap":
        w_BT = jnp.exp(jnp.clip(d_BT, -LOG_RATIO_CLIP, LOG_RATIO_CLIP))
        if cap is not None:
            w_BT = jnp.minimum(w_BT, cap)
    elif mode == "mask":
        r_BT = jnp.exp(jnp.clip(d_BT, -LOG_RATIO_CLIP, LOG_RATIO_CLIP))
        w_BT = jnp.where((r_BT >= low) & (r_BT <= high), r_BT, 0.0)
    else:  # literal: the paper's printed clip(l_tr - l_ro, 0, C)
        w_BT = jnp.clip(d_BT, 0.0, 2.0 if cap is None else cap)
    # stop-gradient: the weight is a fixed correction factor per token.
    return jax.lax.stop_gradient(w_BT)


def kl_penalty(logp_BT, ref_logp_BT, *, kind: str = "k3", clamp: Optional[float] = 10.0):
    """Per-token KL(pi || ref) estimator (Schulman k1/k2/k3), clamped to ``[-clamp, clamp]``."""
    if kind not in KL_TYPES:
        raise ValueError(f"kl kind={kind!r}; use one of {KL_TYPES}")
    d_BT = jnp.asarray(ref_logp_BT, jnp.float32) - jnp.asarray(logp_BT, jnp.float32)  # log(ref/pi)
    if kind == "k1":
        kl_BT = -d_BT
    elif kind == "k2":
        kl_BT = 0.5 * d_BT * d_BT
    else:
        d_BT = jnp.clip(d_BT, -LOG_RATIO_CLIP, LOG_RATIO_CLIP)
        kl_BT = jnp.exp(d_BT) - 1.0 - d_BT
    if clamp is not None:
        kl_BT = jnp.clip(kl_BT, -clamp, clamp)
    return kl_BT


@dataclasses.dataclass(frozen=True)
class PolicyLossConfig:
    """All knobs of the GRPO policy loss (defaults: Harness-R1 recipe, KL/entropy off)."""

    eps_low: float = 0.2
    eps_high: float = 0.28
    dual_clip: Optional[float] = None      # c > 1: cap the loss at -c*A for A < 0
    tis_mode: str = "cap"                  # "cap" | "mask" | "literal" | "none"
    tis_cap: Optional[float] = 2.0         # C; None = off (same as tis_mode="none")
    tis_low: float = 0.0                   # "mask" mode interval
    tis_high: float = 2.0
    agg: str = "token_mean"                # "token_mean" | "seq_mean_token_mean" | "constant"
    norm_constant: float = 1.0             # "constant" aggregation: tokens per sequence budget
    kl_coef: float = 0.0
    kl_type: str = "k3"
    kl_clamp: Optional[float] = 10.0
    entropy_coef: float = 0.0

    def __post_init__(self):
        def bad(f, m):
            raise ValueError(f"PolicyLossConfig.{f}: {m}")
        if not 0 <= self.eps_low < 1:
            bad("eps_low", f"{self.eps_low} must be in [0, 1)")
        if self.eps_high < 0:
            bad("eps_high", f"{self.eps_high} must be >= 0")
        if self.dual_clip is not None and self.dual_clip <= 1:
            bad("dual_clip", f"{self.dual_clip} must be > 1 (or None to disable)")
        if self.tis_mode not in TIS_MODES:
            bad("tis_mode", f"{self.tis_mode!r}; use one of {TIS_MODES}")
        if self.tis_cap is not None and self.tis_cap <= 0:
            bad("tis_cap", f"{self.tis_cap} must be > 0 (or None to disable)")
        if self.agg not in AGG_MODES:
            bad("agg", f"{self.agg!r}; use one of {AGG_MODES}")
        if self.kl_type not in KL_TYPES:
            bad("kl_type", f"{self.kl_type!r}; use one of {KL_TYPES}")
        if self.norm_constant <= 0:
            bad("norm_constant", f"{self.norm_constant} must be > 0")


def policy_loss_terms(logp_BT, old_logp_BT, rollout_logp_BT, adv_B, mask_BT, cfg: PolicyLossConfig,
                      *, segment_ids_BT=None, ref_logp_BT=None, entropy_BT=None, denom=None):
    """Unnormalised GRPO loss: ``(loss_sum, denom, metrics)``.

    ``adv_B`` is one advantage per row (unpacked) or ``[B, T]`` per token (packed rows carry the
    advantage of each token's sequence). ``denom`` overrides the local denominator (the learner
    passes the global one so micro-batch gradients add up to the full-batch gradient).
    """
    f32 = jnp.float32
    logp_BT = jnp.asarray(logp_BT, f32)
    old_logp_BT = jax.lax.stop_gradient(jnp.asarray(old_logp_BT, f32))
    mask_BT = jnp.asarray(mask_BT, f32)
    adv = jnp.asarray(adv_B, f32)
    adv_BT = adv[:, None] if adv.ndim == 1 else adv
    adv_BT = jnp.broadcast_to(adv_BT, mask_BT.shape)

    log_ratio_BT = logp_BT - old_logp_BT
    ratio_BT = jnp.exp(jnp.clip(log_ratio_BT, -LOG_RATIO_CLIP, LOG_RATIO_CLIP))
    clipped_ratio_BT = jnp.clip(ratio_BT, 1.0 - cfg.eps_low, 1.0 + cfg.eps_high)
    pg_BT = jnp.maximum(-adv_BT * ratio_BT, -adv_BT * clipped_ratio_BT)
    if cfg.dual_clip is not None:
        pg_BT = jnp.where(adv_BT < 0, jnp.minimum(pg_BT, -cfg.dual_clip * adv_BT), pg_BT)

    tis_mode = "none" if (cfg.tis_cap is None and cfg.tis_mode in ("cap", "literal")) else cfg.tis_mode
    if rollout_logp_BT is None:
        tis_mode = "none"
        rollout_logp_BT = old_logp_BT
    w_BT = tis_weight(old_logp_BT, rollout_logp_BT, mode=tis_mode, cap=cfg.tis_cap,
                      low=cfg.tis_low, high=cfg.tis_high)
    l_BT = w_BT * pg_BT
    if cfg.kl_coef and ref_logp_BT is not None:
        kl_BT = kl_penalty(logp_BT, ref_logp_BT, kind=cfg.kl_type, clamp=cfg.kl_clamp)
        l_BT = l_BT + cfg.kl_coef * kl_BT
    else:
        kl_BT = None
    if cfg.entropy_coef and entropy_BT is not None:
        l_BT = l_BT - cfg.entropy_coef * jnp.asarray(entropy_BT, f32)

    weight_BT, local_denom = token_weights(mask_BT, segment_ids_BT, agg=cfg.agg,
                                           norm_constant=cfg.norm_constant)
    loss_sum = jnp.sum(weight_BT * l_BT)
    denom = local_denom if denom is None else denom

    # --- metrics (never differentiated) ------------------------------------------------------
    sg = jax.lax.stop_gradient
    n_tok = jnp.sum(mask_BT)
    on = mask_BT > 0
    ratio_s, rollout_s = sg(ratio_BT), jnp.asarray(rollout_logp_BT, f32)
    big = jnp.float32(3e38)

    def mean(x_BT):
        return (jnp.sum(jnp.where(on, x_BT, 0.0)), n_tok)

    m: Metrics = {
        "pg_clipfrac_low": mean(((ratio_s < 1.0 - cfg.eps_low) & (adv_BT < 0)).astype(f32)),
        "pg_clipfrac_high": mean(((ratio_s > 1.0 + cfg.eps_high) & (adv_BT > 0)).astype(f32)),
        "ratio_mean": mean(ratio_s),
        "log_ratio_abs_mean": mean(jnp.abs(sg(log_ratio_BT))),
        "ppo_kl": mean(-sg(log_ratio_BT)),
        "tis_weight_mean": mean(w_BT),
        "tis_clipfrac": mean(((old_logp_BT - rollout_s) > (jnp.log(cfg.tis_cap) if cfg.tis_cap else big))
                             .astype(f32) if tis_mode == "cap" else jnp.zeros_like(w_BT)),
        "sampler_trainer_logp_diff_abs": mean(jnp.abs(old_logp_BT - rollout_s)),
        # k3 estimate of KL(sampler || trainer) on sampled tokens
        "sampler_trainer_kl": mean(jnp.exp(jnp.clip(old_logp_BT - rollout_s, -LOG_RATIO_CLIP, LOG_RATIO_CLIP))
                                   - 1.0 - (old_logp_BT - rollout_s)),
        "advantage_mean": mean(adv_BT),
        "max/ratio": jnp.max(jnp.where(on, ratio_s, -big)),
        "min/ratio": jnp.min(jnp.where(on, ratio_s, big)),
        "max/tis_weight": jnp.max(jnp.where(on, w_BT, -big)),
        "max/sampler_trainer_logp_diff_abs": jnp.max(jnp.where(on, jnp.abs(old_logp_BT - rollout_s), -big)),
    }
    if kl_BT is not None:
        m["kl_ref"] = mean(sg(kl_BT))
    if entropy_BT is not None:
        m["entropy"] = mean(sg(jnp.asarray(entropy_BT, f32)))
    return loss_sum, denom, m


def policy_loss(logp_BT, old_logp_BT, rollout_logp_BT, adv_B, mask_BT, *, eps_low: float = 0.2,
                eps_high: float = 0.28, tis_cap: Optional[float] = 2.0, agg: str = "token_mean",
                segment_ids_BT=None, ref_logp_BT=None, entropy_BT=None, **cfg_kw):
    """Normalised GRPO loss ``(loss, metrics)`` for one batch (the public convenience API).

    Extra keyword arguments are ``PolicyLossConfig`` fields (``dual_clip``, ``tis_mode``,
    ``kl_coef``, ...). ``metrics`` are finalised scalars (means divided, extrema as is).
    """
    cfg = PolicyLossConfig(eps_low=eps_low, eps_high=eps_high, tis_cap=tis_cap, agg=agg, **cfg_kw)
    s, d, m = policy_loss_terms(logp_BT, old_logp_BT, rollout_logp_BT, adv_B, mask_BT, cfg,
                                segment_ids_BT=segment_ids_BT, ref_logp_BT=ref_logp_BT,
                                entropy_BT=entropy_BT)
    return safe_div(s, d), finalize_metrics(m)


def sft_loss_terms(logp_BT, mask_BT, *, denom=None):
    """Token cross-entropy on response tokens only: ``(sum of -logp, number of tokens)``."""
    mask_BT = jnp.asarray(mask_BT, jnp.float32)
    s = -jnp.sum(mask_BT * jnp.asarray(logp_BT, jnp.float32))
    return s, (jnp.sum(mask_BT) if denom is None else denom)


def sft_loss(logp_BT, mask_BT):
    s, d = sft_loss_terms(logp_BT, mask_BT)
    return safe_div(s, d)


# ----------------------------------------------------------------------------------------------
# metric plumbing
# ----------------------------------------------------------------------------------------------
def safe_div(s, d):
    return s / jnp.maximum(d, 1e-12) if not isinstance(d, (int, float)) else s / max(d, 1e-12)


def combine_metrics(a: Mapping, b: Mapping) -> Metrics:
    """Accumulate two metric dicts (sum the (sum, count) pairs, max/min the extrema)."""
    out = {}
    for k in a:
        if k.startswith("max/"):
            out[k] = jnp.maximum(a[k], b[k])
        elif k.startswith("min/"):
            out[k] = jnp.minimum(a[k], b[k])
        else:
            out[k] = (a[k][0] + b[k][0], a[k][1] + b[k][1])
    return out


def finalize_metrics(m: Mapping) -> dict:
    """(sum, count) -> mean; extrema unchanged (an empty batch gives 0 for them)."""
    out = {}
    for k, v in m.items():
        if k.startswith(("max/", "min/")):
            out[k] = jnp.where(jnp.abs(v) > 1e38, 0.0, v)
        else:
            out[k] = safe_div(v[0], v[1])
    return out
