"""Serving layout of the embedded engine: decode never runs on the learner's FSDP layout (HLO of
the compiled decode program on 8 fake devices), the bf16 serving copy's log-probabilities against
the fp32 learner, and the copy rebuilt on device at every weight update."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from harness_jax import sharding as shd
from harness_jax.models import qwen3_5
from harness_jax.sampling import JaxEngine, SamplingParams
from harness_jax.sampling.sampler import token_logprobs
from harness_jax.sampling.serving import weight_all_gathers

# bf16 serving copy vs the fp32 learner on the tiny checkpoint, 160 sampled tokens:
# measured max |dlogp| 0.030 (T=1) / 0.042 (T=0.7), mean 0.006 / 0.008 nats
BF16_MAX_ABS, BF16_MEAN_ABS = 0.08, 0.02


@pytest.mark.slow
def test_decode_program_has_no_weight_all_gather():
    """A learner FSDP-sharded over 8 devices: the engine's serving copy (tensor-parallel over 8,
    or over 2 with 4 data-parallel replicas, or replicated) decodes with no all-gather of a
    weight; decoding on the learner's own layout (the negative control) all-gathers them."""
    cfg = qwen3_5.presets.get("tiny", num_attention_heads=8, num_key_value_heads=8, linear_num_key_heads=8,
                              linear_num_value_heads=8)
    mesh = shd.make_mesh((1, 8, 1, 1))
    model = shd.init_sharded(lambda: qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0), dtype=jnp.bfloat16),
                             mesh, shd.TRAIN_RULES)
    model.set_mesh(mesh, shd.TRAIN_RULES)
    kw = dict(max_slots=8, max_len=64, prefill_buckets=(16,), decode_steps=2, weight_layout="hf")
    for tp in (8, 2):
        eng = JaxEngine(model, tensor_parallel=tp, **kw)
        try:
            state = eng.served_state
            assert dict(eng.mesh.shape)["tensor"] == tp and dict(eng.mesh.shape)["data"] == 8 // tp
            assert {(str(a.dtype), a.ndim >= 2) for a in jax.tree_util.tree_leaves(state)} == {
                ("bfloat16", True), ("float32", False)}
            q = state["model"]["layers"][1]["self_attn"]["q_proj"]["weight"][...]
            assert "tensor" in str(q.sharding.spec) and "fsdp" not in str(q.sharding.spec)
            text = eng.lower_decode().compile().as_text()
            assert weight_all_gathers(text, state) == []
        finally:
            eng.close()
    learner = JaxEngine(model, mesh=mesh, rules=shd.TRAIN_RULES, **kw)
    try:
        assert len(weight_all_gathers(learner.lower_decode().compile().as_text(), learner.served_state)) > 10
    finally:
        learner.close()


def test_bf16_serving_logprobs_match_the_fp32_learner(tiny_hf_dense_dir, dense_model):
    """bf16 compute with bf16 matrices (1-D parameters fp32), sampled at T=1 and 0.7: its
    behaviour log-probabilities stay within the stated bf16 tolerance of the fp32 learner's
    teacher-forced ones; ``update_weights`` rebuilds the copy (bf16) from fp32 learner arrays."""
    m16 = qwen3_5.load_hf(tiny_hf_dense_dir, dtype="bfloat16", param_dtype="float32")
    gd, st = nnx.split(dense_model)
    fwd = jax.jit(lambda s, ids: nnx.merge(gd, s)(ids))
    prompts = [[5, 6, 7], list(range(10, 50)), [4, 5, 100, 200, 7, 8, 9]]
    eng = JaxEngine(m16, max_slots=4, max_len=128, prefill_buckets=(32,), decode_steps=4, prefill_rows=1)
    try:
        for T in (1.0, 0.7):
            outs = eng.generate_batch(prompts, SamplingParams(max_new_tokens=24, temperature=T, seed=3, ignore_eos=True))
            diffs = []
            for p, o in zip(prompts, outs):
                seq = p + o.token_ids
                logits = fwd(st, jnp.asarray([seq + [0] * (96 - len(seq))]))[:, len(p) - 1:len(seq) - 1]
                ref = np.asarray(token_logprobs(logits, jnp.asarray([o.token_ids]), T))[0]
                diffs.append(np.abs(np.asarray(o.logprobs) - ref))
            d = np.concatenate(diffs)
            assert d.max() <= BF16_MAX_ABS and d.mean() <= BF16_MEAN_ABS, (T, d.max(), d.mean())
            assert d.max() > 1e-4        # it is the bf16 copy that ran, not the fp32 weights
        v = eng.update_weights(nnx.state(m16))
        leaves = jax.tree_util.tree_leaves(eng.served_state)
        assert eng.weight_version == v and {str(a.dtype) for a in leaves if a.ndim >= 2} == {"bfloat16"}
        assert all(a.dtype == jnp.float32 for a in jax.tree_util.tree_leaves(nnx.state(m16)))
    finally:
        eng.close()
