"""Combined drafters `A+B` and the registry that builds them (engine/drafters/__init__.py, combined.py).

Options reach the child they name, ambiguity fails loudly, needs and engine-wide states are the children's
union, the `first` and `extend` policies pick and join the children's proposals as documented, and every token
is credited to the drafter that proposed it. Proposals are compared with standalone children fed the same
history (and the same hidden states for the MTP), so the combination adds nothing of its own.
"""

from __future__ import annotations

import pytest
import torch

from engine.drafters import (
    Draft,
    DraftContext,
    DrafterResources,
    Needs,
    Verified,
    build_drafter_options,
    drafter_needs,
    drafter_option_keys,
    resolve_drafter,
)
from engine.drafters.combined import CombinedDrafter, CombinedOptions
from engine.drafters.mtp import MtpOptions
from engine.drafters.ngram import NgramOptions
from engine.drafters.suffix import SuffixOptions
from engine.drafters.token_index import TokenIndex
from engine.engine import Engine, EngineConfig
from engine.llama import TRUNK
from engine.mtp import random_mtp
from engine.sampling import SamplingParams
from engine.stats import GenerationStats
from engine.testing import random_model

GREEDY = SamplingParams()
SAMPLED = SamplingParams(temperature=1.0)
MATCHING = [5, 6, 7, 8, 5, 6, 7]  # the last token (and the last three) occurred before: an n-gram match
NOVEL = [5, 6, 7, 8, 9, 10, 11]  # no token repeats: no n-gram match


@pytest.fixture(scope="module")
def target():
    return random_model("llama", dtype=torch.float64, seed=3)


@pytest.fixture(scope="module")
def module(target):
    return random_mtp(target.model, seed=5)


def resources(target, module, **kw) -> DrafterResources:
    return DrafterResources(target=target, mtp=module, **kw)


def fed(drafter, target, history: list[int]):
    """`drafter` after a turn's begin() and the commit of a step that verified all of `history` (hidden states too)."""
    _, hidden = target.forward(target.forward.new_cache(), history[:-1], hidden=True)
    drafter.begin(history)
    drafter.commit(Verified(history, len(history), hidden, 0))
    return drafter


def ctx(history, max_tokens=4, params=GREEDY, seed=0, prefix=()) -> DraftContext:
    return DraftContext(list(history), max_tokens, params, torch.Generator().manual_seed(seed), prefix=list(prefix))


def fed_drafter(name: str, target, module, history, values=None):
    return fed(resolve_drafter(name, values).make(resources(target, module)), target, history)


# -- options ---------------------------------------------------------------------------------------------------


def test_namespaced_options_reach_the_right_child(target, module):
    options = build_drafter_options("mtp+ngram", {"ngram.min_match": 3, "policy": "extend"})
    assert isinstance(options, CombinedOptions)
    assert options.policy == "extend"
    assert options.children == {"mtp": MtpOptions(), "ngram": NgramOptions(min_match=3)}
    # Strings (command lines) are converted; a plain key that one child declares goes to it.
    options = build_drafter_options("mtp+ngram", {"ngram.min_match": "2", "max_match": "5"})
    assert options.policy == "first" and options.children["ngram"] == NgramOptions(min_match=2, max_match=5)
    options = build_drafter_options("suffix+ngram", {"suffix.min_match": 3, "ngram.max_match": 2})
    assert options.children == {"suffix": SuffixOptions(min_match=3), "ngram": NgramOptions(max_match=2)}
    # Through the engine, down to the session's drafter instances.
    engine = Engine(
        target, EngineConfig(drafter="mtp+ngram", options={"ngram.min_match": 3, "policy": "extend"}), mtp=module
    )
    drafter = engine.new_session().drafter
    assert isinstance(drafter, CombinedDrafter) and drafter.name == "mtp+ngram"
    assert drafter.options.policy == "extend"
    children = {child.name: child for child in drafter.children}
    assert children["ngram"].options.min_match == 3 and children["mtp"].module is module
    assert [c.name for c in drafter.lookups] == ["ngram"] and [c.name for c in drafter.models] == ["mtp"]


def test_a_plain_key_two_children_declare_is_ambiguous(target):
    with pytest.raises(
        ValueError, match=r"'min_match' is ambiguous in 'suffix\+ngram': say suffix.min_match or ngram.min_match"
    ):
        build_drafter_options("suffix+ngram", {"min_match": 2})
    with pytest.raises(ValueError, match=r"say suffix.max_match or ngram.max_match"):
        Engine(target, EngineConfig(drafter="suffix+ngram", options={"max_match": 2}))
    keys = drafter_option_keys("suffix+ngram")
    assert "policy" in keys and "match_factor" in keys and "min_match" not in keys
    assert {"suffix.min_match", "ngram.min_match", "suffix.scope"} <= set(keys)


