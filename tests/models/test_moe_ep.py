"""Expert-parallel MoE (``moe.py``) on 8 fake CPU devices.

Block level: the expert-parallel path (``shard_map``, padded ``all_to_all`` dispatch, blocked
grouped matmul) equals the single-device sorted path (``lax.ragged_dot``) with ``expert`` = 2, 4,
8 in outputs, router statistics and gradients; a capacity factor drops exactly the rows past the
capacity (later tokens first) and counts them; the compiled step moves tokens with all-to-alls
and never all-gathers an expert weight (only a device's own experts, over FSDP); its FLOPs per
device are within 1.3x of top_k / num_experts of the dense path's.
Model level: the tiny MoE checkpoint on an expert mesh equals one device, its load-balancing
loss equals transformers' ``aux_loss``, and the learner trains it to the same losses and
parameters as on one device.
"""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from harness_jax import sharding as shd
from harness_jax.models import qwen3_5
from harness_jax.models.qwen3_5 import moe as M
from harness_jax.rl import batch as rlbatch
from harness_jax.rl import learner as L
from harness_jax.rl import losses

S, D, X, I, TOPK = 128, 32, 8, 16, 2


def _block(seed=0, S=S, D=D, X=X, I=I):
    rng = np.random.default_rng(seed)
    f = lambda *shape, s=1.0: jnp.asarray(s * rng.normal(size=shape), jnp.float32)
    mask = np.ones(S, bool)
    mask[rng.choice(S, S // 8, replace=False)] = False          # padding tokens: not routed, not counted
    return f(S, D), f(X, D), f(X, 2 * I, D, s=0.2), f(X, D, I, s=0.2), jnp.asarray(mask)


def _put(mesh, x, router, gu, dn):
    put = lambda a, axes: jax.device_put(a, shd.named_sharding(axes, mesh, None, a.shape))
    return (jax.device_put(x, shd.batch_sharding(mesh, 2, shape=x.shape)), put(router, ("experts", "embed")),
            put(gu, M.GATE_UP_AXES), put(dn, M.DOWN_AXES))


def _loss_and_grads(impl, mesh, gmm, capacity_factor=0.0, mask=None):
    w = jnp.asarray(np.random.default_rng(9).normal(size=(S, D)), jnp.float32)

    def loss(x, router, gu, dn):
        out, st = M.routed_experts(x, router, gu, dn, top_k=TOPK, impl=impl, mesh=mesh, mask_S=mask, gmm=gmm,
                                   capacity_factor=capacity_factor)
        return jnp.sum(out * w), (out, st)

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True))


@pytest.mark.parametrize("expert", [2, 4, 8])
def test_ep_equals_sorted_forward_stats_and_gradients(expert):
    x, router, gu, dn, mask = _block()
    (_, (ref, ref_st)), ref_g = _loss_and_grads("sorted", None, "ragged_dot", mask=mask)(x, router, gu, dn)
    mesh = shd.make_mesh((8 // expert, 1, 1, expert))
    args = _put(mesh, x, router, gu, dn)
    assert args[2].sharding.spec[0] == "expert"
    (_, (out, st)), g = _loss_and_grads("ep", mesh, "blocked", mask=mask)(*args)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=1e-5, rtol=0)
    for a, b in zip(jax.tree.leaves(st), jax.tree.leaves(ref_st)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-5)
    assert float(st.dropped) == 0.0 and float(st.tokens) == float(jnp.sum(mask))
    for name, a, b in zip(("x", "router", "gate_up", "down"), g, ref_g):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5 * float(jnp.abs(b).max()), rtol=0,
                                   err_msg=f"d{name}, expert={expert}")


