"""Traversals, components, cycles and topological order."""
from collections import deque


def bfs_order(graph, start):
    """Nodes in breadth-first order; neighbours visited in insertion order."""
    if start not in graph:
        raise KeyError(f"unknown node {start!r}")
    seen = {start}
    order = []
    queue = deque([start])
    while queue:
        node = queue.popleft()
        order.append(node)
        for nbr in graph.neighbors(node):
            if nbr not in seen:
                seen.add(nbr)
                queue.append(nbr)
    return order


def bfs_levels(graph, start):
    """{node: number of edges from start} for reachable nodes."""
    levels = {start: 0}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nbr in graph.neighbors(node):
            if nbr not in levels:
                levels[nbr] = levels[node] + 1
                queue.append(nbr)
    return levels


def dfs_order(graph, start):
    """Preorder of an iterative depth-first search matching the recursive one."""
    if start not in graph:
        raise KeyError(f"unknown node {start!r}")
    seen = set()
    order = []
    stack = [start]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        order.append(node)
        for nbr in reversed(graph.neighbors(node)):
            if nbr not in seen:
                stack.append(nbr)
    return order


def connected_components(graph):
    """Components of an undirected graph as sorted lists, largest first (ties: by content)."""
    if graph.directed:
        raise ValueError("connected_components needs an undirected graph")
    seen = set()
    comps = []
    for node in graph.nodes():
        if node in seen:
            continue
        comp = bfs_order(graph, node)
        seen.update(comp)
        comps.append(sorted(comp))
    comps.sort(key=lambda c: (-len(c), c))
    return comps


def has_cycle(graph):
    if graph.directed:
        WHITE, GREY, BLACK = 0, 1, 2
        color = {n: WHITE for n in graph.nodes()}
        for root in graph.nodes():
            if color[root] != WHITE:
                continue
            stack = [(root, iter(graph.neighbors(root)))]
            color[root] = GREY
            while stack:
                node, it = stack[-1]
                for nbr in it:
                    if color[nbr] == GREY:
                        return True
                    if color[nbr] == WHITE:
                        color[nbr] = GREY
                        stack.append((nbr, iter(graph.neighbors(nbr))))
                        break
                else:
                    color[node] = BLACK
                    stack.pop()
        return False
    seen = set()
    for root in graph.nodes():
        if root in seen:
            continue
        parent = {root: None}
        stack = [root]
        seen.add(root)
        while stack:
            node = stack.pop()
            for nbr in graph.neighbors(node):
                if nbr == node:
                    return True
                if nbr not in seen:
                    seen.add(nbr)
                    parent[nbr] = node
                    stack.append(nbr)
                elif parent.get(node) != nbr:
                    return True
    return False


def topological_sort(graph):
    """Kahn's algorithm; among ready nodes the smallest comes first. Raises on cycles."""
    if not graph.directed:
        raise ValueError("topological_sort needs a directed graph")
    indeg = graph.in_degrees()
    ready = sorted(n for n, d in indeg.items() if d == 0)
    order = []
    while ready:
        node = ready.pop(0)
        order.append(node)
        for nbr in graph.neighbors(node):
            indeg[nbr] -= 1
            if indeg[nbr] == 0:
                ready.append(nbr)
                ready.sort()
    if len(order) != len(graph):
        raise ValueError("graph has a cycle")
    return order
