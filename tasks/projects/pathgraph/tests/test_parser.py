import pytest
from pathgraph import EdgeLine, Graph, NodeLine, ParseError, format_graph, parse_graph, parse_lines


def test_parse_directed_edges_with_weights():
    graph = parse_graph("a -> b : 3\nb -> c : 0.5")
    assert graph.directed
    assert graph.edges() == [("a", "b", 3.0), ("b", "c", 0.5)]


def test_parse_weight_defaults_to_one_and_spacing_is_flexible():
    graph = parse_graph("a->b\nb   ->   c:2")
    assert graph.edges() == [("a", "b", 1.0), ("b", "c", 2.0)]


def test_parse_undirected_edges():
    graph = parse_graph("x -- y : 2\ny -- z")
    assert not graph.directed
    assert graph.has_edge("y", "x")
    assert graph.weight("z", "y") == 1.0


def test_parse_skips_comments_and_blank_lines_and_keeps_lone_nodes():
    text = "# header\n\n  solo  \na -> b : 2  # trailing comment\nc\n"
    graph = parse_graph(text)
    assert graph.nodes() == ["solo", "a", "b", "c"]
    assert graph.edges() == [("a", "b", 2.0)]


def test_parse_lines_reports_line_numbers():
    items = parse_lines("n1\n\nfoo.bar -- baz_2 : 4\nlast")
    assert items == [NodeLine("n1", 1), EdgeLine("foo.bar", "baz_2", 4.0, False, 3), NodeLine("last", 4)]


def test_parse_empty_text_gives_empty_undirected_graph():
    graph = parse_graph("# nothing here\n")
    assert len(graph) == 0
    assert not graph.directed


def test_parse_rejects_mixed_arrows():
    with pytest.raises(ParseError, match="line 2: edge '--' mixed with '->' edges") as info:
        parse_graph("a -> b\nb -- c")
    assert info.value.line_number == 2
    with pytest.raises(ParseError, match="line 3: edge '->' mixed with '--' edges"):
        parse_graph("a -- b\n\nb -> c")


def test_parse_rejects_bad_weight():
    with pytest.raises(ParseError, match="line 1: invalid weight 'heavy'"):
        parse_graph("a -> b : heavy")


def test_parse_rejects_infinite_weight():
    with pytest.raises(ParseError, match="weight must be finite, got 'inf'"):
        parse_graph("a -> b : 1\nb -> c : inf")


def test_parse_rejects_unrecognised_line():
    with pytest.raises(ParseError, match="line 2: cannot parse 'a => b'") as info:
        parse_graph("a -> b\na => b")
    assert info.value.line_number == 2


def test_format_graph_writes_weights_and_isolated_nodes():
    graph = Graph(directed=True)
    graph.add_edge("a", "b", 2.5)
    graph.add_edge("b", "c", 3)
    graph.add_node("z")
    assert format_graph(graph) == "a -> b : 2.5\nb -> c : 3\nz"


def test_format_graph_undirected_round_trip():
    text = "p -- q : 1\nq -- r : 0.25\nlone"
    graph = parse_graph(text)
    assert format_graph(graph) == text
    assert parse_graph(format_graph(graph)).edges() == graph.edges()


def test_parse_rejects_other_non_finite_weights():
    with pytest.raises(ParseError, match="line 1: weight must be finite, got '-inf'"):
        parse_graph("a -> b : -inf")
    with pytest.raises(ParseError, match="line 1: weight must be finite, got 'inf'"):
        parse_graph("x -- y : inf")
    with pytest.raises(ParseError, match="line 1: weight must be finite, got 'nan'"):
        parse_graph("p -> q : nan")
