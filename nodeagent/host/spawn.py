"""Commands run on this machine: posix_spawn, two pipes and poll, without the subprocess module.

The agentless pull records a node's declared commands (`dmesg -r`, nvidia-smi) with the node's own
python3, and importing subprocess (with threading, selectors and signal) costs that node more CPU
than starting the command itself (nodeagent.cluster.pull). This is the part of subprocess.run that
nodeagent needs, and `start` returns at once, so a recorder reads the files while its commands run,
with no thread per command:
- standard input is /dev/null, standard output and error are captured whole;
- a command not found exits 127 and one that cannot be executed 126, as a POSIX shell reports them;
- past its timeout a command is killed (SIGKILL, as subprocess.run does) and exits 124, as
  timeout(1) reports it;
- a command killed by a signal exits -N, as subprocess reports it;
- the command gets SIGPIPE and SIGXFSZ back at their defaults (Python ignores them; subprocess's
  restore_signals), and only its three standard descriptors: nodeagent's own are close-on-exec
  (PEP 446), as Python opens every file.

Standard library only, Python 3.8 (nodeagent.cluster.pull runs it on nodes).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # built in, no stub: the signal module's own core
import os
import select
import time

from nodeagent.host.base import CmdResult, Started

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

_CHUNK = 1 << 16  # a pipe's default capacity (pipe(7)): one read empties a full pipe
# The signal module imports enum (start-up time on every node of a pull); _signal is built in.
_SIGKILL: int = _signal.SIGKILL
_RESTORED: tuple[int, int] = (_signal.SIGPIPE, _signal.SIGXFSZ)
# How long a command that closed its output may take to exit before it is looked at again.
_FIRST_NAP_S = 0.0005
_LONGEST_NAP_S = 0.02


class Spawned(Started):
    """A running command: `result()` reads its output until it ends or its deadline passes."""

    def __init__(self, argv: tuple[str, ...], pid: int, out: int, err: int, timeout: float) -> None:
        self.argv = argv
        self.pid = pid
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.pipes = {out: bytearray(), err: bytearray()}
        self.out, self.err = out, err
        self._result: CmdResult | None = None

    def result(self) -> CmdResult:
        if self._result is None:
            self._result = self._finish()
        return self._result

    def _finish(self) -> CmdResult:
        try:
            drained = self._drain()
            status = self._wait() if drained else None
        finally:
            for fd in list(self.pipes):
                os.close(fd)
        if status is None:
            self._kill()
            return CmdResult(self.argv, "", f"{self.argv[0]}: timed out after {self.timeout:g}s", 124)
        return CmdResult(self.argv, _text(self.pipes[self.out]), _text(self.pipes[self.err]), status)

    def _drain(self) -> bool:
        """Both pipes read to their end (True), or the deadline passed first (False)."""
        poller = select.poll()
        open_fds = set(self.pipes)
        for fd in open_fds:
            poller.register(fd, select.POLLIN)
        while open_fds:
            left = self.deadline - time.monotonic()
            if left <= 0:
                return False
            for fd, _ in poller.poll(max(1, int(left * 1000))):
                chunk = os.read(fd, _CHUNK)
                if chunk:
                    self.pipes[fd] += chunk
                else:  # the end of that pipe: the command closed it or exited
                    poller.unregister(fd)
                    open_fds.discard(fd)
        return True

    def _wait(self) -> int | None:
        """The exit code once the command has exited, None when the deadline passes first (a
        command that closed its output may run on)."""
        nap = _FIRST_NAP_S
        while True:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return _exit_code(status)
            left = self.deadline - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(nap, left))
            nap = min(nap * 2, _LONGEST_NAP_S)

    def _kill(self) -> None:
        try:  # noqa: SIM105 - contextlib imports functools and collections: start-up time on nodes
            os.kill(self.pid, _SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)  # reaped: no zombie is left behind


def _exit_code(status: int) -> int:
    # os.waitstatus_to_exitcode is Python 3.9 and later.
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _text(data: bytearray) -> str:
    return data.decode("utf-8", errors="replace")


def _on_path(name: str, env: Mapping[str, str]) -> bool:
    """An executable `name` is on the PATH of `env`, or `name` is a path: what shutil.which tells."""
    if "/" in name:
        return True
    places = (os.path.join(folder or ".", name) for folder in os.get_exec_path(env))
    return any(os.access(p, os.X_OK) and not os.path.isdir(p) for p in places)


def start(argv: Sequence[str], timeout: float, env: Mapping[str, str]) -> Started:
    """`argv` started with environment `env` (PATH searched as the shell would); a command that
    cannot start is already finished (127: not found, 126: not executable). A missing tool
    (nvidia-smi on a CPU node, which every node of a pull is asked for) is answered without forking."""
    args = tuple(argv)
    if not _on_path(args[0], env):
        return Started(CmdResult(args, "", f"{args[0]}: command not found", 127))
    out_r, out_w = os.pipe()  # both ends close-on-exec (PEP 446): the command gets only the copies
    err_r, err_w = os.pipe()
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_DUP2, out_w, 1),
        (os.POSIX_SPAWN_DUP2, err_w, 2),
    ]
    try:
        pid = os.posix_spawnp(args[0], args, env, file_actions=actions, setsigdef=_RESTORED)
    except OSError as e:
        os.close(out_r)
        os.close(err_r)
        not_found = isinstance(e, FileNotFoundError)
        why = "command not found" if not_found else e.strerror or "cannot be executed"
        return Started(CmdResult(args, "", f"{args[0]}: {why}", 127 if not_found else 126))
    finally:
        os.close(out_w)
        os.close(err_w)
    return Spawned(args, pid, out_r, err_r, timeout)
