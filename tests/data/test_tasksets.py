"""Task sets as TFDS datasets: built with the real tensorflow-datasets builder into ArrayRecord,
read back through grain's ArrayRecordDataSource in a fresh interpreter that cannot import
TensorFlow, equal to the registry's splits (same tasks, same order, same TaskStream), rebuilt
deterministically, and with the test split behind the same seal as ``registry.load_split``."""
import json
import os
import subprocess
import sys

import pytest

from harness_jax.data import tasksets, tfds_builder
from harness_jax.envs import registry
from harness_jax.envs.base import Task
from harness_jax.train.data import TaskStream

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KW = {"n": 6, "seed": 0}
SPLIT_KW = {"test": {"n": 3}}
CONFIG = "n6-seed0-test.n3"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    import tensorflow_datasets as tfds
    tfds.disable_progress_bar()
    data_dir = str(tmp_path_factory.mktemp("tfds"))
    path = tfds_builder.build("dbbench", data_dir, kwargs=KW, split_kwargs=SPLIT_KW)
    return data_dir, path


def test_layout_versions_and_metadata(built):
    data_dir, path = built
    assert path == os.path.join(data_dir, "dbbench_tasks", CONFIG, "1.0.0")
    assert tasksets.config_name(KW, SPLIT_KW) == CONFIG
    assert tasksets.splits_of(data_dir, "dbbench", CONFIG) == {"train": 6, "search": 6, "selection": 6, "test": 3}
    files = sorted(os.listdir(path))
    assert "dbbench_tasks-train.array_record-00000-of-00001" in files and "features.json" in files
    meta = json.load(open(os.path.join(path, "metadata.json")))
    assert meta["family"] == "dbbench" and meta["kwargs"] == KW and len(meta["code"]["commit"]) == 40
    # a second build with the same arguments finds the prepared dataset (nothing rewritten)
    mtime = os.path.getmtime(os.path.join(path, "dataset_info.json"))
    assert tfds_builder.build("dbbench", data_dir, kwargs=KW, split_kwargs=SPLIT_KW) == path
    assert os.path.getmtime(os.path.join(path, "dataset_info.json")) == mtime
    with pytest.raises(FileNotFoundError, match="build_tasksets.py --family=dbbench"):
        tasksets.open_split(data_dir, "dbbench", "train", config="n999")


_READER = r"""
import json, sys
from harness_jax.data import tasksets
from harness_jax.train.data import TaskStream
out = {}
for split in ("train", "search", "selection"):
    src = tasksets.open_split(sys.argv[1], "dbbench", split, config=sys.argv[2])
    out[split] = [src[i].task_id for i in range(len(src))]
    assert all(src[i].split == split for i in range(len(src)))
src = tasksets.open_split(sys.argv[1], "dbbench", "train", config=sys.argv[2])
stream = TaskStream(src, seed=3)
out["stream"] = [t.task_id for t in stream.take(10)]
out["state"] = stream.state()
out["first_data"] = src[0].data
out["tensorflow_imported"] = sorted(m for m in sys.modules if m == "tensorflow" or m.startswith("tensorflow."))
print(json.dumps(out))
"""


def test_read_back_through_grain_without_tensorflow(built):
    data_dir, _ = built
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", _READER, data_dir, CONFIG], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["tensorflow_imported"] == []   # holds where TensorFlow is installed too
    for split in ("train", "search", "selection"):
        ref = registry.load_split("dbbench", split, **KW)
        assert out[split] == [t.task_id for t in ref]            # same tasks, registry order
    assert not set(out["train"]) & set(out["selection"])
    ref_train = registry.load_split("dbbench", "train", **KW)
    assert out["first_data"] == ref_train[0].data
    stream = TaskStream(ref_train, seed=3)                        # the list-backed stream ...
    assert out["stream"] == [t.task_id for t in stream.take(10)]  # ... equals the dataset-backed one
    assert out["state"] == stream.state()


def test_stream_checkpoint_restore_over_the_source(built):
    data_dir, _ = built
    src = tasksets.open_split(data_dir, "dbbench", "train", config=CONFIG)
    a = TaskStream(src, seed=1)
    a.take(4)
    b = TaskStream(src, seed=1)
    b.restore(json.loads(json.dumps(a.state())))
    assert [t.task_id for t in a.take(5)] == [t.task_id for t in b.take(5)]


