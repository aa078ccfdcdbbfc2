"""Recorded trees held in memory: a tar archive (`nodeagent snapshot`, hwloc's test trees), a pulled
recording (nodeagent.cluster), or a folder of either seen as the root.

Archives are read into memory rather than extracted: creating thousands of small files is slow on
many disks (seconds for one hwloc tree here), reading them from memory is not.
"""

from __future__ import annotations

import errno
import io
import posixpath
from collections.abc import Iterable, Mapping
from typing import BinaryIO

from nodeagent.host.base import MAX_READ_BYTES
from nodeagent.host.tree import DIR, FILE, LINK, Tree

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
        self._resolved: dict[str, str | None] = {}
        for path in dirs:
            self._add(path, DIR)
        for path, target in (links or {}).items():
            self._add(path, LINK)
            self._links[path] = target
        for path, data in (files or {}).items():
            self._add(path, FILE)
            self._files[path] = data

    def _add(self, path: str, kind: str) -> None:
        """Add one normalised absolute path (as tar members and pulled recordings hold them)."""
        self._resolved.clear()
        self._kinds[path] = kind
        if kind == DIR:
            self._children.setdefault(path, set())
        child = path
        while True:  # tar files may omit folder entries: create the parents they imply
            head, _, name = child.rpartition("/")
            parent = head or "/"
            self._children.setdefault(parent, set()).add(name)
            if parent in self._kinds:
                break
            self._kinds[parent] = DIR
            child = parent

    def resolve(self, path: str) -> str | None:
        """Tree.resolve, remembered folder by folder: the tree does not change once built, and the
        checks read hundreds of files below the same few folders (a fleet's checks spent a third of
        their time resolving the same prefixes again)."""
        try:
            return self._resolved[path]
        except KeyError:
            pass
        head, _, name = path.rstrip("/").rpartition("/")
        if name in ("", ".", "..") or not path.startswith("/"):
            real = super().resolve(path)
        else:
            real = self._step(self.resolve(head or "/"), name)
        self._resolved[path] = real
        return real

    def _step(self, folder: str | None, name: str) -> str | None:
        """`name` in the resolved `folder`, a link there followed."""
        if folder is None:
            return None
        candidate = folder.rstrip("/") + "/" + name
        kind = self._kinds.get(candidate)
        if kind == LINK:
            return super().resolve(candidate)  # the full walk: a target may hold "..", and more links
        return None if kind is None else candidate

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

    def put_file(self, path: str, text: str) -> None:
        self.base.put_file(self._outer(path), text)

    def remove_file(self, path: str) -> None:
        self.base.remove_file(self._outer(path))

    def remove_dir(self, path: str) -> None:
        self.base.remove_dir(self._outer(path))
