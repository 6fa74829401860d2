"""Exception types raised by pathgraph."""

from __future__ import annotations

from collections.abc import Hashable, Sequence


class GraphError(Exception):
    """Base class for every error raised by pathgraph."""


class _LookupFailure(GraphError, KeyError):
    """A KeyError whose message is shown as written rather than quoted."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class NodeNotFoundError(_LookupFailure):
    """Raised when an operation names a node that is not in the graph."""


class EdgeNotFoundError(_LookupFailure):
    """Raised when an operation names an edge that is not in the graph."""


class NoPathError(GraphError):
    """Raised when the target cannot be reached from the source."""


class NegativeWeightError(GraphError, ValueError):
    """Raised when Dijkstra's algorithm meets an edge with a negative weight."""


class CycleError(GraphError):
    """Raised when a directed graph that must be acyclic has a cycle.

    The ``cycle`` attribute lists the nodes of one cycle, starting and ending
    with the same node.
    """

    def __init__(self, cycle: Sequence[Hashable]) -> None:
        self.cycle = list(cycle)
        super().__init__("graph has a cycle: " + " -> ".join(str(node) for node in self.cycle))


class ParseError(GraphError, ValueError):
    """Raised when edge-list text cannot be parsed; ``line_number`` is 1-based."""

    def __init__(self, line_number: int, message: str) -> None:
        self.line_number = line_number
        super().__init__(f"line {line_number}: {message}")
