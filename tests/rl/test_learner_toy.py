"""Learner plumbing on the small stand-in LM (tests/rl/toy_model.py, a test double used because
compiling the real Qwen3.5 model for every mesh would exceed the test budget): several meshes on
8 CPU devices equal one device, 1/2/4 micro-batches give the same update, mini-batches/epochs,
schedules, metrics and the JSONL/TensorBoard writer."""
import glob
import os

import jax
import numpy as np
import pytest
from flax import nnx

from harness_jax.rl import batch as rlbatch
from harness_jax.rl import learner as L
from harness_jax.rl import losses
from harness_jax.rl import checkpoint as ck
from harness_jax.rl import metrics as rlmetrics
from harness_jax.rl import sft
from helpers import random_segments
from toy_model import ToyLM

PACK = rlbatch.PackConfig(buckets=(16, 32), row_multiple=16, min_rows=16)


@pytest.fixture(scope="module")
def batch():
    return rlbatch.pack_segments(random_segments(0, n=24), PACK)


def run(batch, shape=(1, 1, 1, 1), updates=2, flops_per_token=None, with_ref=False, **kw):
    # Adam eps 1e-5: entries whose gradient cancels to ~1e-8 would otherwise turn all-reduce
    # order noise (~1e-11) into lr-sized update differences between meshes.
    base = dict(opt=L.OptimizerConfig(learning_rate=1e-2, clip_norm=1.0, eps=1e-5), shuffle=False, logit_chunk=8,
                loss=losses.PolicyLossConfig(agg="seq_mean_token_mean"))
    base.update(kw)
    mesh = L.make_mesh(shape, devices=jax.devices()[:int(np.prod(shape))])
    model = ToyLM(rngs=nnx.Rngs(0))
    lr = L.Learner(model, L.LearnerConfig(**base), mesh=mesh, flops_per_token=flops_per_token,
                   ref_model=model if with_ref else None)
    ms = [m for _ in range(updates) for m in lr.update(batch)]
    if with_ref:   # the donated train state never aliased the model's (= reference's) buffers
        np.testing.assert_array_equal(np.asarray(model.head[...]), lr.ref_params["head"])
    return lr, ms


@pytest.fixture(scope="module")
def single(batch):
    return run(batch)


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
    # parameters really are sharded on the bigger meshes
    specs = {str(s.spec) for s in jax.tree.leaves(lr.state_sharding["params"])}
    assert any("fsdp" in s or "tensor" in s for s in specs) or shape[0] == 8


def test_minibatches_epochs_schedule_and_metrics(batch, tmp_path):
    opt = L.OptimizerConfig(learning_rate=1e-2, schedule="cosine", warmup_steps=2, total_steps=10)
    lr, ms = run(batch, updates=1, num_mini_batches=2, num_epochs=2, shuffle=True, opt=opt,
                 recompute_old_logp=True, compute_entropy=True, peak_flops_per_device=1e9,
                 loss=losses.PolicyLossConfig(kl_coef=0.01), flops_per_token=lambda T: 6 * 40000.0,
                 with_ref=True)
    assert len(ms) == 4 and lr.step == 4 and lr.policy_version == 1
    lrs = [m["learning_rate"] for m in ms]
    np.testing.assert_allclose(lrs[:3], [0.0, 5e-3, 1e-2], rtol=1e-6)
    assert lrs[3] < 1e-2
    # first step of the first epoch is exactly on-policy: ratios are 1, nothing clipped
    assert ms[0]["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert ms[0]["pg_clipfrac_low"] == 0.0 and ms[0]["pg_clipfrac_high"] == 0.0
    for key in ("loss", "grad_norm", "param_rms", "tis_weight_mean", "max/tis_weight", "entropy",
                "sampler_trainer_kl", "kl_ref", "tokens_per_s", "mfu"):
        assert key in ms[0] and np.isfinite(ms[0][key]), key
    assert ms[0]["max/tis_weight"] <= 2.0
    with rlmetrics.MetricsWriter(str(tmp_path), active=True) as w:
        for i, m in enumerate(ms):
            w.write(i, m, prefix="learner/")
        w.write(4, {"note": "text", "bad": float("nan")})
    rec = rlmetrics.read_jsonl(str(tmp_path / "metrics.jsonl"))
    assert len(rec) == 5 and rec[1]["learner/loss"] == pytest.approx(ms[1]["loss"])
    assert rec[4]["bad"] is None and rec[4]["note"] == "text"
    assert glob.glob(os.path.join(str(tmp_path), "events.out.tfevents.*"))


def test_sft_trains_on_response_tokens_and_checkpoints(tmp_path):
    rng = np.random.default_rng(0)
    prompts = rng.integers(3, 60, (48, 4))
    segs = [sft.sft_segment(p, p + 1) for p in prompts]           # learnable copy-plus-one task
    assert segs[0].loss_mask == [0] * 4 + [1] * 4
    cfg = sft.SFTConfig(epochs=2, examples_per_batch=16, pack=rlbatch.PackConfig(buckets=(32,)))
    lr = L.Learner(ToyLM(rngs=nnx.Rngs(0)), L.LearnerConfig(mode="sft", logit_chunk=8, opt=L.OptimizerConfig(
        learning_rate=1e-2)), mesh=L.make_mesh((1, 1, 1, 1), devices=jax.devices()[:1]))
    batches = sft.SFTBatches(segs, cfg, row_multiple=lr.row_multiple)
    c = ck.Checkpointer(ck.CheckpointConfig(str(tmp_path / "sft"), save_interval_steps=2))
    hist = sft.train_sft(lr, batches, checkpointer=c)
    c.close()
    assert len(hist) == 6 and batches.get_state() == {"epoch": 2, "pos": 0}
    assert hist[-1]["nll"] < hist[0]["nll"] - 0.1
    np.testing.assert_allclose(hist[0]["loss"], hist[0]["nll"], rtol=1e-5)
    assert c.latest_step() == 6
    with pytest.raises(ValueError, match="response_ids"):
        sft.sft_segment([1, 2], [])


def test_bad_batch_rows_and_config_errors():
    mesh = L.make_mesh((2, 4, 1, 1))
    assert L.required_row_multiple(L.LearnerConfig(num_micro_batches=2, num_mini_batches=2), mesh) == 32
    with pytest.raises(ValueError, match="row_multiple=32"):
        L.check_rows(48, 32)
    with pytest.raises(ValueError, match="mesh shape"):
        L.make_mesh((3, -1, 1, 1))
    with pytest.raises(ValueError, match="num_micro_batches"):
        L.LearnerConfig(num_micro_batches=0)
    with pytest.raises(ValueError, match="schedule"):
        L.OptimizerConfig(schedule="step")
