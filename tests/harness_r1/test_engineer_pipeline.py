"""launch/engineer.py's pipeline end to end on a tiny engineer: resume at every stage, the frozen
target stays frozen, every ``r1`` field is read, and the table launcher on the finished run.

A crash is injected in turn into the teacher stage, the cold-start SFT (after 2 of 4 steps) and
GRPO (in step 2 of 2); each rerun of the same call must redo nothing that finished (the packet
builder and the teacher are not called again, SFT resumes from its checkpoint, GRPO from step
1) and the final run completes. The target is the scripted DBBench agent (harness_r1.scripted,
a rule policy, not a model: no tiny model has a baseline a harness can move)."""
import json
import os

import jax
import pytest

from experiments.configs.harness_r1 import tiny_cpu
from harness_jax.harness_r1 import dataset as dataset_lib
from harness_jax.harness_r1 import evaluate, packets, pipeline, targets, training
from harness_jax.train import sft_warmstart, spec
from tests.experiments.test_configs import _Recorder, _leaves


def tiny_config():
    c = tiny_cpu.get_config()
    c.num_steps = 2
    p = c.r1.packets
    p.train_batches, p.held_out_batches, p.batch_size, p.budget_tokens = 3, 2, 4, 400
    c.rl.tasks_per_step, c.rl.group_size = 1, 4
    c.rl.pack_len = 512
    c.rollout.max_len, c.rollout.max_new_tokens, c.rollout.max_slots = 512, 48, 8
    c.sft.steps, c.sft.batch_size, c.sft.num_demos, c.sft.ckpt_every_steps = 4, 2, 2, 1
    c.sft.warmup_steps = 1
    c.ckpt.every_steps = 1
    c.eval.num_tasks, c.eval.k = 2, 2          # two held-out packets: the cross-batch Delta_B applies each to the other
    c.r1.table.arms = ("default", "rule", "sft", "grpo")
    c.r1.table.ablate = "rule"
    c.r1.table.transfer_targets = ({
        "kind": "factory", "model": "scripted-careless", "version": "1",
        "factory": "harness_jax.harness_r1.scripted:dbbench_agent",
        "options": {"kwargs": {"seed": 0, "p_hasty": 0.7, "p_sloppy": 0.2}}},)
    return c


class Crash(RuntimeError):
    pass


