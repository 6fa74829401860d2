"""What a llama-server binary offers a tuner space: each drafter's `--spec-type` kinds, offered or left out.

The probe (serving/llama_capabilities.py) reads the binary's `--help`; whether a drafter is offered is the
space's rule (tuner/space.py), so the report that joins the two lives here, above both.

    python -m tuner.server_kinds [--binary PATH] [--space full]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from omegaconf import OmegaConf

from serving.llama_binary import find_llama_server
from serving.llama_capabilities import Capabilities, probe
from tuner.space import drafter_knobs, load_space, spec_kinds

CONF_SPACE = Path(__file__).resolve().parents[1] / "conf" / "space"


def report(caps: Capabilities, space: str = "full") -> list[str]:
    """The lines the command prints: the binary, its kinds, each drafter of `space` with its kinds and state."""
    node = OmegaConf.to_container(OmegaConf.load(CONF_SPACE / f"{space}.yaml"), resolve=True)
    loaded = load_space(
        node,
        has_draft=True,
        has_mtp=True,
        has_eagle3=True,
        backend="llama-server",
        server_kinds=frozenset(caps.spec_types),
        server_binary=caps.binary,
    )
    lines = [f"binary: {caps.binary}", f"--spec-type kinds: {', '.join(caps.spec_types)}", f"drafters (space {space}):"]
    for name, block in node["drafters"].items():
        kinds = " | ".join(spec_kinds(name, drafter_knobs(name, block))) or "-"
        state = "offered" if name in loaded.drafters else f"left out: {loaded.left_out.get(name, '?')}"
        lines.append(f"  {name} -> {kinds}: {state}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Command line: print the binary, its --spec-type kinds and each drafter's kind, offered or left out."""
    parser = argparse.ArgumentParser(prog="python -m tuner.server_kinds", description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=None, help="a llama-server (default: the one spectune finds)")
    parser.add_argument("--space", default="full", help="the conf/space file whose drafters to list (default full)")
    args = parser.parse_args(argv)
    if not (CONF_SPACE / f"{args.space}.yaml").is_file():
        spaces = ", ".join(sorted(p.stem for p in CONF_SPACE.glob("*.yaml")))
        print(f"error: no space {args.space!r} (allowed: {spaces})")
        return 2
    try:
        found = find_llama_server(args.binary)
        print(f"found: {found.describe()}")
        print("\n".join(report(probe(found), args.space)))
    except (FileNotFoundError, RuntimeError, ValueError) as exc:
        print(f"error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
