"""SWE-bench Lite evaluation with the pinned swebench harness, offline.

The instance images cannot be built here, so what runs is what can: a small local JSONL in the
exact SWE-bench Lite schema (records written for these tests), the eval scripts swebench writes for
it, swebench's grading of REAL pytest logs (a small project run in the local sandbox with the test
command of its eval script), the clear error for a missing image, and the container path end to
end on a stand-in instance image built from the sandbox image. Docker tests skip without a daemon
(fail under CI=true).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tasks.evaluation import STATUSES
from tasks.patching import apply_patch
from tasks.sandbox import SandboxError, make_sandbox
from tasks.schema import Instance
from tasks.suites import load_suite
from tasks.swelite.diffs import file_diff

IN_CI = os.environ.get("CI", "").strip().lower() == "true"
try:
    import swebench
except ImportError:
    if IN_CI:
        raise
    pytest.skip("swebench is not installed (pip install swebench==4.1.0)", allow_module_level=True)

from tasks import swebench_eval  # noqa: E402
from tasks.swebench_eval import (  # noqa: E402
    END_MARKER,
    START_MARKER,
    InstanceImageMissingError,
    SwebenchUnavailableError,
    eval_test_command,
    evaluate_swebench,
    grade,
    image_names,
    make_evaluator,
    make_spec,
)

# -- a small project, in the layout of a pytest-dev/pytest checkout ---------------------------

PATHSPLIT = '''\
"""Split slash-separated paths."""


def split_parts(path):
    """The non-empty parts of `path`, in order."""
    return [p for p in path.split("/") if p]


def common_prefix(a, b):
    """The leading parts `a` and `b` share."""
    out = []
    for x, y in zip(split_parts(a), split_parts(b)):
        if x != y:
            break
        out.append(x)
    return out


def depth(path):
    """How deep `path` goes: `.` stays, `..` goes up one, never above the start."""
    level = 0
    for part in split_parts(path):
        if part == "..":
            level += 1
        elif part != ".":
            level += 1
    return level
'''
PATHSPLIT_FIXED = PATHSPLIT.replace("level += 1\n        elif", "level = max(level - 1, 0)\n        elif")
PATHSPLIT_HALF_FIXED = PATHSPLIT.replace("level += 1\n        elif", "level -= 1\n        elif")  # can go below 0
PATHSPLIT_TESTS = """\
from pathsplit import common_prefix, depth, split_parts


def test_split_parts():
    assert split_parts("/a//b/") == ["a", "b"]


def test_common_prefix():
    assert common_prefix("a/b/c", "a/b/d") == ["a", "b"]


def test_depth_plain():
    assert depth("a/./b") == 2
"""
PATHSPLIT_TESTS_NEW = (
    PATHSPLIT_TESTS
    + """

def test_depth_parent_goes_up():
    assert depth("a/b/..") == 1


def test_depth_never_negative():
    assert depth("../a") == 1
