import pytest
from miniconf import Config, ConfigError, ConfigTypeError, MissingKeyError, loads

TEXT = """
title = "demo"
debug = false
[server]
host = "localhost"
port = 8080
ratio = 0.75
tags = ["web", "api"]
ports = [80, 443]
[server.tls]
enabled = true
"""


def config():
    return loads(TEXT)


def test_get_with_dotted_path():
    assert config().get("server.host") == "localhost"
    assert config()["server.tls.enabled"] is True
    assert config().get("title") == "demo"


def test_get_missing_key_raises_or_returns_default():
    with pytest.raises(MissingKeyError, match=r"no such key 'server\.nope'"):
        config().get("server.nope")
    assert config().get("server.nope", 5) == 5
    assert config().get("title.deeper", None) is None


def test_get_section_returns_config():
    section = config().get("server.tls")
    assert isinstance(section, Config)
    assert section.to_dict() == {"enabled": True}


def test_contains():
    assert "server.port" in config()
    assert "server.tls" in config()
    assert "server.tls.missing" not in config()
    assert 5 not in config()


def test_get_str():
    assert config().get_str("server.host") == "localhost"
    assert config().get_str("server.user", "root") == "root"
    with pytest.raises(ConfigTypeError, match=r"'server\.port' is an int, expected str"):
        config().get_str("server.port")


def test_get_int():
    assert config().get_int("server.port") == 8080
    assert config().get_int("server.workers", 4) == 4
    with pytest.raises(ConfigTypeError, match=r"'server\.ratio' is a float, expected int"):
        config().get_int("server.ratio")


def test_get_int_rejects_booleans():
    with pytest.raises(ConfigTypeError, match="'debug' is a bool, expected int"):
        config().get_int("debug")


def test_get_float_widens_integers():
    value = config().get_float("server.port")
    assert value == 8080.0
    assert isinstance(value, float)
    assert config().get_float("server.ratio") == 0.75
    assert config().get_float("missing", None) is None


def test_get_float_rejects_strings_and_booleans():
    with pytest.raises(ConfigTypeError, match="'title' is a str, expected float"):
        config().get_float("title")
    with pytest.raises(ConfigTypeError, match="'debug' is a bool, expected float"):
        config().get_float("debug")


def test_get_bool():
    assert config().get_bool("debug") is False
    assert config().get_bool("server.tls.enabled") is True
    assert config().get_bool("server.tls.strict", True) is True
    with pytest.raises(ConfigTypeError, match="'title' is a str, expected bool"):
        config().get_bool("title")


def test_get_list():
    assert config().get_list("server.tags") == ["web", "api"]
    assert config().get_list("server.ports", item_type=int) == [80, 443]
    assert config().get_list("server.none", []) == []
    assert config().get_list("server.none", None) is None


def test_get_list_checks_item_type():
    with pytest.raises(ConfigTypeError, match=r"'server\.tags'\[0\] is a str, expected int"):
        config().get_list("server.tags", item_type=int)
    bools = loads("flags = [1, true]")
    with pytest.raises(ConfigTypeError, match=r"'flags'\[1\] is a bool, expected int"):
        bools.get_list("flags", item_type=int)
    assert loads("flags = [true]").get_list("flags", item_type=bool) == [True]


def test_get_list_returns_a_copy():
    conf = config()
    conf.get_list("server.tags").append("x")
    conf.get("server.tags").append("y")
    assert conf.get_list("server.tags") == ["web", "api"]


def test_typed_getter_on_a_section():
    with pytest.raises(ConfigTypeError, match="'server' is a section, expected int"):
        config().get_int("server")


def test_typed_getter_missing_without_default():
    with pytest.raises(MissingKeyError, match="no such key 'nope'"):
        config().get_bool("nope")


def test_section():
    assert config().section("server").get_int("port") == 8080
    with pytest.raises(ConfigTypeError, match="'title' is a str, not a section"):
        config().section("title")


def test_sections_and_keys_in_order():
    assert config().sections() == ["server"]
    assert config().keys() == ["title", "debug"]
    server = config().section("server")
    assert server.sections() == ["tls"]
    assert server.keys() == ["host", "port", "ratio", "tags", "ports"]
    assert list(server) == ["host", "port", "ratio", "tags", "ports", "tls"]


def test_to_dict_is_a_deep_copy():
    conf = config()
    data = conf.to_dict()
    data["server"]["port"] = 1
    assert conf.get_int("server.port") == 8080


def test_constructor_copies_input():
    data = {"a": {"b": 1}}
    conf = Config(data)
    data["a"]["b"] = 2
    assert conf.get("a.b") == 1
    assert Config().to_dict() == {}


def test_equality_and_repr():
    assert loads("x = 1") == Config({"x": 1})
    assert loads("x = 1") != Config({"x": 2})
    assert loads("x = 1") != {"x": 1}
    assert (loads("x = 1") == {"x": 1}) is False
    assert repr(Config({"x": 1})) == "Config({'x': 1})"


def test_merged_overlays_sections():
    base = loads("[s]\na = 1\nb = 2\n[t]\nc = 3")
    extra = loads("top = true\n[s]\nb = 20\n[s.deep]\nd = 4")
    merged = base.merged(extra)
    assert merged.to_dict() == {"s": {"a": 1, "b": 20, "deep": {"d": 4}}, "t": {"c": 3}, "top": True}
    assert base.get_int("s.b") == 2


def test_merged_rejects_section_value_clash():
    with pytest.raises(ConfigError, match="cannot merge a section and a value at 's'"):
        loads("[s]\na = 1").merged(loads("s = 1"))
    with pytest.raises(ConfigError, match="cannot merge a section and a value at 's'"):
        loads("s = 1").merged(loads("[s]\na = 1"))
