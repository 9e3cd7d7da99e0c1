"""Harness-S siblings: a harness spec plus an optional overlay patch, one mechanism.

A ``Sibling`` is what the router picks and the executor runs. Its id combines the spec's content
hash and the patch's, so trajectories can be attributed to the exact generating context (each
trajectory is trained in its own context). A pool is a JSON file holding a list of siblings; the
base harness H0 is the one named ``base`` (or the first).
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional

from harness_jax.envs.base import content_hash
from harness_jax.harness.patches import Patch
from harness_jax.harness.specs import HarnessSpec, diff_specs
from harness_jax.harness.validation import validate_patch


@dataclasses.dataclass(frozen=True)
class Sibling:
    spec: HarnessSpec
    patch: Optional[Patch] = None
    name: str = ""

    @property
    def sibling_id(self) -> str:
        if self.patch is None:
            return self.spec.harness_id
        return "s-" + content_hash([self.spec.harness_id, self.patch.patch_id])

    def to_dict(self) -> dict:
        return {"name": self.name or self.spec.name, "spec": self.spec.to_dict(),
                "patch": self.patch.to_dict() if self.patch else None,
                "sibling_id": self.sibling_id}

    @classmethod
    def from_dict(cls, d: dict, env_name: Optional[str] = None) -> "Sibling":
        if not isinstance(d, dict) or "spec" not in d:
            raise ValueError("Sibling.from_dict: expected {'spec': {...}, 'patch': {...}|null}")
        patch = None
        if d.get("patch"):
            res = validate_patch(d["patch"], env_name=env_name or d["patch"].get("benchmark"))
            if not res.ok:
                raise ValueError(f"sibling {d.get('name')!r}: invalid patch: {res.errors}")
            patch = res.patch
        return cls(HarnessSpec.from_dict(d["spec"]), patch, d.get("name", ""))

    def describe_changes(self, base: "Sibling") -> list[str]:
        """What this sibling changes relative to ``base`` (spec diff + overlay summary)."""
        lines = diff_specs(base.spec, self.spec)
        if self.patch is not None:
            kinds = [a["type"] + (f":{a['hook']}" if a["type"] == "add_code_hook" else "")
                     for a in self.patch.actions]
            lines.append(f"overlay {self.patch.patch_id}: {', '.join(kinds)}"
                         + (f" — {self.patch.description}" if self.patch.description else ""))
        return lines


def save_pool(siblings: list[Sibling], path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump([s.to_dict() for s in siblings], f, indent=2, ensure_ascii=False)


def load_pool(path: str, env_name: Optional[str] = None) -> list[Sibling]:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"load_pool: no sibling pool file at {path}")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, list) or not data:
        raise ValueError(f"{path}: a sibling pool is a non-empty JSON list of siblings")
    pool = [Sibling.from_dict(d, env_name) for d in data]
    ids = [s.sibling_id for s in pool]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: duplicate siblings (same spec and overlay)")
    return pool
