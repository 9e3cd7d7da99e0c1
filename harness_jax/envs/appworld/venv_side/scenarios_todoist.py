"""Todoist scenario templates of the AppWorld data generator (runs inside the AppWorld venv).

Imported by ``scenarios.py`` (which fixes the registration order); importing this module
registers its templates in ``scenario_kit.TEMPLATES``.
"""
from __future__ import annotations

import build as B
from scenario_kit import NO_CHANGES, PRELUDE, complete, login, template


NEW_TASK_TITLES = ["Book a table for Friday", "Send the invoice", "Buy new running shoes",
                   "Call the bank", "Print the tickets", "Pick up dry cleaning",
                   "Sign the lease", "Order printer ink"]
NEW_PROJECT_NAMES = ["Spring Cleaning", "Launch Party", "Kitchen Remodel", "Photo Album",
                     "Charity Run", "Podcast Launch"]


def _my_projects(c, inbox=False) -> list:
    t = c.M["todoist"]
    return [p for p in t.Project.find_all(user_id=c.user("todoist").id) if p.is_inbox == inbox]


FIND_PROJECT = ("project = [p for p in apis.todoist.show_projects(access_token=todoist_token, "
                "page_limit=100) if p['name'] == {name!r}][0]\n"
                "tasks = apis.todoist.show_tasks(project_id=project['project_id'], "
                "access_token=todoist_token)\n"
                "tasks = tasks['no_section_tasks'] + [x for s in tasks.get('sections', []) "
                "for x in s.get('tasks', [])]\nprint(project['project_id'], len(tasks))")


def _todo_login(name: str) -> str:
    return login("todoist") + "\n" + FIND_PROJECT.format(name=name)


@template("todo_create_task", ["todoist"], 1, "wrong_project", '''
    with test(
        """
        assert model changes match todoist.Task
        """
    ):
        test.case(models.changed_model_names(), "==", {"todoist.Task"})
    with test(
        """
        obtain added todoist.Task records, assert exactly one was added to
        private_data.project_id with public_data.title, public_data.due_date and
        public_data.priority.
        """
    ):
        added, _, _ = models.changed_records("todoist.Task")
        test.case(len(added), "==", 1)
        test.case(added[0].project_id, "==", private_data.project_id)
        test.case(added[0].title, "==", public_data.title, normalize_text=True)
        test.case(str(added[0].due_date)[:10], "==", public_data.due_date)
        test.case(added[0].priority, "==", public_data.priority)
''')
def todo_create_task(c):
    project = c.rng.choice(_my_projects(c))
    title = c.rng.choice(NEW_TASK_TITLES)
    due = c.now.add(days=c.rng.randint(2, 20)).to_date_string()
    prio = c.rng.choice(["high", "medium", "low"])
    cell = ("apis.todoist.create_task(project_id={pid}, title={title!r}, due_date={due!r}, "
            "priority={prio!r}, access_token=todoist_token)")
    return dict(
        instruction=f"Add a task \"{title}\" to my Todoist project \"{project.name}\", due on "
                    f"{due}, with {prio} priority.",
        public_data={"title": title, "due_date": due, "priority": prio, "project": project.name},
        private_data={"project_id": project.id}, answer=None,
        oracle=[PRELUDE, _todo_login(project.name),
                cell.format(pid="project['project_id']", title=title, due=due, prio=prio),
                complete()],
        wrong=[PRELUDE, _todo_login(project.name),
               cell.format(pid="0", title=title, due=due, prio=prio), complete()])


