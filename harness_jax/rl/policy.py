"""The policy a run trains: its Qwen3.5 config, the learner's mesh, the model with its initial
weights on that mesh, and the learner around it, built from the run's ``model`` and ``mesh``
sections (``train.schema.ModelSection``, ``MeshSection``) and the learner's ``LearnerConfig``.

``policy_model`` is the one way weights are loaded: an HF directory, a training run's Orbax
checkpoint (its parameters only), or the section's own (``hf_path``, or a random init under
``jit``, with no full copy on one device); training (``build_learner``), evaluation and
Harness-R1's engineer arms all load through it. The callers build the mesh and rules
(``make_mesh``, ``mesh_rules``) and resolve where the weights are (``paths.weights_source``)
once, at their entry, and hand those in. ``abstract_model`` is the same model without
weights (the AOT checks).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from absl import logging
from flax import nnx

from harness_jax import sharding
from harness_jax.models import qwen3_5
from harness_jax.rl.checkpoint import restore_params
from harness_jax.rl.learner import Learner

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}   # model, parameter and cache dtypes by name


def runtime_overrides(model) -> dict:
    """The runtime knobs of the model config that come from the ``model`` section (with or
    without hf_path): rematerialisation, layer scanning, the attention implementation and its
    tiles, the dtype gradients of FSDP-gathered weights are reduce-scattered in (the memory
    plan), and the set kernel choices of ``model.arch`` (Gated DeltaNet, MoE)."""
    return dict(remat=model.remat, scan_layers=bool(model.scan_layers), attention_impl=model.attention,
                attention_block_q=int(model.attention_block_q), attention_block_kv=int(model.attention_block_kv),
                reduce_scatter_dtype=model.reduce_scatter_dtype, **model.arch.kernels())


def model_config(model):
    """The run's Qwen3_5Config from the ``model`` section: ``hf_path``'s config.json (its
    architecture is the truth) or the named preset with the ``arch`` fields, plus the runtime
    knobs (``runtime_overrides``)."""
    runtime = runtime_overrides(model)
    if model.hf_path:
        return qwen3_5.Qwen3_5Config.from_hf(model.hf_path, **runtime)
    over = model.arch.overrides()
    if "num_hidden_layers" in over and "layer_types" not in over:
        over["layer_types"] = ()      # a new depth gets the default 3 linear : 1 full pattern
    over.update(runtime)
    return qwen3_5.presets.get(model.preset).replace(**over)


def make_mesh(mesh, devices=None):
    """The learner mesh: ``mesh.shape`` over ``devices`` (default: the first ``mesh.num_devices``
    of ``jax.devices()``, all when -1)."""
    if devices is None:
        n = int(mesh.num_devices)
        devices = jax.devices() if n < 0 else jax.devices()[:n]
    return sharding.make_mesh(tuple(mesh.shape), tuple(mesh.axes), devices=list(devices))


def _model_kwargs(model):
    return dict(dtype=DTYPES[model.dtype], param_dtype=DTYPES[model.param_dtype])


def abstract_model(model, mesh, cfg=None, rules=None):
    """The policy without weights (``nnx.eval_shape``): shapes and dtypes only, on ``mesh``
    (activations pinned to batch sharding, weights gathered per layer in the compute dtype);
    ``rules`` default to ``sharding.TRAIN_RULES``."""
    cfg = model_config(model) if cfg is None else cfg
    kw = _model_kwargs(model)
    abstract = nnx.eval_shape(lambda: qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0), **kw))
    return abstract.set_mesh(mesh, sharding.TRAIN_RULES if rules is None else rules)


def build_model(model, mesh, rules, cfg=None, *, seed: int = 0):
    """The policy as an nnx module whose parameters are already on ``mesh`` with the rules'
    shardings (the learner's): Hugging Face weights when ``model.hf_path`` is set (with the
    section's dtypes and runtime knobs), else a random init from ``seed`` under ``jit`` (no full
    copy of the weights on one device)."""
    if model.hf_path:
        return load_hf_model(model, model.hf_path, mesh, rules)
    cfg = model_config(model) if cfg is None else cfg
    kw = _model_kwargs(model)
    built = sharding.init_sharded(lambda: qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(seed), **kw), mesh, rules)
    return built.set_mesh(mesh, rules)   # as load_hf does: block-boundary batch sharding, MoE expert parallelism


def load_hf_model(model, path, mesh, rules):
    """A Hugging Face checkpoint with the section's dtypes and runtime knobs
    (``runtime_overrides``), loaded shard by shard straight onto ``mesh`` with the rules' shardings."""
    logging.info("loading policy weights from %s", path)
    return qwen3_5.load_hf(str(path), dtype=model.dtype, param_dtype=model.param_dtype, mesh=mesh, rules=rules,
                           config_overrides=runtime_overrides(model))


def policy_model(model, source, mesh, rules, *, seed: int = 0, cfg=None):
    """``(module, label)``: the policy on ``mesh`` with the rules' shardings, from ``source``
    (``paths.weights_source``, resolved by the caller): ``("hf", dir)`` a Hugging Face directory,
    ``("orbax", dir)`` a training run's checkpoints dir (its latest parameters on the section's
    model), None the ``model`` section's own weights (``model.hf_path`` or a random init from
    ``seed``). The one way the learner's initial weights and an evaluated policy are loaded."""
    if source is None:
        return build_model(model, mesh, rules, cfg, seed=seed), "config"
    kind, directory = source
    if kind == "hf":
        return load_hf_model(model, directory, mesh, rules), f"hf:{directory}"
    graphdef, state, rest = nnx.split(abstract_model(model, mesh, cfg, rules), nnx.Param, ...)
    abstract = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                            nnx.to_pure_dict(state), sharding.param_shardings(state, mesh, rules))
    params, step = restore_params(directory, abstract)
    nnx.replace_by_pure_dict(state, params)
    if jax.tree.leaves(nnx.to_pure_dict(rest)):
        rest = nnx.state(build_model(model, mesh, rules, cfg, seed=seed), nnx.Not(nnx.Param))
    logging.info("policy weights from %s (step %d)", directory, step)
    return nnx.merge(graphdef, state, rest), f"orbax:{directory}@{step}"


def mesh_rules(mesh):
    """The learner's logical-axis rules table of the ``mesh`` section (``sharding.TRAIN_RULES``
    unless ``mesh.rules`` names others)."""
    if mesh.rules is None:
        return sharding.TRAIN_RULES
    return tuple((k, tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in mesh.rules)


def build_learner(model, mesh, rules, learner_config, *, source=None, seed: int = 0):
    """``(learner, model_config)``: the run's policy (``policy_model`` of ``source``, the
    caller's ``paths.weights_source`` of ``model.init_from``; None = the ``model`` section's
    ``hf_path`` or a random init from ``seed``) in a ``Learner`` with ``learner_config`` on
    ``mesh`` with ``rules`` (``make_mesh``, ``mesh_rules``), counting the model config's
    analytic training FLOPs per token."""
    cfg = model_config(model)
    module, _ = policy_model(model, source, mesh, rules, seed=seed, cfg=cfg)
    return Learner(module, learner_config, mesh=mesh, rules=rules, flops_per_token=cfg.flops_per_token), cfg
