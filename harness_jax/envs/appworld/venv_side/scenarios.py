"""Scenario templates of the AppWorld data generator (runs inside the AppWorld venv).

``build.py`` imports this module for ``TEMPLATES`` (name -> ``Template``, in registration order,
which fixes which template scenario ``k`` of a seed uses). The machinery and the shared oracle
building blocks live in ``scenario_kit.py``; each app's templates in ``scenarios_<app>.py``, which
register themselves on import, so the import order below is the registration order: Venmo,
SimpleNote, Todoist, Spotify, then the cross-app templates.

A template turns (supervisor, task RNG, variant) into one task: it edits the task's start state
with AppWorld's models (on top of the base world), and returns the instruction, public/private
data, the ground-truth answer, the scripted oracle solution and one plausible wrong solution
(code cells that call ``apis.<app>.<api>(...)`` exactly as an agent would). Its ``evaluation``
is the body of the task's ``ground_truth/evaluation.py``. Each scenario yields three tasks
(variants 1-3) with different supervisors and parameters, as AppWorld's scenarios do.
"""
from __future__ import annotations

from scenario_kit import TEMPLATES, Template, template  # noqa: F401  (build.py uses TEMPLATES)

import scenarios_venmo  # noqa: F401,E402  (registers the templates, in this order)
import scenarios_note  # noqa: F401,E402
import scenarios_todoist  # noqa: F401,E402
import scenarios_spotify  # noqa: F401,E402
import scenarios_cross  # noqa: F401,E402

__all__ = ["TEMPLATES", "Template", "template"]
