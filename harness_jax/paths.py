"""Local paths and URIs (``gs://bucket/run``) alike, through etils ``epath``.

``os.path.abspath("gs://b/run")`` makes a local ``gs:/b/run`` folder; ``resolve`` keeps a URI's
scheme and makes only local paths absolute. Checkpoints, metrics, summaries and exports use it.
"""
from __future__ import annotations

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
