"""Shared test helpers: the CI flag, sandbox factories for tests that run in both sandboxes, a tiny model, the
Hydra configs composed as the entry points compose them (compose_config, runner_config, the runner_cfg fixture)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import pytest
import torch
from filelock import FileLock
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from engine.forward import path_refusal
from engine.host import probe
from engine.tiny import make_tiny_model

PROJECT = Path(__file__).resolve().parents[1]
CONF_DIR = PROJECT / "conf"
IN_CI = os.environ.get("CI", "").strip().lower() == "true"
# `auto` keeps the static path rule in tests (and the commands they start): outputs must not depend on a kernel
# timing taken on the test machine. The per-size plan has its own tests (test_forward_plan.py) with given plans.
os.environ["SPECTUNE_FORWARD_PLANS"] = "off"
SANDBOX_KINDS = ("local", "docker")
# Every skip for something this machine lacks (an instruction set, a device) starts so: the run's summary counts
# them under the host's own line, so a log says which kind of host ran it and what it could not check there.
HOST_LACKS = "host lacks"
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason=f"{HOST_LACKS} a CUDA device")
# A workspace's .gitattributes (or any git configuration) must not change what a sandbox's diff() shows: `binary`
# (= -diff -merge -text) or `-diff` would turn a .py edit into a binary patch that text checks cannot read,
# `text`/`eol` rewrite line ends, `filter=`/`ident` the content. Both sandboxes' tests try each of these.
WORKSPACE_ATTRIBUTES = [
    "*.py binary\n",
    "*.py -diff filter=x\n",
    "[attr]hide -diff -text\n*.py hide ident\n*.txt text eol=lf working-tree-encoding=UTF-16\n",
]
WORKSPACE_ATTRIBUTE_IDS = ["binary", "-diff filter", "macro eol encoding"]


def diff_sections(diff: str) -> dict[str, str]:
    """Each file's part of a git diff, by path."""
    return {part.split(" b/", 1)[0]: part for part in diff.split("diff --git a/")[1:]}


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


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A tiny random target model folder (1 layer x 64): plumbing of runners and benchmarks, fast on CPU."""
    return make_tiny_model(tmp_path_factory.mktemp("models") / "target", layers=1, hidden=64, seed=3)


def compose_config(name: str, *overrides: str) -> DictConfig:
    """conf/`name`.yaml composed with `overrides` (later ones win), as its `python -m` entry composes it: `config`
    the runner's, `eval_model` the model evaluation's, `tune` the tuner's (structured schemas registered first)."""
    from tuner.config import register_tune_configs  # the runner's schema and the tuner's; idempotent

    register_tune_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(name, overrides=list(overrides))


def runner_config(root: Path, *overrides: str) -> DictConfig:
    """The runner's config (`python -m runners.run`) writing its run folders under `root`, without a progress bar."""
    return compose_config("config", f"run.root={root}", "run.progress=false", *overrides)


@pytest.fixture
def runner_cfg(tmp_path: Path) -> Callable[..., DictConfig]:
    """runner_cfg(*overrides) -> the runner's composed config writing under this test's tmp_path (runner_config)."""
    return lambda *overrides: runner_config(tmp_path, *overrides)


def skip_unless_path_runs(path: str, dtype: torch.dtype, device: str = "cpu") -> None:
    """Skip (HOST_LACKS) where this machine cannot run forward `path` in `dtype`: the same test runs on every other."""
    refusal = path_refusal(path, device, dtype)
    if refusal is not None:
        pytest.skip(f"{HOST_LACKS} what forward path {path!r} needs for {str(dtype).removeprefix('torch.')}: {refusal}")


