"""Engineer-training numerics against independent references (METHODS' formulas in numpy):

* the cold-start SFT loss averaged over all response tokens of the data set
  (``"dataset_token_mean"``) vs the per-batch token mean;
* the advantage path: a packet's K evaluations -> loop ``Group`` -> ``compute_advantages``
  (the project's one advantage path) equals ``group_advantages_K`` and ``(r - mu) / sigma``
  over the scored samples; unscored (infrastructure) samples are not trained on;
* the loss path: packed engineer segments through ``losses.policy_loss`` and through the
  ``Learner`` equal ``-(1/K) sum_k (1/T_k) sum_t w_kt min(rho A_k, clip(rho) A_k)`` with
  ``w = min(exp(l_tr - l_ro), 2)`` (and the paper's printed ``clip(l_tr - l_ro, 0, 2)``).

The learner runs the small stand-in LM of tests/rl (``toy_model.ToyLM``, a test double) where
compiling the real Qwen3.5 would only add time; the pipeline tests train the real model."""
import jax
import numpy as np
import pytest
from flax import nnx

from harness_jax import sharding as shd
from harness_jax.harness_r1.packets import Packet
from harness_jax.harness_r1.reward import GroupEvaluation, PatchEvaluation, group_advantages_K
from harness_jax.harness_r1.training import packet_group, step_metrics
from harness_jax.rl import batch as rlbatch
from harness_jax.rl import learner as L
from harness_jax.rl import losses, sft
from harness_jax.sampling.types import GenerateResult
from harness_jax.train.groups import compute_advantages
from tests.rl.toy_model import ToyLM

PACKET = Packet(text="packet", env_name="dbbench", est_tokens=2, included=[], num_failures=1,
                features={}, task_ids=["t1"], baseline_key="b")


def _learner(mode="grpo", lr=0.0, **loss_kw):
    cfg = L.LearnerConfig(mode=mode, loss=losses.PolicyLossConfig(**loss_kw), logit_chunk=0,
                          opt=L.OptimizerConfig(learning_rate=lr, weight_decay=0.0), shuffle=False)
    return L.Learner(ToyLM(rngs=nnx.Rngs(0)), cfg,
                     mesh=shd.make_mesh((1, 1, 1, 1), devices=jax.devices()[:1]))


def test_sft_loss_is_the_mean_over_all_response_tokens_of_the_data_set():
    rng = np.random.default_rng(0)
    lengths = [2, 3, 30, 28, 4, 2, 25, 3]            # batches of very different token counts
    segs = [sft.sft_segment(rng.integers(3, 60, 4), rng.integers(3, 60, n)) for n in lengths]
    per_batch = 3
    total = sum(lengths)
    norm = sft.dataset_token_norm(segs, per_batch)
    assert norm == pytest.approx(total / 3)          # 8 examples -> 3 batches per epoch

    def epoch(agg, norm_constant):
        lr = _learner("sft", agg=agg, norm_constant=norm_constant)   # lr 0: parameters fixed
        cfg = sft.SFTConfig(epochs=1, examples_per_batch=per_batch, seed=1,
                            pack=rlbatch.PackConfig(buckets=(64,), min_rows=3))   # one shape: one compile
        losses_, nll, tokens = [], [], []
        for b in sft.SFTBatches(segs, cfg, row_multiple=lr.row_multiple):
            logp = lr.compute_logp(b)
            nll.append(float(-(b.loss_mask * logp).sum()))
            tokens.append(float(b.loss_mask.sum()))
            losses_.append(lr.update(b)[0]["loss"])
        return np.asarray(losses_), np.asarray(nll), np.asarray(tokens)

    l_ds, nll, tok = epoch("dataset_token_mean", norm)
    assert tok.sum() == total and len(set(tok)) > 1
    # METHODS: the loss averaged over ALL response tokens of the data set
    assert l_ds.mean() == pytest.approx(nll.sum() / total, rel=1e-5)
    np.testing.assert_allclose(l_ds, nll / norm, rtol=1e-5)
    # the per-batch token mean weighs the tokens of short batches more: not the same number
    l_tm, nll2, tok2 = epoch("token_mean", 1.0)
    np.testing.assert_allclose(l_tm, nll2 / tok2, rtol=1e-5)
    assert abs(l_tm.mean() - nll.sum() / total) > 1e-3
    with pytest.raises(ValueError, match="no loss token"):
        sft.dataset_token_norm([_no_loss()], 1)


