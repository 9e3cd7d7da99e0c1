"""A double-ended queue on a growable ring buffer."""


class RingDeque:
    def __init__(self, items=(), capacity=4):
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self._buf = [None] * capacity
        self._head = 0
        self._size = 0
        for item in items:
            self.append(item)

    def __len__(self):
        return self._size

    def _grow(self):
        old = list(self)
        self._buf = old + [None] * len(old)
        self._head = 0

    def append(self, item):
        if self._size == len(self._buf):
            self._grow()
        self._buf[(self._head + self._size) % len(self._buf)] = item
        self._size += 1

    def appendleft(self, item):
        if self._size == len(self._buf):
            self._grow()
        self._head = (self._head - 1) % len(self._buf)
        self._buf[self._head] = item
        self._size += 1

    def pop(self):
        if self._size == 0:
            raise IndexError("pop from an empty deque")
        idx = (self._head + self._size - 1) % len(self._buf)
        item = self._buf[idx]
        self._buf[idx] = None
        self._size -= 1
        return item

    def popleft(self):
        if self._size == 0:
            raise IndexError("pop from an empty deque")
        item = self._buf[self._head]
        self._buf[self._head] = None
        self._head = (self._head + 1) % len(self._buf)
        self._size -= 1
        return item

    def __getitem__(self, index):
        if index < 0:
            index += self._size
        if not 0 <= index < self._size:
            raise IndexError("deque index out of range")
        return self._buf[(self._head + index) % len(self._buf)]

    def __iter__(self):
        for i in range(self._size):
            yield self._buf[(self._head + i) % len(self._buf)]

    def rotate(self, n=1):
        """Rotates right by ``n`` (left for negative ``n``)."""
        if self._size == 0:
            return
        n %= self._size
        for _ in range(n):
            self.appendleft(self.pop())

    def peek(self):
        if self._size == 0:
            raise IndexError("peek at an empty deque")
        return self[-1]

    def __repr__(self):
        return f"RingDeque({list(self)!r})"
