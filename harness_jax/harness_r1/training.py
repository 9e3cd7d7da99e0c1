"""Harness-R1 engineer training on the loop's machinery: cold-start SFT, then GRPO on Delta_B.

The engineer is a policy like any other, so it trains with the project's one loop
(``train.run.fit`` -> ``train.loop.Trainer``: learner, weight sync, async producer with bounded
staleness, checkpoints and resume, SIGTERM, metrics writer, console); only what the policy is
trained ON differs, and ``EngineerExtension`` (a ``train.extensions.Extension``) supplies it:

* the **stream** is the train split of the packet dataset (``TaskStream`` over packets: shuffled
  per epoch, checkpointed), ``rl.tasks_per_step`` packets per step;
* a packet's **group** (``EngineerGroups``): ``K = rl.group_size`` seeded samples from
  the engineer's engine (``ModelEngineer.asample``: prompt ids, tokens, the engine's log-probs),
  each parsed, validated and evaluated independently by re-running the frozen target on the
  packet's whole batch with the baseline's seeds (``reward.aevaluate_group``: duplicates once,
  distinct patches in parallel or on an ``EvaluationPool``, the reward cache);
  ``r_k = Delta_B`` (+ ``r1.reward.valid_bonus``; ``r1.reward.invalid_reward`` when invalid or
  a no-op; 0 when incomplete: ``reward.RewardSpec``). Samples whose evaluation stayed
  incomplete (infrastructure) are not scored and not trained on. Each scored sample is one
  ``Episode`` with one ``TokenSegment`` (prompt masked, the response with its rollout
  log-probs), so ``groups.compute_advantages`` (the project's one advantage path) gives the
  sequence-level ``A_k = (r_k - mean) / max(std, eps)`` over the scored samples, exactly
  ``reward.group_advantages_K`` (tested); with ``r1.reward.adv_baseline="group_with_noop"`` a
  virtual no-patch sample of reward 0 joins the statistics (``Group.baseline_rewards``);
* the **loss** is the learner's: ``rl.agg="seq_mean_token_mean"`` (``1/K sum_k 1/T_k sum_t``),
  the asymmetric clip ``rl.eps_low/eps_high``, the truncated importance weight
  ``rl.tis_mode="cap"``: ``min(exp(l_tr - l_ro), rl.tis_cap)`` (``"literal"``: the paper's
  printed ``clip(l_tr - l_ro, 0, C)``). Only the engineer's parameters exist in the learner; the
  target is a ``FrozenTarget`` whose update methods raise;
* the **SFT phase** (``warm_start``) trains on the cold-start examples with the loss averaged
  over all response tokens of the data set (``rl.sft``: ``"dataset_token_mean"``);
* **evaluation** (``evaluate``) measures the engineer on held-out packets: ``eval.k`` samples
  per packet at ``eval.temperature``, each evaluated like a training sample; mean Delta_B, the
  fraction of valid patches, no-ops, and the batch success under the patches; with a sampling
  temperature also the greedy patch (one per packet, what would be deployed) under ``greedy``.

Everything the training run reads from outside (packets, baselines, SFT examples, the target)
comes in an ``EngineerData``; ``harness_r1.pipeline`` builds it stage by stage.
"""
from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any, Optional, Sequence

import numpy as np

from harness_jax.harness_r1 import dataset
from harness_jax.harness_r1.engineers import ModelEngineer
from harness_jax.harness_r1.packets import Packet, PacketDataset
from harness_jax.harness_r1.prompt import RESPONSE_PROTOCOL, PromptSpec
from harness_jax.harness_r1.reward import GroupEvaluation, RewardSpec, aevaluate_group, engineer_segments
from harness_jax.train import sft_warmstart
from harness_jax.train.collect import episode_seed
from harness_jax.train.data import TaskStream
from harness_jax.train.extensions import Extension
from harness_jax.train.groups import Episode, Group


