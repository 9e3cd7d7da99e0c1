"""harness_s/top_k: Top-1 / Top-4 / Top-8 helpers per rescue (the papers' best is K=8): the
method of ``dbbench_cpu`` with ``harness_s.router.top_k`` swept. K=8 needs a pool of at least 9
harnesses (H0 + 8 siblings): evolve with ``--config.harness_s.evolve.max_generations=3
--config.harness_s.evolve.max_child_evaluations=32``; the config is refused (path + fix) when
the pool is smaller than K.

Commands::

    python launch/train.py --config=experiments/configs/harness_s/top_k.py:$POOL --workdir=/tmp/hs/top4
    python launch/sweep.py --config=experiments/configs/harness_s/top_k.py:$POOL --sweep=k \
        --workdir=/tmp/hs/top_k

This config sets ``rescue.split="per_helper"``: each of the K helpers gets G=8 attempts, so a
rescue runs 8K episodes (K=8: 64) and K is the only thing that varies. With ``dbbench_cpu``'s
``"split"`` the G=8 attempts would be shared instead (K=8: one attempt per helper; K=1: all 8
under one helper).

Expected result: not measured yet. More helpers raise ``rescue/success_rate`` when the pool's siblings are
complementary, at the cost of ``rescue/wall_fraction``.
"""
from experiments.configs.harness_s import common, dbbench_cpu


def get_config(pool: str = ""):
    c = dbbench_cpu.get_config(pool)
    c.name = "hs_top_k_cpu"
    c.harness_s.router.top_k = 4          # Top-4 (the sweep: 1, 4, 8)
    c.harness_s.rescue.split = "per_helper"  # each helper gets G attempts, so K is what varies
    return c


SWEEPS = {
    "k": lambda: common.hyper.sweep("harness_s.router.top_k", [1, 4, 8]),
    "seeds_x_k": common.seeds_x("harness_s.router.top_k", (1, 4, 8)),
}
