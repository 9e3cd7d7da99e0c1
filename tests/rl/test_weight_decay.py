"""Weight decay reaches the same parameters whether or not the decoder layers are scanned: a
scanned decoder stacks every layer's parameters on a leading ``layers`` axis, so a norm scale or
a Gated DeltaNet gate becomes rank 2 and an ``ndim >= 2`` rule would decay it. (~3 s)"""
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from harness_jax.models import qwen3_5
from harness_jax.rl import learner as L


def _state(scan):
    model = qwen3_5.Qwen3_5ForCausalLM(qwen3_5.presets.get("tiny", scan_layers=scan), rngs=nnx.Rngs(0))
    return nnx.state(model, nnx.Param)


def _by_name(mask, scan):
    """{(leaf path without the layer index)}: decayed? -- one entry per parameter kind."""
    out = {}
    for path, v in jax.tree_util.tree_leaves_with_path(mask):
        keys = [getattr(k, "key", getattr(k, "idx", None)) for k in path]
        if scan and "cycles" in keys:      # ['model', 'cycles', j, ...] -> ['model', 'layer', ...]
            i = keys.index("cycles")
            keys = keys[:i] + ["layer"] + keys[i + 2:]
        elif "layers" in keys:             # ['model', 'layers', i, ...]
            i = keys.index("layers")
            keys = keys[:i] + ["layer"] + keys[i + 2:]
        out.setdefault(tuple(keys), set()).add(bool(v))
    return out


def test_scanned_and_unscanned_decoders_decay_the_same_parameters():
    plain, scanned = _by_name(L.decayed_params(_state(False)), False), _by_name(L.decayed_params(_state(True)), True)
    assert plain == scanned
    flat = {k: v.pop() for k, v in scanned.items()}
    assert all(len(v) == 0 for v in scanned.values())
    assert not flat[("model", "layer", "input_layernorm", "weight")]      # a norm: never decayed
    assert not flat[("model", "layer", "linear_attn", "A_log")]           # a gate: never decayed
    assert flat[("model", "layer", "mlp", "down_proj", "weight")]         # a matrix: decayed
    assert flat[("lm_head", "weight")]


def test_zero_gradient_step_shrinks_matrices_and_leaves_norms_on_a_scanned_decoder():
    params = nnx.to_pure_dict(_state(True))
    tx, _ = L.make_optimizer(L.OptimizerConfig(learning_rate=1e-2, weight_decay=0.5, clip_norm=None),
                             L.decayed_params(_state(True)))
    zeros = jax.tree.map(jnp.zeros_like, params)
    new = jax.jit(lambda g, p: jax.tree.map(lambda a, u: a + u, p, tx.update(g, tx.init(p), p)[0]))(zeros, params)
    cyc = params["model"]["cycles"][0]
    ncyc = new["model"]["cycles"][0]
    np.testing.assert_array_equal(ncyc["input_layernorm"]["weight"], cyc["input_layernorm"]["weight"])
    np.testing.assert_array_equal(ncyc["linear_attn"]["A_log"], cyc["linear_attn"]["A_log"])
    w, nw = cyc["mlp"]["down_proj"]["weight"], ncyc["mlp"]["down_proj"]["weight"]
    np.testing.assert_allclose(nw, w * (1 - 1e-2 * 0.5), rtol=1e-6)
