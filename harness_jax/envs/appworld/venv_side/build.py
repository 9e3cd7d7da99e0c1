"""Writes an AppWorld ``data/`` tree that AppWorld's own runtime loads unchanged.

Runs INSIDE the AppWorld virtual environment (the host calls it as a subprocess of the venv's
python; see ``harness_jax/envs/appworld/generator.py``); imports only the standard library,
``appworld`` and its sibling ``scenarios`` module, never ``harness_jax``.

    <venv>/bin/python build.py --out DIR --seed 0 --scenarios 10 [--templates a,b] [--people 20]

Layout written under ``DIR/data`` (the release format AppWorld's loaders read):
  base_dbs/<app>.db                  every app's base database, built with AppWorld's own models
                                     and factories (polyfactory/Faker), clock frozen at AppWorld's
                                     default datetime
  api_docs/standard/<app>.json       API docs as AppWorld's ``ApiDocCollection.load`` reads them
  tasks/<scenario>_<k>/specs.json    instruction, supervisor, datetime, db_version
  tasks/<scenario>_<k>/dbs/<app>.jsonl   the task's start state as changes over the base DBs
  tasks/<scenario>_<k>/ground_truth/ metadata.json (mode "minimal", difficulty 1-3), public_data,
                                     private_data, answer.json, evaluation.py (AppWorld-style
                                     tests over the database diff and the answer), test_data.json
                                     (each test labelled no_op_pass / no_op_fail by evaluating the
                                     untouched start state with AppWorld's evaluator)
  datasets/<name>.txt                the task ids
  harness_jax/index.jsonl            our sidecar (AppWorld ignores it): per task the scenario
                                     template, variant, difficulty, the scripted oracle solution
                                     and a plausible wrong solution, as code cells
  harness_jax/build.json             build parameters, timings and content digests

With validation on (default), every task's oracle solution runs through AppWorld's own
``AppWorld`` environment and evaluator in this process and must pass every test; a failure aborts
the build (a template bug is never silently dropped).
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import random
import re
import shutil
import sqlite3
import sys
import time

BUILDER_VERSION = 1
HERE = os.path.dirname(os.path.abspath(__file__))
APPS_WITH_ACCOUNTS = ("venmo", "simple_note", "todoist", "spotify")


def clock() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)  # freezegun does not patch this


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sha(*parts) -> str:
    return hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()


# ------------------------------------------------------------------------------------------------
# The base world (people, accounts and app content), written with AppWorld's own models
# ------------------------------------------------------------------------------------------------
NOTE_TOPICS = ["Grocery List", "Book Ideas", "Meeting Notes", "Travel Plans", "Gift Ideas",
               "Workout Plan", "Recipes to Try", "Movie Watchlist", "Budget", "Garden Plan",
               "Packing List", "Quotes", "Podcast Picks", "Home Repairs", "Birthday Party",
               "Learning Goals", "Weekend Errands", "Car Maintenance", "Reading Log",
               "Project Brainstorm"]
NOTE_TAGS = ["work", "personal", "recipes", "travel", "ideas", "shopping", "health", "finance"]
PROJECT_NAMES = ["Home Renovation", "Work Projects", "Fitness Goals", "Vacation Planning",
                 "Side Business", "Learning Spanish", "Wedding Prep", "Garden Makeover",
                 "Book Club", "Moving House"]
TASK_TITLES = ["Call the plumber", "Buy paint samples", "Email the landlord", "Book flights",
               "Renew passport", "Pay electricity bill", "Schedule dentist visit",
               "Clean the garage", "Order new shelves", "Prepare slides", "Review budget",
               "Update resume", "Water the plants", "Fix the bike", "Plan team lunch",
               "Write blog post", "Back up photos", "Return library books", "Cancel old gym",
               "Buy birthday gift", "Organize closet", "Research insurance", "Submit report",
               "Replace air filter"]
VENMO_NOTES = ["Dinner", "Rent share", "Groceries", "Movie tickets", "Concert", "Coffee",
               "Uber ride", "Birthday gift", "Utilities", "Lunch", "Drinks", "Gas money",
               "Pizza night", "Book club snacks", "Parking"]
GENRES = ["pop", "rock", "jazz", "hip-hop", "electronic", "indie", "classical", "country"]
SONG_WORDS_A = ["Midnight", "Golden", "Silent", "Electric", "Broken", "Velvet", "Neon", "Wild",
                "Paper", "Crystal", "Hidden", "Summer", "Lonely", "Burning", "Frozen", "Lucky",
                "Distant", "Sweet", "Restless", "Fading"]
SONG_WORDS_B = ["Heart", "River", "Sky", "Dreams", "Highway", "Echoes", "Fire", "Rain", "City",
                "Shadows", "Ocean", "Lights", "Whisper", "Garden", "Storm", "Mirror", "Road",
                "Stars", "Letters", "Waves"]


class World:
    """AppWorld model classes and helpers shared by the base-world builder and the templates."""

    def __init__(self, rng: random.Random):
        from appworld.apps import get_all_apps
        from appworld.common.datetime import DateTime
        from appworld.common.utils import import_models_module
        self.apps = list(get_all_apps())
        self.M = {a: import_models_module(a) for a in self.apps}
        self.rng = rng
        self.DateTime = DateTime

    @property
    def now(self):
        return self.DateTime.now()

    def days_ago(self, days: float, rng: random.Random | None = None):
        r = rng or self.rng
        return self.now.subtract(seconds=int(days * 86400) + r.randint(0, 3600))

    def user(self, app: str, person):
        return self.M[app].User.find_one(email=person.email)

    def snapshot(self) -> None:
        """Remembers people and their accounts (read once from the base world, so choosing
        supervisors never touches a closed task database)."""
        admin = self.M["admin"]
        self._people = admin.MainUser.all()
        self._accounts = {p.id: {a.account_name for a in admin.AccountPassword.find_all(
            main_user_id=p.id)} for p in self._people}

    def people(self):
        return list(self._people)

    def has_account(self, app: str, person) -> bool:
        return app in self._accounts[person.id]


def _password(rng: random.Random) -> str:
    alphabet = "abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"
    return "".join(rng.choice(alphabet) for _ in range(10))


def build_base_world(w: World, n_people: int, n_supervisors: int) -> None:
    rng = w.rng
    M = w.M
    admin = M["admin"]
    people, seen = [], {"first_name": set(), "email": set(), "phone_number": set()}
    while len(people) < n_people:
        p = admin.MainUser.factory().build()
        if any(getattr(p, k) in seen[k] for k in seen):
            continue
        for k in seen:
            seen[k].add(getattr(p, k))
        people.append(p)
    admin.MainUser.save_all(people)
    people = admin.MainUser.all()
    accounts = {}
    pw_rows = []
    for i, p in enumerate(people):
        apps = [a for a in APPS_WITH_ACCOUNTS if i < n_supervisors or rng.random() < 0.85]
        accounts[p.id] = {}
        for app in apps:
            pw = _password(rng)
            accounts[p.id][app] = pw
            pw_rows.append(admin.AccountPassword(main_user_id=p.id, account_name=app, password=pw))
    admin.AccountPassword.save_all(pw_rows)
    for app in APPS_WITH_ACCOUNTS:
        rows = []
        for p in people:
            if app not in accounts[p.id]:
                continue
            extra = {"venmo_balance": round(rng.uniform(800, 3000), 2)} if app == "venmo" else {}
            rows.append(M[app].User.factory().build(
                first_name=p.first_name, last_name=p.last_name, email=p.email,
                password=accounts[p.id][app], verified=True, created_at=w.days_ago(400 + 10 * p.id),
                **extra))
        M[app].User.save_all(rows)
    _base_venmo(w)
    _base_simple_note(w)
    _base_todoist(w)
    _base_spotify(w)
    _base_api_docs(w)


def _base_venmo(w: World) -> None:
    rng, v = w.rng, w.M["venmo"]
    users = v.User.all()
    ids = [u.id for u in users]
    pairs = set()
    for u in ids:
        for f in rng.sample([x for x in ids if x != u], k=min(4, len(ids) - 1)):
            pairs.add((u, f))
            pairs.add((f, u))
    v.Friendship.save_all([v.Friendship.factory().build(user_id=a, friend_id=b,
                                                        created_at=w.days_ago(rng.uniform(100, 300)))
                           for a, b in sorted(pairs)])
    txs = []
    for u in ids:
        for _ in range(6):
            r = rng.choice([x for x in ids if x != u])
            when = w.days_ago(rng.uniform(20, 200))
            txs.append(v.Transaction.factory().build(
                sender_id=u, receiver_id=r, amount=round(rng.uniform(5, 150), 2),
                description=rng.choice(VENMO_NOTES), created_at=when, updated_at=when,
                private=rng.random() < 0.2, like_count=0, receipt_download_count=0,
                payment_card_digits=None))
    v.Transaction.save_all(txs)
    reqs = []
    for u in ids:
        for _ in range(2):
            r = rng.choice([x for x in ids if x != u])
            when = w.days_ago(rng.uniform(20, 120))
            state = rng.choice(["approved", "denied"])
            reqs.append(v.PaymentRequest.factory().build(
                sender_id=u, receiver_id=r, amount=round(rng.uniform(5, 100), 2),
                description=rng.choice(VENMO_NOTES), created_at=when, updated_at=when,
                approved_at=when.add(days=1) if state == "approved" else None,
                denied_at=when.add(days=1) if state == "denied" else None,
                private=False))
    v.PaymentRequest.save_all(reqs)


def _base_simple_note(w: World) -> None:
    from faker import Faker
    fake = Faker()
    rng, n = w.rng, w.M["simple_note"]
    rows = []
    for u in n.User.all():
        for topic in rng.sample(NOTE_TOPICS, k=rng.randint(5, 8)):
            when = w.days_ago(rng.uniform(10, 300))
            rows.append(n.Note.factory().build(
                user_id=u.id, title=topic, content=fake.paragraph(nb_sentences=3),
                tags=sorted(rng.sample(NOTE_TAGS, k=rng.randint(0, 2))),
                pinned=rng.random() < 0.15, created_at=when, updated_at=when, data=None))
    n.Note.save_all(rows)


def _base_todoist(w: World) -> None:
    from appworld.apps.todoist.constants import VALID_COLORS
    rng, t = w.rng, w.M["todoist"]
    users = t.User.all()
    projects = []
    for u in users:
        for name in ["Inbox"] + rng.sample(PROJECT_NAMES, k=rng.randint(2, 3)):
            projects.append(t.Project.factory().build(
                user_id=u.id, name=name, is_inbox=name == "Inbox", color=rng.choice(VALID_COLORS),
                description="" if name == "Inbox" else f"Everything about {name.lower()}.",
                created_at=w.days_ago(rng.uniform(60, 300))))
    t.Project.save_all(projects)
    projects = t.Project.all()
    t.ProjectCollaboratorLink.save_all([t.ProjectCollaboratorLink.factory().build(
        project_id=p.id, user_id=p.user_id, is_favorite=False, is_archived=False,
        created_at=p.created_at) for p in projects])
    rows = []
    for p in projects:
        rows += todoist_task_rows(w, p, p.user_id, rng.sample(TASK_TITLES, k=rng.randint(3, 6)), 0)
    t.Task.save_all(rows)


def todoist_task_rows(w: World, project, user_id: int, titles, start: int, completed=None,
                      due_days=None, priority=None) -> list:
    rng, t = w.rng, w.M["todoist"]
    rows = []
    for i, title in enumerate(titles):
        dd = due_days[i] if due_days is not None else rng.choice([None, -5, -2, 3, 7, 14])
        rows.append(t.Task.factory().build(
            project_id=project.id, section_id=None, user_id=user_id, title=title,
            description="", due_date=None if dd is None else w.now.add(days=dd).start_of("day"),
            priority=priority[i] if priority is not None else rng.choice(["high", "medium", "low"]),
            is_completed=(completed[i] if completed is not None else rng.random() < 0.3),
            duration=None, duration_unit=None, order_index=start + i, assignee_id=None,
            assigner_id=None, created_at=w.days_ago(rng.uniform(30, 60))))
    return rows


def add_todoist_tasks(w: World, project, user, titles, completed=None, due_days=None,
                      priority=None) -> list:
    """Creates tasks in ``project`` (``due_days``: days from now, negative = overdue)."""
    t = w.M["todoist"]
    start = len(t.Task.find_all(project_id=project.id))
    rows = todoist_task_rows(w, project, user.id, titles, start, completed, due_days, priority)
    t.Task.save_all(rows)
    return rows


def _base_spotify(w: World) -> None:
    from faker import Faker
    fake = Faker()
    rng, s = w.rng, w.M["spotify"]
    artists, names = [], set()
    while len(artists) < 12:
        name = fake.name()
        if name in names:
            continue
        names.add(name)
        artists.append(s.Artist.factory().build(name=name, genre=rng.choice(GENRES),
                                                created_at=w.days_ago(rng.uniform(500, 900))))
    s.Artist.save_all(artists)
    artists = s.Artist.all()
    titles = set()

    def title() -> str:
        while True:
            t = f"{rng.choice(SONG_WORDS_A)} {rng.choice(SONG_WORDS_B)}"
            if t not in titles:
                titles.add(t)
                return t

    albums = []
    for a in artists:
        for _ in range(rng.randint(1, 2)):
            albums.append(s.Album.factory().build(
                title=title(), artist_ids=[a.id], genre=a.genre,
                release_date=w.days_ago(rng.uniform(100, 700)),
                rating=round(rng.uniform(2, 5), 1), like_count=rng.randint(0, 50),
                review_count=0))
    s.Album.save_all(albums)
    albums = s.Album.all()
    songs = []
    for alb in albums:
        for _ in range(rng.randint(3, 5)):
            songs.append(s.Song.factory().build(
                title=title(), artist_ids=list(alb.artist_ids), album_id=alb.id,
                duration=rng.randint(120, 420), release_date=alb.release_date, genre=alb.genre,
                play_count=rng.randint(100, 100000), rating=round(rng.uniform(1, 5), 1),
                like_count=rng.randint(0, 300), review_count=0))
    s.Song.save_all(songs)
    song_ids = [x.id for x in s.Song.all()]
    users = s.User.all()
    playlists, contents = [], []
    for u in users:
        used = set()
        for _ in range(rng.randint(2, 3)):
            while True:
                pt = (f"{rng.choice(SONG_WORDS_A)} "
                      f"{rng.choice(['Mix', 'Vibes', 'Playlist', 'Tunes', 'Favorites'])}")
                if pt not in used:
                    used.add(pt)
                    break
            playlists.append(s.Playlist.factory().build(
                user_id=u.id, title=pt, is_public=rng.random() < 0.5,
                created_at=w.days_ago(rng.uniform(30, 200)), rating=0.0, like_count=0,
                review_count=0))
            contents.append(rng.sample(song_ids, k=rng.randint(4, 8)))
    s.Playlist.save_all(playlists)
    by_key = {(p.user_id, p.title): p.id for p in s.Playlist.all()}
    s.PlaylistSong.save_all([s.PlaylistSong.factory().build(
        playlist_id=by_key[(p.user_id, p.title)], song_id=i,
        added_at=w.days_ago(rng.uniform(1, 30))) for p, ids in zip(playlists, contents)
        for i in ids])
    likes, library, follows = [], [], []
    for u in users:
        likes += [s.SongLike.factory().build(user_id=u.id, song_id=i,
                                             liked_at=w.days_ago(rng.uniform(1, 200)))
                  for i in rng.sample(song_ids, k=rng.randint(3, 8))]
        library += [s.UserLibrarySong.factory().build(
            user_id=u.id, song_id=i, created_at=w.days_ago(rng.uniform(1, 200)))
            for i in rng.sample(song_ids, k=rng.randint(3, 8))]
        follows += [s.UserArtistFollowing.factory().build(
            user_id=u.id, artist_id=a.id, created_at=w.days_ago(rng.uniform(1, 200)))
            for a in rng.sample(artists, k=rng.randint(1, 3))]
    s.SongLike.save_all(likes)
    s.UserLibrarySong.save_all(library)
    s.UserArtistFollowing.save_all(follows)


def add_playlist(w: World, user, title: str, song_ids, is_public=False):
    rng, s = w.rng, w.M["spotify"]
    pl = s.Playlist.factory().build(user_id=user.id, title=title, is_public=is_public,
                                    created_at=w.days_ago(rng.uniform(30, 200)),
                                    rating=0.0, like_count=0, review_count=0)
    s.Playlist.save_all([pl])
    s.PlaylistSong.save_all([s.PlaylistSong.factory().build(
        playlist_id=pl.id, song_id=i, added_at=w.days_ago(rng.uniform(1, 30)))
        for i in song_ids])
    return pl


def _base_api_docs(w: World) -> None:
    """AppWorld's API docs (built by the package from its own apps) as api_docs DB rows."""
    from appworld.collections.api_docs import ApiDocCollection
    d = w.M["api_docs"]
    rows = []
    for app_name, docs in ApiDocCollection.build().items():
        for api_name, doc in docs.items():
            rows.append(d.ApiDoc(app_name_=app_name, api_name=api_name, path=doc["path"],
                                 method=doc["method"], description=doc["description"],
                                 parameters=doc["parameters"],
                                 response_schemas=doc["response_schemas"]))
    d.ApiDoc.save_all(rows)


