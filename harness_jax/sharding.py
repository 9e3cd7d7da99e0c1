"""Device meshes and logical-axis sharding rules for harness_jax models.

Every model parameter carries logical axis names in its ``out_sharding`` metadata (e.g.
``("vocab", "embed")``). A *rules table* maps each logical name to zero or more mesh axes of a
4-axis mesh ``("data", "fsdp", "tensor", "expert")``; ``logical_to_mesh`` turns names into a
``PartitionSpec`` for a given mesh. A mesh axis that does not divide the dimension is dropped
(replicated) so any config runs on any mesh; ``golden_shardings`` prints the result.
"""
from __future__ import annotations

import functools
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from flax import nnx

MESH_AXES = ("data", "fsdp", "tensor", "expert")

Rules = tuple  # tuple of (logical_name, mesh_axis | tuple of mesh axes | None)

# Training: weights FSDP-sharded on the hidden dim and tensor-parallel on heads/mlp/vocab;
# experts on the expert axis; activations' batch on data x fsdp.
TRAIN_RULES: Rules = (
    ("batch", ("data", "fsdp", "expert")),
    ("embed", "fsdp"),
    ("vocab", "tensor"),
    ("mlp", "tensor"),
    ("q_heads", "tensor"),
    ("kv_heads", "tensor"),
    ("linear_conv", "tensor"),
    ("linear_v", "tensor"),
    ("linear_heads", None),
    ("experts", "expert"),
    ("expert_mlp", "tensor"),
    ("norm", None),
    ("layers", None),
    ("cache_seq", None),
    ("kv_heads_cache", "tensor"),
    ("linear_heads_cache", "tensor"),
    # the hidden dim of a decoder layer's input [B, T, D] between layers (None: whole on every
    # device; "tensor": each tensor shard holds D / tensor of it, so the layer inputs kept for the
    # backward and the residual stream are split with the weights)
    ("activation_embed", None),
)

# Sampling: no FSDP (weights replicated over data/fsdp, sharded over tensor/expert only).
SAMPLE_RULES: Rules = tuple((k, None if v == "fsdp" else v) for k, v in TRAIN_RULES)

DEFAULT_RULES = TRAIN_RULES


def with_rules(base: Optional[Rules] = None, **overrides) -> Rules:
    """``base`` (default ``TRAIN_RULES``) with the mesh axes of some logical names replaced, e.g.
    ``with_rules(activation_embed="tensor")`` (a full table, for ``config.mesh.rules``)."""
    base = TRAIN_RULES if base is None else base
    names = {k for k, _ in base}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise KeyError(f"with_rules: unknown logical axes {unknown}; the table has {sorted(names)}")
    return tuple((k, overrides.get(k, v)) for k, v in base)


def has_rule(rules: Optional[Rules], name: str) -> bool:
    """Whether ``rules`` (default ``DEFAULT_RULES``) has an entry for the logical ``name``."""
    return any(k == name for k, _ in (DEFAULT_RULES if rules is None else rules))


