import pytest

from structs.intervals import (insert_interval, intersection, merge_intervals, overlaps,
                               total_covered)
from structs.lru import LRUCache
from structs.unionfind import UnionFind


def test_lru_evicts_least_recent():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.get("a")
    c.put("c", 3)
    assert "b" not in c
    assert c.keys() == ["c", "a"]


def test_lru_update_moves_to_front():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.put("a", 10)
    c.put("c", 3)
    assert c.get("a") == 10
    assert c.get("b") is None


def test_lru_capacity_one():
    c = LRUCache(1)
    c.put(1, "x")
    c.put(2, "y")
    assert len(c) == 1
    assert c.get(2) == "y"


def test_lru_stats():
    c = LRUCache(3)
    c.put("k", 1)
    c.get("k")
    c.get("missing", default=0)
    assert (c.hits, c.misses) == (1, 1)
    assert c.hit_rate() == 0.5
    assert LRUCache(1).hit_rate() == 0.0


def test_lru_bad_capacity():
    with pytest.raises(ValueError):
        LRUCache(0)


def test_unionfind_basic():
    uf = UnionFind(range(5))
    assert uf.components == 5
    assert uf.union(0, 1) is True
    assert uf.union(1, 0) is False
    uf.union(3, 4)
    assert uf.components == 3
    assert uf.connected(0, 1) and not uf.connected(1, 3)


def test_unionfind_sizes_and_groups():
    uf = UnionFind()
    for a, b in [(1, 2), (2, 3), (4, 5)]:
        uf.union(a, b)
    uf.add(6)
    assert uf.size_of(3) == 3
    assert uf.size_of(5) == 2
    assert uf.groups() == [[1, 2, 3], [4, 5], [6]]


def test_unionfind_unknown():
    with pytest.raises(KeyError):
        UnionFind().find("x")


def test_merge_overlapping():
    assert merge_intervals([(1, 3), (2, 6), (8, 10), (15, 18)]) == [(1, 6), (8, 10), (15, 18)]


def test_merge_touching():
    assert merge_intervals([(1, 2), (3, 4)]) == [(1, 4)]
    assert merge_intervals([(1, 2), (3, 4)], touch=False) == [(1, 2), (3, 4)]


def test_merge_contained():
    assert merge_intervals([(1, 10), (2, 3)]) == [(1, 10)]


def test_merge_invalid():
    with pytest.raises(ValueError):
        merge_intervals([(5, 1)])


def test_total_covered():
    assert total_covered([(1, 3), (2, 5), (10, 10)]) == 6


def test_insert_interval():
    assert insert_interval([(1, 2), (6, 9)], (3, 5)) == [(1, 9)]


def test_overlap_and_intersection():
    assert overlaps((1, 5), (5, 9))
    assert not overlaps((1, 4), (5, 9))
    assert intersection((1, 5), (3, 9)) == (3, 5)
    assert intersection((1, 2), (3, 4)) is None