def test_test_split_is_sealed(built):
    data_dir, _ = built
    with pytest.raises(registry.SealedSplitError, match="sealed"):
        tasksets.open_split(data_dir, "dbbench", "test", config=CONFIG)
    with registry.sealed_test_access("final evaluation in a test"):
        test = tasksets.load_split(data_dir, "dbbench", "test", config=CONFIG)
        ref = registry.load_split("dbbench", "test", **{**KW, **SPLIT_KW["test"]})
        assert [t.task_id for t in test] == [t.task_id for t in ref] and {t.split for t in test} == {"test"}
        src = tasksets.open_split(data_dir, "dbbench", "test", config=CONFIG)
        with pytest.raises(registry.SealedSplitError, match="test-split task source"):
            TaskStream(src, seed=0)
    with registry.training_scope("a training run"):
        with pytest.raises(registry.SealedSplitError, match="training_scope"):
            with registry.sealed_test_access("sneaky"):
                tasksets.open_split(data_dir, "dbbench", "test", config=CONFIG)
        with pytest.raises(registry.SealedSplitError):   # nor can training code build a test split
            tfds_builder.build("dbbench", data_dir, kwargs={"n": 2, "seed": 5})


def test_deterministic_rebuild_and_real_files(tmp_path, built):
    _, path = built
    again = tfds_builder.build("dbbench", str(tmp_path / "b"), kwargs=KW, split_kwargs=SPLIT_KW)
    for split in ("train", "selection", "test"):
        name = f"dbbench_tasks-{split}.array_record-00000-of-00001"
        assert open(os.path.join(again, name), "rb").read() == open(os.path.join(path, name), "rb").read()
    # real files: an AgentBench jsonl is partitioned by content hash, as registry.load_split does
    from harness_jax.envs.dbbench import generator
    items = generator.generate_items(40, seed=11)
    jsonl = tmp_path / "dev.jsonl"
    jsonl.write_text("".join(json.dumps(i) + "\n" for i in items))
    p = tfds_builder.build("dbbench", str(tmp_path / "real"), kwargs={"path": str(jsonl)},
                           splits=("train", "selection"), config="agentbench_dev")
    assert p.endswith("dbbench_tasks/agentbench_dev/1.0.0")
    sizes = tasksets.splits_of(str(tmp_path / "real"), "dbbench", "agentbench_dev")
    ref = {s: registry.load_split("dbbench", s, path=str(jsonl)) for s in ("train", "selection")}
    assert sizes == {s: len(v) for s, v in ref.items()} and sizes["train"] > sizes["selection"] > 0
    got = tasksets.load_split(str(tmp_path / "real"), "dbbench", "train", config="agentbench_dev")
    assert [t.task_id for t in got] == [t.task_id for t in ref["train"]]


def test_plugging_in_a_family_is_one_register_call(tmp_path):
    """A new family (as WebShop/AppWorld/SWE will do) needs its registry loader and one spec."""
    def load(split, n=2, seed=0):
        return [Task(env_name="toyfam", data={"q": f"{split}-{seed}-{i}"}, split=split) for i in range(n)]
    tasksets.register(tasksets.TaskSetSpec("toyfam", version="2.1.0", default_kwargs={"n": 3}, load=load))
    p = tfds_builder.build("toyfam", str(tmp_path), splits=("train", "search"))
    assert p.endswith("toyfam_tasks/n3/2.1.0")
    src = tasksets.open_split(str(tmp_path), "toyfam", "search", config="n3")
    assert [src[i].data["q"] for i in range(len(src))] == ["search-0-0", "search-0-1", "search-0-2"]
    with pytest.raises(ValueError, match="X.Y.Z"):
        tasksets.register(tasksets.TaskSetSpec("bad", version="1"))
    with pytest.raises(KeyError, match="no task set registered"):
        tasksets.spec("nope")


def test_webshop_task_set(tmp_path):
    p = tfds_builder.build("webshop", str(tmp_path), kwargs={"n": 3, "seed": 0}, splits=("train", "selection"))
    assert p.endswith("webshop_tasks/n3-seed0/1.0.0")
    src = tasksets.open_split(str(tmp_path), "webshop", "selection", config="n3-seed0")
    ref = registry.load_split("webshop", "selection", n=3, seed=0)
    assert [src[i].task_id for i in range(len(src))] == [t.task_id for t in ref]
    assert [src[i].data for i in range(len(src))] == [t.data for t in ref]


