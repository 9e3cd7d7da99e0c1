"""Scenario templates of the AppWorld data generator (runs inside the AppWorld venv).

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

import build as B

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


# ================================================================================================
# Venmo
# ================================================================================================
@template("venmo_send_money", ["venmo"], 1, "wrong_recipient", '''
    with test(
        """
        assert model changes match venmo.Transaction, venmo.User, venmo.Notification
        """
    ):
        test.case(models.changed_model_names(), "==", {"venmo.Transaction", "venmo.User", "venmo.Notification"})
    with test(
        """
        obtain added venmo.Transaction records, assert exactly one was made, from main_user's
        venmo account (private_data.sender_id) to private_data.receiver_id,
        of public_data.amount with public_data.note as its description.
        """
    ):
        added, _, _ = models.changed_records("venmo.Transaction")
        test.case(len(added), "==", 1)
        test.case(added[0].sender_id, "==", private_data.sender_id)
        test.case(added[0].receiver_id, "==", private_data.receiver_id)
        test.case(added[0].amount, "==", public_data.amount, tolerance=0.01)
        test.case(added[0].description, "==", public_data.note, normalize_text=True)
''')
def venmo_send_money(c):
    (friend,) = c.others("venmo", 1)
    amount = round(c.rng.uniform(5, 120), 2)
    note = c.rng.choice(B.VENMO_NOTES)
    name = c.full_name(friend)
    find = (login("venmo") + "\n"
            f"matches = [u for u in apis.venmo.search_users(access_token=venmo_token, query={name!r}) "
            f"if u['first_name'] + ' ' + u['last_name'] == {name!r}]\n"
            "print(matches)")
    send = ("apis.venmo.create_transaction(receiver_email={email}, amount=" + money(amount) +
            f", description={note!r}, access_token=venmo_token)")
    wrong_pick = ("others = [u for u in apis.venmo.search_users(access_token=venmo_token, "
                  "page_limit=20) if u['email'] not in (profile['email'], matches[0]['email'])]")
    return dict(
        instruction=f"Send ${money(amount)} to {name} on Venmo with the note \"{note}\".",
        public_data={"amount": amount, "note": note},
        private_data={"sender_id": c.user("venmo").id, "receiver_id": c.user("venmo", friend).id},
        answer=None,
        oracle=[PRELUDE, find, send.format(email="matches[0]['email']"), complete()],
        wrong=[PRELUDE, find, wrong_pick + "\n" + send.format(email="others[0]['email']"),
               complete()])


def find_user_cell(name: str, var: str = "person") -> str:
    return (f"{var} = [u for u in apis.venmo.search_users(access_token=venmo_token, query={name!r}) "
            f"if u['first_name'] + ' ' + u['last_name'] == {name!r}][0]\nprint({var})")


@template("venmo_request_money", ["venmo"], 1, "wrong_amount", '''
    with test(
        """
        assert model changes match venmo.PaymentRequest, venmo.Notification
        """
    ):
        test.case(models.changed_model_names(), "==", {"venmo.PaymentRequest", "venmo.Notification"})
    with test(
        """
        obtain added venmo.PaymentRequest records, assert exactly one was made by main_user
        (private_data.requester_id) to private_data.payer_id for public_data.amount,
        described as public_data.note.
        """
    ):
        added, _, _ = models.changed_records("venmo.PaymentRequest")
        test.case(len(added), "==", 1)
        test.case(added[0].sender_id, "==", private_data.requester_id)
        test.case(added[0].receiver_id, "==", private_data.payer_id)
        test.case(added[0].amount, "==", public_data.amount, tolerance=0.01)
        test.case(added[0].description, "==", public_data.note, normalize_text=True)
''')
def venmo_request_money(c):
    (payer,) = c.others("venmo", 1)
    amount = round(c.rng.uniform(5, 90), 2)
    if amount == int(amount):  # the wrong solution drops the cents
        amount += 0.25
    note = c.rng.choice(B.VENMO_NOTES)
    name = c.full_name(payer)
    req = ("apis.venmo.create_payment_request(user_email=person['email'], amount={amt}, "
           f"description={note!r}, access_token=venmo_token)")
    return dict(
        instruction=f"Request ${money(amount)} from {name} on Venmo for \"{note}\".",
        public_data={"amount": amount, "note": note},
        private_data={"requester_id": c.user("venmo").id, "payer_id": c.user("venmo", payer).id},
        answer=None,
        oracle=[PRELUDE, login("venmo") + "\n" + find_user_cell(name),
                req.format(amt=money(amount)), complete()],
        wrong=[PRELUDE, login("venmo") + "\n" + find_user_cell(name),
               req.format(amt=str(int(amount))), complete()])


def _venmo_tx(c, sender, receiver, amount, days_ago, note=None):
    v = c.M["venmo"]
    when = c.days_ago(days_ago)
    tx = v.Transaction.factory().build(
        sender_id=sender.id, receiver_id=receiver.id, amount=round(amount, 2),
        description=note or c.rng.choice(B.VENMO_NOTES), created_at=when, updated_at=when,
        private=False, like_count=0, receipt_download_count=0, payment_card_digits=None)
    v.Transaction.save_all([tx])
    return tx


def _venmo_request(c, sender, receiver, amount, days_ago, state="pending"):
    v = c.M["venmo"]
    when = c.days_ago(days_ago)
    r = v.PaymentRequest.factory().build(
        sender_id=sender.id, receiver_id=receiver.id, amount=round(amount, 2),
        description=c.rng.choice(B.VENMO_NOTES), created_at=when, updated_at=when,
        approved_at=when.add(hours=5) if state == "approved" else None,
        denied_at=when.add(hours=5) if state == "denied" else None, private=False)
    v.PaymentRequest.save_all([r])
    return r


NO_CHANGES = '''
    with test(
        """
        assert no model changes were made.
        """
    ):
        test.case(models.changed_model_names(), "==", set())
'''


@template("venmo_total_received", ["venmo"], 2, "first_page_only", NO_CHANGES)
def venmo_total_received(c):
    (friend,) = c.others("venmo", 1)
    me, fv = c.user("venmo"), c.user("venmo", friend)
    for _ in range(c.rng.randint(6, 8)):
        _venmo_tx(c, fv, me, c.rng.uniform(5, 80), c.rng.uniform(1, 150))
    v = c.M["venmo"]
    total = round(sum(t.amount for t in v.Transaction.find_all(sender_id=fv.id, receiver_id=me.id)), 2)
    name = c.full_name(friend)
    total_cell = ("received = all_pages(apis.venmo.show_transactions, access_token=venmo_token, "
                  "user_email=person['email'], direction='received')\n"
                  "total = round(sum(t['amount'] for t in received if t['sender']['email'] == "
                  "person['email']), 2)\nprint(len(received), total)")
    wrong_cell = ("received = apis.venmo.show_transactions(access_token=venmo_token, "
                  "user_email=person['email'], direction='received')\n"
                  "total = round(sum(t['amount'] for t in received), 2)\nprint(total)")
    return dict(
        instruction=f"How much money have I received in total from {name} on Venmo? "
                    "Answer with just the number.",
        public_data={"person": name}, private_data={"sender_id": fv.id}, answer=total,
        oracle=[PRELUDE, PAGES + "\n" + login("venmo") + "\n" + find_user_cell(name), total_cell,
                complete("total")],
        wrong=[PRELUDE, login("venmo") + "\n" + find_user_cell(name), wrong_cell,
               complete("total")])


@template("venmo_approve_requests", ["venmo"], 2, "missing_step", '''
    with test(
        """
        assert model changes match venmo.PaymentRequest, venmo.Transaction, venmo.User,
        venmo.Notification
        """
    ):
        test.case(
            models.changed_model_names(),
            "==",
            {"venmo.PaymentRequest", "venmo.Transaction", "venmo.User", "venmo.Notification"},
        )
    with test(
        """
        obtain updated venmo.PaymentRequest records, assert their ids match
        private_data.request_ids (ignore order) and all of them are approved.
        """
    ):
        _, updated, _ = models.changed_records("venmo.PaymentRequest")
        test.case(list_of(updated, "id"), "==", private_data.request_ids, ignore_order=True)
        test.case(all(r.approved_at is not None and r.denied_at is None for r in updated), "==", True)
    with test(
        """
        assert the pending request of someone else (private_data.other_request_id) is untouched.
        """
    ):
        test.case(private_data.other_request_id, "not in", list_of(updated, "id"))
''')
def venmo_approve_requests(c):
    friend, other = c.others("venmo", 2)
    me, fv, ov = c.user("venmo"), c.user("venmo", friend), c.user("venmo", other)
    ids = [_venmo_request(c, fv, me, c.rng.uniform(10, 60), c.rng.uniform(1, 9)).id
           for _ in range(c.rng.randint(2, 3))]
    _venmo_request(c, fv, me, c.rng.uniform(10, 60), c.rng.uniform(10, 20), state="denied")
    other_id = _venmo_request(c, ov, me, c.rng.uniform(10, 60), c.rng.uniform(1, 9)).id
    name = c.full_name(friend)
    pending = ("pending = [r for r in all_pages(apis.venmo.show_received_payment_requests, "
               "access_token=venmo_token, status='pending') if r['sender']['email'] == "
               "person['email']]\nprint([r['payment_request_id'] for r in pending])")
    approve = ("for r in pending{cut}:\n    apis.venmo.approve_payment_request("
               "payment_request_id=r['payment_request_id'], access_token=venmo_token)")
    return dict(
        instruction=f"Approve all the pending payment requests I have received from {name} on "
                    "Venmo.",
        public_data={"person": name}, private_data={"request_ids": ids, "other_request_id": other_id},
        answer=None,
        oracle=[PRELUDE, PAGES + "\n" + login("venmo") + "\n" + find_user_cell(name), pending,
                approve.format(cut=""), complete()],
        wrong=[PRELUDE, PAGES + "\n" + login("venmo") + "\n" + find_user_cell(name), pending,
               approve.format(cut="[:1]"), complete()])


@template("venmo_befriend_recent", ["venmo"], 2, "wrong_filter", '''
    with test(
        """
        assert model changes match venmo.Friendship
        """
    ):
        test.case(models.changed_model_names(), "==", {"venmo.Friendship"})
    with test(
        """
        obtain added venmo.Friendship records, assert all belong to main_user
        (private_data.user_id) and their friend_ids match private_data.to_befriend_ids
        (ignore order).
        """
    ):
        added, _, removed = models.changed_records("venmo.Friendship")
        test.case(set(list_of(added, "user_id")), "==", {private_data.user_id})
        test.case(list_of(added, "friend_id"), "==", private_data.to_befriend_ids, ignore_order=True)
    with test(
        """
        assert no friendships were removed.
        """
    ):
        test.case(len(removed), "==", 0)
''')
def venmo_befriend_recent(c):
    v = c.M["venmo"]
    days = c.rng.choice([7, 10, 14])
    people = c.others("venmo", 5)
    me = c.user("venmo")
    new, already, old = people[:3], people[3], people[4]
    for p in new + [old]:
        for f in v.Friendship.find_all(user_id=me.id, friend_id=c.user("venmo", p).id):
            f.delete()
    if not v.Friendship.find_one(user_id=me.id, friend_id=c.user("venmo", already).id):
        v.Friendship.save_all([v.Friendship.factory().build(
            user_id=me.id, friend_id=c.user("venmo", already).id, created_at=c.days_ago(90))])
    for p in new + [already]:
        _venmo_tx(c, me, c.user("venmo", p), c.rng.uniform(5, 60), c.rng.uniform(0.5, days - 2))
    _venmo_tx(c, me, c.user("venmo", old), c.rng.uniform(5, 60), days + 20)
    since = c.now.subtract(days=days).to_date_string()
    cell = ("sent = all_pages(apis.venmo.show_transactions, access_token=venmo_token, "
            "direction='sent'{since})\n"
            "receivers = {{t['receiver']['email'] for t in sent}}\n"
            "friends = {{f['email'] for f in all_pages(apis.venmo.search_friends, "
            "access_token=venmo_token)}}\n"
            "for email in sorted(receivers - friends - {{profile['email']}}):\n"
            "    apis.venmo.add_friend(user_email=email, access_token=venmo_token)")
    return dict(
        instruction=f"Add everyone I sent money to on Venmo in the last {days} days to my Venmo "
                    "friends, unless they are already my friends.",
        public_data={"days": days},
        private_data={"user_id": me.id, "to_befriend_ids": [c.user("venmo", p).id for p in new]},
        answer=None,
        oracle=[PRELUDE, PAGES + "\n" + login("venmo"),
                cell.format(since=f", min_created_at={since!r}"), complete()],
        wrong=[PRELUDE, PAGES + "\n" + login("venmo"), cell.format(since=""), complete()])


@template("venmo_deny_large_requests", ["venmo"], 2, "wrong_filter", '''
    with test(
        """
        assert model changes match venmo.PaymentRequest, venmo.Notification
        """
    ):
        test.case(models.changed_model_names(), "==", {"venmo.PaymentRequest", "venmo.Notification"})
    with test(
        """
        obtain updated venmo.PaymentRequest records, assert their ids match
        private_data.deny_ids (ignore order) and all of them are denied.
        """
    ):
        _, updated, _ = models.changed_records("venmo.PaymentRequest")
        test.case(list_of(updated, "id"), "==", private_data.deny_ids, ignore_order=True)
        test.case(all(r.denied_at is not None and r.approved_at is None for r in updated), "==", True)
''')
def venmo_deny_large_requests(c):
    v = c.M["venmo"]
    limit = c.rng.choice([40, 50, 60])
    me = c.user("venmo")
    senders = [c.user("venmo", p) for p in c.others("venmo", 4)]
    for s in senders[:2]:
        _venmo_request(c, s, me, c.rng.uniform(limit + 5, limit + 80), c.rng.uniform(1, 15))
    for s in senders[2:]:
        _venmo_request(c, s, me, c.rng.uniform(3, limit - 5), c.rng.uniform(1, 15))
    deny = [r.id for r in v.PaymentRequest.find_all(receiver_id=me.id)
            if r.approved_at is None and r.denied_at is None and r.amount > limit]
    cell = ("pending = all_pages(apis.venmo.show_received_payment_requests, "
            "access_token=venmo_token, status='pending')\n"
            "for r in pending:\n    if {cond}:\n        apis.venmo.deny_payment_request("
            "payment_request_id=r['payment_request_id'], access_token=venmo_token)")
    return dict(
        instruction=f"Deny every pending Venmo payment request I have received that asks for "
                    f"more than ${limit}.",
        public_data={"limit": limit}, private_data={"deny_ids": deny}, answer=None,
        oracle=[PRELUDE, PAGES + "\n" + login("venmo"),
                cell.format(cond=f"r['amount'] > {limit}"), complete()],
        wrong=[PRELUDE, PAGES + "\n" + login("venmo"), cell.format(cond="True"), complete()])


# ================================================================================================
# SimpleNote
# ================================================================================================
NEW_NOTE_TITLES = ["Summer Reading List", "Conference Takeaways", "Apartment Hunting",
                   "Marathon Training", "Camping Checklist", "Holiday Menu", "Language Practice",
                   "Volunteer Schedule"]
NEW_NOTE_LINES = ["Buy fresh basil", "Call mom on Sunday", "Check the tire pressure",
                  "Ask about the refund", "Bring the umbrella", "Renew the library card"]


def _note(c, title, content, tags=(), pinned=False, days_ago=None):
    n = c.M["simple_note"]
    when = c.days_ago(days_ago if days_ago is not None else c.rng.uniform(1, 60))
    note = n.Note.factory().build(user_id=c.user("simple_note").id, title=title, content=content,
                                  tags=sorted(tags), pinned=pinned, created_at=when,
                                  updated_at=when, data=None)
    n.Note.save_all([note])
    return note


def _my_titles(c) -> set:
    return {x.title for x in c.M["simple_note"].Note.find_all(user_id=c.user("simple_note").id)}


FIND_NOTE = ("note = [n for n in all_pages(apis.simple_note.search_notes, "
             "access_token=simple_note_token, query={title!r}) if n['title'] == {title!r}][0]\n"
             "note = apis.simple_note.show_note(note_id=note['note_id'], "
             "access_token=simple_note_token)\nprint(note)")


@template("note_create", ["simple_note"], 1, "missing_step", '''
    with test(
        """
        assert model changes match simple_note.Note
        """
    ):
        test.case(models.changed_model_names(), "==", {"simple_note.Note"})
    with test(
        """
        obtain added simple_note.Note records, assert exactly one was added with
        public_data.title, public_data.content and tags [public_data.tag].
        """
    ):
        added, updated, removed = models.changed_records("simple_note.Note")
        test.case(len(added), "==", 1)
        test.case(added[0].title, "==", public_data.title, normalize_text=True)
        test.case(added[0].content, "==", public_data.content, normalize_text=True)
        test.case(added[0].tags, "==", [public_data.tag])
    with test(
        """
        assert no other notes were updated or removed.
        """
    ):
        test.case(len(updated) + len(removed), "==", 0)
''')
def note_create(c):
    title = c.rng.choice([t for t in NEW_NOTE_TITLES if t not in _my_titles(c)])
    content = c.rng.choice(NEW_NOTE_LINES) + ". " + c.rng.choice(NEW_NOTE_LINES) + "."
    tag = c.rng.choice(B.NOTE_TAGS)
    cell = ("apis.simple_note.create_note(title={title!r}, content={content!r}{tags}, "
            "access_token=simple_note_token)")
    return dict(
        instruction=f"Create a note in SimpleNote titled \"{title}\" with the content "
                    f"\"{content}\" and tag it \"{tag}\".",
        public_data={"title": title, "content": content, "tag": tag}, private_data={},
        answer=None,
        oracle=[PRELUDE, login("simple_note"),
                cell.format(title=title, content=content, tags=f", tags=[{tag!r}]"), complete()],
        wrong=[PRELUDE, login("simple_note"),
               cell.format(title=title, content=content, tags=""), complete()])


@template("note_count_tag", ["simple_note"], 1, "first_page_only", NO_CHANGES)
def note_count_tag(c):
    tag = c.rng.choice(B.NOTE_TAGS)
    pool = [t for t in B.NOTE_TOPICS if t not in _my_titles(c)]
    for title in c.rng.sample(pool, k=c.rng.randint(6, 8)):
        _note(c, title, "Some notes about " + title.lower() + ".", tags=[tag])
    n = c.M["simple_note"]
    count = sum(1 for x in n.Note.find_all(user_id=c.user("simple_note").id) if tag in x.tags)
    return dict(
        instruction=f"How many of my SimpleNote notes are tagged \"{tag}\"?",
        public_data={"tag": tag}, private_data={}, answer=count,
        oracle=[PRELUDE, PAGES + "\n" + login("simple_note"),
                f"notes = all_pages(apis.simple_note.search_notes, access_token=simple_note_token,"
                f" tags=[{tag!r}])\nprint(len(notes))", complete("len(notes)")],
        wrong=[PRELUDE, login("simple_note"),
               f"notes = apis.simple_note.search_notes(access_token=simple_note_token, "
               f"tags=[{tag!r}])\nprint(len(notes))", complete("len(notes)")])


@template("note_append", ["simple_note"], 2, "wrong_position", '''
    with test(
        """
        assert model changes match simple_note.Note
        """
    ):
        test.case(models.changed_model_names(), "==", {"simple_note.Note"})
    with test(
        """
        obtain updated simple_note.Note records, assert only private_data.note_id was updated
        and its content is the original content followed by public_data.line.
        """
    ):
        added, updated, removed = models.changed_records("simple_note.Note")
        test.case(list_of(updated, "id"), "==", [private_data.note_id])
        test.case(updated[0].content.strip().startswith(private_data.original_content.strip()), "==", True)
        test.case(updated[0].content.strip().endswith(public_data.line.strip()), "==", True)
    with test(
        """
        assert no notes were added or removed.
        """
    ):
        test.case(len(added) + len(removed), "==", 0)
''')
def note_append(c):
    n = c.M["simple_note"]
    note = c.rng.choice(n.Note.find_all(user_id=c.user("simple_note").id))
    line = c.rng.choice(NEW_NOTE_LINES)
    cell = ("apis.simple_note.add_content_to_note(note_id=note['note_id'], "
            "append_or_prepend={where!r}, added_content={line!r}, access_token=simple_note_token)")
    find = PAGES + "\n" + login("simple_note") + "\n" + FIND_NOTE.format(title=note.title)
    return dict(
        instruction=f"Add the line \"{line}\" at the end of my SimpleNote note titled "
                    f"\"{note.title}\".",
        public_data={"title": note.title, "line": line},
        private_data={"note_id": note.id, "original_content": note.content}, answer=None,
        oracle=[PRELUDE, find, cell.format(where="append", line=line), complete()],
        wrong=[PRELUDE, find, cell.format(where="prepend", line=line), complete()])


@template("note_pin_tag", ["simple_note"], 2, "first_page_only", '''
    with test(
        """
        assert model changes match simple_note.Note
        """
    ):
        test.case(models.changed_model_names(), "==", {"simple_note.Note"})
    with test(
        """
        obtain updated simple_note.Note records, assert their ids match private_data.pin_ids
        (ignore order) and all of them are pinned.
        """
    ):
        added, updated, removed = models.changed_records("simple_note.Note")
        test.case(list_of(updated, "id"), "==", private_data.pin_ids, ignore_order=True)
        test.case(all(x.pinned for x in updated), "==", True)
''')
def note_pin_tag(c):
    n = c.M["simple_note"]
    tag = c.rng.choice(B.NOTE_TAGS)
    pool = [t for t in B.NOTE_TOPICS if t not in _my_titles(c)]
    for title in c.rng.sample(pool, k=6):
        _note(c, title, "Notes on " + title.lower() + ".", tags=[tag], pinned=False)
    ids = [x.id for x in n.Note.find_all(user_id=c.user("simple_note").id)
           if tag in x.tags and not x.pinned]
    cell = ("notes = {fetch}\nfor x in notes:\n    if not x['pinned']:\n"
            "        apis.simple_note.update_note(note_id=x['note_id'], pinned=True, "
            "access_token=simple_note_token)")
    return dict(
        instruction=f"Pin all of my SimpleNote notes tagged \"{tag}\" that are not pinned yet.",
        public_data={"tag": tag}, private_data={"pin_ids": ids}, answer=None,
        oracle=[PRELUDE, PAGES + "\n" + login("simple_note"), cell.format(
            fetch=f"all_pages(apis.simple_note.search_notes, access_token=simple_note_token, "
                  f"tags=[{tag!r}])"), complete()],
        wrong=[PRELUDE, login("simple_note"), cell.format(
            fetch=f"apis.simple_note.search_notes(access_token=simple_note_token, tags=[{tag!r}])"),
               complete()])


@template("note_delete_word", ["simple_note"], 2, "wrong_filter", '''
    with test(
        """
        assert model changes match simple_note.Note
        """
    ):
        test.case(models.changed_model_names(), "==", {"simple_note.Note"})
    with test(
        """
        obtain removed simple_note.Note records, assert their ids match private_data.delete_ids
        (ignore order), and that no note was added or updated.
        """
    ):
        added, updated, removed = models.changed_records("simple_note.Note")
        test.case(list_of(removed, "id"), "==", private_data.delete_ids, ignore_order=True)
        test.case(len(added) + len(updated), "==", 0)
''')
def note_delete_word(c):
    n = c.M["simple_note"]
    word = c.rng.choice(["Draft", "Old", "Temp"])
    topics = c.rng.sample([t for t in B.NOTE_TOPICS if f"{word} {t}" not in _my_titles(c)], k=4)
    for t in topics[:3]:
        _note(c, f"{word} {t}", "To be cleaned up later.")
    _note(c, topics[3] + " Final", f"Replaces the {word.lower()} version; keep this one.")
    ids = [x.id for x in n.Note.find_all(user_id=c.user("simple_note").id)
           if word.lower() in x.title.lower().split()]
    cell = ("notes = all_pages(apis.simple_note.search_notes, access_token=simple_note_token{q})\n"
            "for x in notes:\n    if {cond}:\n        apis.simple_note.delete_note("
            "note_id=x['note_id'], access_token=simple_note_token)")
    return dict(
        instruction=f"Delete all of my SimpleNote notes whose title contains the word \"{word}\".",
        public_data={"word": word}, private_data={"delete_ids": ids}, answer=None,
        oracle=[PRELUDE, PAGES + "\n" + login("simple_note"),
                cell.format(q="", cond=f"{word.lower()!r} in x['title'].lower().split()"),
                complete()],
        wrong=[PRELUDE, PAGES + "\n" + login("simple_note"),
               cell.format(q=f", query={word!r}", cond="True"), complete()])


@template("note_lookup", ["simple_note"], 1, "wrong_answer", NO_CHANGES)
def note_lookup(c):
    title = c.rng.choice([t for t in ["Home Info", "House Codes", "Apartment Details"]
                          if t not in _my_titles(c)])
    items = ["Wi-Fi password", "Garage code", "Alarm PIN", "Mailbox number"]
    values = {it: "".join(c.rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(6))
              for it in items}
    asked = c.rng.choice(items[1:])
    _note(c, title, "\n".join(f"{it}: {values[it]}" for it in items))
    find = PAGES + "\n" + login("simple_note") + "\n" + FIND_NOTE.format(title=title)
    return dict(
        instruction=f"What is the {asked.lower()} written in my SimpleNote note \"{title}\"?",
        public_data={"title": title, "item": asked}, private_data={}, answer=values[asked],
        oracle=[PRELUDE, find,
                "value = [ln.split(':', 1)[1].strip() for ln in note['content'].splitlines() "
                f"if ln.lower().startswith({asked.lower()!r})][0]\nprint(value)",
                complete("value")],
        wrong=[PRELUDE, find,
               "value = note['content'].splitlines()[0].split(':', 1)[1].strip()\nprint(value)",
               complete("value")])


# ================================================================================================
# Todoist
# ================================================================================================
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


# ================================================================================================
# Spotify
# ================================================================================================
NEW_PLAYLIST_NAMES = ["Road Trip", "Focus Time", "Sunday Morning", "Gym Power", "Late Night",
                      "Rainy Day"]


def _my_playlists(c) -> list:
    return c.M["spotify"].Playlist.find_all(user_id=c.user("spotify").id)


def _playlist_song_ids(c, playlist) -> list:
    return [x.song_id for x in c.M["spotify"].PlaylistSong.find_all(playlist_id=playlist.id)]


FIND_PLAYLIST = ("playlist = [p for p in all_pages(apis.spotify.show_playlist_library, "
                 "access_token=spotify_token) if p['title'] == {title!r}][0]\n"
                 "print(playlist['playlist_id'], playlist['song_ids'])")


def _spotify_login(title: str) -> str:
    return PAGES + "\n" + login("spotify") + "\n" + FIND_PLAYLIST.format(title=title)


@template("spotify_like_song", ["spotify"], 1, "wrong_item", '''
    with test(
        """
        assert model changes match spotify.SongLike, spotify.Song (its like count)
        """
    ):
        test.case(models.changed_model_names(), "==", {"spotify.SongLike", "spotify.Song"})
    with test(
        """
        obtain added spotify.SongLike records, assert exactly one was added by main_user
        (private_data.user_id) for private_data.song_id.
        """
    ):
        added, _, _ = models.changed_records("spotify.SongLike")
        test.case(len(added), "==", 1)
        test.case(added[0].user_id, "==", private_data.user_id)
        test.case(added[0].song_id, "==", private_data.song_id)
''')
def spotify_like_song(c):
    s = c.M["spotify"]
    me = c.user("spotify")
    liked = {x.song_id for x in s.SongLike.find_all(user_id=me.id)}
    songs = [x for x in s.Song.all() if x.id not in liked]
    first_words = {}
    for x in s.Song.all():
        first_words.setdefault(x.title.split()[0], []).append(x)
    songs = [x for x in songs if len(first_words[x.title.split()[0]]) > 1
             and any(o.id not in liked and o.id != x.id for o in first_words[x.title.split()[0]])]
    song = c.rng.choice(songs)
    artist = s.Artist.by_id(song.artist_ids[0])
    first = song.title.split()[0]
    return dict(
        instruction=f"Like the song \"{song.title}\" by {artist.name} on Spotify.",
        public_data={"title": song.title, "artist": artist.name},
        private_data={"user_id": me.id, "song_id": song.id}, answer=None,
        oracle=[PRELUDE, login("spotify") + "\n"
                f"song = [x for x in apis.spotify.search_songs(query={song.title!r}, page_limit=20)"
                f" if x['title'] == {song.title!r}][0]\nprint(song)",
                "apis.spotify.like_song(song_id=song['song_id'], access_token=spotify_token)",
                complete()],
        wrong=[PRELUDE, PAGES + "\n" + login("spotify") + "\n"
               "liked = {x['song_id'] for x in all_pages(apis.spotify.show_liked_songs, "
               "access_token=spotify_token)}\n"
               f"song = [x for x in all_pages(apis.spotify.search_songs, query={first!r}) "
               f"if x['title'] != {song.title!r} and x['title'].startswith({first!r}) and "
               "x['song_id'] not in liked][0]",
               "apis.spotify.like_song(song_id=song['song_id'], access_token=spotify_token)",
               complete()])


@template("spotify_count_playlist", ["spotify"], 1, "wrong_answer", NO_CHANGES)
def spotify_count_playlist(c):
    playlist = c.rng.choice(_my_playlists(c))
    n = len(_playlist_song_ids(c, playlist))
    return dict(
        instruction=f"How many songs are there in my Spotify playlist \"{playlist.title}\"?",
        public_data={"playlist": playlist.title}, private_data={"playlist_id": playlist.id},
        answer=n,
        oracle=[PRELUDE, _spotify_login(playlist.title), complete("len(playlist['song_ids'])")],
        wrong=[PRELUDE, PAGES + "\n" + login("spotify"),
               "playlists = all_pages(apis.spotify.show_playlist_library, "
               "access_token=spotify_token)", complete("len(playlists)")])


def _songs_with_unique_extreme(c, song_ids) -> bool:
    durs = [c.M["spotify"].Song.by_id(i).duration for i in song_ids]
    return durs.count(max(durs)) == 1 and durs.count(min(durs)) == 1


@template("spotify_longest_song", ["spotify"], 2, "wrong_answer", NO_CHANGES)
def spotify_longest_song(c):
    s = c.M["spotify"]
    options = [p for p in _my_playlists(c) if _songs_with_unique_extreme(c, _playlist_song_ids(c, p))]
    if options:
        playlist = c.rng.choice(options)
    else:
        taken = {p.title for p in _my_playlists(c)}
        ids = sorted({x.id for x in s.Song.all()}, key=lambda i: s.Song.by_id(i).duration)
        pick = c.rng.sample(ids[1:-1], k=4) + [ids[0], ids[-1]]
        playlist = B.add_playlist(c.w, c.user("spotify"),
                                  c.rng.choice([n for n in NEW_PLAYLIST_NAMES if n not in taken]),
                                  pick)
    songs = [s.Song.by_id(i) for i in _playlist_song_ids(c, playlist)]
    longest = max(songs, key=lambda x: x.duration)
    cell = ("durations = {{}}\nfor sid in playlist['song_ids']:\n"
            "    song = apis.spotify.show_song(song_id=sid)\n"
            "    durations[song['title']] = song['duration']\n"
            "title = {fn}(durations, key=durations.get)\nprint(durations, title)")
    return dict(
        instruction=f"What is the title of the longest song in my Spotify playlist "
                    f"\"{playlist.title}\"?",
        public_data={"playlist": playlist.title}, private_data={"song_id": longest.id},
        answer=longest.title,
        oracle=[PRELUDE, _spotify_login(playlist.title), cell.format(fn="max"),
                complete("title")],
        wrong=[PRELUDE, _spotify_login(playlist.title), cell.format(fn="min"),
               complete("title")])


@template("spotify_artist_playlist", ["spotify"], 2, "missing_step", '''
    with test(
        """
        assert model changes match spotify.Playlist, spotify.PlaylistSong
        """
    ):
        test.case(models.changed_model_names(), "==", {"spotify.Playlist", "spotify.PlaylistSong"})
    with test(
        """
        obtain added spotify.Playlist records, assert exactly one was added by main_user
        titled public_data.title and it is private.
        """
    ):
        added_playlists, _, _ = models.changed_records("spotify.Playlist")
        test.case(len(added_playlists), "==", 1)
        test.case(added_playlists[0].title, "==", public_data.title, normalize_text=True)
        test.case(added_playlists[0].is_public, "==", False)
    with test(
        """
        obtain added spotify.PlaylistSong records, assert they are all in the new playlist and
        their song_ids match private_data.song_ids (ignore order).
        """
    ):
        added_songs, _, _ = models.changed_records("spotify.PlaylistSong")
        test.case(set(list_of(added_songs, "playlist_id")), "==", {added_playlists[0].id})
        test.case(list_of(added_songs, "song_id"), "==", private_data.song_ids, ignore_order=True)
''')
def spotify_artist_playlist(c):
    s = c.M["spotify"]
    counts = {}
    for x in s.Song.all():
        for a in x.artist_ids:
            counts.setdefault(a, []).append(x.id)
    artist = s.Artist.by_id(c.rng.choice(sorted(a for a, v in counts.items() if len(v) >= 3)))
    taken = {p.title for p in _my_playlists(c)}
    title = c.rng.choice([n for n in NEW_PLAYLIST_NAMES if n not in taken]) + " " + \
        artist.name.split()[-1]
    find = (PAGES + "\n" + login("spotify") + "\n"
            f"artist = [a for a in all_pages(apis.spotify.search_artists, query={artist.name!r}) "
            f"if a['name'] == {artist.name!r}][0]\n"
            "songs = all_pages(apis.spotify.search_songs, artist_id=artist['artist_id'])\n"
            "print(len(songs))")
    make = ("playlist_id = apis.spotify.create_playlist(title={title!r}, is_public={pub}, "
            "access_token=spotify_token)['playlist_id']\nfor song in songs:\n"
            "    apis.spotify.add_song_to_playlist(playlist_id=playlist_id, "
            "song_id=song['song_id'], access_token=spotify_token)")
    return dict(
        instruction=f"Create a private Spotify playlist titled \"{title}\" with all the songs "
                    f"by {artist.name}.",
        public_data={"title": title, "artist": artist.name},
        private_data={"song_ids": counts[artist.id]}, answer=None,
        oracle=[PRELUDE, find, make.format(title=title, pub=False), complete()],
        wrong=[PRELUDE, find, make.format(title=title, pub=True), complete()])


@template("spotify_follow_playlist_artists", ["spotify"], 2, "missing_step", '''
    with test(
        """
        assert model changes match spotify.UserArtistFollowing
        """
    ):
        test.case(models.changed_model_names(), "==", {"spotify.UserArtistFollowing"})
    with test(
        """
        obtain added spotify.UserArtistFollowing records, assert all are by main_user
        (private_data.user_id) and their artist_ids match private_data.artist_ids (ignore order).
        """
    ):
        added, _, removed = models.changed_records("spotify.UserArtistFollowing")
        test.case(set(list_of(added, "user_id")), "==", {private_data.user_id})
        test.case(list_of(added, "artist_id"), "==", private_data.artist_ids, ignore_order=True)
        test.case(len(removed), "==", 0)
''')
def spotify_follow_playlist_artists(c):
    s = c.M["spotify"]
    me = c.user("spotify")
    options = []
    for p in _my_playlists(c):
        arts = sorted({a for i in _playlist_song_ids(c, p) for a in s.Song.by_id(i).artist_ids})
        if len(arts) >= 3:
            options.append((p, arts))
    playlist, arts = c.rng.choice(options)
    following = s.UserArtistFollowing.find_all(user_id=me.id)
    keep = c.rng.choice(arts)
    for f in following:  # follow exactly one of the playlist's artists at the start
        if f.artist_id in arts and f.artist_id != keep:
            f.delete()
    if not s.UserArtistFollowing.find_one(user_id=me.id, artist_id=keep):
        s.UserArtistFollowing.save_all([s.UserArtistFollowing.factory().build(
            user_id=me.id, artist_id=keep, created_at=c.days_ago(30))])
    to_follow = [a for a in arts if a != keep]
    cell = ("followed = {{a['artist_id'] for a in all_pages(apis.spotify.show_following_artists, "
            "access_token=spotify_token)}}\nartists = []\n"
            "for sid in playlist['song_ids']{cut}:\n"
            "    for a in apis.spotify.show_song(song_id=sid)['artists']:\n"
            "        if a['id'] not in followed and a['id'] not in artists:\n"
            "            artists.append(a['id'])\nfor aid in artists:\n"
            "    apis.spotify.follow_artist(artist_id=aid, access_token=spotify_token)")
    return dict(
        instruction=f"Follow every artist who has a song in my Spotify playlist "
                    f"\"{playlist.title}\" and whom I do not follow yet.",
        public_data={"playlist": playlist.title},
        private_data={"user_id": me.id, "artist_ids": to_follow}, answer=None,
        oracle=[PRELUDE, _spotify_login(playlist.title), cell.format(cut=""), complete()],
        wrong=[PRELUDE, _spotify_login(playlist.title), cell.format(cut="[:2]"), complete()])


@template("spotify_remove_low_rated", ["spotify"], 3, "wrong_filter", '''
    with test(
        """
        assert model changes match spotify.PlaylistSong
        """
    ):
        test.case(models.changed_model_names(), "==", {"spotify.PlaylistSong"})
    with test(
        """
        obtain removed spotify.PlaylistSong records, assert all are from
        private_data.playlist_id and their song_ids match private_data.removed_song_ids
        (ignore order); assert nothing was added.
        """
    ):
        added, _, removed = models.changed_records("spotify.PlaylistSong")
        test.case(set(list_of(removed, "playlist_id")), "==", {private_data.playlist_id})
        test.case(list_of(removed, "song_id"), "==", private_data.removed_song_ids, ignore_order=True)
        test.case(len(added), "==", 0)
''')
def spotify_remove_low_rated(c):
    s = c.M["spotify"]
    threshold = c.rng.choice([2.5, 3.0, 3.5])
    taken = {p.title for p in _my_playlists(c)}
    title = c.rng.choice([n for n in NEW_PLAYLIST_NAMES if n not in taken])
    low = [x.id for x in s.Song.all() if x.rating < threshold - 0.05]
    high = [x.id for x in s.Song.all() if x.rating > threshold + 0.05]
    pick = c.rng.sample(low, k=2) + c.rng.sample(high, k=3)
    edge = c.rng.choice([x for x in high if x not in pick])
    song = s.Song.by_id(edge)
    song.rating = threshold  # exactly at the threshold: kept ("below" is strict)
    song.save()
    pick.append(edge)
    c.rng.shuffle(pick)
    playlist = B.add_playlist(c.w, c.user("spotify"), title, pick)
    removed = [i for i in pick if s.Song.by_id(i).rating < threshold]
    cell = ("for sid in playlist['song_ids']:\n"
            "    if apis.spotify.show_song(song_id=sid)['rating'] {op} {t}:\n"
            "        apis.spotify.remove_song_from_playlist(playlist_id=playlist['playlist_id'], "
            "song_id=sid, access_token=spotify_token)")
    return dict(
        instruction=f"Remove every song rated below {threshold} from my Spotify playlist "
                    f"\"{title}\".",
        public_data={"playlist": title, "threshold": threshold},
        private_data={"playlist_id": playlist.id, "removed_song_ids": removed}, answer=None,
        oracle=[PRELUDE, _spotify_login(title), cell.format(op="<", t=threshold), complete()],
        wrong=[PRELUDE, _spotify_login(title), cell.format(op="<=", t=threshold), complete()])


# ================================================================================================
# Across apps
# ================================================================================================
@template("cross_note_to_venmo", ["simple_note", "venmo"], 3, "missing_step", '''
    with test(
        """
        assert model changes match venmo.Transaction, venmo.User, venmo.Notification
        """
    ):
        test.case(models.changed_model_names(), "==", {"venmo.Transaction", "venmo.User", "venmo.Notification"})
    with test(
        """
        obtain added venmo.Transaction records, assert their receiver_ids match
        private_data.receiver_ids (ignore order), all sent by main_user
        (private_data.sender_id), each of public_data.amount.
        """
    ):
        added, _, _ = models.changed_records("venmo.Transaction")
        test.case(list_of(added, "receiver_id"), "==", private_data.receiver_ids, ignore_order=True)
        test.case(set(list_of(added, "sender_id")), "==", {private_data.sender_id})
        test.case([round(x.amount, 2) for x in added], "all ==", round(public_data.amount, 2))
''')
def cross_note_to_venmo(c):
    people = c.others("venmo", 3)
    title = c.rng.choice([t for t in ["Dinner Split", "Trip Expenses", "Team Lunch"]
                          if t not in _my_titles(c)])
    amount = c.rng.choice([12, 15, 20, 25, 30])
    _note(c, title, "People to pay back:\n" + "\n".join(c.full_name(p) for p in people))
    read = (PAGES + "\n" + login("simple_note", "venmo") + "\n" + FIND_NOTE.format(title=title)
            + "\nnames = [ln.strip() for ln in note['content'].splitlines()[1:] if ln.strip()]"
            "\nprint(names)")
    pay = ("for name in names{cut}:\n"
           "    user = [u for u in apis.venmo.search_users(access_token=venmo_token, query=name) "
           "if u['first_name'] + ' ' + u['last_name'] == name][0]\n"
           f"    apis.venmo.create_transaction(receiver_email=user['email'], amount={amount}, "
           "access_token=venmo_token)")
    return dict(
        instruction=f"Send ${amount} on Venmo to each person listed in my SimpleNote note "
                    f"\"{title}\".",
        public_data={"title": title, "amount": amount},
        private_data={"sender_id": c.user("venmo").id,
                      "receiver_ids": [c.user("venmo", p).id for p in people]}, answer=None,
        oracle=[PRELUDE, read, pay.format(cut=""), complete()],
        wrong=[PRELUDE, read, pay.format(cut="[:-1]"), complete()])


@template("cross_playlist_to_todoist", ["spotify", "todoist"], 3, "wrong_project", '''
    with test(
        """
        assert model changes match todoist.Task
        """
    ):
        test.case(models.changed_model_names(), "==", {"todoist.Task"})
    with test(
        """
        obtain added todoist.Task records, assert their titles match private_data.titles
        (ignore order) and all are in private_data.project_id.
        """
    ):
        added, _, _ = models.changed_records("todoist.Task")
        test.case(list_of(added, "title"), "==", private_data.titles, ignore_order=True)
        test.case(set(list_of(added, "project_id")), "==", {private_data.project_id})
''')
def cross_playlist_to_todoist(c):
    s = c.M["spotify"]
    playlist = c.rng.choice(_my_playlists(c))
    project = c.rng.choice(_my_projects(c))
    titles = ["Listen to " + s.Song.by_id(i).title for i in _playlist_song_ids(c, playlist)]
    read = (PAGES + "\n" + login("spotify", "todoist") + "\n"
            + FIND_PLAYLIST.format(title=playlist.title) + "\n"
            f"project = [p for p in apis.todoist.show_projects(access_token=todoist_token, "
            f"page_limit=100) if p['name'] == {project.name!r}][0]")
    add = ("for song in apis.spotify.show_playlist(playlist_id=playlist['playlist_id'], "
           "access_token=spotify_token)['songs']:\n"
           "    apis.todoist.create_task(project_id={pid}, title='Listen to ' + song['title'], "
           "access_token=todoist_token)")
    return dict(
        instruction=f"For every song in my Spotify playlist \"{playlist.title}\", add a task "
                    f"titled \"Listen to <song title>\" to my Todoist project \"{project.name}\".",
        public_data={"playlist": playlist.title, "project": project.name},
        private_data={"titles": titles, "project_id": project.id}, answer=None,
        oracle=[PRELUDE, read, add.format(pid="project['project_id']"), complete()],
        wrong=[PRELUDE, read, add.format(pid="0"), complete()])
