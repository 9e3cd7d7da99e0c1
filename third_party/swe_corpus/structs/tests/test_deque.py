import pytest

from structs.deque import RingDeque


def test_append_and_iterate():
    d = RingDeque([1, 2, 3])
    assert list(d) == [1, 2, 3]
    assert len(d) == 3


def test_appendleft_wraps():
    d = RingDeque(capacity=2)
    d.append(1)
    d.appendleft(0)
    d.appendleft(-1)
    assert list(d) == [-1, 0, 1]


def test_pop_both_ends():
    d = RingDeque([1, 2, 3, 4])
    assert d.pop() == 4
    assert d.popleft() == 1
    assert list(d) == [2, 3]


def test_pop_empty():
    with pytest.raises(IndexError):
        RingDeque().pop()
    with pytest.raises(IndexError):
        RingDeque().popleft()


def test_growth_keeps_order():
    d = RingDeque(capacity=1)
    for i in range(10):
        d.append(i)
        d.appendleft(-i)
    assert list(d) == [-i for i in range(9, -1, -1)] + list(range(10))


def test_indexing():
    d = RingDeque("abcde", capacity=3)
    assert d[0] == "a"
    assert d[4] == "e"
    assert d[-1] == "e"
    assert d[-5] == "a"
    with pytest.raises(IndexError):
        d[5]
    with pytest.raises(IndexError):
        d[-6]


def test_rotate():
    d = RingDeque([1, 2, 3, 4, 5])
    d.rotate(2)
    assert list(d) == [4, 5, 1, 2, 3]
    d.rotate(-3)
    assert list(d) == [2, 3, 4, 5, 1]


def test_rotate_empty_and_full_cycle():
    d = RingDeque()
    d.rotate(3)
    assert list(d) == []
    d = RingDeque([1, 2, 3])
    d.rotate(3)
    assert list(d) == [1, 2, 3]


def test_peek():
    d = RingDeque([1, 2])
    assert d.peek() == 2
    with pytest.raises(IndexError):
        RingDeque().peek()


def test_bad_capacity():
    with pytest.raises(ValueError):
        RingDeque(capacity=0)
