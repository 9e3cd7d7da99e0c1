"""The Harness-R1 table of one training run: the target's success under each engineer, the hook
ablation and the transfer, as JSON (schema below) and markdown. ``launch/evaluate_engineer.py``
is the thin main.

    from harness_jax.harness_r1 import evaluate
    table = evaluate.run_table(config, workdir, split="held_out")     # a run of launch/engineer.py
    merged = evaluate.merge_tables([t_dbbench, t_alfworld, t_webshop])  # the equal-weight mean

Arms (``r1.table.arms``): ``default`` (the target under its base harness: the baseline itself),
``react`` (the public ReAct baseline: a Thought/Action contract in the system prompt),
``self_refine`` (the target inside the draft-critique-refine agent, ``agents.SelfRefine``),
``review_hint`` (a fixed review-hint overlay), ``rule`` (the rule-based engineer), ``prompt`` (a prompt-based engineer on ``r1.table.prompt_*``, e.g. a frontier model),
``sft`` (the engineer after cold-start SFT: ``sft_checkpoints/``) and ``grpo`` (after GRPO:
``checkpoints/``). Engineers write one patch per packet (greedy for the model engineers); every
arm is a paired rerun against the cached baseline of each packet's batch (``tables``).

``split="held_out"`` uses the run's held-out packets (``env.eval_split``, e.g. ``selection``);
``split="test"`` builds test packets (baselines of the target on the environment's sealed test
split, ``r1.packets.held_out_batches`` batches) inside ``sealed_test_access`` -- only this entry
point opens it.

JSON schema (``harness-r1-table-v1``)::

    {"schema": "harness-r1-table-v1", "split": "held_out", "config": <run name>,
     "target": <identity>, "benchmarks": ["dbbench"],
     "arms": {<arm>: {<benchmark>: success, ..., "mean": equal-weight mean}},
     "rows": [{"arm", "benchmark", "target", "batches", "success_before", "success_after",
               "delta", "valid_frac", "noop_frac", "infra_batches", "target_episodes",
               "details": [...]}],
     "ablation": {"arm", "benchmark", "packets", "full_delta",
                  "hooks": {<hook>: {"delta", "drop", "packets"}}} | null,
     "transfer": [{"target", "target_key", "valid", "packet_success", "packet_failures",
                   "heldout_before", "heldout_after", "delta", "delta_std", "seeds"}]}

``merge_tables`` concatenates the rows of per-benchmark tables and recomputes ``arms`` (a
benchmark an arm lacks makes its mean NaN, never a re-weighted mean).
"""
from __future__ import annotations

import json
import math
import os
from typing import Optional, Sequence

from harness_jax.envs import registry
from harness_jax.harness_r1 import agents, engineers, pipeline
from harness_jax.harness_r1.baseline import BaselineCache, run_sync
from harness_jax.harness_r1.engineers import ModelEngineer, RuleBasedEngineer
from harness_jax.harness_r1.packets import PacketDataset, build_packet_dataset
from harness_jax.harness_r1.prompt import RESPONSE_PROTOCOL
from harness_jax.harness_r1.reward import RewardCache
from harness_jax.harness_r1.tables import (Arm, Row, aablate_hooks, apropose, evaluate_arm, success_table,
                                           table_markdown, transfer)
from harness_jax.paths import weights_source
from harness_jax.sampling.openai_client import ChatClientConfig, OpenAIChatClient
from harness_jax.rl import policy
from harness_jax.train import console as console_lib, rollout, spec as spec_lib
from harness_jax.train.workdir import RunPaths

SCHEMA = "harness-r1-table-v1"
ARMS = ("default", "react", "self_refine", "review_hint", "rule", "prompt", "sft", "grpo")


def model_engineer(run, workdir: str, which: str):
    """``(ModelEngineer, engine)`` of the run's engineer after SFT (``which="sft"``) or GRPO
    (``"grpo"``), greedy, on the run's rollout mode (servers get the weights first). ``run``:
    ``train.spec.RunSpec``."""
    paths = RunPaths.of(workdir)
    ckpt = paths.sft_checkpoints if which == "sft" else paths.checkpoints
    if not ckpt.exists():
        raise FileNotFoundError(f"arm {which!r}: no {ckpt}; run launch/engineer.py with this config and "
                                "workdir first")
    tok = rollout.load_tokenizer(run, paths.tokenizer)
    mesh, rules = policy.make_mesh(run.mesh), policy.mesh_rules(run.mesh)
    model, _ = policy.policy_model(run.model, weights_source(ckpt), mesh, rules, seed=run.seed)
    r = run.rollout
    engine, sync = rollout.build_engine(r, model, tok, seed=run.seed, version=0, platform=run.mesh.platform,
                                        name=f"{run.name}-eval")
    if not r.colocated:
        sync(model, 0)
    return ModelEngineer(engine, tok, name=which, temperature=0.0, top_p=1.0,
                         max_new_tokens=int(r.max_new_tokens),
                         prompt=run.method("r1").prompt_spec()), engine


