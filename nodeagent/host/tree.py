"""File trees a host reads: the live file system, a directory holding a copy, or a tar archive in memory.

A recorded tree holds sysfs links such as `bus/pci/devices/X -> ../../../devices/pci0000:00/X`;
they resolve against the tree, and an absolute or escaping link never reaches the real machine's
files. Archives are read into memory rather than extracted: creating thousands of small files is
slow on many disks (seconds for one hwloc tree here), reading them from memory is not.
"""

from __future__ import annotations

import errno
import io
import os
import posixpath
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import BinaryIO

from nodeagent.host.base import MAX_READ_BYTES

_MAX_LINKS = 40  # as the kernel's own limit on nested symbolic links (MAXSYMLINKS)

FILE, DIR, LINK = "file", "dir", "link"


def _decode(data: bytes) -> str:
    return data[:MAX_READ_BYTES].decode("utf-8", errors="replace").rstrip("\x00")


class Tree(ABC):
    """A tree of files addressed by host paths ("/sys/..."), links resolved inside the tree."""

    # -- primitives on unresolved host paths ---------------------------------------------------
    @abstractmethod
    def kind(self, path: str) -> str | None:
        """FILE, DIR or LINK for the entry itself (links not followed), None when absent."""

    @abstractmethod
    def link_target(self, path: str) -> str | None: ...

    @abstractmethod
    def file_bytes(self, path: str) -> bytes | None: ...

    def file_text(self, path: str) -> str | None:
        data = self.file_bytes(path)
        return None if data is None else _decode(data)

    @abstractmethod
    def entries(self, path: str) -> list[str] | None: ...

    # -- resolution and the operations built on it ---------------------------------------------
    def resolve(self, path: str) -> str | None:
        """The canonical host path with every link followed, or None when a component is missing."""
        pending = [c for c in path.split("/") if c]
        current = "/"
        hops = 0
        while pending:
            comp = pending.pop(0)
            if comp == ".":
                continue
            if comp == "..":
                current = posixpath.dirname(current)
                continue
            candidate = posixpath.join(current, comp)
            kind = self.kind(candidate)
            if kind is None:
                return None
            if kind == LINK:
                hops += 1
                target = self.link_target(candidate)
                if target is None or hops > _MAX_LINKS:
                    return None
                pending = [c for c in target.split("/") if c] + pending
                if target.startswith("/"):
                    current = "/"
                continue
            current = candidate
        return current

    def read(self, path: str) -> str | None:
        real = self.resolve(path)
        return None if real is None or self.kind(real) != FILE else self.file_text(real)

    def read_bytes(self, path: str) -> bytes | None:
        real = self.resolve(path)
        return None if real is None or self.kind(real) != FILE else self.file_bytes(real)

    def listdir(self, path: str) -> list[str] | None:
        real = self.resolve(path)
        return None if real is None or self.kind(real) != DIR else self.entries(real)

    def readlink(self, path: str) -> str | None:
        parent = self.resolve(posixpath.dirname(path.rstrip("/")) or "/")
        if parent is None:
            return None
        entry = posixpath.join(parent, posixpath.basename(path.rstrip("/")))
        return self.link_target(entry) if self.kind(entry) == LINK else None

    def is_dir(self, path: str) -> bool:
        real = self.resolve(path)
        return real is not None and self.kind(real) == DIR

    def lexists(self, path: str) -> bool:
        """`path` resolves, or is itself a link (dangling included)."""
        return self.resolve(path) is not None or self.readlink(path) is not None

    def write(self, path: str, value: str) -> None:
        raise PermissionError(errno.EROFS, "read-only tree", path)


class LiveTree(Tree):
    """The real file system below `root` ("/" is this machine; another folder, a writable copy)."""

    def __init__(self, root: str = "/") -> None:
        self.root = os.path.abspath(root)
        self._live = self.root == "/"

    def _outer(self, path: str) -> str:
        return path if self._live else self.root + (path if path != "/" else "")

    def kind(self, path: str) -> str | None:
        outer = self._outer(path)
        if os.path.islink(outer):
            return LINK
        if os.path.isdir(outer):
            return DIR
        return FILE if os.path.lexists(outer) else None

    def link_target(self, path: str) -> str | None:
        try:
            return os.readlink(self._outer(path))
        except OSError:
            return None

    def file_bytes(self, path: str) -> bytes | None:
        try:
            with open(self._outer(path), "rb") as f:
                return f.read(MAX_READ_BYTES)
        except OSError:
            # EACCES, EIO, EINVAL, ENODEV: sysfs attributes a driver refuses to show read as absent.
            return None

    def entries(self, path: str) -> list[str] | None:
        try:
            return sorted(os.listdir(self._outer(path)))
        except OSError:
            return None

    # On "/" the kernel resolves the links on the way to a path: one system call, no walk.
    def lexists(self, path: str) -> bool:
        return os.path.lexists(path) if self._live else super().lexists(path)

    def listdir(self, path: str) -> list[str] | None:
        return self.entries(path) if self._live else super().listdir(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path) if self._live else super().is_dir(path)

    def readlink(self, path: str) -> str | None:
        if not self._live:
            return super().readlink(path)
        try:
            return os.readlink(path)
        except OSError:
            return None

    def resolve(self, path: str) -> str | None:
        if not self._live:
            return super().resolve(path)
        real = os.path.realpath(path)  # the kernel's own resolution: fast, and exact for "/"
        return real if os.path.lexists(real) else None

    def read_bytes(self, path: str) -> bytes | None:
        if self._live:  # one open() instead of a resolve walk: the hot path of every check
            try:
                with open(path, "rb") as f:
                    return f.read(MAX_READ_BYTES)
            except OSError:
                return None
        return super().read_bytes(path)

    def read(self, path: str) -> str | None:
        if not self._live:
            return super().read(path)
        data = self.read_bytes(path)
        return None if data is None else _decode(data)

    def write(self, path: str, value: str) -> None:
        real = self.resolve(path)
        if real is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", path)
        with open(self._outer(real), "w") as f:
            f.write(value)


