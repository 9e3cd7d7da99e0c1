"""Remat "full"/"offload" (``remat.ordered_remat``): the same gradients as no remat, and one
layer's activations alive at a time in the backward pass of a scanned layer cycle, where
``jax.checkpoint`` lets XLA recompute every layer of the cycle side by side."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from harness_jax.models.qwen3_5 import remat as M

T, D, F, LAYERS_PER_CYCLE, CYCLES = 4096, 128, 1024, 4, 3


def _run(static, w, x, ctx, cache):
    h = jnp.tanh(x @ w["up"])
    h = jnp.sin(h) * jnp.cos(h) * ctx
    return x + h @ w["down"], None, jnp.mean(h)   # the third output: a layer statistic (MoE router stats)


def _loss(run):
    def loss(ws, x, ctx):
        def body(carry, w_cycle):
            x, stat = carry
            for j in range(LAYERS_PER_CYCLE):
                x, _, s = run(None, jax.tree.map(lambda a: a[j], w_cycle), x, ctx, None)
                stat = stat + s
            return (x, stat), None
        (x, stat), _ = jax.lax.scan(body, (x, jnp.float32(0)), ws)
        return jnp.sum(x ** 2) + 100.0 * stat      # gradients flow through the statistics too
    return loss


def _args():
    k = jax.random.split(jax.random.key(0), 3)
    ws = {"up": 0.05 * jax.random.normal(k[0], (CYCLES, LAYERS_PER_CYCLE, D, F)),
          "down": 0.05 * jax.random.normal(k[1], (CYCLES, LAYERS_PER_CYCLE, F, D))}
    return ws, jax.random.normal(k[2], (T, D)), jnp.float32(0.5)


@pytest.mark.parametrize("offload", [False, True])
def test_ordered_remat_gradients_equal_plain_autodiff(offload):
    ws, x, ctx = _args()
    x = x[:64]
    want = jax.jit(jax.grad(_loss(_run), argnums=(0, 1)))(ws, x, ctx)
    got = jax.jit(jax.grad(_loss(M.ordered_remat(_run, offload=offload)), argnums=(0, 1)))(ws, x, ctx)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_ordered_remat_recomputes_one_layer_at_a_time():
    """Compiled temporaries of the backward pass: with ``jax.checkpoint`` XLA:CPU holds the
    recomputed activations of the whole cycle (4 layers x [T, F] fp32 tensors), with
    ``ordered_remat`` those of one layer."""
    ws, x, ctx = _args()
    spec = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), (ws, x, ctx))

    def temp(run):
        c = jax.jit(jax.grad(_loss(run))).lower(*spec).compile()
        return c.memory_analysis().temp_size_in_bytes

    layer_acts = T * F * 4                                  # one [T, F] fp32 activation
    ckpt = temp(jax.checkpoint(_run, static_argnums=(0,), policy=M.remat_policy("full")))
    ordered = temp(M.ordered_remat(_run))
    assert ckpt - ordered > 2 * layer_acts, (ckpt / layer_acts, ordered / layer_acts)
    assert ordered < 0.7 * ckpt, (ckpt, ordered)


def test_moe_model_under_ordered_remat_has_the_gradients_of_no_remat(remat="full"):
    """A tiny MoE Qwen3.5 (scanned layers): hidden states, router statistics and the gradients of
    a loss using both (the load-balancing term included) equal those without remat."""
    from flax import nnx

    from harness_jax.models import qwen3_5
    from harness_jax.rl import losses

    ids = jnp.asarray(np.random.default_rng(0).integers(3, 512, size=(2, 16)))

    def grads(name):
        cfg = qwen3_5.presets.get("tiny_moe", scan_layers=True, remat=name)
        m = qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0))

        def loss(m):
            h, st = m.hidden_states_with_router_stats(ids)
            return jnp.mean(h ** 2) + losses.load_balancing_loss(st.counts_X, st.probs_X, st.tokens), st

        (val, st), g = nnx.jit(nnx.value_and_grad(loss, has_aux=True))(m)
        return val, st, jax.tree.leaves(nnx.state(g, nnx.Param))

    v0, st0, g0 = grads("none")
    v1, st1, g1 = grads(remat)
    np.testing.assert_allclose(float(v1), float(v0), rtol=1e-6)
    for a, b in zip(jax.tree.leaves(st1), jax.tree.leaves(st0)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)
    assert len(g1) == len(g0) and any(float(jnp.abs(x).max()) > 0 for x in g0)
    for a, b in zip(g1, g0):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)
