"""Harness runtime: harness specs, overlay patches with sandboxed lifecycle hooks, the
token-exact executor, the trajectory store and episode traces as text (the Harness-R1 failure
packets and patch reward live in ``harness_jax.harness_r1``).

Public API::

    from harness_jax.harness import validate_patch, run_hook
    res = validate_patch(patch_json_or_model_text, env_name="dbbench")   # res.ok, res.errors, res.patch
    out = run_hook(source, ctx, nb, timeout_s=1.0)   # dict, or None if rejected / failed

The chat format and the tokenizer the executor uses live one layer down, in
``harness_jax.sampling`` (``chat``, ``tokenizer``): the server needs them too, and sampling
never imports the harness.
"""
from harness_jax.harness.executor import Executor, ExecutorConfig, run_episode, run_episodes
from harness_jax.harness.hooks import normalise_hook_result, run_hook
from harness_jax.harness.lint import lint_hook_source
from harness_jax.harness.overlay import Overlay
from harness_jax.harness.patches import Patch
from harness_jax.harness.presets import base_harness
from harness_jax.harness.sandbox import HookSandbox, SandboxConfig
from harness_jax.harness.siblings import Sibling, load_pool
from harness_jax.harness.specs import HarnessSpec, diff_specs
from harness_jax.harness.store import TrajectoryStore
from harness_jax.harness.traces import render_trace, runtime_signals, sanitize
from harness_jax.harness.trajectory import Trajectory
from harness_jax.harness.validation import ValidationResult, validate_patch

__all__ = ["Executor", "ExecutorConfig", "HarnessSpec", "HookSandbox", "Overlay", "Patch",
           "SandboxConfig", "Sibling", "Trajectory", "TrajectoryStore", "ValidationResult",
           "base_harness", "diff_specs", "lint_hook_source", "load_pool", "normalise_hook_result",
           "render_trace", "run_episode", "run_episodes", "run_hook", "runtime_signals",
           "sanitize", "validate_patch"]
