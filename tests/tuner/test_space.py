"""The search space: conditional suggestions, draft_model only with a draft, bad space files fail early."""

import optuna
import pytest
from omegaconf import OmegaConf

from engine.engine import Engine, EngineConfig
from tests.conftest import compose_config
from tuner.space import load_space, suggest


def _tune(*overrides: str):
    return compose_config("tune", *overrides)


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
    assert {c.drafter for c in configs} == {
        "ngram",
        "suffix",
        "ngram_cache",
        "ngram_map_k",
        "draft_model",
        "layer_skip",
    }
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


@pytest.mark.parametrize("name", ["default", "full"])
def test_mtp_drafters_are_offered_only_with_mtp_weights(name):
    without = load_space(_tune(f"space={name}").space, has_draft=False)
    mtp_names = {d for d in without.left_out if "mtp" in d}
    assert {"mtp", "mtp+ngram"} <= mtp_names and not mtp_names & set(without.drafters)
    assert all("model.mtp" in without.left_out[d] for d in mtp_names)
    with_mtp = load_space(_tune(f"space={name}").space, has_draft=False, has_mtp=True)
    assert mtp_names <= set(with_mtp.drafters) and "draft_model" in with_mtp.left_out


def test_combined_drafters_draw_namespaced_child_options_that_the_engine_accepts():
    space = load_space(_tune("space=full").space, has_draft=True, has_mtp=True)
    configs, params = _draw(space, 200, seed=1)
    combined = [(c, p) for c, p in zip(configs, params, strict=True) if "+" in c.drafter]
    assert {c.drafter for c, _ in combined} == {"mtp+ngram", "mtp+suffix"}
    assert {c.options["policy"] for c, _ in combined} == {"first", "extend"}
    for config, p in combined:
        drafter, _ = Engine.validate(config)
        options = drafter.options
        child = "ngram" if config.drafter == "mtp+ngram" else "suffix"
        assert f"{config.drafter}.{child}.min_match" in p  # nested space block -> CHILD.KEY parameter
        assert options.children[child].min_match == config.options[f"{child}.min_match"]
        assert options.children[child].min_match <= options.children[child].max_match
    assert any(c.gamma_policy == "confidence" for c, _ in combined)  # a combination with a model drafter may


def test_a_combination_of_lookups_cannot_use_the_confidence_policy():
    space = {"drafters": {"ngram+suffix": {"gamma_policy": ["confidence"], "ngram": {"min_match": [2]}}}}
    with pytest.raises(ValueError, match="needs a model drafter"):
        load_space(OmegaConf.create(space), has_draft=True)
    with pytest.raises(ValueError, match=r"ngram\.min_matc"):
        load_space(OmegaConf.create({"drafters": {"mtp+ngram": {"ngram": {"min_matc": [2]}}}}), has_draft=True)


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


def test_serve_restricts_the_space_to_what_those_servers_run():
    drafters = {"ngram": {}, "mtp": {}, "layer_skip": {}, "draft_model": {}, "mtp+ngram": {}}
    everything = load_space({"drafters": drafters}, has_draft=True, has_mtp=True)
    assert sorted(everything.drafters) == sorted(drafters)
    vllm = load_space({"drafters": drafters}, has_draft=True, has_mtp=True, serve=("vLLM",))
    assert sorted(vllm.drafters) == ["draft_model", "ngram"]
    assert "vLLM cannot run it" in vllm.left_out["mtp"] and "early-exit" in vllm.left_out["layer_skip"]
    assert "runs only in spectune" in vllm.left_out["mtp+ngram"]  # a half-exported combination is not it
    both = load_space({"drafters": drafters}, has_draft=True, has_mtp=True, serve=("vLLM", "llama-server"))
    # mtp runs on llama-server (draft-mtp), and mtp+ngram (policy first) as ngram-simple,draft-mtp there
    assert sorted(both.drafters) == ["draft_model", "mtp", "mtp+ngram", "ngram"]
    with pytest.raises(ValueError, match="allow_lossy"):
        load_space({"drafters": {"ngram": {}}, "allow_lossy": True}, has_draft=False, serve=("SGLang",))
