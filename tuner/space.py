"""The search space (conf/space/*.yaml) and `suggest`: one Optuna trial -> one `EngineConfig`.

The space is conditional: a trial first picks a drafter, then only that drafter's knobs, each under
the parameter name `<drafter>.<knob>` (so TPE's `group=True` models each drafter's knobs apart). A knob is
an engine knob (`gamma`, `gamma_policy`, `max_gamma`, `confidence`) or an option of the drafter's own
options dataclass; `gamma_policy` decides which of the others are drawn (`max_gamma` only for
`heuristic`, `confidence` only for `confidence`). Acceptance is `exact` unless `allow_lossy` is set.
A drafter is any registered one or an A+B combination (`mtp+ngram`, whose children's options are
namespaced: `ngram.min_match`); one that needs what the model config lacks (a draft model, MTP weights)
is left out with the reason, and so is, given the kinds a llama-server binary has (`server_kinds`,
serving/llama_capabilities.py), one whose exported `--spec-type` that binary lacks (`spec_kinds`). Everything
is checked by `load_space`, before a model is loaded, with the allowed names in the message.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any

import optuna
from omegaconf import DictConfig, OmegaConf

from common.errors import ConfigError
from engine.acceptance import ACCEPTANCE_RULES, acceptance_options_class
from engine.drafters import (
    COMBINED_EXAMPLES,
    DRAFTERS,
    DrafterSpec,
    Needs,
    build_drafter_options,
    drafter_option_keys,
    resolve_drafter,
)
from engine.engine import Engine, EngineConfig
from engine.gamma import GAMMA_POLICIES
from engine.options import option_names
from export import llama_server as llama_exporter
from export.fit import server_fit
from runners.backends import backend_class
from serving.llama_capabilities import lacks_reason

ENGINE_KNOBS = ("gamma", "gamma_policy", "max_gamma", "confidence")
# Drafters whose proposals come from a model; only they (or a combination with one) may use `confidence`.
MODEL_DRAFTERS = frozenset(name for name in DRAFTERS if resolve_drafter(name).needs.distribution)
BASELINE = "none"  # speculation OFF is the study's trial 0, never a candidate


@dataclass(frozen=True)
class Knob:
    """One searchable value: categorical `choices`, a numeric [low, high] range, or a `fixed` value."""

    name: str
    choices: tuple[Any, ...] | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    fixed: Any = None

    def suggest(self, trial: optuna.Trial, param: str) -> Any:
        """Draw this knob's value in `trial` under the parameter name `param`."""
        if self.choices is not None:
            return trial.suggest_categorical(param, list(self.choices))
        if self.low is None:
            return self.fixed
        if isinstance(self.low, int) and isinstance(self.high, int) and not isinstance(self.low, bool):
            return trial.suggest_int(param, self.low, self.high, log=self.log, step=int(self.step or 1))
        return trial.suggest_float(param, float(self.low), float(self.high), log=self.log, step=self.step)


@dataclass
class Space:
    """Checked space: knobs per drafter, lossy rules and their options (used only when allowed)."""

    name: str
    drafters: dict[str, dict[str, Knob]]
    acceptance: dict[str, dict[str, Knob]] = field(default_factory=dict)
    allow_lossy: bool = False
    left_out: dict[str, str] = field(default_factory=dict)  # drafter -> why it is not offered
    # what the offered drafters need together (their union): the heads a study loads and converts once
    needs: Needs = field(default_factory=Needs)

    @property
    def params(self) -> list[str]:
        """Every Optuna parameter name this space can produce."""
        names = ["drafter"] + [f"{d}.{k}" for d, knobs in self.drafters.items() for k in knobs]
        if self.allow_lossy and self.acceptance:
            names += ["acceptance"] + [f"{r}.{k}" for r, knobs in self.acceptance.items() for k in knobs]
        return names


def _knob(name: str, spec: Any, where: str) -> Knob:
    if isinstance(spec, list | tuple):
        if not spec:
            raise ConfigError(f"space {where}.{name}: an empty list of choices")
        return Knob(name, choices=tuple(spec))
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - {"low", "high", "log", "step"})
        if unknown or "low" not in spec or "high" not in spec:
            raise ConfigError(f"space {where}.{name}: a range is {{low, high[, log, step]}}, got keys {sorted(spec)}")
        low, high = spec["low"], spec["high"]
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (low, high)) or low > high:
            raise ConfigError(f"space {where}.{name}: need numbers with low <= high, got low={low!r} high={high!r}")
        return Knob(name, low=low, high=high, log=bool(spec.get("log", False)), step=spec.get("step"))
    return Knob(name, fixed=spec)