@dataclasses.dataclass
class EngineerData:
    """What engineer training reads: the frozen target, the packet dataset with its baselines,
    the reward cache and the cold-start SFT examples."""

    target: Any                          # harness_r1.FrozenTarget
    target_tokenizer: Any                # the tokenizer the target's executor uses
    dataset: PacketDataset
    baselines: Any                       # BaselineCache (or dict key -> Baseline)
    reward_cache: Any = None             # RewardCache or None
    sft_examples: str = ""               # JSONL of SFT examples (engineer token ids)
    train_split: str = "train"           # packet split trained on
    eval_split: str = "held_out"         # packet split evaluated
    pool: Any = None                     # EvaluationPool or None (in-process)
    eval_attempts: int = 3               # reward: infrastructure rounds per evaluation
    require_code_hook_only: bool = False  # reward: only add_code_hook actions are valid
    prompt: PromptSpec = PromptSpec()    # what the engineer is told: the reward (RewardSpec) and effect surface
    cross_batch: bool = False            # evaluation: also apply packet i's patches to packet i+1's batch

    def __post_init__(self):
        self._baselines: dict = {}
        self._lock = threading.Lock()

    @property
    def reward(self) -> RewardSpec:
        """The reward's options (invalid/no-op reward, valid bonus, advantage baseline)."""
        return self.prompt.reward

    def baseline(self, packet: Packet):
        with self._lock:
            b = self._baselines.get(packet.baseline_key)
            if b is None:
                b = self.baselines.get(packet.baseline_key)
                if b is None:
                    raise KeyError(f"packet {packet.packet_id}: no cached baseline "
                                   f"{packet.baseline_key}; rebuild the packets with the same cache")
                self._baselines[packet.baseline_key] = b
            return b

    def reward_kw(self) -> dict:
        return dict(cache=self.reward_cache, pool=self.pool, tokenizer=self.target_tokenizer,
                    response_protocol=RESPONSE_PROTOCOL, eval_attempts=self.eval_attempts,
                    require_code_hook_only=self.require_code_hook_only, reward=self.reward)

    async def aevaluate(self, packet: Packet, responses: Sequence[str], eps: float = 1e-6
                        ) -> GroupEvaluation:
        """The K responses of one packet, evaluated against its cached baseline."""
        return await aevaluate_group(responses, packet.env_name, self.target,
                                     self.dataset.batch(packet), self.baseline(packet), eps=eps,
                                     **self.reward_kw())


def packet_group(group_id: str, packet: Packet, prompt_ids, results, ge: GroupEvaluation,
                 noop_arm: bool = False) -> Group:
    """The scored samples of one packet as a loop ``Group``: one ``Episode`` (one segment) per
    sample; unscored (infrastructure-incomplete) samples are counted in ``info``, not trained.
    ``noop_arm``: the virtual no-patch sample (reward 0) joins the advantage statistics."""
    segs = engineer_segments(prompt_ids, results, ge, group_id)
    episodes = [Episode(episode_id=s.episode_id, task=packet, harness_id="engineer",
                        reward=float(s.reward), success=s.reward > 0, segments=[s],
                        policy_version=int(s.policy_version), num_turns=1) for s in segs]
    return Group(group_id, packet, episodes, harness_id="engineer",
                 info={"infra_errors": int(np.sum(~ge.scored_K)), "r1": ge.metrics()},
                 baseline_rewards=[0.0] if noop_arm else [])


