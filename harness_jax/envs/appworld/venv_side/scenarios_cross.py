"""Cross-app scenario templates of the AppWorld data generator (runs inside the AppWorld venv).

Imported by ``scenarios.py`` (which fixes the registration order); importing this module
registers its templates in ``scenario_kit.TEMPLATES``. They reuse the app modules' helpers.
"""
from __future__ import annotations

from scenario_kit import PAGES, PRELUDE, complete, login, template
from scenarios_note import FIND_NOTE, _my_titles, _note
from scenarios_spotify import FIND_PLAYLIST, _my_playlists, _playlist_song_ids
from scenarios_todoist import _my_projects


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
