"""Resumable stages of a run directory: what ran, for which inputs, and what it produced.

A stage is a named unit of work whose inputs hash to a key. ``Stages(root).run(name, inputs,
build)`` runs ``build()`` (timed) and records ``stages/<name>.json`` (the key and the info
``build`` returned); run again with the same inputs, the stage is skipped and its recorded info
returned; with other inputs it is refused, naming the stage, so a resumed run never mixes the
outputs of two configurations. The training loop records its SFT warm start here
(``train.loop``); Harness-R1's pipeline (packets, teacher, tokenizer, SFT examples, reference)
is a chain of stages whose keys include their upstream keys.

    stages = Stages(workdir, version="my-pipeline-v1")
    info = stages.run("packets", {"target": ..., "seed": 0}, build_packets)
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Callable, Optional


class StageMismatch(ValueError):
    """A stage already ran in this directory for other inputs."""


class Stages:
    """The stage markers under ``<root>/stages`` (module docstring); ``version`` is part of
    every key (bump it when a stage's outputs change meaning)."""

    def __init__(self, root: str, version: str = "stages-v1"):
        self.root = os.path.abspath(str(root))
        self.dir = os.path.join(self.root, "stages")
        self.version = version

    def key(self, inputs) -> str:
        """The key of a stage's inputs (any JSON-able value; other values by their ``str``)."""
        blob = json.dumps([self.version, inputs], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:20]

    def marker(self, name: str) -> Optional[dict]:
        """``{"key", "info"}`` of a finished stage, or None."""
        p = os.path.join(self.dir, name + ".json")
        if not os.path.exists(p):
            return None
        with open(p, encoding="utf-8") as f:
            return json.load(f)

    def done(self, name: str, key: str) -> Optional[dict]:
        """The stage's recorded info when it finished for ``key``; None when it has not run;
        ``StageMismatch`` when it ran for other inputs."""
        m = self.marker(name)
        if m is None:
            return None
        if m["key"] != key:
            raise StageMismatch(
                f"workdir {self.root}: stage {name!r} already ran with a different configuration "
                f"(its inputs hash to {m['key']}, this config's to {key}). Resume with the config it "
                "was started with, or use a new --workdir.")
        return m["info"]

    def mark(self, name: str, key: str, info: dict) -> dict:
        """Records a finished stage (atomically)."""
        os.makedirs(self.dir, exist_ok=True)
        p = os.path.join(self.dir, name + ".json")
        with open(p + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"key": key, "info": info}, f, indent=1, default=float)
        os.replace(p + ".tmp", p)
        return info

    def run(self, name: str, inputs, build: Callable[[], dict]) -> dict:
        """The stage's info: recorded (same inputs), or ``build()``'s, timed (``wall_s``) and
        recorded."""
        key = self.key(inputs)
        info = self.done(name, key)
        if info is not None:
            return info
        t0 = time.perf_counter()
        info = build()
        info["wall_s"] = round(time.perf_counter() - t0, 2)
        return self.mark(name, key, info)
