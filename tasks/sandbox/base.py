"""The sandbox Protocol: where an agent's commands and the evaluation run.

A sandbox holds one workspace (a copy of a task's repository) at one fixed path, runs shell
commands in it with limits, and reports results as data: a command's own failure, timeout or
flood of output is a `CommandResult`, never an exception. Exceptions are for the sandbox itself
breaking (cannot start, daemon missing), with a message that says what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

WORKSPACE = "/workspace"  # where the repository appears inside every sandbox (deterministic output)
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_OUTPUT_LIMIT = 64 * 1024  # bytes of combined stdout+stderr kept per command
DIFF_LIMIT = 32 * 2**20  # bytes of a workspace's final diff; a longer one is `patch_too_large`, never cut


@dataclass
class CommandResult:
    """What one command did."""

    returncode: int | None  # None when the command was killed (timeout)
    output: str  # stdout and stderr interleaved, capped with an elision marker
    timed_out: bool = False
    truncated: bool = False  # output exceeded the cap; the middle was elided
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        """Exited 0 within its time."""
        return self.returncode == 0 and not self.timed_out


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the command): the message says how to fix it."""


class PatchTooLargeError(SandboxError):
    """The workspace's diff exceeds DIFF_LIMIT (reading stopped there: host memory stays bounded)."""


class Sandbox(Protocol):
    """One workspace, commands run inside it, its diff against the starting state."""

    name: str

    def start(self, source: Path) -> None:
        """Copy the directory `source` into a fresh workspace at WORKSPACE (git-tracked baseline)."""
        ...

    def run(self, command: str, timeout: float = DEFAULT_TIMEOUT_S) -> CommandResult:
        """Run a shell command (bash -c) in the workspace; the whole process tree dies at timeout."""
        ...

    def run_trusted(self, program: str, job: dict, timeout: float = DEFAULT_TIMEOUT_S) -> CommandResult:
        """Run the grader's Python `program` as the sandbox's trusted user; it starts the untrusted part of `job`
        as the command user (tasks/grading/supervisor.py)."""
        ...

    def diff(self) -> str:
        """Unified git diff of the workspace against its starting state (new files included)."""
        ...

    def close(self) -> None:
        """Kill anything left running and remove the workspace. Safe to call twice."""
        ...