def test_capacity_drops_later_rows_and_counts_them():
    """capacity_factor 0.5 on a (2, 1, 1, 4) mesh (8 token shards of 16 tokens, ep groups of 4):
    each device keeps, per destination, its first C = ceil(0.5 * 16 * 2 / 4) = 4 routed rows in
    (token, choice) order; the output equals the sorted path with exactly those rows' routing
    weights zeroed, and ``dropped`` counts the rest."""
    x, router, gu, dn, mask = _block(seed=2)
    mesh = shd.make_mesh((2, 1, 1, 4))
    (_, (out, st)), _ = _loss_and_grads("ep", mesh, "blocked", 0.5, mask)(*_put(mesh, x, router, gu, dn))
    w_SK, idx_SK, _ = M.route(x, router, TOPK, True)
    idx, keep = np.asarray(idx_SK), np.asarray(mask)[:, None].repeat(TOPK, 1)
    shards, ep, C = 8, 4, M.capacity(S // 8 * TOPK, 4, 0.5)
    assert C == 4
    s = S // shards
    for d in range(shards):
        seen = np.zeros(ep, int)
        for r in range(s * TOPK):
            t, j = d * s + r // TOPK, r % TOPK
            if not keep[t, j]:
                continue
            dest = idx[t, j] // (X // ep)
            seen[dest] += 1
            keep[t, j] = seen[dest] <= C
    n_drop = int(np.asarray(mask).sum() * TOPK - keep.sum())
    assert n_drop > 0 and float(st.dropped) == n_drop
    w_kept = jnp.where(jnp.asarray(keep), w_SK, 0)
    ref = M.sorted_experts(x, w_kept, idx_SK, gu, dn, "ragged_dot", mask)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=1e-5, rtol=0)


def _hlo(fn, *args):
    return jax.jit(fn).lower(*args).compile()


def _expert_all_gathers(hlo_text):
    """Result shapes of every all-gather whose output has the expert weights' trailing dims."""
    out = []
    for line in hlo_text.splitlines():
        if "all-gather(" not in line and "all-gather-start(" not in line:
            continue
        for dims in re.findall(r"f32\[([\d,]+)\]", line.split("=", 1)[1].split("all-gather")[0]):
            shape = tuple(int(d) for d in dims.split(","))
            if len(shape) == 3 and shape[1:] in ((2 * I, D), (D, I)):
                out.append(shape)
    return out


def test_compiled_step_moves_tokens_never_expert_weights():
    """Forward + backward of the block: all-to-alls, and no all-gather of an expert weight on
    (data, expert) meshes; with FSDP the only expert all-gathers are of the device's own X/ep
    experts. The dense path on the same mesh (before this change, every multi-device mesh used it)
    is shown for contrast: it gathers the full expert tensors."""
    x, router, gu, dn, _ = _block()
    for shape in [(2, 1, 1, 4), (1, 1, 1, 8), (1, 2, 1, 4)]:
        mesh = shd.make_mesh(shape)
        ep = shape[3]
        c = _hlo(lambda *a: _loss_and_grads("ep", mesh, "blocked")(*a), *_put(mesh, x, router, gu, dn))
        txt = c.as_text()
        assert txt.count("all-to-all(") >= 4, f"{shape}: expected dispatch/combine all-to-alls (fwd + bwd)"
        gathers = _expert_all_gathers(txt)
        if shape[1] == 1:
            assert gathers == [], f"{shape}: expert weights all-gathered: {gathers}"
        else:
            assert gathers and all(g[0] == X // ep for g in gathers), f"{shape}: {gathers}"
    mesh = shd.make_mesh((2, 1, 1, 4))
    dense = _hlo(lambda *a: _loss_and_grads("dense", mesh, "blocked")(*a), *_put(mesh, x, router, gu, dn))
    assert any(g[0] == X for g in _expert_all_gathers(dense.as_text()))


def test_flops_scale_with_top_k():
    """``cost_analysis`` FLOPs of the routed experts (forward): expert parallel on (2, 1, 1, 4)
    with capacity factor 1 and the blocked grouped matmul (per-device program x 8 devices) over
    the dense path on one device: within 1.3x of top_k / num_experts."""
    Sb, Db, Ib = 2048, 64, 64
    x, router, gu, dn, _ = _block(seed=4, S=Sb, D=Db, I=Ib)
    mesh = shd.make_mesh((2, 1, 1, 4))

    def flops(impl, mesh, cf, *args):
        f = lambda x, r, a, b: M.routed_experts(x, r, a, b, top_k=TOPK, impl=impl, mesh=mesh, gmm="blocked",
                                                capacity_factor=cf)[0]
        return float(_hlo(f, *args).cost_analysis()["flops"])

    ep = 8 * flops("ep", mesh, 1.0, *_put(mesh, x, router, gu, dn))
    dense = flops("dense", None, 0.0, x, router, gu, dn)
    print(f"FLOPs: expert parallel {ep:.3e} (8 x per device), dense {dense:.3e}, ratio {ep / dense:.3f}, "
          f"top_k/X = {TOPK / X}")
    assert ep / dense <= 1.3 * TOPK / X, ep / dense


def test_ragged_dispatch_lowers_for_tpu():
    """``moe_dispatch="ragged"`` (``ragged_all_to_all``; XLA:CPU cannot run it) lowers for TPU
    from this host, forward and backward."""
    x, router, gu, dn, _ = _block()
    mesh = shd.make_mesh((2, 1, 1, 4))
    w = jnp.ones((S, D), jnp.float32)

    def loss(x, gu, dn):
        out, _ = M.routed_experts(x, router, gu, dn, top_k=TOPK, impl="ep", mesh=mesh, dispatch="ragged",
                                  gmm="ragged_dot")
        return jnp.sum(out * w)

    args = _put(mesh, x, router, gu, dn)
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding) for a in (args[0], args[2], args[3])]
    exp = jax.export.export(jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2))), platforms=("tpu",),
                            disabled_checks=[jax.export.DisabledSafetyCheck.custom_call("ragged_all_to_all")])(*specs)
    assert exp.mlir_module().count("ragged_all_to_all") >= 4


