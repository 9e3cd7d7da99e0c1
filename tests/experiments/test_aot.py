"""Ahead-of-time checks of the presets and of ``model.hf_path`` loading, on CPU fake devices.

* Memory budgets: every accelerator preset's GRPO train step compiled for its mesh at its real
  ``pack_len``, full depth (``train.aot.budget``; ``Learner.abstract``, no weights), its
  per-device peak from ``memory_analysis()`` against the preset's chip with 10% headroom; no
  ``T x S`` buffer; weight all-gathers in the compute dtype (FSDP meshes) or no weight ever
  assembled whole (the tensor-parallel mesh of ``harness_r1/gpu8``). A preset that does not fit says so
  in its docstring with the figure. One subprocess per device count (4 and 16 fake devices).
* The train step lowers for TPU and CUDA (``jax.export``) with the Pallas attention kernels, and
  the gather / reduce dtypes hold in the partitioned HLO of a small model.
* A preset's documented ``--config.model.hf_path=...`` command loads the checkpoint with the
  config's dtypes and runtime knobs straight into the learner's shardings, and the abstract
  learner built from the same config has exactly the real one's layout (a tiny HF dir on 4
  fake devices stands in for the 4B checkpoint).
"""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from experiments.configs import gpu8_qwen35_4b_dbbench
from harness_jax.train import spec


# every accelerator preset's distinct train step (presets sharing a step share its budget):
# (module, get_config argument, fake devices); the presets listed in the comments compile the
# same program (same model, mesh, pack_len, micro-batches and memory plan; for the Harness-S
# presets tests/harness_s/test_configs.py checks it)
GPU_STEPS = [
    ("experiments.configs.gpu8_qwen35_4b_dbbench", ""),     # + harness_s/dbbench_gpu8
    ("experiments.configs.gpu8_qwen35_4b_appworld", ""),    # + harness_s/appworld_gpu8, swe_gpu8
    ("experiments.configs.harness_r1.gpu8", "dbbench"),   # every benchmark argument
]
TPU_STEPS = [
    ("experiments.configs.tpu_qwen35_9b", ""),              # + harness_s/dbbench_tpu
    ("experiments.configs.harness_r1.tpu", "dbbench"),
]


def _check_budget(module, rep):
    """What every preset must show at its real pack_len, and its docstring's fit statement."""
    import importlib

    assert rep["seq_len"] >= 8192 and rep["layers"] == 32, rep
    assert rep["txs_buffers"] == [], (module, rep["txs_buffers"])       # nothing T x S
    if rep["fsdp_devices"] > 1:       # FSDP: every weight is gathered per layer, in the compute dtype
        assert set(rep["gather_dtypes"]) == {"bf16"}, (module, rep["gather_dtypes"])
        # and the presets' weight gradients reduce in their reduce_scatter_dtype, float32, at least
        # one per layer weight (4B at 8k: 26 f32 and 3 bf16 weight-sized all-reduces; the bfloat16
        # setting: test_weights_gather_in_the_compute_dtype_and_gradients_reduce_...)
        assert rep["weight_reduce_dtypes"].get("f32", 0) >= 8, (module, rep["weight_reduce_dtypes"])
    else:                             # tensor parallel only: weights stay on their shards, never assembled
        assert rep["mesh_shape"]["tensor"] > 1 and rep["whole_weight_gathers"] == {}, (module, rep)
    import re

    doc = " ".join(importlib.import_module(module).__doc__.split())
    m = re.search(r"AOT budget: (fits|does not fit) \((\d+) GB per device", doc)
    assert m, f"{module}: the docstring must state 'AOT budget: fits|does not fit (N GB per device ...'"
    assert (m.group(1) == "fits") == rep["fits"], (module, rep["peak_gb"], rep["budget_gb"])
    # the figure it states is this compile's (within 20%: XLA's buffer assignment moves with versions)
    assert abs(int(m.group(2)) - rep["peak_gb"]) <= 0.2 * rep["peak_gb"], (module, m.group(2), rep["peak_gb"])


