"""Packet and cold-start SFT datasets, as library functions and a small CLI.

    # baselines + failure packets (train / validation / held-out) for a frozen target
    python -m harness_jax.harness_r1.dataset packets --out runs/r1/packets \\
        --env dbbench --env-kwargs '{"engine": "sqlite", "protocol": "text"}' \\
        --target '{"kind": "chat", "model": "qwen3.5-9b", "urls": ["http://host:30000/v1"]}' \\
        --batches train=20,validation=4,held_out=4 --batch-size 10 --cache runs/r1/cache

    # teacher responses -> SFT examples (rule-based offline, or any OpenAI-compatible endpoint)
    python -m harness_jax.harness_r1.dataset sft --packets runs/r1/packets --split train \\
        --teacher rule --out runs/r1/sft-train.jsonl
    python -m harness_jax.harness_r1.dataset sft --packets runs/r1/packets --split train \\
        --teacher endpoint --base-url https://api.example/v1 --model big-model \\
        --api-key-env EXAMPLE_API_KEY --price-in 0.5 --price-out 2.0 --out runs/r1/sft.jsonl

Both print a progress bar on stderr and end with a JSON summary (counts, target episodes,
teacher calls, cache hits, tokens and cost). An SFT example is one JSON line
``{"packet_id", "split", "teacher", "response", "prompt_ids", "response_ids", "prompt_version"}``
(``prompt.sft_example``); ``sft_segments(path)`` turns a file into the learner's
``TokenSegment``s (loss on the response tokens only).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Optional, Sequence

from harness_jax.harness_r1.packets import PacketDataset
from harness_jax.envs import registry
from harness_jax.harness.presets import base_harness
from harness_jax.harness.specs import HarnessSpec
from harness_jax.harness_r1.baseline import BaselineCache, EnvRef
from harness_jax.harness_r1.engineers import PromptEngineer, RuleBasedEngineer
from harness_jax.harness_r1.packets import build_packet_dataset
from harness_jax.harness_r1.prompt import normalise_response, sft_example
from harness_jax.harness_r1.targets import TargetSpec
from harness_jax.rl.sft import sft_segment
from harness_jax.sampling.openai_client import ChatClientConfig, OpenAIChatClient
from harness_jax.sampling.tokenizer import load_tokenizer


def _progress(total: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, dynamic_ncols=True,
                disable=not sys.stderr.isatty() and os.environ.get("HARNESS_JAX_PROGRESS") != "1")


def teacher_responses(packets, teacher, *, k: int = 1, seed: int = 0,
                      progress=None) -> tuple[list[dict], dict]:
    """``k`` teacher responses per packet, normalised to the engineer protocol; a reply without
    a valid patch is dropped and counted (it teaches nothing). Rows ``{"packet_id", "split",
    "teacher", "response", "sample"}``; returns ``(rows, stats)``. Engineer training data: built
    inside ``registry.training_scope`` (no test-split task can be made by the teacher)."""
    with registry.training_scope("harness_r1 sft examples"):
        return _teacher_responses(packets, teacher, k, seed, progress)


def _teacher_responses(packets, teacher, k, seed, progress) -> tuple[list[dict], dict]:
    rows, rejected, reasons = [], 0, {}
    for i, pk in enumerate(packets):
        for j, resp in enumerate(teacher.propose(pk, k, seed * 100000 + i)):
            norm, errs = normalise_response(resp, pk.env_name)
            if norm is None:
                rejected += 1
                key = (errs[0] if errs else "invalid")[:80]
                reasons[key] = reasons.get(key, 0) + 1
                continue
            rows.append({"packet_id": pk.packet_id, "split": pk.split, "teacher": teacher.name,
                         "response": norm, "sample": j})
        if progress is not None:
            progress.update(1)
    stats = {"packets": len(packets), "responses": len(rows), "rejected": rejected,
             "rejected_reasons": reasons}
    if hasattr(teacher, "usage"):
        stats["teacher_usage"] = teacher.usage()
    return rows, stats


def examples_from_responses(rows, packets, tokenizer, prompt=None) -> list[dict]:
    """Teacher response rows (``teacher_responses``) as SFT examples with token ids
    (``prompt.sft_example`` + the row's fields; ``prompt``: the run's ``PromptSpec``)."""
    by_id = {pk.packet_id: pk for pk in packets}
    missing = sorted({r["packet_id"] for r in rows} - set(by_id))
    if missing:
        raise KeyError(f"examples_from_responses: responses for unknown packet(s) {missing[:3]}")
    out = []
    for r in rows:
        ex = sft_example(by_id[r["packet_id"]], r["response"], tokenizer, prompt)
        ex.update(r)
        out.append(ex)
    return out


async def afilter_by_delta(rows: Sequence[dict], packets, evaluate, min_delta: float = 0.0
                           ) -> tuple[list[dict], dict]:
    """Keeps the teacher rows whose patch measurably helps: each packet's responses are
    evaluated on the packet's own batch (``evaluate(packet, responses) -> GroupEvaluation``,
    e.g. ``training.EngineerData.aevaluate``: paired reruns, duplicates once, cached) and a row
    is kept when the Delta_B of what it deploys is > ``min_delta`` and its evaluation is
    complete. Every row gets ``"delta_b"``; returns ``(kept, stats)`` with the counts and the
    measured Delta_B of kept and dropped rows."""
    by_id = {pk.packet_id: pk for pk in packets}
    per: dict[str, list[dict]] = {}
    for r in rows:
        per.setdefault(r["packet_id"], []).append(dict(r))
    kept, dropped, infra = [], [], 0
    for pid, rs in per.items():
        ge = await evaluate(by_id[pid], [r["response"] for r in rs])
        for r, ev in zip(rs, ge.evaluations):
            r["delta_b"] = ev.deployed_delta
            if not ev.scored:
                infra += 1
                dropped.append(r)
            elif ev.deployed_delta > min_delta:
                kept.append(r)
            else:
                dropped.append(r)
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")   # noqa: E731
    return kept, {"min_delta_b": min_delta, "kept": len(kept), "dropped": len(dropped),
                  "dropped_infra": infra, "kept_delta_b_mean": mean([r["delta_b"] for r in kept]),
                  "dropped_delta_b_mean": mean([r["delta_b"] for r in dropped]),
                  "packets_kept": len({r["packet_id"] for r in kept})}


def build_sft_examples(packets, teacher, tokenizer, *, k: int = 1, seed: int = 0,
                       progress=None, prompt=None) -> tuple[list[dict], dict]:
    """Teacher responses for ``packets`` as SFT examples; invalid responses are dropped and
    counted (a reply without a valid patch teaches nothing). Returns ``(examples, stats)``."""
    rows, stats = teacher_responses(packets, teacher, k=k, seed=seed, progress=progress)
    examples = examples_from_responses(rows, packets, tokenizer, prompt)
    stats = dict(stats, examples=len(examples),
                 prompt_tokens=sum(len(e["prompt_ids"]) for e in examples),
                 response_tokens=sum(len(e["response_ids"]) for e in examples))
    stats.pop("responses")
    return examples, stats


def write_jsonl(path: str, rows: Sequence[dict]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(path + ".tmp", path)


def load_sft_examples(path: str) -> list[dict]:
    if not os.path.exists(path):
        raise FileNotFoundError(f"no SFT examples at {path}; build them with "
                                "`python -m harness_jax.harness_r1.dataset sft ...`")
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def sft_segments(path_or_examples) -> list:
    """SFT examples as the learner's ``TokenSegment``s (``rl.sft.sft_segment``)."""
    exs = (load_sft_examples(path_or_examples) if isinstance(path_or_examples, str)
           else path_or_examples)
    return [sft_segment(e["prompt_ids"], e["response_ids"], task_id=e.get("packet_id", ""))
            for e in exs]


