"""tiny_cpu_sweep: the README's CPU main job (``tiny_cpu``) with its named sweeps.

Command::

    python launch/sweep.py --config=experiments/configs/tiny_cpu_sweep.py --sweep=seeds \
        --workdir=/tmp/tiny_cpu_seeds

``seeds`` runs the main job for seeds 0, 1, 2 (one run at a time by default: each takes ~8 min on
2 CPU cores, so the sweep ~25 min); ``seeds_x_lr`` crosses them with two GRPO learning rates.
The config is exactly ``tiny_cpu``'s; this module only adds ``SWEEPS`` (docs/experiments.md).
"""
from experiments.configs import tiny_cpu
from harness_jax.sweeps import hyper


def get_config():
    return tiny_cpu.get_config()


SWEEPS = {
    "seeds": hyper.sweep("seed", [0, 1, 2]),
    "seeds_x_lr": lambda: hyper.product(hyper.sweep("seed", [0, 1, 2]),
                                        hyper.sweep("opt.lr", [2e-4, 1e-3])),
}
