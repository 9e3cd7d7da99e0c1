"""Every numeric mode of harness_jax.rl.losses against a straightforward numpy reference."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from harness_jax.rl import losses


# ------------------------------------------------------------------------------- references
def np_advantages(r, eps, scale, baseline, ddof):
    out = np.zeros_like(r, dtype=np.float64)
    for n, row in enumerate(r.astype(np.float64)):
        G = len(row)
        if np.all(row == row[0]):
            continue
        for j in range(G):
            b = row.mean() if baseline == "mean" else (row.sum() - row[j]) / (G - 1)
            a = row[j] - b
            if scale == "std":
                a /= max(row.std(ddof=ddof), eps)
            out[n, j] = a
    return out


def np_policy_loss(logp, old, ro, adv, mask, seg, *, eps_low, eps_high, dual_clip, tis_mode, tis_cap,
                   agg, norm_constant=1.0, kl_coef=0.0, kl_type="k3", ref=None, kl_clamp=10.0,
                   ent_coef=0.0, ent=None, tis_low=0.0, tis_high=2.0):
    B, T = logp.shape
    seqs = {}
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            A = adv[b] if adv.ndim == 1 else adv[b, t]
            r = np.exp(np.clip(logp[b, t] - old[b, t], -20, 20))
            obj = min(r * A, np.clip(r, 1 - eps_low, 1 + eps_high) * A)
            l = -obj
            if dual_clip is not None and A < 0:
                l = min(l, -dual_clip * A)
            d = old[b, t] - ro[b, t]
            if tis_mode == "cap":
                w = min(np.exp(d), tis_cap) if tis_cap is not None else 1.0  # None disables TIS
            elif tis_mode == "mask":
                w = np.exp(d) if tis_low <= np.exp(d) <= tis_high else 0.0
            elif tis_mode == "literal":
                w = min(max(d, 0.0), tis_cap)
            else:
                w = 1.0
            l *= w
            if kl_coef:
                x = ref[b, t] - logp[b, t]
                k = {"k1": -x, "k2": 0.5 * x * x, "k3": np.exp(x) - 1 - x}[kl_type]
                l += kl_coef * np.clip(k, -kl_clamp, kl_clamp)
            if ent_coef:
                l -= ent_coef * ent[b, t]
            seqs.setdefault((b, seg[b, t]), []).append(l)
    if agg == "token_mean":
        toks = [x for v in seqs.values() for x in v]
        return sum(toks) / max(len(toks), 1e-12)
    if agg == "seq_mean_token_mean":
        return sum(np.mean(v) for v in seqs.values()) / max(len(seqs), 1e-12)
    return sum(sum(v) for v in seqs.values()) / (len(seqs) * norm_constant)


# ------------------------------------------------------------------------------- inputs
def random_inputs(seed, B=5, T=12, extreme=False):
    rng = np.random.default_rng(seed)
    logp = -rng.exponential(1.0, (B, T)).astype(np.float32)
    old = (logp + rng.normal(0, 2.5 if extreme else 0.3, (B, T))).astype(np.float32)
    ro = (old + rng.normal(0, 2.0 if extreme else 0.3, (B, T))).astype(np.float32)
    if extreme:
        old[0, :3] = logp[0, :3] - 30.0    # huge ratios (log-ratio clipped at 20)
        ro[1, :3] = old[1, :3] + 25.0       # tiny importance weights
    adv = rng.normal(0, 1, (B,)).astype(np.float32)
    adv[2] = 0.0
    mask = (rng.random((B, T)) < 0.7).astype(np.float32)
    mask[3] = 0.0                           # a fully masked row
    seg = np.ones((B, T), np.int32)
    seg[:, T // 2:] = 2                     # two packed sequences per row
    seg[4, -2:] = 0
    mask[4, -2:] = 0.0
    ref = (logp + rng.normal(0, 0.5, (B, T))).astype(np.float32)
    ent = rng.random((B, T)).astype(np.float32)
    return logp, old, ro, adv, mask, seg, ref, ent


# ------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("scale,baseline,ddof", list(itertools.product(["std", "none"], ["mean", "loo"], [0, 1])))
def test_group_advantages_match_numpy(scale, baseline, ddof):
    rng = np.random.default_rng(0)
    r = rng.integers(0, 3, (7, 8)).astype(np.float32) * 0.5
    r[0] = 1.0                              # all-equal group
    r[1] = 0.1                              # all-equal with a non-representable value
    r[2, 0] = 5.0
    got = np.asarray(losses.group_advantages(r, eps=1e-6, scale=scale, baseline=baseline, ddof=ddof))
    want = np_advantages(r, 1e-6, scale, baseline, ddof)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.all(got[:2] == 0.0)
    assert float(losses.zero_variance_fraction(r)) == pytest.approx(2 / 7)


def test_group_advantages_tiny_std_uses_eps_and_rejects_bad_input():
    r = np.array([[0.0, 1e-8]], np.float32)
    got = np.asarray(losses.group_advantages(r, eps=1e-3))
    np.testing.assert_allclose(got, [[-0.5e-8 / 1e-3, 0.5e-8 / 1e-3]], rtol=1e-3)
    with pytest.raises(ValueError, match="rewards_NG"):
        losses.group_advantages(np.zeros(4))
    with pytest.raises(ValueError, match="scale"):
        losses.group_advantages(np.zeros((2, 2)), scale="bogus")


MODES = [
    dict(tis_mode="cap", tis_cap=2.0, agg="token_mean", dual_clip=None),
    dict(tis_mode="cap", tis_cap=None, agg="token_mean", dual_clip=None),
    dict(tis_mode="cap", tis_cap=2.0, agg="seq_mean_token_mean", dual_clip=None),
    dict(tis_mode="cap", tis_cap=2.0, agg="constant", dual_clip=None, norm_constant=16.0),
    dict(tis_mode="mask", tis_cap=2.0, agg="token_mean", dual_clip=None, tis_low=0.5, tis_high=1.5),
    dict(tis_mode="literal", tis_cap=2.0, agg="seq_mean_token_mean", dual_clip=None),
    dict(tis_mode="none", tis_cap=2.0, agg="token_mean", dual_clip=3.0),
    dict(tis_mode="cap", tis_cap=2.0, agg="token_mean", dual_clip=None, kl_coef=0.1, kl_type="k1"),
    dict(tis_mode="cap", tis_cap=2.0, agg="token_mean", dual_clip=None, kl_coef=0.1, kl_type="k2"),
    dict(tis_mode="cap", tis_cap=2.0, agg="token_mean", dual_clip=None, kl_coef=0.1, kl_type="k3",
         kl_clamp=1.0),
    dict(tis_mode="cap", tis_cap=2.0, agg="seq_mean_token_mean", dual_clip=None, ent_coef=0.01),
]


@pytest.mark.parametrize("extreme", [False, True])
@pytest.mark.parametrize("mode", MODES, ids=lambda m: "-".join(f"{k}={v}" for k, v in m.items()))
def test_policy_loss_matches_numpy(mode, extreme):
    logp, old, ro, adv, mask, seg, ref, ent = random_inputs(1 + extreme, extreme=extreme)
    kw = dict(mode)
    ent_coef = kw.pop("ent_coef", 0.0)
    want = np_policy_loss(logp, old, ro, adv, mask, seg, eps_low=0.2, eps_high=0.28, ref=ref,
                          ent=ent, ent_coef=ent_coef, **kw)
    cfg_kw = {k: v for k, v in kw.items() if k not in ("tis_cap", "agg")}
    got, metrics = losses.policy_loss(logp, old, ro, adv, mask, eps_low=0.2, eps_high=0.28,
                                      tis_cap=kw["tis_cap"], agg=kw["agg"], segment_ids_BT=seg,
                                      ref_logp_BT=ref, entropy_BT=ent, entropy_coef=ent_coef, **cfg_kw)
    np.testing.assert_allclose(float(got), want, rtol=2e-5, atol=1e-6)
    assert all(np.isfinite(float(v)) for v in metrics.values())


def test_policy_loss_per_token_advantage_equals_per_row():
    logp, old, ro, adv, mask, seg, *_ = random_inputs(3)
    a, _ = losses.policy_loss(logp, old, ro, adv, mask)
    b, _ = losses.policy_loss(logp, old, ro, np.broadcast_to(adv[:, None], mask.shape), mask)
    np.testing.assert_allclose(float(a), float(b), rtol=1e-6)


def test_policy_loss_metrics_match_numpy():
    logp, old, ro, adv, mask, seg, *_ = random_inputs(4, extreme=True)
    _, m = losses.policy_loss(logp, old, ro, adv, mask, eps_low=0.2, eps_high=0.28, tis_cap=2.0)
    on = mask > 0
    r = np.exp(np.clip(logp - old, -20, 20))
    A = np.broadcast_to(adv[:, None], mask.shape)
    np.testing.assert_allclose(m["pg_clipfrac_low"], np.mean(((r < 0.8) & (A < 0))[on]), atol=1e-6)
    np.testing.assert_allclose(m["pg_clipfrac_high"], np.mean(((r > 1.28) & (A > 0))[on]), atol=1e-6)
    np.testing.assert_allclose(m["max/ratio"], r[on].max(), rtol=1e-5)
    np.testing.assert_allclose(m["min/ratio"], r[on].min(), rtol=1e-5)
    w = np.minimum(np.exp(old - ro), 2.0)
    np.testing.assert_allclose(m["tis_weight_mean"], w[on].mean(), rtol=1e-5)
    np.testing.assert_allclose(m["tis_clipfrac"], np.mean((np.exp(old - ro) > 2.0)[on]), atol=1e-6)
    np.testing.assert_allclose(m["sampler_trainer_logp_diff_abs"], np.abs(old - ro)[on].mean(), rtol=1e-5)


def test_accumulated_terms_equal_full_batch():
    """Summing (sum, denom) over row splits reproduces the full-batch loss for every agg mode."""
    logp, old, ro, adv, mask, seg, *_ = random_inputs(5, B=6)
    for agg in losses.AGGREGATIONS:
        cfg = losses.PolicyLossConfig(agg=agg, norm_constant=8.0)
        s, d, _ = losses.policy_loss_terms(logp, old, ro, adv, mask, cfg, segment_ids_BT=seg)
        parts = [losses.policy_loss_terms(logp[i:i + 2], old[i:i + 2], ro[i:i + 2], adv[i:i + 2],
                                          mask[i:i + 2], cfg, segment_ids_BT=seg[i:i + 2])
                 for i in range(0, 6, 2)]
        s2 = sum(p[0] for p in parts)
        d2 = sum(p[1] for p in parts)
        if agg == "dataset_token_mean":
            # a per-optimizer-batch constant (the learner takes one denominator per mini-batch):
            # every split has the same denominator, and the sums add
            assert all(float(p[1]) == float(d) == 8.0 for p in parts)
            d2 = d
        np.testing.assert_allclose(float(s / d), float(s2 / d2), rtol=1e-6)


def test_gradient_stops_through_tis_weight_and_old_logp():
    logp, old, ro, adv, mask, seg, *_ = random_inputs(6)

    def f(old_):
        return losses.policy_loss(logp, old_, ro, adv, mask)[0]

    g = jax.grad(f)(jnp.asarray(old))
    assert float(jnp.abs(g).max()) == 0.0
    # gradient w.r.t. logp matches the numpy finite difference of the reference
    cfg = dict(eps_low=0.2, eps_high=0.28, dual_clip=None, tis_mode="cap", tis_cap=2.0, agg="token_mean")
    gl = np.asarray(jax.grad(lambda l: losses.policy_loss(l, old, ro, adv, mask)[0])(jnp.asarray(logp)))
    b, t = np.argwhere(mask > 0)[0]
    h = 1e-3
    lp, lm = logp.astype(np.float64).copy(), logp.astype(np.float64).copy()
    lp[b, t] += h
    lm[b, t] -= h
    fd = (np_policy_loss(lp, old, ro, adv, mask, seg, **cfg) - np_policy_loss(lm, old, ro, adv, mask, seg, **cfg)) / (2 * h)
    np.testing.assert_allclose(gl[b, t], fd, rtol=1e-2, atol=1e-5)


def test_sft_loss_matches_numpy():
    logp, _, _, _, mask, *_ = random_inputs(7)
    np.testing.assert_allclose(float(losses.sft_loss(logp, mask)), -(logp * mask).sum() / mask.sum(), rtol=1e-6)


def test_bad_config_names_the_field():
    with pytest.raises(ValueError, match="eps_low"):
        losses.PolicyLossConfig(eps_low=1.5)
    with pytest.raises(ValueError, match="agg"):
        losses.policy_loss(np.zeros((1, 2)), np.zeros((1, 2)), None, np.zeros(1), np.ones((1, 2)), agg="x")


def test_zero_variance_is_one_definition_for_numpy_and_jax():
    r = np.array([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.1, 0.1, 0.1]], np.float32)
    np.testing.assert_array_equal(losses.zero_variance(r), [True, False, True])
    np.testing.assert_array_equal(np.asarray(losses.zero_variance(jnp.asarray(r))), [True, False, True])
    adv = np.asarray(losses.group_advantages(r))
    assert np.all(adv[[0, 2]] == 0.0) and np.any(adv[1] != 0.0)
