"""The weights an engine serves: which layout, and how a learner state becomes it.

``ServingWeights(model, weight_layout)`` splits the model into the graph definition the engine's
programs are traced with and the state they run on, and converts every later learner state
(``update_weights``) into that serving state on device (never through the host).
"""
from __future__ import annotations

import jax
from flax import nnx

WEIGHT_LAYOUTS = ("auto", "hf", "in_out")


class ServingWeights:
    """Serving copy of a model's parameters.

    Args:
      model: an nnx module (optionally with ``decode_layout()``, see ``qwen3_5.decode_layout``).
      weight_layout: ``"hf"`` serves the model's own arrays (``[out, in]`` weights, no copy);
        ``"in_out"`` serves a transposed copy made by ``model.decode_layout`` (XLA:CPU decodes
        ~1.3x faster at batch 8; costs a second copy of the weights); ``"auto"``: ``"in_out"``
        on the CPU backend when the model offers ``decode_layout``, else ``"hf"``.
      mesh: the mesh the serving state lives on; default: the parameters' mesh when they are
        ``NamedSharding``-placed on more than one device, else None.
    """

    def __init__(self, model, weight_layout: str = "auto", mesh=None):
        if weight_layout not in WEIGHT_LAYOUTS:
            raise ValueError(f"JaxEngine.weight_layout={weight_layout!r}: use 'auto', 'hf' or 'in_out'")
        to_decode = getattr(model, "decode_layout", None)
        if weight_layout == "auto":
            weight_layout = "in_out" if to_decode is not None and jax.default_backend() == "cpu" else "hf"
        if weight_layout == "in_out" and to_decode is None:
            raise ValueError(f"JaxEngine.weight_layout='in_out': {type(model).__name__} has no "
                             "decode_layout(); use weight_layout='hf'")
        self.layout = weight_layout
        self.graphdef, self.state = nnx.split(model)
        self._learner_treedef = jax.tree_util.tree_structure(self.state)   # what convert takes
        self._convert = None
        if weight_layout == "in_out":
            self.graphdef, self.state, self._convert = to_decode()
        if mesh is None:
            leaves = jax.tree_util.tree_leaves(self.state)
            sh = getattr(leaves[0], "sharding", None) if leaves else None
            if isinstance(sh, jax.sharding.NamedSharding) and sh.mesh.size > 1:
                mesh = sh.mesh
        self.mesh = mesh

    def devices(self) -> set:
        leaves = jax.tree_util.tree_leaves(self.state)
        return leaves[0].sharding.device_set if leaves and hasattr(leaves[0], "sharding") else set()

    def convert(self, new):
        """A learner's parameters (nnx module or ``nnx.State``) in the serving layout."""
        state = nnx.state(new) if isinstance(new, nnx.Module) else new
        if jax.tree_util.tree_structure(state) != self._learner_treedef:
            raise ValueError("update_weights: parameter tree does not match the engine's model; "
                             "pass the same architecture (nnx module or nnx.state(model))")
        if self._convert is not None:
            state = self._convert(state)   # on-device transpose into the serving layout
        return state
