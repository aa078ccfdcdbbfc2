"""Writing a file at a path the user named: `--output FORMAT:PATH`, `baseline save PATH`,
`snapshot -o PATH`, `report merge --output`; and adding a line to one (`append_line`: a host key
to known_hosts, which other programs append to as well).

PATH is a regular file, replaced whole, or a new one. Anything else found there is refused, never
followed or replaced: a symbolic link (even to a regular file: as root, `junit:/dev/stdout` used to
replace the /dev/stdout link itself, and `baseline save /dev/null` the device node), a FIFO, a
device, a socket or a folder. The refusal is a UsageError of one line naming the path and what to
give instead (exit 64).

The file is written by nodeagent.core.atomic (a temporary file beside it, renamed over it) in the
folder held open, so that every step happens in that one folder: what is at PATH is looked at
before writing and again just before the rename, and the file there after it must be the one
written.

Standard library only (nodeagent.host.recorder imports it on this machine, lazily).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from nodeagent.core.atomic import write_atomic
from nodeagent.core.errors import UsageError

__all__ = ["append_line", "check_target", "write_file"]

Data = bytes | Callable[[BinaryIO], object]


@dataclass(frozen=True)
class _Target:
    """The path and how messages name it."""

    path: Path
    where: str | None  # what the user wrote (`--output junit:PATH`); None: the path itself
    stdout_hint: str | None  # how to ask for standard output instead (`junit:- for standard output`)

    def say(self, what: str) -> str:
        """`what`, after the option as written: `--output F:P: the folder ...`, or `P: the folder ...`."""
        return f"{self.where or self.path}: {what}"

    def refuse(self, what: str) -> UsageError:
        """A refusal about the path itself: `--output F:P: P is ...`, or `P: is ...` (named once)."""
        return UsageError(f"{self.where}: {self.path} {what}" if self.where else f"{self.path}: {what}")


def write_file(
    path: Path,
    data: Data,
    where: str | None = None,
    *,
    mode: int | None = None,
    stdout_hint: str | None = None,
    make_folders: bool = False,
) -> None:
    """`data` (bytes, or a callable writing into the binary file it is given) replaces the regular
    file at `path`, or makes a new one (module docstring).

    - `where`: how messages start (the option as the user wrote it); None: with the path;
    - `mode`: the new file's permission bits; None: those of the file it replaces, else what open()
      would give (node_exporter, another user, reads a report);
    - `stdout_hint`: what to give for standard output, added to a refusal (`junit:- for standard
      output`), when the command has that;
    - `make_folders`: create the missing folders first (a snapshot's `-o out/node1.tar.gz`)."""
    target = _Target(path, where, stdout_hint)
    if make_folders:
        _make_folders(target)
    folder = _open_folder(target)
    try:
        before = _regular_or_absent(target, folder)
        if mode is None:
            mode = stat.S_IMODE(before.st_mode) if before is not None else _new_file_mode()
        try:
            ours = write_atomic(
                path.name,
                data,
                mode=mode,
                folder_fd=folder,
                before_replace=lambda: _regular_or_absent(target, folder),
                # The O_PATH handle cannot be synced, and a folder one may write but not read
                # cannot be opened to sync it: the file itself is synced all the same.
                sync_folder=False,
            )
        except OSError as e:
            raise UsageError(target.say(f"cannot write it ({e.strerror or e})")) from None
        _check_replaced(target, folder, ours)
    finally:
        os.close(folder)


def append_line(path: Path, line: str, where: str | None = None, *, mode: int = 0o600) -> None:
    """`line` added at the end of the regular file at `path`, or of a new one with `mode`; refused
    as write_file refuses (a link, a device, a FIFO, a folder). One write(2) with O_APPEND, so lines
    that other processes append at the same moment (ssh adding its own host keys) are kept whole
    and none is lost, which replacing the file could not promise."""
    target = _Target(path, where, None)
    data = line.encode() if line.endswith("\n") else f"{line}\n".encode()
    folder = _open_folder(target)
    try:
        # O_NOFOLLOW: a link is refused, not followed; O_NONBLOCK: a FIFO cannot hold the open.
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(path.name, flags, mode, dir_fd=folder)
        except OSError:
            _regular_or_absent(target, folder)  # refuses what is there, in words
            raise
    except OSError as e:
        raise UsageError(target.say(f"cannot write it ({e.strerror or e})")) from None
    finally:
        os.close(folder)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise target.refuse(_not_a_file(target, st))
        _write_all(fd, data, target)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes, target: _Target) -> None:
    try:
        written = os.write(fd, data)
        while written < len(data):  # a regular file takes it whole but on a full disk or a signal
            written += os.write(fd, data[written:])
    except OSError as e:
        raise UsageError(target.say(f"cannot write it ({e.strerror or e})")) from None


