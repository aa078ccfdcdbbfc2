"""How the fleet runner's jobs run a command on a host: the Shell protocol, and LocalShell for a host
that is this machine (`connection: local` in the inventory, Ansible's `ansible_connection: local`).

A job (nodeagent.cluster.runner: the agentless pull, `nodeagent check|tune|bench` on the node) needs
one thing of a host: a shell command line run there, bytes fed to its standard input, and its output
back within a time limit and the output limits. Over SSH that is nodeagent.cluster.ssh.SSHShell on an
open Fabric connection; on this machine it is LocalShell, so a fleet can be tried on a laptop with no
sshd, and one fleet may mix both.

LocalShell runs `/bin/sh -c COMMAND` (the command line is quoted for a POSIX shell, as sshd hands it
to the login shell) in a session of its own, so that everything the command starts is one process
group, stopped together:
- past its time limit, when the runner abandons the host, and when nodeagent is interrupted
  (`stop`): SIGTERM first, since nodeagent's own commands clean up on it as on Ctrl-C
  (nodeagent.core.interrupt: a `tune --apply` restores what it had switched), then SIGKILL once its
  output has ended (every process holding it has exited) or STOP_GRACE_S have passed;
- once it has ended: whatever it left running in its group is killed, so a local run leaves nothing
  behind.
Its output is limited exactly as over SSH (ssh.output_caps, ssh.too_much) and its errors are of the
same kinds (ssh.TIMEOUT, ssh.REMOTE), so a host reads the same in a report whichever way it was
reached. Its environment and working folder are nodeagent's own, as with Ansible's local connection.
"""

from __future__ import annotations

import math
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from nodeagent.api.report import HostError
from nodeagent.cluster import ssh
from nodeagent.cluster.ssh import Output

__all__ = ["SHELL", "STOP_GRACE_S", "LocalShell", "Shell", "stop"]

SHELL = "/bin/sh"
# How long a stopped command has between SIGTERM and SIGKILL: a nodeagent command restores what it
# had changed on SIGTERM (a few sysfs writes, milliseconds), and a job's whole host time limit
# (nodeagent.cluster.runner) counts this in.
STOP_GRACE_S = 5.0
_CHUNK = 1 << 16  # a pipe's default capacity (pipe(7)): one read empties a full pipe
# How long a command that closed its output may take to exit before it is looked at again.
_FIRST_NAP_S = 0.0005
_LONGEST_NAP_S = 0.02


class Shell(Protocol):
    """One host as a job uses it."""

    def run(self, command: str, timeout: float, stdin: bytes | None = None) -> Output:
        """`command` (a quoted shell command line) with `stdin` fed to it; raises HostError when it
        does not finish within `timeout` seconds or prints more than the output limits."""

    def close(self) -> None:
        """The host's session ends: what still runs there is stopped, later runs are refused."""


