"""`dflash`, `dspark`: llama-server's DFlash and DSpark drafters, which spectune's engine cannot run.

A DFlash draft (z-lab's block-diffusion drafter: a few Qwen3-style layers over the target's hidden states
that fill a block of masked positions in one forward) and its DSpark variant (plus a Markov head) are run by
llama.cpp (`--spec-type draft-dflash` / `draft-dspark --model-draft DRAFT.gguf`), not by spectune, which has
neither their forward nor a trainer for them. They are drafters here so that a llama-server study can search
and export them with a draft GGUF the user brings (`server.dflash_gguf`); the built-in engine refuses them
with the reason, and the built-in spaces leave them out.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import UnsupportedConfig
from engine.drafters.base import DrafterBase, DrafterResources, Needs

BACKEND = "llama-server"  # the only backend that runs them (runners/backends/llama_server.py)


@dataclass
class ServerDraftOptions:
    """Options of a server-only drafter: none (the draft length is gamma, the confidence policy p-min)."""


class ServerOnlyDrafter(DrafterBase):
    """A drafter only llama-server runs: building one in spectune's engine fails with the reason."""

    # a model with a distribution (llama.cpp stops its drafts on --spec-draft-p-min), given to the server alone
    NEEDS = Needs(distribution=True, server_draft=True)
    kind = "?"  # the llama-server --spec-type it is

    def __init__(self, options: ServerDraftOptions | None, resources: DrafterResources) -> None:
        raise UnsupportedConfig(refusal(self.name, self.kind))


def refusal(name: str, kind: str) -> str:
    """Why spectune's engine does not run drafter `name`, in one line."""
    return (
        f"drafter {name!r} runs on engine.backend={BACKEND} only (--spec-type {kind} with "
        "server.dflash_gguf=DRAFT.gguf): spectune's engine has no DFlash forward"
    )


class DFlashDrafter(ServerOnlyDrafter):
    """llama.cpp's draft-dflash."""

    name = "dflash"
    kind = "draft-dflash"


class DSparkDrafter(ServerOnlyDrafter):
    """llama.cpp's draft-dspark (a DFlash draft with a Markov head; a plain DFlash GGUF runs without it)."""

    name = "dspark"
    kind = "draft-dspark"
