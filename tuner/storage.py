"""Where a study lives: SQLite by default, a journal file for several processes on one machine, or a database URL.

Heartbeats in optuna 5.0: only RDBStorage (sqlite://, postgresql://, mysql://) implements BaseHeartbeat. With a
heartbeat a worker's thread stamps its running trial every `heartbeat_interval` seconds; each `study.optimize` of
any worker, before each trial, fails the trials whose stamp is older than `grace_period` (default twice the
interval) and hands them to the retry callback, which queues a WAITING copy that the next `ask` runs.

JournalStorage subclasses BaseStorage only (optuna/storages/journal/_storage.py) and takes no heartbeat argument, so
`open_storage("journal", ...)` ignores the heartbeat options: a trial whose process was killed stays RUNNING for
good, is neither failed nor retried, and a resumed `optimize` just asks new trials. Count COMPLETE trials, not all
of them, to decide how many remain; use sqlite or an RDB URL where killed workers must be retried.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy.exc
from sqlalchemy.engine import make_url

from common.errors import ConfigError

SQLITE_FILE = "study.db"
JOURNAL_FILE = "journal.log"
ALLOWED_FORMS = '"sqlite" (the default: <study_dir>/study.db), "journal" (<study_dir>/journal.log) or a database URL'
# libpq waits without limit for a host that drops packets; a tuner should fail within seconds and say why.
POSTGRES_CONNECT_TIMEOUT_S = 10

# optuna 4.9 renamed the retry callback and RDBStorage's keyword for it; 5.x still takes the old names but warns
# (FutureWarning) and 6.0 drops them. pyproject allows optuna>=4.0, so older releases get the old names.
if hasattr(optuna.storages, "RetryHeartbeatStaleTrialCallback"):
    RetryCallback: Any = optuna.storages.RetryHeartbeatStaleTrialCallback
    _CALLBACK_KEYWORD = "heartbeat_stale_trial_callback"
else:  # pragma: no cover - optuna < 4.9
    RetryCallback = optuna.storages.RetryFailedTrialCallback
    _CALLBACK_KEYWORD = "failed_trial_callback"


def _kind(url: str | None) -> str:
    """'sqlite', 'journal' or 'rdb' for a storage argument; ValueError for anything else."""
    if url is None or url == "sqlite":
        return "sqlite"
    if url == "journal":
        return "journal"
    if "://" in url:
        return "rdb"
    raise ConfigError(f"unknown study storage {url!r}: use {ALLOWED_FORMS} such as postgresql://user:pass@host/db")


def mask_url(url: str) -> str:
    """The URL with its password replaced by ***, for logs and error messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except sqlalchemy.exc.ArgumentError:
        # Not parseable by SQLAlchemy: still hide whatever sits between "user:" and "@".
        return re.sub(r"(://[^/@:]*:)[^/@]*@", r"\1***@", url)


def describe_storage(url: str | None, study_dir: Path) -> str:
    """For logs: the SQLite file, the journal file, or the database URL with its password masked."""
    kind = _kind(url)
    if kind == "sqlite":
        return str((study_dir / SQLITE_FILE).absolute())
    if kind == "journal":
        return str((study_dir / JOURNAL_FILE).absolute())
    assert url is not None
    return mask_url(url)


def open_storage(
    url: str | None,
    study_dir: Path,
    *,
    heartbeat_interval: int = 30,
    grace_period: int | None = None,
    max_retry: int = 2,
) -> optuna.storages.BaseStorage:
    """The study storage for `url`; RDB storages fail and retry the trials of killed workers (see module doc)."""
    kind = _kind(url)
    if kind == "journal":
        study_dir.mkdir(parents=True, exist_ok=True)
        backend = optuna.storages.journal.JournalFileBackend(str(study_dir / JOURNAL_FILE))
        return optuna.storages.journal.JournalStorage(backend)
    if kind == "sqlite":
        study_dir.mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{(study_dir / SQLITE_FILE).absolute()}"
    assert url is not None
    return _open_rdb(url, heartbeat_interval=heartbeat_interval, grace_period=grace_period, max_retry=max_retry)


def _open_rdb(
    url: str, *, heartbeat_interval: int, grace_period: int | None, max_retry: int
) -> optuna.storages.RDBStorage:
    """An RDBStorage with heartbeat and retry; any failure to reach or use the database is one ValueError line."""
    masked = mask_url(url)
    try:
        parsed = make_url(url)
    except sqlalchemy.exc.ArgumentError as exc:
        reason = _mask_in(str(exc), url, None)
        raise ConfigError(f"cannot open study storage {masked}: {_one_line(reason)}") from None
    engine_kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() in ("psycopg2", "psycopg"):
        if "connect_timeout" not in parsed.query:
            engine_kwargs["connect_args"] = {"connect_timeout": POSTGRES_CONNECT_TIMEOUT_S}
    with warnings.catch_warnings():
        # Heartbeat and the retry callback are still marked experimental; we opt in on purpose, every run.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        callback = RetryCallback(max_retry=max_retry)
        try:
            return optuna.storages.RDBStorage(
                url,
                engine_kwargs=engine_kwargs,
                heartbeat_interval=heartbeat_interval,
                grace_period=grace_period,
                **{_CALLBACK_KEYWORD: callback},
            )
        except ImportError as exc:
            reason = _mask_in(f"{exc.__cause__ or exc}", url, parsed.password)
            reason += " (install its driver; for postgresql:// pip install 'spectune[postgres]')"
        except sqlalchemy.exc.SQLAlchemyError as exc:
            # DBAPIError carries the driver's own exception, whose text is the useful part.
            reason = _mask_in(str(getattr(exc, "orig", None) or exc), url, parsed.password)
    # Raised outside the except blocks, so no SQLAlchemy traceback is chained to the one line.
    raise ConfigError(f"cannot open study storage {masked}: {_one_line(reason)}")


def _mask_in(text: str, url: str, password: str | None) -> str:
    """`text` with `url` masked and the password, as a whole word, replaced by ***: a driver may echo either."""
    text = text.replace(url, mask_url(url))
    if password:
        text = re.sub(rf"(?<!\w){re.escape(password)}(?!\w)", "***", text)
    return text


def _one_line(text: str) -> str:
    """Driver messages span lines and SQLAlchemy appends a link to its docs; keep one line of the reason."""
    text = re.sub(r"\(Background on this error at: [^)]*\)", "", text)
    return " ".join(text.split())
