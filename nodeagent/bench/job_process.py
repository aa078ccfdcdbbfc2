"""One trial of a user's job as a process nodeagent owns: its own session, a time limit, the last
lines of its output, and nothing of it left running when the trial ends.

- **Its own session** (setsid: a process group and session of its own). Everything the job starts
  that stays in that session (`cmd &`, nohup, a data loader's workers) is part of the trial: when
  the job's first process exits, what is left is stopped (SIGTERM, SIGKILL after STOP_GRACE_S)
  and named, so the next trial does not run beside the last one's leftovers. A process that starts
  a session of its own (setsid, a daemon) leaves the trial's; run such a job in a cgroup of its own
  (`systemd-run --scope`) to contain it.
- **A time limit**: past it the whole session is stopped and the trial is a failure.
- **Interrupted** (Ctrl-C, SIGTERM, SIGHUP: nodeagent.core.interrupt) the session is stopped the
  same way before the interrupt goes on.
- **Output**: only the last `keep` lines of each of stdout and stderr are kept, each cut at
  LINE_BYTES as it arrives: a job printing gigabytes costs nodeagent a few megabytes.
- The wall time ends when the job's first process exits (a pidfd tells at once, Linux 5.3 and
  later), not when the leftovers holding its output are gone.
"""

from __future__ import annotations

import collections
import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO

import psutil

from nodeagent.core import interrupt

LINE_BYTES = 4096  # of one output line kept: a figure for --metric is near the start of its line
STOP_GRACE_S = 2.0  # SIGTERM to SIGKILL for what a trial leaves (Slurm's KillWait is 30 s)
DRAIN_S = 1.0  # reading what is left in the pipes once the job and its leftovers are stopped
_POLL_S = 0.02  # without a pidfd: how often the job's first process is looked at
_CHUNK = 1 << 16


class LineTail:
    """The last `keep` lines of a byte stream, each cut at LINE_BYTES (the rest of a longer line is
    dropped as it arrives, never held)."""

    def __init__(self, keep: int) -> None:
        self.lines: collections.deque[bytes] = collections.deque(maxlen=keep)
        self.partial = bytearray()

    def feed(self, chunk: bytes) -> None:
        *complete, rest = chunk.split(b"\n")
        for piece in complete:
            self._add(piece)
            self.lines.append(bytes(self.partial))
            self.partial.clear()
        self._add(rest)

    def _add(self, piece: bytes) -> None:
        room = LINE_BYTES - len(self.partial)
        if room > 0:
            self.partial += piece[:room]

    def text(self) -> list[str]:
        """The kept lines, the unfinished last one included."""
        lines = [*self.lines, bytes(self.partial)] if self.partial else list(self.lines)
        return [line.decode(errors="replace") for line in lines]


@dataclass
class Ended:
    """How a trial's process ended."""

    code: int | None  # the exit status (negative: killed by that signal); None: stopped at the limit
    wall_s: float
    stdout: list[str]
    stderr: list[str]
    leftovers: list[str] = field(default_factory=list)  # "name (pid N)" stopped after the job's end

    @property
    def timed_out(self) -> bool:
        return self.code is None


def run(argv: Sequence[str], env: Mapping[str, str], limit_s: float, keep: int) -> Ended:
    """Run `argv` in a session of its own until it exits or `limit_s` passes; whatever of its
    session is still running then is stopped. OSError when it cannot start."""
    start = time.monotonic()
    out, err = LineTail(keep), LineTail(keep)
    proc: subprocess.Popen[bytes] | None = None
    try:
        with interrupt.critical():  # an interrupt as it starts waits until `proc` is known here
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=dict(env),
                start_new_session=True,
            )
        assert proc.stdout is not None and proc.stderr is not None
        tails = {proc.stdout: out, proc.stderr: err}
        with selectors.DefaultSelector() as sel:
            for pipe in tails:
                sel.register(pipe, selectors.EVENT_READ)
            ended = _until_exit(proc, sel, tails, start + limit_s)
            if ended is None:  # past the limit: the whole session is stopped, the trial failed
                stop_session(proc)
                return Ended(None, time.monotonic() - start, out.text(), err.text())
            leftovers = stop_session(proc)
            _drain(sel, tails, time.monotonic() + DRAIN_S)
    except BaseException:  # an interrupt, or an error of ours: nothing of the trial stays
        if proc is not None:
            stop_session(proc)
        raise
    finally:
        if proc is not None:
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
    return Ended(proc.returncode, ended - start, out.text(), err.text(), leftovers)


