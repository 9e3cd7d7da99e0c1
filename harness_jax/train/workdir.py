"""Where a run's artifacts live under its workdir; local paths and URIs (``gs://...``) alike.

Paths go through etils ``epath``, which keeps a URI's scheme (``os.path.abspath("gs://b/run")``
would make a local ``gs:/b/run`` folder). Orbax checkpoints, ``summary.json``, the metrics and the
exports (HF policy, task tokenizer) are written through ``epath``, so a ``gs://`` workdir works on
TPU VMs; the trajectory store and the disaggregated weight-sync exports are plain local
directories (``log.traces_dir`` / ``rollout.sync_dir`` name them for URI workdirs).
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from typing import Any, Callable

from etils import epath

from harness_jax.paths import is_local, resolve


@dataclasses.dataclass(frozen=True)
class RunPaths:
    root: epath.Path

    @classmethod
    def of(cls, workdir) -> "RunPaths":
        return cls(resolve(workdir))

    @property
    def checkpoints(self) -> epath.Path:           # GRPO train state + loop state (Orbax)
        return self.root / "checkpoints"

    @property
    def sft_checkpoints(self) -> epath.Path:       # the SFT warm start's own checkpoints (Orbax)
        return self.root / "sft_checkpoints"

    @property
    def tokenizer(self) -> epath.Path:             # model.tokenizer="task_bpe": the trained tokenizer
        return self.root / "tokenizer"

    @property
    def hf_final(self) -> epath.Path:              # the final policy as a Hugging Face dir
        return self.root / "hf_final"

    @property
    def summary(self) -> epath.Path:
        return self.root / "summary.json"

    def local(self, name: str, override: str = "") -> str:
        """A local directory for artifacts that need a filesystem: ``override`` when set, else
        ``<workdir>/<name>`` (a URI workdir needs the override: the error names the field)."""
        if override:
            return os.path.abspath(override)
        if not is_local(self.root):
            raise ValueError(f"workdir {self.root} is not a local path, and <workdir>/{name} must be a "
                             f"local directory; set the config field that names it (log.traces_dir / "
                             f"rollout.sync_dir) to a local path")
        return str(self.root / name)


def write_json(path: epath.Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1, default=float))


def write_dir(dest: epath.Path, write: Callable[[str], Any]) -> None:
    """Runs ``write(local_dir)`` (e.g. ``save_pretrained``) and puts the files at ``dest``: in
    place for local paths, through a temporary directory copied file by file for URIs."""
    if is_local(dest):
        os.makedirs(str(dest), exist_ok=True)
        write(str(dest))
        return
    tmp = tempfile.mkdtemp(prefix="harness_jax_export_")
    try:
        write(tmp)
        dest.mkdir(parents=True, exist_ok=True)
        for name in sorted(os.listdir(tmp)):
            (dest / name).write_bytes(epath.Path(os.path.join(tmp, name)).read_bytes())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def read_dir(src: epath.Path, read: Callable[[str], Any]):
    """``read(local_dir)`` of a directory that may live at a URI (copied to a temporary dir)."""
    if is_local(src):
        return read(str(src))
    tmp = tempfile.mkdtemp(prefix="harness_jax_import_")
    try:
        for f in src.iterdir():
            epath.Path(os.path.join(tmp, f.name)).write_bytes(f.read_bytes())
        return read(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