def write_api_docs(data_dir: str) -> None:
    from appworld.collections.api_docs import ApiDocCollection
    from appworld.common.constants import CANARY_STRING
    out = os.path.join(data_dir, "api_docs", "standard")
    os.makedirs(out, exist_ok=True)
    for app_name, docs in ApiDocCollection.build().items():
        payload = {k: dict(v, canary_string=CANARY_STRING) for k, v in docs.items()}
        with open(os.path.join(out, app_name + ".json"), "w") as f:
            json.dump(payload, f, indent=2)


# ------------------------------------------------------------------------------------------------
# Tasks
# ------------------------------------------------------------------------------------------------
class Ctx:
    """What a template's setup gets: the task's start state (AppWorld models bound to the task's
    in-memory copy of the base DBs), the supervisor and a task-private RNG."""

    def __init__(self, world: World, me, rng: random.Random, variant: int):
        self.w = world
        self.M = world.M
        self.me = me
        self.rng = rng
        self.variant = variant

    @property
    def now(self):
        return self.w.now

    def days_ago(self, days: float):
        return self.w.days_ago(days, self.rng)

    def user(self, app: str, person=None):
        return self.w.user(app, person or self.me)

    def others(self, app: str, k: int, exclude=()) -> list:
        """``k`` other people with an account in ``app`` (never the supervisor)."""
        skip = {self.me.id, *[p.id for p in exclude]}
        pool = [p for p in self.w.people() if p.id not in skip and self.w.has_account(app, p)]
        if len(pool) < k:
            raise RuntimeError(f"template needs {k} other {app} users, the world has {len(pool)}")
        return self.rng.sample(pool, k)

    @staticmethod
    def full_name(person) -> str:
        return f"{person.first_name} {person.last_name}"


