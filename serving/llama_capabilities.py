"""What a llama-server binary can do: the `--spec-type` kinds and the flags its `--help` lists.

spectune's flags target the pinned llama.cpp release (serving/llama_binary.py), but `server.binary=PATH`
may name a user's own build, older or newer or configured differently, that lacks speculative kinds or
flags the pinned one has. Such a binary refuses an unknown kind at start ("unknown speculative type"), so
a tuner would spend a trial to learn what `--help` already says. `probe(binary)` reads `--help` once per
build (cached by path, size and modification time under spectune's cache root) so the tuner offers only
the drafters whose exported `--spec-type` that binary has, and the llama-server backend refuses the rest
with the reason.

    python -m serving.llama_capabilities [--binary PATH]     # the kinds and flags of one binary
    python -m tuner.server_kinds [--binary PATH] [--space full]   # each drafter, offered or left out
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from common.cache import cache_root
from common.errors import ConfigError
from common.files import write_atomic
from serving.llama_binary import LlamaBinary, find_llama_server

HELP_TIMEOUT_S = 60
SPEC_TYPE = "--spec-type"
# An entry line of the help: flag names (aliases after commas) at column 0, then an optional value hint and,
# after two or more spaces, the description (llama.cpp's common_arg::to_string pads it to column 40 or,
# when the names are long, starts it on the next line).
_NAME = r"-{1,2}[A-Za-z0-9][\w.+-]*"
_ENTRY = re.compile(rf"^(?P<names>{_NAME}(?:,\s*{_NAME})*)(?P<rest>.*)$")
_KIND = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
# A list of kinds written in a description: words joined by commas or bars (wrapped lines already joined).
_LIST = re.compile(r"[a-z0-9][a-z0-9_.-]*(?:\s*[,|]\s*[a-z0-9][a-z0-9_.-]*)+")


@dataclass(frozen=True)
class Capabilities:
    """A llama-server's speculative kinds (in its help's order) and every flag name its help lists."""

    spec_types: tuple[str, ...]
    flags: frozenset[str]
    binary: str


def _entries(text: str) -> list[tuple[list[str], str, list[str]]]:
    """(flag names, value hint, description lines) of every help entry."""
    entries: list[tuple[list[str], str, list[str]]] = []
    for line in text.splitlines():
        match = _ENTRY.match(line)
        if match:
            hint, *desc = re.split(r"\s{2,}", match["rest"], maxsplit=1)
            names = [name.strip() for name in match["names"].split(",")]
            entries.append((names, hint.strip(), [d.strip() for d in desc if d.strip()]))
        elif line[:1].isspace():  # an indented line (or a padded empty one) continues the entry above
            if entries and line.strip():
                entries[-1][2].append(line.strip())
        else:  # an empty line or a section header ("----- ... -----") ends the entry
            entries.append(([], "", []))
    return [entry for entry in entries if entry[0]]


def _hint_values(hint: str) -> list[str]:
    """The kinds a value hint enumerates (`a,b,c`, `[a|b|c]`, `{a,b}`), else none (a placeholder like TYPE)."""
    if not re.search(r"[,|]", hint):
        return []
    words = [word.strip() for word in re.split(r"[,|]", hint.strip("[]{}<>() "))]
    return words if all(_KIND.match(word) for word in words) else []


def _description_values(lines: list[str]) -> list[str]:
    """The longest comma/bar list in a description, wrapped lines joined and parentheses ("(default: ...)",
    "(env: ...)") dropped: where a help that writes a placeholder hint lists the kinds."""
    text = re.sub(r"\([^)]*\)", " ", " ".join(lines))
    runs = [re.split(r"\s*[,|]\s*", run) for run in _LIST.findall(text)]
    return max(runs, key=len, default=[])


def parse_help(text: str, binary: str = "?") -> Capabilities:
    """The capabilities `--help` output describes; ValueError when it has no --spec-type entry."""
    entries = _entries(text)
    flags = frozenset(name for names, _, _ in entries for name in names)
    spec = next((entry for entry in entries if SPEC_TYPE in entry[0]), None)
    if spec is None:
        raise ConfigError(
            f"{binary}: its --help has no {SPEC_TYPE} (an old llama.cpp build without speculative types; "
            "spectune needs a release with --spec-type, e.g. python -m serving.llama_install)"
        )
    _, hint, description = spec
    kinds = _hint_values(hint) or _description_values(description)
    if not kinds:
        raise ConfigError(f"{binary}: its --help lists {SPEC_TYPE} but no kinds it takes (hint {hint!r})")
    return Capabilities(tuple(dict.fromkeys(kinds)), flags, binary)


def _path(binary: LlamaBinary | str | Path) -> Path:
    return Path(binary.path if isinstance(binary, LlamaBinary) else binary).expanduser().resolve()


def cache_path(binary: LlamaBinary | str | Path) -> Path:
    """The cache file of one build: keyed by its resolved path, size and modification time (a rebuild differs)."""
    path = _path(binary)
    info = path.stat()
    key = hashlib.sha256(f"{path}|{info.st_size}|{info.st_mtime_ns}".encode()).hexdigest()[:16]
    return cache_root("llama-capabilities") / f"{path.name}-{key}.json"


def _load(file: Path, binary: str) -> Capabilities | None:
    """The cached capabilities, or None when there are none or the file does not parse (it is rewritten)."""
    try:
        data = json.loads(file.read_text())
        caps = Capabilities(tuple(data["spec_types"]), frozenset(data["flags"]), str(data["binary"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    ok = caps.binary == binary and all(isinstance(x, str) for x in (*caps.spec_types, *caps.flags))
    return caps if ok and caps.spec_types else None


def _store(file: Path, caps: Capabilities) -> None:
    """Write the cache file whole or not at all (a concurrent reader never sees half of it)."""
    data = {"binary": caps.binary, "spec_types": list(caps.spec_types), "flags": sorted(caps.flags)}
    write_atomic(file, json.dumps(data, indent=1))


def _run_help(path: Path) -> str:
    """`<binary> --help` (stdout, then stderr); RuntimeError in one line when it does not run cleanly."""
    # No stdin, no inherited LLAMA_ARG_* settings (a bad one could make --help fail), offline.
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")} | {"LLAMA_ARG_OFFLINE": "1"}
    try:
        run = subprocess.run(
            [str(path), "--help"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=HELP_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    except OSError as exc:
        raise RuntimeError(f"{path}: cannot run it ({exc.strerror or exc})") from None
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{path}: `--help` did not finish within {HELP_TIMEOUT_S} s") from None
    if run.returncode != 0:
        lines = [line.strip() for line in run.stderr.splitlines() if line.strip()]
        raise RuntimeError(
            f"{path}: `--help` failed with exit code {run.returncode}: {lines[-1] if lines else '(no stderr)'}"
        )
    return run.stdout + "\n" + run.stderr


def probe(binary: LlamaBinary | str | Path) -> Capabilities:
    """The binary's capabilities from its `--help`, cached per build (RuntimeError: it does not run)."""
    path = _path(binary)
    if not path.is_file():
        raise RuntimeError(f"{path}: no such file")
    file = cache_path(path)
    cached = _load(file, str(path))
    if cached is not None:
        return cached
    caps = parse_help(_run_help(path), str(path))
    _store(file, caps)
    return caps


