"""SIGTERM and SIGHUP handled like SIGINT, and the sections an interrupt must not cut in half.

A long-running command (apply, verify, bench, a fleet run) is stopped by Ctrl-C (SIGINT), by the
scheduler (`scancel`, a job's time limit and systemd send SIGTERM, then SIGKILL after a grace
period: Slurm's KillWait, 30 s by default) or by a closed terminal or SSH session (SIGHUP). Each
must leave the machine as the journal says. Python turns only SIGINT into an exception
(KeyboardInterrupt); the default action of SIGTERM and SIGHUP ends the process on the spot, with
no `finally` run: values switched for an A trial stay switched, the job keeps running.

So while `handled()` is active all three raise `Interrupted` (a KeyboardInterrupt, so every
cleanup written for Ctrl-C runs for the others too), and the command exits 128 + the signal's
number (130, 143, 129: the shells' convention for "killed by signal N").

Two rules keep the clean-up whole:
- the first signal interrupts; later ones are noted and ignored, so a second Ctrl-C or the
  scheduler's repeated SIGTERM cannot cut the clean-up short (SIGKILL still ends everything);
- inside `critical()` (a switch of runtime values, a revert, a journal write) the interrupt waits
  until the section ends: a half-written set of values is never left behind.

An event loop (the TUI) takes the signal as an event instead (`delivered_to`): raised at an
arbitrary point of the loop, the exception would land inside the framework's own code (a widget
being drawn), which reports it as a crash with its traceback rather than ending the command.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP arrived; `signum` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


class _State:
    def __init__(self) -> None:
        self.received: int | None = None  # the first signal
        self.raised = False  # Interrupted was raised for it (clean-up is running)
        self.depth = 0  # critical sections entered, not left
        # Takes the signal instead of an exception (delivered_to); False: it could not, so raise.
        self.deliver: Callable[[int], bool] | None = None


_state = _State()


def exit_code(e: BaseException) -> int:
    """128 + the signal's number: 130 SIGINT (also a bare KeyboardInterrupt), 143 SIGTERM, 129 SIGHUP."""
    return 128 + (e.signum if isinstance(e, Interrupted) else int(signal.SIGINT))


def message(e: KeyboardInterrupt) -> str:
    """The one line an interrupted command ends with: "interrupted by SIGTERM" ("interrupted" for a
    KeyboardInterrupt raised without a signal)."""
    return f"interrupted by {e.name}" if isinstance(e, Interrupted) else "interrupted"


def received() -> int | None:
    """The signal that interrupted this process, if one did."""
    return _state.received


def _raise_pending() -> None:
    if _state.received is not None and not _state.raised and _state.depth == 0:
        _state.raised = True
        raise Interrupted(_state.received)


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    if _state.received is None:
        _state.received = signum
    if _state.deliver is not None and _state.deliver(signum):
        return
    _raise_pending()


@contextlib.contextmanager
def delivered_to(deliver: Callable[[int], bool]) -> Iterator[None]:
    """While active, a signal goes to `deliver(signum)` instead of raising, unless it returns False
    (e.g. no event loop runs yet). It runs inside the signal handler, so it must only schedule work
    (asyncio's call_soon_threadsafe). `received()` tells afterwards which signal came."""
    previous, _state.deliver = _state.deliver, deliver
    try:
        yield
    finally:
        _state.deliver = previous


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise Interrupted while active (main thread only: elsewhere,
    and for a signal ignored when nodeagent started, e.g. under nohup, nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _reset()
    previous: dict[signal.Signals, Any] = {}
    for sig in HANDLED:
        if signal.getsignal(sig) is signal.SIG_IGN:
            continue  # nohup's SIGHUP, a background job's SIGINT: the caller chose to ignore it
        previous[sig] = signal.signal(sig, _on_signal)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def critical() -> Iterator[None]:
    """A section an interrupt must not cut: a signal arriving inside raises when it ends."""
    _state.depth += 1
    try:
        yield
    finally:
        _state.depth -= 1
    _raise_pending()


def _reset() -> None:
    """Each command starts with no signal received (a process may run more than one: tests)."""
    _state.received, _state.raised, _state.depth, _state.deliver = None, False, 0, None