@pytest.mark.slow
def test_resume_at_every_stage_and_the_table(tmp_path, monkeypatch):
    cfg = tiny_config()
    spec.resolve(cfg, num_devices=1)
    log: set = set()
    work = str(tmp_path / "run")
    calls = {"packets": 0, "teacher": 0, "sft": 0}
    built: list = []

    real_build = packets.build_packet_dataset
    real_teacher = dataset_lib.teacher_responses
    real_sft = sft_warmstart.train_segments
    real_target_build = targets.TargetSpec.build

    def count_packets(*a, **k):
        calls["packets"] += 1
        return real_build(*a, **k)

    def crash_teacher(*a, **k):
        calls["teacher"] += 1
        raise Crash("teacher")

    def keep_target(self, tok=None):
        t = real_target_build(self, tok)
        built.append(t)
        return t

    monkeypatch.setattr(packets, "build_packet_dataset", count_packets)
    monkeypatch.setattr(dataset_lib, "teacher_responses", crash_teacher)
    monkeypatch.setattr(targets.TargetSpec, "build", keep_target)

    # 1) crash in the teacher stage: the packets are done
    with pytest.raises(Crash):
        pipeline.run(_Recorder(cfg, log), work, devices=jax.devices()[:1])
    assert calls == {"packets": 1, "teacher": 1, "sft": 0}
    assert os.path.exists(os.path.join(work, "stages", "packets.json"))
    assert not os.path.exists(os.path.join(work, "stages", "teacher.json"))

    # 2) crash in SFT after its step 2 (checkpoints every step)
    def counting_teacher(*a, **k):
        calls["teacher"] += 1
        return real_teacher(*a, **k)

    def crash_sft(ctx, segments, **k):
        calls["sft"] += 1

        def on_step(step, m):
            if step == 3:
                raise Crash("sft")
        return real_sft(ctx, segments, **dict(k, on_step=on_step))

    monkeypatch.setattr(dataset_lib, "teacher_responses", counting_teacher)
    monkeypatch.setattr(sft_warmstart, "train_segments", crash_sft)
    with pytest.raises(Crash):
        pipeline.run(_Recorder(cfg, log), work, devices=jax.devices()[:1])
    assert calls == {"packets": 1, "teacher": 2, "sft": 1}       # packets not rebuilt
    for stage in ("teacher", "tokenizer", "sft_examples", "reference"):
        assert os.path.exists(os.path.join(work, "stages", f"{stage}.json")), stage
    assert sorted(os.listdir(os.path.join(work, "sft_checkpoints")))[-1] == "2"

    # 3) crash in GRPO step 2: SFT resumes from its step 2, GRPO checkpoints step 1
    monkeypatch.setattr(sft_warmstart, "train_segments", real_sft)
    real_group = training.EngineerGroups.__call__

    async def crash_grpo(self, packet, step, index):
        if step == 1:
            raise Crash("grpo")
        return await real_group(self, packet, step, index)

    monkeypatch.setattr(training.EngineerGroups, "__call__", crash_grpo)
    with pytest.raises(Crash):
        pipeline.run(_Recorder(cfg, log), work, devices=jax.devices()[:1])
    assert calls == {"packets": 1, "teacher": 2, "sft": 1}        # teacher not asked again

    # 4) the same call finishes: GRPO resumes from step 1
    monkeypatch.setattr(training.EngineerGroups, "__call__", real_group)
    summary = pipeline.run(_Recorder(cfg, log), work, devices=jax.devices()[:1])
    assert summary["resumed_from"] == 1 and not summary["preempted"]
    assert summary["sft"]["summary"]["resumed_from"] == 2 and summary["sft"]["summary"]["steps"] == 4
    assert summary["grpo"]["steps"] == 2                           # step 1 (checkpointed before the crash) + step 2 (this run)
    assert set(summary["eval"]) == {"before_sft", "after_sft", "final"}   # tiny_cpu: eval.at_start
    assert summary["eval"]["before_sft"]["valid_frac"] == 0.0             # an untrained engineer writes no valid patch
    fin = summary["eval"]["final"]                                # improved_frac is what the details say
    assert fin["improved_frac"] == sum(d["delta_b"] > 0 for d in fin["details"]) / fin["packets"]
    assert fin["infra_samples"] == 0 and fin["cross_delta_b"] is not None
    assert summary["reference_rule"]["improved_frac"] > 0
    rc = summary["grpo"]["reward_cache"]                             # over the 2 GRPO steps' metrics
    assert rc["cache_hits"] + rc["reruns"] == rc["unique_patches"]   # every distinct valid patch: cached or rerun
    assert rc["cache_hit_frac"] == (rc["cache_hits"] / rc["unique_patches"] if rc["unique_patches"] else 0.0)
    assert summary["reference_rule"]["delta_b"] > 0.1              # the rule-based engineer helps this target
    rows = pipeline.read_metrics(work)
    assert [r["step"] for r in rows if "r1/delta_b_mean" in r] == [1, 2]
    assert os.path.exists(os.path.join(work, "engineer.png")) and os.path.exists(os.path.join(work, "hf_final"))

    # the frozen target stayed frozen: same pinned version, it served the reruns, it refuses updates
    for t in built:
        assert t.weight_version == 3 and t.engine.weight_version == 3
        with pytest.raises(targets.FrozenTargetError):
            t.update_weights(None)
        with pytest.raises(targets.FrozenTargetError):
            t.engine.update_weights(None)
    assert sum(t.requests for t in built) > 0

    # 5) the table of the finished run (held-out packets), with ablation and transfer
    table = evaluate.run_table(_Recorder(cfg, log), work, split="held_out")
    assert table["schema"] == evaluate.SCHEMA and table["benchmarks"] == ["dbbench"]
    assert set(table["arms"]) == {"default", "rule", "sft", "grpo"}
    assert table["arms"]["rule"]["dbbench"] > table["arms"]["default"]["dbbench"]
    assert table["arms"]["rule"]["mean"] == table["arms"]["rule"]["dbbench"]
    assert table["ablation"]["arm"] == "rule" and table["ablation"]["hooks"]
    assert len(table["transfer"]) == 1 and table["transfer"][0]["valid"]
    with open(os.path.join(work, "table_held_out.json")) as f:
        assert json.load(f)["arms"] == json.loads(json.dumps(table["arms"]))
    for r in table["rows"]:                                        # improved = scored batches with Δ_B > 0
        scored = [d for d in r["details"] if not d.get("infra_error")]
        assert r["improved_frac"] == sum(d.get("delta", 0.0) > 0 for d in scored) / r["batches"]
        assert r["infra_batches"] == len(r["details"]) - len(scored) == 0
    assert "| rule | dbbench |" in evaluate.markdown(table)

    # the demonstration's aggregation over runs reads the run's own files
    from harness_jax.harness_r1 import demo
    agg = demo.main([f"--workdirs={work},{work}", f"--out={tmp_path / 'demo'}"])
    assert agg["runs"] == 2 and agg["table"]["rule"]["delta_b"]["runs"] == [table["rows"][1]["delta"]] * 2
    assert agg["sampled"]["grpo"]["delta_b"]["std"] == 0.0 and os.path.exists(tmp_path / "demo.png")
    merged = evaluate.merge_tables([table, dict(table, rows=[dict(r, benchmark="alfworld") for r in table["rows"]])])
    assert merged["benchmarks"] == ["alfworld", "dbbench"]
    assert merged["arms"]["rule"]["mean"] == pytest.approx(table["arms"]["rule"]["dbbench"])

    # every r1 field is read by the pipeline or the table (the endpoint teacher's only by that teacher)
    c2 = tiny_config()
    c2.r1.teacher.kind = "endpoint"
    c2.r1.teacher.base_url, c2.r1.teacher.model = "http://127.0.0.1:9/v1", "teacher"
    c2.r1.table.prompt_base_url, c2.r1.table.prompt_model = "http://127.0.0.1:9/v1", "frontier"   # the "prompt" arm's
    run2 = spec.resolve(_Recorder(c2, log), num_devices=1)
    r1 = run2.method("r1")
    assert pipeline.make_teacher(r1, pipeline.EngineerPaths.of(work)).name == "prompt:teacher"
    arm, _ = evaluate.make_arm(run2, work, "prompt", pipeline.target_harness(run2, r1))
    assert arm.name == "prompt:frontier"
    unread = sorted(p for p in set(_leaves(cfg)) - log if p.startswith("r1."))
    assert not unread, f"r1 fields no code reads: {unread}"
