"""The backend registry: every registered class answers every hook, an unknown name lists the valid ones, and
each row builds a backend whose whole lifecycle works (builtin on a tiny in-process model; llama-server on the
pinned binary, skipped without one as the serving tests are)."""

from __future__ import annotations

import inspect

import pytest

from engine.drafters import Needs
from engine.engine import EngineConfig
from engine.testing import random_model
from export.fit import SERVERS
from runners.backends import BACKENDS, Backend, ServerSettings, backend_class, make_backend
from runners.models import Models
from serving.gguf import export_gguf
from tests.serving.conftest import MODELS, binary, server_pids  # noqa: F401  (binary: the serving tests' fixture)

CLASS_HOOKS = [name for name, kind in Backend.__annotations__.items() if str(kind).startswith("ClassVar")]
CLASS_METHODS = [n for n, v in vars(Backend).items() if isinstance(v, classmethod)]
METHODS = [n for n, v in vars(Backend).items() if inspect.isfunction(v) and not n.startswith("_")]
PROMPT = list(range(1, 9))


@pytest.fixture(scope="module")
def models() -> Models:
    """A 2-layer random target: enough for the engine; the server side takes only its stop tokens."""
    return Models(target=random_model(layers=2, hidden=32), draft=None, target_path="random", draft_path=None)


def _lifecycle(backend: Backend, name: str) -> None:
    assert backend.describe()["backend"] == name
    backend.warm_up(PROMPT)
    model = backend.agent_model(None, "registry", 0)
    assert model.context_limit > len(PROMPT) and model.lossy is False
    backend.reset()
    backend.close()


def test_the_hooks_are_read_from_the_protocol():
    assert {"name", "lossless_only", "measures_memory", "export_target"} <= set(CLASS_HOOKS)
    assert {"settings_from", "not_runnable", "create", "announce"} <= set(CLASS_METHODS)
    assert {"agent_model", "warm_up", "reset", "close", "describe"} <= set(METHODS)


@pytest.mark.parametrize("name", list(BACKENDS))
def test_every_backend_has_every_hook(name):
    cls = backend_class(name)
    assert cls.name == name
    for hook in CLASS_HOOKS:
        assert hook in vars(cls), f"{cls.__name__} lacks class hook {hook}"
    for method in CLASS_METHODS:
        assert isinstance(inspect.getattr_static(cls, method), classmethod), f"{cls.__name__}.{method}"
    for method in METHODS:
        assert callable(getattr(cls, method, None)), f"{cls.__name__} lacks {method}"
    assert cls.export_target is None or cls.export_target in SERVERS
    assert cls.not_runnable(EngineConfig(backend=name)) is None  # speculation OFF runs everywhere


def test_the_default_backend_is_registered():
    assert EngineConfig().backend in BACKENDS


def test_an_unknown_backend_names_the_valid_ones(models):
    allowed = r"engine\.backend='vllm' is not allowed; choose one of: builtin, llama-server"
    with pytest.raises(ValueError, match=allowed):
        backend_class("vllm")
    with pytest.raises(ValueError, match=allowed):
        make_backend(EngineConfig(backend="vllm"), models)


def test_builtin_runs_its_lifecycle(models, tmp_path):
    name = "builtin"
    assert backend_class(name).settings_from(None, models, tmp_path, Needs()) is None
    backend = make_backend(EngineConfig(backend=name, drafter="ngram"), models)
    assert backend_class(name).announce(backend.describe()) is None
    _lifecycle(backend, name)


@pytest.fixture(scope="module")
def target_gguf(binary, tmp_path_factory):  # noqa: F811
    """The bundled target as f32 GGUF (the serving tests' conversion, the target alone)."""
    return export_gguf(MODELS / "target", tmp_path_factory.mktemp("gguf") / "target.gguf", "f32")


def test_llama_server_runs_its_lifecycle(binary, target_gguf, models, tmp_path):  # noqa: F811
    name = "llama-server"
    cls = backend_class(name)
    assert cls.not_runnable(EngineConfig(backend=name, drafter="layer_skip"))  # the exporter's reason
    with pytest.raises(ValueError, match="needs the server settings"):
        make_backend(EngineConfig(backend=name), models)
    settings = ServerSettings(binary, target_gguf, None, context=256, threads=1, log_dir=tmp_path)
    backend = make_backend(EngineConfig(backend=name, drafter="ngram"), models, settings)
    assert "--spec-type ngram-simple" in cls.announce(backend.describe())
    try:
        backend.warm_up(PROMPT)
        assert backend.server is not None and server_pids(str(target_gguf)), "warm_up started no server"
        _lifecycle(backend, name)
    finally:
        backend.close()
    assert server_pids(str(target_gguf)) == [], "a llama-server outlived close()"