# ---- two tiers (docs/testing.md, "Two tiers") -------------------------------------------------------------------
# pyproject.toml declares the markers; this is the one place that applies them. `-m "not slow"` is the fast tier:
# what needs a llama-server, docker, PostgreSQL or a GPU is slow as well, so that one expression leaves it all out.
# The README's `python -m pytest -q -n 2` selects nothing away: it is the full suite, what CI runs.
NEEDS = ("server", "docker", "postgres", "gpu")  # each implies slow
BY_PATH = {"tests/serving/": "server"}  # the pinned llama-server, its GGUF conversions and its started servers
BY_FIXTURE = {
    "binary": "server",  # tests/serving/conftest.py: the pinned llama-server (ggufs, gguf_only, dflash_gguf use it)
    "docker_ok": "docker",  # tests/tasks/test_docker_sandbox.py: a daemon and the sandbox image
    "quick_build": "slow",  # tests/training/conftest.py: python -m training.build --quick, minutes on 2 cores
    "quick_trajectories": "slow",  # the bundled target's quick trajectories, one eval run per split
}
BY_PARAMETER = {("kind", "docker"): "docker", ("sandbox", "docker"): "docker", ("kind", "postgres"): "postgres"}
BY_TEST = {  # tests whose need shows only in their bodies (or a fixture of their own file)
    "docker": (
        "tests/agents/test_edits.py::test_same_edits_in_the_docker_sandbox",
        "tests/tasks/test_sandbox_owner.py::test_a_docker_container_dies_with_its_sigkilled_owner",
        "tests/tasks/test_swebench_eval.py::test_missing_instance_image_says_how_to_get_it",
        "tests/tasks/test_swebench_eval.py::test_container_run_resolves_the_gold_patch",
        "tests/tasks/test_swebench_eval.py::test_container_run_reports_a_patch_that_does_not_apply",
    ),
    "postgres": (
        "tests/tuner/test_storage.py::test_postgres_storage_keeps_trials",
        "tests/tuner/test_workers.py::test_two_workers_with_their_own_run_roots_and_one_killed_finish_the_budget_once",
    ),
}
# Slow by measurement, on the project's 2-core CPU (2026-12-06: the full suite with --durations=0, then the fast
# tier's own runs): every test whose call took 3 s or more, with all its parameters (subprocess runs of the CLIs,
# signals, tuner studies, MLflow servers, suite builds), and the users of a module fixture whose setup took 5 s or
# more (a recorded run, a study, an evaluation, the expert's sample, the probe split). ALL: every test of the file.
ALL = "*"
SLOW = {
    "tests/agents/test_expert.py": (
        "test_every_turn_is_exactly_one_action_in_the_expected_order",
        "test_expert_resolves_sample_end_to_end",
        "test_reply_tokens_end_with_the_end_of_turn_id_and_decode_to_the_text",
        "test_same_instance_same_observations_give_identical_replies",
        "test_thoughts_never_mention_the_gold_patch",
    ),
    "tests/bench/test_bench.py": ("test_model_without_draft_skips_draft_cases", "test_quick_engine_report"),
    "tests/bench/test_bench_tuner.py": (
        "test_a_real_two_point_grid_is_measured_paired_with_repeats_and_replayed",
        "test_ctrl_c_while_measuring_the_grid_writes_no_grid_file",
    ),
    "tests/bench/test_concurrency_bench.py": ("test_a_small_run_measures_both_levels_off_and_on",),
    "tests/bench/test_tuner_speed.py": ("test_one_real_study_is_measured",),
    "tests/bench/test_gpu_check.py": (
        "test_bench_batch_takes_device_and_dtype",
        "test_memory_probe_estimates_on_a_cpu_where_no_peak_is_measured",
        "test_offline_setup_sees_this_interpreters_torch_and_installs_the_carried_wheels",
    ),
    "tests/engine/test_host.py": (
        "test_the_engine_cli_runs_bf16_on_an_avx2_host_and_refuses_a_forced_onednn_in_one_line",
    ),
    "tests/engine/test_memory.py": ("test_cli_module_errors_exit_2_in_one_line",),
    "tests/engine/test_sampling_exactness.py": (
        "test_exact_sampling_matches_plain_distribution",
        "test_negative_control_lossy_topk_fails_and_is_flagged",
        "test_negative_control_without_residual_fails",
    ),
    "tests/engine/test_sessions_and_inputs.py": ("test_cli_json_and_errors",),
    "tests/engine/test_tiny_and_loading.py": ("test_cli_writes_model",),
    "tests/export/test_table.py": ("test_docs_servers_shows_the_table_as_python_m_export_prints_it",),
    "tests/models/test_bundled_models.py": (
        "test_bench_on_agent_prompts_gives_identical_outputs",
        "test_bundled_mtp_module_solves_an_instance_with_the_identical_token_stream",
        "test_greedy_target_solves_an_instance_with_identical_tokens_under_speculation",
    ),
    "tests/runners/test_cli_errors.py": (
        "test_a_failing_command_leaves_an_existing_run_folder_untouched",
        "test_generate_cli_exits_2_for_truncated_weights",
        "test_model_local_needs_model_target",
        "test_runner_clis_exit_2_for_a_broken_model_folder",
        "test_runner_clis_exit_2_for_bad_task_files",
    ),
    "tests/runners/test_cli_signals.py": ALL,
    "tests/runners/test_concurrency.py": (
        "test_eval_model_with_two_agents_reports_their_throughput",
        "test_three_agents_at_once_add_up",
        "test_two_sigterms_mid_wave_stop_every_agent",
    ),
    "tests/runners/test_eval_model.py": (
        "test_cli_bad_split_exits_2_before_loading_a_model",
        "test_decoding_is_plain_with_the_configured_seed",
        "test_evaluation_is_tracked_in_mlflow",
        "test_two_tasks_counted_and_written",
    ),
    "tests/runners/test_replay.py": ALL,
    "tests/runners/test_run_e2e.py": (
        "test_greedy_exact_on_and_off_produce_the_same_tokens",
        "test_history_is_never_prefilled_twice",
        "test_lossy_candidate_is_flagged_and_missing_draft_is_unsupported",
        "test_mlflow_has_parent_and_child_runs_with_metrics",
        "test_outputs_trajectories_and_predictions",
        "test_summary_file_has_every_key_with_sane_values",
    ),
    "tests/runners/test_runner_killed.py": ALL,
    "tests/runners/test_stop_and_resume.py": ("test_resume_keeps_finished_task_runs_and_runs_the_rest",),
    "tests/tasks/test_grading_adversarial.py": ("test_a_correct_fix_resolves_whatever_else_the_patch_holds",),
    "tests/tasks/test_local_sandbox.py": ("test_fork_loop_is_capped",),
    "tests/tasks/test_probe.py": (
        "test_probe_build_is_deterministic_for_a_seed",
        "test_probe_files_are_manifest_checked",
        "test_probe_instances_are_real_tasks",
        "test_probe_is_fresh_and_loads_as_its_own_split",
    ),
    "tests/tasks/test_swelite_suite.py": ("test_builder_is_deterministic", "test_sample_validates_in_local_sandbox"),
    "tests/tasks/test_swelite_v2.py": (
        "test_issues_show_at_most_half_of_the_failing_checks",
        "test_snippet_only_patch_answers_the_issue_but_resolves_nothing",
    ),
    "tests/tuner/test_concurrency_levels.py": ("test_two_levels_two_studies_and_the_levels_table",),
    "tests/tuner/test_mlflow_ui.py": ALL,
    "tests/tuner/test_mlflow_view.py": (
        "test_a_resumed_study_logs_only_new_trials_and_widens_its_view",
        "test_the_experiment_is_a_training_one_and_every_trial_a_top_level_run_with_its_figures",
        "test_the_runners_experiment_is_a_training_one_and_a_chosen_kind_stays",
        "test_the_stored_view_selects_the_trials_and_the_urls_open_it",
        "test_the_trials_view_shows_the_trials_and_their_figures_in_chromium",
    ),
    "tests/tuner/test_projection.py": ("test_a_small_budget_stops_launching_trials_and_still_confirms_and_exports",),
    "tests/tuner/test_peers.py": (
        "test_a_dead_worker_on_another_host_is_failed_and_its_trial_retried",
        "test_a_live_worker_on_another_host_is_left_to_finish",
    ),
    "tests/tuner/test_resume.py": ALL,
    "tests/tuner/test_search.py": (
        "test_a_candidate_the_backend_cannot_run_is_an_unsupported_trial",
        "test_a_crashing_trial_is_recorded_as_failed_and_the_study_goes_on",
        "test_a_measured_point_is_not_measured_again_and_a_small_space_is_exhausted",
        "test_a_slow_candidate_is_pruned_before_the_end",
        "test_a_value_error_while_making_a_candidate_is_a_failed_trial_with_its_traceback_not_unsupported",
        "test_bad_tuner_values_fail_before_anything_loads",
        "test_live_measurement_runs_the_agent_on_both_sides_in_the_trial",
        "test_mtp_and_combined_trials_load_the_bundled_module_and_count_it_in_memory",
        "test_no_success_is_infinitely_slow_and_infeasible_never_zero",
        "test_revisit_repeat_measures_a_point_again_and_pools_its_repeats",
        "test_serve_names_the_servers_and_tuner_finish_finishes_a_study_explicitly",
        "test_study_records_off_once_pairs_every_trial_confirms_and_exports_per_server",
        "test_the_cpu_clock_times_generation_on_cpu_seconds_and_both_clocks_are_kept",
    ),
    "tests/tuner/test_storage.py": ("test_killed_worker_trial_is_failed_and_retried_by_heartbeat",),
}
# The conformance suites keep a slice in the fast tier (measured: the whole of test_conformance.py alone took one
# worker past the budget); the full suite runs every combination.
TRANSFORMERS_ONLY_IN_FULL = {("qwen2", "transformers"), ("mistral", "transformers")}
SLOW_WHERE = {
    # Every test and drafter on the engine's own forward for each architecture it covers, and on transformers' for
    # llama and gemma3 (sliding layers); qwen2 and mistral on transformers' and the mixed paths, and greedy at
    # gamma 2, 3, 5 and 6, only in the full suite.
    "tests/engine/test_conformance.py": lambda p: (
        p.get("target") in TRANSFORMERS_ONLY_IN_FULL
        or (p.get("target") or ("", ""))[1] == "mixed"
        or p.get("gamma", 1) not in (1, 4)
    ),
    # The engine's own forward paths (torch, mixed), which batch for real; transformers' only in the full suite.
    "tests/engine/test_batched_conformance.py::test_batched_sessions_equal_each_session_alone": (
        lambda p: p["target"][1] == "transformers"
    ),
}


