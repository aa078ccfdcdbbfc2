"""The Host interface: reads, directory listings, links and commands, the same on every kind of host.

Runs on nodes too (the agentless pull, nodeagent.cluster.pull), where every module imported is
start-up time paid by every node at every pull (nodeagent.cluster.pull says how much): re, typing,
fnmatch, shlex and threading are imported where they are used, never on the node's path, and
`TYPE_CHECKING = False` keeps the type checker's own imports out of it.
"""

from __future__ import annotations

import _thread
import os
from abc import ABC, abstractmethod

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, TypeVar

    T = TypeVar("T")


def env_limit(name: str, default: int) -> int:
    """A size or count limit, overridden by environment variable `name` (a positive integer);
    anything else there leaves the default. Read when used, so a test or a caller may change it."""
    text = os.environ.get(name, "").strip()
    ok = text.isascii() and text.isdigit() and len(text) <= 18 and int(text) > 0
    return int(text) if ok else default


# The largest one sysfs/procfs value read through a Host (NODEAGENT_MAX_READ_BYTES). The files the
# checks read are a page or a few (cpulist files, /proc/self/limits: under 4 KiB; mountinfo of a
# busy node: tens of KiB). A larger one is not one of ours (/proc/kcore, a hostile recording): the
# read stops there and the value is unreadable ("larger than N"), never truncated and never loaded
# whole. Command output (`dmesg -r`) is not a file read: its cap is the command's own.
MAX_READ_BYTES = 1 << 20
MAX_READ_ENV = "NODEAGENT_MAX_READ_BYTES"


def max_read_bytes() -> int:
    return env_limit(MAX_READ_ENV, MAX_READ_BYTES)


def too_large(limit: int) -> str:
    """The reason a value over the read limit is unreadable."""
    size = f"{limit >> 20} MiB" if limit % (1 << 20) == 0 else f"{limit} bytes"
    return f"unreadable: larger than {size} (limit {MAX_READ_ENV})"


# A snapshot's layout: the tree itself, the recorded command outputs, and its metadata.
COMMANDS_DIR = "commands"
META_FILE = "nodeagent.json"


class CmdResult:
    """A finished command, shaped like Invoke's Result (stdout, stderr, exited, ok).

    A plain class, not a dataclass or a NamedTuple: this module runs on the nodes of the agentless
    pull, where importing dataclasses or typing is start-up time paid by every node."""

    __slots__ = ("argv", "exited", "stderr", "stdout")

    def __init__(self, argv: tuple[str, ...], stdout: str, stderr: str = "", exited: int = 0) -> None:
        self.argv = argv
        self.stdout = stdout
        self.stderr = stderr
        self.exited = exited

    def _fields(self) -> tuple[tuple[str, ...], str, str, int]:
        return (self.argv, self.stdout, self.stderr, self.exited)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CmdResult) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        fields = f"argv={self.argv!r}, stdout={self.stdout!r}, stderr={self.stderr!r}, exited={self.exited!r}"
        return f"CmdResult({fields})"

    @property
    def ok(self) -> bool:
        return self.exited == 0

    def first_line(self) -> str:
        """What the command said, in one line: the first of its error output, else of its output,
        else its exit code (why a failed tool gave no result)."""
        lines = (self.stderr.strip() or self.stdout.strip()).splitlines()
        return lines[0].strip() if lines else f"exit code {self.exited}"

    @property
    def command(self) -> str:
        import shlex

        return shlex.join(self.argv)


class Started:
    """A command Host.start began: `result()` is its CmdResult, waiting for it to end if need be."""

    def __init__(self, done: CmdResult) -> None:
        self._done = done

    def result(self) -> CmdResult:
        return self._done


def _name_char(c: str) -> str:
    return c if c.isascii() and (c.isalnum() or c in "._-") else "_"


def command_name(argv: Sequence[str]) -> str:
    """The file stem under which a snapshot records a command's output.

    ["nvidia-smi", "topo", "-m"] -> "nvidia-smi-topo-m": words joined by "-", leading dashes of
    options dropped, anything outside [A-Za-z0-9._-] replaced by "_".
    """
    words = ["".join(map(_name_char, a.lstrip("-"))) for a in argv]
    return "-".join(w for w in words if w)


# A host name as reports and Prometheus labels carry it: RFC 1123 labels (letters, digits, inner
# hyphens, 1-63 characters each) joined by dots, 253 characters at most; Kubernetes node names are
# such names in lower case (https://kubernetes.io/docs/concepts/overview/working-with-objects/names/).
MAX_LABEL = 63
MAX_HOSTNAME = 253


def _host_label(label: str) -> bool:
    """`label` is an RFC 1123 label: [A-Za-z0-9] at both ends, [A-Za-z0-9-] between, 1-63 long."""
    characters_ok = label.isascii() and all(c.isalnum() or c == "-" for c in label)
    return 0 < len(label) <= MAX_LABEL and characters_ok and label[0].isalnum() and label[-1].isalnum()


def hostname_problem(name: str) -> str | None:
    """Why `name` cannot name a host in a report, or None when it can."""
    if not name:
        return "empty"
    if len(name) > MAX_HOSTNAME:
        return f"{len(name)} characters, more than the {MAX_HOSTNAME} a host name may have"
    labels = name.split(".")
    if "" in labels:
        return "an empty label (a dot at an end, or two in a row): write it as node-a or node-a.example.com"
    bad = [label for label in labels if not _host_label(label)]
    if bad:
        return (
            f"{bad[0]!r} is not a host name label: use letters, digits and inner hyphens, 1 to 63 "
            "characters between dots (RFC 1123)"
        )
    return None


