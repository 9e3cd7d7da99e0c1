"""Scenario-template machinery of the AppWorld data generator (runs inside the AppWorld venv).

The ``Template`` record, the ``template`` decorator and the ``TEMPLATES`` registry it fills, and the
building blocks every app's templates share: the oracle prelude (``PRELUDE``), the pagination helper
(``PAGES``), ``login``/``complete``/``money`` and the no-change evaluation (``NO_CHANGES``). The
templates themselves live in ``scenarios_<app>.py``; ``scenarios.py`` imports them in registration
order.

A template turns (supervisor, task RNG, variant) into one task: it edits the task's start state
with AppWorld's models (on top of the base world), and returns the instruction, public/private
data, the ground-truth answer, the scripted oracle solution and one plausible wrong solution
(code cells that call ``apis.<app>.<api>(...)`` exactly as an agent would). Its ``evaluation``
is the body of the task's ``ground_truth/evaluation.py``: AppWorld-style ``with test(...)``
blocks over ``models`` (start/end state diff: ``changed_model_names``, ``changed_records``) and
the answer. Each scenario yields three tasks (variants 1-3) with different supervisors and
parameters, as AppWorld's scenarios do.
"""
from __future__ import annotations

import dataclasses
from typing import Callable


TEMPLATES: dict = {}


@dataclasses.dataclass(frozen=True)
class Template:
    name: str
    apps: tuple
    difficulty: int            # AppWorld's 1 (easy) .. 3 (hard)
    wrong_kind: str            # what the wrong solution gets wrong
    evaluation: str            # body of evaluate(...) after the answer test
    setup: Callable

    def describe(self) -> dict:
        return {"name": self.name, "apps": list(self.apps), "difficulty": self.difficulty,
                "wrong_kind": self.wrong_kind}


def template(name: str, apps, difficulty: int, wrong_kind: str, evaluation: str):
    def deco(fn):
        TEMPLATES[name] = Template(name, tuple(apps), difficulty, wrong_kind, evaluation, fn)
        return fn
    return deco


# -- oracle building blocks ----------------------------------------------------------------------
PRELUDE = (
    "profile = apis.supervisor.show_profile()\n"
    "passwords = {item['account_name']: item['password'] for item in "
    "apis.supervisor.show_account_passwords()}\n"
    "print(profile['email'], sorted(passwords))")

PAGES = (
    "def all_pages(api, **kwargs):\n"
    "    items, page = [], 0\n"
    "    while True:\n"
    "        batch = api(**kwargs, page_index=page, page_limit=20)\n"
    "        if not batch:\n"
    "            return items\n"
    "        items += batch\n"
    "        page += 1")


def login(*apps) -> str:
    return "\n".join(f"{a}_token = apis.{a}.login(username=profile['email'], "
                     f"password=passwords['{a}'])['access_token']" for a in apps)


def complete(answer_expr: str = "") -> str:
    return f"apis.supervisor.complete_task({'answer=' + answer_expr if answer_expr else ''})"


def money(x: float) -> str:
    return f"{x:.2f}"


# evaluation of the read-only templates: nothing may change
NO_CHANGES = '''
    with test(
        """
        assert no model changes were made.
        """
    ):
        test.case(models.changed_model_names(), "==", set())
'''
