"""TensorRT-LLM's speculative configuration classes as pinned key-set nodes, read with `ast` (nothing imported).

    python export/reference/read_trtllm.py LLM_ARGS_PY [--write]

LLM_ARGS_PY is tensorrt_llm/llmapi/llm_args.py of the pinned source (export/reference/README.md says which).
Prints one node per class, `tensorrt_llm.llmapi.llm_args.<Class>`: every field the class takes, its own and the
ones it inherits inside the file, as [name, annotation, default]; private attributes (a leading underscore) are
left out, a validation alias is listed as its own key, and a pydantic `Field(...)` default is written without
its description / telemetry text. `--write` puts the nodes into speculative-config-keys.json beside this file.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

KEYS_FILE = Path(__file__).resolve().parent / "speculative-config-keys.json"
PREFIX = "tensorrt_llm.llmapi.llm_args."
ROOT = "DecodingBaseConfig"  # every speculative configuration class derives from it
EXTRA = ("SAEnhancerConfig",)  # not a DecodingBaseConfig, but a key (sa_config) of several of them
PROSE = {"description", "telemetry", "json_schema_extra"}  # documentation, not part of a field's type or default

Row = list[str]


def _default(value: ast.expr | None) -> str:
    """The default as source text: a Field(...) call without its prose keywords, else the value itself."""
    if value is None:
        return "<required>"
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "Field":
        kept = [k for k in value.keywords if k.arg not in PROSE]
        return ast.unparse(ast.Call(func=value.func, args=value.args, keywords=kept))
    return ast.unparse(value)


def _aliases(value: ast.expr | None, name: str) -> list[str]:
    """Other names a field is read under (validation_alias=AliasChoices(...) or a plain string alias)."""
    if not isinstance(value, ast.Call):
        return []
    for keyword in value.keywords:
        if keyword.arg != "validation_alias":
            continue
        node = keyword.value
        names = node.args if isinstance(node, ast.Call) else [node]
        return [a.value for a in names if isinstance(a, ast.Constant) and a.value != name]
    return []


def own_fields(cls: ast.ClassDef) -> list[Row]:
    """The public fields a class body declares, in order, with their aliases."""
    rows: list[Row] = []
    for stmt in cls.body:
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
            continue
        name = stmt.target.id
        if name.startswith("_"):  # PrivateAttr: not settable from a configuration
            continue
        rows.append([name, ast.unparse(stmt.annotation), _default(stmt.value)])
        rows += [[alias, f"alias of {name}", rows[-1][2]] for alias in _aliases(stmt.value, name)]
    return rows


def read_nodes(source: str) -> dict[str, list[Row]]:
    """Every DecodingBaseConfig subclass (and SAEnhancerConfig) of `source` with its full field list."""
    classes = {n.name: n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)}

    def bases(name: str) -> list[str]:
        return [b.id for b in classes[name].bases if isinstance(b, ast.Name) and b.id in classes]

    def lineage(name: str) -> list[str]:  # the class and its in-file ancestors, base first
        return [a for b in bases(name) for a in lineage(b)] + [name]

    def fields(name: str) -> list[Row]:
        merged: dict[str, Row] = {}
        for ancestor in lineage(name):
            for row in own_fields(classes[ancestor]):
                merged[row[0]] = row  # a subclass's redeclaration replaces the inherited one, in place
        return list(merged.values())

    chosen = [n for n in classes if ROOT in lineage(n) or n in EXTRA]
    if ROOT not in classes:
        raise SystemExit(f"no class {ROOT} in the source: is it tensorrt_llm/llmapi/llm_args.py?")
    return {PREFIX + name: fields(name) for name in chosen}


def main(argv: list[str] | None = None) -> int:
    """Print (or --write) the nodes read from the given llm_args.py."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("--write", action="store_true", help=f"merge the nodes into {KEYS_FILE.name}")
    args = parser.parse_args(argv)
    nodes = read_nodes(args.source.read_text(encoding="utf-8"))
    if not args.write:
        json.dump(nodes, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    pinned = json.loads(KEYS_FILE.read_text(encoding="utf-8"))
    pinned = {k: v for k, v in pinned.items() if not k.startswith(PREFIX)} | nodes
    KEYS_FILE.write_text(json.dumps(pinned, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