# ------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------
def _parse_batches(text: str) -> dict:
    out = {}
    for part in text.split(","):
        name, _, n = part.partition("=")
        if not n.strip().isdigit():
            raise SystemExit(f"--batches: {part!r} must look like split=count (e.g. "
                             "train=20,validation=4,held_out=4)")
        out[name.strip()] = int(n)
    return out


def _json_arg(text: Optional[str], flag: str) -> dict:
    if not text:
        return {}
    try:
        if os.path.exists(text):
            with open(text, encoding="utf-8") as f:
                return json.load(f)
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise SystemExit(f"{flag}: not valid JSON ({e}); pass a JSON object or a file holding "
                         "one") from e


def cmd_packets(args) -> dict:
    batches = _parse_batches(args.batches)
    env = EnvRef(args.env, _json_arg(args.env_kwargs, "--env-kwargs"))
    spec = TargetSpec.from_dict(_json_arg(args.target, "--target"))
    harness = (HarnessSpec.load(args.harness_file) if args.harness_file
               else base_harness(args.env, env.kwargs.get("protocol", "text")))
    tok = load_tokenizer(args.tokenizer) if args.tokenizer else load_tokenizer()
    bars: dict = {}

    def progress(split, i, n):
        if split not in bars:
            bars[split] = _progress(n, f"baselines[{split}]")
        bars[split].update(1)

    t0 = time.perf_counter()
    try:
        ds = build_packet_dataset(spec.build(tok), env, harness, args.out, batches=batches,
                                  batch_size=args.batch_size, budget_tokens=args.budget_tokens,
                                  n_per_task=args.n_per_task, seed=args.seed,
                                  cache=BaselineCache(args.cache), tokenizer=tok,
                                  split_kwargs=_json_arg(args.split_kwargs, "--split-kwargs"),
                                  progress=progress)
    finally:
        for b in bars.values():
            b.close()
    summary = dict(ds.manifest(), command="packets", out=ds.root,
                   wall_s=round(time.perf_counter() - t0, 2))
    return summary


