import pytest
from miniconf import Config, ConfigError, dumps, loads


def test_dump_root_values_then_sections():
    config = Config({"name": "demo", "server": {"port": 8080, "debug": False}})
    assert dumps(config) == 'name = "demo"\n\n[server]\nport = 8080\ndebug = false\n'


def test_dump_plain_dict():
    assert dumps({"a": {"x": [1, 2]}}) == "[a]\nx = [1, 2]\n"


def test_dump_empty_config():
    assert dumps(Config()) == ""


def test_dump_nested_sections_use_dotted_headers():
    text = dumps({"server": {"host": "h", "http": {"timeout": 2.5}}})
    assert text == '[server]\nhost = "h"\n\n[server.http]\ntimeout = 2.5\n'


def test_dump_skips_header_for_sections_with_only_subsections():
    assert dumps({"db": {"primary": {"url": "x"}}}) == '[db.primary]\nurl = "x"\n'


def test_dump_keeps_empty_sections():
    assert dumps({"empty": {}, "x": {"y": 1}}) == "[empty]\n\n[x]\ny = 1\n"


def test_dump_escapes_strings():
    assert dumps({"msg": 'say "hi"\n'}) == 'msg = "say \\"hi\\"\\n"\n'


def test_dump_rejects_bad_keys():
    with pytest.raises(ConfigError, match="cannot write key 'my key'"):
        dumps({"my key": 1})
    with pytest.raises(ConfigError, match="cannot write key 3"):
        dumps({3: 1})
    with pytest.raises(ConfigError, match=r"cannot write key 'a\.b'"):
        dumps({"a.b": {"x": 1}})


def test_dump_rejects_bad_values():
    with pytest.raises(ConfigError, match="cannot write value of type NoneType"):
        dumps({"x": None})


def test_round_trip_through_text():
    text = """
title = "t\\u00e9st"
[server]
port = 8080
ratio = 1e-07
flags = [true, false]
[server.tls]
cert = 'C:\\certs\\a.pem'
[logging.handlers.file]
path = "/var/log/app.log"
"""
    config = loads(text)
    assert loads(dumps(config)) == config
    assert dumps(loads(dumps(config))) == dumps(config)
