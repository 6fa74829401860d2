"""The tuner's memory constraint counts what each drafter adds: a draft model, MTP weights and state, layer-skip KV."""

from dataclasses import replace
from pathlib import Path

import pytest

from common.units import GIB
from engine.engine import EngineConfig
from engine.memory import (
    layer_skip_state_bytes_per_token,
    model_shape,
    mtp_state_bytes_per_token,
    mtp_weight_bytes,
)
from tuner.constraints import MemoryFacts, memory_figures

MODELS = Path(__file__).resolve().parents[2] / "models" / "spectune-tiny"
CONTEXT = 4096


@pytest.fixture(scope="module")
def facts() -> MemoryFacts:
    target = model_shape(str(MODELS / "target"))
    return MemoryFacts(
        target=target,
        draft=model_shape(str(MODELS / "draft")),
        dtype="float32",
        ceiling_bytes=GIB,
        overhead_bytes=0,
        measured_on_cuda=False,
        mtp_weight_bytes=mtp_weight_bytes(target, "float32", draft_vocab=1024),
    )


def _figures(facts: MemoryFacts, drafter: str, **options) -> dict:
    return memory_figures(EngineConfig(drafter=drafter, gamma=3, options=options), facts, CONTEXT)


def _parts(figures: dict) -> dict:
    return figures["estimate"].as_dict()


def test_lookup_drafters_add_no_weights_and_no_state(facts):
    parts = _parts(_figures(facts, "ngram"))
    assert parts["draft_weights"] == parts["drafter_weights"] == parts["drafter_kv"] == 0


def test_mtp_counts_its_module_and_its_per_position_state(facts):
    parts = _parts(_figures(facts, "mtp"))
    assert parts["drafter_weights"] == facts.mtp_weight_bytes > 0
    assert parts["draft_weights"] == 0
    held = parts["context"]
    assert parts["drafter_kv"] == pytest.approx(mtp_state_bytes_per_token(facts.target, "float32") * held, abs=1)
    assert held >= CONTEXT
    # under a ceiling that fits ngram at 500 needed tokens, MTP's extra bytes leave a shorter context
    tight = replace(
        facts, ceiling_bytes=memory_figures(EngineConfig(drafter="ngram", gamma=3), facts, 500)["estimate_bytes"]
    )
    assert _figures(tight, "mtp")["largest_context"] < _figures(tight, "ngram")["largest_context"] < 4096


def test_a_combination_counts_the_sum_of_its_children(facts):
    combined = _parts(_figures(facts, "mtp+ngram", policy="extend"))
    alone = _parts(_figures(facts, "mtp"))
    assert combined["drafter_weights"] == alone["drafter_weights"]
    assert combined["drafter_kv"] == alone["drafter_kv"]
    both = _parts(_figures(facts, "mtp+layer_skip", **{"layer_skip.layers": 2}))
    skip = _parts(_figures(facts, "layer_skip", layers=2))
    assert both["drafter_kv"] == alone["drafter_kv"] + skip["drafter_kv"]


def test_layer_skip_state_grows_with_its_layers_and_the_draft_model_counts_its_own_kv(facts):
    figures = [_parts(_figures(facts, "layer_skip", layers=k)) for k in (1, 2)]
    one, two = (f["drafter_kv"] for f in figures)
    held = figures[0]["context"]  # the growing cache's bound for the needed context
    assert one == pytest.approx(layer_skip_state_bytes_per_token(facts.target, 1, "float32") * held, abs=1)
    assert two == pytest.approx(2 * one, abs=1)
    draft = _parts(_figures(facts, "draft_model"))
    assert draft["draft_weights"] > 0 and draft["draft_kv"] > 0 and draft["drafter_kv"] == 0