def _values(knob: Knob) -> list[Any]:
    """The discrete values a knob may take (ranges report their two bounds)."""
    if knob.choices is not None:
        return list(knob.choices)
    return [knob.fixed] if knob.low is None else [knob.low, knob.high]


def _check_drafter(drafter: DrafterSpec, knobs: dict[str, Knob]) -> None:
    name = drafter.name
    allowed = [*ENGINE_KNOBS, *drafter_option_keys(name)]
    unknown = sorted(set(knobs) - set(allowed))
    if unknown:
        raise ConfigError(f"space drafters.{name}: unknown knob(s) {unknown}; allowed: {allowed}")
    if "gamma_policy" in knobs:
        for policy in _values(knobs["gamma_policy"]):
            if policy not in GAMMA_POLICIES:
                raise ConfigError(f"space drafters.{name}.gamma_policy: {policy!r}; allowed: {list(GAMMA_POLICIES)}")
            if policy == "confidence" and not drafter.needs.distribution:
                raise ConfigError(
                    f"space drafters.{name}.gamma_policy: 'confidence' needs a model drafter "
                    f"({sorted(MODEL_DRAFTERS)}), not {name!r}"
                )


def _missing(
    drafter: DrafterSpec, *, has_draft: bool, has_mtp: bool, has_eagle3: bool, has_server_draft: bool, backend: type
) -> str | None:
    """Why `drafter` cannot run with this model config and backend (None: it can)."""
    needs = drafter.needs
    if needs.server_draft:
        refused = backend.not_runnable(EngineConfig(drafter=drafter.name))  # the built-in engine has no DFlash forward
        if refused:
            return refused
        if not has_server_draft:
            return (
                "no DFlash draft GGUF (server.dflash_gguf is null; spectune trains none: convert one trained elsewhere)"
            )
    if needs.draft_model and not has_draft:
        return "the model config has no draft (model.draft is null)"
    if needs.mtp and not has_mtp:
        if backend.export_target:  # a served target: MTP layers inside its GGUF serve too
            return (
                "no MTP weights: the target GGUF has no MTP layers (nextn_predict_layers), server.mtp_gguf and "
                "model.mtp are null"
            )
        return "the model config has no MTP weights (model.mtp is null; train them: python -m training.mtp)"
    if needs.eagle3 and not has_eagle3:
        return "the model config has no EAGLE-3 head (model.eagle3 is null; train one: python -m training.eagle3)"
    return None


def _runnable_choices(name: str, knobs: dict[str, Knob], backend: type) -> tuple[dict[str, Knob], dict[str, str]]:
    """The knobs without the categorical values `backend` cannot run (e.g. policy=extend on llama-server, whose
    drafter list is first-wins only), and `{drafter.knob=value: why}` for each value dropped, so no trial is
    spent on a configuration refused before it runs."""
    kept, dropped = dict(knobs), {}
    for knob, spec in knobs.items():
        if spec.choices is None:
            continue
        runnable = []
        for value in spec.choices:
            engine = {knob: value} if knob in ENGINE_KNOBS else {"options": {knob: value}}
            try:
                why = backend.not_runnable(EngineConfig(drafter=name, **engine))
            except (ConfigError, TypeError):  # a value the engine itself refuses: load_space's checks name it
                why = None
            if why:
                dropped[f"{name}.{knob}={value}"] = why
            else:
                runnable.append(value)
        kept[knob] = replace(spec, choices=tuple(runnable))
    return kept, dropped


