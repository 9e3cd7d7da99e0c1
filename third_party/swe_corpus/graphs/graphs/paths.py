"""Shortest paths."""
import heapq
import itertools

INF = float("inf")


def dijkstra(graph, source):
    """(dist, prev) for non-negative weights; unreachable nodes are absent from dist."""
    if source not in graph:
        raise KeyError(f"unknown node {source!r}")
    dist = {source: 0}
    prev = {source: None}
    counter = itertools.count()
    heap = [(0, next(counter), source)]
    done = set()
    while heap:
        d, _, node = heapq.heappop(heap)
        if node in done:
            continue
        done.add(node)
        for nbr in graph.neighbors(node):
            w = graph.weight(node, nbr)
            if w < 0:
                raise ValueError("dijkstra needs non-negative weights")
            nd = d + w
            if nd < dist.get(nbr, INF):
                dist[nbr] = nd
                prev[nbr] = node
                heapq.heappush(heap, (nd, next(counter), nbr))
    return dist, prev


def shortest_path(graph, source, target):
    """(path as a node list, total weight), or (None, inf) when unreachable."""
    dist, prev = dijkstra(graph, source)
    if target not in dist:
        return None, INF
    path = []
    node = target
    while node is not None:
        path.append(node)
        node = prev[node]
    path.reverse()
    return path, dist[target]


def bellman_ford(graph, source):
    """Distances with negative weights allowed; raises ValueError on a negative cycle."""
    nodes = graph.nodes()
    dist = {n: INF for n in nodes}
    dist[source] = 0
    edges = []
    for u, v, w in graph.edges():
        edges.append((u, v, w))
        if not graph.directed:
            edges.append((v, u, w))
    for _ in range(len(nodes) - 1):
        changed = False
        for u, v, w in edges:
            if dist[u] + w < dist[v]:
                dist[v] = dist[u] + w
                changed = True
        if not changed:
            break
    for u, v, w in edges:
        if dist[u] + w < dist[v]:
            raise ValueError("negative cycle")
    return {n: d for n, d in dist.items() if d != INF}
