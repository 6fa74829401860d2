"""Build the offline `swe-lite` suite: mutate the bundled projects into verified bug-fix tasks.

    python -m tasks.build swe-lite [--seed 0] [--projects a,b] [--per-family 12] [--out DIR]
    python -m tasks.build swe-lite --probe 40 --seed 1 --out runs/probe   # a generalisation probe

For each project, candidate mutations are drawn deterministically (seeded) per module and family,
run against the project's tests in the sandbox, and kept when at least one test fails and the
others pass. The failing tests become FAIL_TO_PASS and are held out of the workspace (they come
back as `test_patch` at evaluation). Each failing test is also run check by check
(tasks/swelite/check_runner.py); the issue text is a script made of part of one failing test: the
first half of its failing checks (else the first), kept only when the hidden tests hold at least as
many other failing checks on calls the issue never shows (tasks/swelite/checks.py, suite v2), so a
patch that answers just the shown calls resolves nothing. Splits are assigned by mutation site, so
no site appears in two splits.

A probe (`--probe N`) is N fresh instances at sites the committed suite never uses (any split),
verified the same way and written to `probe.jsonl` + `manifest.json` in a folder of its own: the
frozen suite is never touched. Candidates are tried in a seeded order that interleaves projects and
families, and only until N are kept, so a probe of a few dozen takes minutes, not the full build.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import tempfile
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from rich.progress import Progress

from common.errors import ConfigError
from tasks.evaluation import parse_outcomes
from tasks.sandbox import make_sandbox
from tasks.schema import Instance
from tasks.suites import SWE_LITE_VERSION
from tasks.swelite import check_runner
from tasks.swelite.checks import RULE, Check, checks_of, choose_shown, function_of
from tasks.swelite.diffs import file_diff, remove_functions
from tasks.swelite.issue_text import compose_issue, innermost_frame, repro_script, stable_addresses
from tasks.swelite.mutations import FAMILIES, Mutation, find_mutations
from tasks.swelite.projects import (
    content_hash,
    copy_project,
    list_projects,
    mutation_site,
    project_dir,
    project_files,
)

DATA_DIR = Path(__file__).resolve().parent / "data" / "swe-lite"
SPLITS = ("train", "dev", "test")
PROBE_SPLIT = "probe"  # the split name of a generalisation probe (its own folder, never the suite's)
TEST_CMD = "python -m pytest -rA --tb=no -q -p no:cacheprovider"
MAX_FAIL_FRACTION = 0.4  # a mutation that breaks more than this share of tests is not one bug
SUITE_VERSION = SWE_LITE_VERSION  # v2: issues show part of the failing checks (tasks/swelite/checks.py)
MAX_SNIPPET_TRIES = 3  # failing tests tried, in order, as the source of the issue's snippet


@dataclass
class Candidate:
    """One mutation of one project, before it is verified."""

    project: str
    mutation: Mutation
    clean_source: str


def split_of(project: str, path: str, line: int, seed: int) -> str:
    """Split by mutation site: a stable hash of (project, file, line)."""
    h = hashlib.sha256(f"{seed}:{project}:{path}:{line}".encode()).digest()
    u = int.from_bytes(h[:8], "big") / 2**64
    return "test" if u < 0.2 else "dev" if u < 0.35 else "train"


def all_mutations(project: str) -> dict[str, list[Candidate]]:
    """Every candidate mutation of a project's modules (tests and __init__ excluded), by family, in source order."""
    root = project_dir(project)
    by_family: dict[str, list[Candidate]] = defaultdict(list)
    for rel in project_files(root):
        if rel.suffix != ".py" or rel.parts[0] == "tests" or rel.name == "__init__.py":
            continue
        source = (root / rel).read_text()
        for m in find_mutations(rel.as_posix(), source):
            by_family[m.family].append(Candidate(project, m, source))
    return by_family


def candidates(project: str, seed: int, per_family: int, families: tuple[str, ...] = FAMILIES) -> list[Candidate]:
    """Deterministic sample of mutations: up to `per_family` per family per project, distinct sites."""
    by_family = all_mutations(project)
    chosen: list[Candidate] = []
    for family in families:
        pool = by_family.get(family, [])
        random.Random(f"{seed}:{project}:{family}").shuffle(pool)
        sites: set[tuple[str, int]] = set()
        for cand in pool:
            if len(sites) >= per_family:
                break
            if cand.mutation.site not in sites:
                sites.add(cand.mutation.site)
                chosen.append(cand)
    return chosen


