"""A cache under /tmp ($SPECTUNE_CACHE in pytest's tmp_path): every command sees /tmp as a fresh private tmpfs, yet
the task Python built in that cache runs, read-only at its own path, and /tmp holds nothing else of the host's.

The task Python is built once for the module (a few seconds); each test points $SPECTUNE_CACHE at it again. Tests
touch the host only under tmp_path and a few randomly named /tmp paths they check and remove.
"""

from __future__ import annotations

import json
import logging
import os
import random
from pathlib import Path

import pytest

from tasks.sandbox import SandboxError
from tasks.sandbox.local import LocalSandbox
from tasks.sandbox.local_mounts import TMPFS_DIRS
from tasks.sandbox.task_python import ENV_VAR, task_python
from tests.conftest import SANDBOX_KINDS, sandbox_factory_or_skip

# What a command can reach below /tmp, from its own mount table: the mounts stacked on the visible /tmp (the last one
# mounted there), by parent id; mounts that /tmp now hides (the sandbox's staging folders) are left out. Prints JSON
# [[mount point, fs type, read-only], ...], /tmp itself first.
MOUNTS_UNDER_TMP = """python - <<'EOF'
import json
rows = [line.split(" - ") for line in open("/proc/self/mountinfo")]
rows = [(a.split(), b.split()) for a, b in rows]
top = [a[0] for a, _ in rows if a[4] == "/tmp"][-1]
reach, out = {top}, []
for a, b in rows:
    if a[0] == top or a[1] in reach:
        reach.add(a[0])
        out.append((a[4], b[0], "ro" in a[5].split(",")))
print(json.dumps(out))
EOF"""


def _marker() -> str:
    return f"{random.randrange(10**8, 10**9)}"


def _point_at(mp: pytest.MonkeyPatch, cache: Path) -> None:
    mp.setenv("SPECTUNE_CACHE", str(cache))
    mp.delenv(ENV_VAR, raising=False)


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder under pytest's temp dir, below /tmp, with the task Python built in it (once per module)."""
    cache = tmp_path_factory.mktemp("cache")
    if not os.path.realpath(cache).startswith("/tmp/"):
        pytest.skip(f"pytest's temp dir {cache} is not below /tmp (--basetemp or $TMPDIR moved it)")
    with pytest.MonkeyPatch.context() as mp:
        _point_at(mp, cache)
        task_python()
    return cache


