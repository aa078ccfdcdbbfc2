"""File trees a host reads: the Tree interface, and the live file system (or a directory holding a
copy of one). Recorded trees held in memory are in nodeagent.host.archive.

A recorded tree holds sysfs links such as `bus/pci/devices/X -> ../../../devices/pci0000:00/X`;
they resolve against the tree, and an absolute or escaping link never reaches the real machine's
files.

Runs on nodes too (the recorder, nodeagent.cluster.pull): standard library only, Python 3.8.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from abc import ABC, abstractmethod

from nodeagent.host.base import max_read_bytes, too_large

# Path resolution is bounded as the kernel's is, so a hostile recording (a link whose target is 400k
# "./", a chain of links) is "not found", never slow: at most MAX_LINKS links followed per path
# (MAXSYMLINKS, https://github.com/torvalds/linux/blob/master/include/linux/namei.h), a path or a
# link target at most PATH_MAX bytes and a name at most NAME_MAX (ENAMETOOLONG,
# https://github.com/torvalds/linux/blob/master/include/uapi/linux/limits.h). Resolution is then
# linear in what it reads: at most (MAX_LINKS + 1) * PATH_MAX characters of components.
MAX_LINKS = 40
_MAX_LINKS = MAX_LINKS  # the name older code imported
PATH_MAX = 4096
NAME_MAX = 255

FILE, DIR, LINK = "file", "dir", "link"


# O_PATH (Linux): a handle on the path itself, no read permission needed; 0 elsewhere (a plain open).
_O_PATH = getattr(os, "O_PATH", 0)


_CHUNK = 1 << 16  # most sysfs and procfs files are one page; environ and mountinfo can be longer


class TooLarge(OSError):
    """A file longer than the read limit (base.MAX_READ_BYTES): unreadable, not truncated."""


def _read_all(fd: int) -> bytes:
    """All of `fd` until its end (sysfs and procfs files may return less than asked before it);
    TooLarge past the read limit, having read one byte more than it and no more."""
    limit = max_read_bytes()
    chunks = []
    size = 0
    while size <= limit:
        chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > limit:
        raise TooLarge(errno.EFBIG, too_large(limit))
    return b"".join(chunks)


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace").rstrip("\x00")


_NOT_REGULAR = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a folder"),
)


def _not_regular(mode: int) -> str:
    """Why a non-regular file is never opened: a FIFO blocks open() until a writer comes (forever,
    in a recording), a device may act on being opened; O_NONBLOCK would not stop the latter."""
    kind = next((name for test, name in _NOT_REGULAR if test(mode)), "not a regular file")
    return f"unreadable: {kind}, not a regular file (never opened)"


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
        """The canonical host path with every link followed, or None when a component is missing,
        a path or link target is longer than PATH_MAX, or more than MAX_LINKS links are on the way.

        Linear in what it reads: the components wait on a stack (next one last), a link's target is
        split once and pushed, and the resolved prefixes are a stack too (".." pops one)."""
        if len(path) > PATH_MAX:
            return None
        pending = [c for c in reversed(path.split("/")) if c and c != "."]
        done = ["/"]  # done[-1] is the resolved path so far; done[i] its first i components
        hops = 0
        while pending:
            comp = pending.pop()
            if comp == "..":
                if len(done) > 1:
                    done.pop()
                continue
            if len(comp) > NAME_MAX:
                return None
            current = done[-1]
            candidate = current + comp if current == "/" else current + "/" + comp
            if len(candidate) > PATH_MAX:
                return None
            kind = self.kind(candidate)
            if kind is None:
                return None
            if kind == LINK:
                hops += 1
                target = self.link_target(candidate)
                if target is None or hops > MAX_LINKS or len(target) > PATH_MAX:
                    return None
                pending.extend(c for c in reversed(target.split("/")) if c and c != ".")
                if target.startswith("/"):
                    del done[1:]
                continue
            done.append(candidate)
        return done[-1]

    def unreadable(self, path: str) -> str | None:
        """Why a file that is there does not read (Host.unreadable); None when absent or readable."""
        why: dict[str, str] = self.__dict__.get("_why") or {}
        if not why:
            return None
        return why.get(path) or why.get(self.resolve(path) or "")

    def _note(self, path: str, reason: str) -> None:
        why = self.__dict__.setdefault("_why", {})
        why[path] = reason

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

    # -- for walking many paths at once (nodeagent.host.globwalk) --------------------------------
    def scan(self, folder: str) -> dict[str, str] | None:
        """A folder's entries with their kinds (links not followed); None when it is not a folder."""
        real = self.resolve(folder)
        if real is None or self.kind(real) != DIR:
            return None
        prefix = real.rstrip("/") + "/"
        found = {name: self.kind(prefix + name) for name in self.entries(real) or []}
        return {name: kind for name, kind in found.items() if kind is not None}

    def fetch(self, path: str) -> tuple[str, bytes | str | None] | None:
        """What is at `path`, a link there not followed: (FILE, contents, or None when unreadable),
        (DIR, None) or (LINK, target); None when nothing is."""
        parent = self.resolve(posixpath.dirname(path) or "/")
        if parent is None:
            return None
        entry = posixpath.join(parent, posixpath.basename(path))
        kind = self.kind(entry)
        if kind == LINK:
            return LINK, self.link_target(entry)
        if kind == FILE:
            return FILE, self.file_bytes(entry)
        return None if kind is None else (DIR, None)

    def write(self, path: str, value: str) -> None:
        raise PermissionError(errno.EROFS, "read-only tree", path)

    # Whole configuration files (`tune --apply --persist`: /etc/sysctl.d, a TuneD profile).
    def put_file(self, path: str, text: str) -> None:
        raise PermissionError(errno.EROFS, "read-only tree", path)

    def remove_file(self, path: str) -> None:
        raise PermissionError(errno.EROFS, "read-only tree", path)

    def remove_dir(self, path: str) -> None:
        raise PermissionError(errno.EROFS, "read-only tree", path)