def _no_loss():
    s = sft.sft_segment([1, 2], [3])
    s.loss_mask = [0, 0, 0]
    return s


def _evaluation(reward, *, valid=True, infra=False):
    return PatchEvaluation(reward=reward, valid=valid, complete=not infra, errors=[],
                           infra_error=infra, episodes=3, delta=reward if valid else 0.0)


def _group(rewards, infra=(), lengths=None, seed=0):
    """A packet's K evaluations and the engine's results for them."""
    rng = np.random.default_rng(seed)
    evs = [_evaluation(r, valid=r != 0.0 or k % 2 == 0, infra=k in infra) for k, r in enumerate(rewards)]
    r_K = np.asarray([e.reward for e in evs], np.float32)
    s_K = np.asarray([e.scored for e in evs])
    adv, zv = group_advantages_K(r_K, s_K)
    ge = GroupEvaluation(evs, r_K, s_K, adv, unique_patches=len(evs), evaluated=len(evs),
                         zero_variance=zv)
    lengths = lengths or [int(rng.integers(3, 12)) for _ in rewards]
    results = [GenerateResult(request_id=str(k), token_ids=[int(t) for t in rng.integers(3, 60, n)],
                              logprobs=[float(x) for x in -rng.exponential(1.0, n)], finish_reason="stop",
                              weight_version=5) for k, n in enumerate(lengths)]
    return ge, results


def test_packet_groups_take_the_loops_advantage_path():
    rewards = [0.5, 0.0, 0.25, 0.125, 0.0, 0.5, 0.0, 0.375]
    ge, results = _group(rewards, infra=(3,))
    prompt = [7, 8, 9, 10]
    g = packet_group("s0-p0", PACKET, prompt, results, ge)
    assert len(g.episodes) == 7 and g.info["infra_errors"] == 1          # the infra sample is not trained on
    stats = compute_advantages([g], eps=1e-6)
    assert stats["zero_variance_groups"] == 0
    scored = np.asarray([k for k in range(8) if k != 3])
    r = np.asarray(rewards, np.float64)[scored]
    ref = (r - r.mean()) / max(r.std(), 1e-6)                        # METHODS: (r_k - mu_B) / sigma_B
    got = np.asarray([e.segments[0].advantage for e in g.episodes])
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, ge.advantages_K[scored], rtol=1e-6)
    for e, k in zip(g.episodes, scored):
        seg = e.segments[0]
        assert seg.token_ids == prompt + results[k].token_ids
        assert seg.loss_mask == [0] * 4 + [1] * len(results[k].token_ids)
        assert seg.rollout_logprobs[4:] == results[k].logprobs and seg.policy_version == 5
        assert e.task.task_id == PACKET.packet_id and e.reward == rewards[k]
    # all scored rewards equal: a zero-variance packet, every advantage exactly 0
    ge0, res0 = _group([0.0] * 6 + [0.25], infra=(6,))
    g0 = packet_group("s0-p1", PACKET, prompt, res0, ge0)
    assert compute_advantages([g0], eps=1e-6)["zero_variance_groups"] == 1
    assert all(s.advantage == 0.0 for e in g0.episodes for s in e.segments) and ge0.zero_variance
    m = step_metrics([ge.metrics(), ge0.metrics()])
    assert m["r1/zero_variance_packets"] == 1 and m["r1/packets"] == 2
    assert m["r1/reward_mean"] == pytest.approx((sum(rewards) + 0.25) / 15)
    # Delta_B of what each sample deploys: an incomplete evaluation deploys nothing
    assert m["r1/delta_b_mean"] == pytest.approx((sum(rewards) - rewards[3]) / 15)
    # the no-patch arm in the baseline: a virtual reward-0 sample joins the mean and std
    gn = packet_group("s0-p0", PACKET, prompt, results, ge, noop_arm=True)
    compute_advantages([gn], eps=1e-6)
    rn = np.concatenate([[0.0], r])
    ref_n = ((r - rn.mean()) / rn.std())
    got_n = np.asarray([e.segments[0].advantage for e in gn.episodes])
    np.testing.assert_allclose(got_n, ref_n, rtol=1e-5, atol=1e-6)
    adv_n, _ = group_advantages_K(ge.rewards_K, ge.scored_K, noop_arm=True)
    np.testing.assert_allclose(got_n, adv_n[scored], rtol=1e-5, atol=1e-6)
    assert not np.allclose(got_n, got)                       # it moves every advantage down
    # every sample hurt: the group baseline's advantages sum to 0 (the least harmful patch is
    # pushed up as much as with helpful ones); with the no-patch arm they sum below 0
    hurt = np.asarray([-0.5, -0.25, -0.125, -0.375], np.float32)
    a_group, _ = group_advantages_K(hurt)
    a_noop, _ = group_advantages_K(hurt, noop_arm=True)
    assert a_group.sum() == pytest.approx(0.0, abs=1e-5) and a_noop.sum() < -1.0
    assert a_noop.max() < a_group.max()