"""
)
PROJECT = {
    "conftest.py": "import pathlib\nimport sys\n\nsys.path.insert(0, str(pathlib.Path(__file__).parent / 'src'))\n",
    "src/pathsplit.py": PATHSPLIT,
    "testing/test_pathsplit.py": PATHSPLIT_TESTS,
}
TESTS = "testing/test_pathsplit.py"

DJANGO_TEXT = 'def shout(text):\n    return text.upper() + "!"\n'
DJANGO_TESTS = (
    "from django.test import SimpleTestCase\n\nfrom django.utils.text import shout\n\n\n"
    'class ShoutTests(SimpleTestCase):\n    def test_shout(self):\n        self.assertEqual(shout("hi"), "HI!")\n'
)
DJANGO_TESTS_NEW = DJANGO_TESTS + '\n    def test_shout_strips(self):\n        self.assertEqual(shout(" hi "), "HI!")\n'
REQUESTS_UTILS = "def parse_pair(text):\n    key, value = text.split('=')\n    return key, value\n"
REQUESTS_TESTS = (
    "import pytest\n\nfrom requests.utils import parse_pair\n\n\n"
    "@pytest.mark.parametrize('text', ['a=1'])\ndef test_parse_pair(text):\n    assert parse_pair(text) == ('a', '1')\n"
)
REQUESTS_TESTS_NEW = REQUESTS_TESTS.replace("['a=1']", "['a=1', 'b=2=3']").replace(
    "== ('a', '1')", "== tuple(text.split('=', 1))"
)

RECORDS = [
    {
        "repo": "pytest-dev/pytest",
        "instance_id": "pytest-dev__pytest-90101",
        "base_commit": "3f0c1d2e4b5a69788a9b0c1d2e3f405162738495",
        "patch": file_diff("src/pathsplit.py", PATHSPLIT, PATHSPLIT_FIXED),
        "test_patch": file_diff(TESTS, PATHSPLIT_TESTS, PATHSPLIT_TESTS_NEW),
        "problem_statement": 'depth("a/b/..") returns 3, but `..` should go up one level.',
        "hints_text": "",
        "created_at": "2024-02-03T04:05:06Z",
        "version": "8.0",
        "FAIL_TO_PASS": json.dumps([f"{TESTS}::test_depth_parent_goes_up", f"{TESTS}::test_depth_never_negative"]),
        "PASS_TO_PASS": json.dumps(
            [f"{TESTS}::test_split_parts", f"{TESTS}::test_common_prefix", f"{TESTS}::test_depth_plain"]
        ),
        "environment_setup_commit": "aa11bb22cc33dd44ee55ff6677889900aabbccdd",
    },
    {
        "repo": "django/django",
        "instance_id": "django__django-90102",
        "base_commit": "0123456789abcdef0123456789abcdef01234567",
        "patch": file_diff(
            "django/utils/text.py", DJANGO_TEXT, DJANGO_TEXT.replace("text.upper()", "text.strip().upper()")
        ),
        "test_patch": file_diff("tests/utils_tests/test_text.py", DJANGO_TESTS, DJANGO_TESTS_NEW),
        "problem_statement": "shout() keeps surrounding whitespace.",
        "hints_text": "Strip first.",
        "created_at": "2023-11-12T10:00:00Z",
        "version": "4.0",
        "FAIL_TO_PASS": json.dumps(["test_shout_strips (utils_tests.test_text.ShoutTests.test_shout_strips)"]),
        "PASS_TO_PASS": json.dumps(["test_shout (utils_tests.test_text.ShoutTests.test_shout)"]),
        "environment_setup_commit": "fedcba9876543210fedcba9876543210fedcba98",
    },
    {
        "repo": "psf/requests",
        "instance_id": "psf__requests-90103",
        "base_commit": "89abcdef0123456789abcdef0123456789abcdef",
        "patch": file_diff("requests/utils.py", REQUESTS_UTILS, REQUESTS_UTILS.replace("split('=')", "split('=', 1)")),
        "test_patch": file_diff("tests/test_utils.py", REQUESTS_TESTS, REQUESTS_TESTS_NEW),
        "problem_statement": "parse_pair('b=2=3') raises ValueError: too many values to unpack.",
        "hints_text": "",
        "created_at": "2022-05-06T07:08:09Z",
        "version": "2.26",
        "FAIL_TO_PASS": json.dumps(["tests/test_utils.py::test_parse_pair[b=2=3]"]),
        "PASS_TO_PASS": json.dumps(["tests/test_utils.py::test_parse_pair[a=1]"]),
        "environment_setup_commit": "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c",
    },
]
EXPECTED_TEST_COMMANDS = {
    "pytest-dev__pytest-90101": "pytest -rA testing/test_pathsplit.py",
    "django__django-90102": (
        "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 utils_tests.test_text"
    ),
    "psf__requests-90103": "pytest -rA tests/test_utils.py",
}


@pytest.fixture(scope="module")
def instances(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Instance]:
    path = tmp_path_factory.mktemp("lite") / "swe-bench-lite-test.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return {i.instance_id: i for i in load_suite("swe-bench-lite", "test", path=str(path))}


def test_the_local_jsonl_loads_through_the_suite_loader(instances):
    assert list(instances) == [r["instance_id"] for r in RECORDS]
    django = instances["django__django-90102"]
    assert django.fail_to_pass == ["test_shout_strips (utils_tests.test_text.ShoutTests.test_shout_strips)"]
    assert django.repo == "django/django" and django.version == "4.0" and django.hints_text == "Strip first."


@pytest.mark.parametrize("iid", list(EXPECTED_TEST_COMMANDS))
def test_eval_script_resets_tests_applies_the_test_patch_and_runs_the_repo_test_command(instances, iid):
    inst = instances[iid]
    spec = make_spec(inst)
    script = spec.eval_script
    assert eval_test_command(spec) == EXPECTED_TEST_COMMANDS[iid], "wrong test command for the repo/version"
    test_file = next(line[len("diff --git a/") :].split(" b/")[0] for line in inst.test_patch.splitlines())
    reset = f"git checkout {inst.base_commit} {test_file}"
    apply = f"git apply -v - <<'EOF_114329324912'\n{inst.test_patch}\nEOF_114329324912"
    assert script.count(reset) == 2, "the test files are reset before the test patch and after the run"
    first_reset, applied = script.index(reset), script.index(apply)
    start, run, end = script.index(START_MARKER), script.index(EXPECTED_TEST_COMMANDS[iid]), script.index(END_MARKER)
    assert first_reset < applied < start < run < end < script.rindex(reset), "eval script steps out of order"
    assert "cd /testbed" in script and "conda activate testbed" in script
    assert spec.FAIL_TO_PASS == inst.fail_to_pass and spec.PASS_TO_PASS == inst.pass_to_pass


def test_image_names_follow_swebench(instances):
    local, hub = image_names(instances["django__django-90102"])
    assert local == "sweb.eval.x86_64.django__django-90102:latest"
    assert hub == "swebench/sweb.eval.x86_64.django_1776_django-90102:latest"  # Docker Hub allows no "__"


def test_unknown_repo_or_version_is_a_clear_error(instances):
    inst = instances["psf__requests-90103"]
    with pytest.raises(ValueError, match=r"no test specs for psf/requests version '0\.0'.*2\.26"):
        make_spec(Instance.from_record({**inst.to_record(), "version": "0.0"}))
    with pytest.raises(ValueError, match="no versions at all"):
        make_spec(Instance.from_record({**inst.to_record(), "repo": "nobody/nothing"}))


def test_another_swebench_version_is_refused(monkeypatch):
    monkeypatch.setattr(swebench, "__version__", "5.0.2")
    swebench_eval._require_swebench.cache_clear()
    try:
        with pytest.raises(SwebenchUnavailableError, match=r"pip install swebench==4\.1\.0"):
            swebench_eval._require_swebench()
    finally:
        monkeypatch.undo()
        swebench_eval._require_swebench.cache_clear()


# -- grading real pytest logs -------------------------------------------------------------------


def _marked_run(spec, workspace: Path) -> str:
    """Run the eval script's test section in the local sandbox: xtrace on and the markers, as eval.sh does."""
    script = f"set -uxo pipefail\n: '{START_MARKER}'\n{eval_test_command(spec)}\n: '{END_MARKER}'\n"
    sandbox = make_sandbox("local")
    try:
        sandbox.start(workspace)
        return sandbox.run(script, timeout=120).output
    finally:
        sandbox.close()


