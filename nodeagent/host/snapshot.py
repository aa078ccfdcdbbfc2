"""Recorded machines: a directory or a .tar[.gz|.bz2|.xz] holding sys/, proc/ and commands/."""

from __future__ import annotations

import fnmatch
import functools
import lzma
import os
import re
import tarfile
import zlib
from collections.abc import Sequence
from pathlib import Path

from nodeagent.core import limits
from nodeagent.core.errors import UsageError
from nodeagent.host.archive import ArchiveTooLarge, ArchiveTree, SubTree
from nodeagent.host.base import COMMANDS_DIR, META_FILE, CmdResult, Host, command_name, hostname_problem
from nodeagent.host.local import LocalHost, TreeHost
from nodeagent.host.mounts import inspect_root
from nodeagent.host.tree import DIR, LiveTree, Tree

_TREE_MARKERS = ("sys", "proc", COMMANDS_DIR)
_ARCHIVE_SUFFIXES = (".tar.gz", ".tar.bz2", ".tar.xz", ".tgz", ".tbz2", ".tar")


def _has_markers(tree: Tree, folder: str) -> bool:
    base = folder.rstrip("/")
    return tree.kind(f"{base}/{META_FILE}") is not None or any(
        tree.kind(f"{base}/{m}") == DIR for m in _TREE_MARKERS
    )


def _tree_root(tree: Tree) -> Tree | None:
    """The folder holding sys/ or proc/: the top itself, or its single sub-folder (hwloc's layout)."""
    if _has_markers(tree, "/"):
        return tree
    top = [e for e in tree.entries("/") or [] if tree.kind("/" + e) == DIR]
    if len(top) == 1 and _has_markers(tree, "/" + top[0]):
        return SubTree(tree, "/" + top[0])
    return None


