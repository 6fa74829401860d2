import pytest
from pathgraph import (
    CycleError,
    Graph,
    GraphError,
    NodeNotFoundError,
    UnionFind,
    connected_components,
    find_cycle,
    minimum_spanning_tree,
    parse_graph,
    topological_sort,
)


def dressing():
    return parse_graph(
        """
        shirt -> tie
        tie -> jacket
        pants -> shoes
        pants -> belt
        belt -> jacket
        shirt -> belt
        socks -> shoes
        """
    )


def test_topological_sort_respects_edges_and_insertion_order():
    assert topological_sort(dressing()) == ["shirt", "pants", "socks", "tie", "belt", "shoes", "jacket"]


def test_topological_sort_includes_isolated_nodes():
    graph = Graph(directed=True)
    graph.add_node("alone")
    graph.add_edge("a", "b")
    assert topological_sort(graph) == ["alone", "a", "b"]


def test_topological_sort_reports_cycle():
    graph = parse_graph("start -> a\na -> b\nb -> c\nc -> a\nc -> end")
    with pytest.raises(CycleError, match="a -> b -> c -> a") as info:
        topological_sort(graph)
    assert info.value.cycle == ["a", "b", "c", "a"]


def test_topological_sort_needs_directed_graph():
    graph = Graph()
    graph.add_edge("a", "b")
    with pytest.raises(GraphError, match="topological_sort needs a directed graph"):
        topological_sort(graph)


def test_find_cycle_returns_none_for_dag():
    assert find_cycle(dressing()) is None


def test_find_cycle_starts_at_reentered_node():
    graph = parse_graph("x -> a\na -> b\nb -> a")
    assert find_cycle(graph) == ["a", "b", "a"]


def test_find_cycle_self_loop():
    graph = parse_graph("a -> b\nb -> b")
    assert find_cycle(graph) == ["b", "b"]


def test_find_cycle_after_finished_branch():
    graph = parse_graph("a -> b\nb -> c\na -> c\nc -> d\nd -> b")
    assert find_cycle(graph) == ["b", "c", "d", "b"]


def test_find_cycle_skips_finished_dead_ends():
    graph = parse_graph("a -> x\na -> b\nb -> c\nc -> a")
    assert find_cycle(graph) == ["a", "b", "c", "a"]


def test_find_cycle_needs_directed_graph():
    with pytest.raises(GraphError, match="find_cycle needs a directed graph"):
        find_cycle(parse_graph("a -- b"))


def test_find_cycle_diamond_is_not_a_cycle():
    graph = parse_graph("a -> b\na -> c\nb -> d\nc -> d")
    assert find_cycle(graph) is None


def test_connected_components_undirected():
    graph = parse_graph("a -- b\nd -- e\ne -- f\nc")
    assert connected_components(graph) == [["a", "b"], ["d", "e", "f"], ["c"]]


def test_connected_components_ignore_direction():
    graph = parse_graph("a -> b\nc -> b\nx -> y")
    assert connected_components(graph) == [["a", "b", "c"], ["x", "y"]]


def test_union_find_merges_and_counts_sets():
    sets = UnionFind("abcd")
    assert sets.count == 4
    assert sets.union("a", "b") is True
    assert sets.union("b", "a") is False
    assert sets.union("c", "d") is True
    assert sets.count == 2
    assert sets.connected("a", "b")
    assert not sets.connected("a", "c")


def test_union_find_attaches_lower_rank_under_higher():
    sets = UnionFind(["a", "b", "c"])
    sets.union("a", "b")
    sets.union("c", "a")
    assert sets.find("c") == "a"
    assert sets.find("b") == "a"


def test_union_find_equal_ranks_grow_first_root():
    sets = UnionFind(["a", "b", "c", "d", "x", "y"])
    sets.union("a", "b")
    sets.union("c", "d")
    sets.union("d", "a")
    assert sets.find("a") == "c"
    sets.union("x", "y")
    sets.union("x", "b")
    assert sets.find("x") == "c"
    assert sets.find("y") == "c"


def test_union_find_add_is_idempotent_and_unknown_raises():
    sets = UnionFind()
    sets.add("x")
    sets.add("x")
    assert sets.count == 1
    assert sets.find("x") == "x"
    with pytest.raises(NodeNotFoundError, match="'y'"):
        sets.find("y")


CLRS = """
a -- b : 4
a -- h : 8
b -- c : 8
b -- h : 11
c -- d : 7
c -- f : 4
c -- i : 2
d -- e : 9
d -- f : 14
e -- f : 10
f -- g : 2
g -- h : 1
g -- i : 6
h -- i : 7
"""


def test_minimum_spanning_tree_weight_and_edges():
    total, edges = minimum_spanning_tree(parse_graph(CLRS))
    assert total == 37
    assert edges == [
        ("h", "g", 1),
        ("c", "i", 2),
        ("f", "g", 2),
        ("a", "b", 4),
        ("c", "f", 4),
        ("c", "d", 7),
        ("a", "h", 8),
        ("d", "e", 9),
    ]


def test_minimum_spanning_forest_of_disconnected_graph():
    total, edges = minimum_spanning_tree(parse_graph("a -- b : 3\nb -- c : 1\na -- c : 2\nx -- y : 5\nz"))
    assert total == 8
    assert edges == [("b", "c", 1), ("a", "c", 2), ("x", "y", 5)]


def test_minimum_spanning_tree_needs_undirected_graph():
    with pytest.raises(GraphError, match="needs an undirected graph"):
        minimum_spanning_tree(parse_graph("a -> b"))


def test_union_find_of_three_items():
    sets = UnionFind("xyz")
    assert sets.union("x", "y") is True
    assert sets.count == 2
    assert sets.union("y", "x") is False
    assert sets.union("y", "z") is True
    assert sets.count == 1
    assert sets.union("x", "z") is False
    assert sets.count == 1
    assert sets.connected("x", "z") is True