def test_option_errors_name_what_is_allowed():
    with pytest.raises(ValueError, match=r"'suffix' is not part of drafter 'mtp\+ngram' \(mtp, ngram\)"):
        build_drafter_options("mtp+ngram", {"suffix.min_match": 2})
    with pytest.raises(ValueError, match=r"unknown option 'gamma' for drafter 'mtp\+ngram'; allowed: \['policy'"):
        build_drafter_options("mtp+ngram", {"gamma": 2})
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['depth'\] for drafter 'ngram'"):
        build_drafter_options("mtp+ngram", {"ngram.depth": 2})
    with pytest.raises(ValueError, match="unknown combined policy 'best'"):
        build_drafter_options("mtp+ngram", {"policy": "best"})
    with pytest.raises(ValueError, match="names a drafter twice"):
        build_drafter_options("ngram+ngram", {})
    with pytest.raises(ValueError, match="'none' cannot be combined"):
        build_drafter_options("none+ngram", {})


# -- needs and shared state ------------------------------------------------------------------------------------


def test_needs_are_the_union_of_the_childrens(target, module):
    assert resolve_drafter("mtp+ngram").needs == Needs(taps=(TRUNK,), distribution=True, mtp=True)
    assert resolve_drafter("ngram+draft_model").needs == Needs(distribution=True, draft_model=True)
    assert resolve_drafter("suffix+ngram").needs == Needs()
    assert resolve_drafter("layer_skip+suffix").needs == Needs(distribution=True)
    instance = resolve_drafter("mtp+ngram").make(resources(target, module))
    assert instance.needs == drafter_needs("mtp+ngram")  # the one-name door agrees with the spec
    engine = Engine(target, EngineConfig(drafter="mtp+ngram"), mtp=module)
    assert engine.needs == engine.drafter_spec.needs == drafter_needs("mtp+ngram") and engine.mtp is module
    # No distribution: the confidence policy has nothing to read.
    with pytest.raises(ValueError, match="gamma policy 'confidence' needs a model drafter"):
        Engine.validate(EngineConfig(drafter="suffix+ngram", gamma_policy="confidence"))
    Engine.validate(EngineConfig(drafter="mtp+ngram", gamma_policy="confidence"))


def test_a_name_is_resolved_once_into_a_spec_that_answers_every_question(target, module):
    spec = resolve_drafter("mtp+ngram", {"ngram.min_match": "2"})
    assert (spec.name, spec.parts, spec.cls) == ("mtp+ngram", ("mtp", "ngram"), CombinedDrafter)
    assert spec.options.children["ngram"].min_match == 2  # converted from the string
    assert spec.needs == Needs(taps=(TRUNK,), distribution=True, mtp=True) and spec.refusal == ""
    assert spec.takes("ngram.min_match") and spec.takes("policy") and not spec.takes("suffix.min_match")
    assert spec.with_values({"policy": "extend"}).options.policy == "extend" and spec.options.policy == "first"
    assert resolve_drafter("suffix+ngram").state_bytes_per_token(None, "float32") == 0.0  # lookups keep none
    assert isinstance(spec.make(resources(target, module)), CombinedDrafter)
    single = resolve_drafter("ngram")
    assert (single.parts, single.cls.__name__, type(single.options)) == (("ngram",), "NgramDrafter", NgramOptions)
    with pytest.raises(ValueError, match="unknown drafter 'ngramm'"):
        resolve_drafter("ngramm")
    # the engine validates by resolving the name once and keeps that spec
    drafter, _ = Engine.validate(EngineConfig(drafter="mtp+ngram", options={"ngram.min_match": 2}))
    assert drafter.options == spec.options and drafter.needs == spec.needs


def test_shared_state_of_a_combination_resets_the_suffix_index(target):
    state = resolve_drafter("suffix+ngram").shared_state()
    assert isinstance(state.states["suffix"], TokenIndex) and state.states["ngram"] is None
    assert resolve_drafter("suffix+ngram", {"suffix.scope": "session"}).shared_state().states["suffix"] is None
    engine = Engine(target, EngineConfig(drafter="suffix+ngram"))
    index = engine.shared_state.states["suffix"]
    session = engine.new_session()
    suffix = next(c for c in session.drafter.children if c.name == "suffix")
    assert suffix._shared is index  # the child reads the engine-wide index
    engine.generate([3, 1, 4, 1, 5, 9, 2, 6], 12, session=session)
    assert len(index) > 0, "a finished generation was not added to the engine-wide index"
    engine.reset_drafter_state()
    assert len(index) == 0