@template("todo_count_open", ["todoist"], 1, "wrong_answer", NO_CHANGES)
def todo_count_open(c):
    t = c.M["todoist"]
    project = c.rng.choice(_my_projects(c))
    B.add_todoist_tasks(c.w, project, c.user("todoist"), c.rng.sample(NEW_TASK_TITLES, k=2),
                        completed=[True, False], due_days=[-3, 4])
    count = sum(1 for x in t.Task.find_all(project_id=project.id) if not x.is_completed)
    return dict(
        instruction=f"How many incomplete tasks are there in my Todoist project "
                    f"\"{project.name}\"?",
        public_data={"project": project.name}, private_data={"project_id": project.id},
        answer=count,
        oracle=[PRELUDE, _todo_login(project.name),
                "count = sum(1 for x in tasks if not x['is_completed'])\nprint(count)",
                complete("count")],
        wrong=[PRELUDE, _todo_login(project.name), "count = len(tasks)\nprint(count)",
               complete("count")])


@template("todo_complete_overdue", ["todoist"], 2, "wrong_filter", '''
    with test(
        """
        assert model changes match todoist.Task
        """
    ):
        test.case(models.changed_model_names(), "==", {"todoist.Task"})
    with test(
        """
        obtain updated todoist.Task records, assert their ids match private_data.task_ids
        (ignore order) and all of them are completed.
        """
    ):
        added, updated, removed = models.changed_records("todoist.Task")
        test.case(list_of(updated, "id"), "==", private_data.task_ids, ignore_order=True)
        test.case(all(x.is_completed for x in updated), "==", True)
''')
def todo_complete_overdue(c):
    t = c.M["todoist"]
    project = c.rng.choice(_my_projects(c))
    B.add_todoist_tasks(c.w, project, c.user("todoist"), c.rng.sample(NEW_TASK_TITLES, k=5),
                        completed=[False, False, True, False, False],
                        due_days=[-6, -1, -4, 3, 9])
    now = c.now
    ids = [x.id for x in t.Task.find_all(project_id=project.id)
           if not x.is_completed and x.due_date is not None and x.due_date < now]
    cell = ("now = datetime.datetime.now().isoformat()\n"
            "for x in tasks:\n    if {cond}:\n        apis.todoist.update_task("
            "task_id=x['task_id'], is_completed=True, access_token=todoist_token)")
    return dict(
        instruction=f"Mark every overdue task in my Todoist project \"{project.name}\" as "
                    "completed.",
        public_data={"project": project.name}, private_data={"task_ids": ids}, answer=None,
        oracle=[PRELUDE, _todo_login(project.name), cell.format(
            cond="not x['is_completed'] and x['due_date'] and x['due_date'] < now"), complete()],
        wrong=[PRELUDE, _todo_login(project.name), cell.format(cond="not x['is_completed']"),
               complete()])


@template("todo_new_project", ["todoist"], 2, "missing_step", '''
    with test(
        """
        assert model changes match todoist.Project, todoist.ProjectCollaboratorLink, todoist.Task
        """
    ):
        test.case(
            models.changed_model_names(),
            "==",
            {"todoist.Project", "todoist.ProjectCollaboratorLink", "todoist.Task"},
        )
    with test(
        """
        obtain added todoist.Project records, assert exactly one named public_data.name.
        """
    ):
        added_projects, _, _ = models.changed_records("todoist.Project")
        test.case(len(added_projects), "==", 1)
        test.case(added_projects[0].name, "==", public_data.name, normalize_text=True)
    with test(
        """
        obtain added todoist.Task records, assert their titles match public_data.titles
        (ignore order) and all are in the new project.
        """
    ):
        added_tasks, _, _ = models.changed_records("todoist.Task")
        test.case(list_of(added_tasks, "title"), "==", public_data.titles, ignore_order=True)
        test.case(set(list_of(added_tasks, "project_id")), "==", {added_projects[0].id})
''')
def todo_new_project(c):
    taken = {p.name for p in _my_projects(c)}
    name = c.rng.choice([n for n in NEW_PROJECT_NAMES if n not in taken])
    titles = c.rng.sample(NEW_TASK_TITLES, k=3)
    make = (login("todoist") + "\n"
            f"project_id = apis.todoist.create_project(name={name!r}, "
            "access_token=todoist_token)['project_id']")
    add = ("for title in {titles!r}:\n    apis.todoist.create_task(project_id=project_id, "
           "title=title, access_token=todoist_token)")
    quoted = ", ".join(f"\"{x}\"" for x in titles)
    return dict(
        instruction=f"Create a new Todoist project named \"{name}\" with three tasks: {quoted}.",
        public_data={"name": name, "titles": titles}, private_data={}, answer=None,
        oracle=[PRELUDE, make, add.format(titles=titles), complete()],
        wrong=[PRELUDE, make, add.format(titles=titles[:2]), complete()])


