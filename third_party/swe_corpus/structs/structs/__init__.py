"""structs: classic data structures in plain Python."""
from structs.deque import RingDeque
from structs.heap import MinHeap, PriorityQueue
from structs.intervals import merge_intervals, total_covered, insert_interval
from structs.lru import LRUCache
from structs.unionfind import UnionFind

__all__ = ["RingDeque", "MinHeap", "PriorityQueue", "merge_intervals", "total_covered",
           "insert_interval", "LRUCache", "UnionFind"]
