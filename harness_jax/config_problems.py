"""The error type of config validation: one ``Problem`` per bad field (dotted path, value, what is
wrong, the fix) and ``ConfigValidationError`` listing them all.

Its own module so that the central validator (``config_validation``) and the packages whose
config sections it checks (``harness_s``'s router and rescue sections) share it without importing
each other both ways. ``config_validation`` re-exports both names.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence


@dataclasses.dataclass(frozen=True)
class Problem:
    path: str       # dotted config path, e.g. "rl.group_size"
    value: Any      # the offending value
    problem: str    # what is wrong
    fix: str        # what to do

    def __str__(self) -> str:
        return f"config.{self.path} = {self.value!r}: {self.problem}. Fix: {self.fix}"


class ConfigValidationError(ValueError):
    """Raised with every problem of a config; ``.problems`` holds them as ``Problem``s."""

    def __init__(self, problems: Sequence[Problem]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} problem(s) in the experiment config:\n{lines}")


Bad = Callable[[str, Any, str, str], None]            # bad(path, value, problem, fix)
