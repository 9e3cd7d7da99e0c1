"""Building a sweep: lists of override dicts over dotted config paths (big_vision style).

An experiment config module declares its named sweeps next to ``get_config()``::

    from harness_jax.sweeps import hyper

    SWEEPS = {
        "seeds": hyper.sweep("seed", [0, 1, 2]),
        "seeds_x_lr": lambda: hyper.product(hyper.sweep("seed", [0, 1, 2]),
                                            hyper.sweep("opt.lr", [1e-4, 3e-4])),
    }

A sweep is a list of override dicts (or a zero-argument callable returning one). Keys are dotted
paths into the config that ``get_config()`` returns (``"rl.group_size"``; a leading ``"config."``
is accepted); values are what the field should hold. Every run of the sweep is ``get_config()``
with one dict applied, launched as ``--config.<path>=<value>`` flags of the launcher.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import re
from typing import Any, Iterable, Mapping, Sequence

Overrides = dict  # {"dotted.path": value}


def normalize_key(key: str) -> str:
    """``"config.rl.group_size"`` -> ``"rl.group_size"``; refuses malformed paths."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"sweep override key {key!r}: expected a dotted config path such as 'rl.group_size'")
    k = key[len("config."):] if key.startswith("config.") else key
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", k):
        raise ValueError(f"sweep override key {key!r}: expected a dotted config path such as "
                         "'rl.group_size' (letters, digits and underscores between dots)")
    return k


def sweep(key: str, values: Iterable[Any]) -> list[Overrides]:
    """One run per value of ``key``: ``sweep("seed", [0, 1])`` -> ``[{"seed": 0}, {"seed": 1}]``."""
    k = normalize_key(key)
    out = [{k: v} for v in values]
    if not out:
        raise ValueError(f"sweep({key!r}, values): give at least one value")
    return out


def fixed(overrides: Mapping[str, Any]) -> list[Overrides]:
    """A one-run sweep: the same overrides for every run it is combined with."""
    return [{normalize_key(k): v for k, v in overrides.items()}]


def product(*sweeps: Sequence[Overrides]) -> list[Overrides]:
    """Cartesian product (the last sweep varies fastest); keys must not repeat across factors."""
    return _merge_rows(itertools.product(*sweeps))


def zip_(*sweeps: Sequence[Overrides]) -> list[Overrides]:
    """Element-wise combination of equally long sweeps (e.g. a learning rate per model size)."""
    lengths = {len(s) for s in sweeps}
    if len(lengths) > 1:
        raise ValueError(f"zip_: sweeps have different lengths {sorted(lengths)}; zip needs equal lengths")
    return _merge_rows(zip(*sweeps))


def chain(*sweeps: Sequence[Overrides]) -> list[Overrides]:
    """Concatenation: the runs of every sweep, one after another."""
    return [{normalize_key(k): v for k, v in d.items()} for s in sweeps for d in s]


def _merge_rows(rows: Iterable[Sequence[Overrides]]) -> list[Overrides]:
    out = []
    for row in rows:
        merged: dict = {}
        for d in row:
            for k, v in d.items():
                k = normalize_key(k)
                if k in merged:
                    raise ValueError(f"{k!r} is set twice in one run; sweep each path once")
                merged[k] = v
        out.append(merged)
    return out


# ------------------------------------------------------------------------------ run names
def canonical(overrides: Mapping[str, Any]) -> str:
    """A stable text form of one run's overrides (sorted keys); identity of the run."""
    return json.dumps({normalize_key(k): _jsonable(v) for k, v in overrides.items()},
                      sort_keys=True, separators=(",", ":"))


def _jsonable(v):
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return v


_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]+")
MAX_NAME = 100


def _value_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "x".join(_value_text(x) for x in v)
    return str(v)


def short_keys(keys: Sequence[str], min_parts: int = 1) -> dict:
    """The shortest dotted suffix of each key (of at least ``min_parts`` parts, or the whole key
    when it has fewer) that is unique among ``keys``."""
    out = {}
    for k in keys:
        parts = k.split(".")
        for n in range(min(min_parts, len(parts)), len(parts) + 1):
            cand = ".".join(parts[-n:])
            if all(o == k or not (o == cand or o.endswith("." + cand)) for o in keys):
                out[k] = cand
                break
        else:
            out[k] = k
    return out


def run_names(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Readable, unique, filesystem-safe names: ``seed=1,router=random``; the swept keys are
    shortened to their shortest unique dotted suffix, and a hash of the overrides is appended
    when a name would be too long or collide."""
    runs = [{normalize_key(k): v for k, v in r.items()} for r in runs]
    keys = all_keys = list(dict.fromkeys(k for r in runs for k in r))  # first-appearance order
    if len(runs) > 1:  # a path set to one value in every run tells no run apart
        keys = [k for k in keys if not all(k in r and canonical({k: r[k]}) == canonical({k: runs[0][k]})
                                           for r in runs)] or keys
    short = short_keys(all_keys)  # unambiguous among every path the sweep sets
    names = []
    for r in runs:
        parts = [f"{short[k]}={_value_text(r[k])}" for k in keys if k in r]
        name = _UNSAFE.sub("_", ",".join(parts)) or "base"
        names.append(name)
    out = []
    for name, r in zip(names, runs):
        h = hashlib.sha256(canonical(r).encode()).hexdigest()[:8]
        if len(name) > MAX_NAME:
            name = f"{name[:MAX_NAME - 9]}-{h}"
        elif names.count(name) > 1:
            name = f"{name}-{h}"
        out.append(name)
    return out
