"""GRPO / SFT loss numerics as pure functions.

Every loss here is returned as a ``(sum, denominator)`` pair (``LossTerms``) so that gradient
accumulation over micro-batches and data-parallel shards divides exactly once, by the global
denominator. Metrics follow the same rule: a mean metric is a ``(sum, count)`` pair, and extrema
are kept under names starting with ``max/`` or ``min/`` (reduced with max/min).

Formulas (see docs/rl.md):

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
  (sum / (num_sequences * norm_constant), Dr.GRPO style), ``dataset_token_mean``
  (sum / norm_constant, a fixed number of tokens per batch: Harness-R1's cold-start SFT loss
  "averaged over all response tokens of the data set", see ``rl.sft.dataset_token_norm``).
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Optional

import jax
import jax.numpy as jnp

LOG_RATIO_CLIP = 20.0

Metrics = dict  # name -> (sum, count) for means; name "max/..." / "min/..." -> scalar


# ----------------------------------------------------------------------------------------------
# registries: every named mode is one entry here; config validation reads the names from them
# ----------------------------------------------------------------------------------------------
def register(table: dict, name: str):
    """Decorator adding ``fn`` to one of the tables below under ``name`` (then a valid config
    value, e.g. ``rl.tis_mode``)."""
    def deco(fn):
        if name in table:
            raise ValueError(f"{name!r} is registered twice")
        table[name] = fn
        return fn
    return deco


ADV_SCALES: dict = {}        # name -> fn(centred_NG, r_NG, eps, ddof) -> advantages
ADV_BASELINES: dict = {}     # name -> fn(r_NG) -> baseline_NG
AGGREGATIONS: dict = {}      # name -> fn(mask_BT, segment_ids_BT, norm_constant) -> (weight_BT, denom)
TIS_WEIGHTS: dict = {}       # name -> fn(d_BT = old - rollout logp, cap, low, high) -> w_BT
KL_ESTIMATORS: dict = {}     # name -> fn(d_BT = ref - policy logp) -> kl_BT


def _check(table: dict, what: str, name: str) -> None:
    if name not in table:
        raise ValueError(f"{what}={name!r}; use one of {tuple(table)}")


# ----------------------------------------------------------------------------------------------
# advantages
# ----------------------------------------------------------------------------------------------
@register(ADV_BASELINES, "mean")
def _baseline_mean(r_NG):
    return jnp.mean(r_NG, axis=1, keepdims=True)


@register(ADV_BASELINES, "loo")
def _baseline_leave_one_out(r_NG):
    G = r_NG.shape[1]
    if G < 2:
        raise ValueError("group_advantages: baseline='loo' needs group_size >= 2")
    return (jnp.sum(r_NG, axis=1, keepdims=True) - r_NG) / (G - 1)


@register(ADV_SCALES, "std")
def _scale_std(centred_NG, r_NG, eps, ddof):
    G = r_NG.shape[1]
    std_N1 = jnp.std(r_NG, axis=1, keepdims=True, ddof=ddof) if G > ddof else jnp.zeros_like(r_NG[:, :1])
    return centred_NG / jnp.maximum(std_N1, eps)


@register(ADV_SCALES, "none")
def _scale_none(centred_NG, r_NG, eps, ddof):
    return centred_NG


def zero_variance(rewards_NG):
    """``[N]`` bool: groups whose rewards are all equal (they carry no GRPO signal). The one
    definition used by advantages, dynamic sampling and the logged fraction; works on numpy and
    jax arrays alike."""
    return rewards_NG.max(axis=1) == rewards_NG.min(axis=1)


def group_advantages(rewards_NG, eps: float = 1e-6, *, scale: str = "std", baseline: str = "mean",
                     ddof: int = 0):
    """Group-relative advantages, ``[num_groups, group_size] -> same shape`` (float32).

    ``scale="std"``: ``(r - b) / max(std, eps)`` (Harness-S; Harness-R1's ``(r - mu)/sigma``
    with the same guard). ``scale="none"``: ``r - b`` (Dr.GRPO). ``baseline="mean"`` uses the
    group mean, ``"loo"`` the mean of the *other* members (RLOO). ``ddof`` selects the
    population (0) or sample (1) standard deviation. Groups whose rewards are all equal get
    exactly zero advantage (no float residue), see ``zero_variance``.
    """
    _check(ADV_SCALES, "group_advantages: scale", scale)
    _check(ADV_BASELINES, "group_advantages: baseline", baseline)
    r_NG = jnp.asarray(rewards_NG, jnp.float32)
    if r_NG.ndim != 2:
        raise ValueError(f"group_advantages: rewards_NG must be [num_groups, group_size], got shape "
                         f"{r_NG.shape}; reshape the flat rewards by group first")
    centred_NG = r_NG - ADV_BASELINES[baseline](r_NG)
    adv_NG = ADV_SCALES[scale](centred_NG, r_NG, eps, ddof)
    return jnp.where(zero_variance(r_NG)[:, None], 0.0, adv_NG)


def zero_variance_fraction(rewards_NG):
    """Fraction of groups whose rewards are all equal."""
    return jnp.mean(zero_variance(jnp.asarray(rewards_NG, jnp.float32)).astype(jnp.float32))


# ----------------------------------------------------------------------------------------------
# aggregation
# ----------------------------------------------------------------------------------------------
def _sequence_token_counts(mask_BT, segment_ids_BT):
    """(tokens of each position's sequence ``[B, T]``, number of sequences with a loss token)."""
    seg_BT = (jnp.ones(mask_BT.shape, jnp.int32) if segment_ids_BT is None
              else jnp.asarray(segment_ids_BT, jnp.int32))
    B, T = mask_BT.shape
    # Sequence index unique over the batch: row * (T + 1) + segment id (segment ids are <= T).
    flat_ids = (jnp.arange(B, dtype=jnp.int32)[:, None] * (T + 1) + seg_BT).reshape(-1)
    count_S = jax.ops.segment_sum(mask_BT.reshape(-1), flat_ids, num_segments=B * (T + 1))
    return count_S[flat_ids].reshape(B, T), jnp.sum((count_S > 0).astype(jnp.float32))


@register(AGGREGATIONS, "token_mean")
def _agg_token_mean(mask_BT, segment_ids_BT, norm_constant):
    return mask_BT, jnp.sum(mask_BT)


@register(AGGREGATIONS, "seq_mean_token_mean")
def _agg_seq_mean_token_mean(mask_BT, segment_ids_BT, norm_constant):
    count_BT, num_seqs = _sequence_token_counts(mask_BT, segment_ids_BT)
    return mask_BT / jnp.maximum(count_BT, 1.0), num_seqs


@register(AGGREGATIONS, "constant")
def _agg_constant(mask_BT, segment_ids_BT, norm_constant):
    _, num_seqs = _sequence_token_counts(mask_BT, segment_ids_BT)
    return mask_BT, num_seqs * norm_constant


@register(AGGREGATIONS, "dataset_token_mean")
def _agg_dataset_token_mean(mask_BT, segment_ids_BT, norm_constant):
    # sum over the batch's loss tokens / a fixed denominator: with norm_constant = the data
    # set's loss tokens per optimizer batch (rl.sft.dataset_token_norm), the mean of the step
    # losses over an epoch is the loss averaged over all loss tokens of the data set
    return mask_BT, jnp.asarray(norm_constant, jnp.float32)


def token_weights(mask_BT, segment_ids_BT=None, *, agg: str = "token_mean", norm_constant: float = 1.0):
    """Per-token aggregation weights and the denominator for one (micro-)batch.

    Returns ``(weight_BT, denom)`` such that ``loss = sum(weight_BT * l_BT) / denom``; the
    denominator of a sum of micro-batches is the sum of their denominators, except for
    ``dataset_token_mean``, whose denominator is a constant of the optimizer batch (the learner
    takes one denominator over the whole mini-batch in every mode). ``segment_ids_BT``
    (0 = padding, 1.. = packed sequences) identifies sequences inside a row; ``None`` means one
    sequence per row.
    """
    _check(AGGREGATIONS, "agg", agg)
    return AGGREGATIONS[agg](jnp.asarray(mask_BT, jnp.float32), segment_ids_BT, norm_constant)


# ----------------------------------------------------------------------------------------------
# per-token pieces
# ----------------------------------------------------------------------------------------------
def _exp_clipped(d_BT):
    return jnp.exp(jnp.clip(d_BT, -LOG_RATIO_CLIP, LOG_RATIO_CLIP))


@register(TIS_WEIGHTS, "cap")
def _tis_cap(d_BT, cap, low, high):
    w_BT = _exp_clipped(d_BT)
    return w_BT if cap is None else jnp.minimum(w_BT, cap)


@register(TIS_WEIGHTS, "mask")
def _tis_mask(d_BT, cap, low, high):
    r_BT = _exp_clipped(d_BT)
    return jnp.where((r_BT >= low) & (r_BT <= high), r_BT, 0.0)


@register(TIS_WEIGHTS, "literal")
def _tis_literal(d_BT, cap, low, high):
    # the paper's printed clip(l_tr - l_ro, 0, C)
    return jnp.clip(d_BT, 0.0, 2.0 if cap is None else cap)


@register(TIS_WEIGHTS, "none")
def _tis_none(d_BT, cap, low, high):
    return jnp.ones_like(d_BT)


def tis_weight(old_logp_BT, rollout_logp_BT, *, mode: str = "cap", cap: Optional[float] = 2.0,
               low: float = 0.0, high: float = 2.0):
    """Truncated importance weight between trainer (old) and rollout-engine log-probs.

    Always returned under ``stop_gradient``: it corrects the sampling distribution, it is not
    something to optimise. ``cap=None`` with ``mode="cap"`` means no truncation.
    """
    _check(TIS_WEIGHTS, "tis mode", mode)
    d_BT = jnp.asarray(old_logp_BT, jnp.float32) - jnp.asarray(rollout_logp_BT, jnp.float32)
    # stop-gradient: the weight is a fixed correction factor per token.
    return jax.lax.stop_gradient(TIS_WEIGHTS[mode](d_BT, cap, low, high))


@register(KL_ESTIMATORS, "k1")
def _kl_k1(d_BT):
    return -d_BT


@register(KL_ESTIMATORS, "k2")
def _kl_k2(d_BT):
    return 0.5 * d_BT * d_BT


@register(KL_ESTIMATORS, "k3")
def _kl_k3(d_BT):
    d_BT = jnp.clip(d_BT, -LOG_RATIO_CLIP, LOG_RATIO_CLIP)
    return jnp.exp(d_BT) - 1.0 - d_BT


def kl_penalty(logp_BT, ref_logp_BT, *, kind: str = "k3", clamp: Optional[float] = 10.0):
    """Per-token KL(pi || ref) estimator (Schulman k1/k2/k3), clamped to ``[-clamp, clamp]``."""
    _check(KL_ESTIMATORS, "kl kind", kind)
    d_BT = jnp.asarray(ref_logp_BT, jnp.float32) - jnp.asarray(logp_BT, jnp.float32)  # log(ref/pi)
    kl_BT = KL_ESTIMATORS[kind](d_BT)
    return kl_BT if clamp is None else jnp.clip(kl_BT, -clamp, clamp)


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
    agg: str = "token_mean"                # "token_mean" | "seq_mean_token_mean" | "constant" | "dataset_token_mean"
    norm_constant: float = 1.0             # "constant": tokens per sequence budget; "dataset_token_mean": tokens per batch
    kl_coef: float = 0.0
    kl_type: str = "k3"
    kl_clamp: Optional[float] = 10.0
    entropy_coef: float = 0.0
    neg_adv_weight: float = 1.0            # negative advantages are multiplied by this (1 = plain GRPO)

    def __post_init__(self):
        def bad(f, m):
            raise ValueError(f"PolicyLossConfig.{f}: {m}")
        if not 0 <= self.eps_low < 1:
            bad("eps_low", f"{self.eps_low} must be in [0, 1)")
        if self.eps_high < 0:
            bad("eps_high", f"{self.eps_high} must be >= 0")
        if self.dual_clip is not None and self.dual_clip <= 1:
            bad("dual_clip", f"{self.dual_clip} must be > 1 (or None to disable)")
        if self.tis_mode not in TIS_WEIGHTS:
            bad("tis_mode", f"{self.tis_mode!r}; use one of {tuple(TIS_WEIGHTS)}")
        if self.tis_cap is not None and self.tis_cap <= 0:
            bad("tis_cap", f"{self.tis_cap} must be > 0 (or None to disable)")
        if self.agg not in AGGREGATIONS:
            bad("agg", f"{self.agg!r}; use one of {tuple(AGGREGATIONS)}")
        if self.kl_type not in KL_ESTIMATORS:
            bad("kl_type", f"{self.kl_type!r}; use one of {tuple(KL_ESTIMATORS)}")
        if self.kl_clamp is not None and self.kl_clamp <= 0:
            bad("kl_clamp", f"{self.kl_clamp} must be > 0 (or None to disable)")
        if not 0 <= self.tis_low <= self.tis_high:
            bad("tis_low", f"[{self.tis_low}, {self.tis_high}] must satisfy 0 <= tis_low <= tis_high")
        if self.norm_constant <= 0:
            bad("norm_constant", f"{self.norm_constant} must be > 0")
        if not 0 <= self.neg_adv_weight <= 1:
            bad("neg_adv_weight", f"{self.neg_adv_weight} must be in [0, 1] (1 = plain GRPO)")


def policy_loss_terms(logp_BT, old_logp_BT, rollout_logp_BT, adv_B, mask_BT, cfg: PolicyLossConfig,
                      *, segment_ids_BT=None, ref_logp_BT=None, entropy_BT=None, denom=None):
    """Unnormalised GRPO loss: ``(loss_sum, denom, metrics)``.

    ``adv_B`` is one advantage per row (unpacked) or ``[B, T]`` per token (packed rows carry the
    advantage of each token's sequence). ``denom`` overrides the local denominator (the learner
    passes the global one so micro-batch gradients add up to the full-batch gradient).
    """
    f32 = jnp.float32
    logp_BT = jnp.asarray(logp_BT, f32)
    # NaN old log-probs stand for the policy's own (an on-policy step: the learner then needs no
    # separate forward to recompute them; the ratio is exactly 1); NaN rollout log-probs for
    # "no sampler drew this token" (TIS weight 1)
    old_in_BT = jnp.asarray(old_logp_BT, f32)
    old_logp_BT = jax.lax.stop_gradient(jnp.where(jnp.isnan(old_in_BT), logp_BT, old_in_BT))
    if rollout_logp_BT is not None:
        rollout_logp_BT = jnp.asarray(rollout_logp_BT, f32)
        rollout_logp_BT = jnp.where(jnp.isnan(rollout_logp_BT), old_logp_BT, rollout_logp_BT)
    mask_BT = jnp.asarray(mask_BT, f32)
    adv = jnp.asarray(adv_B, f32)
    adv_BT = adv[:, None] if adv.ndim == 1 else adv
    adv_BT = jnp.broadcast_to(adv_BT, mask_BT.shape)
    if cfg.neg_adv_weight != 1.0:           # damp the failure side of the gradient
        adv_BT = jnp.where(adv_BT < 0, cfg.neg_adv_weight * adv_BT, adv_BT)

    log_ratio_BT = logp_BT - old_logp_BT
    ratio_BT = _exp_clipped(log_ratio_BT)
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
        "sampler_trainer_kl": mean(_exp_clipped(old_logp_BT - rollout_s)
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
    """Token cross-entropy on response tokens only: ``(sum of -logp, number of tokens)``.

    ``mask_BT`` may be aggregation weights (``token_weights``) instead of a 0/1 mask; then
    ``denom`` is the aggregation's denominator."""
    mask_BT = jnp.asarray(mask_BT, jnp.float32)
    s = -jnp.sum(mask_BT * jnp.asarray(logp_BT, jnp.float32))
    return s, (jnp.sum(mask_BT) if denom is None else denom)


def sft_loss(logp_BT, mask_BT):
    s, d = sft_loss_terms(logp_BT, mask_BT)
    return safe_div(s, d)


# ----------------------------------------------------------------------------------------------
# MoE router load balancing
# ----------------------------------------------------------------------------------------------
def load_balancing_loss(counts_X, probs_X, rows):
    """Qwen3.5-MoE's auxiliary loss (Switch Transformer; transformers' ``load_balancing_loss_func``):
    ``X * sum_x (assignments_x / rows) * (router probability mass_x / rows)``, where the sums run
    over the valid tokens of every MoE layer and ``rows`` counts (token, layer) pairs. Equals
    ``top_k`` when every expert gets the same share of assignments and probability."""
    rows = jnp.maximum(jnp.asarray(rows, jnp.float32), 1.0)
    X = counts_X.shape[-1]
    return X * jnp.sum((counts_X / rows) * (probs_X / rows))


def router_terms(counts_X, probs_X, rows, dropped):
    """``(load-balancing loss, metrics)`` of one micro-batch's router statistics (``moe.MoeStats``
    fields): the loss as a (sum, count) mean over micro-batches, the fraction of routed rows the
    expert capacity dropped, and the most loaded expert's share over the mean share."""
    lb = load_balancing_loss(counts_X, probs_X, rows)
    routed = jnp.sum(counts_X)
    sg = jax.lax.stop_gradient
    m: Metrics = {
        "moe/load_balancing_loss": (sg(lb), jnp.ones((), jnp.float32)),
        "moe/dropped_frac": (sg(dropped), routed),
        "max/moe/expert_load": sg(jnp.max(counts_X) / jnp.maximum(jnp.mean(counts_X), 1e-12)),
    }
    return lb, m


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
