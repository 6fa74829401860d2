import pytest
from pathgraph import (
    Graph,
    NegativeWeightError,
    NodeNotFoundError,
    NoPathError,
    bfs_distances,
    dijkstra,
    hop_distance,
    shortest_path,
)


def roads():
    graph = Graph(directed=True)
    graph.add_edge("a", "b", 4)
    graph.add_edge("a", "c", 1)
    graph.add_edge("c", "b", 2)
    graph.add_edge("b", "d", 1)
    graph.add_edge("c", "d", 5)
    graph.add_edge("d", "e", 3)
    return graph


def test_dijkstra_distances_from_source():
    distances, previous = dijkstra(roads(), "a")
    assert distances == {"a": 0, "b": 3, "c": 1, "d": 4, "e": 7}
    assert previous == {"b": "c", "c": "a", "d": "b", "e": "d"}


def test_shortest_path_prefers_cheaper_detour():
    assert shortest_path(roads(), "a", "d") == (4, ["a", "c", "b", "d"])
    assert shortest_path(roads(), "a", "e") == (7, ["a", "c", "b", "d", "e"])


def test_shortest_path_to_itself():
    assert shortest_path(roads(), "c", "c") == (0, ["c"])


def test_shortest_path_keeps_first_of_equal_cost_paths():
    graph = Graph(directed=True)
    graph.add_edge("s", "x", 1)
    graph.add_edge("s", "y", 1)
    graph.add_edge("x", "t", 1)
    graph.add_edge("y", "t", 1)
    assert shortest_path(graph, "s", "t") == (2, ["s", "x", "t"])


def test_shortest_path_undirected_uses_edges_both_ways():
    graph = Graph()
    graph.add_edge("a", "b", 2)
    graph.add_edge("c", "b", 2)
    graph.add_edge("a", "c", 5)
    assert shortest_path(graph, "c", "a") == (4, ["c", "b", "a"])


def test_shortest_path_unreachable_target():
    with pytest.raises(NoPathError, match="'e' to 'a'"):
        shortest_path(roads(), "e", "a")


def test_shortest_path_unknown_nodes():
    with pytest.raises(NodeNotFoundError, match="'zz'"):
        shortest_path(roads(), "a", "zz")
    with pytest.raises(NodeNotFoundError, match="'qq'"):
        dijkstra(roads(), "qq")


def test_dijkstra_rejects_negative_weights():
    graph = roads()
    graph.add_edge("e", "a", -2)
    with pytest.raises(NegativeWeightError, match="'e' -> 'a' has negative weight -2"):
        dijkstra(graph, "a")


def test_dijkstra_accepts_zero_weights():
    graph = Graph(directed=True)
    graph.add_edge("a", "b", 0)
    graph.add_edge("b", "c", 0)
    assert dijkstra(graph, "a")[0] == {"a": 0, "b": 0, "c": 0}


def test_dijkstra_skips_stale_queue_entries():
    graph = Graph(directed=True)
    graph.add_edge("s", "far", 10)
    graph.add_edge("s", "near", 1)
    graph.add_edge("near", "far", 1)
    graph.add_edge("far", "end", 1)
    distances, previous = dijkstra(graph, "s")
    assert distances["end"] == 3
    assert previous["far"] == "near"


def test_bfs_distances_count_hops_not_weight():
    assert bfs_distances(roads(), "a") == {"a": 0, "b": 1, "c": 1, "d": 2, "e": 3}


def test_bfs_distances_only_include_reachable_nodes():
    assert bfs_distances(roads(), "d") == {"d": 0, "e": 1}


def test_hop_distance_and_missing_path():
    assert hop_distance(roads(), "c", "e") == 2
    with pytest.raises(NoPathError, match="'d' to 'b'"):
        hop_distance(roads(), "d", "b")
    with pytest.raises(NodeNotFoundError, match="'nowhere'"):
        hop_distance(roads(), "a", "nowhere")
