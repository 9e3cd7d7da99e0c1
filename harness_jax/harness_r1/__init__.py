"""Harness-R1: a harness-engineer LLM turns a frozen target's failure packet into an executable
overlay, rewarded by the target's paired improvement on the same batch.

Public API::

    from harness_jax import harness_r1
    target = harness_r1.TargetSpec(kind="chat", model="m", urls=("http://h/v1",)).build()
    base = harness_r1.run_baseline(target, "dbbench", tasks, harness, seed=0, cache=cache)
    packet = harness_r1.extract_packet(trajectories, budget_tokens)    # deterministic
    ev = harness_r1.evaluate_patch(patch_text, env_name, target, tasks, baseline)
    ev.reward, ev.valid, ev.complete

See docs/harness_r1.md for the design and the interfaces the training task uses. The ``r1``
config section is typed in ``harness_r1.config`` and registered, with its checks, as a training
method by ``harness_r1.method``; the engineer trains through ``harness_r1.pipeline``
(``launch/engineer.py``) on the project's loop (``harness_r1.training.EngineerExtension``).
"""
from harness_jax.harness_r1.baseline import (Baseline, BaselineCache, EnvRef, arun_baseline,
                                             baseline_key, run_baseline, sample_keys)
from harness_jax.harness_r1.engineers import (Engineer, FixedPatchEngineer, ModelEngineer,
                                              PromptEngineer, RuleBasedEngineer, react_harness,
                                              review_hint_patch)
from harness_jax.harness_r1.packets import (PACKET_SPLITS, Packet, PacketDataset,
                                            build_packet_dataset, extract_packet,
                                            packet_from_baseline)
from harness_jax.harness_r1.agents import SelfRefine
from harness_jax.harness_r1.prompt import (PROMPT_VERSION, RESPONSE_PROTOCOL, SYSTEM_PROMPT,
                                           PromptSpec, engineer_messages, engineer_prompt_ids,
                                           format_response, normalise_response, sft_example)
from harness_jax.harness_r1.reward import (GroupEvaluation, PatchEvaluation, RewardCache,
                                           RewardSpec, advantages_NK,
                                           aevaluate_group, aevaluate_patch, delta_b,
                                           engineer_segments, evaluate_group, evaluate_patch, group_advantages_K)
from harness_jax.harness_r1.targets import (ChatEngine, FrozenTarget, FrozenTargetError,
                                            TargetIdentity, TargetSpec, as_target, frozen)

__all__ = [
    "Baseline", "BaselineCache", "ChatEngine", "EnvRef", "Engineer", "FixedPatchEngineer",
    "FrozenTarget", "FrozenTargetError", "GroupEvaluation", "ModelEngineer", "PACKET_SPLITS",
    "PROMPT_VERSION", "Packet", "PacketDataset", "PatchEvaluation", "PromptEngineer", "PromptSpec",
    "RESPONSE_PROTOCOL", "RewardCache", "RewardSpec", "RuleBasedEngineer", "SYSTEM_PROMPT", "SelfRefine",
    "TargetIdentity", "TargetSpec",
    "advantages_NK", "aevaluate_group", "aevaluate_patch", "arun_baseline", "as_target",
    "baseline_key", "build_packet_dataset", "delta_b", "engineer_messages",
    "engineer_prompt_ids", "engineer_segments", "evaluate_group", "evaluate_patch", "extract_packet",
    "format_response", "frozen", "group_advantages_K", "normalise_response",
    "packet_from_baseline", "react_harness", "run_baseline", "sample_keys", "review_hint_patch",
    "sft_example",
]
