"""SimpleNote scenario templates of the AppWorld data generator (runs inside the AppWorld venv).

Imported by ``scenarios.py`` (which fixes the registration order); importing this module
registers its templates in ``scenario_kit.TEMPLATES``.
"""
from __future__ import annotations

import build as B
from scenario_kit import NO_CHANGES, PAGES, PRELUDE, complete, login, template


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