def _pidfd(pid: int) -> int | None:
    """A descriptor readable when `pid` exits (Linux 5.3 and later), else None."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError:
        return None


def _until_exit(
    proc: subprocess.Popen[bytes],
    sel: selectors.BaseSelector,
    tails: dict[IO[bytes], LineTail],
    deadline: float,
) -> float | None:
    """Read the output until the job's first process exits: the time it did (reaped), or None when
    `deadline` passed first."""
    pidfd = _pidfd(proc.pid)
    if pidfd is not None:
        sel.register(pidfd, selectors.EVENT_READ)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            wait = left if pidfd is not None else min(left, _POLL_S)
            for key, _ in sel.select(wait):
                if key.fileobj != pidfd:
                    _read(sel, key.fileobj, tails)  # type: ignore[arg-type]
            if proc.poll() is not None:
                return time.monotonic()
    finally:
        if pidfd is not None:
            sel.unregister(pidfd)
            os.close(pidfd)


def _read(sel: selectors.BaseSelector, pipe: IO[bytes], tails: dict[IO[bytes], LineTail]) -> None:
    chunk = os.read(pipe.fileno(), _CHUNK)
    if chunk:
        tails[pipe].feed(chunk)
    else:  # its end: every process holding it closed it or exited
        sel.unregister(pipe)


def _drain(sel: selectors.BaseSelector, tails: dict[IO[bytes], LineTail], deadline: float) -> None:
    """What is left in the pipes, up to their end or `deadline` (a process outside the session may
    still hold them open)."""
    while sel.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        for key, _ in sel.select(left):
            _read(sel, key.fileobj, tails)  # type: ignore[arg-type]


# -- the session's processes -----------------------------------------------------------------------


def members(leader: int) -> list[int]:
    """The live processes of the session (or process group) `leader` started, zombies left out."""
    found = []
    for pid in psutil.pids():
        if pid == leader:
            continue
        try:
            if leader not in (os.getsid(pid), os.getpgid(pid)):
                continue
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                continue
        except (OSError, psutil.Error):
            continue  # gone meanwhile, or not ours to see
        found.append(pid)
    return found


def _describe(pid: int) -> str:
    try:
        return f"{psutil.Process(pid).name()} (pid {pid})"
    except psutil.Error:
        return f"pid {pid}"


def _signal_all(proc: subprocess.Popen[bytes], pids: list[int], sig: signal.Signals) -> None:
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, sig)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)
    if proc.returncode is None:
        with contextlib.suppress(OSError):
            proc.send_signal(sig)


def stop_session(proc: subprocess.Popen[bytes]) -> list[str]:
    """Stop the job's first process and everything left in its session: SIGTERM, then SIGKILL after
    STOP_GRACE_S. Returns what was left besides the first process ("name (pid N)")."""
    left = members(proc.pid)
    named = [_describe(pid) for pid in left]
    if proc.poll() is None or left:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            _signal_all(proc, left, sig)
            if _gone(proc, time.monotonic() + STOP_GRACE_S):
                break
            left = members(proc.pid)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=STOP_GRACE_S)  # reaped: no zombie of ours stays
    return named


def _gone(proc: subprocess.Popen[bytes], deadline: float) -> bool:
    """True once the first process has exited and its session is empty, False at `deadline`."""
    while True:
        if proc.poll() is not None and not members(proc.pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