@pytest.fixture(scope="module")
def real_logs(instances, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Eval-section logs of the project with the gold, an empty and a half-right patch (test_patch applied)."""
    inst = instances["pytest-dev__pytest-90101"]
    patches = {
        "gold": inst.patch,
        "empty": "",
        "half": file_diff("src/pathsplit.py", PATHSPLIT, PATHSPLIT_HALF_FIXED),
    }
    logs = {}
    for name, patch in patches.items():
        root = tmp_path_factory.mktemp(name)
        for rel, text in PROJECT.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        apply_patch(root, patch)
        apply_patch(root, inst.test_patch)
        try:
            logs[name] = _marked_run(make_spec(inst), root)
        except SandboxError as e:
            if IN_CI:
                raise
            pytest.skip(f"the local sandbox is unavailable: {e}")
    return logs


def test_gold_patch_log_grades_resolved(instances, real_logs):
    inst = instances["pytest-dev__pytest-90101"]
    result = grade(make_spec(inst), real_logs["gold"])
    assert (result.status, result.resolved) == ("resolved", True), result.message
    assert result.tests == dict.fromkeys([*inst.fail_to_pass, *inst.pass_to_pass], "passed")


def test_empty_patch_log_grades_resolved_no(instances, real_logs):
    inst = instances["pytest-dev__pytest-90101"]
    result = grade(make_spec(inst), real_logs["empty"])
    assert (result.status, result.resolved) == ("unresolved", False)
    assert result.message.startswith("RESOLVED_NO: FAIL_TO_PASS 0/2 pass, PASS_TO_PASS 3/3 pass"), result.message
    assert {result.tests[t] for t in inst.fail_to_pass} == {"failed"}
    assert {result.tests[t] for t in inst.pass_to_pass} == {"passed"}


def test_half_right_patch_log_grades_resolved_partial(instances, real_logs):
    inst = instances["pytest-dev__pytest-90101"]
    result = grade(make_spec(inst), real_logs["half"])
    assert result.status == "unresolved" and result.message.startswith("RESOLVED_PARTIAL: FAIL_TO_PASS 1/2 pass")
    assert result.tests[f"{TESTS}::test_depth_parent_goes_up"] == "passed"
    assert result.tests[f"{TESTS}::test_depth_never_negative"] == "failed"


def test_log_without_swebench_markers_is_an_error(instances, real_logs):
    inst = instances["pytest-dev__pytest-90101"]
    log = real_logs["gold"].replace(START_MARKER, "")
    result = grade(make_spec(inst), log)
    assert (result.status, result.resolved) == ("error", False) and result.status in STATUSES
    assert set(result.tests.values()) == {"missing"}


def test_make_evaluator_per_suite():
    with pytest.raises(ValueError, match="swe-bench-lite"):
        make_evaluator("nope")
    inst = load_suite("swe-lite", "test", limit=1)[0]
    try:
        result = make_evaluator("swe-lite")(inst, inst.patch)
    except SandboxError as e:
        if IN_CI:
            raise
        pytest.skip(f"the local sandbox is unavailable: {e}")
    assert result.resolved, result.message


# -- docker: the missing image, and the container path on a stand-in image ----------------------


@pytest.fixture(scope="module")
def client():
    from tasks.sandbox.docker import connect

    try:
        docker_client = connect()
    except SandboxError as e:
        if IN_CI:
            pytest.fail(f"CI=true but no docker daemon: {e}")
        pytest.skip(f"no docker daemon: {e}")
    yield docker_client
    docker_client.close()


def _containers_of(client, iid: str) -> list:
    return client.containers.list(all=True, filters={"label": f"{swebench_eval.CONTAINER_LABEL}={iid}"})


def test_missing_instance_image_says_how_to_get_it(instances, client):
    inst = instances["pytest-dev__pytest-90101"]
    tag = f"absent-{uuid.uuid4().hex[:8]}"
    with pytest.raises(InstanceImageMissingError) as info:
        evaluate_swebench(inst, inst.patch, client=client, tag=tag)
    message = str(info.value)
    for name in image_names(inst, tag):
        assert name in message
    assert "docker pull swebench/sweb.eval.x86_64.pytest-dev_1776_pytest-90101" in message
    assert (
        "python -m swebench.harness.prepare_images" in message and "--instance_ids pytest-dev__pytest-90101" in message
    )
    assert not _containers_of(client, inst.instance_id)


# The stand-in image has no Python: its `pytest` runs each `test_*` bash function of the files it is
# given (with lib.sh loaded) and reports them as `pytest -rA` does, so swebench's parser reads them.
# It reports nothing when its stdout and stderr are separate pipes (the order race it guards against).
FAKE_PYTEST = """#!/bin/bash
# swebench's markers are xtrace on stderr: only one pipe for both keeps the log in the order of events.
if ! [[ /dev/stdout -ef /dev/stderr ]]; then
    echo "stdout and stderr are separate pipes"; exit 3
fi
rc=0
for file in "$@"; do
    [[ $file == -* ]] && continue
    while read -r _ _ name; do
        [[ $name == test_* ]] || continue
        if (source ./lib.sh && source "$file" && "$name") >/dev/null 2>&1; then
            echo "PASSED $file::$name"
        else
            echo "FAILED $file::$name"; rc=1
        fi
    done < <(source "$file"; declare -F)
done
exit $rc
"""
CLAMP = """clamp() {
    local value=$1 low=$2 high=$3
    if (( value < low )); then
        echo "$low"
    elif (( value > high )); then
        echo "$low"
    else
        echo "$value"
    fi
}
"""
CLAMP_TESTS = "test_inside() { [[ $(clamp 5 0 10) == 5 ]]; }\ntest_below() { [[ $(clamp -3 0 10) == 0 ]]; }\n"
CLAMP_TESTS_NEW = CLAMP_TESTS + "test_above() { [[ $(clamp 12 0 10) == 10 ]]; }\n"


@pytest.fixture(scope="module")
def stand_in(client, tmp_path_factory: pytest.TempPathFactory):
    """(instance, image tag): a git repo at /testbed in an image built from the sandbox image, removed after."""
    import docker.errors

    from tasks.sandbox.docker import DEFAULT_IMAGE

    try:
        client.images.get(DEFAULT_IMAGE)
    except docker.errors.ImageNotFound:
        if IN_CI:
            pytest.fail(f"CI=true but the sandbox image {DEFAULT_IMAGE} is missing")
        pytest.skip(f"the sandbox image {DEFAULT_IMAGE} is missing (python -m tasks.sandbox build-image)")
    ctx = tmp_path_factory.mktemp("standin")
    repo = ctx / "testbed"
    (repo / "testing").mkdir(parents=True)
    (repo / "lib.sh").write_text(CLAMP)
    (repo / "testing/test_clamp.sh").write_text(CLAMP_TESTS)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "-c", "init.defaultBranch=main"]
    env = {"PATH": os.environ["PATH"], "HOME": str(ctx), "GIT_CONFIG_NOSYSTEM": "1"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        subprocess.run([*git, *args], cwd=repo, env=env, check=True)
    base = subprocess.run([*git, "rev-parse", "HEAD"], cwd=repo, env=env, check=True, capture_output=True, text=True)
    (ctx / "pytest").write_text(FAKE_PYTEST)
    (ctx / "pytest").chmod(0o755)
    (ctx / "Dockerfile").write_text(f"FROM {DEFAULT_IMAGE}\nCOPY testbed /testbed\nCOPY pytest /usr/local/bin/pytest\n")
    tests = "testing/test_clamp.sh"
    inst = Instance(
        instance_id=f"pytest-dev__pytest-9{uuid.uuid4().int % 10**6:06d}",
        repo="pytest-dev/pytest",
        base_commit=base.stdout.strip(),
        problem_statement="clamp(12, 0, 10) gives 0, not 10.",
        patch=file_diff(
            "lib.sh",
            CLAMP,
            CLAMP.replace('> high )); then\n        echo "$low"', '> high )); then\n        echo "$high"'),
        ),
        test_patch=file_diff(tests, CLAMP_TESTS, CLAMP_TESTS_NEW),
        fail_to_pass=[f"{tests}::test_above"],
        pass_to_pass=[f"{tests}::test_inside", f"{tests}::test_below"],
        version="8.0",
    )
    tag = f"spectune-test-{uuid.uuid4().hex[:8]}"
    image = image_names(inst, tag)[0]
    client.images.build(path=str(ctx), tag=image, rm=True, pull=False)
    shutil.rmtree(ctx)
    yield inst, tag
    client.images.remove(image, force=True)


def test_container_run_resolves_the_gold_patch(client, stand_in):
    inst, tag = stand_in
    result = evaluate_swebench(inst, inst.patch, client=client, tag=tag, timeout=120)
    assert (result.status, result.resolved) == ("resolved", True), result.message
    assert set(result.tests.values()) == {"passed"} and len(result.tests) == 3
    empty = evaluate_swebench(inst, "", client=client, tag=tag, timeout=120)
    assert empty.status == "unresolved" and empty.message.startswith("RESOLVED_NO"), empty.message
    assert empty.tests["testing/test_clamp.sh::test_above"] == "failed"
    assert not _containers_of(client, inst.instance_id), "containers must be removed after each evaluation"


def test_container_run_reports_a_patch_that_does_not_apply(client, stand_in):
    inst, tag = stand_in
    stale = file_diff("lib.sh", "min() {\n    :\n}\n", "min() {\n    echo 0\n}\n")  # no such lines, either way
    result = evaluate_swebench(inst, stale, client=client, tag=tag, timeout=120)
    assert (result.status, result.resolved) == ("patch_failed", False)
    assert "lib.sh" in result.message
    assert not _containers_of(client, inst.instance_id)
