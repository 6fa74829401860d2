"""`python -m bench.gpu_check`: the CPU-safe parts of the GPU check (report, steps, budget, refusal, dry run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from bench.gpu_check import __main__ as driver
from bench.gpu_check.environment import setup_environment
from bench.gpu_check.machine import source_fingerprint
from bench.gpu_check.plan import DEFAULT_BUDGET_S, Settings, build_plan
from bench.gpu_check.probes import env_probe, memory_probe, sandbox_probe
from bench.gpu_check.report import assemble_report, write_report
from bench.gpu_check.steps import Runner, Step, pytest_counts, run_plan, tuner_result

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


def py_step(name: str, code: str, timeout: float = 60, parse: str = "text", min_s: float = 0) -> Step:
    """A trivial part: this interpreter running `code`."""
    return Step("fake", name, (PY, "-c", code), timeout, min_s, parse)


def runner(tmp_path: Path, budget: float = 600) -> Runner:
    return Runner(cwd=tmp_path, env=dict(os.environ), deadline=time.monotonic() + budget, log=tmp_path / "log")


# ---- steps: failures and timeouts are recorded, the rest still runs --------------------------------------------


def _gone(pid: int) -> bool:
    """The process has exited (a zombie left for a non-reaping init counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_a_failing_and_a_timed_out_step_are_recorded_and_the_rest_still_run(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    sleeper = (
        "import subprocess, sys, pathlib; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        f"pathlib.Path({str(pidfile)!r}).write_text(str(p.pid)); p.wait()"
    )
    steps = [
        py_step("json", "print('{\"answer\": 42}')", parse="json"),
        py_step("fails", "import sys; print('partial'); sys.stderr.write('boom: bad thing\\n'); sys.exit(3)"),
        py_step("hangs", sleeper, timeout=2),
        py_step("not-json", "print('not json')", parse="json"),
        py_step("last", "print('still ran')"),
    ]
    r = runner(tmp_path)
    saved = []
    run_plan(steps, r, on_result=lambda: saved.append(len(r.results)))
    by = {x["name"]: x for x in r.results}
    assert [x["status"] for x in r.results] == ["ok", "failed", "timeout", "failed", "ok"]
    assert saved == [1, 2, 3, 4, 5]  # the report is rewritten after every step
    assert by["json"]["data"] == {"answer": 42} and by["json"]["returncode"] == 0
    assert by["fails"]["returncode"] == 3 and by["fails"]["error"] == "boom: bad thing"
    assert "partial" in by["fails"]["stdout_tail"]
    assert by["hangs"]["returncode"] is None and by["hangs"]["error"].startswith("killed after")
    assert "unreadable output" in by["not-json"]["error"]
    assert "still ran" in by["last"]["stdout_tail"]
    # The whole process group died with the timed-out step, its own child too.
    pid = int(pidfile.read_text())
    for _ in range(100):
        if _gone(pid):
            break
        time.sleep(0.05)
    assert _gone(pid)
    log = (tmp_path / "log").read_text()
    assert "fake/fails: failed" in log and "boom: bad thing" in log and "fake/hangs: timeout" in log


def test_a_command_that_cannot_start_is_a_failure_not_a_crash(tmp_path):
    result = runner(tmp_path).run(Step("fake", "missing", ("/nonexistent/python", "-V"), 10, 0))
    assert result["status"] == "failed" and result["returncode"] is None and "nonexistent" in result["error"]


def test_the_budget_skips_what_it_cannot_fit_and_keeps_later_minimums(tmp_path):
    r = runner(tmp_path, budget=1)
    assert r.run(py_step("late", "print(1)"))["status"] == "skipped"

    r = runner(tmp_path, budget=80)
    steps = [py_step("first", "print(1)", timeout=100), py_step("second", "print(2)", min_s=50)]
    run_plan(steps, r)
    first, second = r.results
    assert first["status"] == second["status"] == "ok"
    assert first["timeout_s"] <= 30  # its cap was 100: cut so that the second step keeps its 50 s


# ---- parsers --------------------------------------------------------------------------------------------------


def test_pytest_counts_and_a_skipped_cuda_test_is_not_a_pass(tmp_path):
    out = "s\nSKIPPED [1] tests/engine/test_memory.py:353: needs a CUDA device\n1 skipped, 30 deselected in 2.31s\n"
    counts = pytest_counts(out)
    assert counts["skipped"] == 1 and counts["deselected"] == 30 and "passed" not in counts
    assert counts["skip_reasons"] == ["SKIPPED [1] tests/engine/test_memory.py:353: needs a CUDA device"]
    assert pytest_counts("=== 1 passed, 30 deselected in 4.0s ===")["passed"] == 1

    skipped = py_step("t", f"print({out!r})", parse="pytest")
    result = runner(tmp_path).run(skipped)
    assert result["status"] == "skipped" and result["error"] == "1 skipped, 30 deselected in 2.31s"


def test_tuner_result_reads_the_winner_lines_and_the_summary(tmp_path):
    summary = tmp_path / "summary.json"
    summary.write_text(
        json.dumps(
            {
                "trials": {"COMPLETE": 3},
                "best": {"number": 1, "value": 0.8, "params": {"drafter": "suffix"}},
                "winners": {
                    "spectune": {"trial": 1, "on": False, "reason": "no interval", "search": {"speedup": 1.06}}
                },
                "timings": {"total_s": 14.1},
                "provenance": {"device": "cuda: NVIDIA H200", "forward": {"target": "torch float32"}},
            }
        )
    )
    stdout = "trial 1 ...\nspectune      trial 1    search 1.06x  confirmed 1.12x  -> OFF: no interval\nnote: x\n"
    data = tuner_result(stdout, summary)
    assert data["winner_lines"] == ["spectune      trial 1    search 1.06x  confirmed 1.12x  -> OFF: no interval"]
    assert data["winners"]["spectune"] == {
        "trial": 1,
        "on": False,
        "reason": "no interval",
        "search_speedup": 1.06,
        "confirmed_speedup": None,
    }
    assert data["device"] == "cuda: NVIDIA H200" and data["notes"] == ["note: x"]
    with pytest.raises(ValueError, match="no winner line"):
        tuner_result("nothing here", tmp_path / "absent.json")


# ---- report and markdown from fake results ------------------------------------------------------------------------


def fake_results() -> list[dict]:
    def step(part, name, status="ok", **extra):
        return {"part": part, "name": name, "command": f"python -m {part} {name}", "timeout_s": 60.0,
                "status": status, "returncode": 0 if status == "ok" else 1, "wall_s": 1.5, **extra}  # fmt: skip

    engine = {
        "setup": {"target": {"forward": "graphs bfloat16 (engine llama forward, CUDA graphs)"}},
        "tokens_per_s": {"spectune_plain": {"median": 812.4}, "transformers_greedy": {"median": 301.0}},
        "ngram_on_vs_off": 1.41,
        "suffix_on_vs_off": 1.3,
        "draft_on_vs_off": 0.9,
        "mtp_g1_on_vs_off": None,
        "identical": True,
        "costs": {"paths": {"target": {"graphs": {"t_s": {"1": 0.0004}, "R": {"5": 1.02}},
                                       "onednn": {"unavailable": "CPU"}}}},
    }  # fmt: skip
    batch = {
        "setup": {"forward_path": "torch bfloat16", "resolved_device": "cuda:0"},
        "rows": [
            {"sessions": 1, "drafter": "none", "tokens_per_s": 900.0, "on_vs_off": 1.0, "vs_one_session": 1.0,
             "mean_accepted_length": 1.0, "diverged_streams": 0},
            {"sessions": 16, "drafter": "ngram", "tokens_per_s": 9000.0, "on_vs_off": 1.2, "vs_one_session": 8.1,
             "mean_accepted_length": 2.3, "diverged_streams": 1},
        ],
    }  # fmt: skip
    probe = {
        "forward": "torch bfloat16",
        "runtime_overhead_bytes": 8 * 2**20,
        "rows": [{"drafter": "none", "context": 512, "measured_peak_bytes": 30 * 2**20, "estimate_bytes": 40 * 2**20,
                  "peak_over_estimate": 0.75, "peak_within_estimate_at_reservation": True}],
    }  # fmt: skip
    tuner = {"winner_lines": ["spectune      trial 1    search 1.06x"], "trials": {"COMPLETE": 3}, "device": "cuda"}
    return [
        step("setup", "venv"),
        step("env", "torch", data={"torch": "2.11.0+cu130"}),
        step("engine", "graphs", data=engine),
        step("engine", "transformers", "timeout", error="killed after 90 s", stderr_tail="line 1\nstuck here"),
        step("batch", "sessions", data=batch),
        step("memory", "cuda-test", data={"summary": "1 passed, 30 deselected in 4.0s", "passed": 1}),
        step("memory", "estimate-vs-peak", data=probe),
        step("tuner", "two-trials", "failed", error="Traceback: boom", stderr_tail="Traceback\nValueError: boom"),
        step("tuner", "winners", data=tuner),
    ]


def test_report_assembly_and_markdown_from_fake_part_results(tmp_path):
    machine = {"gpus": [{"name": "NVIDIA H200", "driver": "580.159.04", "memory": "143771 MiB"}]}
    source = {"git_commit": "abc123", "git_changed_files": 2, "fingerprint": "f00d"}
    report = assemble_report(
        started="2026-12-02T10:00:00+00:00",
        wall_s=321.0,
        budget_s=450,
        device="cuda",
        machine=machine,
        source=source,
        setup={"mode": "offline", "note": "PyPI unreachable: preinstalled torch"},
        results=fake_results(),
        environment={"torch": "2.11.0+cu130", "cuda": "13.0", "transformers": "5.24.0 (/x)", "python": "3.12.3"},
    )
    assert report["status"] == "failed"
    assert {name: p["status"] for name, p in report["parts"].items()} == {
        "engine": "failed",
        "batch": "ok",
        "memory": "ok",
        "tuner": "failed",
    }
    assert [s["name"] for s in report["setup"]["steps"]] == ["venv"]
    assert [s["name"] for s in report["environment"]["steps"]] == ["torch"]
    assert report["parts"]["engine"]["wall_s"] == 3.0

    md = report["markdown"]
    assert md.startswith("# spectune GPU check: failed")
    for text in (
        "NVIDIA H200 (driver 580.159.04, 143771 MiB)",
        "torch 2.11.0+cu130 (CUDA 13.0), transformers 5.24.0,",
        "commit abc123 (+2 changed files), fingerprint f00d",
        "offline: PyPI unreachable",
        "| engine | transformers | timeout | 1.5 | killed after 90 s |",
        "| graphs | graphs bfloat16 (engine llama forward, CUDA graphs) | 812 | 301 | 1.41 | 1.30 | 0.90 | - | True |",
        "| graphs | target | graphs | 0.400 | 1.02 |",
        "| 16 | ngram | 9000 | 1.20 | 8.10 | 2.30 | 1/16 |",
        "`cuda-test`: 1 passed, 30 deselected in 4.0s",
        "| none | 512 | 30.00 | 40.00 | 0.750 | True |",
        "spectune      trial 1    search 1.06x",
        "## failures",
        "stuck here",
        "ValueError: boom",
    ):
        assert text in md, text

    write_report(tmp_path / "out", report)
    assert json.loads((tmp_path / "out" / "gpu_check.json").read_text()) == report
    assert (tmp_path / "out" / "gpu_check.md").read_text() == md
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["gpu_check.json", "gpu_check.md"]


def test_an_unfinished_report_says_running(tmp_path):
    report = assemble_report(
        started="t", wall_s=1, budget_s=450, device="cuda", machine={}, source={}, setup={}, results=[], finished=False
    )
    assert report["status"] == "running" and report["markdown"].startswith("# spectune GPU check: running")


# ---- the plan, --dry-run and the refusal without CUDA ---------------------------------------------------------------


def test_the_plan_covers_the_four_parts_on_cuda_and_rehearses_them_on_a_cpu():
    cuda = build_plan(Settings(device="cuda", python="py"))
    commands = {f"{s.part}/{s.name}": s.command() for s in cuda}
    assert list(commands) == [
        "engine/torch",
        "engine/graphs",
        "engine/graphs-test",
        "engine/transformers",
        "batch/sessions",
        "memory/cuda-test",
        "memory/estimate-vs-peak",
        "tuner/two-trials",
    ]
    assert "--device cuda --dtype bfloat16 --forward graphs --profile --json" in commands["engine/graphs"]
    assert "--sessions 1,4,16 --drafters none,ngram,draft_model,mtp" in commands["batch/sessions"]
    assert commands["memory/cuda-test"].endswith("tests/engine/test_memory.py -k cuda")
    assert "hardware=h200 task=swe-lite model.device=cuda tuner.trials=2" in commands["tuner/two-trials"]
    assert sum(s.min_s for s in cuda) < DEFAULT_BUDGET_S

    cpu = build_plan(Settings(device="cpu", python="py"), ("engine", "tuner"))
    assert [s.name for s in cpu] == ["torch", "transformers", "two-trials"]  # graphs is CUDA only
    assert all("--device cpu --dtype float32" in s.command() for s in cpu[:2])
    assert "hardware=cpu" in cpu[2].command() and "model.device=cpu" in cpu[2].command()


def test_dry_run_lists_the_commands_without_cuda(monkeypatch, capsys):
    def no_probe() -> bool:
        raise AssertionError("--dry-run must not look for a GPU")

    monkeypatch.setattr(driver, "cuda_present", no_probe)
    assert driver.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    for text in (
        "-m venv",
        "install -q -e '.[dev]'",
        "--without-pip",
        "--forward torch",
        "--forward graphs",
        "--forward transformers",
        "-m bench batch --device cuda --dtype bfloat16 --sessions 1,4,16",
        "tests/engine/test_memory.py -k cuda",
        "--memory-probe",
        "-m tuner.search hardware=h200",
    ):
        assert text in out, text


def test_without_cuda_the_driver_refuses_in_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(driver, "cuda_present", lambda: False)
    assert driver.main(["--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no CUDA device here" in err and "--dry-run" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the driver would run")
def test_the_wrapper_refuses_on_this_cpu_machine(tmp_path):
    env = {**os.environ, "PYTHON": PY}
    run = subprocess.run(
        ["bash", str(REPO / "bench" / "gpu_check.sh"), str(tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("gpu_check: no CUDA device here")


def test_unknown_parts_are_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        driver.main(["--dry-run", "--parts", "engine,warp"])
    assert exc.value.code == 2 and "--parts" in capsys.readouterr().err


# ---- probes and the source fingerprint -----------------------------------------------------------------------------


def test_env_probe_names_torch_and_its_device():
    probe = env_probe()
    assert probe["torch"] == torch.__version__ and probe["cuda_available"] == torch.cuda.is_available()
    assert probe["transformers"].split()[0][0].isdigit()


def test_sandbox_probe_runs_a_command_in_the_local_sandbox():
    probe = sandbox_probe()
    assert probe["ok"] and probe["output"].split() == ["probe", "42"]


def test_memory_probe_estimates_on_a_cpu_where_no_peak_is_measured():
    probe = memory_probe("cpu", "float32", [16], new_tokens=4)
    assert [(r["drafter"], r["context"]) for r in probe["rows"]] == [("none", 16), ("draft_model", 16)]
    for row in probe["rows"]:
        assert row["measured_peak_bytes"] is None and row["peak_over_estimate"] is None
        assert row["estimate_bytes"] == row["estimate_parts"]["total"] > 0
        assert row["reserved_positions"] >= 16 + 4
    assert probe["rows"][1]["estimate_parts"]["draft_weights"] > 0


def test_source_fingerprint_follows_content_and_paths(tmp_path):
    (tmp_path / "engine").mkdir()
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    (tmp_path / "engine" / "a.py").write_text("x = 1\n")
    first = source_fingerprint(tmp_path)
    (tmp_path / "engine" / "__pycache__").mkdir()
    (tmp_path / "engine" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert source_fingerprint(tmp_path) == first  # byte code is not source
    (tmp_path / "engine" / "a.py").write_text("x = 2\n")
    assert source_fingerprint(tmp_path) != first


# ---- bench batch on a chosen device and dtype ----------------------------------------------------------------------


def test_bench_batch_takes_device_and_dtype(capsys):
    from bench.__main__ import main as bench_main

    argv = ["batch", "--device", "cpu", "--dtype", "float32", "--sessions", "1,2", "--drafters", "none,ngram"]
    assert bench_main([*argv, "--repeats", "1", "--max-new-tokens", "4", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    setup = report["setup"]
    assert (setup["device"], setup["dtype"], setup["resolved_device"]) == ("cpu", "float32", "cpu")
    assert "float32" in setup["forward_path"]
    cases = [(r["sessions"], r["drafter"]) for r in report["rows"]]
    assert cases == [(1, "none"), (1, "ngram"), (2, "none"), (2, "ngram")]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_bench_batch_on_cuda_without_one_is_one_error_line(capsys):
    from bench.__main__ import main as bench_main

    assert bench_main(["batch", "--device", "cuda", "--sessions", "1", "--drafters", "none"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "CUDA is not available" in err


# ---- the offline set-up: a venv over this interpreter's packages, carried wheels on top -----------------------------


def _fake_wheel(folder: Path, name: str = "gpu_check_probe", version: str = "1.0") -> Path:
    """A minimal pure-Python wheel whose module says where it was imported from."""
    import base64
    import hashlib
    import zipfile

    files = {
        f"{name}/__init__.py": b"import pathlib\nWHERE = str(pathlib.Path(__file__).parent)\n",
        f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{name}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{name}-{version}.dist-info/RECORD,,")
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
        z.writestr(f"{name}-{version}.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


def test_offline_setup_sees_this_interpreters_torch_and_installs_the_carried_wheels(tmp_path):
    _fake_wheel(tmp_path / "wheels")
    unreachable = "http://127.0.0.1:9/"  # nothing listens there: PyPI counts as unreachable
    folders = ["--venv", str(tmp_path / "venv"), "--wheels", str(tmp_path / "wheels")]
    args = driver.build_parser().parse_args(["--out", str(tmp_path / "out"), *folders, "--index-probe", unreachable])
    r = Runner(cwd=REPO, env=dict(os.environ), deadline=time.monotonic() + 600)
    record = setup_environment(args, r)
    assert record["mode"] == "offline" and record["pypi_reachable"] is False
    assert record["wheels"] == ["gpu_check_probe-1.0-py3-none-any.whl"] and "gpu_check_probe" in record["note"]
    steps = [(x["name"], x["status"]) for x in r.results]
    assert steps == [("venv", "ok"), ("carried-wheels", "ok"), ("project", "ok")]
    python = tmp_path / "venv" / "bin" / "python"
    probe = "import gpu_check_probe, torch, engine; print(gpu_check_probe.WHERE); print(torch.__version__)"
    shown = subprocess.run([str(python), "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    where, version = shown.stdout.split()
    assert where.startswith(str(tmp_path / "venv")) and version == torch.__version__

    # A venv that already imports torch is reused as it is.
    again = setup_environment(args, Runner(cwd=REPO, env=dict(os.environ), deadline=time.monotonic() + 60))
    assert again["mode"] == "reused"
