"""Orbax checkpointing: resume 4+4 == 8 bitwise, keep-N, interval, SIGTERM, no half-written latest."""
import os
import signal

import jax
import numpy as np
import pytest
from flax import nnx

from harness_jax import sharding as shd
from harness_jax.rl import batch as rlbatch
from harness_jax.rl import checkpoint as ck
from harness_jax.rl import learner as L
from helpers import SeededBatches
from toy_model import ToyLM

CFG = L.LearnerConfig(num_micro_batches=2, num_mini_batches=2, num_epochs=1,
                      opt=L.OptimizerConfig(learning_rate=3e-3, schedule="cosine", warmup_steps=2, total_steps=16))
PACK = rlbatch.PackConfig(buckets=(16, 32), row_multiple=CFG.rows_multiple * 8, min_rows=16)


def make_learner(seed=0):
    return L.Learner(ToyLM(rngs=nnx.Rngs(seed)), CFG, mesh=shd.make_mesh((2, 4, 1, 1)))


@pytest.mark.slow
def test_resume_4_plus_4_equals_8_bitwise(tmp_path):
    """8 straight updates (saving along the way) vs a fresh learner restored after 4 + 4 more."""
    straight = make_learner()
    data = SeededBatches(1, PACK)
    c = ck.Checkpointer(ck.CheckpointConfig(str(tmp_path / "ckpt"), max_to_keep=2, save_interval_steps=2))
    for i in range(8):
        straight.update(next(data))
        if i < 4:
            c.maybe_save(straight, data_state=data.get_state())
    c.close()
    assert c.all_steps() == [2, 4]            # interval 2, keep 2

    resumed = make_learner(seed=123)           # different init: everything must come from disk
    c2 = ck.Checkpointer(ck.CheckpointConfig(str(tmp_path / "ckpt")))
    meta = c2.restore(resumed)
    assert meta["policy_version"] == 4 and resumed.policy_version == 4 and resumed.step == 8
    data2 = SeededBatches(1, PACK)
    data2.set_state(meta["data_state"])
    for _ in range(4):
        resumed.update(next(data2))
    c2.close()
    a, b = straight.state, resumed.state
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.fixture(scope="module")
def learner():
    return make_learner()


def test_sigterm_forces_a_save_and_stop(tmp_path, learner):
    lr = learner
    prev = signal.getsignal(signal.SIGTERM)
    c = ck.Checkpointer(ck.CheckpointConfig(str(tmp_path / "c"), save_interval_steps=100))
    try:
        assert not c.maybe_save(lr, step=3)           # not on the interval
        os.kill(os.getpid(), signal.SIGTERM)           # handled: sets the preemption flag
        assert c.should_stop()
        assert c.maybe_save(lr, step=3, data_state={"i": 7})
        assert c.latest_step() == 3                    # finished (waited) before returning
    finally:
        c.close()
    assert signal.getsignal(signal.SIGTERM) is prev         # close() restores the previous handler


def test_half_written_checkpoint_is_never_latest(tmp_path, learner):
    lr = learner
    d = tmp_path / "c"
    c = ck.Checkpointer(ck.CheckpointConfig(str(d), async_save=True))
    c.maybe_save(lr, step=1, force=True)
    c.wait()
    # a crashed writer leaves only a temporary directory behind
    (d / "2.orbax-checkpoint-tmp-1234").mkdir()
    (d / "2.orbax-checkpoint-tmp-1234" / "state").mkdir()
    c.close()
    c2 = ck.Checkpointer(ck.CheckpointConfig(str(d)))
    assert c2.latest_step() == 1
    assert c2.restore(lr)["policy_version"] == lr.policy_version
    c2.close()
    with pytest.raises(ValueError, match="directory"):
        ck.CheckpointConfig("")


def test_restore_params_reads_only_the_parameters(tmp_path, learner):
    """Evaluation and warm starts read a checkpoint's parameters onto any shardings, without an
    optimizer: here onto one device, from a checkpoint written on a (2, 4) mesh."""
    lr = learner
    c = ck.Checkpointer(ck.CheckpointConfig(str(tmp_path / "c"), async_save=False))
    c.maybe_save(lr, step=5, force=True)
    c.close()
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=one), lr.state["params"])
    params, step = ck.restore_params(str(tmp_path / "c"), abstract)
    assert step == 5
    for x, y in zip(jax.tree.leaves(params), jax.tree.leaves(lr.params_numpy())):
        assert x.sharding == one
        np.testing.assert_array_equal(np.asarray(x), y)
    with pytest.raises(FileNotFoundError, match="no Orbax checkpoint"):
        ck.restore_params(str(tmp_path / "empty"), abstract)


def test_uri_directories_keep_their_scheme(tmp_path, monkeypatch):
    """Defect: ``os.path.abspath("gs://b/run")`` made a local ``gs:/b/run`` folder. Checkpoint and
    run directories keep URIs; relative local paths become absolute."""
    from harness_jax import paths
    from harness_jax.train.workdir import RunPaths

    assert str(paths.resolve("gs://bucket/run/checkpoints")) == "gs://bucket/run/checkpoints"
    run = RunPaths.of("gs://bucket/run")
    assert str(run.checkpoints) == "gs://bucket/run/checkpoints"
    assert str(run.sft_checkpoints) == "gs://bucket/run/sft_checkpoints"
    assert str(run.summary) == "gs://bucket/run/summary.json"
    with pytest.raises(ValueError, match="log.traces_dir"):
        run.local("traces")                    # the trajectory store needs a local directory
    assert run.local("traces", str(tmp_path / "t")) == str(tmp_path / "t")
    monkeypatch.chdir(tmp_path)
    assert str(paths.resolve("rel/ckpt")) == str(tmp_path / "rel" / "ckpt")


def test_weights_source_names_hf_dirs_and_checkpoints(tmp_path):
    """The one reading of where a policy's weights are: an HF directory (a config.json naming a
    model_type), a training workdir (its checkpoints/) or a checkpoints dir; "" is the section's own;
    ``hf=False`` (model.init_from) never takes an HF directory's architecture."""
    import json
    from harness_jax import paths

    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"model_type": "qwen3_5"}))
    work = tmp_path / "run"
    (work / "checkpoints").mkdir(parents=True)
    (work / "config.json").write_text(json.dumps({"name": "run"}))    # a workdir's resolved config
    assert paths.weights_source("") is None
    assert paths.weights_source(str(hf)) == ("hf", str(hf))
    assert paths.weights_source(str(hf), hf=False) == ("orbax", str(hf))
    assert paths.weights_source(str(work)) == ("orbax", str(work / "checkpoints"))
    assert paths.weights_source(str(work / "checkpoints")) == ("orbax", str(work / "checkpoints"))
