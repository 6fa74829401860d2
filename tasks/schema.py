"""Task instances in the SWE-bench format, so real SWE-bench data plugs in unchanged.

SWE-bench stores FAIL_TO_PASS / PASS_TO_PASS as JSON-encoded strings of pytest node ids; records
keep that encoding on disk and `Instance` holds decoded lists. The offline suite adds three
fields: `bug_patch` (applied to the clean project to materialise the task), `family` and
`difficulty` of its mutation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from common.errors import ConfigError

SWE_BENCH_FIELDS = (
    "instance_id",
    "repo",
    "base_commit",
    "problem_statement",
    "hints_text",
    "patch",
    "test_patch",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "version",
    "created_at",
)
OFFLINE_FIELDS = ("bug_patch", "family", "difficulty")
DIFFICULTIES = ("locatable", "semantic")


def _decode_ids(value: Any, name: str, instance_id: str) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    if value is None or value == "":
        return []
    try:
        ids = json.loads(value)
    except (TypeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{instance_id}: {name} is not a JSON list of test ids: {value!r}") from exc
    if not isinstance(ids, list):
        raise ConfigError(f"{instance_id}: {name} must encode a list, got {type(ids).__name__}")
    return [str(v) for v in ids]


@dataclass(frozen=True)
class Instance:
    """One task: a repository state, an issue, and the tests that decide success."""

    instance_id: str
    repo: str  # SWE-bench: "owner/name"; swe-lite: the project name
    base_commit: str  # SWE-bench: a git sha; swe-lite: content hash of the clean project
    problem_statement: str  # the issue text the agent sees
    patch: str = ""  # gold fix (never shown to the agent)
    test_patch: str = ""  # adds the tests that decide success (applied only at evaluation)
    fail_to_pass: list[str] = field(default_factory=list)  # must go from failing to passing
    pass_to_pass: list[str] = field(default_factory=list)  # must keep passing
    hints_text: str = ""
    version: str = ""
    created_at: str = ""
    bug_patch: str = ""  # swe-lite: turns the clean project into the buggy one
    family: str = ""  # swe-lite: mutation family
    difficulty: str = ""  # swe-lite: "locatable" or "semantic"

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> Instance:
        """Build from a SWE-bench-style record (test-id lists may be JSON strings or lists)."""
        missing = [k for k in ("instance_id", "repo", "base_commit", "problem_statement") if not rec.get(k)]
        if missing:
            raise ConfigError(f"record {rec.get('instance_id', '?')!r} lacks required field(s) {missing}")
        iid = str(rec["instance_id"])
        return cls(
            instance_id=iid,
            repo=str(rec["repo"]),
            base_commit=str(rec["base_commit"]),
            problem_statement=str(rec["problem_statement"]),
            patch=rec.get("patch") or "",
            test_patch=rec.get("test_patch") or "",
            fail_to_pass=_decode_ids(rec.get("FAIL_TO_PASS"), "FAIL_TO_PASS", iid),
            pass_to_pass=_decode_ids(rec.get("PASS_TO_PASS"), "PASS_TO_PASS", iid),
            hints_text=rec.get("hints_text") or "",
            version=str(rec.get("version") or ""),
            created_at=str(rec.get("created_at") or ""),
            bug_patch=rec.get("bug_patch") or "",
            family=rec.get("family") or "",
            difficulty=rec.get("difficulty") or "",
        )

    def to_record(self) -> dict[str, Any]:
        """The on-disk record: SWE-bench field names, test ids as JSON strings."""
        rec: dict[str, Any] = {
            "instance_id": self.instance_id,
            "repo": self.repo,
            "base_commit": self.base_commit,
            "problem_statement": self.problem_statement,
            "hints_text": self.hints_text,
            "patch": self.patch,
            "test_patch": self.test_patch,
            "FAIL_TO_PASS": json.dumps(self.fail_to_pass),
            "PASS_TO_PASS": json.dumps(self.pass_to_pass),
            "version": self.version,
            "created_at": self.created_at,
        }
        if self.bug_patch or self.family or self.difficulty:
            rec.update(bug_patch=self.bug_patch, family=self.family, difficulty=self.difficulty)
        return rec

    def agent_view(self) -> dict[str, str]:
        """The only fields an agent may see: never the patches or the deciding tests."""
        return {"instance_id": self.instance_id, "repo": self.repo, "problem_statement": self.problem_statement}