def check_target(path: Path, where: str | None = None, *, stdout_hint: str | None = None) -> None:
    """Refuse now what write_file would refuse (checked again when writing): a command that takes
    a while before it writes (a fleet's baseline) fails at once on a link or a device."""
    _regular_or_absent(_Target(path, where, stdout_hint), None)


def _make_folders(target: _Target) -> None:
    try:
        os.makedirs(target.path.parent, exist_ok=True)
    except OSError as e:
        raise UsageError(
            target.say(f"cannot create the folder {target.path.parent} ({e.strerror or e})")
        ) from None


def _open_folder(target: _Target) -> int:
    """The target's folder, open: the temporary file, the checks and the rename all happen in it,
    even if its path is renamed or re-linked meanwhile."""
    parent = target.path.parent
    # O_PATH (Linux): a handle for the *at() calls, so a folder one may write but not list works.
    flags = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC
    try:
        return os.open(parent, flags)
    except (FileNotFoundError, NotADirectoryError):
        raise UsageError(target.say(f"the folder {parent} does not exist; create it first")) from None
    except OSError as e:
        raise UsageError(target.say(f"cannot open the folder {parent} ({e.strerror or e})")) from None


def _regular_or_absent(target: _Target, folder: int | None) -> os.stat_result | None:
    """What is at the target, never following a link: a regular file's stat, None when nothing is
    there; anything else is refused with what to do instead."""
    path = target.path
    try:
        st = os.lstat(path.name if folder is not None else path, dir_fd=folder)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise UsageError(target.say(f"{path.parent} is not a folder; give a file path in a folder")) from None
    except OSError as e:
        raise UsageError(target.say(f"cannot look at {path} ({e.strerror or e})")) from None
    if stat.S_ISREG(st.st_mode):
        return st
    raise target.refuse(_not_a_file(target, st))


def _not_a_file(target: _Target, st: os.stat_result) -> str:
    """Why a target that is not a regular file is refused, and what to give instead."""
    stdout = f", or {target.stdout_hint}" if target.stdout_hint else ""
    if stat.S_ISDIR(st.st_mode):
        return "is a directory; give a file name inside it"
    if stat.S_ISLNK(st.st_mode):
        with contextlib.suppress(OSError):
            return (
                f"is a symbolic link (to {os.readlink(target.path)}), which is never followed or "
                f"replaced; give the file's own path{stdout}"
            )
        return f"is a symbolic link, which is never followed or replaced; give the file's own path{stdout}"
    kinds = (
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    kind = next((k for test, k in kinds if test(st.st_mode)), "not a regular file")
    return f"is {kind}, not a regular file; give a file path{stdout}"


def _check_replaced(target: _Target, folder: int, ours: os.stat_result) -> None:
    """After the rename the target must be the file just written: else something else wrote or
    linked there at the same moment, and the command must not claim it wrote the file."""
    try:
        now = os.lstat(target.path.name, dir_fd=folder)
    except OSError as e:
        raise target.refuse(f"changed right after it was written ({e.strerror or e})") from None
    if (now.st_dev, now.st_ino) != (ours.st_dev, ours.st_ino):
        raise target.refuse(
            "was replaced by something else while it was written; is another program writing the same path?"
        )


def _new_file_mode() -> int:
    """What open() would give a new file: 0666 less the umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask
