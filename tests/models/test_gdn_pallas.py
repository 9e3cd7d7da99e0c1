"""Pallas Gated DeltaNet (``gdn_pallas``) against the jnp rule (``kernels``), in Pallas interpret
mode on CPU (the same kernel bodies the TPU / GPU lowerings compile).

Kernel level: the whole stress grid of ``test_gdn_numerics`` (betas, decays incl. -inf / -1e30 /
zero spans, key cosines up to 0.999, packed segments, T = 100 ragged against every chunk, GQA, a
non-zero initial state): outputs, final states and gradients w.r.t. q, k, v, g, beta and the
initial state equal the recurrent reference and the jnp chunked rule within the fp32 tolerances
of that file. bf16 inputs: the state within fp32 tolerance (it never sees a bf16 product), the
outputs within the readout's bf16 rounding. The decode kernel equals the recurrent step.
Model level: a tiny checkpoint with ``gdn_impl="pallas"`` equals ``"jnp"`` (forward, ragged
prefill + decode through the cache, gradients on an 8-device mesh). Lowering: the kernels lower
for TPU (Mosaic) and GPU (Triton) from this CPU host with ``jax.export``.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from harness_jax import sharding as shd
from harness_jax.models import qwen3_5
from harness_jax.models.qwen3_5 import gdn_pallas as P
from harness_jax.models.qwen3_5 import kernels as K
from tests.models.test_gdn_numerics import (CASES, FINITE_DECAY_ROWS, FWD_TOL, _assert_all_close, _assert_close,
                                            _grid_inputs, _ours, _weights)

BF16_READOUT_REL = 2.0 ** -5   # bf16 readout products: measured 1.7e-2 of a row's largest output at worst


@pytest.fixture(scope="module")
def grid32():
    x, starts = _grid_inputs(32)
    w = _weights(x)
    return x, starts, w, _ours(K.recurrent_gated_delta_rule, x, starts, w)


@pytest.mark.parametrize("backend,L", [("mosaic", 64), pytest.param("mosaic", 16, marks=pytest.mark.slow),
                                       pytest.param("triton", 32, marks=pytest.mark.slow)])
def test_stress_grid_matches_recurrent_and_jnp_chunked(grid32, backend, L):
    """Every grid row, fp32: the kernels = the recurrence = the jnp chunked rule (outputs, states,
    all six gradients), finite everywhere."""
    x, starts, w, rec = grid32
    ref = _ours(lambda *a, **kw: K.chunk_gated_delta_rule(*a, chunk_size=L, **kw), x, starts, w)
    got = _ours(lambda *a, **kw: P.chunk_gated_delta_rule(*a, chunk_size=L, backend=backend, **kw), x, starts, w)
    _assert_all_close(got, rec, f"pallas {backend} chunk {L} vs recurrent")
    _assert_all_close(got, ref, f"pallas {backend} chunk {L} vs jnp chunk {L}")


def _small(seed=0, B=2, T=40, Hk=2, N=4, A=16, E=16, dtype=np.float32):
    rng = np.random.default_rng(seed)
    x = [rng.normal(size=(B, T, Hk, A)), rng.normal(size=(B, T, Hk, A)), rng.normal(size=(B, T, N, E)),
         -rng.uniform(0, 2, size=(B, T, N)), rng.uniform(0, 1, size=(B, T, N)), 0.5 * rng.normal(size=(B, N, A, E))]
    x = [np.asarray(a, np.float32) for a in x]
    starts = np.zeros((B, T), bool)
    starts[1, [7, 30]] = True
    return x, starts


def test_residual_policies_and_backends_agree():
    """"states" (chunk states kept from the forward) and "recompute" (a states-only walk in the
    backward), TPU and GPU kernels, value blocks of 8 and the whole value dim: the same numbers."""
    x, starts = _small()
    w = _weights(x)
    runs = {(be, res, blk): _ours(lambda *a, **kw: P.chunk_gated_delta_rule(
        *a, chunk_size=16, backend=be, residuals=res, block_e=blk, **kw), x, starts, w)
            for be, res, blk in [("mosaic", "recompute", None), ("mosaic", "states", 8), ("triton", "recompute", 8)]}
    base = runs[("mosaic", "recompute", None)]
    for key, got in runs.items():
        for a, b in zip([got[0], got[1]] + got[2], [base[0], base[1]] + base[2]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=str(key))
    _assert_all_close(base, _ours(K.recurrent_gated_delta_rule, x, starts, w), "pallas vs recurrent (GQA)")


def test_bf16_inputs_fp32_state_and_bf16_readout():
    """bf16 q/k/v: the state comes back fp32 and within fp32 tolerance of the fp32 recurrence on
    the rounded inputs (every product feeding it is fp32); the outputs are bf16 within the bf16
    readout's rounding; gradients finite and within 2% of the fp32 rule's."""
    x, _ = _grid_inputs(32, seed=5)
    rows = FINITE_DECAY_ROWS[FINITE_DECAY_ROWS < len(CASES)]
    x = [a[rows] for a in x]
    bf = [jnp.asarray(a, jnp.bfloat16) for a in x[:3]]
    rounded = [jnp.asarray(np.asarray(a, np.float32)) for a in bf] + [jnp.asarray(a) for a in x[3:]]
    o_ref, s_ref = jax.jit(lambda *a: K.recurrent_gated_delta_rule(*a[:5], state_BNAE=a[5]))(*rounded)
    f = jax.jit(lambda *a: P.chunk_gated_delta_rule(*a[:5], state_BNAE=a[5], chunk_size=64))
    o, s = f(*bf, *x[3:])
    assert o.dtype == jnp.bfloat16 and s.dtype == jnp.float32
    _assert_close(s, s_ref, "pallas chunk 64: fp32 state from bf16 inputs")
    err = np.abs(np.asarray(o, np.float32) - np.asarray(o_ref)).reshape(len(rows), -1).max(1)
    scale = np.abs(np.asarray(o_ref)).reshape(len(rows), -1).max(1)
    assert np.all(err <= BF16_READOUT_REL * scale), f"bf16 outputs off by {(err / scale).max():.2e} of the row max"
    wo = jnp.asarray(np.random.default_rng(1).normal(size=x[2].shape), jnp.float32)

    def grads(fn, args):
        loss = lambda *a: jnp.sum(fn(*a[:5], state_BNAE=a[5], chunk_size=64)[0].astype(jnp.float32) * wo)
        return jax.jit(jax.grad(loss, argnums=tuple(range(6))))(*args)

    g16 = grads(P.chunk_gated_delta_rule, bf + [jnp.asarray(a) for a in x[3:]])
    g32 = grads(K.chunk_gated_delta_rule, rounded)
    for name, a, b in zip(("q", "k", "v", "g", "beta", "S0"), g16, g32):
        _assert_close(np.asarray(a, np.float32), b, f"bf16 d{name}", tol=2e-2, relative_to_max=True)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_decode_step_equals_recurrent_step(dtype):
    """The fused decode kernel = one step of the recurrent rule (GQA, a segment start, a -inf and
    a strong decay, both backends): fp32 state, output in the input dtype."""
    rng = np.random.default_rng(3)
    B, Hk, N, A, E = 3, 2, 4, 32, 32
    q, k = (jnp.asarray(rng.normal(size=(B, 1, Hk, A)), dtype) for _ in range(2))
    v = jnp.asarray(rng.normal(size=(B, 1, N, E)), dtype)
    g = jnp.asarray(-rng.uniform(0, 2, size=(B, 1, N)), jnp.float32).at[0, 0, 0].set(-jnp.inf)
    b = jnp.asarray(rng.uniform(0, 1, size=(B, 1, N)), jnp.float32)
    s = jnp.asarray(rng.normal(size=(B, N, A, E)), jnp.float32)
    starts = jnp.asarray([[True], [False], [False]])
    o_ref, s_ref = K.recurrent_gated_delta_rule(q, k, v, g, b, state_BNAE=s, seg_start_BT=starts)
    for backend in ("mosaic", "triton"):
        o, s_new = jax.jit(lambda *a: P.decode_step(*a[:5], state_BNAE=a[5], seg_start_BT=starts,
                                                    backend=backend, block_e=16))(q, k, v, g, b, s)
        assert o.dtype == dtype and s_new.dtype == jnp.float32
        _assert_close(s_new, s_ref, f"{backend} decode state")
        np.testing.assert_allclose(np.asarray(o, np.float32), np.asarray(o_ref, np.float32),
                                   atol=1e-5 if dtype == jnp.float32 else 1e-2, rtol=0)


# --------------------------------------------------------------------------------------------
# model level
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_pair(tiny_hf_dense_dir):
    jnp_model = qwen3_5.load_hf(tiny_hf_dense_dir, config_overrides={"gdn_chunk_size": 16})
    pal_model = qwen3_5.load_hf(tiny_hf_dense_dir, config_overrides={"gdn_chunk_size": 16, "gdn_impl": "pallas"})
    return jnp_model, pal_model


def test_model_prefill_and_decode_match_jnp(tiny_pair):
    """Ragged prefill (rows of 21 and 9 new tokens) then two decode steps through the cache:
    logits and recurrent states of gdn_impl="pallas" equal "jnp" (the packed full forward is
    checked with its gradients below)."""
    jm, pm = tiny_pair
    assert pm.config.gdn_impl == "pallas"
    ids = np.random.default_rng(0).integers(3, 512, size=(2, 24))
    ext = nnx.jit(lambda m, x, c, n: m.extend(x, c, n))
    caches = {}
    for name, m in (("jnp", jm), ("pallas", pm)):
        c = qwen3_5.init_cache(m.config, 2, 40)
        out, c = ext(m, jnp.asarray(ids[:, :21]), c, jnp.asarray([21, 9], jnp.int32))
        outs = [np.asarray(out)]
        for t in range(2):
            out, c = ext(m, jnp.asarray(ids[:, 21 + t:22 + t]), c, jnp.ones((2,), jnp.int32))
            outs.append(np.asarray(out))
        caches[name] = (outs, c)
    (oj, cj), (op, cp) = caches["jnp"], caches["pallas"]
    np.testing.assert_allclose(op[0][0], oj[0][0], atol=2e-5, rtol=0)
    np.testing.assert_allclose(op[0][1, :9], oj[0][1, :9], atol=2e-5, rtol=0)      # row 1: 9 valid tokens
    for a, b in zip(op[1:], oj[1:]):
        np.testing.assert_allclose(a, b, atol=2e-5, rtol=0)
    np.testing.assert_allclose(np.asarray(cp.state_LBNAE), np.asarray(cj.state_LBNAE), atol=2e-5, rtol=0)


def test_model_gradients_on_a_mesh_match_jnp(tiny_hf_dense_dir, tiny_pair):
    """Parameter gradients of a packed-row loss: gdn_impl="pallas" on a (4, 2, 1, 1) mesh (the
    kernels run once per batch shard under shard_map) = "jnp" on one device."""
    jm, _ = tiny_pair
    mesh = shd.make_mesh((4, 2, 1, 1))
    pm = qwen3_5.load_hf(tiny_hf_dense_dir, mesh=mesh, config_overrides={"gdn_chunk_size": 16, "gdn_impl": "pallas"})
    rng = np.random.default_rng(1)
    ids = rng.integers(3, 512, size=(8, 24))
    seg = np.repeat([[1] * 13 + [2] * 11], 8, axis=0)
    w = jnp.asarray(rng.normal(size=(8, 24, 512)), jnp.float32)

    def grads(m, x):
        gd, params, rest = nnx.split(m, nnx.Param, ...)
        loss = lambda p: jnp.sum(nnx.merge(gd, p, rest)(x, segment_ids=seg) * w)
        return jax.jit(jax.grad(loss))(params)

    x_sharded = jax.device_put(jnp.asarray(ids), shd.batch_sharding(mesh, 2, shape=ids.shape))
    gp = nnx.to_flat_state(grads(pm, x_sharded))
    gj = dict(nnx.to_flat_state(grads(jm, jnp.asarray(ids))))
    for path, v in gp:
        ref = np.asarray(gj[path][...])
        np.testing.assert_allclose(np.asarray(v[...]), ref, atol=1e-4 * max(1.0, float(np.abs(ref).max())),
                                   rtol=0, err_msg=".".join(map(str, path)))


# --------------------------------------------------------------------------------------------
# cross-platform lowering
# --------------------------------------------------------------------------------------------
def test_kernels_lower_for_tpu_and_gpu():
    """From this CPU host, ``jax.export`` lowers the forward, forward + backward and decode kernels
    at a 9B layer's head shapes (bf16, 128 x 128 state, chunk 64) for TPU (Mosaic custom calls)
    and CUDA (Triton custom calls). Lowering is checked, not compilation: the Mosaic and Triton
    compilers run on the accelerator host."""
    B, T, Hk, N, A, E = 1, 256, 2, 4, 128, 128
    sd = lambda s, d=jnp.bfloat16: jax.ShapeDtypeStruct(s, d)
    args = (sd((B, T, Hk, A)), sd((B, T, Hk, A)), sd((B, T, N, E)), sd((B, T, N), jnp.float32),
            sd((B, T, N), jnp.float32), sd((B, N, A, E), jnp.float32))
    for platform, backend, marker in (("tpu", "mosaic", "tpu_custom_call"), ("cuda", "triton", "xla.gpu.triton")):
        fwd = lambda q, k, v, g, b, s: P.chunk_gated_delta_rule(q, k, v, g, b, state_BNAE=s, backend=backend,
                                                                interpret=False)
        loss = lambda *a: sum(jnp.sum(y.astype(jnp.float32)) for y in fwd(*a))
        fns = {"forward": fwd, "forward+backward": jax.value_and_grad(loss, argnums=tuple(range(6))),
               "decode": lambda q, k, v, g, b, s: P.decode_step(q[:, :1], k[:, :1], v[:, :1], g[:, :1], b[:, :1],
                                                               state_BNAE=s, backend=backend, interpret=False)}
        for name, f in fns.items():
            exp = jax.export.export(jax.jit(f), platforms=(platform,), disabled_checks=[
                jax.export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")])(*args)
            n = exp.mlir_module().count(marker)
            want = {"forward": 1, "forward+backward": 3, "decode": 1}[name]
            assert n >= want, f"{platform} {name}: {n} kernel calls in the lowered module, expected {want}"
