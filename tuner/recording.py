"""The study's recording carried by the study's own storage, so that a worker with another run root has it too.

A worker on another machine shares only the storage (`study.storage=postgresql://...`), not runs/<name>/: the
baseline.json the recording trial wrote stays in the run folder of the worker that ran it. So the recording is
also published in the study's user attributes, compressed and cut in chunks (an RDB keeps an attribute in one
text column, and MySQL's TEXT holds 64 KiB), with its sha256; any worker reads it from there, checks the digest,
and writes its own baseline.json from it. A study made before this keeps only the file: the first worker that
has it publishes it on resume.
"""

from __future__ import annotations

import base64
import hashlib
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import optuna
from optuna.trial import TrialState

from common.errors import ConfigError
from tuner import study as studies
from tuner.baseline import BASELINE_FILE, BaselineRecord, load_baseline, record_from_json
from tuner.peers import fail_stale

KEY = "recording"  # study user attribute: {"sha256", "chunks", "bytes", "trial_number", "host"}
CHUNK_CHARS = 48_000  # base64 characters per attribute: under MySQL's 64 KiB TEXT with JSON quoting to spare
POLL_S = 1.0  # how often a waiting worker looks for the recording


def chunk_key(index: int) -> str:
    """The user attribute holding chunk `index` of the recording."""
    return f"{KEY}.{index}"


def publish(study: optuna.Study, record: BaselineRecord) -> str:
    """Store the recording in the study's storage (module docstring); returns its sha256."""
    text = record.to_json()
    digest = hashlib.sha256(text.encode()).hexdigest()
    packed = base64.b64encode(zlib.compress(text.encode(), 9)).decode("ascii")
    chunks = [packed[i : i + CHUNK_CHARS] for i in range(0, len(packed), CHUNK_CHARS)] or [""]
    for index, chunk in enumerate(chunks):
        study.set_user_attr(chunk_key(index), chunk)
    # the index last: a reader that sees it finds every chunk already written
    study.set_user_attr(
        KEY,
        {
            "sha256": digest,
            "chunks": len(chunks),
            "bytes": len(text),
            "trial_number": record.trial_number,
            "host": record.host,
        },
    )
    return digest


def stored(study: optuna.Study) -> tuple[str, str] | None:
    """(text, sha256) of the recording in the storage, or None when none is published; a damaged one names itself."""
    attrs = study.user_attrs
    index = attrs.get(KEY)
    if index is None:
        return None
    try:
        packed = "".join(attrs[chunk_key(i)] for i in range(int(index["chunks"])))
        text = zlib.decompress(base64.b64decode(packed)).decode()
    except (KeyError, TypeError, ValueError, zlib.error) as exc:
        raise ConfigError(
            f"study {study.study_name!r}: its stored recording is damaged ({type(exc).__name__})"
        ) from exc
    digest = hashlib.sha256(text.encode()).hexdigest()
    if digest != index.get("sha256"):
        raise ConfigError(f"study {study.study_name!r}: its stored recording does not match its sha256")
    return text, digest


def fetch(study: optuna.Study, study_dir: Path) -> BaselineRecord | None:
    """The study's recording: from the storage (written to this worker's baseline.json when that differs), else
    from baseline.json alone (an older study: published now, for the other workers), else None."""
    found = stored(study)
    if found is None:
        record = load_baseline(study_dir) if studies.baseline_trial(study) is not None else None
        if record is not None:
            publish(study, record)
        return record
    text, digest = found
    path = study_dir / BASELINE_FILE
    try:
        record = record_from_json(text)
    except ValueError as exc:
        raise ConfigError(f"study {study.study_name!r}: its stored recording is not a baseline ({exc})") from exc
    local = path.read_text() if path.is_file() else None
    if local is None or hashlib.sha256(local.encode()).hexdigest() != digest:
        record.save(study_dir)  # this worker's copy: finish logs it, and a reader of the run folder finds it
    return record


def wait(
    study: optuna.Study, study_dir: Path, stopped: Callable[[], bool], poll_s: float = POLL_S
) -> BaselineRecord | None:
    """Wait while another worker records OFF (a recording trial RUNNING) until the recording is published.

    None when no recording trial runs and none is published (it failed, or its retry waits in the queue: this
    worker's next trial takes it) or a stop was asked. A stale recording trial of a dead worker is failed meanwhile
    (the RDB heartbeat: a retry is queued), so a worker never waits on a machine that is gone.
    """
    while not stopped():
        record = fetch(study, study_dir)
        if record is not None:
            return record
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if not any(studies.role(t) == "baseline" for t in running):
            return None
        fail_stale(study)
        time.sleep(poll_s)
    return None
