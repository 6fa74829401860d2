"""Evaluate a patch on a real SWE-bench Lite instance the SWE-bench way, with the pinned `swebench` harness.

One container of the instance's own image (`sweb.eval.x86_64.<instance_id>`, built or pulled with
swebench's tools, never here), the model patch applied as swebench's `run_instance` applies it, then
the eval script swebench writes for the repo and version (reset the test files, apply `test_patch`,
run the repo's test command between markers), graded by swebench's log parser for the repo and its
FAIL_TO_PASS / PASS_TO_PASS report. Non-goals: building images, and the offline `swe-lite` suite
(`tasks.evaluation`). swebench is imported on first use: it imports modal, ghapi and more (~2 s),
which `import tasks` must not pay.

swebench is pinned to 4.1.0, the last release that derives eval scripts, images and log parsers from
the classic record (`repo`, `version`, ...) that `princeton-nlp/SWE-bench_Lite` and `tasks.schema`
hold; 5.x expects them as extra dataset columns (`image`, `eval_script`, `log_parser`, `eval_type`).
"""

from __future__ import annotations

import functools
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from common.errors import ConfigError
from tasks.evaluation import EvaluationResult, evaluate
from tasks.sandbox.base import SandboxError
from tasks.schema import Instance
from tasks.suites import SUITES

if TYPE_CHECKING:  # pragma: no cover - typing only; swebench is imported lazily
    from swebench.harness.test_spec.test_spec import TestSpec

