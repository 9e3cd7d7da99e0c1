"""One process of the localhost multi-host test (run by test_multihost.py, not by pytest).

Usage: python multihost_worker.py OUT.npz PROCESS_ID NUM_PROCESSES PORT LOCAL_DEVICES
With NUM_PROCESSES=1 it is the single-process reference run.
"""
import os
import sys

out, pid, nproc, port, ndev = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={ndev}"
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

from harness_jax import distributed  # noqa: E402
from harness_jax import sharding as shd  # noqa: E402

distributed.initialize(f"localhost:{port}", nproc, pid)

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from harness_jax.rl import batch as rlbatch  # noqa: E402
from harness_jax.rl import learner as L  # noqa: E402
from helpers import random_segments  # noqa: E402
from toy_model import ToyLM  # noqa: E402

assert jax.device_count() == 8, jax.device_count()
cfg = L.LearnerConfig(num_micro_batches=2, shuffle=True, logit_chunk=8,
                      opt=L.OptimizerConfig(learning_rate=3e-3, eps=1e-5))  # eps: tiny-gradient entries must not amplify all-reduce order noise
lr = L.Learner(ToyLM(rngs=nnx.Rngs(0)), cfg, mesh=shd.make_mesh((2, 4, 1, 1)))
losses = []
for i in range(2):
    b = rlbatch.pack_segments(random_segments(10 + i, n=24), rlbatch.PackConfig(buckets=(32,), row_multiple=16))
    losses += [m["loss"] for m in lr.update(b)]
params = lr.params_numpy()
if jax.process_index() == 0:
    flat = {jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_flatten_with_path(params)[0]}
    np.savez(out, losses=np.asarray(losses), **flat)
print("process", jax.process_index(), "of", jax.process_count(), "losses", losses, flush=True)
