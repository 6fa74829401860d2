"""A llama-server study's own choices besides the drafter: which GGUF file and which KV cache type.

`tuner.targets=[Q4_K_M.gguf]` and `tuner.cache_types=[q8_0]` let a trial pick the target file (model.target,
the reference, or one of the others) and the KV type (server.cache_type_k/v, the reference, or one of the
others, for K and V alike), as the Optuna parameters `server.target` and `server.cache_type`. A trial on the
reference file and KV type is measured as any other (replayed where exact). A trial that changes either runs
other numbers than the recording: it is measured live, ON on its own file and KV type against OFF on the
reference's, so its regressions and divergences are counted against what the reference does, and "Q4_K_M with
draft-mtp" against "Q8_0 without" is answered in seconds per solved task. Its memory figures are its own file's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import optuna

from common.errors import ConfigError
from engine.drafters import resolve_drafter
from engine.engine import EngineConfig
from runners.backends import ServerSettings
from serving.gguf_checks import check_same_vocabulary
from serving.gguf_file import read_gguf
from serving.gguf_memory import KV_TYPES

PARAM_TARGET = "server.target"
PARAM_CACHE = "server.cache_type"
ATTR = "server_choice"


@dataclass(frozen=True)
class ServerChoice:
    """The file and KV type one trial runs ON with."""

    target: str  # the GGUF file
    cache_type: str  # -ctk and -ctv


@dataclass(frozen=True)
class Choices:
    """What a study may choose from: the reference first, then the others (tuner.targets, tuner.cache_types)."""

    targets: tuple[str, ...]
    cache_types: tuple[str, ...]

    @property
    def any(self) -> bool:
        """Whether there is anything to choose."""
        return len(self.targets) > 1 or len(self.cache_types) > 1

    @property
    def reference(self) -> ServerChoice:
        """The file and KV type the recording and every OFF run on."""
        return ServerChoice(self.targets[0], self.cache_types[0])


def study_choices(targets: list[str], cache_types: list[str], server: ServerSettings | None) -> Choices:
    """The study's choices, checked before anything runs: one line naming a file of another vocabulary, a KV type
    llama-server lacks, or choices on a backend without a server."""
    if not (targets or cache_types):
        reference = (str(server.target_gguf), server.cache_type_k) if server else ("", "f16")
        return Choices((reference[0],), (reference[1],))
    if server is None:
        raise ConfigError(
            "tuner.targets / tuner.cache_types choose llama-server files: add engine.backend=llama-server"
        )
    if server.cache_type_k != server.cache_type_v:
        raise ConfigError("tuner.cache_types sets K and V alike: give server.cache_type_k = server.cache_type_v")
    reference = read_gguf(server.target_gguf)
    files = [str(server.target_gguf)]
    for name in targets:
        path = Path(name).expanduser().resolve()
        check_same_vocabulary(reference, read_gguf(path), "tuner.targets")  # GgufError names a missing file
        if str(path) not in files:
            files.append(str(path))
    kinds = [server.cache_type_k]
    for kind in cache_types:
        if kind not in KV_TYPES:
            raise ConfigError(f"tuner.cache_types: {kind!r} is not allowed; choose from: {', '.join(KV_TYPES)}")
        if kind not in kinds:
            kinds.append(kind)
    return Choices(tuple(files), tuple(kinds))


def suggest(trial: optuna.Trial, choices: Choices) -> ServerChoice | None:
    """Draw the trial's file and KV type (recorded in its user attributes); None when the study has no choices."""
    if not choices.any:
        return None
    choice = ServerChoice(
        trial.suggest_categorical(PARAM_TARGET, list(choices.targets)),
        trial.suggest_categorical(PARAM_CACHE, list(choices.cache_types)),
    )
    trial.set_user_attr(ATTR, asdict(choice))
    return choice


def of_trial(attrs: dict[str, Any]) -> ServerChoice | None:
    """The choice a trial recorded, if any."""
    found = attrs.get(ATTR)
    return ServerChoice(**found) if found else None


def settings_for(server: ServerSettings, choice: ServerChoice, config: EngineConfig) -> ServerSettings:
    """ON's server settings for `choice`: its file (serving draft-mtp from its own MTP layers) and KV type."""
    path = Path(choice.target)
    native = resolve_drafter(config.drafter).needs.mtp and read_gguf(path).nextn_layers > 0
    return replace(
        server,
        target_gguf=path,
        mtp_gguf=path if native else None,
        cache_type_k=choice.cache_type,
        cache_type_v=choice.cache_type,
    )


def changes_numbers(choice: ServerChoice | None, choices: Choices) -> bool:
    """Whether ON runs other weights or KV types than the recording (then it is measured live)."""
    return choice is not None and choice != choices.reference


def memory_for(facts: Any, choice: ServerChoice | None) -> Any:
    """The memory model's facts with the trial's file and KV type."""
    if choice is None:
        return facts
    return replace(
        facts, target=read_gguf(choice.target), cache_type_k=choice.cache_type, cache_type_v=choice.cache_type
    )
