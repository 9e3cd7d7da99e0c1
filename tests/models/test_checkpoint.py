"""Checkpoint I/O: export -> transformers load, ConditionalGeneration layout, per-expert vs fused
MoE tensors, malformed checkpoints, scan/remat equivalence and a bf16 run."""
import json
import os
import struct

import numpy as np
import pytest
import torch
import jax
import jax.numpy as jnp
from flax import nnx

from harness_jax.models import qwen3_5

IDS = np.random.default_rng(7).integers(3, 512, size=(2, 40))


@nnx.jit
def _fwd(model, ids):
    return model(ids)


def _hf_logits(path, ids=IDS, dtype=torch.float32):
    import transformers
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
    with torch.no_grad():
        return hf(torch.tensor(ids)).logits.float().numpy()


def _write_st(path, tensors):
    """Minimal safetensors writer for crafting (malformed) test checkpoints."""
    header, off, blobs = {}, 0, []
    for k, a in tensors.items():
        b = np.ascontiguousarray(a, np.float32).tobytes()
        header[k] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def _all_tensors(d):
    from safetensors.numpy import load_file
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            out.update(load_file(os.path.join(d, f)))
    return out


@pytest.mark.parametrize("which", ["dense", "moe"])
def test_save_hf_roundtrip_transformers_identical_logits(which, tiny_hf_dense_dir, tiny_hf_moe_dir, tmp_path):
    src = tiny_hf_dense_dir if which == "dense" else tiny_hf_moe_dir
    model = qwen3_5.load_hf(src, config_overrides=dict(scan_layers=True))  # stacked params un-stack on export
    out = qwen3_5.save_hf(model, tmp_path / "export", max_shard_bytes=200_000)  # forces several shards
    assert os.path.exists(os.path.join(out, "model.safetensors.index.json"))
    np.testing.assert_allclose(_hf_logits(out), _hf_logits(src), atol=1e-6)
    ours = np.asarray(_fwd(model, jnp.asarray(IDS)))
    np.testing.assert_allclose(ours, _hf_logits(src), atol=1e-4)


def test_conditional_generation_layout_and_fused_experts(tiny_hf_moe_dir, tmp_path):
    """model.language_model.* names, a vision tensor to skip, fused expert tensors: same logits."""
    t = _all_tensors(tiny_hf_moe_dir)
    cfg = json.load(open(os.path.join(tiny_hf_moe_dir, "config.json")))
    new = {}
    X = cfg["num_experts"]
    for k, v in t.items():
        k2 = k.replace("model.", "model.language_model.", 1)
        if ".mlp.experts." in k:
            base, rest = k2.split(".mlp.experts.")
            e, proj = rest.split(".")[0], rest.split(".")[1]
            if int(e) == 0:
                g = np.stack([t[k.split(".mlp.experts.")[0] + f".mlp.experts.{x}.gate_proj.weight"] for x in range(X)])
                u = np.stack([t[k.split(".mlp.experts.")[0] + f".mlp.experts.{x}.up_proj.weight"] for x in range(X)])
                d = np.stack([t[k.split(".mlp.experts.")[0] + f".mlp.experts.{x}.down_proj.weight"] for x in range(X)])
                new[base + ".mlp.experts.gate_up_proj"] = np.concatenate([g, u], axis=1)
                new[base + ".mlp.experts.down_proj"] = d
            continue
        new[k2] = v
    new["model.visual.patch_embed.proj.weight"] = np.ones((4, 3), np.float32)
    d = tmp_path / "cg"
    d.mkdir()
    _write_st(d / "model.safetensors", new)
    json.dump({"model_type": "qwen3_5_moe", "architectures": ["Qwen3_5MoeForConditionalGeneration"],
               "text_config": {**cfg, "model_type": "qwen3_5_moe_text"}, "tie_word_embeddings": True},
              open(d / "config.json", "w"))
    model = qwen3_5.load_hf(d)
    ref = qwen3_5.load_hf(tiny_hf_moe_dir)
    np.testing.assert_array_equal(np.asarray(model.model.layers[0].mlp.experts.gate_up_proj[...]),
                                  np.asarray(ref.model.layers[0].mlp.experts.gate_up_proj[...]))
    np.testing.assert_allclose(np.asarray(_fwd(model, jnp.asarray(IDS))), _hf_logits(tiny_hf_moe_dir), atol=1e-4)


def test_malformed_checkpoints_name_the_tensor(tiny_hf_dense_dir, tmp_path):
    t = _all_tensors(tiny_hf_dense_dir)
    cfg_path = os.path.join(tiny_hf_dense_dir, "config.json")

    def make(name, tensors, cfg=None):
        d = tmp_path / name
        d.mkdir()
        _write_st(d / "model.safetensors", tensors)
        c = json.load(open(cfg_path))
        c.update(cfg or {})
        json.dump(c, open(d / "config.json", "w"))
        return d

    missing = dict(t)
    del missing["model.layers.2.linear_attn.A_log"]
    with pytest.raises(qwen3_5.CheckpointError, match=r"model\.layers\.2\.linear_attn\.A_log"):
        qwen3_5.load_hf(make("missing", missing))
    bad = dict(t)
    bad["model.layers.1.self_attn.k_proj.weight"] = np.zeros((5, 64), np.float32)
    with pytest.raises(qwen3_5.CheckpointError, match=r"k_proj\.weight.*\(5, 64\).*\(32, 64\)"):
        qwen3_5.load_hf(make("shape", bad))
    extra = dict(t)
    extra["model.layers.9.mlp.up_proj.weight"] = np.zeros((2, 2), np.float32)
    with pytest.raises(qwen3_5.CheckpointError, match=r"model\.layers\.9\.mlp\.up_proj\.weight"):
        qwen3_5.load_hf(make("extra", extra))
    with pytest.raises(qwen3_5.ConfigError, match=r"model_type='llama'"):
        qwen3_5.load_hf(make("mtype", t, {"model_type": "llama"}))
    with pytest.raises(qwen3_5.ConfigError, match=r"layer_types"):
        qwen3_5.load_hf(make("ltypes", t, {"layer_types": ["linear_attention"] * 3}))