def _reference_loss(logp, old, ro, adv, mask, seg, tis_mode, eps_low=0.2, eps_high=0.28, cap=2.0):
    """-(1/K) sum_k (1/T_k) sum_t w_kt * min(rho A, clip(rho) A), numpy, per packed sequence."""
    rho = np.exp(logp - old)
    g = np.minimum(rho * adv, np.clip(rho, 1 - eps_low, 1 + eps_high) * adv)
    d = old - ro
    w = np.minimum(np.exp(d), cap) if tis_mode == "cap" else np.clip(d, 0.0, cap)
    per_seq = []
    for r in range(mask.shape[0]):
        for s in np.unique(seg[r][seg[r] > 0]):
            on = (seg[r] == s) & (mask[r] > 0)
            if on.any():
                per_seq.append((w[r][on] * g[r][on]).sum() / on.sum())
    return -np.mean(per_seq)


@pytest.mark.parametrize("tis_mode", ["cap", "literal"])
def test_engineer_loss_is_the_methods_objective(tis_mode):
    groups = []
    for i, rewards in enumerate(([0.5, 0.0, 0.25, 0.0], [0.125, 0.375, 0.0, 0.0])):
        ge, res = _group(rewards, lengths=[3, 9, 5, 12], seed=i)
        groups.append(packet_group(f"g{i}", PACKET, [4, 5, 6], res, ge))
    compute_advantages(groups, eps=1e-6)
    segs = [s for g in groups for e in g.episodes for s in e.segments]
    lr = _learner(agg="seq_mean_token_mean", eps_low=0.2, eps_high=0.28, tis_mode=tis_mode, tis_cap=2.0)
    tb = rlbatch.pack_segments(segs, rlbatch.PackConfig(buckets=(64,), row_multiple=lr.row_multiple))
    assert tb.stats.num_segments_packed == 8 and tb.shape[0] < 8        # several sequences per row
    a = tb.arrays()
    # 1) the pure loss, with ratios away from 1 (the clip is active) and capped TIS weights
    rng = np.random.default_rng(3)
    old = np.where(a["loss_mask"] > 0, -rng.exponential(1.0, a["loss_mask"].shape), 0.0).astype(np.float32)
    logp = (old + rng.normal(0, 0.4, old.shape) * a["loss_mask"]).astype(np.float32)
    loss, m = losses.policy_loss(logp, old, a["rollout_logp"], a["advantages"], a["loss_mask"], eps_low=0.2,
                                 eps_high=0.28, tis_cap=2.0, agg="seq_mean_token_mean",
                                 segment_ids_BT=a["segment_ids"], tis_mode=tis_mode)
    ref = _reference_loss(logp, old, a["rollout_logp"], a["advantages"], a["loss_mask"], a["segment_ids"], tis_mode)
    assert float(loss) == pytest.approx(ref, rel=1e-5)
    assert m["pg_clipfrac_low"] + m["pg_clipfrac_high"] > 0
    if tis_mode == "cap":
        assert 0 < m["tis_clipfrac"] < 1                              # some weights hit the cap of 2
    # 2) the learner's update: old_logp = the trainer's recomputation (rho = 1 at the first step)
    l_tr = lr.compute_logp(tb)
    got = lr.update(tb)[0]["loss"]
    ref2 = _reference_loss(l_tr, l_tr, a["rollout_logp"], a["advantages"], a["loss_mask"], a["segment_ids"],
                           tis_mode)
    assert got == pytest.approx(ref2, rel=1e-5)
