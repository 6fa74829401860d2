"""Reading and writing the edge-list text format.

Each non-blank line holds either a lone node name or an edge::

    a -> b : 3      directed edge of weight 3
    a -- b : 2.5    undirected edge of weight 2.5
    a -> b          weight defaults to 1
    c               a node without edges

Text after ``#`` is a comment.  A graph is directed when its edges use ``->``
and undirected when they use ``--``; mixing the two is an error.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from .errors import ParseError
from .graph import Graph

_NAME = r"[\w.]+"
_EDGE = re.compile(rf"^(?P<source>{_NAME})\s*(?P<arrow>->|--)\s*(?P<target>{_NAME})(?:\s*:\s*(?P<weight>\S+))?$")
_NODE = re.compile(rf"^{_NAME}$")


class NodeLine(NamedTuple):
    """One parsed line naming a node on its own."""

    name: str
    line_number: int


class EdgeLine(NamedTuple):
    """One parsed edge line."""

    source: str
    target: str
    weight: float
    directed: bool
    line_number: int


def _parse_weight(text: str | None, line_number: int) -> float:
    if text is None:
        return 1.0
    try:
        weight = float(text)
    except ValueError:
        raise ParseError(line_number, f"invalid weight {text!r}") from None
    if not math.isfinite(weight):
        raise ParseError(line_number, f"weight must be finite, got {text!r}")
    return weight


def parse_lines(text: str) -> list[NodeLine | EdgeLine]:
    """Parse ``text`` into node and edge lines, in file order."""
    items: list[NodeLine | EdgeLine] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.partition("#")[0].strip()
        if not line:
            continue
        match = _EDGE.match(line)
        if match:
            weight = _parse_weight(match.group("weight"), number)
            directed = match.group("arrow") == "->"
            items.append(EdgeLine(match.group("source"), match.group("target"), weight, directed, number))
        elif _NODE.match(line):
            items.append(NodeLine(line, number))
        else:
            raise ParseError(number, f"cannot parse {line!r}")
    return items


def parse_graph(text: str) -> Graph:
    """Build a :class:`Graph` from edge-list text, adding nodes in the order they appear."""
    items = parse_lines(text)
    edges = [item for item in items if isinstance(item, EdgeLine)]
    directed = edges[0].directed if edges else False
    for edge in edges:
        if edge.directed != directed:
            found, expected = ("->", "--") if edge.directed else ("--", "->")
            raise ParseError(edge.line_number, f"edge {found!r} mixed with {expected!r} edges")
    graph = Graph(directed=directed)
    for item in items:
        if isinstance(item, NodeLine):
            graph.add_node(item.name)
        else:
            graph.add_edge(item.source, item.target, item.weight)
    return graph


def _format_weight(weight: float) -> str:
    return str(int(weight)) if float(weight).is_integer() else repr(float(weight))


def format_graph(graph: Graph) -> str:
    """Write ``graph`` in the edge-list format; nodes without edges get their own line."""
    arrow = "->" if graph.directed else "--"
    lines = [f"{source} {arrow} {target} : {_format_weight(weight)}" for source, target, weight in graph.edges()]
    connected = {node for source, target, _ in graph.edges() for node in (source, target)}
    lines.extend(str(node) for node in graph.nodes() if node not in connected)
    return "\n".join(lines)