class LiveTree(Tree):
    """The real file system below `root` ("/" is this machine; another folder, a writable copy)."""

    def __init__(self, root: str = "/") -> None:
        self.root = os.path.abspath(root)
        self._live = self.root == "/"
        self._why: dict[str, str] = {}

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
        outer = self._outer(path)
        if not self._live:
            # A recording's folder may hold anything: a FIFO would block open() forever, a device act
            # on it. Only regular files are opened (sysfs and procfs attributes on "/" are regular).
            try:
                mode = os.stat(outer).st_mode
            except OSError:
                return None
            if not stat.S_ISREG(mode):
                self._note(path, _not_regular(mode))
                return None
        try:
            fd = os.open(outer, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            # EACCES, EIO, EINVAL, ENODEV: sysfs attributes a driver refuses to show read as absent.
            return None
        try:
            return _read_all(fd)
        except TooLarge as e:
            self._note(path, e.strerror or "unreadable")
            return None
        except OSError:
            return None
        finally:
            os.close(fd)

    def entries(self, path: str) -> list[str] | None:
        try:
            return sorted(os.listdir(self._outer(path)))
        except OSError:
            return None

    # The walk's primitives (Tree.scan, Tree.fetch) on `folder`s and parents it already resolved, so
    # the kernel's view of the path is the tree's: no link is left on the way for it to follow.
    def scan(self, folder: str) -> dict[str, str] | None:
        try:
            with os.scandir(self._outer(folder)) as it:
                # DirEntry's kinds come from readdir's d_type on /sys and /proc: no stat per entry.
                return {
                    e.name: LINK if e.is_symlink() else DIR if e.is_dir(follow_symlinks=False) else FILE
                    for e in it
                }
        except OSError:
            return None

    def fetch(self, path: str) -> tuple[str, bytes | str | None] | None:
        outer = self._outer(path)
        if not self._live:  # as in file_bytes: what is not a regular file is never opened
            try:
                mode = os.lstat(outer).st_mode
            except OSError:
                return None
            if stat.S_ISLNK(mode):
                return LINK, self.link_target(path)
            if stat.S_ISDIR(mode):
                return DIR, None
            if not stat.S_ISREG(mode):
                self._note(path, _not_regular(mode))
                return FILE, None
        try:
            # One system call answers the common case (a file: its contents follow); O_NOFOLLOW
            # turns a link at the end into ELOOP instead of opening its target.
            fd = os.open(outer, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.ENOTDIR):
                return None
            kind = self.kind(path)  # ELOOP (a link), EACCES (there, but not for us to read)
            if kind == LINK:
                return LINK, self.link_target(path)
            return None if kind is None else (kind, None)
        try:
            return FILE, _read_all(fd)
        except TooLarge as e:
            self._note(path, e.strerror or "unreadable")
            return FILE, None
        except IsADirectoryError:
            return DIR, None
        except OSError:
            return FILE, None
        finally:
            os.close(fd)

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
        # The kernel's own resolution, exact for "/": the path it opened, as /proc/self/fd names it
        # (three system calls; os.path.realpath makes an lstat per component).
        try:
            fd = os.open(path, _O_PATH | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # no /proc mounted
            real = os.path.realpath(path)
        finally:
            os.close(fd)
        return real if real.startswith("/") else None  # "anon_inode:..." and the like name no file

    def read_bytes(self, path: str) -> bytes | None:
        if self._live:  # one open() instead of a resolve walk: the hot path of every check
            return self.file_bytes(path)
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

    def _folder(self, path: str) -> str:
        """The real path of folder `path` inside the tree, created (0755) where missing."""
        real = self.resolve(path)
        if real is not None:
            return real
        parent = posixpath.dirname(path.rstrip("/")) or "/"
        made = posixpath.join(self._folder(parent), posixpath.basename(path.rstrip("/")))
        os.mkdir(self._outer(made), 0o755)
        return made

    def _entry(self, path: str) -> str:
        """The outer path of the entry itself (its folder resolved, a link at the end kept)."""
        parent = self.resolve(posixpath.dirname(path) or "/")
        if parent is None:
            raise FileNotFoundError(errno.ENOENT, "no such folder", posixpath.dirname(path))
        return self._outer(posixpath.join(parent, posixpath.basename(path)))

    def put_file(self, path: str, text: str) -> None:
        """Create or replace a whole file (mode 0644), missing folders created, so that a crash
        leaves the old file or the new one, never half of one (nodeagent.core.atomic)."""
        # Imported here: this module also runs on nodes (nodeagent.cluster.pull ships its source),
        # where only the host modules are; files are put into trees on this machine only.
        from nodeagent.core.atomic import write_atomic

        folder = self._outer(self._folder(posixpath.dirname(path) or "/"))
        write_atomic(os.path.join(folder, posixpath.basename(path)), text, mode=0o644)

    def remove_file(self, path: str) -> None:
        os.unlink(self._entry(path))

    def remove_dir(self, path: str) -> None:
        """Remove an empty folder (OSError ENOTEMPTY otherwise)."""
        os.rmdir(self._entry(path))
