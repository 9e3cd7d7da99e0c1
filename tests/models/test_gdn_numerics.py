"""Gated DeltaNet numerics where trained models live (issue #19).

Kernel level, one stress grid, forward and gradients: write strengths beta in {0.5, 0.99, 1.0};
decays none / near 1 / strong / near 1 with -100 "resets" / near 1 with extreme values (-inf,
-1e30, -1e4, -120) and spans of exactly 0; key cosine within a chunk in {0, 0.9, 0.999}; every
case both alone and as three packed segments (the first continuing the initial state); key head
dims 32 and 128; chunks 16/32/64; T = 100 (not a multiple of any chunk); GQA (2 value heads per
key head); a non-zero initial state. The chunked rule must equal our recurrent rule and
transformers' torch reference functions (``torch_recurrent_gated_delta_rule``,
``torch_chunk_gated_delta_rule``, run segment by segment) within fp32 tolerance and stay finite.
Every case is one row of a single batch, so each (head dim, chunk) compiles one program (a
value-and-grad). The doubling-product inverse used before failed these rows by up to 1e8 or NaN
(``python benchmarks/bench_gdn.py --sections accuracy``).

Model level: tiny dense and MoE Qwen3.5 models made and saved by transformers, then stressed the
way trained checkpoints are (A_log = -8: decays near 1; in_proj_b scaled and sign-aligned: beta
saturated at 1), fed repeated tokens (identical keys after the conv): logits match transformers,
and the engine's recurrent decode matches the learner's chunked forward in log-probabilities.

Tolerances (fp32): outputs FWD_TOL absolute (they are O(0.1..1)), states FWD_TOL relative to
max(1, |S|), gradients GRAD_TOL relative to the largest entry of each gradient. The worst
measured cases are the "resets" rows (~1.7e-5 on outputs, ~3e-5 on gradients): in-chunk
cumulative log-decays reach the hundreds there, and transformers' chunked function has the same
error. bf16 inputs: outputs within bf16 rounding (BF16_REL) of the fp32 result, state in fp32
tolerance.
"""
import dataclasses
import itertools

import jax
import jax.extend as jex
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from transformers.models.qwen3_5 import modeling_qwen3_5 as hf
from harness_jax.models import qwen3_5
from harness_jax.models.qwen3_5 import kernels as K

FWD_TOL = 5e-5
GRAD_TOL = 2e-4
BF16_REL = 2.0 ** -8     # a bf16 output is the fp32 result rounded: <= 2^-9 relative, with margin

BETAS = (0.5, 0.99, 1.0)
DECAYS = ("none", "near1", "strong", "resets", "extreme")
RHOS = (0.0, 0.9, 0.999)
CASES = list(itertools.product(BETAS, DECAYS, RHOS))
PACKED = (0, 23, 61)                 # segment starts of the packed copy of every case
GRID = [c + ("alone",) for c in CASES] + [c + ("packed",) for c in CASES]   # one row each
T, HK, NV, E = 100, 1, 2, 32
CHUNKS = (16, 32, 64)


