"""Venmo scenario templates of the AppWorld data generator (runs inside the AppWorld venv).

Imported by ``scenarios.py`` (which fixes the registration order); importing this module
registers its templates in ``scenario_kit.TEMPLATES``.
"""
from __future__ import annotations

import build as B
from scenario_kit import NO_CHANGES, PAGES, PRELUDE, complete, login, money, template


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
