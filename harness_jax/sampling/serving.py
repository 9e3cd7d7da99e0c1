"""The weights an engine serves: which layout, and how a learner state becomes it.

A learner keeps fp32 master parameters in its training layout (FSDP-sharded on the hidden dim).
Decoding from that layout all-gathers every weight matrix on every token. ``ServingWeights``
instead keeps a *serving copy*, rebuilt by one on-device program after each weight sync
(``convert``, never through the host):
  * matrices in the compute dtype (``dtype``, default the model's: bf16 on accelerators); 1-D
    parameters (norm weights, biases, the Gated DeltaNet ``A_log`` / ``dt_bias``) stay in their
    own dtype, fp32 for a learner (a bf16 ``A_log`` would shift every decay rate);
  * laid out on a *serving mesh* over the same devices: ``tensor_parallel`` devices per
    replica hold the matrices split over heads / MLP width / vocab (``sharding.SAMPLE_RULES``:
    no FSDP), the replicas split the cache rows (data parallel); ``tensor_parallel=1``
    replicates the weights on every device;
  * optionally with ``[in, out]`` matrices (``weight_layout="in_out"``, the CPU default, see
    ``qwen3_5.decode_layout``).
When the learner's arrays already are what the serving layout asks (same dtype, same sharding:
e.g. one device, fp32) the engine serves them as they are: no copy.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

WEIGHT_LAYOUTS = ("auto", "hf", "in_out")


def _serving_mesh(devices: list, tensor_parallel: int):
    from harness_jax import sharding as shd
    n = len(devices)
    if tensor_parallel < 1 or n % tensor_parallel:
        raise ValueError(f"JaxEngine.tensor_parallel={tensor_parallel} must divide the {n} devices the "
                         "parameters live on (1 = weights replicated on every device)")
    return shd.make_mesh((n // tensor_parallel, 1, tensor_parallel, 1), devices=devices)


class ServingWeights:
    """Serving copy of a model's parameters.

    Args:
      model: an nnx module (optionally with ``decode_layout()``, see ``qwen3_5.decode_layout``,
        and ``set_mesh``).
      weight_layout: ``"hf"`` serves ``[out, in]`` matrices; ``"in_out"`` a transposed copy
        (XLA:CPU decodes ~1.3x faster at batch 8); ``"auto"``: ``"in_out"`` on the CPU backend
        when the model offers ``decode_layout``, else ``"hf"``.
      mesh / rules: an explicit serving mesh (and logical rules, default ``SAMPLE_RULES``).
      tensor_parallel: without ``mesh``, when the parameters live on several devices: the
        serving mesh is those devices as ``(data=n/tp, tensor=tp)`` (default 1: replicated).
      dtype: dtype of the served matrices (default: the model's compute dtype ``model.dtype``).
    """

    def __init__(self, model, weight_layout: str = "auto", mesh=None, *, rules=None,
                 tensor_parallel: int = 1, dtype=None):
        from harness_jax import sharding as shd
        if weight_layout not in WEIGHT_LAYOUTS:
            raise ValueError(f"JaxEngine.weight_layout={weight_layout!r}: use 'auto', 'hf' or 'in_out'")
        to_decode = getattr(model, "decode_layout", None)
        if weight_layout == "auto":
            weight_layout = "in_out" if to_decode is not None and jax.default_backend() == "cpu" else "hf"
        if weight_layout == "in_out" and to_decode is None:
            raise ValueError(f"JaxEngine.weight_layout='in_out': {type(model).__name__} has no "
                             "decode_layout(); use weight_layout='hf'")
        self.layout = weight_layout
        graphdef, learner_state = nnx.split(model)
        self._learner_treedef = jax.tree_util.tree_structure(learner_state)   # what convert takes
        leaves = jax.tree_util.tree_leaves(learner_state)
        devices = list(leaves[0].sharding.device_set) if leaves and hasattr(leaves[0], "sharding") else []
        if mesh is None and len(devices) > 1:
            devices = sorted(devices, key=lambda d: d.id)
            mesh = _serving_mesh(devices, int(tensor_parallel))
        self.mesh = mesh
        self.rules = shd.SAMPLE_RULES if rules is None else rules
        self.dtype = jnp.dtype(dtype if dtype is not None else getattr(model, "dtype", leaves[0].dtype))
        to_layout = None
        if weight_layout == "in_out":
            graphdef, _, to_layout = to_decode()
        self.graphdef = self._with_mesh(graphdef, learner_state, to_layout)
        abstract = jax.eval_shape(lambda st: self._prepare(st, to_layout), learner_state)
        self._shardings = None
        if mesh is not None:
            self._shardings = shd.state_shardings(abstract, mesh, self.rules)
        elif devices:
            dev = jax.sharding.SingleDeviceSharding(devices[0])
            self._shardings = jax.tree_util.tree_map(lambda _: dev, abstract)
        self._convert = jax.jit(lambda st: self._prepare(st, to_layout),
                                out_shardings=_unbox(self._shardings) if self._shardings is not None else None)
        self.state = self.convert(learner_state)

    def _with_mesh(self, graphdef, learner_state, to_layout):
        """The serving graph definition, its activations pinned to the serving mesh (not the
        learner's, whose mesh a model loaded with ``mesh=`` records)."""
        if self.mesh is None:
            return graphdef
        st = jax.eval_shape(lambda s: self._prepare(s, to_layout), learner_state)
        m = nnx.merge(graphdef, st)
        if not hasattr(m, "set_mesh"):
            return graphdef
        m.set_mesh(self.mesh, self.rules)
        return nnx.split(m)[0]

    def _prepare(self, state, to_layout):
        """Learner state -> serving state: [in, out] matrices if asked, matrices in ``dtype``."""
        if to_layout is not None:
            state = to_layout(state)
        return jax.tree_util.tree_map(
            lambda a: a.astype(self.dtype) if a.ndim >= 2 and jnp.issubdtype(a.dtype, jnp.floating) else a, state)

    def devices(self) -> set:
        leaves = jax.tree_util.tree_leaves(self.state)
        return leaves[0].sharding.device_set if leaves and hasattr(leaves[0], "sharding") else set()

    def _already_served(self, state) -> bool:
        """The learner arrays are already in the serving layout (nothing to convert)."""
        if self.layout != "hf" or self._shardings is None:
            return False
        want = jax.tree_util.tree_leaves(_unbox(self._shardings))
        have = jax.tree_util.tree_leaves(state)
        return all(a.dtype == self.dtype or a.ndim < 2 for a in have) and all(
            getattr(a, "sharding", None) is not None and a.sharding.is_equivalent_to(s, a.ndim)
            for a, s in zip(have, want))

    def convert(self, new):
        """A learner's parameters (nnx module or ``nnx.State``) in the serving layout: one
        on-device program (cast, transpose, reshard), or the arrays themselves when they already
        are in it."""
        state = nnx.state(new) if isinstance(new, nnx.Module) else new
        if jax.tree_util.tree_structure(state) != self._learner_treedef:
            raise ValueError("update_weights: parameter tree does not match the engine's model; "
                             "pass the same architecture (nnx module or nnx.state(model))")
        if self._already_served(state):
            return state
        return self._convert(state)

    def bytes(self) -> int:
        return int(sum(np.prod(a.shape) * a.dtype.itemsize for a in jax.tree_util.tree_leaves(self.state)))


def _unbox(shardings):
    """An ``nnx.State`` of shardings (as ``state_shardings`` returns) as a plain sharding tree
    shaped like the state's arrays."""
    return jax.tree_util.tree_map(lambda v: v.get_value() if hasattr(v, "get_value") else v, shardings,
                                  is_leaf=lambda x: isinstance(x, nnx.Variable))


def weight_all_gathers(hlo_text: str, state) -> list[str]:
    """The all-gather instructions of a compiled program (``compiled.as_text()``) whose result
    has the shape of a weight array of ``state`` (or of one layer of a stacked weight): what a
    decode step on an FSDP layout does for every weight on every token. Activation gathers
    (batch-shaped) are not counted. Returns the matching HLO lines."""
    import re
    shapes = set()
    for a in jax.tree_util.tree_leaves(state):
        if a.ndim >= 2:
            shapes.add(tuple(a.shape))
            if a.ndim >= 3:
                shapes.add(tuple(a.shape[1:]))
    out = []
    for line in hlo_text.splitlines():
        head, sep, _ = line.partition(" all-gather")
        if not sep or "=" not in head:
            continue
        result = head.split("=", 1)[1]          # "bf16[64,512]{1,0}" or a tuple of shapes (async)
        dims = [tuple(int(x) for x in d.split(",") if x) for d in re.findall(r"\w+\[([\d,]*)\]", result)]
        if any(d in shapes for d in dims):
            out.append(line.strip())
    return out
