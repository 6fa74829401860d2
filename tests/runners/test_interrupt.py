"""GracefulStop's loading block: a signal while models load stops the command before anything is written."""

from __future__ import annotations

import os
import signal

import pytest

from runners.interrupt import GracefulStop, Interrupted


def test_a_quiet_load_passes_through():
    with GracefulStop() as stop, stop.loading():
        loaded = "models"
    assert loaded == "models" and not stop.requested


def test_a_first_signal_while_loading_stops_after_the_load():
    steps = []
    with pytest.raises(Interrupted, match=r"^SIGTERM: stopped while loading; nothing was written$") as caught:
        with GracefulStop() as stop, stop.loading():
            os.kill(os.getpid(), signal.SIGTERM)  # noted by the handler: the load itself goes on
            steps.append("loaded")
    assert steps == ["loaded"] and caught.value.exit_code == 143


def test_a_keyboard_interrupt_while_loading_is_interrupted_with_the_exit_code_of_ctrl_c():
    with pytest.raises(Interrupted, match=r"^SIGINT: stopped while loading") as caught:
        with GracefulStop() as stop, stop.loading():
            raise KeyboardInterrupt
    assert caught.value.exit_code == 130