def test_scan_layers_and_remat_match_unrolled_including_gradients(tiny_hf_dense_dir):
    base = qwen3_5.load_hf(tiny_hf_dense_dir)
    scan = qwen3_5.load_hf(tiny_hf_dense_dir, config_overrides=dict(scan_layers=True, remat="full"))
    assert scan.model.cycles[0].linear_attn.in_proj_qkv.weight.shape[0] == 2  # 2 cycles stacked

    def loss(model, ids):
        logp = jax.nn.log_softmax(model(ids)[:, :-1])
        return -jnp.mean(jnp.take_along_axis(logp, ids[:, 1:, None], -1))

    grad_fn = nnx.jit(nnx.value_and_grad(loss))
    ids = jnp.asarray(IDS)
    l0, g0 = grad_fn(base, ids)
    l1, g1 = grad_fn(scan, ids)
    assert abs(float(l0) - float(l1)) < 1e-5
    a = np.asarray(g0.model.layers[2].linear_attn.in_proj_qkv.weight[...])
    b = np.asarray(g1.model.cycles[0].linear_attn.in_proj_qkv.weight[...][1])
    np.testing.assert_allclose(a, b, atol=1e-6)
    assert np.abs(a).max() > 1e-5


def test_bf16_within_stated_tolerance(tiny_hf_dense_dir):
    """bf16 weights/compute (GDN state and softmax stay fp32): logits within 0.1 of fp32 HF and
    the argmax agrees on >= 90% of positions."""
    model = qwen3_5.load_hf(tiny_hf_dense_dir, dtype="bfloat16")
    assert model.model.layers[0].mlp.up_proj.weight[...].dtype == jnp.bfloat16
    ours = np.asarray(_fwd(model, jnp.asarray(IDS)), np.float32)
    ref = _hf_logits(tiny_hf_dense_dir)
    assert np.abs(ours - ref).max() < 0.1
    assert (ours.argmax(-1) == ref.argmax(-1)).mean() >= 0.9


def test_64_expert_export_and_load_touch_each_stacked_tensor_once(tmp_path, monkeypatch):
    """A 64-expert model: ``save_hf`` fetches every parameter to host exactly once (a stacked
    expert tensor once per layer, its 64 experts written as views of it; before, once per expert),
    with peak host allocations (tracemalloc) under 2x the largest stacked tensor; ``load_hf``
    reads the per-expert tensors of a stacked parameter straight into one array (peak 1x the
    tensor plus buffers; the per-expert pieces, their stack and a dtype copy made it 2x before).
    The round trip is exact. ``bench_moe.py --sections checkpoint`` times old against new."""
    import tracemalloc
    from harness_jax.models.qwen3_5 import checkpoint as ckpt
    cfg = qwen3_5.presets.get("tiny_moe", num_experts=64, num_experts_per_tok=4)
    model = qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0))
    params = nnx.to_flat_state(nnx.state(model, nnx.Param))
    total = sum(v[...].nbytes for _, v in params)
    largest = max(v[...].nbytes for _, v in params)
    assert largest == 64 * 2 * 32 * 64 * 4                 # the stacked gate_up of one layer
    fetched, real = [], jax.device_get

    def counting(x):
        out = real(x)
        fetched.append(int(np.asarray(out).nbytes))
        return out

    monkeypatch.setattr(jax, "device_get", counting)
    tracemalloc.start()
    qwen3_5.save_hf(model, tmp_path)
    _, save_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    monkeypatch.setattr(jax, "device_get", real)
    assert sum(fetched) == total, f"fetched {sum(fetched)} bytes for {total} bytes of parameters"
    assert save_peak < 2 * largest, (save_peak, largest)
    reader = ckpt._SourceReader(ckpt.read_safetensors_index(str(tmp_path)), "model.")
    for kind, shape in (("gate_up", (64, 64, 64)), ("down", (64, 64, 32))):
        src = ckpt.ParamSource(("model", "layers", "0", "mlp", "experts", f"{kind}_proj"),
                               f"model.layers.0.mlp.experts.{kind}_proj", None, kind)
        tracemalloc.start()
        arr = ckpt._build_callback(reader, src, cfg, shape, np.dtype(np.float32))((slice(None),) * 3)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert arr.shape == shape and peak < 1.25 * arr.nbytes, (kind, peak, arr.nbytes)
    loaded = qwen3_5.load_hf(tmp_path)
    got = dict(nnx.to_flat_state(nnx.state(loaded, nnx.Param)))
    for path, v in params:
        np.testing.assert_array_equal(np.asarray(got[path][...]), np.asarray(v[...]))