def _kinds_of(flags_or_kinds: str | Sequence[str] | Sequence[tuple[str, str | None]]) -> list[str]:
    """The --spec-type kinds in a kind string ("a,b"), command-line words or (flag, value) pairs."""
    if isinstance(flags_or_kinds, str):
        values = [flags_or_kinds]
    elif flags_or_kinds and isinstance(flags_or_kinds[0], tuple):
        values = [str(value) for name, value in flags_or_kinds if name == SPEC_TYPE]  # type: ignore[misc]
    else:
        words = list(flags_or_kinds)
        values = [str(words[i + 1]) for i, word in enumerate(words[:-1]) if word == SPEC_TYPE]
    return list(dict.fromkeys(k.strip() for value in values for k in value.split(",") if k.strip()))


def missing_kinds(
    flags_or_kinds: str | Sequence[str] | Sequence[tuple[str, str | None]], caps: Capabilities
) -> list[str]:
    """The --spec-type kinds of an exported configuration (a kind list, argv or flag pairs) the binary lacks."""
    return [kind for kind in _kinds_of(flags_or_kinds) if kind not in caps.spec_types]


def offered(kinds: Iterable[str]) -> str:
    """The kinds a server offers, for messages: speculation kinds only ("none" when that is all)."""
    order = list(dict.fromkeys(kinds))
    shown = [kind for kind in order if kind != "none"]
    return ", ".join(shown) or "none"


def lacks_reason(kinds: Sequence[str], binary: str, available: Iterable[str]) -> str:
    """Why a binary cannot run these kinds, in one line (the tuner's left-out note, the backend's refusal)."""
    names = ", ".join(kinds)
    return f"this llama-server ({binary}) has no --spec-type {names} (it offers: {offered(available)})"


def main(argv: list[str] | None = None) -> int:
    """Command line: print the binary and its --spec-type kinds (each drafter's state: python -m tuner.server_kinds)."""
    parser = argparse.ArgumentParser(prog="python -m serving.llama_capabilities", description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=None, help="a llama-server (default: the one spectune finds)")
    parser.add_argument("--space", default="full", help="the space named in the pointer to tuner.server_kinds")
    args = parser.parse_args(argv)
    try:
        found = find_llama_server(args.binary)
        print(f"found: {found.describe()}")
        caps = probe(found)
    except (FileNotFoundError, RuntimeError, ValueError) as exc:
        print(f"error: {exc}")
        return 1
    print(f"binary: {caps.binary}")
    print(f"--spec-type kinds: {', '.join(caps.spec_types)}")
    # Whether a drafter is offered is the tuner space's rule, a floor above this one.
    print(f"each drafter of space {args.space}, offered or left out: python -m tuner.server_kinds --space {args.space}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
