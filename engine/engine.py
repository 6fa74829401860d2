"""The engine: a target model, an optional draft model and one speculative configuration.

It validates the configuration once (names, options, tokenizer compatibility), owns what sessions
share (weights, the engine-wide suffix index) and creates sessions. It knows only token ids:
no tasks, agents, Hydra or MLflow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.acceptance import AcceptanceRule, acceptance_options_class, make_acceptance
from engine.drafters import DRAFTERS, Drafter, DrafterResources, drafter_options_class, make_drafter
from engine.drafters.suffix import SuffixOptions, new_shared_index
from engine.gamma import GammaPolicy
from engine.kv import position_limit
from engine.loading import LoadedModel, check_same_tokenizer
from engine.options import build_options, split_options
from engine.sampling import SamplingParams
from engine.session import Session
from engine.speculative import GenerationResult


@dataclass
class EngineConfig:
    """One speculative-decoding configuration."""

    drafter: str = "none"  # none | ngram | suffix | draft_model
    gamma: int = 4  # draft tokens per step (start value for the heuristic policy)
    gamma_policy: str = "fixed"  # fixed | heuristic | confidence
    max_gamma: int = 16  # upper bound of the heuristic policy
    confidence: float = 0.4  # confidence policy: stop drafting when draft top probability < this
    acceptance: str = "exact"  # exact (lossless) | topk | threshold | typical (lossy)
    options: dict[str, Any] = field(default_factory=dict)  # drafter / acceptance options, KEY -> value
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    seed: int = 0  # seed of a session's sampling RNG (session i uses seed + i); the commands set it from run.seed


class Engine:
    """Builds sessions that decode with one configuration."""

    def __init__(self, target: LoadedModel, config: EngineConfig | None = None, draft: LoadedModel | None = None):
        self.config = config = config or EngineConfig()
        self.target = target
        self.draft = draft
        self.drafter_options, self.acceptance = self.validate(config)
        self.params = SamplingParams(config.temperature, config.top_k, config.top_p)
        if config.drafter == "draft_model":
            if draft is None:
                raise ValueError("drafter 'draft_model' needs a draft model (--draft DIR)")
            if target.tokenizer is not None and draft.tokenizer is not None:
                check_same_tokenizer(target, draft)  # in-process fakes have none: ids shared by construction
        self.device = target.device
        self.forward = target.forward  # built once per loaded model, shared by every engine on it
        self.context_limit = position_limit(target.model) or 1 << 30
        self.stop_tokens = frozenset(target.eos_token_ids)
        self.suffix_index = (
            new_shared_index(self.drafter_options) if isinstance(self.drafter_options, SuffixOptions) else None
        )
        self.weight_bytes = sum(_param_bytes(m.model) for m in (target, draft) if m is not None)
        self._sessions = 0

    @staticmethod
    def validate(config: EngineConfig) -> tuple[object, AcceptanceRule]:
        """Check names, options and policy without touching models; returns (drafter options, rule).

        Cheap, so command lines call it before loading weights and fail on a typo in milliseconds.
        """
        drafter_cls = drafter_options_class(config.drafter)
        acceptance_cls = acceptance_options_class(config.acceptance)
        routed = split_options(config.options, {"drafter": drafter_cls, "acceptance": acceptance_cls})
        drafter_options = build_options(drafter_cls, routed["drafter"], f"drafter {config.drafter!r}")
        rule = make_acceptance(
            config.acceptance,
            build_options(acceptance_cls, routed["acceptance"], f"acceptance {config.acceptance!r}"),
        )
        SamplingParams(config.temperature, config.top_k, config.top_p)  # validates ranges
        GammaPolicy(config.gamma_policy, config.gamma, config.max_gamma, config.confidence)  # validates
        if config.gamma_policy == "confidence" and not DRAFTERS[config.drafter][0].is_model:
            raise ValueError(
                f"gamma policy 'confidence' needs a model drafter (draft_model), not {config.drafter!r}"
            )
        return drafter_options, rule

    @property
    def lossy(self) -> bool:
        """True when the acceptance rule may change what plain decoding would output."""
        return self.acceptance.lossy

    def new_drafter(self) -> Drafter:
        """A drafter instance for a new session."""
        resources = DrafterResources(target=self.target, draft=self.draft, suffix_index=self.suffix_index)
        return make_drafter(self.config.drafter, self.drafter_options, resources)

    def new_gamma_policy(self) -> GammaPolicy:
        """A fresh draft-length policy for a new session."""
        c = self.config
        return GammaPolicy(c.gamma_policy, c.gamma, c.max_gamma, c.confidence)

    def new_session(self, seed: int | None = None) -> Session:
        """A new, empty session (seed defaults to config.seed + the number of sessions so far)."""
        if seed is None:
            seed = self.config.seed + self._sessions
        self._sessions += 1
        return Session(self, seed)

    def generate(
        self,
        prompt: list[int],
        max_new_tokens: int,
        session: Session | None = None,
        stop_tokens: frozenset[int] | None = None,
    ) -> GenerationResult:
        """Generate in `session` (a fresh one if None)."""
        session = session or self.new_session()
        return session.generate(prompt, max_new_tokens, stop_tokens)

    def reset_suffix_index(self) -> None:
        """Forget every finished generation the suffix drafter learned from (measurement isolation)."""
        if self.suffix_index is not None:
            self.suffix_index.reset()


def _param_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())
