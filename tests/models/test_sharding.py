"""Sharded loading/initialisation on 8 fake CPU devices gives the same logits as one device."""
import numpy as np
import pytest
import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import PartitionSpec as P

from harness_jax import sharding as shd
from harness_jax.models import qwen3_5


@pytest.fixture(scope="module")
def ref_moe(tiny_hf_moe_dir):
    ids = np.random.default_rng(0).integers(3, 512, size=(8, 48))
    model = qwen3_5.load_hf(tiny_hf_moe_dir)
    return ids, np.asarray(nnx.jit(lambda m, x: m(x))(model, jnp.asarray(ids)))


# (embed_tokens (vocab, embed), experts.gate_up_proj (experts, expert_mlp, embed)) per mesh shape:
# the rules map vocab/expert_mlp -> tensor, embed -> fsdp, experts -> expert; size-1 axes drop out.
EXPECTED_SPECS = {
    (8, 1, 1): (P(None, None), P(None, None, None)),
    (2, 2, 2): (P("tensor", "fsdp"), P(None, "tensor", "fsdp")),
    (1, 2, 4): (P("tensor", "fsdp"), P(None, "tensor", "fsdp")),
    (1, 2, 1, 4): (P(None, "fsdp"), P("expert", None, "fsdp")),
}


@pytest.mark.parametrize("shape", sorted(EXPECTED_SPECS))
def test_sharded_load_matches_single_device(tiny_hf_moe_dir, ref_moe, shape):
    ids, ref = ref_moe
    mesh = shd.make_mesh(shape)
    model = qwen3_5.load_hf(tiny_hf_moe_dir, mesh=mesh)
    # parameters really are distributed as the rules say, each device holding only its shard
    emb = model.model.embed_tokens.weight[...]
    experts = model.model.layers[0].mlp.experts.gate_up_proj[...]
    assert (emb.sharding.spec, experts.sharding.spec) == EXPECTED_SPECS[shape]
    for arr in (emb, experts):
        split = np.prod([mesh.shape[a] for part in arr.sharding.spec if part
                         for a in ((part,) if isinstance(part, str) else part)])
        assert np.prod(arr.addressable_shards[0].data.shape) * split == arr.size
    x = jax.device_put(jnp.asarray(ids), shd.batch_sharding(mesh, 2, shape=ids.shape))
    out = np.asarray(nnx.jit(lambda m, x: m(x))(model, x))
    np.testing.assert_allclose(out, ref, atol=1e-4)


def test_init_under_jit_with_out_shardings_and_golden_specs():
    cfg = qwen3_5.presets.get("tiny")
    mesh = shd.make_mesh((2, 2, 2))
    model = shd.init_sharded(lambda: qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0)), mesh)
    golden = shd.golden_shardings(nnx.state(model, nnx.Param), mesh)
    assert golden["model.embed_tokens.weight"] == "P('tensor', 'fsdp')"
    assert golden["model.layers.0.linear_attn.in_proj_qkv.weight"] == "P('tensor', 'fsdp')"
    assert golden["model.layers.1.self_attn.o_proj.weight"] == "P('fsdp', 'tensor')"
    assert golden["model.layers.0.linear_attn.A_log"] == "P(None,)"
    w = model.model.layers[1].mlp.down_proj.weight[...]
    assert w.sharding.spec == jax.sharding.PartitionSpec("fsdp", "tensor")
    assert len(w.addressable_shards) == 8 and w.addressable_shards[0].data.shape == (32, 64)
    # same values as an unsharded init with the same seed
    plain = qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0))
    np.testing.assert_allclose(np.asarray(w), np.asarray(plain.model.layers[1].mlp.down_proj.weight[...]), rtol=1e-5)
    # the learner's pure-dict parameter shardings are the placed weights' shardings
    placed = jax.tree.map(lambda x: x.sharding, nnx.to_pure_dict(nnx.state(model, nnx.Param)))
    assert shd.param_shardings(nnx.state(model, nnx.Param), mesh) == placed


def test_rules_drop_non_dividing_axes_and_name_missing_rules():
    mesh = shd.make_mesh((1, 2, 4))
    assert shd.logical_to_mesh(("kv_heads", "embed"), mesh, shape=(6, 64)) == jax.sharding.PartitionSpec(None, "fsdp")
    with pytest.raises(KeyError, match="no_such_axis"):
        shd.logical_to_mesh(("no_such_axis",), mesh)
    with pytest.raises(ValueError, match="needs 16 devices"):
        shd.make_mesh((4, 4))


def test_layer_inputs_follow_the_activation_embed_rule_between_layers_only():
    """``with_rules(activation_embed="tensor")`` splits a layer input's hidden dim over ``tensor``;
    other activations, the default rules and a table without the entry keep it whole."""
    mesh = shd.make_mesh((1, 2, 4))
    rules = shd.with_rules(activation_embed="tensor")
    assert dict(rules)["activation_embed"] == "tensor" and len(rules) == len(shd.TRAIN_RULES)
    with pytest.raises(KeyError, match="no_such_axis"):
        shd.with_rules(no_such_axis="tensor")
    x = jnp.zeros((2, 8, 64))
    for table, between, want in ((rules, True, P("fsdp", None, "tensor")), (rules, False, P("fsdp")),
                                 (None, True, P("fsdp")),
                                 (tuple(r for r in rules if r[0] != "activation_embed"), True, P("fsdp"))):
        tm = qwen3_5.presets.get("tiny")
        m = nnx.eval_shape(lambda: qwen3_5.Qwen3_5ForCausalLM(tm, rngs=nnx.Rngs(0))).set_mesh(mesh, table)
        got = jax.jit(lambda a: m.model.constrain(a, between_layers=between))(x).sharding.spec
        assert tuple(got) + (None,) * (3 - len(got)) == tuple(want) + (None,) * (3 - len(want)), (table, between, got)


def test_sharded_cache_extend_matches_single_device(tiny_hf_moe_dir, ref_moe):
    """Prefill + one decode step with model and cache on a (2,2,2) mesh == one device."""
    ids, _ = ref_moe
    ext = nnx.jit(lambda m, x, c, n: m.extend(x, c, n))
    single = qwen3_5.load_hf(tiny_hf_moe_dir)
    c0 = qwen3_5.init_cache(single.config, 8, 64)
    n = jnp.full((8,), 40, jnp.int32)
    ref, rc = ext(single, jnp.asarray(ids), c0, n)
    ref2, _ = ext(single, jnp.asarray(ids[:, :1]), rc, jnp.ones((8,), jnp.int32))
    mesh = shd.make_mesh((2, 2, 2))
    model = qwen3_5.load_hf(tiny_hf_moe_dir, mesh=mesh)
    cache = qwen3_5.shard_cache(c0, mesh)
    assert cache.k_LBSKH.sharding.spec[1] == ("data", "fsdp")
    out, cache = ext(model, jnp.asarray(ids), cache, n)
    out2, _ = ext(model, jnp.asarray(ids[:, :1]), cache, jnp.ones((8,), jnp.int32))
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=1e-4)
    np.testing.assert_allclose(np.asarray(out2), np.asarray(ref2), atol=1e-4)