@pytest.fixture
def cache(built_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    _point_at(monkeypatch, built_cache)
    return built_cache


def _namespaces_or_skip(sb: LocalSandbox) -> None:
    if sb.isolation == "none":
        pytest.skip(f"no mount namespace here, so no private /tmp: {sb.warnings}")


@pytest.mark.parametrize("kind", SANDBOX_KINDS)
def test_the_task_python_of_a_cache_under_tmp_runs_read_only_in_an_empty_private_tmp(
    kind: str, cache: Path, source: Path, tmp_path: Path
) -> None:
    factory = sandbox_factory_or_skip(kind)
    root = task_python().root
    assert root.is_relative_to(cache)
    host_file = tmp_path / f"host-{_marker()}"  # beside the cache on the host: never seen inside
    host_file.write_text("host\n")
    probe = f"/tmp/spectune-probe-{_marker()}"
    try:
        with factory() as sb:
            if kind == "local":
                _namespaces_or_skip(sb)
            sb.start(source)
            r = sb.run('python -c "import pytest; print(pytest.__file__)"', timeout=60)
            assert r.ok, r.output
            assert r.output.strip().startswith(f"{root}/"), r.output
            r = sb.run(MOUNTS_UNDER_TMP, timeout=60)
            assert r.ok, r.output
            (tmp, *below) = json.loads(r.output)
            assert tmp == ["/tmp", "tmpfs", False]  # the command's own, writable /tmp
            assert [(point, ro) for point, _, ro in below] == [(str(root), True)]  # the task Python only, read-only
            first = Path(str(root)).relative_to("/tmp").parts[0]
            r = sb.run(
                f"ls -A /tmp; cat {host_file}; echo inside > {probe} && cat {probe}; touch {root}/written", timeout=30
            )
            lines = r.output.splitlines()
            assert lines[0] == first, r.output  # nothing else of the host's /tmp
            assert "No such file or directory" in lines[1], r.output
            assert lines[2] == "inside" and "Read-only file system" in lines[3], r.output
            assert not os.path.lexists(probe) and not (root / "written").exists()
            if kind == "local":  # a fresh /tmp per command (docker: one per container)
                assert "No such file or directory" in sb.run(f"cat {probe}", timeout=30).output
    finally:  # what leaked (the asserts above say so) is removed all the same
        for leaked in (Path(probe), root / "written"):
            if leaked.exists():
                leaked.unlink()


def test_the_private_tmp_keeps_its_size_cap_and_is_fresh_per_command(cache: Path, source: Path) -> None:
    with LocalSandbox(tmpfs_size="2m") as sb:
        _namespaces_or_skip(sb)
        sb.start(source)
        r = sb.run("head -c 3000000 /dev/zero > /tmp/big; echo rc=$?; python -c 'print(1 + 1)'", timeout=30)
        assert "No space left on device" in r.output and "rc=1" in r.output and r.output.endswith("2\n"), r.output
        r = sb.run("ls -A /tmp /var/tmp /dev/shm", timeout=30)
        assert "big" not in r.output, r.output


def test_exposed_dirs_and_files_under_tmp_are_read_only_at_their_paths(
    cache: Path, source: Path, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    (shared / "sub").mkdir(parents=True)
    (shared / "sub" / "data.txt").write_text("dir ok\n")
    single = tmp_path / "deep" / "single.txt"  # a file alone: the sandbox makes its mount point itself
    single.parent.mkdir()
    single.write_text("file ok\n")
    for p in (shared, shared / "sub"):  # the folders above them stay pytest's 0700: the sandbox makes its own
        p.chmod(0o755)
    for p in (shared / "sub" / "data.txt", single):
        p.chmod(0o644)
    with LocalSandbox(expose_paths=[str(shared), str(single)]) as sb:
        _namespaces_or_skip(sb)
        sb.start(source)
        r = sb.run(
            f"cat {shared}/sub/data.txt {single}; ls -A {single.parent}; echo x > {single}; touch {shared}/new",
            timeout=30,
        )
        lines = r.output.splitlines()
        assert lines[:3] == ["dir ok", "file ok", "single.txt"], r.output
        assert r.output.count("Read-only file system") == 2, r.output
    assert single.read_text() == "file ok\n" and not (shared / "new").exists()


def test_a_private_tmpfs_dir_itself_cannot_be_exposed(cache: Path) -> None:
    with LocalSandbox(use_cgroup=False) as sb:
        _namespaces_or_skip(sb)
    with pytest.raises(SandboxError, match=r"cannot expose /tmp itself"):
        LocalSandbox(expose_paths=["/tmp"], use_cgroup=False)
    assert "/tmp" in TMPFS_DIRS


def test_a_task_python_under_a_private_tmpfs_is_noted_once_per_process(
    cache: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tasks.sandbox.task_python._NOTED", [])
    with caplog.at_level(logging.WARNING, logger="spectune.sandbox"):
        for _ in range(2):
            with LocalSandbox(use_cgroup=False) as sb:
                pass
    if sb.isolation == "none":
        assert caplog.records == []  # no private /tmp: the host's path is what commands see
        return
    notes = [r.getMessage() for r in caplog.records if r.name == "spectune.sandbox"]
    assert len(notes) == 1 and str(task_python().root) in notes[0] and "read-only" in notes[0], notes


def test_the_main_commands_set_up_resolves_a_swe_lite_task_with_the_cache_under_tmp(cache: Path) -> None:
    """One real swe-lite episode (the scripted expert) and its grading, through the environment the tuner makes."""
    from agents.episode import run_episode
    from agents.expert import ExpertModel
    from agents.expert.runner import TOKENIZER_VOCAB
    from engine.tiny import train_tokenizer
    from tasks.environment import make_environment
    from tasks.suites import load_suite

    environment = make_environment("swe-lite", "local")  # what the tuner's set-up makes, refusals included
    instance = sorted(load_suite("swe-lite", split="dev"), key=lambda i: i.instance_id)[0]
    tokenizer = train_tokenizer(TOKENIZER_VOCAB)
    episode = run_episode(instance, ExpertModel(instance, tokenizer), environment, tokenizer)
    assert episode.agent.status == "submitted", episode.agent.message
    assert episode.resolved, (episode.evaluation.status, episode.evaluation.message)
