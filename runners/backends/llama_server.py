"""`engine.backend=llama-server`: a real llama-server started with the configuration's exported flags.

It starts the pinned llama-server (serving/) on the GGUF copies of the same weights, with exactly the flags
the llama-server exporter writes for that configuration (export/llama_server.py), so what is measured is
what gets exported; OFF is the same server with `--spec-type none`. A configuration llama-server cannot run
as given (layer_skip, a lossy rule, a combination it would run only half of) is unsupported, with the
exporter's reason; so is one whose `--spec-type` kind the binary in use lacks (a user's own build:
serving/llama_capabilities.py). A server starts on first use and stops in `close()`.
"""

from __future__ import annotations

import os
import queue
import threading
from pathlib import Path
from typing import Any, ClassVar

from agents.model import AgentModel
from agents.server_model import ServerModel
from common.errors import ConfigError, UnsupportedConfig
from engine.drafters import Needs, resolve_drafter
from engine.engine import EngineConfig
from export import llama_server as exporter
from runners.backends.llama_server_setup import ServerSettings, server_settings
from serving import llama_capabilities
from serving.llama_binary import LlamaBinary
from serving.llama_server import LlamaServer

# llama-server kinds whose drafter keeps state across requests (ngram-mod's shared hash pool, the per-slot
# counts and maps of ngram-cache and ngram-map-k/-k4v): a repeat starts from a fresh server, as the built-in
# engine's repeats start from empty drafter state.
_CROSS_REQUEST_STATE = ("ngram-mod", "ngram-cache", "ngram-map-k", "ngram-map-k4v")


# What a drafter's Needs ask of the server's files: (Needs flag, ServerSettings field, what is missing).
_NEEDED_FILES = (
    ("draft_model", "draft_gguf", "a draft model (model.draft) on the llama-server backend too"),
    ("mtp", "mtp_gguf", "MTP weights (model.mtp) on the llama-server backend too"),
    ("eagle3", "eagle3_gguf", "an EAGLE-3 head (model.eagle3) on the llama-server backend too"),
    ("server_draft", "dflash_gguf", "a DFlash draft GGUF: server.dflash_gguf=PATH (spectune trains none)"),
)


