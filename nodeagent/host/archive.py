"""Recorded trees held in memory: a tar archive (`nodeagent snapshot`, hwloc's test trees), a pulled
recording (nodeagent.cluster), or a folder of either seen as the root.

Archives are read into memory rather than extracted: creating thousands of small files is slow on
many disks (seconds for one hwloc tree here), reading them from memory is not.
"""

from __future__ import annotations

import bz2
import errno
import gzip
import io
import lzma
import posixpath
import tarfile
from collections.abc import Iterable, Mapping
from typing import BinaryIO

from nodeagent.host.base import env_limit, max_read_bytes, too_large
from nodeagent.host.tree import DIR, FILE, LINK, NAME_MAX, PATH_MAX, Tree

# A recording is a few MB (tens of thousands of small files); these stop a decompression bomb or a
# hostile archive while it is read, before it costs the memory: the decompressed bytes are counted
# chunk by chunk, the members one by one. Raise them with the environment variables when a real
# recording is that large.
MAX_ARCHIVE_MIB = 512
MAX_ARCHIVE_MIB_ENV = "NODEAGENT_MAX_ARCHIVE_MIB"
MAX_ARCHIVE_MEMBERS = 200_000
MAX_ARCHIVE_MEMBERS_ENV = "NODEAGENT_MAX_ARCHIVE_MEMBERS"
_CHUNK = 1 << 20
_BLOCK = 512  # a tar header


class ArchiveTooLarge(ValueError):
    """An archive past one of the limits above: its message is the whole story, for one line."""


def _decompressed(archive: str | bytes) -> bytes:
    """The archive's tar bytes (from a file, or already in memory as pulled over SSH), decompressed
    in chunks of 1 MiB and counted as they come: ArchiveTooLarge as soon as they pass the limit.
    (Chunks, not tarfile's stream reader: that is ~20x slower.)"""
    mib = env_limit(MAX_ARCHIVE_MIB_ENV, MAX_ARCHIVE_MIB)
    limit = mib << 20
    raw: BinaryIO = io.BytesIO(archive) if isinstance(archive, bytes) else open(archive, "rb")  # noqa: SIM115
    out = io.BytesIO()
    with raw:
        head = raw.read(6)
        raw.seek(0)
        stream: io.BufferedIOBase | BinaryIO
        if head.startswith(b"BZh"):
            stream = bz2.BZ2File(raw)
        elif head.startswith(b"\x1f\x8b"):
            stream = gzip.GzipFile(fileobj=raw)
        elif head.startswith(b"\xfd7zXZ"):
            stream = lzma.LZMAFile(raw)  # noqa: SIM115 - closed with `raw`
        else:
            stream = raw
        size = 0
        while True:
            chunk = stream.read(min(_CHUNK, limit + 1 - size))
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise ArchiveTooLarge(
                    f"larger than {mib} MiB decompressed (limit {MAX_ARCHIVE_MIB_ENV}); a recording is a "
                    "few MB: is this the right file?"
                )
            out.write(chunk)
    return out.getvalue()


def _too_long(path: str) -> bool:
    """A path the kernel could not have (ENAMETOOLONG): left out of the tree, so that it is absent."""
    return len(path) > PATH_MAX or any(len(name) > NAME_MAX for name in path.split("/"))


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
        their time resolving the same prefixes again). A loop over the components, not a recursion:
        a path may have 2048 of them."""
        try:
            return self._resolved[path]
        except KeyError:
            pass
        names = path.split("/")
        if len(path) > PATH_MAX or not path.startswith("/") or any(n in (".", "..") for n in names):
            real = None if len(path) > PATH_MAX else super().resolve(path)
            self._resolved[path] = real
            return real
        real = "/"
        prefix = ""
        for name in names[1:]:
            if not name:  # "//" or a trailing "/": what Tree.resolve makes of them
                continue
            prefix = f"{prefix}/{name}"
            known = self._resolved.get(prefix, self)
            if known is self:
                known = self._resolved[prefix] = self._step(real, name)
            if known is None:
                real = None
                break
            real = known  # type: ignore[assignment]
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


class ArchiveTree(MemoryTree):
    """A tar archive read into memory. Devices, FIFOs and hard links are left out, and so are paths
    longer than PATH_MAX or with a name longer than NAME_MAX. A file larger than the read limit is
    there, but unreadable (Tree.unreadable says why). More members than the limit, or a corrupt
    header after the first member, is an error (ArchiveTooLarge, ValueError), never a partial tree."""

    def __init__(self, archive: str | bytes) -> None:
        super().__init__()
        self._why: dict[str, str] = {}
        max_members = env_limit(MAX_ARCHIVE_MEMBERS_ENV, MAX_ARCHIVE_MEMBERS)
        read_limit = max_read_bytes()
        data = _decompressed(archive)
        count = 0
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
            for member in tf:
                count += 1
                if count > max_members:
                    raise ArchiveTooLarge(
                        f"more than {max_members} members (limit {MAX_ARCHIVE_MEMBERS_ENV}); a recording "
                        "holds tens of thousands: is this the right file?"
                    )
                if len(member.name) > 2 * PATH_MAX:
                    continue
                path = posixpath.normpath("/" + member.name)
                if path == "/" or _too_long(path):
                    continue
                if member.isdir():
                    self._add(path, DIR)
                elif member.issym():
                    self._add(path, LINK)
                    self._links[path] = member.linkname
                elif member.isfile():
                    if member.size > read_limit:
                        self._why[path] = too_large(read_limit)
                    else:
                        f = tf.extractfile(member)
                        self._files[path] = f.read() if f else b""
                    self._add(path, FILE)
            # tarfile stops quietly at a header it cannot read after the first one: an archive cut
            # short or corrupt there is an error, not a nearly empty node. What follows the last
            # member must be the end-of-archive zero blocks (or nothing).
            end = tf.offset
        rest = data[end : end + _BLOCK]
        if rest.strip(b"\x00"):
            raise ValueError(f"corrupt or truncated tar header at byte {end} (after {count} members)")


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

    def unreadable(self, path: str) -> str | None:
        real = self.resolve(path)
        return None if real is None else self.base.unreadable(self._outer(real))

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
