import pytest

from structs.heap import MinHeap, PriorityQueue, nsmallest


def test_heapify_and_pop_sorted():
    h = MinHeap([5, 3, 8, 1, 9, 2, 7])
    assert [h.pop() for _ in range(len(h))] == [1, 2, 3, 5, 7, 8, 9]


def test_push_pop():
    h = MinHeap()
    for x in [4, 1, 3, 2]:
        h.push(x)
    assert h.peek() == 1
    assert h.pop() == 1
    assert h.pop() == 2
    assert len(h) == 2


def test_pop_empty():
    with pytest.raises(IndexError):
        MinHeap().pop()
    with pytest.raises(IndexError):
        MinHeap().peek()


def test_key_function():
    h = MinHeap(["ccc", "a", "bb"], key=len)
    assert h.pop() == "a"
    assert h.pop() == "bb"


def test_pushpop():
    h = MinHeap([3, 5])
    assert h.pushpop(1) == 1
    assert h.pushpop(4) == 3
    assert sorted([h.pop(), h.pop()]) == [4, 5]


def test_pushpop_empty():
    assert MinHeap().pushpop(7) == 7


def test_nsmallest():
    assert nsmallest(3, [9, 1, 8, 2, 7, 3]) == [1, 2, 3]
    assert nsmallest(10, [2, 1]) == [1, 2]


def test_many_random_orders():
    import random
    rng = random.Random(4)
    for _ in range(20):
        xs = [rng.randint(0, 50) for _ in range(rng.randint(0, 30))]
        h = MinHeap(xs)
        assert [h.pop() for _ in range(len(h))] == sorted(xs)


def test_priority_queue_order():
    q = PriorityQueue()
    q.put("low", priority=5)
    q.put("high", priority=1)
    q.put("mid", priority=3)
    assert q.drain() == ["high", "mid", "low"]


def test_priority_queue_stable():
    q = PriorityQueue()
    for name in ["a", "b", "c"]:
        q.put(name, priority=2)
    q.put("first", priority=0)
    assert q.drain() == ["first", "a", "b", "c"]


def test_priority_queue_empty():
    with pytest.raises(IndexError):
        PriorityQueue().get()
