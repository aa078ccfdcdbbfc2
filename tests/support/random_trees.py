"""Random folder trees with links of every kind (relative, absolute, dangling, looping), in memory
or on disk, and the reference expansion of glob patterns on them (one pattern at a time), for the
tests of the recorder's one-walk expansion and of snapshots."""

from __future__ import annotations

import posixpath
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from nodeagent.host.archive import MemoryTree
from nodeagent.host.base import CmdResult, Host
from nodeagent.host.local import TreeHost
from nodeagent.host.tree import DIR

Reached = tuple[dict[str, bytes], dict[str, str], set[str]]


class TreeOnly(TreeHost):
    def run(self, argv: Sequence[str], timeout: float = 10.0) -> CmdResult:
        raise AssertionError("the walk runs no command")


def one_by_one(host: Host, patterns: Iterable[str], as_folders: Collection[str] = ()) -> Reached:
    """The reference: Host.glob per pattern, then every link on the way to each match, its resolved
    place walked on (the recorder before globwalk)."""
    files: dict[str, bytes] = {}
    links: dict[str, str] = {}
    dirs: set[str] = set()

    def record(path: str) -> None:
        parts = [p for p in path.split("/") if p]
        current = "/"
        for i, comp in enumerate(parts):
            candidate = posixpath.join(current, comp)
            target = None if candidate in as_folders else host.readlink(candidate)
            if target is not None:
                links[candidate] = target
                resolved = host.realpath(candidate)
                if resolved is not None:
                    record(posixpath.join(resolved, *parts[i + 1 :]))
                return
            current = candidate
        if host.is_dir(current):
            dirs.add(current)
            return
        data = host.read_bytes(current)
        if data is not None:
            files[current] = data

    for pattern in patterns:
        for path in host.glob(pattern):
            record(path)
    return files, links, dirs


NAMES = ("a", "b", "d1", "d2", ".h")
TARGETS = ("a", "b", "d1/a", "../a", "../../d2", "/a", "/d1/b", ".", "..", "zz", "../zz/a", "/")
PARTS = (*NAMES, "*", "?", "d[0-9]", "[ab]", "*1", ".*")


def entries_st(depth: int) -> st.SearchStrategy[dict[str, Any]]:
    leaf = st.one_of(st.binary(max_size=6), st.sampled_from(TARGETS).map(lambda t: ("link", t)))
    child = leaf if depth == 0 else st.one_of(leaf, entries_st(depth - 1))
    return st.dictionaries(st.sampled_from(NAMES), child, max_size=4)


def _flatten(entries: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name, value in entries.items():
        path = f"{prefix}/{name}"
        out.append((path, value if not isinstance(value, dict) else DIR))
        if isinstance(value, dict):
            out += _flatten(value, path)
    return out


def memory_tree(entries: dict[str, Any]) -> MemoryTree:
    flat = _flatten(entries)
    return MemoryTree(
        dirs=[p for p, v in flat if v == DIR],
        links={p: v[1] for p, v in flat if isinstance(v, tuple)},
        files={p: v for p, v in flat if isinstance(v, bytes)},
    )


def disk_tree(entries: dict[str, Any], root: Path) -> None:
    for path, value in _flatten(entries):
        where = root / path.lstrip("/")
        if value == DIR:
            where.mkdir()
        elif isinstance(value, tuple):
            where.symlink_to(value[1])
        else:
            where.write_bytes(value)


patterns_st = st.lists(
    st.lists(st.sampled_from(PARTS), min_size=1, max_size=4).map(lambda ps: "/" + "/".join(ps)),
    min_size=1,
    max_size=5,
)
