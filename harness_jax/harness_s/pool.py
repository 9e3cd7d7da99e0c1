"""The frozen sibling pool: H0 first, then the valid children of every generation.

File format ``harness-s-pool-v1`` (JSON)::

    {"format": "harness-s-pool-v1", "content_hash": "<sha256 of body>", "body": {
        "env_name", "val_task_ids": [...], "task_info": {task_id: {"category", "text"}},
        "siblings": [{"sibling": Sibling.to_dict(), "generation", "parent_id", "direction",
                      "editor", "validation": {task_id: [true|false|null, ...]},
                      "policy_version", "cost", "notes"}, ...],        # H0 first
        "h0_failures": {task_id: [{feature: value}, ...]},             # router features
        "profiles": {sibling_id: BehaviourProfile.to_dict()},          # optional
        "meta": {...}}}                                                # evolution log, config

It is written once (``freeze_pool``) as ``pool-<hash16>.json`` with mode 0444 next to a
readable report ``pool-<hash16>.md``; ``load_pool`` recomputes the hash and refuses a file whose
content no longer matches (edited by hand). ``null`` in validation results is an
infrastructure failure: never counted as a task failure. ``load_pool`` also reads the plain
sibling lists of ``harness.siblings.save_pool`` (no provenance).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import tempfile
from typing import Any, Iterator, Mapping, Optional, Sequence

from harness_jax.harness.siblings import Sibling
from harness_jax.harness_s.coverage import coverage_select, exclusive_tasks, joint_coverage
from harness_jax.harness.siblings import load_pool as load_sibling_list

POOL_FORMAT = "harness-s-pool-v1"
Results = Mapping[str, Sequence[Optional[bool]]]


def harness_cost(sibling: Sibling) -> float:
    """A static size proxy used to break coverage ties (prompt + rules + overlay characters)."""
    spec = sibling.spec.content()
    spec.pop("tools", None)
    size = len(json.dumps(spec, sort_keys=True, ensure_ascii=False))
    if sibling.patch is not None:
        size += len(json.dumps(sibling.patch.to_dict(), sort_keys=True, ensure_ascii=False))
    return float(size)


def solved_tasks(results: Results) -> set:
    """Tasks with at least one successful attempt."""
    return {t for t, att in results.items() if any(a is True for a in att)}


def success_rate(results: Results, tasks: Optional[Sequence[str]] = None) -> float:
    """Mean success over non-infrastructure attempts (optionally restricted to ``tasks``)."""
    vals = [a for t, att in results.items() if tasks is None or t in tasks
            for a in att if a is not None]
    return sum(vals) / len(vals) if vals else 0.0


def results_from_trajectories(trajectories: Sequence[Any]) -> dict[str, list[Optional[bool]]]:
    """``{task_id: [success | None for infra errors]}`` from executor trajectories."""
    out: dict[str, list[Optional[bool]]] = {}
    for t in trajectories:
        out.setdefault(t.task_id, []).append(None if t.infra_error else bool(t.success))
    return out


@dataclasses.dataclass
class PoolEntry:
    """One sibling with its provenance and validation results."""

    sibling: Sibling
    generation: int = 0
    parent_id: Optional[str] = None
    direction: Optional[str] = None
    editor: str = "base"
    validation: dict = dataclasses.field(default_factory=dict)   # task_id -> [bool|None]
    policy_version: str = ""
    cost: float = 0.0
    notes: str = ""

    @functools.cached_property
    def sibling_id(self) -> str:
        return self.sibling.sibling_id      # a content hash: computed once per entry

    @property
    def name(self) -> str:
        return self.sibling.name or self.sibling.spec.name

    def solved(self) -> set:
        return solved_tasks(self.validation)

    def to_dict(self) -> dict:
        return {"sibling": self.sibling.to_dict(), "generation": self.generation,
                "parent_id": self.parent_id, "direction": self.direction,
                "editor": self.editor,
                "validation": {k: list(v) for k, v in sorted(self.validation.items())},
                "policy_version": str(self.policy_version), "cost": self.cost,
                "notes": self.notes}

    @classmethod
    def from_dict(cls, d: Mapping, env_name: Optional[str] = None) -> "PoolEntry":
        return cls(Sibling.from_dict(d["sibling"], env_name), int(d.get("generation", 0)),
                   d.get("parent_id"), d.get("direction"), d.get("editor", "base"),
                   {k: list(v) for k, v in (d.get("validation") or {}).items()},
                   str(d.get("policy_version", "")), float(d.get("cost", 0.0)),
                   d.get("notes", ""))


class SiblingPool(Sequence[Sibling]):
    """A read-only pool: a sequence of siblings (H0 at index 0) plus provenance and statistics."""

    def __init__(self, entries: Sequence[PoolEntry], *, env_name: str = "",
                 val_task_ids: Sequence[str] = (), task_info: Optional[Mapping] = None,
                 h0_failures: Optional[Mapping] = None, profiles: Optional[Mapping] = None,
                 meta: Optional[Mapping] = None, content_hash: str = "", path: str = ""):
        if not entries:
            raise ValueError("a sibling pool needs at least the base harness H0")
        ids = [e.sibling_id for e in entries]
        if len(set(ids)) != len(ids):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            raise ValueError(f"duplicate siblings in the pool: {dup}")
        self.entries = list(entries)
        self.env_name = env_name
        self.val_task_ids = list(val_task_ids) or sorted(
            {t for e in entries for t in e.validation})
        self.task_info = dict(task_info or {})
        self.h0_failures = {k: list(v) for k, v in (h0_failures or {}).items()}
        self.profiles = dict(profiles or {})
        self.meta = dict(meta or {})
        self.content_hash = content_hash
        self.path = path
        self._ids = ids
        self._by_id = {e.sibling_id: e for e in self.entries}

    # -- sequence ---------------------------------------------------------------------------------
    def __getitem__(self, i):
        if isinstance(i, slice):
            return [e.sibling for e in self.entries[i]]
        return self.entries[i].sibling

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[Sibling]:
        return (e.sibling for e in self.entries)

    # -- lookup -----------------------------------------------------------------------------------
    @property
    def base(self) -> Sibling:
        return self.entries[0].sibling

    @property
    def ids(self) -> list[str]:
        return list(self._ids)

    def entry(self, sibling_id: str) -> PoolEntry:
        try:
            return self._by_id[sibling_id]
        except KeyError:
            raise KeyError(f"sibling {sibling_id!r} is not in the pool; ids: {self.ids}") from None

    def resolve(self, key: str) -> str:
        """A sibling id from an id or a name."""
        if key in self._by_id:
            return key
        hits = [e.sibling_id for e in self.entries if e.name == key]
        if len(hits) != 1:
            raise KeyError(f"{key!r} names {len(hits)} siblings of the pool (ids or names: "
                           f"{[e.name for e in self.entries]})")
        return hits[0]

    def solved(self) -> dict[str, set]:
        return {e.sibling_id: e.solved() for e in self.entries}

    def h0_failed_tasks(self) -> list[str]:
        """Validation tasks H0 never solved (with at least one non-infra attempt)."""
        v = self.entries[0].validation
        return [t for t in self.val_task_ids
                if any(a is not None for a in v.get(t, [])) and not any(a is True for a in
                                                                         v.get(t, []))]

    def costs(self) -> dict[str, float]:
        return {e.sibling_id: e.cost for e in self.entries}

    # -- serialisation ----------------------------------------------------------------------------
    def body(self) -> dict:
        return {"env_name": self.env_name, "val_task_ids": list(self.val_task_ids),
                "task_info": self.task_info,
                "siblings": [e.to_dict() for e in self.entries],
                "h0_failures": self.h0_failures, "profiles": self.profiles, "meta": self.meta}

    @classmethod
    def from_body(cls, body: Mapping, *, content_hash: str = "", path: str = "",
                  env_name: Optional[str] = None) -> "SiblingPool":
        env = env_name or body.get("env_name") or None
        entries = [PoolEntry.from_dict(d, env) for d in body.get("siblings") or []]
        return cls(entries, env_name=body.get("env_name", ""),
                   val_task_ids=body.get("val_task_ids") or (),
                   task_info=body.get("task_info"), h0_failures=body.get("h0_failures"),
                   profiles=body.get("profiles"), meta=body.get("meta"),
                   content_hash=content_hash, path=path)


def body_hash(body: Mapping) -> str:
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()


def _write_once(path: str, text: str) -> None:
    d = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".pool-", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o444)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def freeze_pool(pool: SiblingPool, directory: str) -> SiblingPool:
    """Writes ``pool`` once as ``<directory>/pool-<hash16>.json`` (read-only) and its report
    ``pool-<hash16>.md``; returns the pool as loaded back from the file. Writing the same content
    again is a no-op that returns the existing file."""
    os.makedirs(directory, exist_ok=True)
    body = json.loads(json.dumps(pool.body(), ensure_ascii=False, default=str))
    h = body_hash(body)
    path = os.path.join(directory, f"pool-{h[:16]}.json")
    if not os.path.exists(path):
        _write_once(path, json.dumps({"format": POOL_FORMAT, "content_hash": h, "body": body},
                                     indent=1, ensure_ascii=False, sort_keys=True))
    loaded = load_pool(path)
    report = os.path.join(directory, f"pool-{h[:16]}.md")
    if not os.path.exists(report):
        _write_once(report, pool_report(loaded))
    return loaded


def load_pool(path: str, env_name: Optional[str] = None) -> SiblingPool:
    """The frozen pool at ``path`` (H0 first), verified against its content hash.

    Also accepts ``harness.siblings.save_pool`` lists (H0 = the sibling named ``base``, else the
    first; no provenance or validation results).
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"load_pool: no sibling pool file at {path}")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if isinstance(data, list):
        sibs = load_sibling_list(path, env_name=env_name)
        base = next((i for i, s in enumerate(sibs) if s.name == "base"), 0)
        sibs = [sibs[base]] + sibs[:base] + sibs[base + 1:]
        entries = [PoolEntry(s, generation=0 if i == 0 else 1, editor="base" if i == 0 else
                             "unknown", cost=harness_cost(s)) for i, s in enumerate(sibs)]
        return SiblingPool(entries, env_name=env_name or "", path=path)
    if not isinstance(data, dict) or data.get("format") != POOL_FORMAT:
        raise ValueError(f"{path}: not a sibling pool (expected a JSON list of siblings or "
                         f"{{\"format\": \"{POOL_FORMAT}\", ...}})")
    body = data.get("body")
    if not isinstance(body, dict) or not body.get("siblings"):
        raise ValueError(f"{path}: the pool has no siblings (body.siblings is empty)")
    h = body_hash(body)
    if h != data.get("content_hash"):
        raise ValueError(f"{path}: content hash mismatch (file says {data.get('content_hash')}, "
                         f"content is {h}); a frozen pool must not be edited — rerun "
                         "evolution or freeze a new pool")
    return SiblingPool.from_body(body, content_hash=h, path=path, env_name=env_name)



