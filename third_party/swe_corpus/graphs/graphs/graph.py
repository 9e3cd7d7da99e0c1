"""A weighted graph, directed or undirected, on hashable node labels."""


class Graph:
    def __init__(self, directed=False):
        self.directed = directed
        self._adj = {}

    def add_node(self, node):
        self._adj.setdefault(node, {})

    def add_edge(self, u, v, weight=1):
        self.add_node(u)
        self.add_node(v)
        self._adj[u][v] = weight
        if not self.directed:
            self._adj[v][u] = weight

    def remove_edge(self, u, v):
        if v not in self._adj.get(u, {}):
            raise KeyError(f"no edge {u!r} -> {v!r}")
        del self._adj[u][v]
        if not self.directed:
            del self._adj[v][u]

    def nodes(self):
        return list(self._adj)

    def neighbors(self, node):
        if node not in self._adj:
            raise KeyError(f"unknown node {node!r}")
        return list(self._adj[node])

    def weight(self, u, v):
        return self._adj[u][v]

    def edges(self):
        out = []
        seen = set()
        for u, nbrs in self._adj.items():
            for v, w in nbrs.items():
                if not self.directed:
                    key = frozenset((u, v))
                    if key in seen:
                        continue
                    seen.add(key)
                out.append((u, v, w))
        return out

    def degree(self, node):
        """Out-degree for directed graphs; a self-loop counts twice when undirected."""
        nbrs = self._adj[node]
        d = len(nbrs)
        if not self.directed and node in nbrs:
            d += 1
        return d

    def in_degrees(self):
        deg = {n: 0 for n in self._adj}
        for u in self._adj:
            for v in self._adj[u]:
                deg[v] += 1
        return deg

    def __contains__(self, node):
        return node in self._adj

    def __len__(self):
        return len(self._adj)

    @classmethod
    def from_edges(cls, edges, directed=False):
        g = cls(directed)
        for e in edges:
            if len(e) == 2:
                g.add_edge(e[0], e[1])
            else:
                g.add_edge(e[0], e[1], e[2])
        return g
