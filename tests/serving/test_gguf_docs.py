"""docs/gguf.md, the "Bring your GGUF" page, stays true to the code: every server.* key in its table, with
the schema's default, and every command it shows naming a module that exists."""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

from runners.config import ServerConf

PAGE = Path(__file__).resolve().parents[2] / "docs" / "gguf.md"


def test_every_server_key_is_in_the_table_with_its_default():
    rows = {
        m.group(1): m.group(2).strip()
        for m in re.finditer(r"^\| `server\.(\w+)` \| ([^|]+) \|", PAGE.read_text(), re.MULTILINE)
    }
    for field in dataclasses.fields(ServerConf):
        assert field.name in rows, f"server.{field.name} is missing from docs/gguf.md's table"
        default = (
            "null"
            if field.default is None
            else f"{field.default:g}"
            if isinstance(field.default, float)
            else str(field.default)
        )
        assert rows[field.name] == default, (field.name, rows[field.name], default)
    assert set(rows) == {f.name for f in dataclasses.fields(ServerConf)}, "the table names a key the schema lacks"


def test_every_python_m_command_names_a_module_that_exists():
    modules = set(re.findall(r"python -m ([\w.]+)", PAGE.read_text()))
    assert {"tuner.search", "serving.gguf_memory", "serving.gguf", "serving.llama_install"} <= modules
    for module in modules:
        assert importlib.util.find_spec(module) is not None, module
    assert (PAGE.parent.parent / "README.md").read_text().count("docs/gguf.md") >= 1, "README links the page"