SWEBENCH_VERSION = "4.1.0"
DEFAULT_TIMEOUT_S = 1800.0  # swebench's own default per instance
HUB_NAMESPACE = "swebench"  # Docker Hub organisation of the prebuilt instance images
ENV_NAME = "testbed"  # the conda environment inside every instance image
START_MARKER = ">>>>> Start Test Output"  # swebench's markers around the test command in every eval script
END_MARKER = ">>>>> End Test Output"
CONTAINER_LABEL = "org.spectune.swebench"
# The markers reach the log as the script's xtrace on stderr, the test results on stdout: read from two
# pipes, the last results could land after the end marker and count as missing. One pipe keeps the order.
EVAL_COMMAND = ["/bin/bash", "-c", "exec /bin/bash /eval.sh 2>&1"]
# swebench's statuses -> ours; XFAIL counts as passing in swebench's grading
OUTCOMES = {"PASSED": "passed", "XFAIL": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped"}

Evaluator = Callable[[Instance, str], EvaluationResult]


class SwebenchUnavailableError(RuntimeError):
    """The pinned swebench package is missing or another version; the message says what to install."""


class InstanceImageMissingError(SandboxError):
    """No docker image for the instance; the message says how to build or pull one."""


@functools.cache
def _require_swebench() -> None:
    """Import swebench once and check it is the pinned version (its specs tables decide every command)."""
    try:
        import swebench
    except ImportError as exc:
        raise SwebenchUnavailableError(
            "swe-bench-lite evaluation needs the optional swebench extra: pip install 'spectune[swebench]' "
            f"(from a clone: pip install -e '.[swebench]') ({exc})"
        ) from exc
    if swebench.__version__ != SWEBENCH_VERSION:
        raise SwebenchUnavailableError(
            f"swebench {swebench.__version__} is installed; spectune is pinned to {SWEBENCH_VERSION} "
            f"(5.x reads eval scripts and images from extra dataset columns that the Lite records lack): "
            f"pip install swebench=={SWEBENCH_VERSION}"
        )


def make_spec(instance: Instance, *, namespace: str | None = None, tag: str = "latest") -> TestSpec:
    """swebench's TestSpec for evaluating `instance`: the eval script, the image name and the tests to grade.

    Built from swebench's own parts (its repo/version specs table and `make_eval_script_list`), not
    `make_test_spec`: that also writes the environment image's setup script, and for django, flask,
    matplotlib, pylint and xarray downloads requirements from GitHub to do so, while evaluating needs
    no network once the image exists. The setup-script fields stay empty: do not build images from it.
    `namespace` None names the image as swebench builds it here, "swebench" as Docker Hub has it.
    """
    _require_swebench()
    from swebench.harness.constants import DOCKER_WORKDIR, MAP_REPO_TO_EXT, MAP_REPO_VERSION_TO_SPECS
    from swebench.harness.test_spec.create_scripts import make_eval_script_list
    from swebench.harness.test_spec.test_spec import TestSpec

    versions = MAP_REPO_VERSION_TO_SPECS.get(instance.repo)
    if versions is None or instance.version not in versions:
        known = f"versions {sorted(versions)}" if versions else "no versions at all"
        raise ConfigError(
            f"{instance.instance_id}: swebench {SWEBENCH_VERSION} has no test specs for {instance.repo} "
            f"version {instance.version!r} ({known})"
        )
    specs = versions[instance.version]
    eval_script = make_eval_script_list(
        instance.to_record(), specs, ENV_NAME, DOCKER_WORKDIR, instance.base_commit, instance.test_patch
    )
    return TestSpec(
        instance_id=instance.instance_id,
        repo=instance.repo,
        version=instance.version,
        repo_script_list=[],
        eval_script_list=eval_script,
        env_script_list=[],
        arch="x86_64",
        FAIL_TO_PASS=list(instance.fail_to_pass),
        PASS_TO_PASS=list(instance.pass_to_pass),
        language=MAP_REPO_TO_EXT[instance.repo],
        docker_specs=specs.get("docker_specs", {}),
        namespace=namespace,
        instance_image_tag=tag,
    )


def eval_test_command(spec: TestSpec) -> str:
    """The command the eval script runs between swebench's markers: the repo's test command and test files."""
    lines = spec.eval_script_list
    start = next(i for i, line in enumerate(lines) if START_MARKER in line)
    end = next(i for i, line in enumerate(lines) if END_MARKER in line)
    return "\n".join(lines[start + 1 : end])


def image_names(instance: Instance, tag: str = "latest") -> list[str]:
    """Names the instance image may have here: as swebench builds it locally, then as pulled from Docker Hub."""
    return [make_spec(instance, namespace=ns, tag=tag).instance_image_key for ns in (None, HUB_NAMESPACE)]


def image_help(instance: Instance, tag: str = "latest") -> str:
    """How to get the instance's image: pull swebench's prebuilt one, or build it with swebench."""
    local, hub = image_names(instance, tag)
    return (
        f"no docker image for {instance.instance_id} (looked for {local} and {hub}). "
        f"Pull the prebuilt one with `docker pull {hub}`, or build it with "
        f"`python -m swebench.harness.prepare_images --dataset_name princeton-nlp/SWE-bench_Lite --split test "
        f"--instance_ids {instance.instance_id}` (both need network: Docker Hub, or GitHub, conda and PyPI); "
        "on an offline machine, `docker save` it elsewhere and `docker load` it here."
    )


def find_image(client: Any, instance: Instance, tag: str = "latest") -> str:
    """The first of `image_names` the daemon has; InstanceImageMissingError (with how to get one) if none."""
    import docker.errors

    for name in image_names(instance, tag):
        try:
            client.images.get(name)
            return name
        except docker.errors.ImageNotFound:
            continue
    raise InstanceImageMissingError(image_help(instance, tag))


def grade(spec: TestSpec, log: str) -> EvaluationResult:
    """Grade an eval-script log with swebench's parser for the repo and its FAIL_TO_PASS/PASS_TO_PASS report."""
    _require_swebench()
    from swebench.harness.grading import get_eval_report, get_logs_eval, get_resolution_status

    iid = spec.instance_id
    with tempfile.TemporaryDirectory(prefix="spectune-swebench-") as tmp:
        path = Path(tmp) / "test_output.txt"  # swebench's graders read the log from a file
        path.write_text(log)
        prediction = {"instance_id": iid, "model_name_or_path": "spectune", "model_patch": ""}
        report = get_eval_report(spec, prediction, str(path), include_tests_status=True)[iid]
        status_map, _ = get_logs_eval(spec, str(path))
    test_ids = [*spec.FAIL_TO_PASS, *spec.PASS_TO_PASS]
    if not report["patch_successfully_applied"]:
        why = "no complete test output between swebench's markers, or the log reports a failed step"
        return EvaluationResult(iid, False, "error", dict.fromkeys(test_ids, "missing"), why)
    tests = {t: OUTCOMES.get(status_map.get(t, ""), "missing") for t in test_ids}
    if report["resolved"]:
        return EvaluationResult(iid, True, "resolved", tests)
    counts = report["tests_status"]
    summary = ", ".join(
        f"{kind} {len(counts[kind]['success'])}/{len(counts[kind]['success']) + len(counts[kind]['failure'])} pass"
        for kind in ("FAIL_TO_PASS", "PASS_TO_PASS")
    )
    failing = [*counts["FAIL_TO_PASS"]["failure"], *counts["PASS_TO_PASS"]["failure"]]
    message = f"{get_resolution_status(counts)}: {summary}; not passing: {failing[:5]}"
    return EvaluationResult(iid, False, "unresolved", tests, message)


def evaluate_swebench(
    instance: Instance,
    model_patch: str,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    client: Any = None,
    tag: str = "latest",
) -> EvaluationResult:
    """Apply `model_patch` in a fresh container of the instance image, run swebench's eval script, grade it.

    Statuses: resolved, unresolved (RESOLVED_PARTIAL / RESOLVED_NO in the message; a timeout too),
    patch_failed (none of swebench's apply commands took it), error (no gradable test output). As in
    SWE-bench, a patch that edits test files is not rejected: the eval script resets them first.
    Raises InstanceImageMissingError without the image, SandboxError without a docker daemon.
    """
    t0 = time.perf_counter()
    spec = make_spec(instance, tag=tag)
    own_client = client is None
    if own_client:
        from tasks.sandbox.docker import connect

        client = connect()
    try:
        image = find_image(client, instance, tag)
        result = _run_in_container(spec, image, model_patch, client, timeout)
    finally:
        if own_client:
            client.close()
    result.duration_s = time.perf_counter() - t0
    return result


def _run_in_container(spec: TestSpec, image: str, model_patch: str, client: Any, timeout: float) -> EvaluationResult:
    """swebench's `run_instance`, minus its log folders and image builds: one container, removed after."""
    from swebench.harness.constants import DOCKER_PATCH, DOCKER_USER, DOCKER_WORKDIR
    from swebench.harness.docker_utils import copy_to_container, exec_run_with_timeout
    from swebench.harness.run_evaluation import GIT_APPLY_CMDS

    iid = spec.instance_id
    container = client.containers.create(
        image=image,
        name=f"sweb.eval.{iid.lower()}.spectune-{uuid.uuid4().hex[:8]}",
        user=DOCKER_USER,
        detach=True,
        command="tail -f /dev/null",
        platform=spec.platform,
        cap_add=spec.docker_specs.get("run_args", {}).get("cap_add", []),
        labels={CONTAINER_LABEL: iid},
    )
    try:
        container.start()
        with tempfile.TemporaryDirectory(prefix="spectune-swebench-") as tmp:
            # An empty patch is evaluated as is (the tests run on the unchanged repository), not
            # refused: that is how a suite shows that no instance is resolved by doing nothing.
            if model_patch.strip():
                patch_file = Path(tmp) / "patch.diff"
                patch_file.write_text(model_patch)
                copy_to_container(container, patch_file, PurePosixPath(DOCKER_PATCH))
                for command in GIT_APPLY_CMDS:
                    applied = container.exec_run(f"{command} {DOCKER_PATCH}", workdir=DOCKER_WORKDIR, user=DOCKER_USER)
                    if applied.exit_code == 0:
                        break
                else:
                    output = applied.output.decode("utf-8", errors="replace").strip()
                    return EvaluationResult(
                        iid, False, "patch_failed", {}, f"the patch does not apply: {output[-2000:]}"
                    )
            eval_file = Path(tmp) / "eval.sh"
            eval_file.write_text(spec.eval_script)
            copy_to_container(container, eval_file, PurePosixPath("/eval.sh"))
            try:
                log, timed_out, _ = exec_run_with_timeout(container, EVAL_COMMAND, timeout)
            except UnicodeDecodeError as exc:  # swebench decodes the log strictly
                return EvaluationResult(iid, False, "error", {}, f"the test output is not UTF-8: {exc}")
    finally:
        container.remove(force=True)
    if timed_out:
        tests = dict.fromkeys([*spec.FAIL_TO_PASS, *spec.PASS_TO_PASS], "error")
        return EvaluationResult(iid, False, "unresolved", tests, f"tests timed out after {timeout:g}s")
    return grade(spec, log)


def make_evaluator(
    suite: str, *, sandbox: str = "local", timeout: float | None = None, client: Any = None
) -> Evaluator:
    """`evaluator(instance, patch) -> EvaluationResult` for a suite.

    swe-lite: `tasks.evaluation.evaluate` in a fresh `sandbox` ("local" or "docker"); swe-bench-lite:
    `evaluate_swebench` with `client` (None: connect to the default daemon per evaluation).
    `timeout` None keeps each evaluator's own default.
    """
    if suite == "swe-lite":
        from tasks.sandbox import make_sandbox
        from tasks.swelite.projects import materialize

        factory = functools.partial(make_sandbox, sandbox)
        extra = {} if timeout is None else {"timeout": timeout}

        def swe_lite(instance: Instance, patch: str) -> EvaluationResult:
            return evaluate(instance, patch, materialize, factory, **extra)

        return swe_lite
    if suite == "swe-bench-lite":
        return functools.partial(evaluate_swebench, timeout=timeout or DEFAULT_TIMEOUT_S, client=client)
    raise ConfigError(f"unknown suite {suite!r}; allowed: {list(SUITES)}")
