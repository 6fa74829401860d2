"""Bad input files and reused run folders in the three command lines: one line on stderr, exit 2, nothing written.

Broken copies of a tiny model folder (config.json that is not JSON, empty / truncated / wrongly
shaped safetensors), `model=local` without `model.target`, a malformed JSONL in `task.path`, and a
probe manifest that is not JSON or lacks a key; then an existing run folder that a failing command
must leave exactly as it was (Hydra writes nothing there either).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.__main__ import main as generate_main
from engine.loading import ModelFileError, load_model
from tasks.suites import SWE_LITE_DIR, SuiteFileError, load_suite

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 180  # seconds per command: each fails before any task runs


def _junk_config(folder: Path) -> None:
    (folder / "config.json").write_text('{"model_type": "llama",')


def _empty_weights(folder: Path) -> None:
    (folder / "model.safetensors").write_bytes(b"")


def _truncated_weights(folder: Path) -> None:
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])


def _misshaped_weights(folder: Path) -> None:
    tensors = load_file(folder / "model.safetensors")
    tensors["model.layers.0.mlp.up_proj.weight"] = torch.zeros(3, 3)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


BREAKS = {
    "junk-config": (_junk_config, "config.json", "not valid JSON"),
    "empty-weights": (_empty_weights, "model.safetensors", "empty"),
    "truncated-weights": (_truncated_weights, "model.safetensors", "truncated"),
    "misshaped-weights": (_misshaped_weights, "model.safetensors", "up_proj"),
}


def _broken(tiny_dir: Path, tmp_path: Path, kind: str) -> Path:
    folder = Path(shutil.copytree(tiny_dir, tmp_path / kind))
    BREAKS[kind][0](folder)
    return folder


def _cli(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _hydra_args(tmp_path: Path, *args: str) -> list[str]:
    return [f"run.root={tmp_path / 'runs'}", "run.name=x", "tracking.enabled=false", "run.progress=false", *args]


@pytest.mark.parametrize("kind", sorted(BREAKS))
def test_load_model_names_the_broken_file(tiny_dir, tmp_path, kind):
    folder = _broken(tiny_dir, tmp_path, kind)
    _, name, what = BREAKS[kind]
    with pytest.raises(ModelFileError) as info:
        load_model(str(folder), device="cpu")
    assert str(folder / name) in str(info.value) and what in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("kind", sorted(BREAKS))
def test_generate_exits_2_with_one_line(tiny_dir, tmp_path, kind, capfd):
    folder = _broken(tiny_dir, tmp_path, kind)
    code = generate_main(["--model", str(folder), "--prompt", "hi", "--device", "cpu", "--max-new-tokens", "2"])
    err = capfd.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and BREAKS[kind][1] in err[0], err


def test_generate_cli_exits_2_for_truncated_weights(tiny_dir, tmp_path):
    folder = _broken(tiny_dir, tmp_path, "truncated-weights")
    _one_line_error(_cli("engine", "--model", str(folder), "--prompt", "hi"), "model.safetensors")


# Both runner CLIs load models through the same code as load_model above (every kind tested there);
# here one config.json and one weights problem per CLI, to see the one line and the exit status.
@pytest.mark.parametrize(
    ("module", "kind"), [("runners.run", "junk-config"), ("runners.eval_model", "misshaped-weights")]
)
def test_runner_clis_exit_2_for_a_broken_model_folder(tiny_dir, tmp_path, module, kind):
    folder = _broken(tiny_dir, tmp_path, kind)
    proc = _cli(module, *_hydra_args(tmp_path, f"model.target={folder}", "model.draft=null"))
    _one_line_error(proc, str(folder / BREAKS[kind][1]))
    assert all(p.is_dir() for p in (tmp_path / "runs").rglob("*"))  # no file written (an empty run folder at most)


@pytest.mark.parametrize("module", ["runners.run", "runners.eval_model"])
def test_model_local_needs_model_target(tmp_path, module):
    _one_line_error(_cli(module, *_hydra_args(tmp_path, "model=local")), "model.target", "model=local")


def _probe(tmp_path: Path, manifest_edit=None, lines_edit=None) -> Path:
    """A probe folder in the format `tasks.build --probe` writes, from two dev records."""
    folder = tmp_path / "probe"
    folder.mkdir(parents=True)
    lines = (SWE_LITE_DIR / "dev.jsonl").read_text().splitlines()[:2]
    text = "".join(line + "\n" for line in lines)
    suite = json.loads((SWE_LITE_DIR / "manifest.json").read_text())
    digest = hashlib.sha256(text.encode()).hexdigest()
    manifest = {
        "kind": "probe",
        "suite": "swe-lite",
        "seed": 1,
        "counts": {"probe": 2},
        "files": {"probe.jsonl": digest},
        "content_hash": hashlib.sha256(digest.encode()).hexdigest(),
        "excludes": {"suite_content_hash": suite["content_hash"], "sites": 0},
    }
    if lines_edit:
        text = lines_edit(text)
    (folder / "probe.jsonl").write_text(text)
    (folder / "manifest.json").write_text(manifest_edit(manifest) if manifest_edit else json.dumps(manifest))
    return folder


def test_probe_and_jsonl_problems_name_the_file(tmp_path):
    assert len(load_suite("swe-lite", "probe", path=str(_probe(tmp_path / "ok")))) == 2  # the well-formed probe

    def without(key):
        return lambda m: json.dumps({k: v for k, v in m.items() if k != key})

    for key in ("files", "counts", "content_hash", "excludes", "seed", "kind"):
        folder = _probe(tmp_path / key, manifest_edit=without(key))
        with pytest.raises(SuiteFileError, match=key) as info:
            load_suite("swe-lite", "probe", path=str(folder))
        assert str(folder / "manifest.json") in str(info.value)
    folder = _probe(tmp_path / "json", manifest_edit=lambda m: json.dumps(m)[:-5])
    with pytest.raises(SuiteFileError, match=r"manifest\.json is not valid JSON: line 1"):
        load_suite("swe-lite", "probe", path=str(folder))
    folder = _probe(tmp_path / "line", lines_edit=lambda t: t.replace("\n", "\n{oops\n", 1))
    with pytest.raises(SuiteFileError, match=r"probe\.jsonl:2: not valid JSON"):
        load_suite("swe-lite", "probe", path=str(folder))
    missing = _probe(tmp_path / "gone")
    (missing / "probe.jsonl").unlink()
    with pytest.raises(SuiteFileError, match=r"lists probe\.jsonl, but .* is missing"):
        load_suite("swe-lite", "probe", path=str(missing))
    lite = tmp_path / "lite.jsonl"
    lite.write_text('{"instance_id": "a__b-1", "repo": "a/b", "base_commit": "0", "problem_statement": "x"}\n[1]\n')
    with pytest.raises(SuiteFileError, match=r"lite\.jsonl:2: a JSON list"):
        load_suite("swe-bench-lite", "test", path=str(lite))
    lite.write_text('{"instance_id": "a__b-1", "repo": "a/b"}\n')
    with pytest.raises(SuiteFileError, match=r"lite\.jsonl:1: .*lacks required field"):
        load_suite("swe-bench-lite", "test", path=str(lite))


def test_runner_clis_exit_2_for_bad_task_files(tmp_path):
    lite = tmp_path / "lite.jsonl"
    lite.write_text('{"instance_id": "a__b-1", "repo": "a/b", "base_commit": "0", "problem_statement": "x"}\n{"inst\n')
    proc = _cli("runners.run", *_hydra_args(tmp_path, "task=swe-bench-lite", f"task.path={lite}"))
    _one_line_error(proc, f"{lite}:2", "not valid JSON")
    no_key = _probe(tmp_path / "a", manifest_edit=lambda m: json.dumps({k: v for k, v in m.items() if k != "excludes"}))
    proc = _cli("runners.eval_model", *_hydra_args(tmp_path, "task.split=probe", f"task.path={no_key}"))
    _one_line_error(proc, str(no_key / "manifest.json"), "'excludes'")
    not_json = _probe(tmp_path / "b", manifest_edit=lambda m: "{" + json.dumps(m))
    proc = _cli("runners.run", *_hydra_args(tmp_path, "task.split=probe", f"task.path={not_json}"))
    _one_line_error(proc, str(not_json / "manifest.json"), "not valid JSON")


def test_a_failing_command_leaves_an_existing_run_folder_untouched(tmp_path):
    folder = tmp_path / "runs" / "x"
    (folder / "trajectories" / "baseline" / "r0").mkdir(parents=True)
    (folder / "trajectories" / "baseline" / "r0" / "t.json").write_text("{}")
    (folder / "summary.json").write_text(json.dumps({"partial": True, "config": {}}))
    (folder / "hydra").mkdir()
    (folder / "hydra" / "config.yaml").write_text("old: true\n")

    def snapshot():
        return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}

    before = snapshot()
    _one_line_error(_cli("runners.run", *_hydra_args(tmp_path, "engine.drafter=medusa")), "engine.drafter")
    assert snapshot() == before
    # A valid command reusing the name is refused, naming both ways out.
    proc = _cli("runners.eval_model", *_hydra_args(tmp_path, "model=tiny"))
    _one_line_error(proc, str(folder), "run.resume=true", "run.overwrite=true")
    assert snapshot() == before