ACTION_EFFECTS = ("rewrite_action", "force_action")   # effects that make the environment run an action the policy did not sample
POOL_SIBLINGS = ("all", "no_action_rewrites")         # ``harness_s.pool_siblings``


def rewrites_actions(sibling: Sibling) -> bool:
    """Whether the sibling's overlay can make the environment execute an action the policy did not
    sample: a guard or recovery rule with effect ``rewrite_action``/``force_action``, or a code hook
    whose source names one of them (a static check of the literal: every fix of
    ``harness.fixes`` returns its effect kind as a literal)."""
    patch = sibling.patch
    if patch is None:
        return False
    for typ in ("add_guard_rule", "add_recovery_rule"):
        if any(r.get("effect") in ACTION_EFFECTS for r in patch.of_type(typ)):
            return True
    return any(k in code for code in patch.code_hooks().values() for k in ACTION_EFFECTS)


def select_siblings(pool: SiblingPool, which: str) -> SiblingPool:
    """The pool a run routes over (``harness_s.pool_siblings``): ``"all"`` returns ``pool``;
    ``"no_action_rewrites"`` keeps H0 and the siblings that never rewrite or force an action
    (``rewrites_actions``), so every rescued success is the policy's own actions. The result keeps
    the file's content hash (checkpoints compare it) and records the filter in ``meta``."""
    if which not in POOL_SIBLINGS:
        raise ValueError(f"harness_s.pool_siblings={which!r}; use one of {POOL_SIBLINGS}")
    if which == "all":
        return pool
    keep = [pool.entries[0]] + [e for e in pool.entries[1:] if not rewrites_actions(e.sibling)]
    meta = dict(pool.meta, siblings_filter=which, siblings_dropped=len(pool.entries) - len(keep))
    return SiblingPool(keep, env_name=pool.env_name, val_task_ids=pool.val_task_ids,
                       task_info=pool.task_info, h0_failures=pool.h0_failures,
                       profiles={k: v for k, v in pool.profiles.items() if k in {e.sibling_id for e in keep}},
                       meta=meta, content_hash=pool.content_hash, path=pool.path)

