"""A binary min-heap and a stable priority queue built on it."""


class MinHeap:
    def __init__(self, items=(), key=None):
        self._key = key or (lambda x: x)
        self._data = list(items)
        for i in range(len(self._data) // 2 - 1, -1, -1):
            self._sift_down(i)

    def __len__(self):
        return len(self._data)

    def _less(self, i, j):
        return self._key(self._data[i]) < self._key(self._data[j])

    def _sift_up(self, i):
        while i > 0:
            parent = (i - 1) // 2
            if self._less(i, parent):
                self._data[i], self._data[parent] = self._data[parent], self._data[i]
                i = parent
            else:
                break

    def _sift_down(self, i):
        n = len(self._data)
        while True:
            left = 2 * i + 1
            right = left + 1
            smallest = i
            if left < n and self._less(left, smallest):
                smallest = left
            if right < n and self._less(right, smallest):
                smallest = right
            if smallest == i:
                return
            self._data[i], self._data[smallest] = self._data[smallest], self._data[i]
            i = smallest

    def push(self, item):
        self._data.append(item)
        self._sift_up(len(self._data) - 1)

    def pop(self):
        if not self._data:
            raise IndexError("pop from an empty heap")
        last = self._data.pop()
        if not self._data:
            return last
        top = self._data[0]
        self._data[0] = last
        self._sift_down(0)
        return top

    def peek(self):
        if not self._data:
            raise IndexError("peek at an empty heap")
        return self._data[0]

    def pushpop(self, item):
        """Pushes ``item`` then pops the smallest, faster than the two calls."""
        if self._data and self._key(self._data[0]) < self._key(item):
            item, self._data[0] = self._data[0], item
            self._sift_down(0)
        return item


def nsmallest(n, items, key=None):
    heap = MinHeap(items, key=key)
    return [heap.pop() for _ in range(min(n, len(heap)))]


class PriorityQueue:
    """Lowest priority value first; equal priorities leave in insertion order."""

    def __init__(self):
        self._heap = MinHeap(key=lambda entry: (entry[0], entry[1]))
        self._counter = 0

    def __len__(self):
        return len(self._heap)

    def put(self, item, priority=0):
        self._heap.push((priority, self._counter, item))
        self._counter += 1

    def get(self):
        if not len(self._heap):
            raise IndexError("get from an empty priority queue")
        return self._heap.pop()[2]

    def drain(self):
        out = []
        while len(self):
            out.append(self.get())
        return out
