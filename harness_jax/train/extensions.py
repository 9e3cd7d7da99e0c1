"""How a method plugs into training: one ``Extension`` interface and the registry of methods.

**Extensions.** An ``Extension`` is handed the run context (``train.context.RunContext``: the
resolved spec, learner, engine, runner, harness, tokenizer, paths, writer), never the trainer.
Every hook has a default that changes nothing, so an extension overrides what its method needs:

* what the policy trains on: ``task_stream`` (the training items), ``eval_tasks``,
  ``group_source`` (how one item becomes a ``Group``; default: G episodes under the selected
  harness), ``harness_selector`` and ``post_processors`` (the hooks of ``train.groups``),
  ``warm_start`` (the SFT phase) and ``evaluate`` (held-out evaluation); the first extension
  that returns something (not None) decides;
* every step: ``after_update`` (work after the learner update and weight sync, timed as its own
  phase), ``step_metrics`` (merged into the step's metrics), ``step_line`` / ``eval_line`` (the
  console's line, when the method has its own);
* state: ``state_dict`` (saved in every checkpoint), ``load_state_dict`` (on resume),
  ``summary`` (a section of ``summary.json``), ``close``.

Harness-S (``harness_s.training.HarnessSExtension``: rescue, routing, re-anchoring) and
Harness-R1 (``harness_r1.training.EngineerExtension``: packets, the engineer's groups, cold-start
SFT, held-out Delta_B) are both extensions.

Order in a step: collect (group source, post-processors per group) -> learner update -> weight
sync -> ``after_update`` -> periodic evaluation -> checkpoint (``state_dict``) ->
``step_metrics`` -> metrics written -> console line.

**Methods.** A method is registered by its package (``harness_jax/<package>/method.py``, found by
``methods()`` without any central list) as a ``Method``: the config section it owns, how that
section is resolved into its typed spec (with its problems reported like every other field's),
and the extensions a plain training run (``train.run.train``) gets when the config has the
section. The launcher imports no method: ``train.run.train`` asks this registry.

    extensions.register(extensions.Method(section="harness_s", resolve=..., extensions=...))
"""
from __future__ import annotations

import dataclasses
import importlib
import os
from typing import Any, Callable, Mapping, Optional, Sequence

import harness_jax


class Extension:
    """Base class of a method's plug-in (module docstring): every hook is a no-op."""

    name = "extension"          # key of its state in checkpoints and of its summary section

    def attach(self, run) -> None:
        """Called once the run context is built, before the loop asks for anything else."""

    # -- what the policy trains on (None: the loop's own) --------------------------------------
    def task_stream(self, run) -> Optional[Any]:
        """The training items as a ``train.data.TaskStream``."""
        return None

    def eval_tasks(self, run) -> Optional[Sequence]:
        """The items of held-out evaluation."""
        return None

    def group_source(self, run) -> Optional[Callable]:
        """``async group(item, step, index) -> Group | None``: one item's group."""
        return None

    def harness_selector(self, run) -> Optional[Any]:
        """A ``HarnessSelector`` replacing the default (every task under H0)."""
        return None

    def post_processors(self, run) -> Sequence[Any]:
        """``GroupPostProcessor``s to run on every collected group, in order."""
        return ()

    def warm_start(self, run, should_stop: Callable[[], bool]) -> Optional[dict]:
        """The SFT phase (its summary, with ``finished``)."""
        return None

    def evaluate(self, run, tasks: Sequence, tag: str) -> Optional[dict]:
        """Held-out evaluation of the current policy on ``tasks``."""
        return None

    # -- every step -------------------------------------------------------------------------------
    def after_update(self, run, step: int, timer) -> dict:
        """Work after the learner update and weight sync of ``step`` (``timer`` is the step's
        ``telemetry.PhaseTimer``); returns metrics."""
        return {}

    def step_metrics(self, run, batch, metrics: dict) -> dict:
        """Extra metrics of the step that trained on ``batch`` (``metrics`` holds the loop's,
        including ``time/step_s``)."""
        return {}

    def step_line(self, step: int, total: int, metrics: dict, last_eval: Optional[dict]) -> Optional[str]:
        """The console line of a finished step (None: the loop's)."""
        return None

    def eval_line(self, tag: str, result: dict) -> Optional[str]:
        """The console line of an evaluation (None: the loop's)."""
        return None

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """JSON-serialisable state, saved with every checkpoint."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restores ``state_dict()``'s output when a run resumes."""

    def summary(self) -> dict:
        """A section of ``summary.json``."""
        return {}

    def close(self) -> None:
        """Releases what the extension started."""


