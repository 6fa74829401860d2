"""Alias kept for old commands: `python -m runners.bench ...` runs `python -m bench ...` (bench/__main__.py)."""

from bench.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main())