# --------------------------------------------------------------------------------------------
# model level
# --------------------------------------------------------------------------------------------
def test_model_on_expert_mesh_equals_one_device_and_aux_loss_equals_transformers(tiny_hf_moe_dir):
    from tests.conftest import tiny_hf_model

    ids = np.random.default_rng(0).integers(3, 512, size=(8, 24))
    single = qwen3_5.load_hf(tiny_hf_moe_dir)
    fn = nnx.jit(lambda m, x: m.hidden_states_with_router_stats(x))
    h1, st1 = fn(single, jnp.asarray(ids))
    mesh = shd.make_mesh((2, 1, 1, 4))
    sharded = qwen3_5.load_hf(tiny_hf_moe_dir, mesh=mesh)
    assert sharded.config.moe_impl == "auto" and M.resolve_impl("auto", mesh) == "ep"
    h8, st8 = fn(sharded, jax.device_put(jnp.asarray(ids), shd.batch_sharding(mesh, 2, shape=ids.shape)))
    np.testing.assert_allclose(np.asarray(h8), np.asarray(h1), atol=1e-5, rtol=0)
    for a, b in zip(jax.tree.leaves(st8), jax.tree.leaves(st1)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
    ours = float(losses.load_balancing_loss(st1.counts_X, st1.probs_X, st1.tokens))
    hf = tiny_hf_model(moe=True, seed=1)
    with torch.no_grad():
        ref = float(hf(torch.tensor(ids), output_router_logits=True).aux_loss)
    assert ours == pytest.approx(ref, rel=1e-5), (ours, ref)


@pytest.mark.slow
def test_ep_learner_trains_tiny_moe_like_one_device(tiny_hf_moe_dir):
    """A GRPO update of the tiny MoE checkpoint (2 optimizer steps of 2 micro-batches each) with
    the router load-balancing loss on: on a (2, 1, 1, 4) mesh (expert parallel) the same losses,
    gradient norms, router metrics and updated parameters as on one device."""
    from tests.rl.helpers import random_segments

    cfg = L.LearnerConfig(num_micro_batches=2, num_mini_batches=2, shuffle=False, router_aux_coef=0.001,
                          opt=L.OptimizerConfig(learning_rate=1e-3, eps=1e-5),
                          loss=losses.PolicyLossConfig(agg="token_mean"))
    segs = random_segments(0, n=48, vocab=512)      # 20 of the 32 rows: both mini-batches hold tokens
    batch = rlbatch.pack_segments(segs, rlbatch.PackConfig(buckets=(32,), row_multiple=32, min_rows=32))
    runs = {}
    for name, mesh in (("one", shd.make_mesh((1, 1, 1, 1), devices=jax.devices()[:1])),
                       ("ep", shd.make_mesh((2, 1, 1, 4)))):
        lr = L.Learner(qwen3_5.load_hf(tiny_hf_moe_dir, mesh=mesh), cfg, mesh=mesh)
        ms = lr.update(batch)
        runs[name] = (ms, lr.params_numpy())
    (m1, p1), (m8, p8) = runs["one"], runs["ep"]
    assert len(m1) == len(m8) == 2                    # two optimizer steps (mini-batches)
    for a, b in zip(m1, m8):
        assert b["moe/load_balancing_loss"] > 0 and b["moe/dropped_frac"] == 0.0
        for k in ("loss", "grad_norm", "moe/load_balancing_loss", "max/moe/expert_load"):
            np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-6, err_msg=k)
    for x, y in zip(jax.tree.leaves(p1), jax.tree.leaves(p8)):
        np.testing.assert_allclose(x, y, atol=2e-5, rtol=1e-5)