_MAX_ARCHIVE_BYTES = 1 << 30  # a snapshot is a few MB; refuse a decompression bomb


def _decompressed(archive: str | bytes) -> bytes:
    """The archive's tar bytes (from a file, or already in memory as pulled over SSH).
    Decompressing in one go is ~20x faster than tarfile's stream reader."""
    import bz2
    import gzip
    import lzma

    raw: BinaryIO = io.BytesIO(archive) if isinstance(archive, bytes) else open(archive, "rb")  # noqa: SIM115
    with raw:
        head = raw.read(6)
        raw.seek(0)
        limit = _MAX_ARCHIVE_BYTES + 1
        stream: io.BufferedIOBase | BinaryIO
        if head.startswith(b"BZh"):
            stream = bz2.BZ2File(raw)
        elif head.startswith(b"\x1f\x8b"):
            stream = gzip.GzipFile(fileobj=raw)
        elif head.startswith(b"\xfd7zXZ"):
            stream = lzma.LZMAFile(raw)  # noqa: SIM115 - closed with `raw`
        else:
            stream = raw
        data = stream.read(limit)
    if len(data) > _MAX_ARCHIVE_BYTES:
        raise ValueError(f"larger than {_MAX_ARCHIVE_BYTES >> 20} MiB once decompressed")
    return data


class MemoryTree(Tree):
    """A tree held in memory: folders, links and files by absolute path."""

    def __init__(
        self,
        dirs: Iterable[str] = (),
        links: Mapping[str, str] | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> None:
        self._kinds: dict[str, str] = {"/": DIR}
        self._links: dict[str, str] = {}
        self._files: dict[str, bytes] = {}
        self._children: dict[str, set[str]] = {"/": set()}
        for path in dirs:
            self._add(path, DIR)
        for path, target in (links or {}).items():
            self._add(path, LINK)
            self._links[path] = target
        for path, data in (files or {}).items():
            self._add(path, FILE)
            self._files[path] = data

    def _add(self, path: str, kind: str) -> None:
        self._kinds[path] = kind
        if kind == DIR:
            self._children.setdefault(path, set())
        child = path
        parent = posixpath.dirname(child)
        while True:  # tar files may omit folder entries: create the parents they imply
            siblings = self._children.setdefault(parent, set())
            siblings.add(posixpath.basename(child))
            if parent in self._kinds:
                break
            self._kinds[parent] = DIR
            child, parent = parent, posixpath.dirname(parent)

    def kind(self, path: str) -> str | None:
        return self._kinds.get(path)

    def link_target(self, path: str) -> str | None:
        return self._links.get(path)

    def file_bytes(self, path: str) -> bytes | None:
        return self._files.get(path)

    def entries(self, path: str) -> list[str] | None:
        children = self._children.get(path)
        return None if children is None else sorted(children)

    def top_folders(self) -> list[str]:
        return sorted(c for c in self._children["/"] if self._kinds.get("/" + c) == DIR)


class ArchiveTree(MemoryTree):
    """A tar archive read into memory. Devices, FIFOs and hard links are left out."""

    def __init__(self, archive: str | bytes) -> None:
        import tarfile

        super().__init__()
        with tarfile.open(fileobj=io.BytesIO(_decompressed(archive)), mode="r:") as tf:
            for member in tf:
                path = posixpath.normpath("/" + member.name)
                if path == "/":
                    continue
                if member.isdir():
                    self._add(path, DIR)
                elif member.issym():
                    self._add(path, LINK)
                    self._links[path] = member.linkname
                elif member.isfile():
                    f = tf.extractfile(member)
                    self._files[path] = f.read(MAX_READ_BYTES) if f else b""
                    self._add(path, FILE)


class SubTree(Tree):
    """A folder of another tree seen as the root (hwloc archives hold one top folder)."""

    def __init__(self, base: Tree, prefix: str) -> None:
        self.base = base
        self.prefix = prefix.rstrip("/")

    def _outer(self, path: str) -> str:
        return self.prefix + (path if path != "/" else "")

    def kind(self, path: str) -> str | None:
        return self.base.kind(self._outer(path))

    def link_target(self, path: str) -> str | None:
        return self.base.link_target(self._outer(path))

    def file_bytes(self, path: str) -> bytes | None:
        return self.base.file_bytes(self._outer(path))

    def entries(self, path: str) -> list[str] | None:
        return self.base.entries(self._outer(path))

    def write(self, path: str, value: str) -> None:
        real = self.resolve(path)
        if real is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", path)
        self.base.write(self._outer(real), value)
