"""Learner plumbing on the small stand-in LM (tests/rl/toy_model.py, a test double used because
compiling the real Qwen3.5 model for every mesh would exceed the test budget): several meshes on
8 CPU devices equal one device, 1/2/4 micro-batches give the same update, mini-batches/epochs,
schedules, metrics against independent computations, the KL reference, the abstract learner,
SFT (checkpointed and resumable) and the JSONL/TensorBoard writer."""
import glob
import os

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from harness_jax import sharding as shd
from harness_jax.rl import batch as rlbatch
from harness_jax.rl import checkpoint as ck
from harness_jax.rl import learner as L
from harness_jax.rl import losses
from harness_jax.rl import metrics as rlmetrics
from harness_jax.rl import sft
from helpers import random_segments
from toy_model import ToyLM

PACK = rlbatch.PackConfig(buckets=(16, 32), row_multiple=16, min_rows=16)


@pytest.fixture(scope="module")
def batch():
    return rlbatch.pack_segments(random_segments(0, n=24), PACK)


def make(shape=(1, 1, 1, 1), flops_per_token=None, **kw):
    # Adam eps 1e-5: entries whose gradient cancels to ~1e-8 would otherwise turn all-reduce
    # order noise (~1e-11) into lr-sized update differences between meshes.
    base = dict(opt=L.OptimizerConfig(learning_rate=1e-2, clip_norm=1.0, eps=1e-5), shuffle=False, logit_chunk=8,
                loss=losses.PolicyLossConfig(agg="seq_mean_token_mean"))
    base.update(kw)
    mesh = shd.make_mesh(shape, devices=jax.devices()[:int(np.prod(shape))])
    model = ToyLM(rngs=nnx.Rngs(0))
    return model, L.Learner(model, L.LearnerConfig(**base), mesh=mesh, flops_per_token=flops_per_token)


def run(batch, shape=(1, 1, 1, 1), updates=2, **kw):
    _, lr = make(shape, **kw)
    return lr, [m for _ in range(updates) for m in lr.update(batch)]


@pytest.fixture(scope="module")
def single(batch):
    return run(batch)


# embed: logical ("vocab", "embed") -> rules vocab->tensor, embed->fsdp; batch rows over data x fsdp
EMBED_SPEC = {(8, 1, 1, 1): P(None, None), (2, 2, 2, 1): P("tensor", "fsdp"), (1, 2, 4, 1): P("tensor", "fsdp")}
BATCH_AXES = {(8, 1, 1, 1): ("data",), (2, 2, 2, 1): ("data", "fsdp"), (1, 2, 4, 1): ("fsdp",)}


@pytest.mark.slow
@pytest.mark.parametrize("shape,micro", [((8, 1, 1, 1), 1), ((2, 2, 2, 1), 2), ((1, 2, 4, 1), 4)])
def test_sharded_equals_single_device(batch, single, shape, micro):
    """FSDP/TP/DP meshes == one device within 1e-5, with 1, 2 and 4 micro-batches of gradient
    accumulation against the single-device, single-micro-batch reference (same update)."""
    ref, ref_m = single
    lr, ms = run(batch, shape, num_micro_batches=micro)
    for a, b in zip(ref_m, ms):
        np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(a["grad_norm"], b["grad_norm"], rtol=1e-5)
    for x, y in zip(jax.tree.leaves(ref.params_numpy()), jax.tree.leaves(lr.params_numpy())):
        np.testing.assert_allclose(x, y, atol=1e-5, rtol=1e-5)
    # the layout is the one the rules give for this mesh, and each device holds only its shard
    emb = lr.state["params"]["embed"]
    assert emb.sharding.spec == EMBED_SPEC[shape]
    n_split = np.prod([lr.mesh.shape[a] for a in ("tensor", "fsdp")])
    assert emb.addressable_shards[0].data.shape[0] * emb.addressable_shards[0].data.shape[1] == emb.size // n_split
    assert lr.batch_axes == BATCH_AXES[shape]