@template("todo_delete_completed", ["todoist"], 1, "wrong_scope", '''
    with test(
        """
        assert model changes match todoist.Task
        """
    ):
        test.case(models.changed_model_names(), "==", {"todoist.Task"})
    with test(
        """
        obtain removed todoist.Task records, assert their ids match private_data.task_ids
        (ignore order) and no task was added or updated.
        """
    ):
        added, updated, removed = models.changed_records("todoist.Task")
        test.case(list_of(removed, "id"), "==", private_data.task_ids, ignore_order=True)
        test.case(len(added) + len(updated), "==", 0)
''')
def todo_delete_completed(c):
    t = c.M["todoist"]
    projects = _my_projects(c)
    project = c.rng.choice(projects)
    me = c.user("todoist")
    B.add_todoist_tasks(c.w, project, me, c.rng.sample(NEW_TASK_TITLES, k=2),
                        completed=[True, True], due_days=[-2, -8])
    other = [p for p in projects if p.id != project.id][0]
    B.add_todoist_tasks(c.w, other, me, c.rng.sample(NEW_TASK_TITLES, k=1), completed=[True],
                        due_days=[-1])
    ids = [x.id for x in t.Task.find_all(project_id=project.id) if x.is_completed]
    scope_all = (login("todoist") + "\n"
                 "tasks = []\nfor p in apis.todoist.show_projects(access_token=todoist_token, "
                 "page_limit=100):\n"
                 "    r = apis.todoist.show_tasks(project_id=p['project_id'], "
                 "access_token=todoist_token)\n    tasks += r['no_section_tasks']")
    delete = ("for x in tasks:\n    if x['is_completed']:\n        apis.todoist.delete_task("
              "task_id=x['task_id'], access_token=todoist_token)")
    return dict(
        instruction=f"Delete all completed tasks from my Todoist project \"{project.name}\".",
        public_data={"project": project.name}, private_data={"task_ids": ids}, answer=None,
        oracle=[PRELUDE, _todo_login(project.name), delete, complete()],
        wrong=[PRELUDE, scope_all, delete, complete()])


@template("todo_rename_project", ["todoist"], 1, "wrong_action", '''
    with test(
        """
        assert model changes match todoist.Project
        """
    ):
        test.case(models.changed_model_names(), "==", {"todoist.Project"})
    with test(
        """
        obtain updated todoist.Project records, assert only private_data.project_id was updated,
        now named public_data.new_name, and no project was added or removed.
        """
    ):
        added, updated, removed = models.changed_records("todoist.Project")
        test.case(list_of(updated, "id"), "==", [private_data.project_id])
        test.case(updated[0].name, "==", public_data.new_name, normalize_text=True)
        test.case(len(added) + len(removed), "==", 0)
''')
def todo_rename_project(c):
    project = c.rng.choice(_my_projects(c))
    taken = {p.name for p in _my_projects(c)}
    new = c.rng.choice([n for n in NEW_PROJECT_NAMES if n not in taken])
    return dict(
        instruction=f"Rename my Todoist project \"{project.name}\" to \"{new}\".",
        public_data={"old_name": project.name, "new_name": new},
        private_data={"project_id": project.id}, answer=None,
        oracle=[PRELUDE, _todo_login(project.name),
                f"apis.todoist.update_project(project_id=project['project_id'], name={new!r}, "
                "access_token=todoist_token)", complete()],
        wrong=[PRELUDE, _todo_login(project.name),
               f"apis.todoist.create_project(name={new!r}, access_token=todoist_token)",
               complete()])