def supervisor_rows(w: World, me, instruction: str) -> None:
    sup, admin = w.M["supervisor"], w.M["admin"]
    s = sup.Supervisor(first_name=me.first_name, last_name=me.last_name, email=me.email,
                       phone_number=me.phone_number, birthday=me.birthday, sex=me.sex)
    sup.Supervisor.save_all([s])
    sup.Task.save_all([sup.Task(supervisor_id=s.id, instruction=instruction)])
    sup.AccountPassword.save_all([
        sup.AccountPassword(supervisor_id=s.id, account_name=ap.account_name, password=ap.password)
        for ap in admin.AccountPassword.find_all(main_user_id=me.id)])


EVAL_HEADER = '''# {canary}
# Generated by harness_jax (template {template}); AppWorld-style tests over the database diff
# between the task's start and end states, and over the submitted answer.
import json

from appworld.common.utils import list_of


def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    active_tasks = models.end.supervisor.Task.all()
    predicted_answer = None
    if active_tasks:
        try:
            predicted_answer = json.loads(active_tasks[0].answer)
        except json.JSONDecodeError:
            predicted_answer = active_tasks[0].answer
    test.task_completed = bool(active_tasks) and active_tasks[0].status == "success"
    with test(
        """
        assert answers match.
        """
    ):
        test.answer(predicted_answer, ground_truth_answer)
'''


