"""`python -m tasks.sandbox build-image | status | tool-time`: the docker sandbox's image and daemon, tool cost.

    python -m tasks.sandbox status
    python -m tasks.sandbox tool-time [--project durationparse] [--repeats 7]
    python -m tasks.sandbox overhead [--before REV] [--runs 30] [--rounds 5]
    python -m tasks.sandbox build-image [--tag spectune-sandbox:latest] [--offline | --dockerfile]

build-image picks `--dockerfile` (docker build, FROM debian:bookworm-slim) when Docker Hub answers
within 3 s and `--offline` (debootstrap from the host's Debian mirror + docker import, cached under
~/.cache/spectune/rootfs) otherwise.
"""

from __future__ import annotations

import argparse
import sys

from tasks.sandbox.base import SandboxError
from tasks.sandbox.image import DEFAULT_TAG, build_image, image_exists


def _status(args: argparse.Namespace) -> int:
    from tasks.sandbox.docker import BUILD_HELP, connect, host_python_paths

    try:
        client = connect(args.base_url)
    except SandboxError as e:
        print(f"daemon: unreachable\n  {e}")
        return 1
    version = client.version()
    print(f"daemon: reachable (Docker {version.get('Version', '?')}, API {version.get('ApiVersion', '?')})")
    if image_exists(client, args.tag):
        image = client.images.get(args.tag)
        built_by = (image.labels or {}).get("org.spectune.sandbox.built-by", "unknown")
        size = image.attrs.get("Size", 0) / 2**20
        print(f"image: {args.tag} present ({image.short_id}, {size:.0f} MiB, built by {built_by})")
        code = 0
    else:
        print(f"image: {args.tag} missing. {BUILD_HELP}")
        code = 1
    for host, inside in host_python_paths():
        print(f"host python mount: {host} -> {inside} (read-only)")
    return code


def _build(args: argparse.Namespace) -> int:
    from tasks.sandbox.docker import connect

    try:
        client = connect(args.base_url)
    except SandboxError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    mode = "offline" if args.offline else "dockerfile" if args.dockerfile else "auto"
    try:
        build_image(client, args.tag, mode)
    except Exception as e:
        print(f"error: building {args.tag} failed: {e}", file=sys.stderr)
        return 1
    return 0


def _tool_time(args: argparse.Namespace) -> int:
    from tasks.sandbox.tool_time import main as tool_time

    return tool_time(args.project, args.repeats)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tasks.sandbox", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--base-url", default=None, help="Docker daemon address (default: DOCKER_HOST or the local socket)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build-image", help="build the docker sandbox's image")
    build.add_argument("--tag", default=DEFAULT_TAG)
    how = build.add_mutually_exclusive_group()
    how.add_argument("--offline", action="store_true", help="debootstrap + docker import (no registry needed)")
    how.add_argument("--dockerfile", action="store_true", help="docker build of tasks/sandbox/Dockerfile")
    build.set_defaults(func=_build)
    status = sub.add_parser("status", help="is a daemon reachable, does the image exist")
    status.add_argument("--tag", default=DEFAULT_TAG)
    status.set_defaults(func=_status)
    tool = sub.add_parser("tool-time", help="a project's test run in the local sandbox, per Python environment")
    tool.add_argument("--project", default="durationparse")
    tool.add_argument("--repeats", type=int, default=7)
    tool.set_defaults(
        func=lambda a: __import__("tasks.sandbox.tool_time", fromlist=["main"]).main(a.project, a.repeats)
    )
    over = sub.add_parser("overhead", help="local sandbox start and per-command cost, now against a git revision")
    over.add_argument("--before", default="HEAD", help="the revision whose tasks/sandbox/local.py to compare with")
    over.add_argument("--runs", type=int, default=30, help="run('true') per sandbox")
    over.add_argument("--rounds", type=int, default=5, help="sandboxes per implementation, interleaved")
    over.set_defaults(
        func=lambda a: __import__("tasks.sandbox.overhead", fromlist=["main"]).main(a.before, a.runs, a.rounds)
    )
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
