"""Episode traces as text: the sanitised, truncated transcript view of a trajectory that the
harness engineers read (Harness-R1 failure packets, ``harness_r1.packets``; Harness-S root causes,
profiles and router votes), and the runtime signals counted from its actions.

``render_trace`` writes a header (final reward, status, turns, runtime signals), the first user
message and the transcript (``render_transcript``): assistant text without its reasoning (600
chars), ``ASSISTANT_TOOL: name args`` / ``ASSISTANT_ACTION: text``, harness interventions, parse
errors and observations (middle-truncated to 1,200 chars). ``sanitize`` masks ASIN-like product
ids and absolute paths under /mnt, /root, /home, /tmp.
"""
from __future__ import annotations

import collections
import json
import re
from typing import Optional

from harness_jax.harness.specs import truncate_text
from harness_jax.harness.trajectory import Trajectory

_ASIN = re.compile(r"\bB0[0-9A-Z]{8}\b")
_PATH = re.compile(r"(?<![\w.])/(?:mnt|root|home|tmp)(?:/[^\s'\"\]\)]*|(?![\w.\-]))")


def sanitize(text: str) -> str:
    return _ASIN.sub("[PRODUCT_ID]", _PATH.sub("[PATH]", str(text)))


def runtime_signals(traj: Trajectory) -> dict:
    """Counters computed from the recorded actions and observations."""
    sig: collections.Counter = collections.Counter()
    last_act, last_obs = None, None
    for ev in traj.turns:
        acts = ev.action or []
        if not acts:
            sig["text_only_turns" if not ev.parse_errors else "unparsable_turns"] += 1
        for a in acts:
            key = json.dumps(a, sort_keys=True)
            if isinstance(a, dict):
                sig[f"tool:{a.get('name')}"] += 1
            else:
                sig["text_actions"] += 1
            if key == last_act:
                sig["repeated_actions"] += 1
            last_act = key
        if ev.observation and ev.observation == last_obs:
            sig["repeated_observations"] += 1
        last_obs = ev.observation
        low = (ev.observation or "").lower()
        if "nothing happens" in low:
            sig["nothing_happens"] += 1
        if "error" in low:
            sig["error_observations"] += 1
        sig["hook_interventions"] += len(ev.interventions)
    if traj.status in ("max_turns", "context_full"):
        sig["task_limit_reached"] += 1
    return {k: v for k, v in sorted(sig.items()) if v}


def render_transcript(traj: Trajectory, dedupe_text_actions: bool = False) -> list[str]:
    """The transcript lines of an episode. ``dedupe_text_actions``: leave out the assistant text
    when it is exactly the text action sent (text protocols), so it is not written twice."""
    lines = []
    for ev in traj.turns:
        text = ev.raw_text
        if "</think>" in text:
            text = text.rsplit("</think>", 1)[1]
        text = re.sub(r"<tool_call>.*?</tool_call>", "", text, flags=re.S).strip()
        acts = ev.action or []
        if text and not (dedupe_text_actions and len(acts) == 1 and isinstance(acts[0], str)
                         and acts[0].strip() == text):
            lines.append("ASSISTANT: " + truncate_text(sanitize(text), 600, "head"))
        for a in acts:
            if isinstance(a, dict):
                lines.append(f"ASSISTANT_TOOL: {a.get('name')} "
                             + sanitize(json.dumps(a.get('arguments'), ensure_ascii=False)))
            else:
                lines.append("ASSISTANT_ACTION: " + truncate_text(sanitize(a), 600, "head"))
        for iv in ev.interventions:
            lines.append(f"HARNESS[{iv['hook']}/{iv['source']}]: "
                         + sanitize(json.dumps(iv["result"], ensure_ascii=False))[:300])
        if ev.parse_errors:
            lines.append("PARSE_ERROR: " + sanitize("; ".join(ev.parse_errors))[:300])
        if ev.observation:
            lines.append("OBSERVATION: " + truncate_text(sanitize(ev.observation), 1200))
    return lines


def render_trace(traj: Trajectory, index: int, first_user: Optional[str] = None) -> str:
    lines = [f"### Trace {index}", f"- final_reward: {traj.reward:.3f}",
             f"- status: {traj.status}", f"- turns: {len(traj.turns)}"]
    sig = runtime_signals(traj)
    if sig:
        lines.append("- runtime signals: " + ", ".join(f"{k}={v}" for k, v in sig.items()))
    lines.append("")
    if first_user:
        lines.append("USER: " + truncate_text(sanitize(first_user), 1200))
    return "\n".join(lines + render_transcript(traj))
