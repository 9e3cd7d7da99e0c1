"""The CI end-to-end config (tests/e2e/tiny_e2e_config.py) made shorter still, with sweeps.

Used by tests/sweeps through ``launch/sweep.py --config=tests/sweeps/sweep_config.py``: every run
is a real ``launch/train.py`` run (no SFT, 3 GRPO steps, a checkpoint after each).
"""
import importlib.util
import os

from harness_jax.sweeps import hyper

_E2E = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "e2e", "tiny_e2e_config.py")


def _base():
    spec = importlib.util.spec_from_file_location("_tiny_e2e_config", _E2E)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m.get_config()


def get_config():
    c = _base()
    c.name = "sweep_e2e"
    c.num_steps = 3
    c.sft.enabled = False
    c.eval.at_start = False
    c.eval.num_tasks = 1
    c.ckpt.every_steps = 1
    c.ckpt.export_hf = False
    c.log.store_traces = False
    return c


SWEEPS = {
    # two real runs and one the launcher rejects (GRPO needs group_size >= 2)
    "e2e": lambda: hyper.chain(hyper.sweep("seed", [0, 1]), hyper.fixed({"seed": 2, "rl.group_size": 1})),
    "fails": hyper.fixed({"rl.group_size": 1}),
    "fails_and_one": [{"seed": 0}, {"rl.group_size": 1}],
    "grid": lambda: hyper.product(hyper.sweep("seed", [0, 1, 2]), hyper.sweep("opt.lr", [1e-3, 3e-3]),
                                  hyper.fixed({"mesh.shape": (1, 1, 1, 1), "env.dbbench.engine": "sqlite"})),
}
