"""Spotify scenario templates of the AppWorld data generator (runs inside the AppWorld venv).

Imported by ``scenarios.py`` (which fixes the registration order); importing this module
registers its templates in ``scenario_kit.TEMPLATES``.
"""
from __future__ import annotations

import build as B
from scenario_kit import NO_CHANGES, PAGES, PRELUDE, complete, login, template


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