@pytest.mark.slow
def test_gpu_presets_memory_budget_at_their_real_pack_len():
    from tests.experiments.aot_lowering import budgets_in_subprocess

    reps = budgets_in_subprocess(GPU_STEPS, 4)
    for module, rep in reps.items():
        print(module, json.dumps({k: rep[k] for k in ("peak_gb", "budget_gb", "fits", "compile_s")}))
        assert rep["chip"] == "h100"
        assert rep["mesh_shape"] == ({"data": 1, "fsdp": 1, "tensor": 4, "expert": 1} if module.endswith("r1.gpu8")
                                     else {"data": 1, "fsdp": 4, "tensor": 1, "expert": 1}), (module, rep["mesh_shape"])
        if module.endswith("r1.gpu8"):    # the 9B engineer, 32 micro-batches of one row (K=8 x 4 packets)
            assert 8.5e9 < rep["num_params"] < 9.5e9 and rep["rows"] == 32, (rep["num_params"], rep["rows"])
        else:                             # the 4B policy
            assert 3.5e9 < rep["num_params"] < 5.0e9, (module, rep["num_params"])
        _check_budget(module, rep)


@pytest.mark.slow
def test_tpu_presets_memory_budget_at_their_real_pack_len():
    from tests.experiments.aot_lowering import budgets_in_subprocess

    reps = budgets_in_subprocess(TPU_STEPS, 16)
    for module, rep in reps.items():
        print(module, json.dumps({k: rep[k] for k in ("peak_gb", "budget_gb", "fits", "compile_s")}))
        assert rep["chip"] == "v5p" and rep["mesh_shape"]["fsdp"] == 16
        if module.endswith("r1.tpu"):     # the 9B engineer, 32 micro-batches of one row
            assert 8.5e9 < rep["num_params"] < 9.5e9 and rep["rows"] == 32, (rep["num_params"], rep["rows"])
        _check_budget(module, rep)


def test_txs_detector_flags_score_buffers_but_not_activations():
    from harness_jax.train import aot

    hlo = "%a = f32[1,4,4,8192,8192]{4,3,2,1,0} fusion(%x), %b = bf16[1,8192,8192]{2,1,0} add(%y, %z)"
    assert aot.txs_buffers(hlo, 8192, widths={8192}) == ["f32[1,4,4,8192,8192]"]
    assert aot.txs_buffers(hlo, 8192, widths=()) == ["bf16[1,8192,8192]", "f32[1,4,4,8192,8192]"]
    assert aot.txs_buffers("%c = f32[1,32768,4096] add(%a, %b)", 32768, widths={4096}) == []


def _tiny_mesh_learner(devices, **cfg_kw):
    from flax import nnx

    from harness_jax import sharding
    from harness_jax.models import qwen3_5
    from harness_jax.rl.learner import Learner, LearnerConfig

    cfg = qwen3_5.presets.get("tiny", scan_layers=True, head_dim=128, num_attention_heads=2,
                              num_key_value_heads=1, **cfg_kw)
    mesh = sharding.make_mesh((1, len(devices), 1, 1), devices=devices)
    m = nnx.eval_shape(lambda: qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0), dtype="bfloat16",
                                                         param_dtype="float32")).set_mesh(mesh)
    ln = Learner.abstract(m, LearnerConfig(), mesh=mesh)
    state = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), ln.state,
                         ln.state_sharding)
    return ln, state


@pytest.mark.slow
@pytest.mark.parametrize("platform,impl,marker", [("tpu", "splash", "tpu_custom_call"),
                                                  ("cuda", "pallas_gpu", "__gpu$xla.gpu.triton")])
