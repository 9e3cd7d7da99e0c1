"""Builds an environment family's task set as a versioned TFDS dataset in ArrayRecord (thin main;
the builder is harness_jax.data.tfds_builder). Needs the ``tfds`` extra (no TensorFlow).

    python launch/build_tasksets.py --family=dbbench --data_dir=~/tensorflow_datasets \
        --kwargs='{"n": 20000, "seed": 0}' --split_kwargs='{"test": {"n": 500}}'
    python launch/build_tasksets.py --family=dbbench --data_dir=DIR --kwargs='{"path": "dev.jsonl"}' --config_name=agentbench_dev
    python launch/build_tasksets.py --list

Prints the dataset directory and the number of tasks per split. Building the test split opens
the seal for this entry point only. See docs/experiments.md.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402

from launch._flags import json_flag  # noqa: E402

_FAMILY = flags.DEFINE_string("family", None, "environment family (registry name) with a registered task set")
_DATA_DIR = flags.DEFINE_string("data_dir", "~/tensorflow_datasets", "TFDS data_dir")
_KWARGS = flags.DEFINE_string("kwargs", None, "registry.load_split arguments for every split, JSON (default: the family's)")
_SPLIT_KWARGS = flags.DEFINE_string("split_kwargs", None, 'per-split additions, JSON, e.g. \'{"test": {"n": 500}}\'')
_SPLITS = flags.DEFINE_list("splits", ["train", "search", "selection", "test"], "splits to write")
_CONFIG = flags.DEFINE_string("config_name", None, "builder-config name (default: from the arguments)")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "rebuild even when this version is already built")
_LIST = flags.DEFINE_bool("list", False, "list the families that have task sets and exit")


def main(argv):
    del argv
    from harness_jax.data import tasksets
    if _LIST.value:
        for f in tasksets.families():
            s = tasksets.spec(f)
            print(f"{f} {s.version} defaults={s.default_kwargs}: {s.description}")
        return 0
    if not _FAMILY.value:
        raise app.UsageError("--family is required (or --list)")
    from harness_jax.data import tfds_builder
    path = tfds_builder.build(_FAMILY.value, _DATA_DIR.value, kwargs=json_flag("kwargs", _KWARGS.value),
                              split_kwargs=json_flag("split_kwargs", _SPLIT_KWARGS.value), splits=_SPLITS.value,
                              config=_CONFIG.value, overwrite=_OVERWRITE.value)
    print(f"{path}\n{json.dumps(tasksets.split_sizes(path))}")
    return 0


if __name__ == "__main__":
    app.run(lambda argv: sys.exit(main(argv)))