def test_ids(project: str) -> list[str]:
    """Every test node id of a project, in file and definition order (read from the source)."""
    import ast

    root = project_dir(project)
    ids = []
    for rel in project_files(root):
        if rel.parts[0] == "tests" and rel.name.startswith("test_") and rel.suffix == ".py":
            tree = ast.parse((root / rel).read_text())
            ids += [
                f"{rel.as_posix()}::{n.name}"
                for n in tree.body
                if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
            ]
    return ids


def _by_file(test_ids_: list[str]) -> dict[str, list[str]]:
    """{file: [test names]} of node ids, in order (what check_runner.run takes)."""
    out: dict[str, list[str]] = defaultdict(list)
    for tid in test_ids_:
        path, name = tid.split("::", 1)
        out[path].append(name)
    return dict(out)


def _heredoc(script: str) -> str:
    return f"python - <<'SPECTUNE_REPRO_EOF'\n{script}SPECTUNE_REPRO_EOF"


class Builder:
    """Verifies candidates in sandboxes and turns the good ones into instances."""

    def __init__(self, seed: int, sandbox: str = "local") -> None:
        self.seed = seed
        self.sandbox = sandbox
        self._expected: dict[tuple[str, str], str] = {}
        self._clean_checks: dict[str, dict[str, list[bool]]] = {}  # project -> check_runner result

    def _run(self, workspace: Path, command: str, timeout: float = 20.0):
        sb = make_sandbox(self.sandbox)
        try:
            sb.start(workspace)
            return sb.run(command, timeout=timeout)
        finally:
            sb.close()

    def check_clean(self, project: str) -> list[str]:
        """All tests of the clean project must pass, and each of their checks run alone; returns their ids."""
        ids = test_ids(project)
        with tempfile.TemporaryDirectory() as tmp:
            ws = copy_project(project, Path(tmp) / "ws")
            result = self._run(ws, TEST_CMD)
            checks = check_runner.parse(self._run(ws, _heredoc(check_runner.script(_by_file(ids))), 60.0).output)
        outcomes = parse_outcomes(result.output, ids)
        bad = [t for t, o in outcomes.items() if o != "passed"]
        if bad or not ids:
            raise RuntimeError(
                f"clean project {project!r} does not pass its own tests: {bad[:5]}\n{result.output[-2000:]}"
            )
        if checks is None:
            raise RuntimeError(f"clean project {project!r}: its tests cannot be run check by check")
        self._clean_checks[project] = checks
        return ids

    def _expected_output(self, project: str, script: str) -> str:
        key = (project, script)
        if key not in self._expected:
            with tempfile.TemporaryDirectory() as tmp:
                ws = copy_project(project, Path(tmp) / "ws")
                self._expected[key] = self._run(ws, _heredoc(script)).output
        return self._expected[key]

    def _failing_checks(self, project: str, ws: Path, failing: list[str]) -> list[Check] | None:
        """The checks of the failing tests that fail on the mutant and pass on the clean project."""
        got = self._run(ws, _heredoc(check_runner.script(_by_file(failing))), 60.0)
        buggy = check_runner.parse(got.output)
        if buggy is None or got.timed_out:
            return None
        clean = self._clean_checks.get(project) or {}
        root = project_dir(project)
        out = []
        for tid in failing:
            checks = checks_of(tid, (root / tid.split("::", 1)[0]).read_text())
            if len(buggy.get(tid, [])) != len(checks) or len(clean.get(tid, [])) != len(checks):
                return None  # the runner and the static reading disagree on what a check is
            out += [c for c in checks if not buggy[tid][c.number] and clean[tid][c.number]]
        return out

    def verify(self, cand: Candidate, ids: list[str], project_hash: str) -> Instance | None:
        """Run the project's tests on the mutant; an Instance if it makes a proper task.

        The issue shows some failing checks of one failing test (checks.choose_shown); the mutant is
        kept only when the hidden tests hold at least as many other failing checks on unseen inputs.
        """
        m = cand.mutation
        mutated = m.apply(cand.clean_source)
        root = project_dir(cand.project)
        with tempfile.TemporaryDirectory() as tmp:
            ws = copy_project(cand.project, Path(tmp) / "ws")
            (ws / m.path).write_text(mutated)
            result = self._run(ws, TEST_CMD)
            outcomes = parse_outcomes(result.output, ids)
            failing = [t for t in ids if outcomes[t] != "passed"]
            if result.timed_out or not failing or len(failing) > MAX_FAIL_FRACTION * len(ids):
                return None
            if any(outcomes[t] in ("missing", "error") for t in failing):
                return None  # an import/collection crash is not the kind of bug we want
            failing_checks = self._failing_checks(cand.project, ws, failing)
            if not failing_checks:
                return None
            shown_from = list(dict.fromkeys(c.test for c in failing_checks))
            for test in shown_from[:MAX_SNIPPET_TRIES]:  # the first failing test whose snippet shows the bug
                test_file, test_name = test.split("::", 1)
                source = (root / test_file).read_text()
                body = function_of(source, test_name).body
                ordered = [c for c in failing_checks if c.test == test] + [c for c in failing_checks if c.test != test]
                chosen = choose_shown(ordered, body)
                if chosen is None:
                    continue
                try:
                    script = repro_script(source, test_name, chosen[1])
                except ValueError:
                    continue
                got = self._run(ws, _heredoc(script))
                shown_got = stable_addresses(got.output)  # the builds stay byte-identical
                expected = stable_addresses(self._expected_output(cand.project, script))
                if shown_got != expected and not got.timed_out:
                    break
            else:
                return None  # no snippet shows the bug while keeping enough failing checks hidden
        crashed = got.returncode != 0
        frame = innermost_frame(got.output) if crashed else None
        locatable = frame is not None and frame[0] == f"/workspace/{m.path}" and frame[1] == m.line
        digest = hashlib.sha256(f"{cand.project}:{m.path}:{m.start}:{m.end}:{m.replacement}".encode()).hexdigest()
        iid = f"swe-lite__{cand.project}-{digest[:10]}"
        package = next(p for p in project_files(root) if p.parts[0] != "tests" and p.suffix == ".py").parts[0]
        test_patch = self._test_patch(root, failing)
        return Instance(
            instance_id=iid,
            repo=cand.project,
            base_commit=project_hash,
            problem_statement=compose_issue(iid, cand.project, package, script, expected, shown_got, crashed),
            patch=file_diff(m.path, mutated, cand.clean_source),
            test_patch=test_patch,
            fail_to_pass=failing,
            pass_to_pass=[t for t in ids if t not in failing],
            version=SUITE_VERSION,
            bug_patch=file_diff(m.path, cand.clean_source, mutated),
            family=m.family,
            difficulty="locatable" if locatable else "semantic",
        )

    @staticmethod
    def _test_patch(root: Path, failing: list[str]) -> str:
        by_file: dict[str, set[str]] = defaultdict(set)
        for tid in failing:
            f, name = tid.split("::", 1)
            by_file[f].add(name)
        parts = []
        for f in sorted(by_file):
            full = (root / f).read_text()
            parts.append(file_diff(f, remove_functions(full, by_file[f]), full))
        return "".join(parts)


