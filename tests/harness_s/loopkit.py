"""Shared set-up of the loop-integration tests: a base experiment config on generated DBBench
(SQLite, text protocol), a recording wrapper around the scripted policy, and a small frozen pool
of deterministic-operator siblings whose value depends on the task category.

``ReactivePolicy`` (``doubles``) is a test double for the policy's rollout engine: no trained
model solves DBBench here, and the tests need failures that depend on the harness. Everything
else (tokenizer, executor, overlays in sandboxed workers, SQLite environment, runner, collector,
routers, pool file) is real.
"""
from __future__ import annotations

from harness_jax import harness_s
from harness_jax.envs import dbbench
from harness_jax.harness.presets import base_harness
from harness_jax.harness.siblings import Sibling
from harness_jax.harness_s.editors import OPERATORS, EditContext

from .doubles import ReactivePolicy

CTX = EditContext("dbbench", "text", (), 0)


def config(**over):
    """``common.base_config()`` for generated DBBench on SQLite (text protocol); dotted overrides."""
    from experiments.configs import common

    c = common.base_config()
    c.name = "hs_loop_test"
    c.env.dbbench.engine = "sqlite"
    c.env.max_turns = 4
    c.rollout.max_new_tokens = 96
    c.rollout.max_len = 4096
    c.rollout.concurrency = 8
    c.harness.infra_retries = 0
    c.harness.overlay_workers = 1
    c.rl.group_size = 2
    c.rl.tasks_per_step = 3
    c.harness_s = harness_s.harness_s_section()
    c.harness_s.rescue.enabled = "harness_s.pool" in over     # rescue needs a pool
    for k, v in over.items():
        node = c
        *parts, last = k.split(".")
        for p in parts:
            node = node[p]
        node[last] = v
    return c


def resolve(c):
    """The config's specs (``train.spec.resolve``, one device)."""
    from harness_jax.train import spec
    return spec.resolve(c, num_devices=1)


def runner(run, engine, env_factory, tok, store=None, **kw):
    """The run's ``EpisodeRunner`` on ``engine``."""
    from harness_jax.train import rollout
    return rollout.EpisodeRunner(run.runner, engine, env_factory, tok, store, **kw)


def context(run, runner, paths):
    """The part of a run context the Harness-S extension uses: the specs, the runner, H0, the
    run directory and a console (a minimal stand-in for ``train.context.RunContext``)."""
    import types

    from harness_jax.train.console import QUIET
    return types.SimpleNamespace(spec=run, runner=runner, harness=run.base_harness, paths=paths, console=QUIET)


def collector(run, ctx, stream, ext):
    """The loop's collector with the extension's selector and post-processors."""
    from harness_jax.train import collect, groups
    selector = ext.harness_selector(ctx) or groups.FixedHarness(ctx.harness)
    source = collect.RolloutGroups(ctx.runner, selector, group_size=run.collector.group_size, seed=run.seed)
    return collect.Collector(run.collector, ctx.runner, stream, source, ext.post_processors(ctx))


def tasks(categories, n_per_cat=1, seed=3, split="train"):
    out = []
    for i, cat in enumerate(categories):
        out += dbbench.generate_tasks(n_per_cat, seed=seed * 10 + i, split=split, categories=[cat])
    return out


class RecordingPolicy(ReactivePolicy):
    """The scripted policy, recording the sampling temperature of every request."""

    def __init__(self, tokenizer, items, version=7):
        super().__init__(tokenizer, items, version)
        self.temperatures: list[float] = []

    async def generate(self, request):
        self.temperatures.append(float(request.params.temperature))
        return await super().generate(request)


def policy_for(tokenizer, task_list):
    items = {t.data["description"] + "\n" + t.data["add_description"]: dict(t.data, _category=t.category)
             for t in task_list}
    return RecordingPolicy(tokenizer, items)


