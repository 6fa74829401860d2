"""The search space: conditional suggestions, draft_model only with a draft, bad space files fail early."""

from pathlib import Path

import optuna
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from engine.engine import Engine, EngineConfig
from tuner.config import register_tune_configs
from tuner.space import load_space, suggest

CONF = str(Path(__file__).resolve().parents[2] / "conf")
register_tune_configs()


def _tune(*overrides: str):
    with initialize_config_dir(config_dir=CONF, version_base=None):
        return compose("tune", overrides=list(overrides))


@pytest.mark.parametrize("name", ["default", "lookup", "full"])
def test_every_space_file_composes_and_loads(name):
    cfg = _tune(f"space={name}")
    space = load_space(cfg.space, has_draft=True)
    assert space.name == name and space.drafters


def _draw(space, n=40, seed=0):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    configs, params = [], []
    for _ in range(n):
        trial = study.ask()
        configs.append(suggest(trial, space, EngineConfig(temperature=0.0, seed=3)))
        params.append(trial.params)
        study.tell(trial, 1.0)
    return configs, params


def test_suggestions_carry_only_the_chosen_drafters_knobs_and_are_valid():
    space = load_space(_tune("space=full").space, has_draft=True)
    configs, params = _draw(space, 60)
    assert {c.drafter for c in configs} == {"ngram", "suffix", "draft_model"}
    for config, p in zip(configs, params, strict=True):
        Engine.validate(config)
        assert config.acceptance == "exact" and config.seed == 3  # lossy only on opt-in; base sampling kept
        assert all(k == "drafter" or k.startswith(config.drafter + ".") for k in p), p
        if config.gamma_policy != "heuristic":
            assert f"{config.drafter}.max_gamma" not in p
        if config.gamma_policy != "confidence":
            assert f"{config.drafter}.confidence" not in p
        if "min_match" in config.options:
            assert config.options["min_match"] <= config.options["max_match"]
        assert config.max_gamma >= config.gamma


def test_draft_model_is_offered_only_with_a_draft():
    space = load_space(_tune().space, has_draft=False)
    assert "draft_model" not in space.drafters and "draft_model" in space.left_out
    configs, _ = _draw(space, 30)
    assert "draft_model" not in {c.drafter for c in configs}


def test_lossy_rules_only_when_allowed():
    configs, _ = _draw(load_space(_tune().space, has_draft=True), 30)
    assert {c.acceptance for c in configs} == {"exact"}
    configs, _ = _draw(load_space(_tune("space.allow_lossy=true").space, has_draft=True), 60)
    assert {"exact", "topk", "threshold"} <= {c.acceptance for c in configs}
    for config in configs:
        Engine.validate(config)
        if config.acceptance == "topk":
            assert 2 <= config.options["k"] <= 8


@pytest.mark.parametrize(
    ("space", "named"),
    [
        ({"drafters": {"medusa": {}}}, ["medusa", "ngram", "suffix"]),
        ({"drafters": {"ngram": {"gama": [1, 2]}}}, ["gama", "min_match", "gamma"]),
        ({"drafters": {"ngram": {"gamma_policy": ["confidence"]}}}, ["confidence", "draft_model"]),
        ({"drafters": {"ngram": {"gamma": {"low": 5, "high": 2}}}}, ["low=5", "high=2"]),
        ({"drafters": {"ngram": {}}, "acceptance": {"lenient": {}}}, ["lenient", "topk"]),
        ({"drafters": {"ngram": {}}, "acceptance": {"topk": {"kk": [1]}}}, ["kk", "'k'"]),
        ({"drafters": {"none": {}}}, ["none", "trial 0"]),
        ({"drafters": {}}, ["no drafter"]),
    ],
)
def test_a_bad_space_names_the_problem_and_the_allowed_values(space, named):
    with pytest.raises(ValueError) as err:
        load_space(OmegaConf.create(space), has_draft=True)
    for text in named:
        assert text in str(err.value), str(err.value)