def write_suite(
    instances: dict[str, list[Instance]],
    out: Path,
    seed: int,
    projects: dict[str, str],
    splits: tuple[str, ...] = SPLITS,
    extra: dict | None = None,
) -> dict:
    """Write {split}.jsonl and manifest.json (with `extra` keys added); returns the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for split in splits:
        rows = sorted(instances.get(split, []), key=lambda i: i.instance_id)
        text = "".join(json.dumps(i.to_record(), ensure_ascii=False) + "\n" for i in rows)
        (out / f"{split}.jsonl").write_text(text)
        files[f"{split}.jsonl"] = hashlib.sha256(text.encode()).hexdigest()
    manifest = {
        "suite": "swe-lite",
        "version": SUITE_VERSION,
        "issue_rule": RULE,
        "seed": seed,
        "counts": {s: len(instances.get(s, [])) for s in splits},
        "families": {s: dict(sorted(Counter(i.family for i in instances.get(s, [])).items())) for s in splits},
        "difficulty": {s: dict(sorted(Counter(i.difficulty for i in instances.get(s, [])).items())) for s in splits},
        "projects": dict(sorted(projects.items())),
        "files": files,
        "content_hash": hashlib.sha256("".join(files[k] for k in sorted(files)).encode()).hexdigest(),
        **(extra or {}),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def build(
    seed: int,
    projects: list[str],
    per_family: int,
    out: Path,
    workers: int = 2,
    sandbox: str = "local",
    families: tuple[str, ...] = FAMILIES,
    update: bool = False,
) -> dict:
    """Build the suite into `out`; returns the manifest.

    `update`: rebuild only `projects` and keep every other project's instances from the suite
    already in `out` (same seed required), e.g. after editing one project.
    """
    builder = Builder(seed, sandbox)
    work: list[tuple[Candidate, list[str], str]] = []
    hashes = {}
    for project in projects:
        ids = builder.check_clean(project)
        hashes[project] = content_hash(project_dir(project))
        work += [(c, ids, hashes[project]) for c in candidates(project, seed, per_family, families)]
    results: list[Instance | None] = []
    with Progress(transient=True) as progress, ThreadPoolExecutor(max_workers=workers) as pool:
        bar = progress.add_task("verifying mutations", total=len(work))
        for inst in pool.map(lambda w: builder.verify(*w), work):
            results.append(inst)
            progress.advance(bar)
    by_split: dict[str, list[Instance]] = defaultdict(list)
    if update:
        old = json.loads((out / "manifest.json").read_text())
        if old["seed"] != seed:
            raise ConfigError(f"--update needs the suite's own seed {old['seed']}, got {seed}")
        if old.get("version", "1") != SUITE_VERSION:  # v1 instances show whole tests: no mixing
            raise ConfigError(
                f"--update cannot mix versions: {out} holds v{old.get('version', '1')}, this builds v{SUITE_VERSION}"
            )
        for split in SPLITS:
            for line in (out / f"{split}.jsonl").read_text().splitlines():
                inst = Instance.from_record(json.loads(line))
                if inst.repo not in projects:
                    by_split[split].append(inst)
        hashes = {**{p: h for p, h in old["projects"].items() if p not in projects}, **hashes}
    for (cand, _, _), inst in zip(work, results, strict=True):
        if inst is not None:
            m = cand.mutation
            by_split[split_of(cand.project, m.path, m.line, seed)].append(inst)
    return write_suite(by_split, out, seed, hashes, extra={"per_family": per_family})


def suite_sites(root: Path = DATA_DIR) -> tuple[set[tuple[str, str, int]], str]:
    """Every (project, file, line) mutation site of a built suite, all splits, and its content hash."""
    from tasks.suites import verify_swe_lite  # checks the files against the manifest first

    manifest = verify_swe_lite(root)
    sites = set()
    for split in manifest["counts"]:
        for line in (root / f"{split}.jsonl").read_text().splitlines():
            sites.add(mutation_site(Instance.from_record(json.loads(line))))
    return sites, manifest["content_hash"]


def probe_order(
    seed: int, projects: list[str], families: tuple[str, ...], exclude: set[tuple[str, str, int]]
) -> list[Candidate]:
    """Fresh candidates in a seeded order: per round one per (project, family), shuffled; each site once.

    Interleaving keeps a probe cut after N instances spread over projects and families; `exclude`
    holds the suite's sites, so nothing the suite (or a model trained on it) saw can come back.
    """
    pools = []
    for project in projects:
        by_family = all_mutations(project)
        for family in families:
            pool = [c for c in by_family.get(family, []) if (project, *c.mutation.site) not in exclude]
            random.Random(f"probe:{seed}:{project}:{family}").shuffle(pool)
            pools.append(pool)
    rng = random.Random(f"probe:{seed}")
    order: list[Candidate] = []
    seen: set[tuple[str, str, int]] = set()
    for rank in range(max(map(len, pools), default=0)):
        round_ = [pool[rank] for pool in pools if rank < len(pool)]
        rng.shuffle(round_)
        for cand in round_:
            site = (cand.project, *cand.mutation.site)
            if site not in seen:
                seen.add(site)
                order.append(cand)
    return order


def build_probe(
    seed: int,
    count: int,
    out: Path,
    projects: list[str] | None = None,
    families: tuple[str, ...] = FAMILIES,
    workers: int = 2,
    sandbox: str = "local",
    suite_root: Path = DATA_DIR,
) -> dict:
    """Build `count` fresh instances at sites the suite in `suite_root` never uses into `out`; returns the manifest."""
    if count < 1:
        raise ConfigError(f"probe size must be >= 1, got {count}")
    if out.resolve() == suite_root.resolve():
        raise ConfigError(f"refusing to write a probe into the suite folder {suite_root}; pass another --out")
    exclude, suite_hash = suite_sites(suite_root)
    projects = projects or list_projects()
    order = probe_order(seed, projects, families, exclude)
    # Projects differ in how often a mutation makes a task; a cap keeps one project from filling the probe.
    cap = -(-count // len(projects))
    builder = Builder(seed, sandbox)
    clean: dict[str, list[str]] = {}
    hashes: dict[str, str] = {}
    kept: list[Instance] = []
    per_project: Counter[str] = Counter()
    used = 0  # candidates up to the last one kept: the same for any worker count
    position = 0
    with Progress(transient=True) as progress, ThreadPoolExecutor(max_workers=workers) as pool:
        bar = progress.add_task("probe: verifying fresh mutations", total=count)
        while len(kept) < count and position < len(order):
            # Fewer than half of the fresh candidates make tasks: verify three times what is missing (skipping
            # projects at their cap), then look again.
            chunk: list[tuple[int, Candidate]] = []
            while position < len(order) and len(chunk) < 3 * (count - len(kept)):
                if per_project[order[position].project] < cap:
                    chunk.append((position, order[position]))
                position += 1
            for project in {c.project for _, c in chunk} - clean.keys():
                clean[project] = builder.check_clean(project)
                hashes[project] = content_hash(project_dir(project))
            results = pool.map(
                lambda item: builder.verify(item[1], clean[item[1].project], hashes[item[1].project]), chunk
            )
            for (index, cand), inst in zip(chunk, results, strict=True):
                # The suite's sites are read from its diffs: check the built diff too, not only the candidate line.
                if inst is None or mutation_site(inst) in exclude:
                    continue
                if len(kept) < count and per_project[cand.project] < cap:
                    kept.append(inst)
                    per_project[cand.project] += 1
                    used = index + 1
                    progress.advance(bar)
    extra = {
        "kind": "probe",
        "excludes": {"suite_content_hash": suite_hash, "sites": len(exclude)},
        "per_project_cap": cap,
        "candidates_used": used,
    }
    present = {i.repo for i in kept}
    return write_suite(
        {PROBE_SPLIT: kept}, out, seed, {p: h for p, h in hashes.items() if p in present}, (PROBE_SPLIT,), extra
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    p = argparse.ArgumentParser(prog="python -m tasks.build", description=__doc__.split("\n\n")[0])
    p.add_argument("suite", choices=["swe-lite"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--projects", help="comma-separated subset (default: all)")
    # 11: with the tests v2 added to the projects, more mutants make tasks; 11 keeps v1's split sizes
    p.add_argument("--per-family", type=int, default=11, help="mutation sites tried per family per project")
    p.add_argument("--out", type=Path, help=f"output folder (default: {DATA_DIR}; with --probe: runs/probe)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--sandbox", default="local")
    p.add_argument("--families", help=f"comma-separated subset of {','.join(FAMILIES)}")
    p.add_argument("--update", action="store_true", help="rebuild only --projects, keep the others' instances")
    p.add_argument("--probe", type=int, metavar="N", help="build N fresh instances at sites the suite never uses")
    args = p.parse_args(argv)
    families = tuple(args.families.split(",")) if args.families else FAMILIES
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        p.error(f"unknown families {unknown}; allowed: {list(FAMILIES)}")
    projects = args.projects.split(",") if args.projects else list_projects()
    for name in projects:
        project_dir(name)  # fails early on an unknown name
    if args.probe is not None:
        if args.update:
            p.error("--probe and --update do not combine")
        out = args.out or Path("runs/probe")
        try:
            manifest = build_probe(args.seed, args.probe, out, projects, families, args.workers, args.sandbox)
        except ValueError as exc:
            p.error(str(exc))
        print(json.dumps({k: manifest[k] for k in ("counts", "families", "difficulty", "candidates_used")}, indent=2))
        if manifest["counts"][PROBE_SPLIT] < args.probe:
            print(f"only {manifest['counts'][PROBE_SPLIT]} fresh instances exist for this selection", file=sys.stderr)
        print(
            f"wrote {out / 'probe.jsonl'}; evaluate: python -m runners.eval_model task=swe-lite "
            f"task.split={PROBE_SPLIT} task.path={out}",
            file=sys.stderr,
        )
        return 0
    out = args.out or DATA_DIR
    manifest = build(args.seed, projects, args.per_family, out, args.workers, args.sandbox, families, args.update)
    print(json.dumps({k: manifest[k] for k in ("counts", "difficulty")}, indent=2))
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