def write_json(path: str, obj) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=4, default=str)


def build_task(w: World, data_dir: str, base_dir: str, template, task_id: str, me,
               rng: random.Random, variant: int) -> dict:
    from appworld.collections.models import ModelCollection
    from appworld.common.constants import CANARY_STRING, DB_VERSION
    tdir = os.path.join(data_dir, "tasks", task_id)
    mc = ModelCollection.load(to_db_home_path=f":memory:hjtask-{task_id}",
                              from_db_home_path=base_dir, load_apps=w.apps)
    try:
        ctx = Ctx(w, me, rng, variant)
        spec = template.setup(ctx)
        supervisor_rows(w, me, spec["instruction"])
        mc.save(db_home_path=os.path.join(tdir, "dbs"), format="changes",
                app_names=list(w.apps), delete_if_exists=True)
    finally:
        mc.close()
    write_json(os.path.join(tdir, "specs.json"), {
        "instruction": spec["instruction"],
        "supervisor": {"first_name": me.first_name, "last_name": me.last_name,
                       "email": me.email, "phone_number": me.phone_number},
        "datetime": w.now.isoformat().split("+")[0],
        "db_version": DB_VERSION, "canary_string": CANARY_STRING})
    gt = os.path.join(tdir, "ground_truth")
    os.makedirs(gt, exist_ok=True)
    write_json(os.path.join(gt, "public_data.json"), spec["public_data"])
    write_json(os.path.join(gt, "private_data.json"), spec["private_data"])
    with open(os.path.join(gt, "answer.json"), "w") as f:
        f.write(json.dumps(spec["answer"]))
    code = EVAL_HEADER.format(canary="Canary String: " + CANARY_STRING, template=template.name)
    with open(os.path.join(gt, "evaluation.py"), "w") as f:
        f.write(code + template.evaluation.rstrip() + "\n")
    oracle_code = "\n".join(spec["oracle"])
    write_json(os.path.join(gt, "metadata.json"), {
        "mode": "minimal", "difficulty": template.difficulty, "num_apps": len(template.apps),
        "num_apis": len(set(re.findall(r"apis\.(\w+\.\w+)", oracle_code))),
        "num_api_calls": None,
        "num_solution_code_lines": len([ln for ln in oracle_code.splitlines() if ln.strip()])})
    write_json(os.path.join(gt, "test_data.json"), None)  # labelled after validation
    return spec


