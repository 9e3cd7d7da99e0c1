"""``validate_patch``: extraction, schema, leakage filters and hook lint for overlay patches.

Steps (any error makes the patch invalid, and an invalid patch earns reward 0):

1. extraction: a dict is taken as is; a string that is a JSON object is parsed; otherwise the
   last ``<patch>...</patch>`` block of the final assistant segment is parsed (optional code
   fences inside are stripped). In the ``prefill_think_patch`` protocol (the reply continues a
   prefilled ``<think>``), a reply that opens a second ``<think>`` is rejected;
2. schema: version, benchmark, 1-12 typed actions (``patches.normalise_action``), at most one code
   hook per hook point, and optionally code hooks only (``require_code_hook_only``, the paper's
   protocol);
3. leakage: task/instance identifiers must not appear in any text field (regexes per environment,
   extendable with ``register_leakage_patterns``);
4. lint of every code hook (``lint.lint_hook_source``).

The runtime no-op check (a patch that never changes any episode) needs recorded contexts and
lives in ``overlay.reject_runtime_noop``; ``validate_patch(..., dry_run_contexts=...)`` runs it.
"""
from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Optional, Sequence

from harness_jax.harness.lint import lint_hook_source
from harness_jax.harness.patches import MAX_ACTIONS, SCHEMA_VERSION, Patch, normalise_action
from harness_jax.harness.overlay import reject_runtime_noop

COMMON_LEAKAGE_PATTERNS = (
    r"\bB0[0-9A-Z]{8}\b",                                      # ASIN-like product ids
    r"\b(?:task|index|sample|instance|episode)\s*(?:#|no\.?|id)?\s*[:=]?\s*\d+\b",
    r"\b(?:webshop|alfworld|dbbench|appworld|swe-?gym)[-_]\d+\b",
    r"\b(?:dbbench|webshop|alfworld)-[0-9a-f]{8,}\b",           # our content-hash task ids
)
ENV_LEAKAGE_PATTERNS: dict[str, list[str]] = {
    # numbered ALFWorld instances ("go to cabinet 3") must not be hard-coded
    "alfworld": [r"\b(?:go to|take|put|open|close|use|clean|heat|cool|examine|toggle)\b[^\n]*?"
                 r"\b[a-z]+ \d+\b"],
    "webshop": [r"\bgoal[_ ]?idx\s*[:=]?\s*\d+"],
    "dbbench": [],
}


def register_leakage_patterns(env_name: str, patterns: Sequence[str]) -> None:
    """Adds regexes that must never match any text field of a patch for ``env_name``."""
    for p in patterns:
        re.compile(p)
    ENV_LEAKAGE_PATTERNS.setdefault(env_name, []).extend(patterns)


@dataclasses.dataclass
class ValidationResult:
    ok: bool
    errors: list[str]
    patch: Optional[Patch] = None
    warnings: list[str] = dataclasses.field(default_factory=list)
    raw: Optional[dict] = None

    def __bool__(self) -> bool:
        return self.ok


_PATCH_BLOCK = re.compile(r"<patch>(.*?)</patch>", re.S)
_FENCE = re.compile(r"^\s*```(?:json)?\s*\n?(.*?)\n?\s*```\s*$", re.S)


def extract_patch_json(text: str, response_protocol: str = "free") -> tuple[Optional[dict], list[str]]:
    """The patch object from model output (``(None, errors)`` when there is none)."""
    if response_protocol not in ("free", "prefill_think_patch"):
        raise ValueError(f"response_protocol must be 'free' or 'prefill_think_patch', "
                         f"got {response_protocol!r}")
    segment = text
    marker = "<|im_start|>assistant"
    if marker in segment:
        segment = segment.rsplit(marker, 1)[1]
    if response_protocol == "prefill_think_patch" and "<think>" in segment:
        return None, ["the reply opens a second <think> (the prompt already prefilled one); "
                      "answer with reasoning, </think>, then one <patch> block"]
    stripped = segment.strip()
    if stripped.startswith("{"):
        body = stripped
    else:
        blocks = _PATCH_BLOCK.findall(segment)
        if not blocks:
            return None, ["no <patch>...</patch> block found in the model output (no_patch)"]
        body = blocks[-1].strip()
    m = _FENCE.match(body)
    if m:
        body = m.group(1)
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        return None, [f"the <patch> block is not valid JSON: {e.msg} at line {e.lineno} "
                      f"column {e.colno}"]
    if not isinstance(obj, dict):
        return None, ["the patch must be a JSON object"]
    return obj, []


