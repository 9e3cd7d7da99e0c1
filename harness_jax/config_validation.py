"""The checks of an experiment config that span sections (or the config and the machine).

Every field is checked where it is declared: its type, allowed values (from the registry next to
the code that uses them) and bounds in its typed section (``harness_jax.train.schema``), a
family's section by the family's ``EnvSection``, a method's section by the method
(``train.extensions.Method``). What no single section can decide is here, on the resolved
``RunSpec``; ``train.spec.resolve`` runs it after reading every section, so all problems of a
config are still reported at once (one ``ConfigValidationError``, each ``Problem`` with its
dotted path, the bad value and the fix; cf. MaxText #3960).

    from harness_jax.train import spec
    run = spec.resolve(config)                 # raises ConfigValidationError listing every problem
    problems = spec.find_problems(config)      # list[Problem], empty when fine
"""
from __future__ import annotations

import math
from typing import Optional

import jax

from harness_jax import sharding
from harness_jax.config_problems import Bad, ConfigValidationError, Problem  # noqa: F401 (re-exported)


def check_run(run, bad: Bad, *, num_devices: Optional[int] = None) -> None:
    """The cross-section checks of a resolved ``train.spec.RunSpec``."""
    _check_mesh(run.mesh, bad, num_devices)
    if run.model.arch.moe_dispatch == "ragged" and run.mesh.platform == "cpu":
        bad("model.arch.moe_dispatch", run.model.arch.moe_dispatch, "ragged_all_to_all is not implemented by XLA:CPU",
            "use --config.model.arch.moe_dispatch=all_to_all on CPU (ragged needs mesh.platform tpu or gpu)")
    mnt = run.rollout.max_new_tokens
    if run.rl.pack_len <= mnt:
        bad("rl.pack_len", run.rl.pack_len, f"a packed row must hold at least one whole assistant turn "
            f"(rollout.max_new_tokens={mnt}) plus its context; longer episodes are split at turn boundaries",
            f"set --config.rl.pack_len well above {mnt} (e.g. rollout.max_len)")


def _check_mesh(mesh, bad: Bad, num_devices: Optional[int]) -> None:
    """``mesh.shape`` and ``mesh.num_devices`` against the devices the run has (default: the
    visible ones)."""
    shape = tuple(mesh.shape)
    if len(shape) != len(sharding.MESH_AXES) or not all(isinstance(s, int) for s in shape):
        return                                    # the mesh section reported it
    if not (mesh.num_devices == -1 or mesh.num_devices >= 1):
        return
    if num_devices is None:
        num_devices = jax.device_count()
        if mesh.num_devices > num_devices:
            bad("mesh.num_devices", mesh.num_devices, f"only {num_devices} devices are visible",
                f"run on {mesh.num_devices} devices or lower --config.mesh.num_devices")
            return
        if mesh.num_devices > 0:
            num_devices = int(mesh.num_devices)
    elif mesh.num_devices > 0 and mesh.num_devices != num_devices:
        bad("mesh.num_devices", mesh.num_devices,
            f"the preset is sized for {mesh.num_devices} devices but this run has {num_devices}",
            f"run on {mesh.num_devices} devices or set --config.mesh.num_devices=-1 and a mesh.shape "
            f"for {num_devices}")
    try:
        resolved = sharding.resolve_mesh_shape(shape, num_devices)
    except ValueError as e:
        bad("mesh.shape", shape, str(e), "e.g. --config.mesh.shape='(1,-1,1,1)'")
        return
    if math.prod(resolved) != num_devices:
        bad("mesh.shape", shape, f"uses {math.prod(resolved)} devices but the run has {num_devices}",
            f"make the product of mesh.shape equal {num_devices}, or use -1 on one axis")
