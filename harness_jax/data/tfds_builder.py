"""TFDS builders of the task sets (needs the ``tfds`` extra: tensorflow-datasets, no TensorFlow).

    from harness_jax.data import tfds_builder
    path = tfds_builder.build("dbbench", data_dir="~/tensorflow_datasets", kwargs={"n": 256, "seed": 0})

One ``GeneratorBasedBuilder`` class per registered family (``<family>_tasks``), version from the
family's ``TaskSetSpec``; one builder config per set of loader arguments (its name from
``tasksets.config_name`` unless given). Examples are the tasks of
``registry.load_split(family, split, **kwargs)`` in the registry's order (shuffling disabled,
keys = positions), written as ArrayRecord. ``metadata.json`` records the family, the arguments,
the split sizes and the code version that built it. Building the test split opens the seal for
this purpose only (``sealed_test_access``); a build from training code is refused by the seal.
"""
from __future__ import annotations

import os
import types
from typing import Optional, Sequence

import numpy as np

from harness_jax.data import tasksets
from harness_jax.envs.base import SPLITS
from harness_jax import provenance
from harness_jax.envs import registry

_CLASSES: dict = {}


def _features():
    import tensorflow_datasets as tfds
    return tfds.features.FeaturesDict({
        "index": np.int64,                 # position in the registry's split list
        "task_id": tfds.features.Text(),   # <env>-<content hash of data>: checked on read
        "env_name": tfds.features.Text(),
        "category": tfds.features.Text(),  # "" when the family has none
        "data": tfds.features.Text(),      # the benchmark's own record, JSON (sorted keys)
    })


def builder_class(family: str):
    """The (unregistered) TFDS builder class of ``family``'s task set."""
    if family in _CLASSES:
        return _CLASSES[family]
    import tensorflow_datasets as tfds

    spec = tasksets.spec(family)

    class _Builder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        VERSION = tfds.core.Version(spec.version)
        RELEASE_NOTES = dict(spec.release_notes)

        def __init__(self, *, kwargs: dict, split_kwargs: Optional[dict] = None,
                     splits: Sequence[str] = SPLITS, code: Optional[dict] = None, **kw):
            self._kwargs = dict(kwargs)
            self._split_kwargs = {k: dict(v) for k, v in (split_kwargs or {}).items()}
            self._splits = tuple(splits)
            self._code = code or {}
            super().__init__(**kw)

        def _info(self):
            return tfds.core.DatasetInfo(
                builder=self, description=spec.description, features=_features(),
                disable_shuffling=True,
                metadata=tfds.core.MetadataDict(family=family, kwargs=self._kwargs,
                                                split_kwargs=self._split_kwargs, code=self._code))

        def _split_generators(self, dl_manager):
            del dl_manager
            return {s: self._generate_examples(s) for s in self._splits}

        def _generate_examples(self, split):
            kw = {**self._kwargs, **self._split_kwargs.get(split, {})}
            for i, task in enumerate(spec.tasks(split, **kw)):
                yield f"{i:09d}", tasksets.to_record(task, i)

    cls = types.new_class(f"{family}_tasks", (_Builder,), {"skip_registration": True})
    cls.name = tasksets.dataset_name(family)
    _CLASSES[family] = cls
    return cls


def build(family: str, data_dir: str, kwargs: Optional[dict] = None, split_kwargs: Optional[dict] = None,
          splits: Sequence[str] = SPLITS, config: Optional[str] = None, overwrite: bool = False,
          repo_root: Optional[str] = None) -> str:
    """Builds (or finds already built) ``family``'s task set; returns its directory.

    kwargs: ``load_split`` arguments for every split (default: the family's ``default_kwargs``);
    split_kwargs: per-split additions (``{"test": {"n": 64}}``); config: the builder-config name
    (default ``tasksets.config_name(kwargs, split_kwargs)``)."""
    import tensorflow_datasets as tfds

    spec = tasksets.spec(family)
    kwargs = dict(spec.default_kwargs if kwargs is None else kwargs)
    split_kwargs = {k: dict(v) for k, v in (split_kwargs or {}).items()}
    for s in list(splits) + list(split_kwargs):
        registry.check_split(s)
    name = config or tasksets.config_name(kwargs, split_kwargs)
    code = provenance.code_version(repo_root)
    cls = builder_class(family)
    builder = cls(kwargs=kwargs, split_kwargs=split_kwargs, splits=splits, code=code,
                  config=tfds.core.BuilderConfig(name=name, description=f"load_split kwargs {kwargs} {split_kwargs}"),
                  data_dir=os.path.expanduser(data_dir), file_format="array_record")
    if builder.is_prepared() and not overwrite:
        return os.fspath(builder.data_path)
    dl = tfds.download.DownloadConfig(
        download_mode=tfds.download.GenerateMode.REUSE_DATASET_IF_EXISTS if not overwrite
        else tfds.download.GenerateMode.FORCE_REDOWNLOAD)
    if "test" in splits:
        with registry.sealed_test_access(f"building the {family} task set {name} (test split)"):
            builder.download_and_prepare(download_config=dl)
    else:
        builder.download_and_prepare(download_config=dl)
    return os.fspath(builder.data_path)