class Extensions:
    """The run's extensions as one: the first answer of a provider hook, the merged metrics of
    the others."""

    def __init__(self, exts: Sequence[Extension] = ()):
        self.items = list(exts)

    def __iter__(self):
        return iter(self.items)

    def first(self, hook: str, *args):
        for e in self.items:
            out = getattr(e, hook)(*args)
            if out is not None:
                return out
        return None

    def merged(self, hook: str, *args) -> dict:
        out: dict = {}
        for e in self.items:
            out.update(getattr(e, hook)(*args))
        return out

    def collected(self, hook: str, *args) -> list:
        return [x for e in self.items for x in getattr(e, hook)(*args)]


# ============================================================================================
# the registry of methods
# ============================================================================================
@dataclasses.dataclass(frozen=True)
class Method:
    """A training method's registration (module docstring).

    section: the config section it owns (``config.<section>``). resolve: ``(config, bad,
    check_paths) -> spec`` reads the section (and what of the rest the method constrains) into
    its frozen spec, reporting problems through ``bad(path, value, problem, fix)``. extensions:
    ``(spec, run) -> [Extension]`` for a plain training run (``run`` is the ``RunSpec``).
    trained_by: the entry point that trains the method when a plain run cannot (e.g.
    ``"launch/engineer.py"``; ``train.run.train`` then refuses such a config). routings: ways
    of choosing a harness per task at evaluation (``launch/evaluate.py --routing=<name>``:
    ``fn(run, workdir, *, tasks, checkpoint, k, split, out, pool)`` -> results)."""

    section: str
    resolve: Callable[[Any, Callable, bool], Any]
    extensions: Callable[[Any, Any], list] = lambda spec, run: []
    trained_by: str = ""
    routings: Mapping[str, Callable] = dataclasses.field(default_factory=dict)  # evaluation routings (launch/evaluate.py --routing)


_METHODS: dict[str, Method] = {}
_DISCOVERED = False


def register(method: Method) -> None:
    """Registers a method (its package's ``method.py`` calls this on import)."""
    other = _METHODS.get(method.section)
    if other is not None and other.resolve.__module__ != method.resolve.__module__:
        raise ValueError(f"config section {method.section!r} is already owned by {other.resolve.__module__}")
    _METHODS[method.section] = method


def methods() -> dict[str, Method]:
    """Every registered method by section: the packages of ``harness_jax`` that have a
    ``method.py`` are imported once (no central list)."""
    global _DISCOVERED
    if not _DISCOVERED:
        root = os.path.dirname(harness_jax.__file__)
        for name in sorted(os.listdir(root)):
            if os.path.isfile(os.path.join(root, name, "method.py")):
                importlib.import_module(f"harness_jax.{name}.method")
        _DISCOVERED = True
    return dict(_METHODS)


def resolve_methods(config, bad, *, check_paths: bool = True) -> dict:
    """The resolved section of every method the config has, by section name."""
    return {name: m.resolve(config, bad, check_paths) for name, m in sorted(methods().items())
            if name in config}


def for_run(run) -> list:
    """The extensions a plain training run of ``run`` (a ``RunSpec``) gets from its methods;
    raises when a method of the config trains with another entry point."""
    out = []
    for name, section in run.methods.items():
        m = methods()[name]
        if m.trained_by:
            raise ValueError(f"config.{name}: this method trains with {m.trained_by}, not with a plain "
                             f"training run; run {m.trained_by} with this config")
        out += list(m.extensions(section, run))
    return out


def routing(name: str) -> Callable:
    """The evaluation routing ``name`` a method registered (``Method.routings``)."""
    table = {r: fn for m in methods().values() for r, fn in m.routings.items()}
    if name not in table:
        raise ValueError(f"--routing={name}: unknown routing; registered: {', '.join(sorted(table)) or 'none'} "
                         "(or 'h0': every task under the base harness)")
    return table[name]