def load_space(
    node: Any,
    *,
    has_draft: bool,
    has_mtp: bool = False,
    has_eagle3: bool = False,
    has_server_draft: bool = False,
    backend: str = "builtin",
    serve: tuple[str, ...] = (),
    server_kinds: frozenset[str] | None = None,
    server_binary: str = "llama-server",
) -> Space:
    """Check a space node (a conf/space file) and build the `Space`; bad names fail listing the allowed ones.

    A drafter that needs a draft model or MTP weights the model config does not have is left out (with
    the reason kept in `left_out`), and so is a llama-server-only drafter (dflash, dspark) on the built-in
    engine or without its draft GGUF (`has_server_draft`: server.dflash_gguf is set); so is, on a backend that
    runs a server's exported flags (`backend="llama-server"`), one that server cannot run, and with `serve`
    (tuner.serve: server names) one that none of those servers can run (export/fit.py). With `server_kinds`
    (the `--spec-type` kinds of the llama-server binary `server_binary` runs, serving.llama_capabilities.probe)
    a drafter none of whose allowed knob values exports a kind that binary has is left out too (`spec_kinds`);
    None checks nothing.
    """
    kind = backend_class(backend)
    data = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    drafters_node = dict(data.get("drafters") or {})
    candidates = [*sorted(set(DRAFTERS) - {BASELINE}), f"A+B of them (e.g. {', '.join(COMBINED_EXAMPLES)})"]
    drafters: dict[str, dict[str, Knob]] = {}
    left_out: dict[str, str] = {}
    needs = Needs()
    for name, knobs_node in drafters_node.items():
        if name == BASELINE:
            raise ConfigError(f"space drafters.{BASELINE}: speculation OFF is always measured (trial 0); remove it")
        try:
            drafter = resolve_drafter(name)
        except ConfigError:
            raise ConfigError(f"space drafters.{name}: unknown drafter; allowed: {candidates}") from None
        knobs = drafter_knobs(name, knobs_node)
        _check_drafter(drafter, knobs)
        why = _missing(
            drafter,
            has_draft=has_draft,
            has_mtp=has_mtp,
            has_eagle3=has_eagle3,
            has_server_draft=has_server_draft,
            backend=kind,
        )
        if why is None and kind.export_target:
            why = _not_served(name, (kind.export_target,))
        if why is None and serve:
            why = _not_served(name, serve)
        if why is None and server_kinds is not None:
            why = _not_in_binary(name, knobs, server_kinds, server_binary)
        if why is None and kind.export_target:
            knobs, dropped = _runnable_choices(name, knobs, kind)
            left_out.update(dropped)
            if any(k.choices == () for k in knobs.values()):
                why = "; ".join(dropped.values())
        if why:
            left_out[name] = why
            continue
        drafters[name] = knobs
        needs = needs | drafter.needs
    if not drafters:
        why = "; ".join(f"{k}: {v}" for k, v in left_out.items()) or "drafters is empty"
        raise ConfigError(f"space {data.get('name', '?')!r} offers no drafter to try ({why}); allowed: {candidates}")
    if kind.lossless_only and data.get("allow_lossy"):
        raise ConfigError(
            f"space.allow_lossy=true with engine.backend={backend}: {backend} verifies losslessly only; "
            "set space.allow_lossy=false"
        )
    if serve and data.get("allow_lossy"):
        raise ConfigError(
            f"space.allow_lossy=true with tuner.serve={list(serve)}: those servers verify losslessly only; "
            "set space.allow_lossy=false or tuner.serve=null"
        )
    acceptance: dict[str, dict[str, Knob]] = {}
    lossy_rules = sorted(set(ACCEPTANCE_RULES) - {"exact"})
    for rule, knobs_node in dict(data.get("acceptance") or {}).items():
        if rule not in lossy_rules:
            raise ConfigError(f"space acceptance.{rule}: unknown lossy rule; allowed: {lossy_rules}")
        knobs = {k: _knob(k, v, f"acceptance.{rule}") for k, v in dict(knobs_node or {}).items()}
        allowed = option_names(acceptance_options_class(rule))
        unknown = sorted(set(knobs) - set(allowed))
        if unknown:
            raise ConfigError(f"space acceptance.{rule}: unknown option(s) {unknown}; allowed: {allowed}")
        acceptance[rule] = knobs
    return Space(
        str(data.get("name", "custom")), drafters, acceptance, bool(data.get("allow_lossy")), left_out, needs=needs
    )


def _not_served(drafter: str, servers: tuple[str, ...]) -> str | None:
    """Why none of `servers` can run `drafter` (its default knobs), else None."""
    reasons = [server_fit(EngineConfig(drafter=drafter), server) for server in servers]
    if any(f.runnable for f in reasons):
        return None
    return "; ".join(f"{f.server} cannot run it ({f.reason})" for f in reasons)


def drafter_knobs(name: str, node: Any) -> dict[str, Knob]:
    """The knobs of drafter `name` from its block of a space file (a combination's child blocks flattened)."""
    return {k: _knob(k, v, f"drafters.{name}") for k, v in _knob_nodes(node).items()}