def step_metrics(records: Sequence[dict]) -> dict:
    """``r1/*`` metrics of one step from its packets' ``GroupEvaluation.metrics()``: mean
    Delta_B over all samples (what each deploys: 0 for invalid / no-op / incomplete), the mean
    and max reward (``RewardSpec``), valid / no-op / infrastructure fractions, duplicates, distinct
    patches evaluated, target episodes, zero-variance packets, and the reward cache:
    ``r1/cache_hits`` distinct valid patches whose Delta_B came from the cache (evaluated at an
    earlier step), ``r1/cache_hit_frac`` = hits / distinct valid patches, ``r1/reuse_frac`` =
    valid samples that cost no rerun (cache hit or in-group duplicate) / valid samples."""
    if not records:
        return {}
    k = sum(r["k"] for r in records)
    w = lambda name: sum(r[name] * r["k"] for r in records) / k   # noqa: E731
    return {"r1/delta_b_mean": w("mean_delta") if all("mean_delta" in r for r in records) else w("mean_reward"),
            "r1/reward_mean": w("mean_reward"), "r1/reward_max": max(r["max_reward"] for r in records),
            "r1/valid_frac": w("valid_frac"), "r1/noop_frac": w("noop_frac"),
            "r1/infra_frac": w("infra_frac"), "r1/packets": float(len(records)),
            "r1/duplicates": float(sum(r["duplicates"] for r in records)),
            "r1/unique_patches": float(sum(r["unique_patches"] for r in records)),
            "r1/evaluated_patches": float(sum(r["evaluated"] for r in records)),
            "r1/target_episodes": float(sum(r["target_episodes"] for r in records)),
            "r1/cache_hits": float(sum(r.get("cache_hits", 0) for r in records)),
            "r1/cache_hit_frac": _frac(sum(r.get("cache_hits", 0) for r in records),
                                       sum(r["unique_patches"] for r in records)),
            "r1/reuse_frac": _frac(sum(r.get("valid", 0) - r["evaluated"] for r in records),
                                   sum(r.get("valid", 0) for r in records)),
            "r1/zero_variance_packets": float(sum(bool(r["zero_variance"]) for r in records))}


def _frac(num: float, den: float) -> float:
    return float(num) / float(den) if den else 0.0


class EngineerGroups:
    """The engineer's group source (module docstring): ``group_size`` seeded samples of a packet,
    each evaluated against the packet's baseline; the evaluations' metrics are kept per step."""

    def __init__(self, engineer: ModelEngineer, data: EngineerData, *, group_size: int, seed: int, eps: float):
        self.engineer = engineer
        self.data = data
        self.group_size = int(group_size)
        self.seed = int(seed)
        self.eps = float(eps)
        self._records: dict[int, list] = {}
        self._lock = threading.Lock()

    async def __call__(self, packet, step: int, index: int) -> Optional[Group]:
        gid = f"s{step}-p{index}-{packet.packet_id}"
        prompt_ids, results, texts = await self.engineer.asample(
            packet, self.group_size, episode_seed(self.seed, step, index))
        ge = await self.data.aevaluate(packet, texts, self.eps)
        with self._lock:
            self._records.setdefault(step, []).append(ge.metrics())
        return packet_group(gid, packet, prompt_ids, results, ge, self.data.reward.noop_arm)

    def pop_records(self, step: int) -> list[dict]:
        """The evaluations of every packet sampled for ``step`` (dropped groups included)."""
        with self._lock:
            return self._records.pop(step, [])


