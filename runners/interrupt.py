"""Ctrl-C and SIGTERM for the runners: the first signal stops after the task in flight, a second one at once.

`GracefulStop` replaces the SIGINT and SIGTERM handlers while a command runs (and puts the previous
ones back when it ends). The first signal only sets `requested`: `until_stopped` then ends the task
loop after the task in flight and the command writes a partial summary of the finished task runs. A
second signal raises KeyboardInterrupt where the program is, so the task in flight is abandoned (its
sandbox closed on the way out) and the partial summary is written of the task runs finished before
it. While the outputs are written (`holding`), signals are noted but interrupt nothing, unless two
more arrive. The exit status is 128 + the first signal's number (130 for Ctrl-C, 143 for SIGTERM).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class GracefulStop:
    """Context manager: SIGINT/SIGTERM handlers that ask for a stop first, then interrupt."""

    def __init__(self, console: Any | None = None) -> None:
        self.console = console  # a rich Console (or None: plain stderr)
        self.signum: int | None = None  # the first signal received
        self.count = 0  # signals received
        self.holding = False  # outputs are being written: do not interrupt that
        self._held = 0  # signals received while holding
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        """A stop was asked for (at least one signal arrived)."""
        return self.count > 0

    @property
    def signal_name(self) -> str:
        """SIGINT or SIGTERM: the first signal (SIGINT when none came: a KeyboardInterrupt from elsewhere)."""
        return signal.Signals(self.signum or signal.SIGINT).name

    @property
    def exit_code(self) -> int:
        """128 + the signal number, what a shell reports for a process the signal ended (130, 143)."""
        return 128 + int(self.signum or signal.SIGINT)

    def __enter__(self) -> GracefulStop:
        if threading.current_thread() is threading.main_thread():  # handlers can only be set there
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._previous.clear()

    @contextmanager
    def loading(self) -> Iterator[None]:
        """The loading before any task runs: a signal during it (a second one, or a first one noted) raises
        Interrupted, since nothing has been written yet."""
        try:
            yield
        except KeyboardInterrupt:
            raise Interrupted(self, "while loading") from None
        if self.requested:
            raise Interrupted(self, "while loading")

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Signals only noted inside (writing the results), unless two more arrive."""
        self.holding, self._held = True, 0
        try:
            yield
        finally:
            self.holding = False

    def _say(self, text: str) -> None:
        if self.console is not None:
            self.console.print(f"[yellow]{text}[/]")
        else:
            print(text, file=sys.stderr)

    def _handle(self, signum: int, frame: object) -> None:
        self.count += 1
        if self.signum is None:
            self.signum = signum
        name = signal.Signals(signum).name
        if self.holding:
            self._held += 1
            if self._held < 3:
                self._say(f"{name}: writing the results of the finished task runs first")
                return
            raise KeyboardInterrupt
        if self.count == 1:
            self._say(f"{name}: stopping after the task in flight, then writing a partial summary (again: stop now)")
            return
        self._say(f"{name}: stopping now; writing a partial summary of the finished task runs")
        raise KeyboardInterrupt


def until_stopped(items: Iterable[T], stop: GracefulStop) -> Iterator[T]:
    """Items of `items` until it ends or a stop is requested (checked before each next one); closes it either way."""
    iterator = iter(items)
    try:
        while not stop.requested:
            try:
                item = next(iterator)
            except StopIteration:
                return
            yield item
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()  # a generator stops where it is: no further task starts


class Interrupted(Exception):
    """Stopped before any task run started: nothing was written."""

    def __init__(self, stop: GracefulStop, where: str) -> None:
        super().__init__(f"{stop.signal_name}: stopped {where}; nothing was written")
        self.exit_code = stop.exit_code
