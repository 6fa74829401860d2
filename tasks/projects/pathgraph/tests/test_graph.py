import pytest
from pathgraph import EdgeNotFoundError, Graph, NodeNotFoundError


def test_undirected_edge_is_visible_from_both_ends():
    graph = Graph()
    graph.add_edge("a", "b", 2.5)
    assert graph.has_edge("a", "b")
    assert graph.has_edge("b", "a")
    assert graph.weight("b", "a") == 2.5


def test_directed_edge_only_goes_one_way():
    graph = Graph(directed=True)
    graph.add_edge("a", "b")
    assert graph.has_edge("a", "b")
    assert not graph.has_edge("b", "a")
    assert graph.weight("a", "b") == 1.0


def test_nodes_keep_insertion_order_and_duplicates_are_ignored():
    graph = Graph()
    graph.add_node("z")
    graph.add_edge("m", "a")
    graph.add_node("z")
    assert graph.nodes() == ["z", "m", "a"]
    assert len(graph) == 3
    assert "m" in graph
    assert "q" not in graph


def test_adding_existing_edge_replaces_weight():
    graph = Graph()
    graph.add_edge("a", "b", 1)
    graph.add_edge("b", "a", 7)
    assert graph.weight("a", "b") == 7
    assert graph.edges() == [("a", "b", 7)]


def test_weight_of_missing_edge_raises():
    graph = Graph(directed=True)
    graph.add_edge("a", "b")
    with pytest.raises(EdgeNotFoundError, match="'b' -> 'a'"):
        graph.weight("b", "a")


def test_neighbors_in_edge_order_and_unknown_node():
    graph = Graph(directed=True)
    graph.add_edge("a", "c")
    graph.add_edge("a", "b")
    assert graph.neighbors("a") == ["c", "b"]
    assert graph.neighbors("b") == []
    with pytest.raises(NodeNotFoundError, match="'x'"):
        graph.neighbors("x")


def test_predecessors_and_degrees_of_directed_graph():
    graph = Graph(directed=True)
    graph.add_edge("a", "c")
    graph.add_edge("b", "c")
    graph.add_edge("c", "d")
    assert graph.predecessors("c") == ["a", "b"]
    assert graph.degree("c") == 1
    assert graph.in_degree("c") == 2
    assert graph.in_degree("a") == 0


def test_predecessors_of_unknown_node_raises():
    graph = Graph(directed=True)
    graph.add_edge("a", "b")
    with pytest.raises(NodeNotFoundError, match="'c'"):
        graph.predecessors("c")


def test_undirected_self_loop_is_listed_once():
    graph = Graph()
    graph.add_edge("a", "a", 2)
    graph.add_edge("a", "b", 1)
    assert graph.edges() == [("a", "a", 2), ("a", "b", 1)]
    assert graph.neighbors("a") == ["a", "b"]


def test_undirected_degree_counts_all_touching_edges():
    graph = Graph()
    graph.add_edge("hub", "x")
    graph.add_edge("y", "hub")
    assert graph.degree("hub") == 2
    assert graph.in_degree("hub") == 2


def test_undirected_edges_listed_once_from_earlier_node():
    graph = Graph()
    graph.add_edge("a", "b", 1)
    graph.add_edge("c", "a", 2)
    graph.add_edge("b", "c", 3)
    assert graph.edges() == [("a", "b", 1), ("a", "c", 2), ("b", "c", 3)]


def test_directed_edges_listed_per_direction():
    graph = Graph(directed=True)
    graph.add_edge("b", "a", 1)
    graph.add_edge("a", "b", 2)
    assert graph.edges() == [("b", "a", 1), ("a", "b", 2)]


def test_remove_edge_undirected_removes_both_directions():
    graph = Graph()
    graph.add_edge("a", "b")
    graph.remove_edge("b", "a")
    assert not graph.has_edge("a", "b")
    assert not graph.has_edge("b", "a")
    assert graph.nodes() == ["a", "b"]


def test_remove_edge_directed_keeps_reverse_edge():
    graph = Graph(directed=True)
    graph.add_edge("a", "b")
    graph.add_edge("b", "a")
    graph.remove_edge("a", "b")
    assert graph.edges() == [("b", "a", 1.0)]


def test_remove_missing_edge_raises():
    graph = Graph()
    graph.add_node("a")
    with pytest.raises(EdgeNotFoundError, match="'a' -> 'b'"):
        graph.remove_edge("a", "b")


def test_remove_node_drops_its_edges():
    graph = Graph(directed=True)
    graph.add_edge("a", "b")
    graph.add_edge("b", "c")
    graph.add_edge("c", "a")
    graph.remove_node("b")
    assert graph.nodes() == ["a", "c"]
    assert graph.edges() == [("c", "a", 1.0)]
    with pytest.raises(NodeNotFoundError, match="'b'"):
        graph.remove_node("b")


def test_repr_mentions_kind_and_sizes():
    graph = Graph(directed=True)
    graph.add_edge("a", "b")
    graph.add_node("c")
    assert repr(graph) == "Graph(directed, nodes=3, edges=1)"
    assert repr(Graph()) == "Graph(undirected, nodes=0, edges=0)"


def test_remove_edge_undirected_keeps_other_edges():
    graph = Graph()
    graph.add_edge("x", "y", 2.0)
    graph.add_edge("y", "z")
    graph.remove_edge("y", "x")
    assert graph.edges() == [("y", "z", 1.0)]
    assert graph.has_edge("y", "x") is False
    assert graph.has_edge("x", "y") is False
    assert graph.has_edge("z", "y") is True


def test_remove_node_drops_edges_both_ways():
    graph = Graph(directed=True)
    graph.add_edge("p", "q")
    graph.add_edge("q", "p")
    graph.add_edge("q", "r")
    graph.remove_node("p")
    assert graph.nodes() == ["q", "r"]
    assert graph.edges() == [("q", "r", 1.0)]
    undirected = Graph()
    undirected.add_edge("a", "b")
    undirected.add_edge("b", "c")
    undirected.remove_node("a")
    assert undirected.edges() == [("b", "c", 1.0)]
    assert undirected.has_edge("b", "a") is False