class ServerBackend:
    """A llama-server started with the configuration's exported flags."""

    name: ClassVar[str] = exporter.BACKEND  # one spelling, shared with the exporter that writes its flags
    lossless_only: ClassVar[bool] = True  # llama-server has no lossy acceptance rule
    measures_memory: ClassVar[bool] = True  # the server process's peak resident set, on any device
    peak_memory_label: ClassVar[str | None] = "peak memory (llama-server's resident set)"
    export_target: ClassVar[str | None] = exporter.TARGET
    fingerprinted: ClassVar[bool] = True
    # the server decodes: this process's CPU clock only sees it waiting, and it loads no weights (runners.models)
    decodes_in_process: ClassVar[bool] = False
    starts_per_trial: ClassVar[int] = 1  # ON's server; OFF's is kept for the study (runners/backends/kept.py)

    def __init__(
        self, config: EngineConfig, settings: ServerSettings, stop_tokens: frozenset[int], concurrency: int = 1
    ) -> None:
        reason = self.not_runnable(config)
        if reason:
            raise UnsupportedConfig(f"llama-server cannot run this configuration: {reason}")
        # resolved once: a combination needs what its model child needs
        self.needs = needs = resolve_drafter(config.drafter).needs
        for need, file, what in _NEEDED_FILES:
            if getattr(needs, need) and getattr(settings, file) is None:
                raise UnsupportedConfig(f"drafter {config.drafter!r} needs {what}")
        flags, _ = exporter.speculation(
            config,
            str(settings.draft_gguf) if settings.draft_gguf else None,
            str(settings.eagle3_gguf) if settings.eagle3_gguf else None,
            str(settings.dflash_gguf) if settings.dflash_gguf else None,
        )
        lacking = self.lacks(config, flags, settings.binary)
        if lacking:
            raise UnsupportedConfig(f"llama-server cannot run this configuration: {lacking}")
        self.config = config
        self.settings = settings
        self.stop_tokens = stop_tokens
        self.lossy = False  # llama-server verifies losslessly; lossy rules are refused above
        self.concurrency = concurrency
        kv_flags, _ = exporter.cache_flags(settings.cache_type_k, settings.cache_type_v)
        self.args = [*exporter.argv(flags), *exporter.argv(kv_flags), *exporter.slot_args(concurrency)]
        self.server: LlamaServer | None = None
        self._starts = 0
        # One slot per agent in flight: a task keeps its slot (and the slot's KV its prefix) until it ends.
        self._slots: queue.SimpleQueue[int] = queue.SimpleQueue()
        for slot in range(concurrency):
            self._slots.put(slot)
        self._start_lock = threading.Lock()  # agents' threads may ask for the server at the same moment

    @classmethod
    def settings_from(cls, cfg: Any, models: Any, log_dir: Path, needs: Needs) -> ServerSettings:
        """The binary found and the weights `needs` asks for as GGUF, from cfg.server (llama_server_setup.py)."""
        return server_settings(cfg, models, log_dir, needs)

    @classmethod
    def not_runnable(cls, config: EngineConfig) -> str | None:
        """The exporter's reason llama-server cannot run `config` (a drafter or rule it lacks), else None."""
        return exporter.not_runnable(config)

    @staticmethod
    def lacks(config: EngineConfig, flags: list[exporter.Flag], binary: LlamaBinary) -> str | None:
        """Why `binary` cannot run these exported flags (a --spec-type kind its build lacks), else None.

        A user's own build (server.binary) may lack kinds the pinned one has; it would refuse them at start,
        so the candidate is unsupported with the reason instead (probe: `--help`, cached per build).
        """
        try:
            caps = llama_capabilities.probe(binary)
        except ConfigError as exc:  # a build without --spec-type runs no exported configuration, not even OFF
            return str(exc)
        missing = llama_capabilities.missing_kinds(flags, caps)
        if not missing:
            return None
        return f"drafter={config.drafter}: {llama_capabilities.lacks_reason(missing, caps.binary, caps.spec_types)}"

    @classmethod
    def create(
        cls, config: EngineConfig, models: Any, settings: ServerSettings | None, concurrency: int = 1
    ) -> ServerBackend:
        """A backend whose server starts on first use; UnsupportedConfig for a config it cannot run (ValueError: no
        settings, a caller's bug)."""
        if settings is None:
            raise ValueError(f"engine.backend={cls.name} needs the server settings (llama_server_setup.py)")
        return cls(config, settings, frozenset(models.target.eos_token_ids), concurrency)

    @classmethod
    def announce(cls, described: dict[str, Any]) -> str | None:
        """The binary and the flags the side's server runs with."""
        return f"on {cls.name} {described['binary']}: {' '.join(described['args'])}"

    @property
    def model_file(self) -> Path:
        """The GGUF the server loads: the target's, or for mtp (alone or combined) the mimo2 one holding the module."""
        if self.needs.mtp:
            return self.settings.mtp_gguf  # type: ignore[return-value]  # checked in __init__
        return self.settings.target_gguf

    @property
    def spec_type(self) -> str:
        """The --spec-type the server runs."""
        return self.args[self.args.index("--spec-type") + 1]

    def _server(self) -> LlamaServer:
        with self._start_lock:
            return self._start()

    def _start(self) -> LlamaServer:
        if self.server is None:
            self._starts += 1
            log_dir = self.settings.log_dir or Path(os.environ.get("TMPDIR", "/tmp"))
            log = log_dir / f"llama-server-{self.config.drafter}-{os.getpid()}-{id(self):x}-{self._starts}.log"
            self.server = LlamaServer(
                self.settings.binary,
                self.model_file,
                self.args,
                context=exporter.pool_context(self.settings.context, self.concurrency),
                threads=self.settings.threads,
                log_path=log,
                start_timeout=self.settings.start_timeout_s,
                trace=True,
            ).start()
        return self.server

    def agent_model(self, tokenizer: Any, name: str, seed: int) -> AgentModel:
        """A ServerModel on this backend's server (started now if it is not running), on a free slot."""
        c = self.config
        slot = self._slots.get()  # never waits in a wave: N agents, N slots
        return ServerModel(
            self._server(),
            tokenizer,
            name,
            drafter=c.drafter,
            context_limit=self.settings.context,
            stop_tokens=self.stop_tokens,
            temperature=c.temperature,
            top_k=c.top_k,
            top_p=c.top_p,
            seed=seed,
            slot=slot,
            shared=self.concurrency > 1,
            release=lambda: self._slots.put(slot),
        )

    def warm_up(self, prompt: list[int]) -> None:
        """Start the server and generate 16 tokens; a drafter with cross-request state gets a fresh server."""
        model = self.agent_model(None, "warm-up", 0)
        model.server.post("/completion", {**model.body(prompt, 16), "return_tokens": False})
        model.end()  # gives its slot back
        self.reset()

    def reset(self) -> None:
        """Restart the server when its drafter keeps state across requests (ngram-mod); else nothing to forget."""
        if self.server is not None and set(self.spec_type.split(",")) & set(_CROSS_REQUEST_STATE):
            self.close()

    def close(self) -> None:
        """Stop the server (a later use starts a fresh one)."""
        if self.server is not None:
            self.server.stop()
            self.server = None

    def describe(self) -> dict[str, Any]:
        """The binary, the GGUF files and the flags this side's server runs with."""
        s, needs = self.settings, self.needs
        return {
            "backend": self.name,
            "binary": s.binary.describe(),
            "target_gguf": str(self.model_file),
            "draft_gguf": str(s.draft_gguf) if s.draft_gguf else None,
            "eagle3_gguf": str(s.eagle3_gguf) if s.eagle3_gguf and needs.eagle3 else None,
            "dflash_gguf": str(s.dflash_gguf) if s.dflash_gguf and needs.server_draft else None,
            "context": s.context,
            "concurrency": self.concurrency,
            "threads": s.threads,
            "args": list(self.args),
        }