def tier_marks(nodeid: str, fixtures: Iterable[str], params: Mapping[str, object], skip_reasons: Iterable[str]) -> set:
    """The tier markers of one test, from its node id, the fixtures it uses, its parameters and its skipif reasons."""
    path, _, name = nodeid.partition("::")
    function = name.split("[")[0]
    marks = {mark for prefix, mark in BY_PATH.items() if path.startswith(prefix)}
    marks |= {BY_FIXTURE[fixture] for fixture in fixtures if fixture in BY_FIXTURE}
    marks |= {mark for (key, value), mark in BY_PARAMETER.items() if params.get(key) == value}
    marks |= {mark for mark, tests in BY_TEST.items() if f"{path}::{function}" in tests}
    if needs_cuda.mark.kwargs["reason"] in skip_reasons:
        marks.add("gpu")
    slow = SLOW.get(path, ())
    if slow == ALL or function in slow:
        marks.add("slow")
    for key in (path, f"{path}::{function}"):
        if (where := SLOW_WHERE.get(key)) is not None and where(params):
            marks.add("slow")
    if marks & set(NEEDS):
        marks.add("slow")
    return marks


def pytest_collection_modifyitems(config, items) -> None:
    """Mark every collected test with its tiers (tier_marks)."""
    for item in items:
        params = item.callspec.params if hasattr(item, "callspec") else {}
        reasons = [mark.kwargs.get("reason") for mark in item.iter_markers("skipif")]
        for mark in sorted(tier_marks(item.nodeid, item.fixturenames, params, reasons)):
            item.add_marker(mark)


def pytest_report_header(config) -> str:
    """The host's CPU flags and devices at the top of every run, so a log says which machine ran it."""
    return f"spectune host: {probe().describe()}"


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """Count the tests skipped for what this host lacks, by reason, under the host's own line."""
    lacking: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        if reason.startswith(HOST_LACKS):
            lacking[reason] = lacking.get(reason, 0) + 1
    if lacking:
        terminalreporter.section("skipped for what this host lacks")
        terminalreporter.write_line(f"host: {probe().describe()}")
        for reason, count in sorted(lacking.items()):
            terminalreporter.write_line(f"{count:4d}  {reason}")


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """A folder `build` fills once for this whole test run, xdist's workers included; returns the folder.

    Session fixtures that make something slow (trajectories, GGUF files) make it once per run, not once per
    worker: the first worker to come holds the lock and builds, the others wait and reuse the folder. Without
    xdist it lies in the session's own temp folder; a build that failed half-way is started afresh.
    """
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker's basetemp lies in the run's own folder
        base = base.parent
    folder, done = base / name, base / f"{name}.done"
    with FileLock(str(base / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            build(folder)
            done.touch()
    return folder
