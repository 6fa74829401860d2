"""Path finding, ordering, components and spanning trees."""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterable

from .errors import CycleError, GraphError, NegativeWeightError, NodeNotFoundError, NoPathError
from .graph import Edge, Graph, Node


def dijkstra(graph: Graph, source: Node) -> tuple[dict[Node, float], dict[Node, Node]]:
    """Shortest distances from ``source`` to every reachable node.

    Returns ``(distances, previous)`` where ``previous`` maps each reached node
    (except the source) to the node before it on a shortest path.
    """
    for start, end, weight in graph.edges():
        if weight < 0:
            raise NegativeWeightError(f"edge {start!r} -> {end!r} has negative weight {weight}")
    distances: dict[Node, float] = {source: 0.0}
    previous: dict[Node, Node] = {}
    tie_breaker = itertools.count()
    queue: list[tuple[float, int, Node]] = [(0.0, next(tie_breaker), source)]
    while queue:
        distance, _, node = heapq.heappop(queue)
        if distance > distances[node]:
            continue
        for neighbor in graph.neighbors(node):
            candidate = distance + graph.weight(node, neighbor)
            if neighbor not in distances or candidate < distances[neighbor]:
                distances[neighbor] = candidate
                previous[neighbor] = node
                heapq.heappush(queue, (candidate, next(tie_breaker), neighbor))
    return distances, previous


def shortest_path(graph: Graph, source: Node, target: Node) -> tuple[float, list[Node]]:
    """Return ``(cost, path)`` for a cheapest path from ``source`` to ``target``."""
    graph.require_node(target)
    distances, previous = dijkstra(graph, source)
    if target not in distances:
        raise NoPathError(f"no path from {source!r} to {target!r}")
    path = [target]
    while path[-1] != source:
        path.append(previous[path[-1]])
    path.reverse()
    return distances[target], path


def bfs_distances(graph: Graph, source: Node) -> dict[Node, int]:
    """Number of edges on a shortest hop path from ``source`` to each reachable node."""
    hops = {source: 0}
    frontier = deque([source])
    while frontier:
        node = frontier.popleft()
        for neighbor in graph.neighbors(node):
            if neighbor not in hops:
                hops[neighbor] = hops[node] + 1
                frontier.append(neighbor)
    return hops


def hop_distance(graph: Graph, source: Node, target: Node) -> int:
    """Fewest edges needed to go from ``source`` to ``target``, ignoring weights."""
    graph.require_node(target)
    hops = bfs_distances(graph, source)
    if target not in hops:
        raise NoPathError(f"no path from {source!r} to {target!r}")
    return hops[target]


def _require_directed(graph: Graph, operation: str) -> None:
    if not graph.directed:
        raise GraphError(f"{operation} needs a directed graph")


def find_cycle(graph: Graph) -> list[Node] | None:
    """Return one cycle of a directed graph as ``[a, b, ..., a]``, or ``None``."""
    _require_directed(graph, "find_cycle")
    on_stack: dict[Node, bool] = {}
    stack: list[Node] = []

    def visit(node: Node) -> list[Node] | None:
        on_stack[node] = True
        stack.append(node)
        for neighbor in graph.neighbors(node):
            if on_stack.get(neighbor):
                return [*stack[stack.index(neighbor) :], neighbor]
            if neighbor not in on_stack:
                found = visit(neighbor)
                if found is not None:
                    return found
        on_stack[node] = False
        stack.pop()
        return None

    for start in graph.nodes():
        if start not in on_stack:
            cycle = visit(start)
            if cycle is not None:
                return cycle
    return None


def topological_sort(graph: Graph) -> list[Node]:
    """Order the nodes so that every edge points forward (Kahn's algorithm).

    Among nodes that are ready at the same time, insertion order wins.  Raises
    :class:`CycleError` naming a cycle when no such order exists.
    """
    _require_directed(graph, "topological_sort")
    remaining = {node: graph.in_degree(node) for node in graph.nodes()}
    ready = deque(node for node, count in remaining.items() if count == 0)
    order: list[Node] = []
    while ready:
        node = ready.popleft()
        order.append(node)
        for neighbor in graph.neighbors(node):
            remaining[neighbor] -= 1
            if remaining[neighbor] == 0:
                ready.append(neighbor)
    if len(order) < len(graph):
        raise CycleError(find_cycle(graph) or [])
    return order


class UnionFind:
    """Disjoint sets with union by rank and path compression."""

    def __init__(self, items: Iterable[Node] = ()) -> None:
        self._parent: dict[Node, Node] = {}
        self._rank: dict[Node, int] = {}
        self.count = 0
        for item in items:
            self.add(item)

    def add(self, item: Node) -> None:
        """Put ``item`` in a set of its own unless it is already known."""
        if item not in self._parent:
            self._parent[item] = item
            self._rank[item] = 0
            self.count += 1

    def find(self, item: Node) -> Node:
        """Return the representative of the set holding ``item``."""
        if item not in self._parent:
            raise NodeNotFoundError(f"{item!r} is not in the union-find structure")
        parent = self._parent[item]
        if parent == item:
            return item
        root = self.find(parent)
        self._parent[item] = root
        return root

    def union(self, first: Node, second: Node) -> bool:
        """Merge the sets of ``first`` and ``second``; return False if already joined."""
        root_a, root_b = self.find(first), self.find(second)
        if root_a == root_b:
            return False
        if self._rank[root_a] < self._rank[root_b]:
            root_a, root_b = root_b, root_a
        self._parent[root_b] = root_a
        if self._rank[root_a] == self._rank[root_b]:
            self._rank[root_a] += 1
        self.count -= 1
        return True

    def connected(self, first: Node, second: Node) -> bool:
        """Whether ``first`` and ``second`` are in the same set."""
        return self.find(first) == self.find(second)


def connected_components(graph: Graph) -> list[list[Node]]:
    """Groups of nodes joined by edges, ignoring edge direction.

    Components are ordered by their first node, and nodes inside a component
    keep the graph's insertion order.
    """
    sets = UnionFind(graph.nodes())
    for source, target, _ in graph.edges():
        sets.union(source, target)
    groups: dict[Node, list[Node]] = {}
    for node in graph.nodes():
        groups.setdefault(sets.find(node), []).append(node)
    return list(groups.values())


def minimum_spanning_tree(graph: Graph) -> tuple[float, list[Edge]]:
    """Kruskal's algorithm: return ``(total_weight, edges)`` of a minimum spanning forest.

    Edges of equal weight are considered in insertion order.
    """
    if graph.directed:
        raise GraphError("minimum_spanning_tree needs an undirected graph")
    sets = UnionFind(graph.nodes())
    chosen: list[Edge] = []
    for source, target, weight in sorted(graph.edges(), key=lambda edge: edge[2]):
        if sets.union(source, target):
            chosen.append((source, target, weight))
    return sum(weight for _, _, weight in chosen), chosen
