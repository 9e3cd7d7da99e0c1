"""Pure kernels against the transformers torch reference functions on random inputs."""
import numpy as np
import pytest
import torch
import jax
import jax.numpy as jnp

from functools import partial

from transformers.models.qwen3_5 import modeling_qwen3_5 as hf
from harness_jax.models.qwen3_5 import kernels as K

# jitted once per shape: far cheaper than op-by-op dispatch on 2 cores
chunk_rule = jax.jit(K.chunk_gated_delta_rule, static_argnames=("chunk_size", "use_qk_l2norm"))
recurrent_rule = jax.jit(K.recurrent_gated_delta_rule, static_argnames=("use_qk_l2norm",))


def _gdn_inputs(B, T, Kh, Nv, A, E, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(B, T, Kh, A)).astype(np.float32)
    k = rng.normal(size=(B, T, Kh, A)).astype(np.float32)
    v = rng.normal(size=(B, T, Nv, E)).astype(np.float32)
    g = -np.exp(rng.normal(size=(B, T, Nv))).astype(np.float32) * 0.3
    beta = (1 / (1 + np.exp(-rng.normal(size=(B, T, Nv))))).astype(np.float32)
    s0 = rng.normal(size=(B, Nv, A, E)).astype(np.float32) * 0.5
    return q, k, v, g, beta, s0


def _t(x):
    return torch.from_numpy(np.asarray(x))


@pytest.mark.parametrize("T,chunk", [(1, 64), (37, 8), (64, 16), (130, 32)])
def test_chunk_and_recurrent_delta_rule_match_torch(T, chunk):
    q, k, v, g, beta, s0 = _gdn_inputs(2, T, 2, 4, 16, 8, seed=T)
    ref_o, ref_s = hf.torch_chunk_gated_delta_rule(
        _t(q), _t(k), _t(v), _t(g), _t(beta), chunk_size=64, initial_state=_t(s0),
        output_final_state=True, use_qk_l2norm_in_kernel=True)
    o, s = chunk_rule(q, k, v, g, beta, state_BNAE=s0, chunk_size=chunk)
    np.testing.assert_allclose(np.asarray(o), ref_o.numpy(), atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(s), ref_s.numpy(), atol=2e-5, rtol=1e-4)
    o_r, s_r = recurrent_rule(q, k, v, g, beta, state_BNAE=s0)
    np.testing.assert_allclose(np.asarray(o_r), ref_o.numpy(), atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(s_r), ref_s.numpy(), atol=2e-5, rtol=1e-4)


def test_delta_rule_segment_reset_equals_separate_runs():
    q, k, v, g, beta, _ = _gdn_inputs(1, 50, 2, 4, 16, 8, seed=3)
    starts = np.zeros((1, 50), bool)
    starts[0, [0, 13, 31]] = True
    o, s = chunk_rule(q, k, v, g, beta, seg_start_BT=jnp.asarray(starts), chunk_size=8)
    o_r, s_r = recurrent_rule(q, k, v, g, beta, seg_start_BT=jnp.asarray(starts))
    pieces, last = [], None
    for a, b in [(0, 13), (13, 31), (31, 50)]:
        oo, last = recurrent_rule(q[:, a:b], k[:, a:b], v[:, a:b], g[:, a:b], beta[:, a:b])
        pieces.append(np.asarray(oo))
    ref = np.concatenate(pieces, axis=1)
    np.testing.assert_allclose(np.asarray(o), ref, atol=2e-5)
    np.testing.assert_allclose(np.asarray(o_r), ref, atol=2e-5)
    np.testing.assert_allclose(np.asarray(s), np.asarray(last), atol=2e-5)
    np.testing.assert_allclose(np.asarray(s_r), np.asarray(last), atol=2e-5)


def test_split_prefill_state_equals_full():
    q, k, v, g, beta, _ = _gdn_inputs(2, 90, 2, 4, 16, 8, seed=5)
    o_full, s_full = chunk_rule(q, k, v, g, beta, chunk_size=16)
    o1, s1 = chunk_rule(q[:, :41], k[:, :41], v[:, :41], g[:, :41], beta[:, :41], chunk_size=16)
    o2, s2 = chunk_rule(q[:, 41:], k[:, 41:], v[:, 41:], g[:, 41:], beta[:, 41:],
                                      state_BNAE=s1, chunk_size=16)
    np.testing.assert_allclose(np.concatenate([o1, o2], 1), np.asarray(o_full), atol=2e-5)
    np.testing.assert_allclose(np.asarray(s2), np.asarray(s_full), atol=2e-5)


def test_causal_conv_prefill_and_update_match_torch():
    rng = np.random.default_rng(0)
    B, T, C, W = 2, 23, 12, 4
    x = rng.normal(size=(B, T, C)).astype(np.float32)
    w = rng.normal(size=(C, W)).astype(np.float32)
    ref = hf.causal_conv1d_fn(_t(x).transpose(1, 2), _t(w), None, activation="silu").transpose(1, 2)
    np.testing.assert_allclose(np.asarray(K.causal_conv1d(x, w)), ref.numpy(), atol=1e-5)
    # update path: prefill 20 tokens, then 3 single-token updates through the state
    state = jnp.zeros((B, C, W - 1))
    state = K.conv_state_after(jnp.asarray(x[:, :20]), state, jnp.full((B,), 20))
    torch_state = _t(x[:, 17:20]).transpose(1, 2).contiguous()
    for t in range(20, 23):
        y = K.causal_conv1d(x[:, t:t + 1], w, state_BCW=state)
        y_ref = hf.causal_conv1d_update(_t(x[:, t:t + 1]).transpose(1, 2), torch_state, _t(w), None, "silu")
        np.testing.assert_allclose(np.asarray(y)[:, 0], y_ref.numpy()[:, :, 0], atol=1e-5)
        np.testing.assert_allclose(np.asarray(y)[:, 0], ref.numpy()[:, t], atol=1e-5)
        state = K.conv_state_after(jnp.asarray(x[:, t:t + 1]), state, jnp.ones((B,), jnp.int32))
        np.testing.assert_allclose(np.asarray(state), torch_state.numpy(), atol=0)