def make_arm(run, workdir: str, name: str, harness, tok=None):
    """``(Arm, closer)`` for one arm name (module docstring); ``run``: ``train.spec.RunSpec``;
    ``tok``: the target's tokenizer (the Self-Refine agent renders its side turns with it;
    default: the run's)."""
    r1 = run.method("r1")
    if name == "default":
        return Arm("default"), None
    if name == "react":
        return Arm("react", harness=engineers.react_harness(harness)), None
    if name == "self_refine":
        return Arm("self_refine", agent=agents.self_refine(
            tok if tok is not None else pipeline.target_tokenizer(run, r1),
            enable_thinking=harness.enable_thinking)), None
    if name == "review_hint":
        return Arm("review_hint", engineers.FixedPatchEngineer(
            engineers.review_hint_patch(run.env.name), "review_hint")), None
    if name == "rule":
        return Arm("rule", engineers.RuleBasedEngineer(surface=r1.effect_surface)), None
    if name == "prompt":
        t = run.method("r1").table
        client = OpenAIChatClient(ChatClientConfig(
            base_url=t.prompt_base_url, model=t.prompt_model, api_key_env=t.prompt_api_key_env or None,
            cache_dir=os.path.join(workdir, "cache", "prompt_engineer")))
        return Arm(f"prompt:{t.prompt_model}", engineers.PromptEngineer(
            client, temperature=0.0, prompt=r1.prompt_spec())), None
    if name in ("sft", "grpo"):
        eng, engine = model_engineer(run, workdir, name)
        return Arm(name, eng), getattr(engine, "close", None)
    raise ValueError(f"arm {name!r}: use one of {ARMS}")


def test_packets(run, workdir: str, target, tok):
    """Test-split packets of the target (built inside ``sealed_test_access``; cached)."""
    r1 = run.method("r1")
    p = r1.packets
    paths = pipeline.EngineerPaths.of(workdir)
    with registry.sealed_test_access(f"Harness-R1 table of {run.name}"):
        return build_packet_dataset(
            target, pipeline.env_ref(run), pipeline.target_harness(run, r1),
            os.path.join(workdir, "packets_test"), batches={"held_out": int(p.held_out_batches)},
            batch_size=int(p.batch_size), budget_tokens=int(p.budget_tokens), n_per_task=int(p.n_per_task),
            seed=int(p.seed), cache=BaselineCache(paths.baseline_cache(p)), tokenizer=tok,
            config=pipeline.executor_config(run, r1), env_splits={"held_out": "test"},
            split_kwargs=pipeline.split_options(run))


def ablation(arm, packets, target, baselines, tasks, *, tok, cache, seed: int = 0) -> Optional[dict]:
    """Per hook point: the mean Delta_B of the arm's patches without it and the mean drop."""
    async def go():
        per_hook: dict = {}
        full = []
        for i, pk in enumerate(packets):
            resp = (await apropose(arm.engineer, pk, 1, seed * 1000 + i))[0]
            try:
                rows = await aablate_hooks(resp, pk.env_name, target, [tasks[t] for t in pk.task_ids],
                                           baselines.get(pk.baseline_key), cache=cache, tokenizer=tok,
                                           response_protocol=RESPONSE_PROTOCOL)
            except ValueError:
                continue                       # an invalid patch has no hooks to remove
            full.append(rows[0]["delta"])
            for r in rows[1:]:
                per_hook.setdefault(r["removed"], []).append(r)
        return full, per_hook

    full, per_hook = run_sync(go(), "ablation")
    if not full:
        return None
    mean = lambda xs: sum(xs) / len(xs)          # noqa: E731
    return {"arm": arm.name, "benchmark": packets[0].env_name, "packets": len(full),
            "full_delta": mean(full),
            "hooks": {h: {"delta": mean([r["delta"] for r in rs]), "drop": mean([r["drop"] for r in rs]),
                          "packets": len(rs)} for h, rs in per_hook.items()}}