def spec_kinds(drafter: str, knobs: dict[str, Knob]) -> list[str]:
    """The `--spec-type` values `drafter` exports to llama-server over the allowed values of its knobs.

    Only the drafter's own options listed as choices or fixed values can change the kind (suffix.scope:
    session -> ngram-map-k4v, engine -> ngram-mod); engine knobs and numeric ranges never do, so every
    combination of those listed values is exported, the other options at their defaults. A value the
    engine refuses with the defaults beside it is skipped. A value may be a comma list of kinds.
    """
    listed = {name: _values(knob) for name, knob in knobs.items() if name not in ENGINE_KNOBS and knob.low is None}
    kinds: list[str] = []
    for values in itertools.product(*listed.values()):
        try:
            config = EngineConfig(drafter=drafter, options=dict(zip(listed, values, strict=True)))
            flags, _ = llama_exporter.speculation(config, None)
        except (ConfigError, TypeError, KeyError):  # e.g. a listed min_match above the default max_match
            continue
        kinds += [value for name, value in flags if name == "--spec-type" and value and value not in kinds]
    return kinds


def _not_in_binary(drafter: str, knobs: dict[str, Knob], server_kinds: frozenset[str], binary: str) -> str | None:
    """Why the llama-server `binary` (whose kinds are `server_kinds`) can run none of `drafter`'s kinds, else None."""
    lacking: list[str] = []
    for value in spec_kinds(drafter, knobs):
        missing = [k for k in value.split(",") if k and k not in server_kinds]
        if not missing:
            return None
        lacking += [k for k in missing if k not in lacking]
    if not lacking:  # nothing exported at all (every listed value refused): nothing to hold against the binary
        return None
    order = [k for k in llama_exporter.SPEC_TYPES if k in server_kinds] + sorted(
        server_kinds - set(llama_exporter.SPEC_TYPES)
    )
    return lacks_reason(lacking, binary, order)


def _knob_nodes(node: Any) -> dict[str, Any]:
    """A drafter's knobs with a combination's nested child blocks (`ngram: {min_match: ...}`) flattened
    to `ngram.min_match`; a knob spec is a list, a range dict ({low, high ...}) or a value."""
    out: dict[str, Any] = {}
    for key, spec in dict(node or {}).items():
        if isinstance(spec, dict) and "low" not in spec and "high" not in spec:
            for child_key, child_spec in spec.items():
                out[f"{key}.{child_key}"] = child_spec
        else:
            out[key] = spec
    return out


def _ordered_matches(drafter: str, options: dict[str, Any]) -> None:
    """Keep each (min_match, max_match) pair ordered: ranges are independent in the space file."""
    defaults = build_drafter_options(drafter, {})
    children = getattr(defaults, "children", None) or {drafter: defaults}
    plain = [c for c in children.values() if hasattr(c, "max_match")]
    for prefix, child in [("", plain[0] if len(plain) == 1 else None), *((f"{n}.", c) for n, c in children.items())]:
        low_key, high_key = prefix + "min_match", prefix + "max_match"
        if child is None or not hasattr(child, "max_match") or not ({low_key, high_key} & set(options)):
            continue
        low = options.get(low_key, child.min_match)
        options[high_key] = max(low, options.get(high_key, child.max_match))


def suggest(trial: optuna.Trial, space: Space, base: EngineConfig) -> EngineConfig:
    """The candidate for `trial`: drafter first, then only its knobs; sampling and seed come from `base`."""
    drafter = trial.suggest_categorical("drafter", list(space.drafters))
    knobs = space.drafters[drafter]
    values: dict[str, Any] = {}

    def draw(name: str) -> None:
        if name in knobs:
            values[name] = knobs[name].suggest(trial, f"{drafter}.{name}")

    draw("gamma_policy")
    policy = values.get("gamma_policy", "fixed")
    draw("gamma")
    if policy == "heuristic":
        draw("max_gamma")
    if policy == "confidence":
        draw("confidence")
    options = {}
    for name in knobs:
        if name not in ENGINE_KNOBS:
            options[name] = knobs[name].suggest(trial, f"{drafter}.{name}")
    _ordered_matches(drafter, options)
    gamma = int(values.get("gamma", base.gamma))
    acceptance = "exact"
    if space.allow_lossy and space.acceptance:
        acceptance = trial.suggest_categorical("acceptance", ["exact", *space.acceptance])
        for name, knob in space.acceptance.get(acceptance, {}).items():
            options[name] = knob.suggest(trial, f"{acceptance}.{name}")
    config = replace(
        base,
        drafter=drafter,
        gamma=gamma,
        gamma_policy=policy,
        max_gamma=max(int(values.get("max_gamma", base.max_gamma)), gamma),
        confidence=float(values.get("confidence", base.confidence)),
        acceptance=acceptance,
        options=options,
    )
    Engine.validate(config)  # a space can only produce configurations the engine accepts
    return config
