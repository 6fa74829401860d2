"""The `spectune` command: every subcommand names a runnable module, forwards its arguments untouched, and an
unknown one is one line naming the allowed words (exit 2); pyproject.toml installs it as a console script."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
import tomllib
from pathlib import Path

import pytest

from spectune import cli

PROJECT = Path(__file__).resolve().parents[1]
# `if __name__ == "__main__"` modules that are no command of their own: the sources the sandbox's interpreter
# runs (tasks/grading/: python -I -c), and the console script itself.
NOT_COMMANDS = {"tasks.grading.observer", "tasks.grading.supervisor", "spectune", "spectune.cli"}


def _runnable(module: str) -> bool:
    """What `python -m module` runs: a package's __main__, or a module with an `if __name__ == "__main__"` block."""
    spec = importlib.util.find_spec(module)
    if spec is None:
        return False
    if spec.submodule_search_locations is not None:
        return importlib.util.find_spec(f"{module}.__main__") is not None
    return _has_main_block(Path(spec.origin))


def _has_main_block(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(
        isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and "__name__" in ast.unparse(node.test)
        for node in tree.body
    )


def _project_entries() -> set[str]:
    """Every `python -m` target of the project's packages (tests and fixture projects left out)."""
    found = set()
    packages = [p for p in PROJECT.iterdir() if (p / "__init__.py").exists() and p.name != "tests"]
    for path in (path for package in packages for path in package.rglob("*.py")):
        if path.is_relative_to(PROJECT / "tasks" / "projects"):
            continue
        parts = path.relative_to(PROJECT).with_suffix("").parts
        if parts[-1] == "__main__":
            found.add(".".join(parts[:-1]))
        elif _has_main_block(path):
            found.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def test_every_subcommand_names_a_runnable_module_once():
    assert [c.module for c in cli.COMMANDS if not _runnable(c.module)] == []
    words = [c.words for c in cli.COMMANDS]
    assert len(set(words)) == len(words)
    assert len({c.module for c in cli.COMMANDS}) == len(cli.COMMANDS)
    for top in ("tune", "finish", "run", "eval", "bench", "export", "engine", "sandbox", "train", "gguf"):
        assert (top,) in words, f"the issue's subcommand {top!r}"


def test_every_python_m_entry_of_the_project_has_a_subcommand():
    entries = _project_entries()
    assert {"tuner.search", "runners.run", "bench", "tasks.sandbox"} <= entries  # the scan sees entries
    assert sorted(entries - NOT_COMMANDS - {c.module for c in cli.COMMANDS}) == []


def test_help_and_no_arguments_print_the_table(capsys):
    for argv in ([], ["--help"], ["-h"]):
        assert cli.main(argv) == 0
        out = capsys.readouterr().out
        for command in cli.COMMANDS:
            assert any(
                line.split()[: len(command.words) + 1] == [*command.words, command.module] for line in out.splitlines()
            ), command


def test_an_unknown_subcommand_is_one_line_naming_the_allowed_ones(capsys):
    assert cli.main(["tnue", "hardware=rtx4060"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'tnue'" in err
    assert "tune, finish, run, eval, bench, export, engine, sandbox" in err
    assert cli.main(["llama"]) == 2  # a group without a module of its own names its second words
    assert "install, caps, kinds" in capsys.readouterr().err


def test_the_longest_words_win_and_the_rest_passes_on_untouched():
    command, rest = cli.resolve(["train", "mtp", "--target", "t", "--out", "o"])
    assert (command.module, rest) == ("training.mtp", ["--target", "t", "--out", "o"])
    command, rest = cli.resolve(["train", "--quick"])
    assert (command.module, rest) == ("training.build", ["--quick"])
    command, rest = cli.resolve(["tune", "hardware=rtx4060", "task=swe-lite"])
    assert (command.module, rest) == ("tuner.search", ["hardware=rtx4060", "task=swe-lite"])


def test_forwarding_runs_the_module_as_main_with_its_arguments(tmp_path, monkeypatch, capsys):
    (tmp_path / "argv_probe.py").write_text(
        "import sys\nprint(__name__, sys.argv[0].endswith('argv_probe.py'), sys.argv[1:])\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    before = sys.argv[:]
    cli.forward("argv_probe", ["a", "task.limit=2", "--x"])
    assert capsys.readouterr().out == "__main__ True ['a', 'task.limit=2', '--x']\n"
    assert sys.argv == before


def test_a_real_subcommand_reaches_its_modules_parser(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["sandbox", "--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("usage: python -m tasks.sandbox")


def test_a_hydra_subcommand_sees_its_overrides(capsys):
    from hydra.core.global_hydra import GlobalHydra

    try:
        cli.main(["run", "--cfg", "job", "task.limit=7", "run.name=via-spectune"])
    finally:
        GlobalHydra.instance().clear()
    out = capsys.readouterr().out
    assert "limit: 7" in out and "name: via-spectune" in out


def test_pyproject_installs_the_console_script():
    project = tomllib.loads((PROJECT / "pyproject.toml").read_text())
    target = project["project"]["scripts"]["spectune"]
    module, _, attribute = target.partition(":")
    assert getattr(importlib.import_module(module), attribute) is cli.main
    packages = project["tool"]["setuptools"]["packages"]["find"]["include"]
    assert "spectune*" in packages


def test_docs_architecture_shows_the_table_as_help_prints_it():
    assert cli.usage() in (PROJECT / "docs" / "architecture.md").read_text()


def test_the_command_imports_nothing_of_spectune_at_module_level():
    tree = ast.parse(Path(cli.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in tree.body if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}