def test_minibatches_epochs_and_schedule(batch):
    opt = L.OptimizerConfig(learning_rate=1e-2, schedule="cosine", warmup_steps=2, total_steps=10)
    lr, ms = run(batch, updates=1, num_mini_batches=2, num_epochs=2, shuffle=True, opt=opt)
    assert len(ms) == 4 and lr.step == 4 and lr.policy_version == 1
    lrs = [m["learning_rate"] for m in ms]
    np.testing.assert_allclose(lrs[:3], [0.0, 5e-3, 1e-2], rtol=1e-6)
    assert lrs[3] < 1e-2
    # first step of the first epoch is exactly on-policy: ratios are 1, nothing clipped
    assert ms[0]["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert ms[0]["pg_clipfrac_low"] == 0.0 and ms[0]["pg_clipfrac_high"] == 0.0


def test_no_optimizer_step_on_a_batch_without_signal(batch):
    """Every advantage 0 (all groups zero-variance): the parameters and the optimizer state stay
    bit-identical, though AdamW's momentum from an earlier step would otherwise move them."""
    import dataclasses

    _, lr = make()
    lr.update(batch)                                      # momentum is non-zero now
    before = jax.tree.map(np.asarray, (lr.state["params"], lr.state["opt_state"], lr.state["step"]))
    silent = dataclasses.replace(batch, advantages=np.zeros_like(batch.advantages))
    assert lr.update(silent) == [] and lr.policy_version == 2
    after = jax.tree.map(np.asarray, (lr.state["params"], lr.state["opt_state"], lr.state["step"]))
    for x, y in zip(jax.tree.leaves(before), jax.tree.leaves(after)):
        np.testing.assert_array_equal(x, y)
    assert L.summarize_update([]) == {"optimizer_steps": 0.0, "skipped_no_signal": 1.0}
    # the same batch with skip_no_signal off: a zero gradient, yet the weights move (momentum)
    lr.cfg = dataclasses.replace(lr.cfg, skip_no_signal=False)     # read per update, not compiled in
    m = lr.update(silent)
    assert m[0]["grad_norm"] == 0.0 and not np.array_equal(before[0]["head"], lr.params_numpy()["head"])


def test_update_metrics_pool_every_mini_batch(batch):
    """2 epochs x 2 mini-batches: the summary's ratio and clip metrics are the loss-token-weighted
    means over all 4 steps (not the last step's), extrema over all steps; the clip acts after the
    first step (ratio moves off 1); KL to the reference is that of the sampling policy."""
    _, lr = make(num_mini_batches=2, num_epochs=2, shuffle=True, reference_kl=True,
                 opt=L.OptimizerConfig(learning_rate=5e-2, clip_norm=1.0, eps=1e-5))
    ms = lr.update(batch)
    assert len(ms) == 4
    s = L.summarize_update(ms)
    w = np.asarray([m["loss_tokens"] for m in ms])
    for k in ("ratio_mean", "pg_clipfrac_low", "pg_clipfrac_high", "ppo_kl"):
        assert s[k] == pytest.approx(float(np.sum([m[k] for m in ms] * w) / w.sum()), rel=1e-6)
    assert s["max/ratio"] == max(m["max/ratio"] for m in ms) and s["min/ratio"] == min(m["min/ratio"] for m in ms)
    assert s["loss_tokens"] == w.sum() and s["optimizer_steps"] == 4 and s["skipped_no_signal"] == 0
    assert s["update_ratio"] == pytest.approx(np.mean([m["update_rms"] / m["param_rms"] for m in ms]), rel=1e-5)
    assert ms[0]["pg_clipfrac_low"] + ms[0]["pg_clipfrac_high"] == 0.0   # on-policy first step
    assert s["pg_clipfrac_low"] + s["pg_clipfrac_high"] > 0               # later steps clip
    assert s["pg_clipfrac_low"] + s["pg_clipfrac_high"] != ms[-1]["pg_clipfrac_low"] + ms[-1]["pg_clipfrac_high"]
    assert s["kl_to_ref"] == 0.0                          # the batch's policy is the reference
    expected = L.masked_k3(lr.compute_logp(batch, lr.ref_params), lr.compute_logp(batch), batch.loss_mask)
    s2 = L.summarize_update(lr.update(batch))
    assert s2["kl_to_ref"] == pytest.approx(expected, rel=1e-5) and expected > 0


def test_negative_advantage_weight_scales_the_failure_side():
    """neg_adv_weight=w: the loss of a negative-advantage token is w times the plain one; positive
    tokens are unchanged."""
    rng = np.random.default_rng(0)
    logp, old = rng.normal(-2, 0.3, (2, 5)), rng.normal(-2, 0.3, (2, 5))
    adv = np.asarray([[1.5] * 5, [-0.5] * 5], np.float32)
    mask = np.ones((2, 5), np.float32)
    kw = dict(tis_cap=None)
    full, _ = losses.policy_loss(logp, old, None, adv, mask, **kw)
    pos, _ = losses.policy_loss(logp, old, None, np.where(adv > 0, adv, 0), mask, **kw)
    half, _ = losses.policy_loss(logp, old, None, adv, mask, neg_adv_weight=0.5, **kw)
    assert float(half) == pytest.approx(float(pos) + 0.5 * (float(full) - float(pos)), rel=1e-5)
    with pytest.raises(ValueError, match="neg_adv_weight"):
        losses.PolicyLossConfig(neg_adv_weight=1.5)


def test_step_metrics_match_independent_computation(batch):
    """Entropy, importance weights, KL to the reference and MFU of the first step, recomputed
    here from the model's logits and the reported token counts."""
    model, lr = make(compute_entropy=True, peak_flops_per_device=1e9, flops_per_token=lambda T: 6 * 40000.0,
                     loss=losses.PolicyLossConfig(kl_coef=0.01, tis_cap=2.0))
    a = batch.arrays()
    mask = a["loss_mask"] > 0
    logits = np.asarray(lr.model()(a["input_ids"], a["segment_ids"], a["positions"]), np.float64)
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - logits.max(-1, keepdims=True)
    entropy = -(np.exp(logp) * logp).sum(-1)
    old = lr.compute_logp(batch)
    np.testing.assert_allclose(old, np.take_along_axis(logp, a["target_ids"][..., None], -1)[..., 0], atol=1e-4)
    w = np.minimum(np.exp(old - a["rollout_logp"]), 2.0)
    m = lr.update(batch)[0]
    assert m["entropy"] == pytest.approx(entropy[mask].mean(), rel=1e-4)
    assert m["tis_weight_mean"] == pytest.approx(w[mask].mean(), rel=1e-4)
    assert m["max/tis_weight"] == pytest.approx(w[mask].max(), rel=1e-4) and m["max/tis_weight"] <= 2.0
    assert m["kl_ref"] == pytest.approx(0.0, abs=1e-6)     # the reference is the starting policy
    assert m["tokens"] == float((a["segment_ids"] > 0).sum())
    assert m["model_flops"] == pytest.approx(6 * 40000.0 * m["tokens"])
    assert m["mfu"] == pytest.approx(m["model_flops"] / m["step_time_s"] / 1e9)
    # the donated train state never aliased the model's buffers, nor the reference's
    np.testing.assert_array_equal(np.asarray(model.head[...]), np.asarray(lr.ref_params["head"]))
    assert lr.update(batch)[0]["kl_ref"] > 0                # the policy moved away from it
    _, default = make()
    assert default.flops_per_token(32) == 6.0 * default.num_params   # without the caller's count: 6N


def test_set_params_and_reference():
    _, lr = make(loss=losses.PolicyLossConfig(kl_coef=0.1))
    _, other = make()
    new = jax.tree.map(lambda x: x + 1.0, other.state["params"])
    lr.set_params(new)
    np.testing.assert_allclose(lr.params_numpy()["head"], np.asarray(new["head"]))
    assert not np.allclose(np.asarray(lr.ref_params["head"]), np.asarray(new["head"]))
    lr.set_params(new, reset_reference=True)
    np.testing.assert_allclose(np.asarray(lr.ref_params["head"]), np.asarray(new["head"]))
    assert lr.ref_params["head"].sharding == lr.param_sharding["head"]
    _, plain = make()
    assert plain.ref_params is None                      # no KL term: no second copy of the weights


def test_abstract_learner_has_the_real_shardings_and_lowers():
    mesh = shd.make_mesh((2, 4, 1, 1))
    cfg = L.LearnerConfig(num_micro_batches=2, logit_chunk=8, loss=losses.PolicyLossConfig(kl_coef=0.1))
    real = L.Learner(ToyLM(rngs=nnx.Rngs(0)), cfg, mesh=mesh)
    ab = L.Learner.abstract(nnx.eval_shape(lambda: ToyLM(rngs=nnx.Rngs(0))), cfg, mesh=mesh)
    assert ab.is_abstract and ab.row_multiple == real.row_multiple == 16
    for x, y in zip(jax.tree.leaves(ab.state), jax.tree.leaves(real.state)):
        assert isinstance(x, jax.ShapeDtypeStruct)
        assert (x.shape, x.dtype, x.sharding) == (y.shape, y.dtype, y.sharding)
    text = ab.lower_train_step(16, 32).as_text()
    assert text == real.lower_train_step(16, 32).as_text()
    with pytest.raises(RuntimeError, match="abstract"):
        ab.update(rlbatch.pack_segments(random_segments(0), PACK))


def test_expert_axis_counts_in_the_row_multiple():
    """Defect: rows were padded for ("data", "fsdp") only while the learner shards the batch over
    the rules' batch axes, expert included: a mesh with expert > 1 failed at the first update."""
    from harness_jax.train import schema, spec

    _, lr = make((1, 2, 1, 4), num_micro_batches=2)
    assert lr.batch_axes == ("fsdp", "expert")
    assert lr.row_multiple == 2 * 2 * 4
    rl = schema.RLSection(pack_len=32, pack_buckets=(16,), pad_token_id=0)
    tb = rlbatch.pack_segments(random_segments(3, n=12), spec.pack_config(rl, lr.row_multiple))
    assert tb.shape[0] % 16 == 0
    m = lr.update(tb)
    assert np.isfinite(m[0]["loss"])


def test_metrics_writer_jsonl_and_tensorboard(tmp_path):
    ms = [{"loss": 0.5, "grad_norm": 1.0}, {"loss": 0.25, "grad_norm": np.float32(2.0)}]
    with rlmetrics.MetricsWriter(str(tmp_path), active=True) as w:
        for i, m in enumerate(ms):
            w.write(i, m, prefix="learner/")
        w.write(4, {"note": "text", "bad": float("nan")})
    rec = rlmetrics.read_jsonl(str(tmp_path / "metrics.jsonl"))
    assert len(rec) == 3 and rec[1]["learner/loss"] == pytest.approx(ms[1]["loss"])
    assert rec[2]["bad"] is None and rec[2]["note"] == "text"
    assert glob.glob(os.path.join(str(tmp_path), "tb", "events.out.tfevents.*"))
    with rlmetrics.MetricsWriter(str(tmp_path / "other"), active=False) as w:
        w.write(0, {"x": 1.0})
    assert not os.path.exists(tmp_path / "other")        # not process 0: writes nothing


def _sft_setup(tmp_path, name):
    rng = np.random.default_rng(0)
    prompts = rng.integers(3, 60, (48, 4))
    segs = [sft.sft_segment(p, p + 1) for p in prompts]           # learnable copy-plus-one task
    cfg = sft.SFTConfig(epochs=2, examples_per_batch=16, pack=rlbatch.PackConfig(buckets=(32,)))
    lr = L.Learner(ToyLM(rngs=nnx.Rngs(0)), L.LearnerConfig(mode="sft", logit_chunk=8, opt=L.OptimizerConfig(
        learning_rate=1e-2)), mesh=shd.make_mesh((1, 1, 1, 1), devices=jax.devices()[:1]))
    batches = sft.SFTBatches(segs, cfg, row_multiple=lr.row_multiple)
    c = ck.Checkpointer(ck.CheckpointConfig(str(tmp_path / name), save_interval_steps=2))
    return segs, lr, batches, c


@pytest.mark.slow
def test_sft_trains_on_response_tokens_and_resumes(tmp_path):
    segs, lr, batches, c = _sft_setup(tmp_path, "straight")
    assert segs[0].loss_mask == [0] * 4 + [1] * 4
    hist = sft.train_sft(lr, batches, checkpointer=c)
    c.close()
    assert len(hist) == 6 and batches.finished and batches.get_state() == {"epoch": 2, "pos": 0, "steps": 6}
    assert hist[-1]["nll"] < hist[0]["nll"] - 0.1
    np.testing.assert_allclose(hist[0]["loss"], hist[0]["nll"], rtol=1e-5)
    assert c.latest_step() == 6
    # stopped after 2 steps (checkpoint), then resumed by a fresh learner: the same final weights
    _, lr2, b2, c2 = _sft_setup(tmp_path, "stopped")
    first = sft.train_sft(lr2, b2, checkpointer=c2, should_stop=lambda: True)
    c2.close()
    assert len(first) == 1 and not b2.finished
    _, lr3, b3, c3 = _sft_setup(tmp_path, "stopped")
    rest = sft.train_sft(lr3, b3, checkpointer=c3)
    c3.close()
    assert len(rest) == 5 and b3.finished and lr3.step == 6
    for x, y in zip(jax.tree.leaves(lr.params_numpy()), jax.tree.leaves(lr3.params_numpy())):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(ValueError, match="response_ids"):
        sft.sft_segment([1, 2], [])
    assert sft.SFTConfig.for_steps(7, 48, 16).epochs == 3


def test_bad_batch_rows_and_config_errors():
    mesh = shd.make_mesh((2, 4, 1, 1))
    assert L.required_row_multiple(L.LearnerConfig(num_micro_batches=2, num_mini_batches=2), mesh) == 32
    with pytest.raises(ValueError, match="row_multiple=32"):
        L.check_rows(48, 32)
    with pytest.raises(ValueError, match="mesh shape"):
        shd.make_mesh((3, -1, 1, 1))
    with pytest.raises(ValueError, match="num_micro_batches"):
        L.LearnerConfig(num_micro_batches=0)
    with pytest.raises(ValueError, match="schedule"):
        L.OptimizerConfig(schedule="step")
    with pytest.raises(ValueError, match="eps"):
        L.OptimizerConfig(eps=0.0)


def test_unsampled_credited_tokens_take_the_recomputed_logprob(batch):
    """Tokens credited without being sampled (``types.UNSAMPLED_LOGP``, Harness-S credit
    "executed_action") get truncated importance weight 1: the update equals the one whose rollout
    log-probabilities at those tokens are the learner's own; without recomputation it refuses."""
    import dataclasses

    from harness_jax.types import UNSAMPLED_LOGP

    on = batch.loss_mask > 0
    pick = on & (np.cumsum(on, axis=1) % 2 == 0)          # half of the loss tokens of every row
    assert pick.any()
    _, ref = make()
    own = np.where(pick, ref.compute_logp(batch), batch.rollout_logp).astype(np.float32)
    m_ref = ref.update(dataclasses.replace(batch, rollout_logp=own))
    _, lr = make()
    unsampled = dataclasses.replace(batch, rollout_logp=np.where(pick, UNSAMPLED_LOGP, batch.rollout_logp)
                                    .astype(np.float32))
    m = lr.update(unsampled)
    assert np.isfinite(m[0]["loss"]) and m[0]["loss"] == pytest.approx(m_ref[0]["loss"], rel=1e-5)
    assert m[0]["tis_weight_mean"] == pytest.approx(m_ref[0]["tis_weight_mean"], rel=1e-5)
    _, off = make(recompute_old_logp=False)
    with pytest.raises(ValueError, match="recompute_old_logp"):
        off.update(unsampled)


def test_on_policy_update_takes_the_steps_own_logprobs(batch):
    """One optimizer step per batch: ``update`` leaves ``old_logp`` to the train step (NaN, no
    separate recompute forward) and equals the step given the recomputed log-probs explicitly:
    same loss, same parameters, ratio exactly 1. With two mini-batches, or a reference, the
    log-probs are recomputed on the host as before."""
    _, lr = make()
    assert lr.on_policy_step
    _, ref = make()
    arrays = dict(batch.arrays())
    arrays["old_logp"] = ref.compute_logp(batch)
    m_ref = ref.train_step(arrays)
    m = lr.update(batch)[0]
    assert m["ratio_mean"] == 1.0 and m["max/ratio"] == 1.0 and m["min/ratio"] == 1.0
    assert m["loss"] == pytest.approx(m_ref["loss"], rel=1e-5, abs=1e-7)
    assert m["sampler_trainer_logp_diff_abs"] == pytest.approx(m_ref["sampler_trainer_logp_diff_abs"], rel=1e-5)
    for x, y in zip(jax.tree.leaves(ref.params_numpy()), jax.tree.leaves(lr.params_numpy())):
        np.testing.assert_allclose(x, y, atol=1e-6, rtol=1e-6)
    assert not make(num_mini_batches=2)[1].on_policy_step
    assert not make(num_epochs=2)[1].on_policy_step
    assert not make(loss=losses.PolicyLossConfig(kl_coef=0.1))[1].on_policy_step
    assert not make(recompute_old_logp=False)[1].on_policy_step
