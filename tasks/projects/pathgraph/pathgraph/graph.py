"""The weighted graph data structure."""

from __future__ import annotations

from collections.abc import Hashable

from .errors import EdgeNotFoundError, NodeNotFoundError

Node = Hashable
Edge = tuple[Node, Node, float]


class Graph:
    """A weighted graph, directed or undirected, with nodes kept in insertion order.

    In an undirected graph every edge is stored in both directions, so
    :meth:`neighbors` of either end includes the other.  Adding an edge that
    already exists replaces its weight.
    """

    def __init__(self, directed: bool = False) -> None:
        self.directed = directed
        self._adjacency: dict[Node, dict[Node, float]] = {}

    def add_node(self, node: Node) -> None:
        """Add ``node`` if it is not already present."""
        self._adjacency.setdefault(node, {})

    def add_edge(self, source: Node, target: Node, weight: float = 1.0) -> None:
        """Add an edge from ``source`` to ``target``, creating missing nodes."""
        self.add_node(source)
        self.add_node(target)
        self._adjacency[source][target] = weight
        if not self.directed:
            self._adjacency[target][source] = weight

    def require_node(self, node: Node) -> None:
        """Raise :class:`NodeNotFoundError` if ``node`` is not in the graph."""
        if node not in self._adjacency:
            raise NodeNotFoundError(f"node {node!r} is not in the graph")

    def remove_edge(self, source: Node, target: Node) -> None:
        """Remove the edge between ``source`` and ``target``."""
        if not self.has_edge(source, target):
            raise EdgeNotFoundError(f"no edge {source!r} -> {target!r}")
        del self._adjacency[source][target]
        if not self.directed:
            self._adjacency[target].pop(source, None)

    def remove_node(self, node: Node) -> None:
        """Remove ``node`` and every edge touching it."""
        self.require_node(node)
        del self._adjacency[node]
        for targets in self._adjacency.values():
            targets.pop(node, None)

    def has_edge(self, source: Node, target: Node) -> bool:
        """Whether an edge leads from ``source`` to ``target``."""
        return target in self._adjacency.get(source, {})

    def weight(self, source: Node, target: Node) -> float:
        """The weight of the edge from ``source`` to ``target``."""
        try:
            return self._adjacency[source][target]
        except KeyError:
            raise EdgeNotFoundError(f"no edge {source!r} -> {target!r}") from None

    def neighbors(self, node: Node) -> list[Node]:
        """Nodes reachable from ``node`` by one edge, in the order the edges were added."""
        self.require_node(node)
        return list(self._adjacency[node])

    def predecessors(self, node: Node) -> list[Node]:
        """Nodes with an edge leading to ``node``."""
        self.require_node(node)
        return [source for source, targets in self._adjacency.items() if node in targets]

    def degree(self, node: Node) -> int:
        """Number of edges leaving ``node`` (all edges touching it when undirected)."""
        return len(self.neighbors(node))

    def in_degree(self, node: Node) -> int:
        """Number of edges arriving at ``node``."""
        return len(self.predecessors(node))

    def nodes(self) -> list[Node]:
        """All nodes in insertion order."""
        return list(self._adjacency)

    def edges(self) -> list[Edge]:
        """All edges as ``(source, target, weight)``; undirected edges appear once."""
        position = {node: index for index, node in enumerate(self._adjacency)}
        result: list[Edge] = []
        for source, targets in self._adjacency.items():
            for target, weight in targets.items():
                if self.directed or position[source] <= position[target]:
                    result.append((source, target, weight))
        return result

    def __contains__(self, node: object) -> bool:
        return node in self._adjacency

    def __len__(self) -> int:
        return len(self._adjacency)

    def __repr__(self) -> str:
        kind = "directed" if self.directed else "undirected"
        return f"Graph({kind}, nodes={len(self)}, edges={len(self.edges())})"
