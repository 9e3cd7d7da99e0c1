"""graphs: adjacency-list graphs and classic algorithms."""
from graphs.graph import Graph
from graphs.paths import bellman_ford, dijkstra, shortest_path
from graphs.traversal import bfs_order, connected_components, dfs_order, has_cycle, topological_sort

__all__ = ["Graph", "bellman_ford", "dijkstra", "shortest_path", "bfs_order",
           "connected_components", "dfs_order", "has_cycle", "topological_sort"]