class Host(ABC):
    """One machine as nodeagent sees it. Paths are absolute, as on the machine itself ("/sys/...").

    `read` returns None when a file is absent or unreadable: on Linux a missing sysfs file is the
    normal way a kernel says "not supported here", so callers treat None as data, not as an error.
    """

    name: str = "localhost"
    kind: str = "local"

    @property
    def is_live(self) -> bool:
        """Whether this host is the machine nodeagent runs on, at its real root or through a live
        mount of its /proc and /sys (a pod's /host): only then may a fact come from a library that
        reads this process's machine itself (py-cpuinfo) instead of the host's files. Recordings,
        copies of a tree and remote nodes are not."""
        return False

    def __init__(self) -> None:
        self._memo: dict[str, Any] = {}
        self._memo_locks: dict[str, _thread.LockType] = {}
        self._memo_guard = _thread.allocate_lock()

    # -- the primitives every host implements -------------------------------------------------
    @abstractmethod
    def read(self, path: str) -> str | None:
        """Text of a file with trailing NUL bytes removed, or None when absent or unreadable."""

    @abstractmethod
    def read_bytes(self, path: str) -> bytes | None:
        """Raw bytes of a file (binary attributes such as PCI config space), or None."""

    @abstractmethod
    def listdir(self, path: str) -> list[str] | None:
        """Sorted entry names of a directory, or None when it is absent."""

    @abstractmethod
    def readlink(self, path: str) -> str | None:
        """The target of a symbolic link as stored, or None when `path` is not a link."""

    @abstractmethod
    def realpath(self, path: str) -> str | None:
        """The canonical path (links resolved) as seen on the host, or None when it does not exist."""

    @abstractmethod
    def is_dir(self, path: str) -> bool: ...

    def unreadable(self, path: str) -> str | None:
        """Why `read(path)` gave None although something is there ("unreadable: larger than 1 MiB",
        "unreadable: a FIFO, not a regular file"); None when it is absent or was read."""
        return None

    def recorded(self, path: str) -> bool:
        """Whether this host can tell if `path` exists. A machine (this one, a live mount of it, a
        node over SSH) always can: a folder its /sys lacks is absent. A recording only can for what
        it recorded (SnapshotHost): elsewhere a missing path says nothing about the machine."""
        return True

    def recorded_command(self, argv: Sequence[str]) -> bool:
        """Whether this host can run `argv`, or recorded what it printed (SnapshotHost)."""
        return True

    @abstractmethod
    def run(self, argv: Sequence[str], timeout: float = 10.0) -> CmdResult:
        """Run a command. A missing tool gives exited=127, a timeout exited=124; never raises."""

    def start(self, argv: Sequence[str], timeout: float = 10.0) -> Started:
        """Start a command and return at once when the host can run it meanwhile (this machine);
        `result()` then waits for it, within `timeout`. Other hosts run it here and now."""
        return Started(self.run(argv, timeout))

    def write(self, path: str, value: str) -> None:
        """Write a value (tuners only). Read-only hosts raise PermissionError."""
        raise PermissionError(f"{self.name}: this host is read-only")

    def put_file(self, path: str, text: str) -> None:
        """Create or replace a whole file atomically, creating missing folders (the persistent
        configuration of `tune --apply --persist`). Read-only hosts raise PermissionError."""
        raise PermissionError(f"{self.name}: this host is read-only")

    def remove_file(self, path: str) -> None:
        """Remove a file (revert of a file nodeagent created); FileNotFoundError when absent."""
        raise PermissionError(f"{self.name}: this host is read-only")

    def remove_dir(self, path: str) -> None:
        """Remove an empty folder nodeagent created; OSError when it is not empty."""
        raise PermissionError(f"{self.name}: this host is read-only")

    # -- conveniences built on the primitives ---------------------------------------------------
    def read_value(self, path: str) -> str | None:
        """A one-value sysfs file, stripped of surrounding white space."""
        text = self.read(path)
        return None if text is None else text.strip()

    def exists(self, path: str) -> bool:
        return self.realpath(path) is not None

    def lexists(self, path: str) -> bool:
        """`path` exists, or is a link (dangling or not): what a glob component matches."""
        return self.realpath(path) is not None or self.readlink(path) is not None

    def glob(self, pattern: str) -> list[str]:
        """Absolute paths matching a shell pattern (`*`, `?`, `[...]` within one component)."""
        import fnmatch

        parts = [p for p in pattern.split("/") if p]
        found = ["/"]
        for part in parts:
            nxt: list[str] = []
            for base in found:
                prefix = base.rstrip("/") + "/"
                if not any(c in part for c in "*?["):
                    candidate = prefix + part
                    if self.lexists(candidate):
                        nxt.append(candidate)
                    continue
                for entry in self.listdir(base) or []:
                    if fnmatch.fnmatchcase(entry, part):
                        nxt.append(prefix + entry)
            found = nxt
        return sorted(found)

    def memo(self, key: str, compute: Callable[[], T]) -> T:
        """Compute a fact once per host and run; concurrent checks asking for it wait for one result."""
        with self._memo_guard:
            if key in self._memo:
                return self._memo[key]  # type: ignore[no-any-return]
            lock = self._memo_locks.setdefault(key, _thread.allocate_lock())
        with lock:
            if key not in self._memo:
                self._memo[key] = compute()
            return self._memo[key]  # type: ignore[no-any-return]

    def refresh(self) -> None:
        """Forget memoized facts, so the next run reads the machine again."""
        with self._memo_guard:
            self._memo.clear()
            self._memo_locks.clear()

    def close(self) -> None:  # noqa: B027 - most hosts hold nothing; SSH hosts hold a connection
        """Release what the host holds (connections); a no-op for file-backed hosts."""

    def __enter__(self) -> Host:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