def h0(cfg=None) -> Sibling:
    if cfg is None:
        return Sibling(base_harness("dbbench", "text"), name="H0")
    return Sibling(resolve(cfg).base_harness, name="H0")


def child(parent: Sibling, op: str) -> Sibling:
    return OPERATORS[op].apply(parent, CTX)


def frozen_pool(directory, val_tasks, runner_results, base: Sibling, children):
    """A frozen pool of ``base`` + ``children`` whose validation results are ``runner_results``
    (``{sibling_id: {task_id: [bool]}}``)."""
    entries = [harness_s.PoolEntry(base, 0, None, None, "base", runner_results[base.sibling_id], "v7",
                                   harness_s.harness_cost(base))]
    for ch, d in children:
        entries.append(harness_s.PoolEntry(ch, 1, base.sibling_id, d, f"deterministic:{d}",
                                           runner_results[ch.sibling_id], "v7", harness_s.harness_cost(ch)))
    pool = harness_s.SiblingPool(entries, env_name="dbbench", val_task_ids=[t.task_id for t in val_tasks],
                                 task_info={t.task_id: {"category": t.category, "text": t.data["description"]}
                                            for t in val_tasks})
    return harness_s.freeze_pool(pool, str(directory))


CATS = ["counting", "aggregation-SUM", "DELETE"]


def world(tok, pool_dir):
    """Training and validation tasks (counting: H0 answers without looking; aggregation: H0
    answers after an SQL error; DELETE: H0 succeeds), the scripted policy and a frozen pool of
    H0 + four operator siblings with their real validation results."""
    import types

    from harness_jax.envs import dbbench
    from harness_jax.train import evaluation

    train = tasks(CATS, 1, seed=4, split="train")
    val = tasks(CATS, 2, seed=5, split="search")
    policy = policy_for(tok, train + val)
    c = config()
    base = h0(c)
    kids = [(child(base, op), op) for op in ("inspect_before_answer", "error_recovery_hint",
                                              "worked_example", "repeat_guard")]
    run = runner(resolve(c), policy, lambda: dbbench.DBBenchEnv(engine="sqlite", protocol="text"), tok)
    try:
        results = {}
        for sib in [base] + [kid for kid, _ in kids]:
            per = evaluation.run_attempts(run, val, sib, k=1, temperature=0.0, tag="val")
            results[sib.sibling_id] = {t.task_id: [bool(e.success) for e in eps] for t, eps in zip(val, per)}
    finally:
        run.close()
    pool = frozen_pool(pool_dir, val, results, base, kids)
    return types.SimpleNamespace(train=train, val=val, policy=policy, pool=pool, h0=base, tok=tok)


def synthetic_pool(directory, env_name: str = "dbbench", n_children: int = 9, protocol: str = "function"):
    """A frozen pool of H0 + ``n_children`` spec-only siblings (system-prompt variants) with
    made-up validation results: for config validation, where only the pool's size and
    environment matter."""
    import dataclasses

    from harness_jax.harness.presets import base_harness as preset_h0

    spec = preset_h0(env_name, protocol)
    base = Sibling(spec, name="H0")
    tids = [f"t{i}" for i in range(4)]
    entries = [harness_s.PoolEntry(base, 0, None, None, "base", {t: [i == 0] for i, t in enumerate(tids)}, "v0", 1.0)]
    for j in range(n_children):
        sib = Sibling(dataclasses.replace(spec, name=f"H0+v{j}", system_prompt=spec.system_prompt + f"\n# variant {j}"),
                      name=f"H0+v{j}")
        entries.append(harness_s.PoolEntry(sib, 1, base.sibling_id, f"dir{j}", "test",
                                           {t: [i == j % 4] for i, t in enumerate(tids)}, "v0", 2.0 + j))
    pool = harness_s.SiblingPool(entries, env_name=env_name, val_task_ids=tids)
    return harness_s.freeze_pool(pool, str(directory))