def run_table(config, workdir: str, *, split: str = "held_out", arms: Optional[Sequence[str]] = None,
              console: console_lib.Console = console_lib.QUIET) -> dict:
    """The table of one run (module docstring); also written to ``<workdir>/table_<split>.json``
    and ``.md``. Resolves ``config`` (it must have the ``r1`` section)."""
    if split not in ("held_out", "test"):
        raise ValueError(f"split={split!r}: use 'held_out' (the run's held-out packets) or 'test'")
    run = spec_lib.resolve(config)
    r1 = run.method("r1")
    arms = tuple(arms or r1.table.arms)
    tok = pipeline.target_tokenizer(run, r1)
    target = r1.target.spec().build(tok)
    paths = pipeline.EngineerPaths.of(workdir)
    baselines = BaselineCache(paths.baseline_cache(r1.packets))
    cache = RewardCache(paths.reward_cache)
    ds = test_packets(run, workdir, target, tok) if split == "test" else PacketDataset(paths.packets)
    packets = ds.load("held_out")[:int(run.loop.eval.num_tasks)] if split == "held_out" else ds.load("held_out")
    if not packets:
        raise ValueError(f"no {split} packets in {ds.root}; run launch/engineer.py first")
    tasks = ds.tasks("held_out")
    harness = pipeline.target_harness(run, r1)
    rows, abl = [], None
    try:
        for name in arms:
            arm, close = make_arm(run, workdir, name, harness, tok)
            try:
                row = evaluate_arm(arm, packets, target, baselines, tasks, tokenizer=tok, cache=cache,
                                   eval_attempts=int(r1.eval_attempts), seed=int(run.seed),
                                   require_code_hook_only=bool(r1.require_code_hook_only))
                rows.append(row)
                console.line(f"[table] {arm.name}: success {row.success_before:.3f} -> {row.success_after:.3f} "
                             f"(Δ {row.delta:+.3f}, valid {row.valid_frac:.2f}, {row.batches} batches, "
                             f"{row.infra_batches} infrastructure-incomplete)")
                if name == r1.table.ablate and arm.engineer is not None:
                    abl = ablation(arm, packets, target, baselines, tasks, tok=tok, cache=cache, seed=int(run.seed))
            finally:
                if close is not None:
                    close()
        tr = []
        specs = [t.to_dict() for t in r1.table.transfer_specs()]
        if specs:
            eng_arm = r1.table.ablate or "rule"
            arm, close = (make_arm(run, workdir, eng_arm, harness) if eng_arm != "rule" else (None, None))
            try:
                engineer = arm.engineer if arm is not None else RuleBasedEngineer(surface=r1.effect_surface)
                tr = transfer(engineer, specs, pipeline.env_ref(run), harness,
                              [tasks[t] for t in packets[0].task_ids],
                              [tasks[t] for pk in packets[1:] for t in pk.task_ids] or
                              [tasks[t] for t in packets[0].task_ids],
                              baseline_cache=baselines, reward_cache=cache, tokenizer=tok,
                              budget_tokens=int(r1.packets.budget_tokens), config=pipeline.executor_config(run, r1))
            finally:
                if close is not None:
                    close()
    finally:
        target.close()
    table = dict(schema=SCHEMA, split=split, config=run.name, target=str(target.identity),
                 **success_table(rows), rows=[r.to_dict() for r in rows], ablation=abl, transfer=tr)
    write(table, os.path.join(workdir, f"table_{split}"))
    return table


def merge_tables(tables: Sequence[dict]) -> dict:
    """Per-benchmark tables -> one table with the equal-weight mean over benchmarks."""
    if not tables:
        raise ValueError("merge_tables: no tables")
    bad = [t.get("schema") for t in tables if t.get("schema") != SCHEMA]
    if bad:
        raise ValueError(f"merge_tables: not {SCHEMA} tables ({bad[0]!r})")
    rows = [Row(**r) for t in tables for r in t["rows"]]
    return dict(schema=SCHEMA, split=",".join(sorted({t["split"] for t in tables})),
                config=",".join(t["config"] for t in tables), target=",".join(sorted({t["target"] for t in tables})),
                **success_table(rows), rows=[r.to_dict() for r in rows],
                ablation=[t["ablation"] for t in tables if t.get("ablation")],
                transfer=[x for t in tables for x in t.get("transfer") or []])


def markdown(table: dict) -> str:
    out = [f"### Target success under each engineer ({table['split']}; success %, equal-weight mean)", "",
           table_markdown(table), "", "### Paired Δ_B per arm and benchmark", "",
           "| arm | benchmark | batches | success before | after | Δ_B | valid | improved | no-op | infra |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    out += [f"| {r['arm']} | {r['benchmark']} | {r['batches']} | {_pct(r['success_before'])} | "
            f"{_pct(r['success_after'])} | {r['delta']:+.3f} | {r['valid_frac']:.2f} | "
            f"{r.get('improved_frac', float('nan')):.2f} | {r['noop_frac']:.2f} | {r['infra_batches']} |"
            for r in table.get("rows", [])]
    abls = table.get("ablation")
    for a in ([abls] if isinstance(abls, dict) else abls or []):
        out += ["", f"### Hook ablation ({a['arm']}, {a['benchmark']}, {a['packets']} packets; full Δ_B "
                    f"{a['full_delta']:+.3f})", "", "| removed hook | Δ_B | drop |", "|---|---|---|"]
        out += [f"| {h} | {v['delta']:+.3f} | {v['drop']:+.3f} |" for h, v in a["hooks"].items()]
    if table.get("transfer"):
        out += ["", "### Transfer", "", "| target | valid | held-out before | after | Δ_B |", "|---|---|---|---|---|"]
        out += [f"| {r['target']} | {r['valid']} | {_pct(r['heldout_before'])} | {_pct(r['heldout_after'])} | "
                f"{r['delta']:+.3f} |" for r in table["transfer"]]
    return "\n".join(out) + "\n"


def _pct(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def write(table: dict, stem: str) -> tuple[str, str]:
    """``<stem>.json`` and ``<stem>.md`` (atomically)."""
    os.makedirs(os.path.dirname(os.path.abspath(stem)) or ".", exist_ok=True)
    for ext, text in ((".json", json.dumps(table, indent=1, default=float)), (".md", markdown(table))):
        with open(stem + ext + ".tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(stem + ext + ".tmp", stem + ext)
    return stem + ".json", stem + ".md"