def make_teacher(args):
    if args.teacher == "rule":
        return RuleBasedEngineer()

    if not args.base_url or not args.model:
        raise SystemExit("--teacher endpoint needs --base-url and --model")
    client = OpenAIChatClient(ChatClientConfig(
        base_url=args.base_url, model=args.model, api_key_env=args.api_key_env,
        cache_dir=args.cache_dir, price_input_per_mtok=args.price_in,
        price_output_per_mtok=args.price_out))
    return PromptEngineer(client, temperature=args.temperature, max_tokens=args.max_tokens,
                          role="teacher")


def cmd_sft(args) -> dict:
    ds = PacketDataset(args.packets)
    packets = ds.load(args.split)
    if args.limit:
        packets = packets[:args.limit]
    teacher = make_teacher(args)
    tok = load_tokenizer(args.tokenizer) if args.tokenizer else load_tokenizer()
    t0 = time.perf_counter()
    bar = _progress(len(packets), f"teacher[{teacher.name}]")
    try:
        examples, stats = build_sft_examples(packets, teacher, tok, k=args.k, seed=args.seed,
                                             progress=bar)
    finally:
        bar.close()
    write_jsonl(args.out, examples)
    return dict(stats, command="sft", out=os.path.abspath(args.out), teacher=teacher.name,
                split=args.split, wall_s=round(time.perf_counter() - t0, 2))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness_jax.harness_r1.dataset",
                                description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("packets", help="run cached baselines and write failure packets")
    a.add_argument("--out", required=True, help="packet dataset directory")
    a.add_argument("--env", required=True, help="registered environment name")
    a.add_argument("--env-kwargs", default="", help="JSON constructor arguments of the env")
    a.add_argument("--split-kwargs", default="", help="JSON arguments of the env's split "
                   "loader (e.g. categories)")
    a.add_argument("--target", required=True, help="TargetSpec as JSON (or a JSON file)")
    a.add_argument("--harness-file", default="", help="HarnessSpec JSON/YAML (default: H0)")
    a.add_argument("--batches", default="train=20,validation=4,held_out=4",
                   help="packet split=number of batches")
    a.add_argument("--batch-size", type=int, default=10, help="tasks per batch B (paper: 10)")
    a.add_argument("--budget-tokens", type=int, default=18000, help="packet token budget")
    a.add_argument("--n-per-task", type=int, default=1, help="baseline episodes per task")
    a.add_argument("--seed", type=int, default=0, help="task-draw and sampling seed")
    a.add_argument("--cache", required=True, help="baseline cache directory")
    a.add_argument("--tokenizer", default="", help="tokenizer dir (default: Qwen3.5)")
    a.set_defaults(fn=cmd_packets)
    s = sub.add_parser("sft", help="teacher responses -> cold-start SFT examples")
    s.add_argument("--packets", required=True, help="packet dataset directory")
    s.add_argument("--split", default="train", choices=PacketDataset.SPLITS)
    s.add_argument("--teacher", default="rule", choices=("rule", "endpoint"))
    s.add_argument("--base-url", default="", help="endpoint base URL (teacher=endpoint)")
    s.add_argument("--model", default="", help="endpoint model name")
    s.add_argument("--api-key-env", default=None, help="NAME of the env var with the key")
    s.add_argument("--cache-dir", default=None, help="response cache directory")
    s.add_argument("--price-in", type=float, default=0.0, help="USD per 1M prompt tokens")
    s.add_argument("--price-out", type=float, default=0.0, help="USD per 1M output tokens")
    s.add_argument("--temperature", type=float, default=0.7)
    s.add_argument("--max-tokens", type=int, default=4096)
    s.add_argument("--k", type=int, default=1, help="responses per packet")
    s.add_argument("--limit", type=int, default=0, help="first N packets only (0: all)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--tokenizer", default="", help="tokenizer dir (default: Qwen3.5)")
    s.add_argument("--out", required=True, help="output JSONL")
    s.set_defaults(fn=cmd_sft)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    summary = args.fn(args)
    print(json.dumps(summary, indent=1, sort_keys=True, default=str))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