@dataclass
class _Stream:
    """One of a command's outputs, read up to its limit."""

    name: str
    variable: str  # the environment variable that sets `cap`
    cap: int
    chunks: list[bytes] = field(default_factory=list)
    size: int = 0

    def add(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.cap:
            raise ssh.too_much(self.name, self.variable, self.cap)
        self.chunks.append(data)


class LocalShell:
    """Commands of the host `name` run on this machine, one at a time, each in its own session."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()  # run() on the host's thread; close() and stop() from others
        self._ended = threading.Condition(self._lock)  # notified when a command is done with
        # The command running now, not reaped yet: while it is not, its process id (which is also
        # its group's id) cannot be given to another process, so signalling the group is safe.
        self._running: subprocess.Popen[bytes] | None = None
        self._closed = False

    def run(
        self,
        command: str,
        timeout: float,
        stdin: bytes | None = None,
        max_stdout: int | None = None,
        max_stderr: int | None = None,
    ) -> Output:
        """As ssh.run, on this machine: HostError(TIMEOUT) when `command` does not finish within
        `timeout` seconds, HostError(REMOTE) as soon as it prints more than `max_stdout` /
        `max_stderr` bytes (default NODEAGENT_MAX_STDOUT_MIB and NODEAGENT_MAX_STDERR_MIB); in both
        cases its process group is stopped first."""
        out_cap, err_cap = ssh.output_caps(max_stdout, max_stderr)
        out = _Stream("stdout", "NODEAGENT_MAX_STDOUT_MIB", out_cap)
        err = _Stream("stderr", "NODEAGENT_MAX_STDERR_MIB", err_cap)
        deadline = time.monotonic() + timeout
        proc = self._start(command, stdin is not None)
        try:
            _exchange(proc, stdin or b"", (out, err), deadline, timeout)
            if not _exited(proc.pid, deadline):
                raise HostError(ssh.TIMEOUT, f"the command did not exit within {timeout:g}s")
        except BaseException:
            with self._lock:
                _signal_group(proc.pid, signal.SIGTERM)
            _drain(proc, time.monotonic() + STOP_GRACE_S)  # its clean-up; SIGKILL follows in _end
            raise
        finally:
            self._end(proc)
        return Output(b"".join(out.chunks), b"".join(err.chunks), proc.returncode)

    def close(self) -> None:
        self.send_signal(signal.SIGTERM)
        self.wait_stopped(time.monotonic() + STOP_GRACE_S)
        self.send_signal(signal.SIGKILL)

    def send_signal(self, signum: int) -> None:
        """`signum` to the process group of the command running now, if one is; no later command
        starts."""
        with self._lock:
            self._closed = True
            if self._running is not None:
                _signal_group(self._running.pid, signum)

    def wait_stopped(self, deadline: float) -> None:
        """Until the running command is done with (its output ended, its group killed: run() does
        that on its own thread once its processes have exited), or `deadline`."""
        with self._lock:
            while self._running is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._ended.wait(left)

    def _start(self, command: str, with_stdin: bool) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._closed:
                raise HostError(ssh.CONTROLLER, f"{self.name}'s run was stopped before this command")
            try:
                # start_new_session: setsid(2) in the child, so the command and all it starts are
                # one process group (and no terminal's Ctrl-C reaches it but through nodeagent).
                # Its pipes are close-on-exec (PEP 446) and close_fds is the default: another
                # host's command, started meanwhile, never holds them open, which would hold back
                # the end of this one's output.
                proc = subprocess.Popen(
                    [SHELL, "-c", command],
                    stdin=subprocess.PIPE if with_stdin else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                )
            except OSError as e:
                raise HostError(ssh.CONTROLLER, f"cannot start {SHELL} here: {e.strerror or e}") from None
            self._running = proc
            return proc

    def _end(self, proc: subprocess.Popen[bytes]) -> None:
        """What the command left in its group killed, then the command reaped and its pipes closed."""
        with self._lock:
            _signal_group(proc.pid, signal.SIGKILL)
            self._running = None
            self._ended.notify_all()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:  # stdin's last bytes, refused by a command that has gone
                    continue


def stop(shells: Iterable[LocalShell]) -> None:
    """Stop every command still running in `shells` (an interrupted fleet run): all are sent SIGTERM
    at once, given STOP_GRACE_S together, then SIGKILL."""
    shells = list(shells)
    for shell in shells:
        shell.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for shell in shells:
        shell.wait_stopped(deadline)
    for shell in shells:
        shell.send_signal(signal.SIGKILL)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:  # everything in it has exited already
        return


def _exchange(
    proc: subprocess.Popen[bytes],
    stdin: bytes,
    outputs: tuple[_Stream, _Stream],
    deadline: float,
    timeout: float,
) -> None:
    """Feed `stdin` to `proc` while reading its stdout and stderr (either may fill its pipe before
    the input is all read), until both outputs end; HostError(TIMEOUT) at `deadline`."""
    assert proc.stdout is not None and proc.stderr is not None
    poller = select.poll()
    reading = {proc.stdout.fileno(): outputs[0], proc.stderr.fileno(): outputs[1]}
    for fd in reading:
        poller.register(fd, select.POLLIN)
    pending = memoryview(stdin)
    writer = proc.stdin.fileno() if proc.stdin is not None else None
    if writer is not None:
        os.set_blocking(writer, False)  # a write takes what the pipe has room for, never waits
        poller.register(writer, select.POLLOUT)
    while reading:
        if writer is not None and not pending:
            poller.unregister(writer)
            _close_input(proc)
            writer = None
        left = deadline - time.monotonic()
        if left <= 0:
            raise HostError(ssh.TIMEOUT, f"the command did not finish within {timeout:g}s")
        for fd, _events in poller.poll(max(1, math.ceil(left * 1000))):
            if fd == writer:
                pending = pending[_write(fd, pending) :]
                continue
            data = os.read(fd, _CHUNK)
            if data:
                reading[fd].add(data)
            else:  # the end of that output: the command closed it or exited
                poller.unregister(fd)
                del reading[fd]
    if writer is not None:  # it closed its output without reading all its input
        _close_input(proc)


def _drain(proc: subprocess.Popen[bytes], deadline: float) -> None:
    """Read and drop what `proc` still prints, until its output ends (every process that holds it
    has exited) or `deadline`."""
    assert proc.stdout is not None and proc.stderr is not None
    poller = select.poll()
    fds = {proc.stdout.fileno(), proc.stderr.fileno()}
    for fd in fds:
        poller.register(fd, select.POLLIN)
    while fds:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        for fd, _events in poller.poll(max(1, math.ceil(left * 1000))):
            if not os.read(fd, _CHUNK):
                poller.unregister(fd)
                fds.discard(fd)


def _write(fd: int, data: memoryview) -> int:
    """How much of `data` the pipe took; all of it when the command no longer reads (the rest is
    dropped, as sshd drops what a finished command did not read)."""
    try:
        return os.write(fd, data[:_CHUNK])
    except BlockingIOError:
        return 0
    except BrokenPipeError:
        return len(data)


def _close_input(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.close()
    except OSError:  # nothing is buffered there (written with os.write): the pipe is closed anyway
        return


def _exited(pid: int, deadline: float) -> bool:
    """Whether the process `pid` (a child) has exited by `deadline`. It is not reaped (WNOWAIT): its
    id, also its process group's, stays reserved until the group is killed."""
    nap = _FIRST_NAP_S
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:  # reaped already
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(nap, left))
        nap = min(nap * 2, _LONGEST_NAP_S)