# -- the first policy ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_first_takes_the_ngram_proposal_when_it_matches(target, module, params):
    combined = fed_drafter("mtp+ngram", target, module, MATCHING)
    ngram = fed_drafter("ngram", target, module, MATCHING)
    draft = combined.propose(ctx(MATCHING, params=params))
    alone = ngram.propose(ctx(MATCHING, params=params))
    assert draft.tokens == alone.tokens == [8, 5, 6, 7]
    assert draft.sources == ["ngram"] * 4 and draft.probs is None  # deterministic: one-hot q


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_first_takes_the_mtp_proposal_otherwise(target, module, params):
    combined = fed_drafter("mtp+ngram", target, module, NOVEL)
    mtp = fed_drafter("mtp", target, module, NOVEL)
    draft = combined.propose(ctx(NOVEL, params=params, seed=7))
    alone = mtp.propose(ctx(NOVEL, params=params, seed=7))
    assert len(draft.tokens) == 4 and draft.tokens == alone.tokens
    assert draft.sources == ["mtp"] * 4
    if params.greedy:
        assert draft.probs is None
    else:
        torch.testing.assert_close(draft.probs, alone.probs, atol=0, rtol=0)


def test_first_asks_the_model_when_the_match_is_below_min_match(target, module):
    """ngram.min_match=2: a history whose last token occurred before, but not its last two, gets the MTP's draft."""
    history = [5, 6, 7, 8, 9, 10, 7]
    combined = fed_drafter("mtp+ngram", target, module, history, {"ngram.min_match": 2})
    assert fed_drafter("ngram", target, module, history).propose(ctx(history)).tokens == [8, 9, 10, 7]
    draft = combined.propose(ctx(history))
    assert draft.sources == ["mtp"] * 4
    assert draft.tokens == fed_drafter("mtp", target, module, history).propose(ctx(history)).tokens


def test_first_goes_down_the_model_list(target, module):
    """The MTP proposes nothing on a turn's first step (no hidden state of the last token yet): layer_skip does."""
    combined = resolve_drafter("mtp+layer_skip").make(resources(target, module))
    combined.begin(NOVEL)  # no commit: the target has not verified this history
    draft = combined.propose(ctx(NOVEL))
    alone = resolve_drafter("layer_skip").make(resources(target, module))
    alone.begin(NOVEL)
    assert draft.sources == ["layer_skip"] * 4 and draft.tokens == alone.propose(ctx(NOVEL)).tokens


# -- the extend policy -----------------------------------------------------------------------------------------


def shorten(drafter, name: str, keep: int) -> None:
    """Make child `name` of a combined drafter propose at most `keep` tokens (its own first ones)."""
    child = next(c for c in drafter.children if c.name == name)
    propose = child.propose

    def short(context):
        draft = propose(context)
        probs = None if draft.probs is None else draft.probs[:keep]
        return Draft(draft.tokens[:keep], probs, draft.sources[:keep], draft.limited)

    child.propose = short


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_extend_continues_an_ngram_proposal_with_the_mtp(target, module, params):
    """A 2-token n-gram proposal is continued by the MTP, which reads history + those tokens, up to max_tokens.

    The ngram drafter itself always fills the whole budget (an overlapping copy), so its proposal is cut to its
    first two tokens here: what `extend` does with a lookup proposal shorter than the budget is under test.
    """
    combined = fed_drafter("mtp+ngram", target, module, MATCHING, {"policy": "extend"})
    shorten(combined, "ngram", 2)
    draft = combined.propose(ctx(MATCHING, max_tokens=6, params=params, seed=3))
    head = [8, 5]
    tail = fed_drafter("mtp", target, module, MATCHING).propose(ctx(MATCHING, 4, params, seed=3, prefix=head))
    assert len(tail.tokens) == 4
    assert draft.tokens == head + tail.tokens and len(draft.tokens) == 6
    assert draft.sources == ["ngram"] * 2 + ["mtp"] * 4
    if params.greedy:
        assert draft.probs is None
    else:  # one-hot rows for the n-gram tokens, the MTP's q for its own
        assert draft.probs.shape == (6, target.vocab_size)
        one_hot = torch.nn.functional.one_hot(torch.tensor(head), target.vocab_size).to(draft.probs.dtype)
        assert torch.equal(draft.probs[:2], one_hot)
        torch.testing.assert_close(draft.probs[2:], tail.probs, atol=0, rtol=0)


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_extend_continues_a_suffix_proposal_with_the_mtp(target, module, params):
    """suffix (a real lookup that stops short of the budget: at most match_factor x match length tokens)."""
    combined = fed_drafter("mtp+suffix", target, module, MATCHING, {"policy": "extend", "suffix.match_factor": 0.5})
    suffix = fed_drafter("suffix", target, module, MATCHING, {"match_factor": 0.5})
    head = suffix.propose(ctx(MATCHING, 5)).tokens
    assert head == [8, 5]  # match of 3 tokens (5 6 7) -> ceil(1.5) = 2 tokens
    draft = combined.propose(ctx(MATCHING, max_tokens=5, params=params, seed=4))
    tail = fed_drafter("mtp", target, module, MATCHING).propose(ctx(MATCHING, 3, params, seed=4, prefix=head))
    assert draft.tokens == head + tail.tokens and len(draft.tokens) == 5
    assert draft.sources == ["suffix"] * 2 + ["mtp"] * 3