# ------------------------------------------------------------------------------------------ report
def pool_report(pool: SiblingPool, max_tasks: int = 40) -> str:
    """Markdown: per sibling its direction, coverage and the tasks only it solves; the greedy
    coverage order; the complementarity matrix over H0's validation failures."""
    solved = pool.solved()
    n_val = len(pool.val_task_ids)
    only = exclusive_tasks(solved)
    base_id = pool.ids[0]
    h0_fail = pool.h0_failed_tasks()
    name = {e.sibling_id: e.name for e in pool.entries}
    lines = [f"# Sibling pool {pool.content_hash[:16] or '(not frozen)'}", "",
             f"- environment: {pool.env_name or '-'}",
             f"- siblings: {len(pool)} (H0 + {len(pool) - 1} children)",
             f"- validation tasks: {n_val}; H0 solves {len(solved[base_id])}, fails "
             f"{len(h0_fail)}",
             f"- joint coverage of the pool: {len(joint_coverage(solved, pool.ids))}/{n_val}",
             f"- best single sibling: {max(len(s) for s in solved.values())}/{n_val}", ""]
    gens = pool.meta.get("generations") or []
    if gens:
        lines += ["## Evolution", ""]
        for g in gens:
            lines.append(f"- generation {g.get('generation')}: parents "
                         f"{', '.join(name.get(p, p) for p in g.get('parents', []))}; "
                         f"directions {', '.join(g.get('directions', [])) or '-'}; "
                         f"{g.get('accepted', 0)} accepted / {g.get('proposed', 0)} proposed")
        if pool.meta.get("stop_reason"):
            lines.append(f"- stopped: {pool.meta['stop_reason']}")
        lines.append("")
    lines += ["## Siblings", "",
              "| # | name | id | gen | parent | direction | editor | success | solved | "
              "rescues H0 failures | only it solves |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, e in enumerate(pool.entries):
        sid = e.sibling_id
        rescued = len(solved[sid] & set(h0_fail))
        parent = name.get(e.parent_id, e.parent_id) if e.parent_id else "-"
        lines.append(
            f"| {i} | {e.name} | `{sid}` | {e.generation} | {parent} | "
            f"{e.direction or '-'} | {e.editor} | {success_rate(e.validation):.2f} | "
            f"{len(solved[sid])}/{n_val} | {rescued}/{len(h0_fail)} | "
            f"{', '.join(sorted(only[sid])[:5]) or '-'}{' …' if len(only[sid]) > 5 else ''} |")
    order = coverage_select(solved, len(pool), costs=pool.costs())
    lines += ["", "## Greedy joint coverage", ""]
    cov: set = set()
    for sid in order:
        new = solved[sid] - cov
        cov |= solved[sid]
        lines.append(f"1. {name[sid]}: +{len(new)} -> {len(cov)}/{n_val}")
    lines += ["", "## Complementarity over H0 failures", ""]
    if not h0_fail:
        lines.append("H0 solves every validation task.")
    else:
        cols = h0_fail[:max_tasks]
        lines.append("| sibling | " + " | ".join(f"t{j}" for j in range(len(cols))) + " | total |")
        lines.append("|---|" + "---|" * (len(cols) + 1))
        for e in pool.entries[1:]:
            s = solved[e.sibling_id]
            lines.append(f"| {e.name} | " + " | ".join("x" if t in s else "." for t in cols)
                         + f" | {len(s & set(h0_fail))} |")
        lines += ["", "Columns: " + ", ".join(
            f"t{j}={t}" + (f" ({pool.task_info[t].get('category')})"
                           if pool.task_info.get(t, {}).get("category") else "")
            for j, t in enumerate(cols))]
        if len(h0_fail) > max_tasks:
            lines.append(f"(first {max_tasks} of {len(h0_fail)} H0 failures shown)")
    lines += ["", "## Changes relative to the parent", ""]
    for e in pool.entries[1:]:
        parent = pool._by_id.get(e.parent_id) if e.parent_id else None
        changes = e.sibling.describe_changes(parent.sibling if parent else pool.base)
        lines.append(f"### {e.name}")
        lines += [f"- {c}".replace("\n", "\n  ") for c in changes] or ["- (no change recorded)"]
        lines.append("")
    return "\n".join(lines) + "\n"