class SnapshotHost(TreeHost):
    """A machine recorded by `nodeagent snapshot`, or any /sys + /proc copy (e.g. hwloc's test trees)."""

    kind = "snapshot"

    def __init__(
        self, source: str | Path, writable: bool = False, data: bytes | None = None, tree: Tree | None = None
    ) -> None:
        """`source` names the snapshot; `data`, when given, is the archive itself, and `tree` the
        recorded tree itself (pulled over SSH)."""
        self.source = Path(source)
        if data is None and tree is None and not self.source.exists():
            raise UsageError(f"{self.source}: no such file or directory (give a snapshot folder or archive)")
        if tree is not None:
            base: Tree = tree
        elif data is None and self.source.is_dir():
            base = LiveTree(str(self.source))
        else:
            if writable:
                raise UsageError(f"{self.source}: an archive is read-only; extract it to write to it")
            try:
                base = ArchiveTree(data if data is not None else str(self.source))
            except ArchiveTooLarge as e:
                raise UsageError(f"{self.source}: {e}") from None
            except (tarfile.TarError, OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as e:
                raise UsageError(
                    f"{self.source}: not a readable tar archive ({e}); record one with `nodeagent snapshot`"
                ) from None
        tree = _tree_root(base)
        if tree is None:
            raise UsageError(
                f"{self.source}: holds no sys/ or proc/ folder; give a tree recorded by `nodeagent snapshot`"
            )
        super().__init__(tree)
        self.writable = writable
        self.meta = self._read_meta()
        self._prefixes: dict[int, frozenset[tuple[str, ...]]] = {}
        stem = self.source.name
        for suffix in _ARCHIVE_SUFFIXES:
            stem = stem.removesuffix(suffix)
        self.name = str(self.meta.get("hostname") or stem)

    def _read_meta(self) -> dict[str, object]:
        """The recording's nodeagent.json ({} when it has none). Content that is not a JSON object
        within NODEAGENT_MAX_DEPTH is one UsageError line (exit 64): what the recording says it
        walked decides what is "not recorded", so it is never guessed past."""
        text = self.tree.read("/" + META_FILE)
        if not text:
            return {}
        try:
            meta = limits.loads_json(text)
        except ValueError as e:
            raise UsageError(
                f"{self.source}: its {META_FILE} is not readable ({e}); record the node again with "
                "`nodeagent snapshot`"
            ) from None
        if not isinstance(meta, dict):
            raise UsageError(
                f"{self.source}: its {META_FILE} is not a JSON object; record the node again with "
                "`nodeagent snapshot`"
            )
        return meta

    def recorded(self, path: str) -> bool:
        """Whether the recording can tell if `path` exists on its machine.

        - Recorded by nodeagent (its metadata lists the patterns walked): `path` lies on the walk
          of one of them (`_on_walk`), or the recording holds it. `snapshot --only kernel` recorded
          no /sys/class/infiniband: the rdma check's files there are not recorded, not absent.
        - Any other tree (hwloc's test trees, a copy of /sys and /proc): the tree holds `path` or
          its folder. A tree with no sys/ (only `nvidia-smi -q -x` output), or a sys/ without
          class/, recorded nothing below: /sys/class/infiniband missing from it is not a node
          without HCAs.
        """
        if self.tree.kind(path) is not None:
            return True
        walked = self._walked()
        if walked is not None:
            parts = tuple(p for p in path.split("/") if p)
            return any(_on_walk(parts, units) for units in self._walk_prefixes(len(parts)))
        folder = path.rstrip("/").rsplit("/", 1)[0] or "/"
        return self.tree.kind(folder) == DIR

    def recorded_command(self, argv: Sequence[str]) -> bool:
        """Whether the recording holds what `argv` printed (commands/<name>.txt)."""
        return self.tree.kind(f"/{COMMANDS_DIR}/{command_name(tuple(argv))}.txt") is not None

    def _walk_prefixes(self, depth: int) -> frozenset[tuple[str, ...]]:
        """The walked patterns' first `depth` components, each once: the ~200 patterns of a
        recording share a few dozen prefixes, and every host of a fleet asks about some 25 places."""
        if depth not in self._prefixes:
            self._prefixes[depth] = frozenset(units[:depth] for units in self._walked_units)
        return self._prefixes[depth]

    @functools.cached_property
    def _walked_units(self) -> frozenset[tuple[str, ...]]:
        return frozenset(tuple(u for u in p.split("/") if u) for p in self._walked() or [])

    def _walked(self) -> list[str] | None:
        """The patterns nodeagent's recorder walked (its metadata's `paths`); None when the tree was
        not recorded by nodeagent or its metadata does not say."""
        paths = self.meta.get("paths")
        if isinstance(paths, list) and all(isinstance(p, str) for p in paths):
            return paths  # [] too: only commands were recorded
        return None

    def write(self, path: str, value: str) -> None:
        self._writable()
        super().write(path, value)

    def put_file(self, path: str, text: str) -> None:
        self._writable()
        super().put_file(path, text)

    def remove_file(self, path: str) -> None:
        self._writable()
        super().remove_file(path)

    def remove_dir(self, path: str) -> None:
        self._writable()
        super().remove_dir(path)

    def _writable(self) -> None:
        if not self.writable:
            raise PermissionError(f"{self.name}: a snapshot is read-only")

    def run(self, argv: Sequence[str], timeout: float = 10.0) -> CmdResult:
        """The recorded output of a command: commands/<name>.txt (+ .exit and .err when it failed)."""
        args = tuple(argv)
        stem = f"/{COMMANDS_DIR}/{command_name(args)}"
        out = self.tree.read(stem + ".txt")
        if out is None:
            return CmdResult(args, "", f"{args[0]}: not recorded in snapshot {self.source.name}", 127)
        code_text = (self.tree.read(stem + ".exit") or "0").strip()
        # An exit status is 0-255 (or a negative signal number): anything else recorded there is
        # not one, and reads as a failure (1), never as an error of ours (int() of 5000 digits).
        code = int(code_text) if re.fullmatch(r"-?[0-9]{1,10}", code_text) else 1
        return CmdResult(args, out, self.tree.read(stem + ".err") or "", code)


def _on_walk(parts: tuple[str, ...], units: tuple[str, ...]) -> bool:
    """Whether walking a pattern (`units`: a recorder glob's components, matched by fnmatch) looked
    at the path of `parts`: every component matches the pattern's at that depth, so the walk listed
    or opened it (a path deeper than the pattern is inside what the pattern reached: the shorter of
    the two decides, hence strict=False)."""
    return all(fnmatch.fnmatchcase(part, unit) for part, unit in zip(parts, units, strict=False))


def open_host(root: str | None, writable: bool = False, name: str | None = None) -> Host:
    """The host for a `--root` option: this machine when None or "/"; a folder where a machine's
    procfs and sysfs are mounted (a pod's /host) is that machine, its files read there and its
    commands and NVML run here, as on the machine itself; anything else is a snapshot folder or
    archive. `name`, when given, names the host in reports instead of what it says of itself."""
    if name is not None:
        problem = hostname_problem(name)
        if problem:
            raise UsageError(f"host name {name!r}: {problem}")
    host = _open(root, writable)
    if name is not None:
        host.name = name
    return host


def _open(root: str | None, writable: bool) -> Host:
    if root is None or os.path.realpath(root) == "/":
        return LocalHost()
    mounted = inspect_root(root)
    if mounted.live:
        return LocalHost(root, live_mount=True)
    problem = mounted.problem()
    if problem:
        raise UsageError(f"{root}: {problem}")
    return SnapshotHost(root, writable=writable)