def _grid_inputs(A, seed=0):
    """q, k, v, g, beta, initial state (fp32 numpy, one grid case per row) and seg_start_BT."""
    rng = np.random.default_rng(seed)
    B = len(GRID)
    rho = np.array([c[2] for c in GRID])[:, None, None, None]
    k = np.sqrt(rho) * rng.normal(size=(B, 1, HK, A)) + np.sqrt(1 - rho) * rng.normal(size=(B, T, HK, A))
    q = rng.normal(size=(B, T, HK, A))
    v = rng.normal(size=(B, T, NV, E))
    beta = np.broadcast_to(np.array([c[0] for c in GRID])[:, None, None], (B, T, NV))
    g = np.zeros((B, T, NV))
    for i, (_, decay, _, _) in enumerate(GRID):
        if decay in ("near1", "resets", "extreme"):
            g[i] = -rng.uniform(0, 1e-3, size=(T, NV))
        if decay == "strong":
            g[i] = -rng.uniform(0, 4, size=(T, NV))
        if decay == "resets":
            g[i, rng.choice(T, size=T // 10, replace=False)] = -100.0
        if decay == "extreme":
            g[i, [10, 30, 47, 80]] = [[-np.inf], [-1e30], [-1e4], [-120.0]]
            g[i, 50:70] = 0.0
    s0 = 0.5 * rng.normal(size=(B, NV, A, E))
    starts = np.zeros((B, T), bool)
    starts[len(CASES):, list(PACKED[1:])] = True
    return [np.asarray(x, np.float32) for x in (q, k, v, g, beta, s0)], starts


def _weights(x, seed=1):
    """Fixed random cotangents for the outputs and the final states."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=x[2].shape).astype(np.float32), rng.normal(size=x[5].shape).astype(np.float32)


def _torch(fn, x, w=None, **kw):
    """A transformers reference function over the grid: "alone" rows in one call, "packed" rows
    segment by segment (zero state at each later segment). Returns (o, S) and, with cotangents
    ``w``, the gradients of <o, w_o> + <S, w_S> w.r.t. q, k, v, g, beta, S0 (torch autograd)."""
    ts = [torch.tensor(a, requires_grad=w is not None) for a in x]
    os_, ss = [], []
    for rows, bounds in ((slice(0, len(CASES)), [(0, T)]),
                         (slice(len(CASES), None), list(zip(PACKED, PACKED[1:] + (T,))))):
        pieces, s = [], None
        for a, b in bounds:
            s_in = ts[5][rows] if a == 0 else torch.zeros_like(ts[5][rows])
            o, s = fn(*(t[rows, a:b] for t in ts[:5]), initial_state=s_in, output_final_state=True,
                      use_qk_l2norm_in_kernel=True, **kw)
            pieces.append(o)
        os_.append(torch.cat(pieces, dim=1))
        ss.append(s)
    o, s = torch.cat(os_), torch.cat(ss)
    grads = None
    if w is not None:
        ((o * torch.tensor(w[0])).sum() + (s * torch.tensor(w[1])).sum()).backward()
        grads = [t.grad.numpy() for t in ts]
    return o.detach().numpy(), s.detach().numpy(), grads


def _ours(fn, x, starts, w):
    """(o, S, gradients) of one of our rules, as one jitted value-and-grad."""
    def loss(q, k, v, g, b, s0):
        o, s = fn(q, k, v, g, b, state_BNAE=s0, seg_start_BT=jnp.asarray(starts))
        return jnp.sum(o * w[0]) + jnp.sum(s * w[1]), (o, s)
    (_, (o, s)), grads = jax.jit(jax.value_and_grad(loss, argnums=tuple(range(6)), has_aux=True))(*x)
    return np.asarray(o), np.asarray(s), [np.asarray(a) for a in grads]


def _assert_close(got, ref, what, tol=FWD_TOL, relative_to_max=False, rows=None):
    got, ref = np.asarray(got, np.float32), np.asarray(ref, np.float32)
    assert np.all(np.isfinite(got)), f"{what}: non-finite values"
    rows = np.arange(len(got)) if rows is None else rows
    err_B = np.abs(got[rows] - ref[rows]).reshape(len(rows), -1).max(1)
    scale = float(np.abs(ref[rows]).max()) if relative_to_max else max(1.0, float(np.abs(ref[rows]).max()))
    worst = GRID[rows[int(np.argmax(err_B))]] if len(got) == len(GRID) else int(np.argmax(err_B))
    assert err_B.max() <= tol * scale, \
        f"{what}: max error {err_B.max():.2e} > {tol * scale:.2e}; worst row (beta, decay, key cos, packing) {worst}"


def _assert_all_close(got, ref, what, rows=None):
    """(o, S, grads) against a reference (o, S, grads)."""
    _assert_close(got[0], ref[0], f"{what}: outputs", rows=rows)
    _assert_close(got[1], ref[1], f"{what}: final states", rows=rows)
    for name, a, b in zip(("q", "k", "v", "g", "beta", "S0"), got[2], ref[2]):
        _assert_close(a, b, f"{what}: d{name}", tol=GRAD_TOL, relative_to_max=True, rows=rows)


# transformers' chunked function has no clamp: -inf decays give NaN and -1e30 swallows the near-1
# decays after it, so the "extreme" rows are compared with the recurrent references only
FINITE_DECAY_ROWS = np.array([i for i, c in enumerate(GRID) if c[1] != "extreme"])


# --------------------------------------------------------------------------------------------
# kernel stress grid
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("A", [32, pytest.param(128, marks=pytest.mark.slow)])
def test_stress_grid_forward_and_gradients(A):
    """chunked (16/32/64) = recurrent = transformers' recurrent and chunked functions: outputs,
    final states and gradients w.r.t. q, k, v, g, beta and the initial state; all finite."""
    x, starts = _grid_inputs(A)
    w = _weights(x)
    ref_rec = _torch(hf.torch_recurrent_gated_delta_rule, x, w)
    ref_chunk = _torch(hf.torch_chunk_gated_delta_rule, x, w, chunk_size=64)
    rec = _ours(K.recurrent_gated_delta_rule, x, starts, w)
    _assert_all_close(rec, ref_rec, "recurrent vs transformers recurrent")
    for L in CHUNKS:
        ch = _ours(lambda *a, L=L, **kw: K.chunk_gated_delta_rule(*a, chunk_size=L, **kw), x, starts, w)
        _assert_all_close(ch, rec, f"chunk {L} vs recurrent")
        _assert_all_close(ch, ref_rec, f"chunk {L} vs transformers recurrent")
        _assert_all_close(ch, ref_chunk, f"chunk {L} vs transformers chunked", rows=FINITE_DECAY_ROWS)


def test_bf16_inputs_keep_fp32_state():
    """bf16 q/k/v (the model's compute dtype; gates stay fp32 as ``gdn_gates`` makes them): the
    state comes back fp32 and within fp32 tolerance of the fp32 reference on the same (rounded)
    inputs, the output is that result rounded to bf16. Decoding token by token through the
    returned fp32 state equals one pass; a state rounded to bf16 between tokens would not."""
    x, _ = _grid_inputs(32, seed=5)
    rows = FINITE_DECAY_ROWS[FINITE_DECAY_ROWS < len(CASES)]       # the unpacked cases
    x = [a[rows] for a in x]
    bf = [jnp.asarray(a, jnp.bfloat16) for a in x[:3]]
    x_rounded = [np.asarray(a, np.float32) for a in bf] + x[3:]
    ts = [torch.tensor(a) for a in x_rounded]
    o_ref, s_ref = (a.numpy() for a in hf.torch_recurrent_gated_delta_rule(
        *ts[:5], initial_state=ts[5], output_final_state=True, use_qk_l2norm_in_kernel=True))
    o, s = jax.jit(lambda *a: K.chunk_gated_delta_rule(*a[:5], state_BNAE=a[5], chunk_size=64))(*bf, *x[3:])
    assert o.dtype == jnp.bfloat16 and s.dtype == jnp.float32
    err, tol = np.abs(np.asarray(o, np.float32) - o_ref), BF16_REL * np.abs(o_ref) + FWD_TOL
    assert np.all(err <= tol), f"chunk 64: bf16 output off by {(err - tol).max():.2e} beyond bf16 rounding"
    _assert_close(s, s_ref, "chunk 64: fp32 state from bf16 inputs")
    step = jax.jit(lambda q, k, v, g, b, s: K.recurrent_gated_delta_rule(q, k, v, g, b, state_BNAE=s))
    s32 = s16 = jnp.asarray(x[5])
    for t in range(T):
        sl = [a[:, t:t + 1] for a in bf] + [jnp.asarray(a[:, t:t + 1]) for a in x[3:5]]
        o_t, s32 = step(*sl, s32)
        assert o_t.dtype == jnp.bfloat16 and s32.dtype == jnp.float32
        s16 = step(*sl, s16)[1].astype(jnp.bfloat16).astype(jnp.float32)   # what a bf16 cache would do
    _assert_close(s32, s_ref, "token-by-token decode through the fp32 state")
    err16 = float(np.abs(np.asarray(s16) - s_ref).max())
    assert err16 > 20 * FWD_TOL * max(1.0, float(np.abs(s_ref).max())), \
        f"a bf16 state drifts only {err16:.1e}: this test could not tell fp32 from bf16 states"


def test_gates_clamp_overflow_and_match_transformers():
    """``gdn_gates``: the transformers formula where that is finite; finite and <= 0 where
    exp(A_log) overflows (A_log = 100) and softplus underflows (inf * 0 would be NaN)."""
    a_log = np.array([100.0, 3.0, 0.5, -8.0], np.float32)
    dt_bias = np.array([0.0, 1.0, -2.0, 0.5], np.float32)
    a = np.array([[[-200.0, 0.3, 50.0, -1.0], [0.0, -3.0, 2.0, 8.0]]], np.float32)
    b = np.array([[[40.0, -40.0, 0.0, 2.0], [1.0, 9.0, -3.0, 0.5]]], np.float32)
    beta, g = K.gdn_gates(jnp.asarray(b), jnp.asarray(a), jnp.asarray(a_log), jnp.asarray(dt_bias))
    assert np.all(np.isfinite(np.asarray(g))) and np.all(np.asarray(g) <= 0)
    ref_g = -torch.tensor(a_log).exp() * torch.nn.functional.softplus(torch.tensor(a) + torch.tensor(dt_bias))
    np.testing.assert_allclose(np.asarray(g)[..., 1:], ref_g.numpy()[..., 1:], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(beta), torch.tensor(b).sigmoid().numpy(), rtol=1e-6)
    assert not np.all(np.isfinite(ref_g.numpy()[..., 0]))  # the unclamped formula does break here


def _exp_arguments(closed_jaxpr, args):
    """The largest argument of every ``exp`` a jaxpr computes on ``args``: the jaxpr is
    re-interpreted eqn by eqn (into nested jit / custom_vjp calls; a scan body must contain no
    exp) under one ``jax.jit``, so it costs one compile."""
    def has_exp(jaxpr):
        return any(e.primitive.name == "exp" or any(has_exp(getattr(p, "jaxpr", p)) for p in e.params.values()
                                                     if hasattr(getattr(p, "jaxpr", p), "eqns"))
                   for e in jaxpr.eqns)

    def run(jaxpr, consts, vals, seen):
        env = dict(zip(jaxpr.constvars, consts))
        env.update(zip(jaxpr.invars, vals))
        read = lambda v: v.val if isinstance(v, jex.core.Literal) else env[v]
        for e in jaxpr.eqns:
            ins = [read(v) for v in e.invars]
            name = e.primitive.name
            if name == "exp":
                seen.append(jnp.max(ins[0]))
            sub = e.params.get("jaxpr") if name in ("jit", "pjit") else e.params.get("call_jaxpr")
            if sub is not None and name in ("jit", "pjit", "custom_vjp_call"):
                outs = run(sub.jaxpr, sub.consts, ins, seen)
            else:
                assert not any(has_exp(getattr(p, "jaxpr", p)) for p in e.params.values()
                               if hasattr(getattr(p, "jaxpr", p), "eqns")), f"exp inside {name}"
                outs = e.primitive.bind(*ins, **e.params)
                outs = outs if e.primitive.multiple_results else [outs]
            env.update(zip(e.outvars, outs))
        return [read(v) for v in jaxpr.outvars]

    def collect(*vals):
        seen = []
        run(closed_jaxpr.jaxpr, closed_jaxpr.consts, vals, seen)
        return seen

    return [float(m) for m in jax.jit(collect)(*args)]


def test_chunked_rule_exponentiates_only_non_positive_values():
    """Every exp in the chunked rule sees only values <= 0 (masked log-decay differences) on the
    whole grid: -inf / -1e30 / 0 decays, a forbidden g > 0, segment starts, chunk padding."""
    x, starts = _grid_inputs(32, seed=11)
    x[3][:, 70] = 5.0
    args = [jnp.asarray(a) for a in x] + [jnp.asarray(starts)]
    f = lambda q, k, v, g, b, s, sg: K.chunk_gated_delta_rule(q, k, v, g, b, state_BNAE=s, seg_start_BT=sg,
                                                              chunk_size=32)
    seen = _exp_arguments(jax.make_jaxpr(f)(*args), args)
    assert len(seen) >= 4, f"expected the decay exps of the chunked rule, saw {len(seen)}"
    assert max(seen) <= 0.0, f"exp of a positive value: {seen}"


# --------------------------------------------------------------------------------------------
# model level: stressed tiny checkpoints made by transformers
# --------------------------------------------------------------------------------------------
MODEL_T = 256
REPEAT_TOKEN = 17


def _model_inputs():
    """Row 0: one token repeated; row 1: runs of 16 repeated tokens (table cells, separators)."""
    runs = np.repeat(np.random.default_rng(0).integers(3, 512, size=MODEL_T // 16), 16)
    return np.stack([np.full(MODEL_T, REPEAT_TOKEN), runs]).astype(np.int64)


def _stress_gdn(model):
    """A_log = -8 (decay factor ~0.9997 per token) and in_proj_b aligned with the layer's mean
    input on the repeated-token row, so beta saturates at 1 there (b ~ 40). Returns (min beta,
    max decay factor) of every GDN layer on that row, measured in transformers after the change."""
    layers = [l.linear_attn for l in model.model.layers if hasattr(l, "linear_attn")]
    seen = {}
    hooks = [la.in_proj_b.register_forward_hook(lambda m, i, o, la=la: seen.__setitem__(la, i[0]))
             for la in layers]
    ids = torch.tensor(_model_inputs()[:1])
    stats = []
    with torch.no_grad():
        for la in layers:   # in layer order: each layer's input depends on the earlier ones
            model(ids)
            u = seen[la][0].mean(0)       # the mean input of the layer: b = 40 <x, u> / |u|^2
            la.in_proj_b.weight.copy_((40.0 * u / u.dot(u)).expand_as(la.in_proj_b.weight))
            la.A_log.fill_(-8.0)
        model(ids)
        for la in layers:
            x = seen[la][0]
            beta = torch.sigmoid(la.in_proj_b(x))
            g = -la.A_log.exp() * torch.nn.functional.softplus(la.in_proj_a(x) + la.dt_bias)
            stats.append((float(beta.min()), float(g.exp().max())))
    for h in hooks:
        h.remove()
    return stats


@pytest.fixture(scope="module")
def stressed(tmp_path_factory):
    """{kind: (checkpoint dir, transformers model, GDN stats)} for kind in dense, moe."""
    from tests.conftest import tiny_hf_model
    out = {}
    for kind, seed in (("dense", 0), ("moe", 1)):
        model = tiny_hf_model(moe=kind == "moe", seed=seed)
        stats = _stress_gdn(model)
        d = tmp_path_factory.mktemp(f"stressed_{kind}")
        model.save_pretrained(str(d))
        out[kind] = (str(d), model, stats)
    return out


@nnx.jit
def _forward(model, ids):
    return model(ids)


@nnx.jit
def _extend(model, ids, cache, num_new):
    return model.extend(ids, cache, num_new)


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_stressed_model_matches_transformers(stressed, kind):
    """Saturated beta, decay ~1, repeated tokens, chunk 64: fp32 logits within 1e-4 of
    transformers and finite (the doubling inverse gave non-finite logits here)."""
    path, hf_model, stats = stressed[kind]
    assert all(b > 0.999 and d > 0.999 for b, d in stats), f"{kind}: weights not stressed: {stats}"
    model = qwen3_5.load_hf(path, dtype="float32", config_overrides={"gdn_chunk_size": 64})
    assert model.config.gdn_chunk_size == 64
    ids = _model_inputs()
    ours = np.asarray(_forward(model, jnp.asarray(ids)))
    with torch.no_grad():
        ref = hf_model(torch.tensor(ids)).logits.numpy()
    assert np.all(np.isfinite(ours)), f"{kind}: non-finite logits"
    assert ref.std() > 0.1, "trivial reference logits"
    err = np.abs(ours - ref).max(axis=(1, 2))
    assert err.max() <= 1e-4, f"{kind}: max abs logit diff per row {err}"


def test_engine_decode_matches_chunked_prefill_on_stressed_weights(stressed):
    """The engine prefills in 32-token chunks (chunked rule), then decodes token by token
    (recurrent rule from the fp32 cache state); its sampled tokens' log-probs equal the
    learner's single chunked forward over prompt + completion within 1e-4 (the gap that would
    bias truncated importance weights)."""
    from harness_jax.sampling import JaxEngine, SamplingParams
    from harness_jax.sampling.sampler import token_logprobs
    model = qwen3_5.load_hf(stressed["dense"][0], dtype="float32", config_overrides={"gdn_chunk_size": 64})
    ids = _model_inputs()
    prompts = [ids[0, :40].tolist(), ids[1, :37].tolist()]
    n_new = 40
    eng = JaxEngine(model, max_slots=2, max_len=128, prefill_buckets=(32,), decode_steps=8)
    try:
        outs = eng.generate_batch(prompts, SamplingParams(max_new_tokens=n_new, temperature=1.0, seed=3,
                                                          ignore_eos=True))
    finally:
        eng.close()
    seqs = np.zeros((2, 40 + n_new), np.int64)
    for b, (p, o) in enumerate(zip(prompts, outs)):
        assert len(o.token_ids) == n_new
        seqs[b, :len(p) + n_new] = p + o.token_ids
    logits = _forward(model, jnp.asarray(seqs))
    for b, (p, o) in enumerate(zip(prompts, outs)):
        ref = np.asarray(token_logprobs(logits[b:b + 1, len(p) - 1:len(p) + n_new - 1],
                                        jnp.asarray([o.token_ids]), 1.0))[0]
        assert np.all(np.isfinite(o.logprobs))
        np.testing.assert_allclose(np.asarray(o.logprobs), ref, atol=1e-4, rtol=0, err_msg=f"row {b}")


def test_cache_state_is_fp32_whatever_the_compute_dtype(stressed):
    """init_cache keeps the recurrent state fp32 with bf16 KV; the model refuses a bf16 state."""
    model = qwen3_5.load_hf(stressed["dense"][0], dtype="bfloat16")
    cache = qwen3_5.init_cache(model.config, 1, 16, dtype=jnp.bfloat16)
    assert cache.k_LBSKH.dtype == jnp.bfloat16 and cache.state_LBNAE.dtype == jnp.float32
    _, cache = _extend(model, jnp.asarray(_model_inputs()[:1, :8]), cache, jnp.asarray([8], jnp.int32))
    assert cache.state_LBNAE.dtype == jnp.float32
    bad = dataclasses.replace(cache, state_LBNAE=cache.state_LBNAE.astype(jnp.bfloat16))
    with pytest.raises(ValueError, match="state_LBNAE"):
        _extend(model, jnp.asarray([[5]]), bad, jnp.asarray([1], jnp.int32))