def resolve_mesh_shape(shape: Sequence[int], num_devices: int) -> tuple[int, ...]:
    """``shape`` with its (at most one) ``-1`` entry filled so that the product is ``num_devices``.

    The one place a ``-1`` mesh axis is resolved (``make_mesh``, the learner, the experiment
    builders and config validation all use it).
    """
    shape = tuple(int(s) for s in shape)
    if shape.count(-1) > 1 or any(s == 0 or s < -1 for s in shape):
        raise ValueError(f"mesh shape {shape}: every entry must be >= 1, with at most one -1 "
                         "(which takes the remaining devices)")
    known = int(np.prod([s for s in shape if s != -1], dtype=np.int64))
    if -1 not in shape:
        return shape
    if num_devices % known:
        raise ValueError(f"mesh shape {shape}: the fixed axes ({known} devices) do not divide the "
                         f"{num_devices} devices; choose axis sizes whose product divides {num_devices}")
    return tuple(num_devices // known if s == -1 else s for s in shape)


def make_mesh(shape: Sequence[int] = (1, -1, 1, 1), axes: Sequence[str] = MESH_AXES, devices=None) -> Mesh:
    """A mesh of ``shape`` over the first ``prod(shape)`` of ``devices`` (default: all global
    devices); missing trailing axes get size 1 and one ``-1`` entry takes the remaining devices.

    ``make_mesh((2, 2, 2))`` -> data=2, fsdp=2, tensor=2, expert=1.
    """
    axes = tuple(axes)
    devices = list(jax.devices() if devices is None else devices)
    shape = tuple(int(s) for s in shape)
    if len(shape) > len(axes):
        raise ValueError(f"make_mesh: shape {shape} has more entries than axes {axes}")
    shape = resolve_mesh_shape(shape + (1,) * (len(axes) - len(shape)), len(devices))
    n = int(np.prod(shape))
    if n > len(devices):
        raise ValueError(f"make_mesh: shape {shape} needs {n} devices but only {len(devices)} are available")
    return Mesh(np.asarray(devices[:n]).reshape(shape), axes)


def batch_axes(mesh: Mesh, rules: Optional[Rules] = None) -> tuple[str, ...]:
    """Mesh axes the batch (rows) dimension is split over: the rules' ``batch`` entry, minus axes
    of size 1. Packed batches need a row count divisible by the product of their sizes."""
    a = logical_to_mesh(("batch",), mesh, rules)[0]
    return () if a is None else ((a,) if isinstance(a, str) else tuple(a))


def batch_devices(mesh: Mesh, rules: Optional[Rules] = None) -> int:
    """Devices the batch dimension is split over (data-parallel degree incl. ``expert``)."""
    return int(np.prod([mesh.shape[a] for a in batch_axes(mesh, rules)], dtype=np.int64))


def _axes_of(rules: Rules, name) -> tuple:
    if name is None:
        return ()
    for k, v in rules:
        if k == name:
            if v is None:
                return ()
            return (v,) if isinstance(v, str) else tuple(v)
    raise KeyError(f"logical axis {name!r} has no entry in the sharding rules; add ({name!r}, <mesh axes>)")


def logical_to_mesh(logical_axes: Sequence[Optional[str]], mesh: Mesh, rules: Optional[Rules] = None,
                    shape: Optional[Sequence[int]] = None) -> P:
    """PartitionSpec for ``logical_axes`` on ``mesh``.

    Mesh axes absent from the mesh or of size 1 are skipped; with ``shape``, an axis whose size
    does not divide the dimension is dropped, and a mesh axis is never used twice.
    """
    rules = DEFAULT_RULES if rules is None else rules
    used = set()
    spec = []
    for d, name in enumerate(logical_axes):
        chosen = []
        size = 1
        for ax in _axes_of(rules, name):
            if ax not in mesh.shape or mesh.shape[ax] == 1 or ax in used:
                continue
            if shape is not None and shape[d] % (size * mesh.shape[ax]):
                continue
            chosen.append(ax)
            size *= mesh.shape[ax]
        used.update(chosen)
        spec.append(None if not chosen else (chosen[0] if len(chosen) == 1 else tuple(chosen)))
    return P(*spec)


def named_sharding(logical_axes, mesh: Mesh, rules=None, shape=None) -> NamedSharding:
    return NamedSharding(mesh, logical_to_mesh(logical_axes, mesh, rules, shape))


def var_logical_axes(var) -> tuple:
    """Logical axis names of an nnx Variable (its ``out_sharding`` metadata; all None if unset)."""
    meta = var.get_metadata() if hasattr(var, "get_metadata") else {}
    axes = meta.get("out_sharding")
    return tuple(axes) if axes else (None,) * len(var.shape)



def state_shardings(state, mesh: Mesh, rules=None):
    """Map an nnx State (abstract or concrete) to NamedShardings from each Variable's logical axes."""
    def one(var):
        return var.replace(named_sharding(var_logical_axes(var), mesh, rules, var.shape))

    return jax.tree.map(one, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def param_shardings(state, mesh: Mesh, rules=None) -> dict:
    """``state_shardings`` as a pure-dict tree of NamedShardings shaped like
    ``nnx.to_pure_dict(state)`` (the form of the learner's train state and of checkpoint restores)."""
    return nnx.to_pure_dict(state_shardings(state, mesh, rules))


def shard_model(model, mesh: Mesh, rules=None):
    """Place an existing nnx model's variables onto ``mesh`` per the rules (in place)."""
    state = nnx.state(model)
    sh = state_shardings(state, mesh, rules)
    new = jax.tree.map(lambda v, s: v.replace(jax.device_put(v[...], s[...] if hasattr(s, "get_value") else s)),
                       state, sh, is_leaf=lambda x: isinstance(x, nnx.Variable))
    nnx.update(model, new)
    return model


def init_sharded(make_model, mesh: Mesh, rules=None):
    """Build ``make_model()`` under ``jit`` with output shardings from the logical axes.

    ``make_model`` is a no-argument callable returning an nnx Module (e.g. a lambda creating
    ``Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0))``). No full copy of the weights ever exists on
    one device.
    """
    abstract = nnx.eval_shape(make_model)
    graphdef, abs_state = nnx.split(abstract)
    out_sh = state_shardings(abs_state, mesh, rules)

    build = jax.jit(lambda: nnx.state(make_model()), out_shardings=out_sh)
    return nnx.merge(graphdef, build())


def golden_shardings(state, mesh: Mesh, rules=None) -> dict:
    """{param path: PartitionSpec string} for snapshot tests of the sharding layout."""
    sh = state_shardings(state, mesh, rules)
    out = {}
    for path, v in nnx.to_flat_state(sh):
        s = v.get_value() if hasattr(v, "get_value") else v
        out[".".join(str(p) for p in path)] = str(s.spec)
    return out


# ---------------------------------------------------------------------------------------------
# FSDP: weights cast to the compute dtype before their all-gather
# ---------------------------------------------------------------------------------------------
FSDP_AXES = ("data", "fsdp")   # mesh axes whose weight shards are gathered for compute


def gathered_rules(rules: Optional[Rules] = None) -> Rules:
    """``rules`` with the FSDP axes removed from every weight axis: the layout a weight has while
    a layer computes with it (tensor / expert sharding stays; ``batch`` keeps its axes)."""
    rules = DEFAULT_RULES if rules is None else rules
    out = []
    for k, v in rules:
        if k != "batch" and v is not None:
            kept = tuple(a for a in ((v,) if isinstance(v, str) else v) if a not in FSDP_AXES)
            v = None if not kept else (kept[0] if len(kept) == 1 else kept)
        out.append((k, v))
    return tuple(out)


def _gather_cast_impl(w, shard, full, compute_dtype, param_dtype):
    # pinned to the shard layout after the cast, then to the gathered one: the all-gather
    # between them moves compute-dtype bytes (one constraint alone lets the partitioner gather
    # before the cast)
    x = jax.lax.with_sharding_constraint(w.astype(compute_dtype), shard)
    return jax.lax.with_sharding_constraint(x, full)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3, 4))
