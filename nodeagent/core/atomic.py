"""Replacing a file whole, so that a reader or a crash sees the old file or the new one, never half.

`write_atomic` is the one way nodeagent writes a file that someone else reads or that must survive
a crash: the state folder's journals and profiles, baselines, `--output` reports, the persistent
files a tuner puts into a `--root` tree, snapshot archives. Its steps:

1. a temporary file beside the target (`.NAME.<8 hex digits>.tmp`), created exclusively
   (O_CREAT|O_EXCL|O_NOFOLLOW: never a file that was there, never through a link), 0600 until
   written, so nobody reads it half-written;
2. the data written, the file given its `mode` (fchmod: the umask plays no part) and fsynced;
3. `before_replace()`, the caller's last look at the target (safe_write.py refuses a link that
   appeared while writing), then rename(2) over the target: atomic within one file system
   (https://man7.org/linux/man-pages/man2/rename.2.html);
4. the folder fsynced, so the rename itself is on disk: fsync(2) of a file does not make its
   directory entry durable (fsync(2), NOTES: "an explicit fsync() on a file descriptor for the
   directory is also needed").

Every step but the last works on the folder through one descriptor (`folder_fd`, or one opened
here), so the temporary file, the checks and the rename all happen in the same folder even if its
path is renamed or re-linked meanwhile. On any error, or an exception from `before_replace` or
from a `data` callable, the temporary file is removed and the error raised as it is: callers
turn OSError into their own message (a full disk in the state folder is exit 74 there).

Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Callable
from typing import BinaryIO

__all__ = ["TEMP_NAME", "temp_target", "write_atomic"]

# The temporary files of write_atomic: what a killed writer leaves behind (nodeagent.tuning.state
# removes them from the state folder). The target's name is cut to 200 characters so the whole name
# fits NAME_MAX (255).
TEMP_NAME = re.compile(r"^\.(?P<target>.{1,200})\.[0-9a-f]{8}\.tmp$", re.DOTALL)
_NAME_KEPT = 200
_ATTEMPTS = 100  # names tried before giving up (each has 2**32 random values: a clash is rare)

# O_PATH (Linux): a handle on the folder for the *at() calls that needs no read permission, so a
# folder one may write but not list works; a plain read-only open elsewhere.
_FOLDER_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

Data = str | bytes | Callable[[BinaryIO], object]


def temp_target(name: str) -> str | None:
    """The (possibly cut) name of the file a temporary file of write_atomic was for, or None when
    `name` is not one."""
    m = TEMP_NAME.match(name)
    return m.group("target") if m else None


def write_atomic(
    path: str | os.PathLike[str],
    data: Data,
    *,
    mode: int,
    folder_fd: int | None = None,
    make_folders: bool = False,
    before_replace: Callable[[], object] | None = None,
    sync_folder: bool = True,
) -> os.stat_result:
    """Replace the file at `path` with `data` (see the module docstring); the written file's stat.

    - `data`: text (written as UTF-8), bytes, or a callable that writes into the binary file it is
      given (a stream too large to hold whole, such as a snapshot archive);
    - `mode`: the permission bits of the new file, exactly;
    - `folder_fd`: an open folder `path` is a bare name in (the caller's own checks run in it too);
      otherwise `path`'s parent is opened here;
    - `make_folders`: create the missing folders of `path` first (0777 less the umask);
    - `before_replace`: called after the data is synced, just before the rename; what it raises
      stops the write, the target untouched;
    - `sync_folder`: False when a folder that cannot be synced is acceptable (some file systems
      refuse fsync on a folder; an O_PATH handle cannot be synced): then it is tried, not required.
    """
    path = os.fspath(path)
    name = os.path.basename(path)
    if folder_fd is not None and name != path:
        raise ValueError(f"with folder_fd, give the file's bare name, not {path!r}")
    parent = os.path.dirname(path) or "."
    if folder_fd is None and make_folders:
        os.makedirs(parent, exist_ok=True)
    folder = folder_fd if folder_fd is not None else os.open(parent, _FOLDER_FLAGS)
    try:
        written = _replace(folder, name, data, mode, before_replace)
        _sync(folder, required=sync_folder)
    finally:
        if folder_fd is None:
            os.close(folder)
    return written


def _replace(
    folder: int, name: str, data: Data, mode: int, before_replace: Callable[[], object] | None
) -> os.stat_result:
    fd, tmp = _create_temp(folder, name)
    try:
        with open(fd, "wb", closefd=True) as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
            written = os.fstat(f.fileno())
        if before_replace is not None:
            before_replace()
        os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=folder)
        raise
    return written


def _create_temp(folder: int, name: str) -> tuple[int, str]:
    base = name[:_NAME_KEPT]
    for _ in range(_ATTEMPTS):
        tmp = f".{base}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, _TEMP_FLAGS, 0o600, dir_fd=folder), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name for {name} after {_ATTEMPTS} tries")


def _sync(folder: int, required: bool) -> None:
    """fsync the folder (reopened for reading: an O_PATH handle cannot be synced)."""
    try:
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        if required:
            raise
        return
    try:
        os.fsync(fd)
    except OSError:
        if required:
            raise
    finally:
        os.close(fd)
