"""`python -m bench engine`: the JSON report's shape and verdicts on tiny models (behaviour, not speed)."""

from __future__ import annotations

import io
import json

import pytest
import torch
from rich.console import Console

from bench.__main__ import main, render_step_profile
from bench.engine import RATIOS, analyse_forwards, first_divergence, tiny_models

# One thread: the quick models are far too small to gain from more, and an oversubscribed core makes
# OpenMP barriers wait for a whole scheduler slice.
QUICK = ["engine", "--quick", "--json", "--threads", "1", "--no-progress"]
DRAFT_RATIOS = {"draft_vs_transformers", "draft_on_vs_off"}
SPECTUNE = (
    "spectune_plain",
    "spectune_ngram",
    "spectune_draft_model",
    "spectune_suffix",
    *(f"spectune_mtp_g{g}" for g in (1, 2, 3, 4)),
    "spectune_mtp_ngram_first",
    "spectune_mtp_ngram_extend",
    "spectune_layer_skip_k1",
)
TRANSFORMERS = (
    "transformers_greedy",
    "transformers_prompt_lookup",
    "transformers_assisted",
    "transformers_early_exit_k1",
)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One model cache for the module (tiny models are built once), via $SPECTUNE_CACHE."""
    root = tmp_path_factory.mktemp("bench-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECTUNE_CACHE", str(root))
        yield root


def run_json(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0
    out = capsys.readouterr().out
    return json.loads(out)  # stdout holds nothing but the JSON object


def test_quick_engine_report(cache, capsys):
    report = run_json(capsys, [*QUICK, "--profile"])
    setup = report["setup"]
    repeats = setup["repeats"]
    assert repeats == 2 and setup["max_new_tokens"] == 24 and len(setup["prompts"]) == 2
    assert (setup["target"]["layers"], setup["target"]["hidden"]) == (2, 64)
    assert (setup["draft"]["layers"], setup["draft"]["hidden"]) == (1, 32)
    assert setup["threads"] == 1

    # The 2-layer quick target has nothing to skip at k = 2; every other case runs (a random MTP module).
    unmeasured = {"layer_skip_k2_on_vs_off"}
    for key in set(RATIOS) - unmeasured:
        assert isinstance(report[key], float) and report[key] > 0, key
    assert report["identical"] is True, json.dumps(report["identity"], indent=1)
    assert report["deterministic"] is True
    assert set(report["skipped"]["ratios"]) == unmeasured
    assert set(report["skipped"]["cases"]) == {"spectune_layer_skip_k2"}

    acc = report["acceptance"]
    for name in SPECTUNE + TRANSFORMERS:
        a = acc[name]
        assert a["new_tokens"] == 2 * 24
        assert a["target_forwards"] > 0 and a["tokens_per_target_forward"] > 0
        assert 0.0 <= a["acceptance_rate"] <= 1.0
    for name in SPECTUNE:
        assert acc[name]["side"] == "spectune"
        assert acc[name]["hook_matches_engine_stats"] is True, acc[name]
    for name in TRANSFORMERS:
        assert acc[name]["side"] == "transformers"
    # Plain decoding drafts nothing; lookup and draft-model cases do, on both sides.
    assert acc["spectune_plain"]["drafted"] == acc["transformers_greedy"]["drafted"] == 0
    for name in ("spectune_ngram", "transformers_prompt_lookup", "spectune_draft_model", "transformers_assisted"):
        assert acc[name]["drafted"] > 0, name
    # Constant gamma, no confidence stop on both sides: the same drafting schedule, token for token.
    assert acc["transformers_assisted"]["drafted"] == acc["spectune_draft_model"]["drafted"]
    assert acc["transformers_assisted"]["draft_model_forwards"] > 0

    raw = report["raw"]
    for name in SPECTUNE + TRANSFORMERS:
        assert len(raw[name]["seconds"]) == repeats and len(raw[name]["tokens"]) == repeats
        assert all(s > 0 for s in raw[name]["seconds"])
        assert raw[name]["tokens"] == [2 * 24] * repeats
    for key in set(RATIOS) - unmeasured:
        assert len(raw["ratios_per_repeat"][key]) == repeats

    # Every numeric path profiled on the same weights; the one the cases ran is named in the setup.
    assert setup["target"]["forward"].startswith("torch float32 (auto:")
    paths = report["costs"]["paths"]["target"]
    assert {"transformers", "torch", "onednn"} <= {p for p, c in paths.items() if "R" in c}
    if not torch.cuda.is_available():
        assert "needs a CUDA device" in paths["graphs"]["unavailable"]
    assert report["costs"]["target"]["path"] == setup["target"]["forward"]
    for row in report["limits"].values():
        assert row["R_in_generation"] > 0 and row["bound_in_generation"] > 0

    # --profile: every spectune case's decode steps by phase, and its forwards by fed rows beside the profile's R_k
    steps = report["step_profile"]
    assert set(steps) == {c for c in setup["cases"] if c.startswith("spectune_")}
    for name, row in steps.items():
        acc = report["acceptance"][name]["engine_stats"]["timed"]
        assert row["steps"] == acc["target_forwards"] - acc["generations"], name
        assert set(row["per_step_us"]) == {
            "prefill",
            "draft",
            "forward",
            "accept",
            "stats",
            "crop",
            "commit",
            "other",
            "total",
        }
        assert set(row["R_profile_by_rows"]) <= set(row["R_in_generation_by_rows"])
    assert steps["spectune_plain"]["R_in_generation_by_rows"] == {"1": 1.0}
    assert any(int(k) > 1 for k in steps["spectune_ngram"]["forward_us_by_rows"])
    console = Console(file=io.StringIO(), width=250)
    render_step_profile(report, console)
    shown = console.file.getvalue()
    assert "Where a decode step's time goes" in shown and "k=1 1.00/1.00" in shown


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--dtype", "float64", "--forward", "onednn"],
            "forward path 'onednn' cannot run float64 here: oneDNN's linear runs float32, bfloat16, not float64",
        ),
        (["--dtype", "int3"], "unknown dtype 'int3'"),
    ],
)
def test_a_path_that_cannot_run_is_one_error_line(cache, capsys, extra, message):
    assert main([*QUICK, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


def test_model_without_draft_skips_draft_cases(cache, capsys):
    target, _ = tiny_models(quick=True, root=cache)
    report = run_json(capsys, [*QUICK, "--model", str(target)])
    assert report["setup"]["draft"] is None
    # A model folder without --mtp / --eagle3 (and no mtp/, eagle3/ beside it) has no heads: those cases are skipped.
    mtp_ratios = {k for k in RATIOS if k.startswith(("mtp_", "eagle3_"))}
    for key in RATIOS:
        if key in DRAFT_RATIOS or key in mtp_ratios or key.startswith("layer_skip_k2"):
            assert report[key] is None
            assert key in report["skipped"]["ratios"]
        else:
            assert isinstance(report[key], float) and report[key] > 0, key
    assert all("draft" in report["skipped"]["ratios"][k] for k in DRAFT_RATIOS if k not in mtp_ratios)
    mtp_cases = {f"spectune_mtp_g{g}" for g in (1, 2, 3, 4)} | {"spectune_mtp_ngram_first", "spectune_mtp_ngram_extend"}
    mtp_cases |= {f"spectune_eagle3_g{g}" for g in (1, 2, 3, 4)}
    assert set(report["skipped"]["cases"]) == {
        "spectune_draft_model",
        "transformers_assisted",
        "spectune_layer_skip_k2",
        *mtp_cases,
    }
    assert "spectune_draft_model" not in report["acceptance"] and "transformers_assisted" not in report["raw"]
    assert "draft_vs_transformers" not in report["identity"]
    assert report["identical"] is True


@pytest.mark.parametrize(
    "argv",
    [
        ["engine", "--repeats", "2"],  # a measurement needs >= 5 repeats unless --quick
        ["engine", "--draft", "/nonexistent"],  # --draft needs --model
        ["engine", "--gamma", "0"],
    ],
)
def test_bad_arguments_exit(argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2


def test_analyse_forwards_counts_drafts_like_engine_stats():
    prompt = [7, 8, 9]
    output = [1, 2, 3, 4, 5]
    calls = [
        (0, [7, 8]),  # spectune prefill of prompt[:-1]: no draft
        (2, [9, 1, 2, 6]),  # draft [1, 2, 6]: two accepted
        (5, [3, 4, 5, 8]),  # draft [4, 5, 8] at positions 6..8: 8 lies past the output, so 2 accepted
    ]
    assert analyse_forwards(calls, len(prompt), output) == {
        "target_forwards": 3,
        "drafts": 2,
        "drafted": 6,
        "accepted": 4,
    }
    # transformers-style first forward: the whole prompt plus a draft in one call.
    assert analyse_forwards([(0, [7, 8, 9, 1, 9])], len(prompt), output)["accepted"] == 1


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2
