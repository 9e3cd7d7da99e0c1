import pytest

from graphs.graph import Graph
from graphs.traversal import (bfs_levels, bfs_order, connected_components, dfs_order,
                              has_cycle, topological_sort)


def sample():
    return Graph.from_edges([("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("d", "e")])


def test_graph_basics():
    g = sample()
    assert len(g) == 5
    assert "e" in g and "z" not in g
    assert g.neighbors("a") == ["b", "c"]
    assert g.neighbors("d") == ["b", "c", "e"]
    assert len(g.edges()) == 5


def test_directed_edges_and_degrees():
    g = Graph.from_edges([(1, 2), (1, 3), (3, 2)], directed=True)
    assert g.neighbors(2) == []
    assert g.degree(1) == 2
    assert g.in_degrees() == {1: 0, 2: 2, 3: 1}


def test_self_loop_degree():
    g = Graph()
    g.add_edge("x", "x")
    g.add_edge("x", "y")
    assert g.degree("x") == 3


def test_remove_edge():
    g = sample()
    g.remove_edge("a", "b")
    assert "b" not in g.neighbors("a") and "a" not in g.neighbors("b")
    with pytest.raises(KeyError):
        g.remove_edge("a", "e")


def test_weights():
    g = Graph.from_edges([("a", "b", 7)])
    assert g.weight("b", "a") == 7


def test_bfs_order():
    assert bfs_order(sample(), "a") == ["a", "b", "c", "d", "e"]


def test_bfs_levels():
    assert bfs_levels(sample(), "a") == {"a": 0, "b": 1, "c": 1, "d": 2, "e": 3}


def test_dfs_order():
    assert dfs_order(sample(), "a") == ["a", "b", "d", "c", "e"]


def test_unknown_start():
    with pytest.raises(KeyError):
        bfs_order(sample(), "z")
    with pytest.raises(KeyError):
        dfs_order(sample(), "z")


def test_connected_components():
    g = Graph.from_edges([(1, 2), (3, 4), (4, 5), (6, 6)])
    g.add_node(0)
    assert connected_components(g) == [[3, 4, 5], [1, 2], [0], [6]]


def test_components_need_undirected():
    with pytest.raises(ValueError):
        connected_components(Graph(directed=True))


def test_has_cycle_undirected():
    assert has_cycle(sample())
    assert not has_cycle(Graph.from_edges([(1, 2), (2, 3), (3, 4)]))
    g = Graph()
    g.add_edge(1, 1)
    assert has_cycle(g)


def test_has_cycle_directed():
    assert not has_cycle(Graph.from_edges([(1, 2), (1, 3), (3, 2)], directed=True))
    assert has_cycle(Graph.from_edges([(1, 2), (2, 3), (3, 1)], directed=True))


def test_topological_sort():
    g = Graph.from_edges([("shirt", "tie"), ("tie", "jacket"), ("pants", "shoes"),
                          ("pants", "belt"), ("belt", "jacket"), ("shirt", "belt")],
                         directed=True)
    assert topological_sort(g) == ["pants", "shirt", "belt", "shoes", "tie", "jacket"]


def test_topological_sort_cycle():
    with pytest.raises(ValueError, match="cycle"):
        topological_sort(Graph.from_edges([(1, 2), (2, 1)], directed=True))
    with pytest.raises(ValueError):
        topological_sort(Graph())