async def aevaluate_engineer(engineer: ModelEngineer, data: EngineerData, packets: Sequence[Packet], *,
                             k: int, temperature: float, seed: int = 0) -> dict:
    """The engineer on ``packets``: ``k`` samples each at ``temperature``, every sample evaluated
    like a training sample. Returns the mean Delta_B over all samples (what each deploys:
    invalid/no-op = 0), the mean reward, the valid / no-op fractions, the mean best-of-k Delta_B, ``improved_frac`` (packets whose mean
    Delta_B over their samples is > 0), the batches' baseline success and the success under the
    patches (baseline + mean Delta_B), ``infra_samples`` (samples whose evaluation stayed
    incomplete: counted, not scored), per-packet details, and per task of the batches the mean
    ``R^P - R^0`` over the samples (``task_deltas``: the paired values a comparison of two
    engineers bootstraps over). With ``data.cross_batch`` every packet's samples are also
    evaluated on the NEXT packet's batch (``cross_delta_b``, ``cross_task_deltas``: a patch
    written from one packet applied to another batch, beside the same-batch figures)."""
    cross = data.cross_batch and len(packets) > 1

    async def one(i, pk):
        _, _, texts = await engineer.asample(pk, k, seed * 7919 + i, temperature=temperature)
        ge = await data.aevaluate(pk, texts)
        other = await data.aevaluate(packets[(i + 1) % len(packets)], texts) if cross else None
        return pk, ge, other

    got = await asyncio.gather(*(one(i, pk) for i, pk in enumerate(packets)))
    details, rewards, valid, noop, best, base, improved, rw = [], [], [], [], [], [], [], []
    task_deltas, cross_deltas, cross_task = {}, [], {}
    for pk, ge, other in got:
        task_deltas.update(_mean_task_deltas(ge))
        if other is not None:
            cross_deltas += [e.deployed_delta for e in other.evaluations if e.scored]
            cross_task.update(_mean_task_deltas(other))
        scored = [e for e in ge.evaluations if e.scored]
        r = [e.deployed_delta for e in scored]
        rewards += r
        rw += [e.reward for e in scored]
        valid += [e.valid for e in ge.evaluations]
        noop += [e.noop for e in ge.evaluations]
        best.append(max(r) if r else 0.0)
        improved.append(bool(r) and float(np.mean(r)) > 0)
        b0 = data.baseline(pk).success_rate
        base.append(b0)
        details.append({"packet": pk.packet_id, "baseline_success": b0,
                        "delta_b": float(np.mean(r)) if r else 0.0, "rewards": r,
                        "cross_delta_b": (float(np.mean([e.deployed_delta for e in other.evaluations
                                                         if e.scored] or [0.0]))
                                          if other is not None else None),
                        "valid": [e.valid for e in ge.evaluations],
                        "infra": int(np.sum(~ge.scored_K))})
    mean = float(np.mean(rewards)) if rewards else 0.0
    b = float(np.mean(base)) if base else 0.0
    return {"delta_b": mean, "reward": float(np.mean(rw)) if rw else 0.0,
            "valid_frac": float(np.mean(valid)) if valid else 0.0,
            "noop_frac": float(np.mean(noop)) if noop else 0.0,
            "best_of_k_delta_b": float(np.mean(best)) if best else 0.0,
            "improved_frac": float(np.mean(improved)) if improved else 0.0,
            "baseline_success": b, "success_rate": b + mean, "packets": len(packets), "k": k,
            "infra_samples": int(sum(d["infra"] for d in details)),
            "cross_delta_b": float(np.mean(cross_deltas)) if cross_deltas else None,
            "task_deltas": task_deltas, "cross_task_deltas": cross_task or None,
            "temperature": temperature, "samples": len(valid), "details": details}


def _mean_task_deltas(ge: GroupEvaluation) -> dict:
    """Per task of the packet's batch: the mean over its scored samples of ``R^P - R^0`` (a
    sample that deploys nothing contributes 0)."""
    per = [e.task_deltas() for e in ge.evaluations if e.scored]
    if not per:
        return {}
    return {t: float(np.mean([d[t] for d in per])) for t in per[0]}


