"""Harness runtime: harness specs, the Qwen3.5 chat/tool format, overlay patches with sandboxed
lifecycle hooks, the token-exact executor and the trajectory store.

Public API::

    from harness_jax.harness import validate_patch, run_hook
    res = validate_patch(patch_json_or_model_text, env_name="dbbench")   # res.ok, res.errors, res.patch
    out = run_hook(source, ctx, nb, timeout_s=1.0)   # dict, or None if rejected / failed

Heavier pieces load lazily (``load_tokenizer`` imports transformers; ``Executor`` imports the
sampling types).
"""
from harness_jax.lazy import lazy_getattr
from harness_jax.harness.hooks import normalise_hook_result, run_hook
from harness_jax.harness.validation import ValidationResult, validate_patch

_LAZY = {
    "HarnessSpec": "harness_jax.harness.specs",
    "diff_specs": "harness_jax.harness.specs",
    "Patch": "harness_jax.harness.patches",
    "Overlay": "harness_jax.harness.overlay",
    "HookSandbox": "harness_jax.harness.sandbox",
    "SandboxConfig": "harness_jax.harness.sandbox",
    "lint_hook_source": "harness_jax.harness.lint",
    "load_tokenizer": "harness_jax.harness.tokenizer",
    "render_messages": "harness_jax.harness.chat",
    "parse_tool_calls": "harness_jax.harness.chat",
    "Executor": "harness_jax.harness.executor",
    "ExecutorConfig": "harness_jax.harness.executor",
    "run_episode": "harness_jax.harness.executor",
    "run_episodes": "harness_jax.harness.executor",
    "Trajectory": "harness_jax.harness.trajectory",
    "TrajectoryStore": "harness_jax.harness.store",
    "build_failure_packet": "harness_jax.harness.packets",
    "Sibling": "harness_jax.harness.siblings",
    "load_pool": "harness_jax.harness.siblings",
    "base_harness": "harness_jax.harness.presets",
    "evaluate_patch": "harness_jax.harness.reward",
    "RewardCache": "harness_jax.harness.reward",
}

__all__ = ["validate_patch", "run_hook", "ValidationResult", "normalise_hook_result", *_LAZY]


__getattr__ = lazy_getattr(__name__, _LAZY)