def _labels_from_noop(task_id: str, scratch: str) -> list:
    """Evaluates the untouched start state with AppWorld's evaluator: tests that pass are
    ``no_op_pass``, the rest ``no_op_fail`` (AppWorld's test_data labels)."""
    from appworld.common.path_store import path_store
    from appworld.evaluator import evaluate_task
    out_dbs = os.path.join(path_store.experiment_outputs, scratch, "tasks", task_id, "dbs")
    os.makedirs(out_dbs, exist_ok=True)
    for f in glob.glob(os.path.join(path_store.data, "tasks", task_id, "dbs", "*")):
        shutil.copy(f, out_dbs)
    tracker = evaluate_task(task_id, experiment_name=scratch, suppress_errors=True,
                            save_report=False)
    return ([{"requirement": p["requirement"], "label": "no_op_pass"} for p in tracker.passes]
            + [{"requirement": f["requirement"], "label": "no_op_fail"} for f in tracker.failures])


def _run_cells(task_id: str, scratch: str, cells) -> tuple:
    """Runs code cells in AppWorld's own environment; returns (tracker, outputs, api_calls)."""
    from appworld import AppWorld
    from appworld.common.path_store import path_store
    outputs = []
    with AppWorld(task_id=task_id, experiment_name=scratch, timeout_seconds=60) as world:
        for cell in cells:
            outputs.append(world.execute(cell))
        tracker = world.evaluate(suppress_errors=True)
    calls_log = os.path.join(path_store.experiment_outputs, scratch, "tasks", task_id, "logs",
                             "api_calls.jsonl")
    n_calls = None
    if os.path.exists(calls_log):
        with open(calls_log) as f:
            n_calls = sum(1 for ln in f if ln.strip())
    return tracker, outputs, n_calls


