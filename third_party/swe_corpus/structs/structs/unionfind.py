"""Disjoint sets with union by size and path compression."""


class UnionFind:
    def __init__(self, elements=()):
        self._parent = {}
        self._size = {}
        self.components = 0
        for e in elements:
            self.add(e)

    def add(self, x):
        if x not in self._parent:
            self._parent[x] = x
            self._size[x] = 1
            self.components += 1

    def find(self, x):
        if x not in self._parent:
            raise KeyError(x)
        root = x
        while self._parent[root] != root:
            root = self._parent[root]
        while self._parent[x] != root:
            self._parent[x], x = root, self._parent[x]
        return root

    def union(self, a, b):
        """Merges the sets of ``a`` and ``b``; returns False if they were already one set."""
        self.add(a)
        self.add(b)
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        if self._size[ra] < self._size[rb]:
            ra, rb = rb, ra
        self._parent[rb] = ra
        self._size[ra] += self._size[rb]
        self.components -= 1
        return True

    def connected(self, a, b):
        return self.find(a) == self.find(b)

    def size_of(self, x):
        return self._size[self.find(x)]

    def groups(self):
        """Sets as sorted lists, sorted by their first element."""
        out = {}
        for x in self._parent:
            out.setdefault(self.find(x), []).append(x)
        return sorted(sorted(g) for g in out.values())