def _gather_cast(w, shard, full, compute_dtype, param_dtype):
    return _gather_cast_impl(w, shard, full, compute_dtype, param_dtype)


def _gather_cast_fwd(w, shard, full, compute_dtype, param_dtype):
    return _gather_cast_impl(w, shard, full, compute_dtype, param_dtype), None


def _gather_cast_bwd(shard, full, compute_dtype, param_dtype, _, g):
    # the cotangent holds each device's partial sum over its rows (in the dtype the weight-
    # gradient matmul produced, ``kernels.weight_grad_dtype``); back to the shard layout is the
    # reduce-scatter
    return (jax.lax.with_sharding_constraint(g, shard).astype(param_dtype),)


_gather_cast.defvjp(_gather_cast_fwd, _gather_cast_bwd)


def gather_for_compute(w, logical_axes, mesh: Mesh, rules=None, compute_dtype=None):
    """``w`` (an FSDP-sharded weight) cast to ``compute_dtype`` on its shards, then gathered over
    the FSDP axes; its gradient is reduce-scattered back to the shards and returned in ``w``'s
    dtype. Numerically the same as casting after the gather (a cast is elementwise); the point
    is that the all-gather moves compute-dtype bytes. Weights without FSDP sharding are only cast."""
    compute_dtype = jnp.dtype(compute_dtype or w.dtype)
    axes = tuple(logical_axes)[-w.ndim:] if logical_axes else (None,) * w.ndim
    shard = named_sharding(axes, mesh, rules, w.shape)
    full = named_sharding(axes, mesh, gathered_rules(rules), w.shape)
    if shard.spec == full.spec:
        return w.astype(compute_dtype)
    return _gather_cast(w, shard, full, compute_dtype, jnp.dtype(w.dtype))


def gather_params_for_compute(state, mesh: Mesh, rules=None, compute_dtype=None):
    """Every matmul weight (an ``nnx.Param`` of rank >= 2) of an nnx State through
    ``gather_for_compute`` (per-layer FSDP: called inside each layer, so one layer's weights are
    gathered at a time). Rank-1 parameters (norms, gates) keep their dtype: the kernels read them
    in fp32. Leading stacked ``layers`` axes already sliced off by a scan are accounted for."""
    from flax import nnx

    def one(var):
        if not isinstance(var, nnx.Param) or jnp.ndim(var[...]) < 2:
            return var
        return var.replace(gather_for_compute(var[...], var_logical_axes(var), mesh, rules, compute_dtype))

    return jax.tree.map(one, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def batch_sharding(mesh: Mesh, ndim: int = 2, rules=None, shape=None) -> NamedSharding:
    """Sharding for a ``[batch, ...]`` activation/input array."""
    return named_sharding(("batch",) + (None,) * (ndim - 1), mesh, rules, shape)