def validate_task(data_dir: str, task_id: str, spec: dict) -> dict:
    from appworld.common.path_store import path_store
    gt = os.path.join(data_dir, "tasks", task_id, "ground_truth")
    scratch = f"hjbuild-{task_id}"
    try:
        labels = _labels_from_noop(task_id, scratch + "-noop")
        tracker, outputs, n_calls = _run_cells(task_id, scratch, spec["oracle"])
        if not tracker.success:
            fails = "\n".join(f"- {f['requirement']}\n{f['trace']}" for f in tracker.failures)
            io = "\n".join(f"--- cell {i}:\n{c}\n>>> {o}" for i, (c, o) in
                           enumerate(zip(spec["oracle"], outputs)))
            raise RuntimeError(f"oracle of {task_id} failed {len(tracker.failures)}/"
                               f"{tracker.num_tests} tests:\n{fails}\n{io}")
        req_pass = {p["requirement"] for p in tracker.passes}
        if {x["requirement"] for x in labels} != req_pass:
            raise RuntimeError(f"{task_id}: no-op and oracle runs saw different test sets")
    finally:
        for name in (scratch, scratch + "-noop"):
            shutil.rmtree(os.path.join(path_store.experiment_outputs, name), ignore_errors=True)
    write_json(os.path.join(gt, "test_data.json"), labels)
    meta_path = os.path.join(gt, "metadata.json")
    with open(meta_path) as f:
        meta = json.load(f)
    meta["num_api_calls"] = n_calls
    write_json(meta_path, meta)
    return {"num_tests": tracker.num_tests,
            "no_op_pass": sum(1 for x in labels if x["label"] == "no_op_pass"),
            "num_api_calls": n_calls}