def test_conv_segments_equal_separate():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1, 15, 6)).astype(np.float32)
    w = rng.normal(size=(6, 4)).astype(np.float32)
    seg = np.array([[0] * 5 + [1] * 2 + [2] * 8])
    y = K.causal_conv1d(x, w, seg_start_BT=K.segment_starts(jnp.asarray(seg)))
    ref = np.concatenate([np.asarray(K.causal_conv1d(x[:, a:b], w)) for a, b in [(0, 5), (5, 7), (7, 15)]], 1)
    np.testing.assert_allclose(np.asarray(y), ref, atol=1e-6)


def test_rope_and_norms_match_torch():
    from transformers import Qwen3_5TextConfig
    cfg = Qwen3_5TextConfig(head_dim=32, hidden_size=64, num_attention_heads=2, num_hidden_layers=1,
                            rope_parameters={"rope_type": "default", "rope_theta": 1e4,
                                             "partial_rotary_factor": 0.5, "mrope_section": [4, 2, 2],
                                             "mrope_interleaved": True})
    rot = hf.Qwen3_5TextRotaryEmbedding(cfg)
    rng = np.random.default_rng(2)
    pos3 = rng.integers(0, 100, size=(3, 2, 9))
    cos_ref, sin_ref = rot(torch.zeros(1, dtype=torch.float32), _t(pos3))
    cos, sin = K.rope_cos_sin(jnp.asarray(pos3), 16, 1e4, (4, 2, 2))
    np.testing.assert_allclose(np.asarray(cos), cos_ref.numpy(), atol=1e-5)
    np.testing.assert_allclose(np.asarray(sin), sin_ref.numpy(), atol=1e-5)
    q = rng.normal(size=(2, 9, 3, 32)).astype(np.float32)
    q_ref, _ = hf.apply_rotary_pos_emb(_t(q), _t(q), cos_ref, sin_ref, unsqueeze_dim=2)
    np.testing.assert_allclose(np.asarray(K.apply_partial_rope(q, cos, sin)), q_ref.numpy(), atol=1e-5)
    x = rng.normal(size=(4, 32)).astype(np.float32)
    w = rng.normal(size=(32,)).astype(np.float32)
    n = hf.Qwen3_5RMSNorm(32)
    n.weight.data = _t(w)
    np.testing.assert_allclose(np.asarray(K.rms_norm(x, w, 1e-6)), n(_t(x)).detach().numpy(), atol=1e-5)
    gn = hf.Qwen3_5RMSNormGated(32)
    gn.weight.data = _t(w)
    z = rng.normal(size=(4, 32)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(K.gated_rms_norm(x, z, w, 1e-6)),
                               gn(_t(x), _t(z)).detach().numpy(), atol=1e-5)


def test_moe_sorted_equals_dense_and_torch():
    from transformers import Qwen3_5MoeTextConfig
    from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as hfm
    torch.manual_seed(0)
    cfg = Qwen3_5MoeTextConfig(hidden_size=16, num_experts=5, num_experts_per_tok=2, moe_intermediate_size=8,
                               shared_expert_intermediate_size=8, num_hidden_layers=1)
    blk = hfm.Qwen3_5MoeSparseMoeBlock(cfg)
    for p in blk.parameters():
        torch.nn.init.normal_(p, std=0.3)
    x = torch.randn(2, 11, 16)
    ref = blk(x).detach().numpy()
    xs = jnp.asarray(x.numpy().reshape(-1, 16))
    _, w, idx = K.route_topk(xs, jnp.asarray(blk.gate.weight.detach().numpy()), 2)
    gu, dn = jnp.asarray(blk.experts.gate_up_proj.detach().numpy()), jnp.asarray(blk.experts.down_proj.detach().numpy())
    routed = K.moe_experts(xs, w, idx, gu, dn, impl="sorted")
    dense = K.moe_experts(xs, w, idx, gu, dn, impl="dense")
    np.testing.assert_allclose(np.asarray(routed), np.asarray(dense), atol=1e-5)
    se = blk.shared_expert
    shared = K.swiglu(xs[None], *(jnp.asarray(m.weight.detach().numpy()) for m in (se.gate_proj, se.up_proj, se.down_proj)))[0]
    gate = jax.nn.sigmoid(xs @ jnp.asarray(blk.shared_expert_gate.weight.detach().numpy()).T)
    np.testing.assert_allclose(np.asarray(routed + gate * shared).reshape(ref.shape), ref, atol=1e-5)


def test_delta_rule_gradients_chunk_equal_recurrent():
    q, k, v, g, beta, s0 = _gdn_inputs(1, 20, 1, 2, 8, 4, seed=9)
    f_c = lambda *a: jnp.sum(K.chunk_gated_delta_rule(*a, state_BNAE=s0, chunk_size=8)[0] ** 2)
    f_r = lambda *a: jnp.sum(K.recurrent_gated_delta_rule(*a, state_BNAE=s0)[0] ** 2)
    gc = jax.jit(jax.grad(f_c, argnums=(0, 1, 2, 3, 4)))(q, k, v, g, beta)
    gr = jax.jit(jax.grad(f_r, argnums=(0, 1, 2, 3, 4)))(q, k, v, g, beta)
    for a, b in zip(gc, gr):
        assert np.all(np.isfinite(np.asarray(a)))
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-4, rtol=1e-3)
