"""pathgraph: weighted graphs, shortest paths, orderings and spanning trees."""

from .algorithms import (
    UnionFind,
    bfs_distances,
    connected_components,
    dijkstra,
    find_cycle,
    hop_distance,
    minimum_spanning_tree,
    shortest_path,
    topological_sort,
)
from .errors import (
    CycleError,
    EdgeNotFoundError,
    GraphError,
    NegativeWeightError,
    NodeNotFoundError,
    NoPathError,
    ParseError,
)
from .graph import Graph
from .parser import EdgeLine, NodeLine, format_graph, parse_graph, parse_lines

__all__ = [
    "CycleError", "EdgeLine", "EdgeNotFoundError", "Graph", "GraphError", "NegativeWeightError", "NoPathError",
    "NodeLine", "NodeNotFoundError", "ParseError", "UnionFind", "bfs_distances", "connected_components", "dijkstra",
    "find_cycle", "format_graph", "hop_distance", "minimum_spanning_tree", "parse_graph", "parse_lines",
    "shortest_path", "topological_sort",
]  # fmt: skip
