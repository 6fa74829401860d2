"""Load task suites through `datasets`: the bundled `swe-lite` (local JSONL) and SWE-bench Lite.

`swe-lite` is frozen and versioned: its JSONL files are checked against the committed manifest on load,
and the manifest's `version` (and every instance's `version` field) must be SWE_LITE_VERSION: v2 issues
show only part of the failing checks (tasks/swelite/checks.py), v1 issues showed a whole failing test. A
generalisation probe (`python -m tasks.build swe-lite --probe N --out DIR`) loads the same way with
`path=DIR` (or `DIR/probe.jsonl`) and split `probe`, checked against its own manifest.
`swe-bench-lite` comes from the hub (`princeton-nlp/SWE-bench_Lite`); offline, point `path` at a
local copy (a JSONL/JSON/Parquet file or a folder saved with `Dataset.save_to_disk`).

A broken input file (a manifest that is not JSON or lacks a key, a JSONL line that is not a JSON
object or not an instance, a file the manifest lists but that is missing) raises SuiteFileError
naming the file (and the line) in one line.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from common.errors import ConfigError
from tasks.schema import Instance

log = logging.getLogger(__name__)

SUITES = ("swe-lite", "swe-bench-lite")
SWE_LITE_VERSION = "2"  # the swe-lite this code reads; tasks.build writes the same (tasks.build.SUITE_VERSION)
SWE_LITE_DIR = Path(__file__).resolve().parent / "data" / "swe-lite"
SWE_BENCH_LITE_ID = "princeton-nlp/SWE-bench_Lite"
SWE_BENCH_LITE_SPLITS = ("dev", "test")
SUBSETS = ("first", "spread")  # how `limit` picks instances: the first N, or N evenly spaced over the split


class SuiteUnavailableError(RuntimeError):
    """A suite cannot be loaded here (no hub, missing files); the message says what to do."""


class SuiteFileError(SuiteUnavailableError):
    """A suite file that exists but is malformed; the message names the file (and line) and what is wrong."""


def _quiet_datasets() -> None:
    """No progress bars from `datasets` (they would interleave with the runner's own output)."""
    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()


def _json_text(path: Path) -> object:
    """The JSON content of a suite file; SuiteFileError naming it when it is not JSON."""
    try:
        text = path.read_text()
    except UnicodeDecodeError as exc:
        raise SuiteFileError(f"{path} is not UTF-8 text") from exc
    if not text.strip():
        raise SuiteFileError(f"{path} is empty; expected JSON")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SuiteFileError(f"{path} is not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}") from exc


def check_jsonl(path: Path) -> int:
    """Check that every non-blank line of a JSONL file is a JSON object that makes an Instance; returns the count.

    SuiteFileError names the file and the first bad line.
    """
    try:
        lines = path.read_text().splitlines()
    except UnicodeDecodeError as exc:
        raise SuiteFileError(f"{path} is not UTF-8 text") from exc
    count = 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SuiteFileError(f"{path}:{number}: not valid JSON (column {exc.colno}: {exc.msg})") from exc
        if not isinstance(record, dict):
            raise SuiteFileError(f"{path}:{number}: a JSON {type(record).__name__}, not an instance object")
        try:
            Instance.from_record(record)
        except ValueError as exc:
            raise SuiteFileError(f"{path}:{number}: {exc}") from exc
        count += 1
    if not count:
        raise SuiteFileError(f"{path} holds no instances")
    return count


def _require(manifest: dict, key: str, kind: type, path: Path, why: str = "") -> object:
    value = manifest.get(key)
    if not isinstance(value, kind):
        state = "lacks the key" if key not in manifest else f"has a {type(value).__name__} for"
        raise SuiteFileError(f"{path} {state} {key!r} (a JSON {kind.__name__.replace('str', 'string')}){why}")
    return value


def read_manifest(root: Path) -> dict:
    """The manifest of a swe-lite-format folder, with the keys loading needs checked (SuiteFileError if not)."""
    path = root / "manifest.json"
    manifest = _json_text(path)
    if not isinstance(manifest, dict):
        raise SuiteFileError(f"{path} holds a JSON {type(manifest).__name__}, not an object")
    files = _require(manifest, "files", dict, path)
    counts = _require(manifest, "counts", dict, path)
    _require(manifest, "content_hash", str, path)
    if not all(isinstance(v, str) for v in files.values()):
        raise SuiteFileError(f"{path}: 'files' must map file names to sha256 strings")
    if not all(isinstance(v, int) for v in counts.values()):
        raise SuiteFileError(f"{path}: 'counts' must map split names to numbers of instances")
    if manifest.get("kind") == "probe" or "probe" in counts:
        if manifest.get("kind") != "probe":
            raise SuiteFileError(f'{path} counts a probe split but lacks "kind": "probe"')
        excludes = _require(manifest, "excludes", dict, path, ": the suite the probe was built against")
        _require(excludes, "suite_content_hash", str, path, " under 'excludes'")
        _require(manifest, "seed", int, path)
    return manifest


def spread(items: list, n: int) -> list:
    """n items evenly spaced over `items` (first included), in order; all of them when n >= len(items).

    Suites are ordered by project, so the first N instances of a split often come from one project;
    evenly spaced ones cover every project in proportion.
    """
    if n >= len(items):
        return list(items)
    return [items[(i * len(items)) // n] for i in range(n)]


def _select(
    records: list[dict], limit: int | None, instance_ids: list[str] | None, where: str, subset: str = "first"
) -> list[Instance]:
    if subset not in SUBSETS:
        raise ConfigError(f"unknown subset {subset!r}; allowed: {list(SUBSETS)}")
    instances = [Instance.from_record(r) for r in records]
    if instance_ids:
        wanted = set(instance_ids)
        unknown = sorted(wanted - {i.instance_id for i in instances})
        if unknown:
            raise ConfigError(f"unknown instance id(s) {unknown[:5]} in {where}")
        instances = [i for i in instances if i.instance_id in wanted]
    if limit is not None:
        if limit < 1:
            raise ConfigError(f"limit must be >= 1, got {limit}")
        instances = instances[:limit] if subset == "first" else spread(instances, limit)
    return instances


def verify_swe_lite(root: Path = SWE_LITE_DIR) -> dict:
    """The manifest, after checking every split file's sha256 against it."""
    manifest_path = root / "manifest.json"
    if not manifest_path.exists():
        if Path(root).resolve() != SWE_LITE_DIR.resolve():
            raise SuiteUnavailableError(
                f"no swe-lite manifest at {manifest_path}: task.path must be a folder (or one of its .jsonl files) "
                "written by `python -m tasks.build swe-lite --probe N --out DIR`"
            )
        raise SuiteUnavailableError(
            f"swe-lite is not built: {manifest_path} missing; run `python -m tasks.build swe-lite`"
        )
    manifest = read_manifest(root)
    _check_version(manifest, root)
    for name, digest in manifest["files"].items():
        if not (root / name).is_file():
            raise SuiteFileError(f"{manifest_path} lists {name}, but {root / name} is missing")
        actual = hashlib.sha256((root / name).read_bytes()).hexdigest()
        if actual != digest:
            if name.endswith(".jsonl"):
                check_jsonl(root / name)  # a damaged line is named before the hash mismatch
            raise SuiteUnavailableError(f"swe-lite file {name} does not match its manifest (sha256 {actual[:12]})")
    if manifest.get("kind") == "probe":
        _check_probe_against_suite(manifest, root)
    return manifest


def _check_version(manifest: dict, root: Path) -> None:
    """The bundled suite must be SWE_LITE_VERSION; another folder may omit `version` but not state another."""
    bundled = Path(root).resolve() == SWE_LITE_DIR.resolve()
    if "version" not in manifest and not bundled:
        return
    version = str(manifest.get("version", "1"))  # v1 manifests had no version key
    if version != SWE_LITE_VERSION:
        raise SuiteUnavailableError(
            f"{root / 'manifest.json'} is swe-lite v{version}, but this code reads v{SWE_LITE_VERSION} "
            "(v2 issues show only part of the failing checks); rebuild with `python -m tasks.build swe-lite`"
            + ("" if bundled else " --probe N --out DIR")
        )


def swe_lite_version(root: Path = SWE_LITE_DIR) -> str:
    """The version of the swe-lite-format suite in `root`, after verifying it ("1": a manifest without one)."""
    return str(verify_swe_lite(root).get("version", "1"))


def _check_probe_against_suite(manifest: dict, root: Path) -> None:
    """A probe excludes the sites of the suite it was built against; a rebuilt suite may now share some."""
    built_against = manifest["excludes"]["suite_content_hash"]
    current = json.loads((SWE_LITE_DIR / "manifest.json").read_text())["content_hash"]
    if built_against != current:
        raise SuiteUnavailableError(
            f"the probe in {root} was built against swe-lite {built_against[:12]}, but the suite is now "
            f"{current[:12]}: it may share mutation sites with it; rebuild it with "
            f"`python -m tasks.build swe-lite --probe {manifest['counts'].get('probe', 40)} "
            f"--seed {manifest['seed']} --out {root}`"
        )


def swe_lite_root(path: str | None, split: str) -> Path:
    """The folder of a swe-lite-format suite: the bundled one, a folder, or the folder of a `<split>.jsonl` file."""
    if not path:
        return SWE_LITE_DIR
    p = Path(path).expanduser()
    if p.suffix == ".jsonl":
        if p.stem != split:
            raise ConfigError(f"task.path {p} holds the {p.stem!r} split but split={split!r}; pass split={p.stem}")
        return p.parent
    return p


def load_swe_lite(
    split: str,
    limit: int | None = None,
    instance_ids: list[str] | None = None,
    root: Path = SWE_LITE_DIR,
    subset: str = "first",
) -> list[Instance]:
    """Instances of one split of swe-lite (or of a probe folder `root`), loaded with `datasets`, manifest-checked."""

    manifest = verify_swe_lite(root)
    if split not in manifest["counts"]:
        raise ConfigError(f"unknown swe-lite split {split!r}; allowed: {sorted(manifest['counts'])}")
    path = root / f"{split}.jsonl"
    if path.name not in manifest["files"]:
        raise SuiteFileError(f"{root / 'manifest.json'} counts the split {split!r} but lists no file {path.name}")
    _quiet_datasets()
    data = list(_load_data_file("json", path))
    version = manifest.get("version")
    if version is not None:
        stray = sorted({str(r.get("version")) for r in data} - {str(version)})
        if stray:
            raise SuiteFileError(f"{path}: instances of swe-lite v{stray} in a v{version} suite; rebuild it")
    log.info(
        "loaded swe-lite v%s split %s from %s (%d instances, content %s)",
        version or "?",
        split,
        root,
        len(data),
        manifest["content_hash"][:12],
    )
    return _select(data, limit, instance_ids, f"swe-lite/{split}", subset)


def _load_data_file(kind: str, path: Path):
    """A JSON/Parquet data file through `datasets`; SuiteFileError naming the file when it cannot be read."""
    from datasets import load_dataset

    try:
        return load_dataset(kind, data_files=str(path), split="train", keep_in_memory=True)
    except Exception as exc:  # datasets wraps parser errors in several types; all mean a bad file here
        cause = exc.__cause__ or exc
        text = " ".join(str(cause).split()) or type(cause).__name__
        raise SuiteFileError(f"{path} cannot be read as {kind}: {text[:300]}") from exc


def load_swe_bench_lite(
    split: str = "test",
    limit: int | None = None,
    instance_ids: list[str] | None = None,
    path: str | None = None,
    subset: str = "first",
) -> list[Instance]:
    """SWE-bench Lite from the hub, or from `path` (a local data file or a saved dataset folder)."""
    from datasets import Dataset, load_dataset, load_from_disk

    if split not in SWE_BENCH_LITE_SPLITS:
        raise ConfigError(f"unknown swe-bench-lite split {split!r}; allowed: {list(SWE_BENCH_LITE_SPLITS)}")
    if path:
        p = Path(path).expanduser()
        if not p.exists():
            raise SuiteUnavailableError(f"swe-bench-lite: local copy not found at {p}")
        if p.is_dir():
            data = load_from_disk(str(p))
            data = data[split] if not isinstance(data, Dataset) else data
        else:
            kind = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}.get(p.suffix)
            if kind is None:
                raise ConfigError(f"swe-bench-lite: unsupported file type {p.suffix!r} (use .jsonl, .json or .parquet)")
            if p.suffix == ".jsonl":
                check_jsonl(p)  # names the file and line of a malformed record
            _quiet_datasets()
            data = _load_data_file(kind, p)
        return _select(list(data), limit, instance_ids, str(p), subset)
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
        raise SuiteUnavailableError(_offline_message("offline mode is set (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE)"))
    reachable, why = _hub_reachable()
    if not reachable:
        raise SuiteUnavailableError(_offline_message(why))
    try:
        data = load_dataset(SWE_BENCH_LITE_ID, split=split)
    except Exception as exc:  # datasets raises many types for "no network"; all mean the same here
        raise SuiteUnavailableError(_offline_message(f"{type(exc).__name__}: {exc}")) from exc
    return _select(list(data), limit, instance_ids, SWE_BENCH_LITE_ID, subset)


def _hub_reachable(timeout: float = 3.0) -> tuple[bool, str]:
    """One quick TCP connect to the hub, so an offline machine fails in seconds, not after retries."""
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
    except OSError as exc:
        return False, f"{host} unreachable: {exc}"
    return True, ""


def _offline_message(cause: str) -> str:
    return (
        f"swe-bench-lite: cannot reach the dataset hub for {SWE_BENCH_LITE_ID} ({cause}). "
        'On a machine with network, run `python -c "from datasets import load_dataset; '
        f"load_dataset('{SWE_BENCH_LITE_ID}', split='test').to_json('swe-bench-lite-test.jsonl')\"`, "
        "copy the file here and pass it as task.path=/path/to/swe-bench-lite-test.jsonl."
    )


def load_suite(
    name: str,
    split: str,
    limit: int | None = None,
    instance_ids: list[str] | None = None,
    path: str | None = None,
    subset: str = "first",
) -> list[Instance]:
    """Instances of a suite by name (`limit` of them, picked as `subset` says); unknown names list the allowed ones."""
    if name == "swe-lite":
        return load_swe_lite(split, limit, instance_ids, swe_lite_root(path, split), subset)
    if name == "swe-bench-lite":
        return load_swe_bench_lite(split, limit, instance_ids, path, subset)
    raise ConfigError(f"unknown suite {name!r}; allowed: {list(SUITES)}")
