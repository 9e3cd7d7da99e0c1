"""Local paths and URIs (``gs://bucket/run``) alike, through etils ``epath``.

``os.path.abspath("gs://b/run")`` makes a local ``gs:/b/run`` folder; ``resolve`` keeps a URI's
scheme and makes only local paths absolute. Checkpoints, metrics, summaries and exports use it.
``weights_source`` says where a policy's weights are (a Hugging Face directory or a training
run's Orbax checkpoints); the run's entry points resolve it once and hand it to ``rl.policy``.
"""
from __future__ import annotations

import json
import os

from etils import epath


def is_local(path) -> bool:
    """True for a path on the local filesystem (no ``scheme://`` prefix)."""
    return "://" not in str(path)


def resolve(path) -> epath.Path:
    """An absolute ``epath.Path``; URIs are kept as they are."""
    if not str(path):
        raise ValueError("empty path; give a directory or a URI such as gs://bucket/run")
    return epath.Path(os.path.abspath(str(path))) if is_local(path) else epath.Path(str(path))


def checkpoint_dir(path) -> str:
    """A training workdir's ``checkpoints/`` dir, or ``path`` itself (a checkpoints dir)."""
    p = resolve(path)
    return str(p / "checkpoints") if (p / "checkpoints").exists() else str(p)


def is_hf_dir(path) -> bool:
    """Whether ``path`` is a Hugging Face model directory: a ``config.json`` naming a
    ``model_type`` (a training workdir's ``config.json`` is the run's resolved config)."""
    f = resolve(path) / "config.json"
    if not f.exists():
        return False
    try:
        return "model_type" in json.loads(f.read_text())
    except ValueError:
        return False


def weights_source(path, *, hf: bool = True):
    """Where a policy's weights are: ``("hf", dir)`` for a Hugging Face model directory,
    ``("orbax", dir)`` for a training workdir or its checkpoints dir (``dir``: the checkpoints
    dir), None for ``""`` (the model section's own weights). ``hf=False`` for ``model.init_from``
    (Orbax parameters on the section's own architecture, never an HF directory's)."""
    if not str(path):
        return None
    if hf and is_hf_dir(path):
        return "hf", str(resolve(path))
    return "orbax", checkpoint_dir(path)
