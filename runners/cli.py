"""What every Hydra command shares: where conf/ is, which errors are the user's input, how a command exits.

Configuration and input problems (common.errors.ConfigError and the few input errors of other kinds) are one line
on stderr and exit 2; any other exception is a bug and keeps its traceback (exit 1), a plain ValueError included.
Hydra's own errors (a wrong key, group option or override, raised before the command runs) stay Hydra's. An
interrupted command exits 128 + the signal (130 for Ctrl-C, 143 for SIGTERM), also when it wrote a partial result.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from omegaconf import DictConfig
from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue

from common.errors import ConfigError
from engine.loading import ModelNotFoundError
from runners.interrupt import Interrupted
from tasks.suites import SuiteUnavailableError

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")

# Configuration and input problems: one line on stderr, exit 2. Besides ConfigError: a model folder or hub id that is
# not there, a suite that cannot be loaded, a `???` value left unset, and a `${...}` in the user's values that does not
# resolve (OmegaConf raises the last two when the command first reads the value).
INPUT_ERRORS = (
    ConfigError,
    ModelNotFoundError,
    SuiteUnavailableError,
    MissingMandatoryValue,
    InterpolationResolutionError,
)


def one_line(exc: BaseException) -> str:
    """An exception's message on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__


def run_command(body: Callable[[DictConfig], dict[str, Any]], cfg: DictConfig) -> dict[str, Any]:
    """Run a command body; bad input exits 2 with one line, an interruption 128 + the signal (130, 143)."""
    try:
        result = body(cfg)
    except INPUT_ERRORS as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        sys.exit(2)
    except Interrupted as exc:
        print(f"interrupted: {exc}", file=sys.stderr)
        _exit_interrupted(exc.exit_code)
    except KeyboardInterrupt:
        print("interrupted while writing the results; they may be incomplete", file=sys.stderr)
        _exit_interrupted(130)
    if result.get("partial"):
        _exit_interrupted(128 + signal.Signals[result.get("interrupted") or "SIGINT"])
    return result


def _exit_interrupted(code: int) -> NoReturn:
    """Exit with `code`, ignoring further SIGINT/SIGTERM: the command has already stopped."""
    # A second Ctrl-C while the interpreter exits would otherwise turn status 130 into death by the
    # signal (Python puts the default handlers back during shutdown; an ignored signal stays ignored).
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    sys.exit(code)