def test_extend_without_a_lookup_proposal_is_the_models_own(target, module):
    combined = fed_drafter("mtp+ngram", target, module, NOVEL, {"policy": "extend"})
    draft = combined.propose(ctx(NOVEL))
    assert draft.sources == ["mtp"] * 4
    assert draft.tokens == fed_drafter("mtp", target, module, NOVEL).propose(ctx(NOVEL)).tokens


def test_extend_keeps_a_lookup_proposal_that_fills_the_budget(target, module):
    combined = fed_drafter("mtp+ngram", target, module, MATCHING, {"policy": "extend"})
    draft = combined.propose(ctx(MATCHING, max_tokens=3))
    assert draft.tokens == [8, 5, 6] and draft.sources == ["ngram"] * 3


def test_every_child_sees_every_commit(target, module):
    """Whoever proposed, every child's state follows the history (the MTP stores hidden states even while n-gram
    proposals win), so the MTP drafts right away when the n-gram drafter stops matching."""
    engine = Engine(target, EngineConfig(drafter="mtp+ngram", gamma=3), mtp=module)
    session = engine.new_session()
    engine.generate(MATCHING, 6, session=session)
    mtp = next(c for c in session.drafter.children if c.name == "mtp")
    ngram = next(c for c in session.drafter.children if c.name == "ngram")
    assert mtp._known == len(session.history) - 1 and mtp._seen == session.history
    assert ngram._mirror.index.stream() == session.history


# -- credit ----------------------------------------------------------------------------------------------------


def test_credit_step_counts_each_token_for_its_proposer():
    stats = GenerationStats()
    stats.credit_step(["ngram", "ngram", "mtp", "mtp"], kept=3)
    stats.credit_step(["mtp", "mtp"], kept=0)
    assert stats.per_drafter["ngram"] == {
        "drafts": 1,
        "drafted": 2,
        "accepted": 2,
        "drafted_per_position": [1, 1],
        "accepted_per_position": [1, 1],
    }
    assert stats.per_drafter["mtp"] == {
        "drafts": 1,  # the step the MTP led; the mixed step counts for the n-gram drafter
        "drafted": 4,
        "accepted": 1,
        "drafted_per_position": [1, 1, 1, 1],
        "accepted_per_position": [0, 0, 1],
    }
    merged = stats + stats
    assert merged.per_drafter["mtp"]["drafted_per_position"] == [2, 2, 2, 2]
    assert merged.per_drafter["ngram"]["accepted"] == 4
    assert stats.per_drafter["ngram"]["drafts"] == 1, "adding must not change the operands"
    assert GenerationStats.from_dict(stats.to_dict()).per_drafter == stats.per_drafter


def test_generation_credits_each_drafter(target, module):
    """In a real generation with mixed steps (suffix, then the MTP), per-drafter counts add up to the totals."""
    engine = Engine(
        target,
        EngineConfig(drafter="mtp+suffix", gamma=4, options={"policy": "extend", "suffix.match_factor": 0.5}),
        mtp=module,
    )
    stats = engine.generate([*MATCHING, 8, 5, 6, 7, 8], 30).stats
    assert set(stats.per_drafter) == {"suffix", "mtp"}
    shares = stats.per_drafter.values()
    assert sum(s["drafts"] for s in shares) == stats.drafts
    assert sum(s["drafted"] for s in shares) == stats.drafted
    assert sum(s["accepted"] for s in shares) == stats.accepted
    mtp = stats.per_drafter["mtp"]
    # Tokens at a position the MTP never led from: it continued a suffix proposal there.
    assert max(mtp["drafted_per_position"]) > mtp["drafts"], stats.per_drafter
