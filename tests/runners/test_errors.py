"""Which errors are the user's: a ConfigError is one line and exit 2, any other exception a bug with its traceback.

In process, through the wrapper every Hydra command runs its body in (runners.cli.run_command): what escapes it is
what the interpreter prints as a traceback and exits 1 on. And the comparison reports a candidate as unsupported
only when a backend says it cannot run it (UnsupportedConfig), never for a bug's ValueError.
"""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from agents.loop import AgentConfig
from common.errors import ConfigError, UnsupportedConfig
from engine.engine import EngineConfig
from engine.testing import random_model
from runners.backends import EngineBackend
from runners.cli import run_command
from runners.compare import Comparison
from runners.models import Models
from runners.workload import Workload

CFG = OmegaConf.create({})


def _raises(exc: BaseException):
    def body(cfg):
        raise exc

    return body


def test_a_config_error_is_one_line_on_stderr_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        run_command(_raises(ConfigError("engine.gamma=0:\n  must be >= 1")), CFG)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err == "error: engine.gamma=0: must be >= 1\n", "a ConfigError must print one line"


def test_unsupported_is_an_input_error_too(capsys):
    with pytest.raises(SystemExit) as exit_:
        run_command(_raises(UnsupportedConfig("drafter 'mtp' needs MTP weights")), CFG)
    assert exit_.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_a_plain_value_error_is_a_bug_and_keeps_its_traceback(capsys):
    # It leaves the wrapper as it is, so Python prints its traceback and exits 1 (Hydra's main does the same).
    with pytest.raises(ValueError, match="a bug") as raised:
        run_command(_raises(ValueError("a bug")), CFG)
    assert not isinstance(raised.value, ConfigError)
    assert capsys.readouterr().err == "", "a bug must not be reported as the user's one-line error"


@pytest.fixture(scope="module")
def workload() -> Workload:
    models = Models(target=random_model(layers=2, hidden=32), draft=None, target_path="random", draft_path=None)
    return Workload(models, [], None, AgentConfig(), warmup=False)  # type: ignore[arg-type]  # no task runs


def test_a_candidate_a_backend_refuses_is_unsupported_with_the_reason(workload, tmp_path):
    comparison = Comparison(workload, EngineConfig(drafter="draft_model"), tmp_path)
    assert comparison.candidate_engine is None
    assert comparison.unsupported == "drafter 'draft_model' needs a draft model (--draft DIR)"
    assert comparison.baseline_engine is not None  # OFF still runs


def test_a_bug_while_making_the_candidate_is_not_unsupported_but_raised(workload, tmp_path, monkeypatch):
    create = EngineBackend.create.__func__

    def buggy(cls, config, models, settings, concurrency=1):
        if config.drafter != "none":
            raise ValueError("injected bug")
        return create(cls, config, models, settings, concurrency)

    monkeypatch.setattr(EngineBackend, "create", classmethod(buggy))
    with pytest.raises(ValueError, match="injected bug"):
        Comparison(workload, EngineConfig(drafter="ngram"), tmp_path)