def test_train_step_lowers_for_tpu_and_cuda_on_cpu(platform, impl, marker):
    """``jax.export`` lowers the whole GRPO train step (scanned layers, remat "offload", the
    platform's Pallas attention, FSDP over 2 devices) for the accelerator: a lowering error there
    shows up here. The kernel is in the module as the platform's custom call, and the offloaded
    layer inputs are placed in pinned host memory."""
    from jax import export

    from harness_jax.models.qwen3_5 import attention as A

    ln, state = _tiny_mesh_learner(jax.devices()[:2], remat="offload", attention_impl=impl)
    with A.pallas_interpret(False):
        exp = export.export(ln._train_step, platforms=(platform,), disabled_checks=[
            export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")])(state, ln.batch_spec(2, 256))
    text = exp.mlir_module()
    assert marker in text
    assert '_xla_buffer_placement = "pinned_host"' in text


@pytest.mark.slow
def test_weights_gather_in_the_compute_dtype_and_gradients_reduce_in_the_configured_dtype():
    """After SPMD partitioning (before XLA:CPU turns bf16 collectives into fp32 ones), every weight
    all-gather is bf16 (cast on the shard, then gathered), and the weight gradients' reductions
    run in ``reduce_scatter_dtype`` = bfloat16, not the default float32 (the default's fp32
    reductions are asserted on every FSDP preset's budget compile, ``_check_budget``; one compile
    here instead of one per dtype saves ~40 s of CI)."""
    import glob
    import tempfile

    from harness_jax import compile_cache
    from harness_jax.train import aot

    for rsd, want in (("bfloat16", "bf16"),):
        ln, state = _tiny_mesh_learner(jax.devices()[:4], remat="full", attention_impl="xla",
                                       reduce_scatter_dtype=rsd)
        d = tempfile.mkdtemp()
        with compile_cache.bypassed():       # a cache hit would dump no passes
            ln._train_step.lower(state, ln.batch_spec(4, 128)).compile(
                compiler_options={"xla_dump_to": d, "xla_dump_hlo_pass_re": "spmd-partitioning"})
        text = open(sorted(glob.glob(d + "/*after_spmd-partitioning*"))[-1]).read()
        gathers = aot._collectives(text, "all-gather", 64 * 64)
        reduces = aot._collectives(text, "all-reduce", 64 * 64)
        assert gathers and set(gathers) == {"bf16"}, gathers
        assert reduces.get(want, 0) >= 8, (rsd, reduces)     # >= one per layer weight


def test_hf_path_loads_with_the_config_dtypes_into_the_learner_shardings(tiny_hf_dense_dir):
    """Defect: ``model.hf_path`` loading dropped remat, scan_layers, param_dtype and the mesh (bf16
    master weights, no remat, everything on one device)."""
    from flax import nnx

    from harness_jax.rl import policy
    from harness_jax.rl.learner import Learner
    from harness_jax.train import aot

    c = gpu8_qwen35_4b_dbbench.get_config()          # bf16 compute, fp32 master, remat, scan, fsdp=4
    c.model.hf_path = tiny_hf_dense_dir
    c.rl.micro_batches, c.rl.mini_batches, c.rl.logit_chunk = 1, 1, 0
    run = spec.resolve(c, num_devices=4)
    devices = jax.devices()[:4]
    mesh, rules = policy.make_mesh(run.mesh, devices), policy.mesh_rules(run.mesh)
    model = policy.build_model(run.model, mesh, rules)
    assert model.config.remat == "full" and model.config.scan_layers
    assert model.model.cycles[0].linear_attn.in_proj_qkv.weight.shape[0] == 2     # 2 scanned cycles
    params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    assert {x.dtype for x in jax.tree.leaves(params)} == {jnp.dtype(jnp.float32)}   # fp32 master weights
    assert model.dtype == jnp.bfloat16                                              # bf16 compute
    learner = Learner(model, run.learner, mesh=mesh, rules=rules)
    for x, s in zip(jax.tree.leaves(params), jax.tree.leaves(learner.param_sharding)):
        assert x.sharding == s                     # loaded straight into the learner's layout
    emb = params["model"]["embed_tokens"]["weight"]
    assert emb.sharding.spec == P(None, "fsdp") and emb.addressable_shards[0].data.shape == (512, 16)
    # the weights are the checkpoint's
    from harness_jax.models import qwen3_5
    ref = qwen3_5.load_hf(tiny_hf_dense_dir)
    np.testing.assert_array_equal(np.asarray(emb), np.asarray(ref.model.embed_tokens.weight[...]))
    # the AOT path builds the same learner without weights from the same config
    ab, _ = aot.abstract_learner(run, devices)
    for x, y in zip(jax.tree.leaves(ab.state), jax.tree.leaves(learner.state)):
        assert (x.shape, x.dtype, x.sharding) == (y.shape, y.dtype, y.sharding)
    rep = aot.lower_train_step(run, seq_len=64, devices=devices, compile=False)
    assert rep.num_params == learner.num_params and rep.rows == 4