def leakage_errors(patch: Patch, env_name: Optional[str],
                   extra_patterns: Sequence[str] = ()) -> list[str]:
    patterns = list(COMMON_LEAKAGE_PATTERNS) + ENV_LEAKAGE_PATTERNS.get(env_name or "", [])
    patterns += list(extra_patterns)
    compiled = [re.compile(p, re.I) for p in patterns]
    errors = []
    for where, text in patch.text_fields():
        for rx in compiled:
            m = rx.search(text)
            if m:
                errors.append(f"{where}: leaks a task/instance identifier {m.group(0)!r} "
                              "(patches must generalise; describe the condition instead)")
                break
    return errors


def validate_patch(patch_json_or_model_text: Any, env_name: Optional[str] = "dbbench", *,
                   require_code_hook_only: bool = False, response_protocol: str = "free",
                   leakage_patterns: Sequence[str] = (),
                   dry_run_contexts: Optional[Sequence[dict]] = None,
                   sandbox=None) -> ValidationResult:
    """Validates an overlay patch given as a dict, a JSON string, or raw model output.

    Returns ``ValidationResult(ok, errors, patch)``; ``patch`` is the normalised ``Patch`` when
    ``ok``. ``dry_run_contexts`` (recorded hook contexts, see ``overlay.reject_runtime_noop``)
    additionally rejects patches that change nothing on them.
    """
    errors: list[str] = []
    if isinstance(patch_json_or_model_text, dict):
        obj = patch_json_or_model_text
    elif isinstance(patch_json_or_model_text, str):
        obj, errors = extract_patch_json(patch_json_or_model_text, response_protocol)
        if obj is None:
            return ValidationResult(False, errors)
    else:
        return ValidationResult(False, ["the patch must be a dict, a JSON string or model text, "
                                        f"got {type(patch_json_or_model_text).__name__}"])
    version = obj.get("schema_version")
    if version != SCHEMA_VERSION:
        errors.append(f"schema_version: expected {SCHEMA_VERSION!r}, got {version!r}")
    bench = obj.get("benchmark", env_name or "")
    if env_name and bench and str(bench).lower() != env_name.lower():
        errors.append(f"benchmark: the patch is for {bench!r} but is validated for {env_name!r}")
    desc = obj.get("description", "")
    if not isinstance(desc, str) or len(desc) > 2000:
        errors.append("description: must be a string of at most 2000 chars")
        desc = ""
    actions = obj.get("actions")
    if not isinstance(actions, list) or not 1 <= len(actions) <= MAX_ACTIONS:
        errors.append(f"actions: must be a list of 1 to {MAX_ACTIONS} actions")
        return ValidationResult(False, errors, raw=obj)
    normal = []
    for i, a in enumerate(actions):
        na = normalise_action(a, i, env_name, errors)
        if na is not None:
            normal.append(na)
    hooks_seen: dict[str, int] = {}
    for i, a in enumerate(normal):
        if a["type"] == "add_code_hook":
            if a["hook"] in hooks_seen:
                errors.append(f"actions: two code hooks for {a['hook']!r}; merge them into one")
            hooks_seen[a["hook"]] = i
            for e in lint_hook_source(a["code"]):
                errors.append(f"code hook {a['hook']}: {e}")
        elif require_code_hook_only:
            errors.append(f"actions: {a['type']!r} is not allowed; this protocol accepts only "
                          "add_code_hook actions")
    patch = Patch(actions=normal, benchmark=str(bench or ""), description=desc)
    if not errors:
        errors.extend(leakage_errors(patch, env_name, leakage_patterns))
    if not errors and dry_run_contexts is not None:
        msg = reject_runtime_noop(patch, dry_run_contexts, env_name=env_name, sandbox=sandbox)
        if msg:
            errors.append(msg)
    return ValidationResult(not errors, errors, patch if not errors else None, raw=obj)
