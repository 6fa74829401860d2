"""Shared test helpers: the CI flag and sandbox factories for tests that run in both sandboxes."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

IN_CI = os.environ.get("CI", "").strip().lower() == "true"
SANDBOX_KINDS = ("local", "docker")


def sandbox_factory_or_skip(kind: str, **options) -> Callable:
    """A `make_sandbox(kind)` factory; docker without a daemon or image skips here and fails under CI=true."""
    from tasks.sandbox import SandboxError, make_sandbox

    if kind == "docker":
        try:
            make_sandbox("docker", **options).close()
        except SandboxError as exc:
            if IN_CI:
                raise
            pytest.skip(f"docker sandbox unavailable: {exc}")
    return lambda: make_sandbox(kind, **options)
