"""Harness-S: directional evolution into a frozen sibling pool, rescue math, and the router.

Public API::

    from harness_jax import harness_s
    chosen = harness_s.coverage_select(solved, k)   # {sibling_id: set(task_id)} -> k ids (greedy)
    pool = harness_s.load_pool(path)                # frozen pool (a Sequence[Sibling], H0 first)
    router = harness_s.make_router(config.router, pool)
    ranked = router.rank(task, failed_episodes)     # sibling ids, best first

    result = harness_s.evolve(h0, train_tasks=..., val_tasks=..., rollout=..., editor=
                              harness_s.make_editor("deterministic"),
                              config=harness_s.EvolutionConfig(env_name="dbbench"))
    pool = result.freeze(directory)                 # pool-<hash>.json (read-only) + .md report

The training loop integration (rescue, routing, re-anchoring) is ``harness_s.training``,
registered as a method by ``harness_s.method`` (the ``harness_s`` config section and its
extension); the pool-evolution entry point is ``harness_s.evolve_run`` and Rank-1 evaluation
``harness_s.rank1``. They import the training loop, so this package's ``__init__`` does not
import them.

See docs/harness_s.md for the design and the interfaces the training loop uses.
"""
from harness_jax.harness_s.config import (RouterConfig, VoterSpec, harness_s_section,
                                          router_config)
from harness_jax.harness_s.coverage import coverage_select, exclusive_tasks, joint_coverage
from harness_jax.harness_s.editors import (OPERATORS, DeterministicEditor, EditContext,
                                           EditOperator, EditOutcome, Editor, LLMEditor,
                                           make_editor, register_operator)
from harness_jax.harness_s.evolve import (EvolutionConfig, EvolutionResult, evolve,
                                          executor_rollout)
from harness_jax.harness_s.features import SuccessModel, failure_features, task_features
from harness_jax.harness_s.pool import (PoolEntry, SiblingPool, freeze_pool, harness_cost,
                                        load_pool, pool_report, results_from_trajectories)
from harness_jax.harness_s.profiles import (BehaviourProfile, EpisodeSummary, LLMProfiler,
                                            PairedResult, pair_trajectories, summarise_offline)
from harness_jax.harness_s.rescue import (RescueRecord, rescue_advantages_G,
                                          rescue_step_metrics, rescue_trigger, split_attempts)
from harness_jax.harness_s.rootcause import (Direction, LLMDiagnoser, RootCause,
                                             extract_root_cause, label_failures,
                                             repair_directions)
from harness_jax.harness_s.routers import (ROUTERS, Router, aggregate_rankings,
                                           find_harness_s_problems, find_router_problems,
                                           make_router, reanchor,
                                           reanchor_from_trajectories, register_router,
                                           validate_router_config)

__all__ = [
    "BehaviourProfile", "DeterministicEditor", "Direction", "EditContext", "EditOperator",
    "EditOutcome", "Editor", "EpisodeSummary", "EvolutionConfig", "EvolutionResult",
    "LLMDiagnoser", "LLMEditor", "LLMProfiler", "OPERATORS", "PairedResult", "PoolEntry",
    "ROUTERS", "RescueRecord", "RootCause", "Router", "RouterConfig", "SiblingPool",
    "SuccessModel", "VoterSpec", "aggregate_rankings", "coverage_select", "evolve",
    "exclusive_tasks", "executor_rollout", "extract_root_cause", "failure_features",
    "find_harness_s_problems", "find_router_problems", "harness_s_section",
    "freeze_pool", "harness_cost", "joint_coverage", "label_failures", "load_pool",
    "make_editor", "make_router", "pair_trajectories", "pool_report", "reanchor",
    "reanchor_from_trajectories", "register_operator", "register_router", "repair_directions",
    "rescue_advantages_G", "rescue_step_metrics", "rescue_trigger", "results_from_trajectories",
    "router_config", "split_attempts", "summarise_offline", "task_features",
    "validate_router_config",
]