class EngineerExtension(Extension):
    """What the engineer trains on (module docstring): ``data`` (``EngineerData``), the
    cold-start SFT's normalisation ``sft_agg`` (``r1.sft_agg``)."""

    name = "r1"

    def __init__(self, data: EngineerData, *, sft_agg: str = "dataset_token_mean"):
        self.data = data
        self.sft_agg = sft_agg
        self.groups: Optional[EngineerGroups] = None

    def attach(self, run) -> None:
        s = run.spec
        r = s.rollout
        engineer = ModelEngineer(run.engine, run.tokenizer, name="engineer", temperature=float(r.temperature),
                                 top_p=float(r.top_p), max_new_tokens=int(r.max_new_tokens),
                                 prompt=self.data.prompt)
        self.groups = EngineerGroups(engineer, self.data, group_size=s.rl.group_size, seed=s.seed, eps=s.rl.adv_eps)

    def task_stream(self, run) -> TaskStream:
        train = self.data.dataset.load(self.data.train_split)
        if not train:
            raise ValueError(f"no {self.data.train_split} packets in {self.data.dataset.root}: every "
                             "baseline batch succeeded; use a weaker target or bigger batches")
        return TaskStream(train, seed=run.spec.seed)

    def eval_tasks(self, run) -> list:
        return self.data.dataset.load(self.data.eval_split)[:int(run.spec.loop.eval.num_tasks)]

    def group_source(self, run) -> EngineerGroups:
        return self.groups

    def warm_start(self, run, should_stop) -> dict:
        segments = dataset.sft_segments(self.data.sft_examples)
        return sft_warmstart.train_segments(run, segments, should_stop=should_stop, agg=self.sft_agg)

    def evaluate(self, run, tasks, tag: str) -> dict:
        """The engineer on the held-out packets: ``eval.k`` samples each at ``eval.temperature``,
        and with a sampling temperature also the greedy patch (what would be deployed)."""
        ev, seed = run.spec.loop.eval, int(run.spec.seed)
        if not tasks:
            return {"delta_b": float("nan"), "packets": 0}
        engineer = self.groups.engineer
        res = _run(aevaluate_engineer(engineer, self.data, tasks, k=int(ev.k), temperature=float(ev.temperature),
                                      seed=seed))
        if float(ev.temperature) > 0:     # also the deployed patch: greedy, one per packet
            g = _run(aevaluate_engineer(engineer, self.data, tasks, k=1, temperature=0.0, seed=seed))
            res["greedy"] = {k: v for k, v in g.items() if k != "details"}
        return res

    def step_metrics(self, run, batch, metrics: dict) -> dict:
        return step_metrics(self.groups.pop_records(batch.step))

    def step_line(self, step: int, total: int, m: dict, last_eval) -> str:
        return (f"step {step}/{total}  mean Δ_B {m.get('r1/delta_b_mean', 0.0):+.3f}  "
                f"valid {m.get('r1/valid_frac', 0.0):.2f}  zero-var packets "
                f"{int(m.get('r1/zero_variance_packets', 0))}/{int(m.get('r1/packets', 0))}  "
                f"no-op {m.get('r1/noop_frac', 0.0):.2f}  infra {m.get('r1/infra_frac', 0.0):.2f}  "
                f"reward {m.get('r1/reward_mean', 0.0):+.3f}  loss {m.get('learner/loss', 0.0):+.4f}  "
                f"{m.get('time/step_s', 0.0):.1f}s")

    def eval_line(self, tag: str, res: dict) -> str:
        if not res.get("packets"):
            return f"eval[{tag}]: no held-out packets"
        g = res.get("greedy")
        greedy = (f"  | greedy: Δ_B {g['delta_b']:+.3f} valid {g['valid_frac']:.2f}" if g else "")
        cross = (f"  cross-batch Δ_B {res['cross_delta_b']:+.3f}" if res.get("cross_delta_b") is not None else "")
        return (f"eval[{tag}] held-out (T={res['temperature']:g}, {res['k']}/packet): mean Δ_B "
                f"{res['delta_b']:+.3f}  valid {res['valid_frac']:.2f}  no-op {res['noop_frac']:.2f}  "
                f"best-of-{res['k']} Δ_B {res['best_of_k_delta_b']:+.3f}  improved {res.get('improved_frac', 0):.2f}  "
                f"success {res['baseline_success']:.3f} -> {res['success_rate']:.3f}  infra {res.get('infra_samples', 0)}"
                f"{cross}{greedy}  ({res['time_s']:.1f}s)")


def _run(coro):
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    raise RuntimeError("engineer evaluation blocks; call it outside a running event loop")
