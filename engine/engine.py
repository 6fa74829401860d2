"""The engine: a target model, an optional draft model and one speculative configuration.

It validates the configuration once (names, options, what the drafter needs, whether a draft shares the
target's tokenizer), owns what sessions share (weights, MTP weights, engine-wide drafter state such as the
suffix index) and creates sessions. It knows only token ids: no tasks, agents, Hydra or MLflow, and no drafter by name.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from common.errors import ConfigError, UnsupportedConfig
from engine.acceptance import AcceptanceRule, acceptance_options_class, make_acceptance
from engine.batch import decode_together
from engine.decode import Decoding, GenerationResult, Runtime, decode
from engine.drafters import Drafter, DrafterResources, DrafterSpec, Needs, drafter_option_keys, resolve_drafter
from engine.drafters.token_bridge import TokenBridge
from engine.eagle3 import Eagle3Module
from engine.eagle3 import check_target as check_eagle3_target
from engine.gamma import GammaPolicy
from engine.kv import position_limit
from engine.loading import LoadedModel, tokenizer_difference
from engine.mtp import MtpModule, check_target
from engine.options import build_options, option_names
from engine.profile import StepProfile
from engine.sampling import SamplingParams
from engine.session import Session

log = logging.getLogger("spectune.engine")


@dataclass
class EngineConfig:
    """One speculative-decoding configuration."""

    drafter: str = "none"  # none | ngram | suffix | draft_model | mtp | eagle3 | layer_skip, or A+B (e.g. mtp+ngram)
    gamma: int = 4  # draft tokens per step (start value for the heuristic policy)
    gamma_policy: str = "fixed"  # fixed | heuristic | confidence
    max_gamma: int = 16  # upper bound of the heuristic policy
    confidence: float = 0.4  # confidence policy: stop drafting when draft top probability < this
    acceptance: str = "exact"  # exact (lossless) | topk | threshold | typical (lossy)
    options: dict[str, Any] = field(default_factory=dict)  # drafter / acceptance options, KEY or CHILD.KEY -> value
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    seed: int = 0  # seed of a session's sampling RNG (session i uses seed + i); the commands set it from run.seed
    # Who decodes: builtin (this engine) | llama-server (the runners start a real llama-server with this
    # configuration's exported flags; runners/backends.py). The engine itself runs only builtin.
    backend: str = "builtin"


class Engine:
    """Builds sessions that decode with one configuration."""

    def __init__(
        self,
        target: LoadedModel,
        config: EngineConfig | None = None,
        draft: LoadedModel | None = None,
        mtp: MtpModule | None = None,
        eagle3: Eagle3Module | None = None,
    ):
        self.config = config = config or EngineConfig()
        if config.backend != "builtin":
            raise ValueError(
                f"EngineConfig.backend={config.backend!r}: the built-in Engine runs backend 'builtin' only "
                "(runners.backends starts a llama-server for 'llama-server')"
            )
        self.target = target
        self.drafter_spec, self.acceptance = self.validate(config)
        self.needs: Needs = self.drafter_spec.needs
        if self.needs.server_draft:
            raise UnsupportedConfig(self.drafter_spec.refusal)
        # Only what the drafter uses is kept, so weight_bytes and the memory model count exactly that.
        self.draft = draft if self.needs.draft_model else None
        self.mtp = mtp if self.needs.mtp else None
        self.eagle3 = eagle3 if self.needs.eagle3 else None
        self.params = SamplingParams(config.temperature, config.top_k, config.top_p)
        # How the draft's tokenizer differs from the target's (None: the same, or no draft model)
        self.tokenizer_pair: str | None = None
        self.bridge: TokenBridge | None = None
        if self.needs.draft_model:
            if draft is None:
                raise UnsupportedConfig(f"drafter {config.drafter!r} needs a draft model (--draft DIR)")
            # In-process fakes have no tokenizer: ids shared by construction.
            if target.tokenizer is not None and draft.tokenizer is not None:
                self.tokenizer_pair = tokenizer_difference(target, draft)
        if self.tokenizer_pair is not None:
            # The draft proposes in its own ids, carried over as text (engine/drafters/token_bridge.py).
            self.bridge = TokenBridge(target.tokenizer, draft.tokenizer, self.tokenizer_pair)
            log.info("draft_model: cross-tokenizer pair, proposals carried over as text (%s)", self.tokenizer_pair)
        if self.needs.mtp:
            if mtp is None:
                raise UnsupportedConfig(
                    f"drafter {config.drafter!r} needs MTP weights (--mtp DIR / model.mtp; "
                    "train them: python -m training.mtp)"
                )
            check_target(mtp.config, target.model)
        if self.needs.eagle3:
            if eagle3 is None:
                raise UnsupportedConfig(
                    f"drafter {config.drafter!r} needs an EAGLE-3 head (--eagle3 DIR / model.eagle3; "
                    "train one: python -m training.eagle3)"
                )
            check_eagle3_target(eagle3.config, target.model)
        self.device = target.device
        self.forward = target.forward  # built once per loaded model, shared by every engine on it
        self.context_limit = position_limit(target.model) or 1 << 30
        self.stop_tokens = frozenset(target.eos_token_ids)
        self.shared_state = self.drafter_spec.shared_state()
        heads = [h for h in (self.mtp, self.eagle3) if h is not None]
        models = [m.model for m in (target, self.draft) if m is not None] + heads
        # Copies a numeric path packs for its kernels (oneDNN): counted in the CPU estimate of peak memory.
        forwards = [m.forward for m in (target, self.draft) if m is not None]
        self.packed_bytes = sum(int(getattr(f, "packed_bytes", 0)) for f in forwards)
        self.weight_bytes = sum(_param_bytes(m) for m in models)
        self._sessions = 0
        # Set a StepProfile here (engine/profile.py) to record where every step's time goes, phase by phase.
        self.step_profile: StepProfile | None = None
        self.new_drafter()  # a drafter that cannot work with these models fails here, not in the first session

    @staticmethod
    def validate(config: EngineConfig) -> tuple[DrafterSpec, AcceptanceRule]:
        """Check names, options and policy without touching models; returns (the drafter resolved, rule).

        Cheap, so command lines call it before loading weights and fail on a typo in milliseconds.
        A plain key goes to every owner that declares it (the drafter or its children, the acceptance
        rule); `acceptance.KEY` only to the rule, `CHILD.KEY` only to that drafter.
        """
        drafter = resolve_drafter(config.drafter)  # the name checked once; its options are set below
        acceptance_cls = acceptance_options_class(config.acceptance)
        rule_keys = option_names(acceptance_cls)
        drafter_values: dict[str, Any] = {}
        rule_values: dict[str, Any] = {}
        for key, value in flat_options(config.options).items():
            owner, dot, rest = key.partition(".")
            if dot and owner == "acceptance":
                rule_values[rest] = value
                continue
            to_rule = not dot and key in rule_keys
            to_drafter = drafter.takes(key)
            if not (to_rule or to_drafter):
                raise ConfigError(
                    f"unknown option {key!r}; allowed options: drafter {config.drafter!r}: "
                    f"{drafter_option_keys(config.drafter)}, acceptance {config.acceptance!r}: {rule_keys}"
                )
            if to_rule:
                rule_values[key] = value
            if to_drafter:
                drafter_values[key] = value
        if drafter_values:
            drafter = drafter.with_values(drafter_values)
        rule = make_acceptance(
            config.acceptance, build_options(acceptance_cls, rule_values, f"acceptance {config.acceptance!r}")
        )
        SamplingParams(config.temperature, config.top_k, config.top_p)  # validates ranges
        GammaPolicy(config.gamma_policy, config.gamma, config.max_gamma, config.confidence)  # validates
        if config.gamma_policy == "confidence" and not drafter.needs.distribution:
            raise ConfigError(
                "gamma policy 'confidence' needs a model drafter (draft_model, mtp, eagle3, layer_skip or a "
                f"combination with one), not {config.drafter!r}"
            )
        return drafter, rule

    @property
    def runtime(self) -> Runtime:
        """What decoding reads from this engine, as it is now (tests swap an engine's acceptance rule)."""
        return Runtime(
            forward=self.forward,
            acceptance=self.acceptance,
            params=self.params,
            stop_tokens=self.stop_tokens,
            context_limit=self.context_limit,
            device=self.device,
            drafter=self.config.drafter,
            acceptance_name=self.config.acceptance,
            resident_bytes=self.weight_bytes + self.packed_bytes,
        )

    @property
    def lossy(self) -> bool:
        """True when the acceptance rule may change what plain decoding would output."""
        return self.acceptance.lossy

    def new_drafter(self) -> Drafter:
        """A drafter instance for a new session."""
        resources = DrafterResources(
            target=self.target,
            draft=self.draft,
            mtp=self.mtp,
            eagle3=self.eagle3,
            shared=self.shared_state,
            bridge=self.bridge,
        )
        return self.drafter_spec.make(resources)

    def new_gamma_policy(self) -> GammaPolicy:
        """A fresh draft-length policy for a new session."""
        c = self.config
        return GammaPolicy(c.gamma_policy, c.gamma, c.max_gamma, c.confidence)

    def new_session(self, seed: int | None = None) -> Session:
        """A new, empty session (seed defaults to config.seed + the number of sessions so far)."""
        if seed is None:
            seed = self.config.seed + self._sessions
        self._sessions += 1
        return Session(
            cache=self.forward.new_cache(),
            drafter=self.new_drafter(),
            policy=self.new_gamma_policy(),
            generator=torch.Generator(device=self.device).manual_seed(seed),
        )

    def generate(
        self,
        prompt: list[int],
        max_new_tokens: int,
        session: Session | None = None,
        stop_tokens: frozenset[int] | None = None,
    ) -> GenerationResult:
        """Continue `session` (a fresh one if None) with `prompt`, its whole token history for this turn."""
        session = session or self.new_session()
        return decode(self.runtime, session, prompt, max_new_tokens, stop_tokens, self.step_profile)

    def decoding(
        self,
        prompt: list[int],
        max_new_tokens: int,
        session: Session | None = None,
        stop_tokens: frozenset[int] | None = None,
    ) -> Decoding:
        """A generation of `session` (a fresh one if None) to step alone or in a Batch (engine/batch.py)."""
        return Decoding(self.runtime, session or self.new_session(), prompt, max_new_tokens, stop_tokens)

    def generate_together(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        sessions: list[Session] | None = None,
        stop_tokens: frozenset[int] | None = None,
    ) -> list[GenerationResult]:
        """Generate for several sessions at once, every step verified in one batched target forward."""
        sessions = sessions or [self.new_session() for _ in prompts]
        if len(sessions) != len(prompts):
            raise ValueError(f"generate_together: {len(prompts)} prompts for {len(sessions)} sessions")
        decodings = [self.decoding(p, max_new_tokens, s, stop_tokens) for p, s in zip(prompts, sessions, strict=True)]
        return decode_together(self.runtime, decodings)

    def reset_drafter_state(self) -> None:
        """Forget what drafters learned across sessions (e.g. suffix's finished generations): measurement isolation."""
        if self.shared_state is not None:
            self.shared_state.reset()


def flat_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """{"ngram": {"min_match": 3}} (what Hydra makes of engine.options.ngram.min_match=3) as {"ngram.min_match": 3}."""
    out: dict[str, Any] = {}
    for key, value in options.items():
        if isinstance(value, Mapping):
            out.update({f"{key}.{k}": v for k, v in flat_options(value).items()})
        else:
            out[str(key)] = value
    return out


def _param_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())
