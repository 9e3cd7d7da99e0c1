import math

import pytest

from graphs.graph import Graph
from graphs.paths import bellman_ford, dijkstra, shortest_path


def weighted():
    return Graph.from_edges([("a", "b", 4), ("a", "c", 1), ("c", "b", 2), ("b", "d", 1),
                             ("c", "d", 5), ("d", "e", 3)], directed=True)


def test_dijkstra_distances():
    dist, _ = dijkstra(weighted(), "a")
    assert dist == {"a": 0, "b": 3, "c": 1, "d": 4, "e": 7}


def test_shortest_path():
    assert shortest_path(weighted(), "a", "e") == (["a", "c", "b", "d", "e"], 7)


def test_shortest_path_to_self():
    assert shortest_path(weighted(), "c", "c") == (["c"], 0)


def test_unreachable():
    path, cost = shortest_path(weighted(), "e", "a")
    assert path is None and math.isinf(cost)


def test_dijkstra_rejects_negative():
    g = Graph.from_edges([(1, 2, -1)], directed=True)
    with pytest.raises(ValueError):
        dijkstra(g, 1)


def test_dijkstra_unknown_source():
    with pytest.raises(KeyError):
        dijkstra(weighted(), "z")


def test_undirected_shortest_path():
    g = Graph.from_edges([(1, 2, 1), (2, 3, 1), (1, 3, 5)])
    assert shortest_path(g, 3, 1) == ([3, 2, 1], 2)


def test_bellman_ford_matches_dijkstra():
    assert bellman_ford(weighted(), "a") == dijkstra(weighted(), "a")[0]


def test_bellman_ford_negative_edge():
    g = Graph.from_edges([("s", "a", 4), ("s", "b", 5), ("b", "a", -3), ("a", "t", 1)],
                         directed=True)
    assert bellman_ford(g, "s") == {"s": 0, "a": 2, "b": 5, "t": 3}


def test_bellman_ford_negative_cycle():
    g = Graph.from_edges([(1, 2, 1), (2, 3, -2), (3, 1, -1)], directed=True)
    with pytest.raises(ValueError, match="negative cycle"):
        bellman_ford(g, 1)


def test_bellman_ford_unreachable_omitted():
    g = Graph.from_edges([(1, 2, 1)], directed=True)
    g.add_node(3)
    assert bellman_ford(g, 1) == {1: 0, 2: 1}
