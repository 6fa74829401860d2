"""One llama-server process on 127.0.0.1: start with a configuration's flags, health check, requests, clean stop.

A server is started per configuration (its speculation flags are fixed at start) on a free loopback
port, in its own process group with a parent-death signal, so neither a finished run nor a killed one
leaves it behind; `stop()` ends it by its own process group (SIGTERM, then SIGKILL). When the binary
refuses a flag or a model, the process exits before it is healthy and the error names the line it
printed. Requests go to `/completion` with token ids (spectune's tokenizer is the reference; the
server's own text tokenisation of a converted model need not match it).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from serving.llama_binary import LlamaBinary

HOST = "127.0.0.1"  # loopback only: nothing else ever reaches the server
_PR_SET_PDEATHSIG = 1


class LlamaServerError(RuntimeError):
    """llama-server did not start, refused its arguments, or failed a request."""


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the spawning process dies (Linux prctl)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: stop() and the context manager still end it
        pass


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _error_line(log: str) -> str:
    """The line of a server log that says why it stopped (the last error-like line, else the last line)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in reversed(lines):
        low = line.lower()
        if "error" in low or "invalid" in low or "unknown" in low or "failed" in low:
            return line
    return lines[-1] if lines else "(no output)"


class LlamaServer:
    """A running llama-server for one model and one set of flags (use as a context manager)."""

    def __init__(
        self,
        binary: LlamaBinary,
        model: str | Path,
        args: Sequence[str] = (),
        *,
        context: int = 4096,
        threads: int | None = None,
        log_path: str | Path | None = None,
        start_timeout: float = 120.0,
        trace: bool = False,
        env: dict[str, str] | None = None,
    ) -> None:
        self.binary, self.model, self.args = binary, Path(model), list(args)
        self.context, self.threads, self.start_timeout = context, threads, start_timeout
        self.trace = trace  # LLAMA_TRACE=1: one `accepted A/N draft tokens` log line per verification step
        self.log_path = Path(log_path) if log_path else None
        self.env = dict(env or {})  # set for the server process on top of this one's environment
        self.port: int | None = None
        self.process: subprocess.Popen | None = None
        self._log_file: Any = None

    @property
    def url(self) -> str:
        """Base URL of the running server."""
        return f"http://{HOST}:{self.port}"

    def command(self, port: int) -> list[str]:
        """The argv the server starts with."""
        argv = [str(self.binary.path), "-m", str(self.model), "--host", HOST, "--port", str(port)]
        argv += ["-c", str(self.context), "--metrics", "--no-webui"]
        if self.threads:
            argv += ["-t", str(self.threads)]
        return argv + self.args

    def start(self) -> LlamaServer:
        """Start and wait until /health answers; LlamaServerError (with the server's own line) otherwise."""
        if not self.model.is_file():
            raise LlamaServerError(f"model file {self.model} not found")
        self.port = free_port()
        if self.log_path is None:
            self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"llama-server-{self.port}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "w")  # closed in stop()
        self.process = subprocess.Popen(
            self.command(self.port),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() ends it and anything it started
            preexec_fn=_die_with_parent,
            env=self._environment(),
        )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = self.log_text()
                self.stop()
                raise LlamaServerError(
                    f"llama-server exited with status {self.process.returncode} before serving: {_error_line(log)}"
                    f" (argv: {' '.join(self.command(self.port))}; log {self.log_path})"
                )
            if self._healthy():
                return self
            time.sleep(0.1)
        self.stop()
        raise LlamaServerError(f"llama-server not healthy after {self.start_timeout:.0f} s (log {self.log_path})")

    def _environment(self) -> dict[str, str] | None:
        """The server's environment: this process's, with LLAMA_TRACE when tracing and `env` on top."""
        extra = {**({"LLAMA_TRACE": "1"} if self.trace else {}), **self.env}
        return {**os.environ, **extra} if extra else None

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as reply:
                return reply.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def log_text(self, since: int = 0) -> str:
        """What the server printed so far (from byte offset `since`)."""
        if not (self.log_path and self.log_path.is_file()):
            return ""
        with open(self.log_path, "rb") as log:
            log.seek(since)
            return log.read().decode(errors="replace")

    def log_size(self) -> int:
        """Bytes the server has printed so far (an offset for `log_text`)."""
        return self.log_path.stat().st_size if self.log_path and self.log_path.is_file() else 0

    def peak_memory_bytes(self) -> int:
        """The server process's peak resident memory (Linux VmHWM), 0 where it cannot be read."""
        if self.process is None:
            return 0
        try:
            status = Path(f"/proc/{self.process.pid}/status").read_text()
        except OSError:
            return 0
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0

    def post(self, path: str, body: dict[str, Any], timeout: float = 600.0) -> dict[str, Any]:
        """POST JSON to the server; the parsed JSON reply (LlamaServerError with the server's message)."""
        request = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as reply:
                return json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            raise LlamaServerError(f"{path}: HTTP {exc.code}: {exc.read().decode(errors='replace')[:500]}") from None

    def metrics(self) -> dict[str, float]:
        """The Prometheus /metrics counters (`--metrics`) as name -> value."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as reply:
            text = reply.read().decode()
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                try:
                    values[name] = float(value)
                except ValueError:
                    continue
        return values

    def stop(self) -> None:
        """End the server's process group (SIGTERM, SIGKILL after 10 s); safe to call twice."""
        process = self.process
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            except ProcessLookupError:
                pass
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
