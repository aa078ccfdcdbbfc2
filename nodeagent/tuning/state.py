"""Where nodeagent keeps state (journals, profiles), and crash-safe file writes.

As root: /var/lib/nodeagent (FHS: variable state of a system service). Otherwise the XDG state
directory ($XDG_STATE_HOME, default ~/.local/state; XDG Base Directory Specification 0.8).
NODEAGENT_STATE_DIR overrides both (tests, and sites that keep state on a shared disk).

Applies and reverts hold the folder's lock (`lock`: flock(2) on <state>/lock), so two runs on one
machine never interleave: a second one waits up to NODEAGENT_LOCK_WAIT seconds (default 10) and
then stops with exit 75 (EX_TEMPFAIL, "try again"). As root the folder must be root's and not
writable by group or others (`check_folder`). An apply refuses to start with less than 1 MiB free
there (`check_free`, exit 74, EX_IOERR), and a save that fails half-way (ENOSPC, EIO) is exit 74
too, after every value is restored (nodeagent/tuning/apply.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from nodeagent.core import atomic
from nodeagent.core.errors import UsageError

STATE_ENV = "NODEAGENT_STATE_DIR"


def state_dir() -> Path:
    if os.environ.get(STATE_ENV):
        return Path(os.environ[STATE_ENV])
    if os.geteuid() == 0:
        return Path("/var/lib/nodeagent")
    xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(xdg) / "nodeagent"


def write_atomic(path: Path, data: str) -> None:
    """Replace the state file `path` with `data` so that a crash leaves the old file or the new one,
    never half (nodeagent.core.atomic), its folders created. State files are 0600: journals hold
    the old contents of the files an apply replaced. OSError is left to the caller (ENOSPC, EIO:
    StateDiskError there)."""
    atomic.write_atomic(path, data, mode=0o600, make_folders=True)


# -- one apply or revert at a time -------------------------------------------------------------------

LOCK_NAME = "lock"
LOCK_WAIT_ENV = "NODEAGENT_LOCK_WAIT"
LOCK_WAIT = 10.0  # seconds a second apply/revert waits for the first before giving up (exit 75)
EX_TEMPFAIL = 75  # sysexits.h: "try again later"
EX_IOERR = 74  # sysexits.h: an I/O error (the state disk is full or failing)
# An apply refuses to start with less free space than this in the state folder: a journal and a
# profile are a few KiB each, so this leaves them ample room and leaves the disk's last MiB alone.
MIN_FREE_BYTES = 1 << 20
# The temporary files a killed save leaves behind, removed by the next apply or revert under the
# lock: write_atomic's (nodeagent.core.atomic.TEMP_NAME) of a state file, and those of versions
# that wrote through tempfile.mkstemp (".NAME." and 8 random characters).
_STATE_FILE = re.compile(r"^(?:[^/]+\.json|sequence)$")
_MKSTEMP_TEMP = re.compile(r"^\.(?:[^/]+\.json|sequence)\.[a-z0-9_]{8}$")


class LockBusy(UsageError):
    """Another nodeagent apply/revert holds the state folder's lock: exit 75 (EX_TEMPFAIL)."""

    exit_code = EX_TEMPFAIL


class StateDiskError(UsageError):
    """The state folder could not be written (ENOSPC, EIO): exit 74 (EX_IOERR)."""

    exit_code = EX_IOERR


_held: dict[str, list[int]] = {}  # lock file -> [owning thread, depth, fd]
_held_guard = threading.Lock()


def check_folder(folder: Path) -> None:
    """As root, refuse a state folder (or its journal/ and profiles/ folders) that another user owns
    or that group or others may write: a journal planted there would be written back as root."""
    if os.geteuid() != 0:
        return
    for d in (folder, folder / "journal", folder / "profiles"):
        try:
            st = os.lstat(d)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{d}: not a folder (a link?); nodeagent keeps its state in a plain folder")
        if st.st_uid != 0 or st.st_mode & 0o022:
            raise UsageError(
                f"{d}: owned by uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}: as root, nodeagent "
                f"refuses a state folder others can write; fix it with `chown root: {d} && chmod go-w {d}`"
            )


def _holder(path: Path) -> str:
    try:
        return path.read_text().strip() or "?"
    except OSError:
        return "?"


def _acquire(folder: Path, path: Path, wait: float) -> int:
    check_folder(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        check_folder(folder)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except UsageError:
        raise
    except OSError as e:
        raise UsageError(f"{path}: cannot open the state lock ({e.strerror or e})") from None
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise LockBusy(
                    f"another nodeagent apply/revert holds {path} (pid {_holder(path)}); try again"
                ) from None
            time.sleep(0.05)
    with contextlib.suppress(OSError):  # the pid is for the message of a waiting run only
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def clean_temp_files(folder: Path) -> list[Path]:
    """Remove the temporary files killed saves left in the state folder; the paths removed."""
    removed = []
    for d in (folder, folder / "journal", folder / "profiles"):
        with contextlib.suppress(OSError):
            for p in d.iterdir():
                if _is_temp(p.name) and p.is_file() and not p.is_symlink():
                    with contextlib.suppress(OSError):
                        p.unlink()
                        removed.append(p)
    return removed


def _is_temp(name: str) -> bool:
    target = atomic.temp_target(name)
    return (target is not None and _STATE_FILE.match(target) is not None) or (
        _MKSTEMP_TEMP.match(name) is not None
    )


@contextlib.contextmanager
def lock(base: Path | None = None, wait: float | None = None) -> Iterator[Path]:
    """Hold the state folder's lock (flock(2) on <state>/lock): one apply or revert at a time, on
    this machine, across processes and threads. Re-entrant within one thread. A second run waits
    up to `wait` seconds (NODEAGENT_LOCK_WAIT, default 10), then LockBusy (exit 75). Taking it
    removes the temporary files of killed saves."""
    folder = base or state_dir()
    path = folder / LOCK_NAME
    key = str(path.absolute())
    me = threading.get_ident()
    with _held_guard:
        held = _held.get(key)
        if held is not None and held[0] == me:
            held[1] += 1
    if held is not None and held[0] == me:
        try:
            yield path
        finally:
            with _held_guard:
                held[1] -= 1
        return
    if wait is None:
        wait = float(os.environ.get(LOCK_WAIT_ENV) or LOCK_WAIT)
    fd = _acquire(folder, path, wait)
    with _held_guard:
        _held[key] = [me, 1, fd]
    try:
        clean_temp_files(folder)
        yield path
    finally:
        with _held_guard:
            del _held[key]
        os.close(fd)  # releases the flock


def free_bytes(folder: Path) -> int:
    """Bytes an unprivileged writer may still use in `folder`'s file system (statvfs f_bavail)."""
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


def check_free(folder: Path) -> None:
    """Refuse an apply before its first write when the state disk is (nearly) full."""
    try:
        free = free_bytes(folder)
    except OSError:
        return  # cannot tell: the journal write itself will say
    if free < MIN_FREE_BYTES:
        raise StateDiskError(
            f"state disk full at {folder}: {free // 1024} KiB free, less than the "
            f"{MIN_FREE_BYTES >> 20} MiB an apply needs for its journal and profile; nothing was "
            "changed; free space and apply again"
        )
