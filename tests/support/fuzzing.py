"""Corrupting recorded trees: a tree with files replaced or deleted, and a host over it that keeps
the recording's commands. Used by the fuzz tests of checks and tuners."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nodeagent.host import CmdResult, SnapshotHost
from nodeagent.host.local import TreeHost
from nodeagent.host.tree import FILE, Tree

# Values that real corrupt, truncated or odd sysfs files hold, beside random bytes.
GARBAGE = [
    b"",
    b"\x00\x00\x00",
    b"-1",
    b"nan",
    b"99999999999999999999999999",
    b"0x",
    b"[]",
    b"1-",
    b"\xff\xfe\xfa",
    b"   \n\n",
    b"Node 0 MemTotal: kB",
    b"always [never",
    b"4: ",
    b"-5 GT/s",
    b"x16",
    b"Unknown",
]


class MutatedTree(Tree):
    """`base` with some files replaced (bytes) or deleted (None)."""

    def __init__(self, base: Tree, changes: Mapping[str, bytes | None]) -> None:
        self.base = base
        self.changes = changes

    def kind(self, path: str) -> str | None:
        if path in self.changes:
            return None if self.changes[path] is None else FILE
        return self.base.kind(path)

    def link_target(self, path: str) -> str | None:
        return self.base.link_target(path)

    def file_bytes(self, path: str) -> bytes | None:
        return self.changes[path] if path in self.changes else self.base.file_bytes(path)

    def entries(self, path: str) -> list[str] | None:
        entries = self.base.entries(path)
        if entries is None:
            return None
        gone = {
            p.rsplit("/", 1)[-1] for p, v in self.changes.items() if v is None and p.rsplit("/", 1)[0] == path
        }
        return [e for e in entries if e not in gone]


class FuzzHost(TreeHost):
    """A recorded host with some files corrupted; commands answer as in the recording."""

    kind = "snapshot"

    def __init__(self, base: SnapshotHost, changes: Mapping[str, bytes | None]) -> None:
        super().__init__(MutatedTree(base.tree, changes))
        self.base = base
        self.name = "fuzz"

    def run(self, argv: Sequence[str], timeout: float = 10.0) -> CmdResult:
        return self.base.run(argv, timeout)


def files_matching(host: SnapshotHost, patterns: Sequence[str]) -> list[str]:
    """Canonical paths of the files that `patterns` (declared globs) match in a tree."""
    return sorted(
        {
            real
            for pattern in patterns
            for path in host.glob(pattern)
            if (real := host.realpath(path)) and not host.is_dir(real)
        }
    )
