"""Hydra config: every group composes, and wrong keys / values / group options fail with clear messages."""

import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException

from common.units import GIB
from engine.drafters import Needs
from runners.config import baseline_config, check_candidate, check_config, engine_config
from runners.models import load_for
from tests.conftest import compose_config

HARDWARE = ("cpu", "rtx4060", "rtx3090", "rtx4090", "a100-80g", "h100-80g", "h200")


def _compose(*overrides: str):
    return compose_config("config", *overrides)


def _chain(exc: BaseException) -> str:
    parts = []
    while exc is not None:
        parts.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)


@pytest.mark.parametrize("hardware", HARDWARE)
def test_every_hardware_option_composes_with_a_ceiling(hardware):
    cfg = _compose(f"hardware={hardware}", "run.name=x")
    assert cfg.hardware.name == hardware
    assert cfg.hardware.vram_gib > 0 and cfg.hardware.bandwidth_gbs > 0 and cfg.hardware.bf16_tflops > 0
    check_config(cfg)


def test_rtx4060_ceiling_is_8_gib():
    cfg = _compose("hardware=rtx4060", "run.name=x")
    assert int(cfg.hardware.vram_gib * GIB) == 8 * GIB


def test_defaults_and_overrides_reach_the_engine_config():
    cfg = _compose(
        "task=swe-lite",
        "task.split=test",
        "task.limit=3",
        "engine.drafter=suffix",
        "engine.gamma=6",
        "run.seed=7",
        "run.name=x",
    )
    assert (cfg.task.name, cfg.task.split, cfg.task.limit) == ("swe-lite", "test", 3)
    candidate = check_config(cfg)
    assert (candidate.drafter, candidate.gamma, candidate.seed) == ("suffix", 6, 7)
    base = baseline_config(candidate)
    assert base.drafter == "none" and base.temperature == candidate.temperature and base.seed == 7


def test_engine_group_options_select_drafters():
    for name in ("none", "ngram", "suffix", "draft_model"):
        assert _compose(f"engine={name}", "run.name=x").engine.drafter == name


def test_wrong_group_value_lists_the_available_options():
    with pytest.raises(MissingConfigException) as err:
        _compose("hardware=rtx9999")
    text = str(err.value)
    assert "hardware/rtx9999" in text
    for name in HARDWARE:
        assert name in text


def test_wrong_key_names_the_key():
    with pytest.raises(ConfigCompositionException) as err:
        _compose("engine.gama=4")
    assert "engine.gama" in _chain(err.value)


def test_wrong_type_is_refused():
    with pytest.raises(ConfigCompositionException) as err:
        _compose("engine.gamma=abc")
    assert "gamma" in _chain(err.value)


@pytest.mark.parametrize(
    ("override", "allowed"),
    [
        ("engine.drafter=medusa", "ngram"),
        ("engine.acceptance=lenient", "typical"),
        ("engine.gamma_policy=magic", "heuristic"),
        ("sandbox.name=vm", "docker"),
        ("task.name=humaneval", "swe-bench-lite"),
        ("task.subset=random", "spread"),
    ],
)
def test_wrong_choice_names_the_allowed_values(override, allowed):
    cfg = _compose(override, "run.name=x")
    with pytest.raises(ValueError) as err:
        check_config(cfg)
    assert override.split("=")[1] in str(err.value) and allowed in str(err.value)


def test_unknown_drafter_option_is_refused_before_loading():
    cfg = _compose("+engine.options.ngram_size=3", "run.name=x")
    with pytest.raises(ValueError, match="ngram_size"):
        check_config(cfg)


def test_engine_config_copies_every_field():
    cfg = _compose("engine.temperature=0.7", "engine.top_k=5", "engine.acceptance=topk", "run.name=x")
    ec = engine_config(cfg.engine, seed=3)
    assert (ec.temperature, ec.top_k, ec.acceptance, ec.seed) == (0.7, 5, "topk", 3)


def test_the_candidates_drafter_is_resolved_once_and_its_needs_pick_what_is_loaded():
    cfg = _compose("model=spectune-tiny", "engine=mtp", "engine.gamma=3", "run.name=x")
    candidate, drafter = check_candidate(cfg)
    assert candidate == check_config(cfg) and drafter.name == candidate.drafter == "mtp"
    assert drafter.needs.mtp and not drafter.needs.draft_model and not drafter.needs.eagle3
    # weights=False: the served path resolves the head folders without loading them (a tokenizer only)
    models = load_for(cfg.model, drafter.needs, device="cpu", weights=False)
    assert models.mtp_path and models.eagle3_path is None and models.draft_path is None
    models = load_for(cfg.model, Needs(eagle3=True), device="cpu", weights=False, draft=cfg.model.draft)
    assert models.eagle3_path and models.mtp_path is None and models.draft_path  # `draft` loads what needs do not
