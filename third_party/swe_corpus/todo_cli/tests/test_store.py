import json

import pytest

from todo_cli.store import Store, StoreError, Task


def test_add_and_ids(tmp_path):
    s = Store(str(tmp_path / "t.json"))
    a = s.add("write report")
    b = s.add("  call bob  ", priority="high")
    assert (a.id, b.id) == (1, 2)
    assert b.title == "call bob"


def test_invalid_task():
    with pytest.raises(StoreError):
        Task(1, "x", priority="urgent")
    with pytest.raises(StoreError):
        Task(1, "   ")


def test_tags_are_sorted_and_unique():
    assert Task(1, "x", tags=["b", "a", "b"]).tags == ["a", "b"]


def test_save_and_reload(tmp_path):
    path = str(tmp_path / "t.json")
    s = Store(path)
    s.add("one", tags=["home"], due="2024-05-01")
    s.add("two")
    s.complete(2)
    s.save()
    again = Store(path)
    assert [t.to_dict() for t in again.tasks] == [t.to_dict() for t in s.tasks]
    assert again.next_id == 3


def test_ids_not_reused_after_remove(tmp_path):
    path = str(tmp_path / "t.json")
    s = Store(path)
    s.add("a")
    s.add("b")
    s.remove(2)
    s.save()
    assert Store(path).add("c").id == 3


def test_corrupt_file(tmp_path):
    path = tmp_path / "t.json"
    path.write_text("{not json")
    with pytest.raises(StoreError, match="not valid JSON"):
        Store(str(path))


def test_next_id_derived_when_missing(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"tasks": [{"id": 7, "title": "x"}]}))
    assert Store(str(path)).next_id == 8


def test_complete_twice(tmp_path):
    s = Store(str(tmp_path / "t.json"))
    s.add("a")
    s.complete(1)
    with pytest.raises(StoreError, match="already done"):
        s.complete(1)


def test_get_missing(tmp_path):
    with pytest.raises(StoreError, match="no task"):
        Store(str(tmp_path / "t.json")).get(5)


def test_query_order(tmp_path):
    s = Store(str(tmp_path / "t.json"))
    s.add("low", priority="low")
    s.add("late high", priority="high", due="2024-09-01")
    s.add("early high", priority="high", due="2024-03-01")
    s.add("normal")
    s.add("undated high", priority="high")
    assert [t.title for t in s.query()] == ["early high", "late high", "undated high", "normal",
                                            "low"]


def test_query_filters(tmp_path):
    s = Store(str(tmp_path / "t.json"))
    s.add("a", tags=["work"], due="2024-01-10")
    s.add("b", tags=["home"], due="2024-02-10")
    s.add("c", tags=["work"])
    s.complete(3)
    assert [t.title for t in s.query(tag="work")] == ["a"]
    assert [t.title for t in s.query(tag="work", include_done=True)] == ["a", "c"]
    assert [t.title for t in s.query(due_before="2024-02-10")] == ["a"]
    assert [t.title for t in s.query(priority="low")] == []


def test_purge_and_stats(tmp_path):
    s = Store(str(tmp_path / "t.json"))
    for name in "abc":
        s.add(name)
    s.complete(1)
    s.complete(3)
    assert s.stats() == {"total": 3, "done": 2, "open": 1}
    assert s.purge_done() == 2
    assert s.stats() == {"total": 1, "done": 0, "open": 1}
