"""The tokenizer of a GGUF file, as llama.cpp itself runs it: a small llama-server that only tokenizes.

A llama.cpp user has a GGUF and nothing else. Its vocabulary, special tokens and chat template live in the
file's metadata, and the one tokenizer that is right for it by definition is llama.cpp's own: the server the
user deploys tokenizes with it. Two alternatives were measured and fail: transformers' GGUF tokenizer
(`AutoTokenizer.from_pretrained(dir, gguf_file=...)`) knows a fixed list of architectures (it refuses the
bundled `mimo2` file) and on the bundled `llama` file splits text differently from llama.cpp (it drops the
file's pre-tokenizer); rebuilding each llama.cpp pre-tokenizer by hand would be a second tokenizer to keep
in step with the pinned release. So `ServerTokenizer` asks a llama-server started on the same file
(`/tokenize`, `/detokenize`), with no GPU layers, no warm-up and a 256-token context: the weights are
mapped, not read, so it costs little memory and nothing of the GPU.

The chat template is rendered in this process from the file's `tokenizer.chat_template` with transformers'
Jinja renderer (the one HF tokenizers use), because the server's `/apply-template` treats a final assistant
message as a prefill (it leaves it open), and the agent's renderer needs an assistant message closed to
learn the end-of-turn ids. For conversations the server would template itself (ending in a user message)
both give the same text: tests/serving/test_server_tokenizer.py checks that token for token.

The surface is the part of a Hugging Face tokenizer spectune's agent uses: `encode`, `decode`,
`apply_chat_template`, `chat_template`, `eos_token_id`, `all_special_ids`, `get_vocab`.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from common.errors import ConfigError
from serving.gguf_file import GgufInfo, read_gguf, token_strings
from serving.llama_binary import LlamaBinary
from serving.llama_server import LlamaServer

# The vocabulary server's flags: all on the CPU, nothing computed before it is asked, weights left as mapped
# (no CPU repack: a copy of every quantized tensor), one small slot.
VOCAB_ARGS = ("-ngl", "0", "--no-warmup", "--no-repack", "-np", "1", "--spec-type", "none")
VOCAB_CONTEXT = 256


class ServerTokenizer:
    """A GGUF's tokenizer, answered by a llama-server on that file (started on first use, stopped in close())."""

    def __init__(self, gguf: str | Path, binary: LlamaBinary, *, log_dir: Path | None = None) -> None:
        self.info: GgufInfo = read_gguf(gguf)
        self.path = self.info.path
        self.binary = binary
        self.log_dir = log_dir
        self.chat_template: str | None = self.info.chat_template
        self.eos_token_id: int | None = min(self.info.end_ids) if self.info.end_ids else None
        self.bos_token_id: int | None = self.info.bos_id
        self.all_special_ids: list[int] = sorted(self.info.special_ids)
        self._server: LlamaServer | None = None
        self._lock = threading.Lock()  # agents on several threads share one vocabulary server
        self._encode = lru_cache(maxsize=4096)(self._encode_uncached)  # templates encode the same pieces often
        atexit.register(self.close)

    def __len__(self) -> int:
        return self.info.vocab_size

    def _running(self) -> LlamaServer:
        with self._lock:
            if self._server is None:
                log_dir = self.log_dir or Path(os.environ.get("TMPDIR", "/tmp"))
                server = LlamaServer(
                    self.binary,
                    self.path,
                    VOCAB_ARGS,
                    context=VOCAB_CONTEXT,
                    threads=1,
                    log_path=log_dir / f"llama-vocab-{os.getpid()}-{id(self):x}.log",
                    env={"CUDA_VISIBLE_DEVICES": ""},  # never holds GPU memory beside the measured server
                )
                self._server = server.start()
            return self._server

    def _encode_uncached(self, text: str, add_special: bool) -> tuple[int, ...]:
        reply = self._running().post("/tokenize", {"content": text, "add_special": add_special, "parse_special": True})
        return tuple(int(t) for t in reply["tokens"])

    def encode(self, text: str, add_special_tokens: bool = True, **_: Any) -> list[int]:
        """llama.cpp's token ids of `text` (special-token text becomes its id; BOS only where the file adds one)."""
        return list(self._encode(text, bool(add_special_tokens)))

    def decode(
        self, ids: Sequence[int], skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool = False
    ) -> str:
        """The text of `ids` (llama.cpp's detokenizer); `skip_special_tokens` leaves the file's control tokens out."""
        del clean_up_tokenization_spaces  # llama.cpp's text is taken as it is
        ids = [int(t) for t in ids]
        if skip_special_tokens:
            ids = [t for t in ids if t not in self.info.special_ids]
        if not ids:
            return ""
        return str(self._running().post("/detokenize", {"tokens": ids})["content"])

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        chat_template: str | None = None,
        tokenize: bool = True,
        add_generation_prompt: bool = False,
        **_: Any,
    ) -> str | list[int]:
        """`messages` through the file's chat template (or `chat_template`); ids when `tokenize`."""
        from transformers.utils.chat_template_utils import render_jinja_template

        template = chat_template or self.chat_template
        if not template:
            raise ConfigError(f"{self.path}: the GGUF has no tokenizer.chat_template and none was given")
        rendered, _ = render_jinja_template(
            [messages], chat_template=template, add_generation_prompt=add_generation_prompt, **self._special_text()
        )
        text = rendered[0]
        return self.encode(text, add_special_tokens=False) if tokenize else text

    def _special_text(self) -> dict[str, str]:
        """bos_token / eos_token as text, for templates that write them."""
        tokens = self._tokens()
        out = {}
        for name, token in (("bos_token", self.bos_token_id), ("eos_token", self.eos_token_id)):
            if token is not None and 0 <= token < len(tokens):
                out[name] = tokens[token]
        return out

    def _tokens(self) -> list[str]:
        if not hasattr(self, "_token_list"):
            self._token_list = token_strings(self.path)
        return self._token_list

    def get_vocab(self) -> dict[str, int]:
        """Token string -> id, as the GGUF lists them (byte-level strings for BPE files)."""
        return {token: i for i, token in enumerate(self._tokens())}

    def convert_ids_to_tokens(self, ids: int | Sequence[int]) -> str | list[str]:
        """The GGUF's token strings of `ids`."""
        tokens = self._tokens()
        return tokens[ids] if isinstance(ids, int) else [tokens[i] for i in ids]

    @property
    def eos_token(self) -> str | None:
        """The end-of-sequence token's string."""
        return self._special_text().get("eos_token")

    def close(self) -> None:
        """Stop the vocabulary server (a later call starts a fresh one)."""
        with self._lock:
            if self._server is not None:
                self._server.stop()
                self._server = None

    def __repr__(self) -> str:
        return f"ServerTokenizer({self.path.name}, vocabulary {self.info.vocab_size})"