@pytest.mark.slow
@pytest.mark.parametrize("family", ["swe", "appworld"])
def test_swe_and_appworld_task_sets(tmp_path, family):
    """SWE (instances built by running the corpus' tests) and AppWorld (a generated data tree per
    task): one task in one split each."""
    tfds_builder.build(family, str(tmp_path), kwargs={"n": 1, "seed": 0}, splits=("search",))
    src = tasksets.open_split(str(tmp_path), family, "search", config="n1-seed0")
    ref = registry.load_split(family, "search", n=1, seed=0)
    assert len(src) == 1 and src[0].task_id == ref[0].task_id and src[0].data == ref[0].data


@pytest.mark.slow
def test_alfworld_generated_task_set(tmp_path):
    """ALFWorld's generator plays the expert for each game (seconds per game): 1 game per split."""
    p = tfds_builder.build("alfworld", str(tmp_path), kwargs={"n": 1, "seed": 0}, splits=("train", "selection"))
    src = tasksets.open_split(str(tmp_path), "alfworld", "train", config="n1-seed0")
    ref = registry.load_split("alfworld", "train", n=1, seed=0)
    assert len(src) == 1 and src[0].task_id == ref[0].task_id and src[0].category == ref[0].category
    assert "pddl_problem" in src[0].data and p.endswith("alfworld_tasks/n1-seed0/1.0.0")


def _taskset_config(data_dir):
    from tests.e2e import tiny_e2e_config

    c = tiny_e2e_config.get_config()
    c.mesh.num_devices = 1
    c.env.num_tasks = 2                   # the generator's size: ignored, the set has 6 per split
    c.env.taskset.data_dir = data_dir
    c.env.taskset.config = CONFIG
    return c


def test_config_taskset_feeds_the_task_builders(built):
    """``config.env.taskset`` points the task builders (the loop's stream and evaluation tasks,
    launch/evaluate.py's split) at a built task set instead of generating, is validated with the
    build command as the fix, and keeps the test split sealed."""
    from harness_jax.config_problems import ConfigValidationError
    from harness_jax.train import builders, spec

    data_dir, _ = built
    c = _taskset_config(data_dir)
    env = spec.resolve(c, num_devices=1).env
    want = {s: [t.task_id for t in registry.load_split("dbbench", s, **KW)] for s in ("train", "selection")}

    src = builders.task_source(env, "train")
    assert isinstance(src, tasksets.TaskSetSource) and len(src) == 6
    assert [t.task_id for t in builders.load_tasks(env, "selection", n=4)] == want["selection"][:4]
    with pytest.raises(registry.SealedSplitError):
        builders.load_tasks(env, "test", n=2)
    with registry.sealed_test_access("test_the_loop_reads_a_configured_task_set"):
        test_tasks = builders.load_tasks(env, "test", n=5)
    assert len(test_tasks) == 3 and {t.split for t in test_tasks} == {"test"}

    c.env.taskset.version = "1.0"
    with pytest.raises(ConfigValidationError) as ei:
        spec.resolve(c, num_devices=1)
    assert "X.Y.Z" in {p.path: p for p in ei.value.problems}["env.taskset.version"].fix
    c.env.taskset.version = ""
    c.env.taskset.config = "n999"
    with pytest.raises(ConfigValidationError) as ei:
        spec.resolve(c, num_devices=1)
    assert "build_tasksets.py --family=dbbench" in {p.path: p for p in ei.value.problems}["env.taskset.data_dir"].fix


@pytest.mark.slow
def test_the_training_loop_streams_the_configured_task_set(built, tmp_path):
    """The real ``Trainer`` (model, engine, executor) streams the task set's train split in
    ``TaskStream`` order and evaluates on its selection split."""
    from harness_jax.train import context, loop, spec

    data_dir, _ = built
    c = _taskset_config(data_dir)
    ctx = context.build(spec.resolve(c), str(tmp_path / "run"))
    trainer = loop.Trainer(ctx)
    try:
        assert len(trainer.stream) == 6
        assert [t.task_id for t in trainer.stream.take(6)] == \
            [t.task_id for t in TaskStream(registry.load_split("dbbench", "train", **KW), seed=c.seed).take(6)]
        assert [t.task_id for t in trainer.eval_tasks] == \
            [t.task_id for t in registry.load_split("dbbench", "selection", **KW)][:c.eval.num_tasks]
    finally:
        trainer.close()
        ctx.close()