# ------------------------------------------------------------------------------------------------
# Digests (determinism checks) and the whole tree
# ------------------------------------------------------------------------------------------------
def db_digest(path: str) -> str:
    """Content digest of a SQLite file: every table's rows, sorted (file bytes are not stable)."""
    h = hashlib.sha256()
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY name")]
        for t in tables:
            h.update(t.encode())
            for row in sorted(repr(r) for r in con.execute(f'SELECT * FROM "{t}"')):
                h.update(row.encode())
    finally:
        con.close()
    return h.hexdigest()[:16]


def tree_digest(data_dir: str) -> dict:
    base = {os.path.basename(p): db_digest(p)
            for p in sorted(glob.glob(os.path.join(data_dir, "base_dbs", "*.db")))}
    h = hashlib.sha256()
    for p in sorted(glob.glob(os.path.join(data_dir, "tasks", "*", "**", "*"), recursive=True)):
        if os.path.isfile(p):
            h.update(os.path.relpath(p, data_dir).encode())
            with open(p, "rb") as f:
                h.update(f.read())
    return {"base_dbs": base, "tasks": h.hexdigest()[:16]}


def build_tree(out: str, seed: int, n_scenarios: int, template_names: list, n_people: int,
               dataset: str, validate: bool, keep_going: bool = False) -> dict:
    from appworld.apps.api_lib import save_local_dbs, set_local_date_and_time, set_local_dbs
    from appworld.common.constants import DEFAULT_SYSTEM_DATETIME
    from appworld.common.random import set_random_seed
    import scenarios

    t0 = clock()
    log(f"build: appworld imported; building {n_scenarios} scenarios (seed {seed}) in {out}")
    data_dir = os.path.join(out, "data")
    base_dir = os.path.join(data_dir, "base_dbs")
    freezer = set_local_date_and_time(DEFAULT_SYSTEM_DATETIME)
    set_random_seed(seed, python=True, faker_=True, model_factory=True)
    w = World(random.Random(seed))
    n_supervisors = min(n_people, 10)
    home = f":memory:hjbase-{seed}"
    set_local_dbs(to_db_home_path=home, from_db_home_path=home, app_names=w.apps, create=True)
    build_base_world(w, n_people, n_supervisors)
    w.snapshot()
    save_local_dbs(from_db_home_path=home, to_db_home_path=base_dir, format="full",
                   app_names=list(w.apps), delete_if_exists=True)
    write_api_docs(data_dir)
    t_base = clock() - t0
    log(f"build: base world ({n_people} people) in {t_base:.1f} s")

    supervisors = [p for p in w.people()[:n_supervisors]]
    order = list(template_names)
    random.Random(seed).shuffle(order)
    records = []
    for k in range(n_scenarios):
        template = scenarios.TEMPLATES[order[k % len(order)]]
        scenario_id = sha("scenario", seed, k, template.name)[:7]
        sup_rng = random.Random(sha("supervisors", seed, k))
        chosen = sup_rng.sample([p for p in supervisors
                                 if all(w.has_account(a, p) for a in template.apps)], 3)
        seen = set()
        for variant in (1, 2, 3):
            task_id = f"{scenario_id}_{variant}"
            for attempt in range(10):  # a scenario's variants must differ in their instruction
                rng = random.Random(sha("task", seed, k, variant, attempt))
                # template setup draws only from the task rng; factories draw from the global one
                set_random_seed(int(sha("factory", seed, k, variant, attempt)[:8], 16),
                                python=True, faker_=True, model_factory=True)
                spec = build_task(w, data_dir, base_dir, template, task_id, chosen[variant - 1],
                                  rng, variant)
                if spec["instruction"] not in seen:
                    break
                shutil.rmtree(os.path.join(data_dir, "tasks", task_id))
            else:
                raise RuntimeError(f"{template.name}: 10 draws gave no instruction different "
                                   f"from the scenario's other variants")
            seen.add(spec["instruction"])
            records.append({"task_id": task_id, "scenario_id": scenario_id,
                            "template": template.name, "variant": variant,
                            "difficulty": template.difficulty, "apps": list(template.apps),
                            "instruction": spec["instruction"], "oracle": spec["oracle"],
                            "wrong": spec["wrong"], "wrong_kind": template.wrong_kind,
                            "answer": spec["answer"]})
    t_tasks = clock() - t0 - t_base
    log(f"build: {len(records)} tasks written in {t_tasks:.1f} s")
    freezer.stop()
    os.makedirs(os.path.join(data_dir, "datasets"), exist_ok=True)
    with open(os.path.join(data_dir, "datasets", dataset + ".txt"), "w") as f:
        f.write("".join(r["task_id"] + "\n" for r in records))
    failures = []
    if validate:
        for i, r in enumerate(records):
            try:
                r["validation"] = validate_task(data_dir, r["task_id"], {"oracle": r["oracle"]})
            except Exception as e:  # noqa: BLE001
                if not keep_going:
                    raise
                failures.append(f"{r['template']} {r['task_id']}: {e}")
                log(f"build: VALIDATION FAILED {r['template']} {r['task_id']}: {e}")
            if (i + 1) % 10 == 0:
                log(f"build: validated {i + 1}/{len(records)} ({clock() - t0:.0f} s)")
    t_validate = clock() - t0 - t_base - t_tasks
    side = os.path.join(data_dir, "harness_jax")
    os.makedirs(side, exist_ok=True)
    with open(os.path.join(side, "index.jsonl"), "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    summary = {"builder_version": BUILDER_VERSION, "seed": seed, "scenarios": n_scenarios,
               "tasks": len(records), "templates": template_names, "people": n_people,
               "dataset": dataset, "validated": validate, "failures": failures,
               "seconds": {"base": round(t_base, 2), "tasks": round(t_tasks, 2),
                           "validate": round(t_validate, 2), "total": round(clock() - t0, 2)},
               "digest": tree_digest(data_dir)}
    write_json(os.path.join(side, "build.json"), summary)
    log(f"build: done in {clock() - t0:.1f} s")
    return summary


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="directory that will hold data/")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scenarios", type=int, default=0, help="scenarios (3 tasks each)")
    p.add_argument("--templates", default="", help="comma-separated template names (default all)")
    p.add_argument("--people", type=int, default=20, help="people in the base world")
    p.add_argument("--dataset", default="generated", help="name of datasets/<name>.txt")
    p.add_argument("--no-validate", action="store_true", help="skip running oracles/labels")
    p.add_argument("--keep-going", action="store_true",
                   help="record validation failures instead of aborting (template development)")
    p.add_argument("--list-templates", action="store_true")
    args = p.parse_args(argv)
    out = os.path.abspath(args.out)
    if not args.list_templates:
        if os.path.exists(os.path.join(out, "data")):
            raise SystemExit(f"build.py: {out}/data already exists; give an empty --out")
        if args.scenarios < 1:
            raise SystemExit("build.py: --scenarios must be >= 1")
        os.makedirs(os.path.join(out, "data"), exist_ok=True)
    os.environ["APPWORLD_ROOT"] = out  # before appworld is imported (its paths are cached)
    t0 = clock()
    sys.path.insert(0, HERE)
    import scenarios
    if args.list_templates:
        print(json.dumps([t.describe() for t in scenarios.TEMPLATES.values()]))
        return
    names = [n for n in args.templates.split(",") if n] or list(scenarios.TEMPLATES)
    unknown = [n for n in names if n not in scenarios.TEMPLATES]
    if unknown:
        raise SystemExit(f"build.py: unknown template(s) {unknown}; known: "
                         f"{sorted(scenarios.TEMPLATES)}")
    if args.people < 12:
        raise SystemExit("build.py: --people must be >= 12 (templates need distinct people)")
    log(f"build: imports took {clock() - t0:.1f} s")
    summary = build_tree(out, seed=args.seed, n_scenarios=args.scenarios, template_names=names,
                         n_people=args.people, dataset=args.dataset,
                         validate=not args.no_validate, keep_going=args.keep_going)
    print(json.dumps(summary), flush=True)
    sys.stderr.flush()
    # AppWorld's own CLI exits the same way: tearing down its shells and cached databases at
    # interpreter exit takes tens of seconds and does nothing useful.
    os._exit(1 if summary["failures"] else 0)


if __name__ == "__main__":
    main()
