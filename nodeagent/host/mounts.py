"""Whether a `--root` folder is a live view of a machine: its proc/ and sys/ are the kernel's procfs
and sysfs mounted there (a pod mounting the node's /proc and /sys at /host/proc and /host/sys), not
copies of files. Told by the mount table of this process (/proc/self/mountinfo), never by guessing
from what the files say: a recording holds the same file names and contents."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import NamedTuple

MOUNTINFO = "/proc/self/mountinfo"
# The file system types the kernel names in mountinfo (proc(5), "/proc/pid/mountinfo" field 9):
# https://docs.kernel.org/filesystems/proc.html and https://docs.kernel.org/filesystems/sysfs.html
PROCFS = "proc"
SYSFS = "sysfs"
LIVE_TYPES = {"proc": PROCFS, "sys": SYSFS}


class Mount(NamedTuple):
    """One line of mountinfo: its id, its parent's id, the device ("0:21", st_dev of every file in
    it), where it is mounted and the file system type."""

    mount_id: int
    parent_id: int
    device: str
    point: str
    fstype: str


def _unescape(text: str) -> str:
    """mountinfo writes space, tab, newline and backslash in a path as octal escapes (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a mountinfo text, by its fields (proc(5)): "36 35 98:0 /mnt1 /mnt2 rw,noatime
    master:1 - ext3 /dev/root rw": ids first, the mount point fifth, then optional fields up to the
    lone "-", after which the file system type. Lines that do not have that shape are left out."""
    out: list[Mount] = []
    for line in text.splitlines():
        fields = line.split(" ")
        if "-" not in fields[6:]:
            continue
        sep = fields.index("-", 6)
        if len(fields) <= sep + 1 or not (fields[0].isdigit() and fields[1].isdigit()):
            continue
        out.append(Mount(int(fields[0]), int(fields[1]), fields[2], _unescape(fields[4]), fields[sep + 1]))
    return out


def visible(mounts: Iterable[Mount], point: str) -> Mount | None:
    """The mount one sees at `point`: of those stacked there, the one no other mount there sits on."""
    stack = [m for m in mounts if m.point == point]
    below = {m.parent_id for m in stack}
    top = [m for m in stack if m.mount_id not in below]
    return top[-1] if top else (stack[-1] if stack else None)


class LiveRoot(NamedTuple):
    """What the mount table says of a folder's proc/ and sys/: each one's file system type where
    something is mounted there (None: nothing is)."""

    root: str
    found: dict[str, str | None]

    @property
    def live(self) -> bool:
        return all(self.found.get(name) == fstype for name, fstype in LIVE_TYPES.items())

    @property
    def recorded(self) -> bool:
        """Neither is a procfs or sysfs mount: a folder of files (a recording, an extracted tree)."""
        return not any(self.found.get(name) == fstype for name, fstype in LIVE_TYPES.items())

    def problem(self) -> str | None:
        """Why a folder that is neither live nor recorded cannot be read (one of the two mounted)."""
        if self.live or self.recorded:
            return None
        missing = [
            f"{self.root}/{name} is not a {fstype} mount ({_what(self.found.get(name))})"
            for name, fstype in LIVE_TYPES.items()
            if self.found.get(name) != fstype
        ]
        return (
            f"{'; '.join(missing)}, although the other is a live mount: mount the machine's "
            "/proc and /sys both (read-only is enough), or give a recording made by `nodeagent snapshot`"
        )


def _what(fstype: str | None) -> str:
    return "nothing is mounted there" if fstype is None else f"{fstype} is mounted there"


def read_mountinfo() -> str | None:
    """This process's mount table; None where there is no /proc to read it from."""
    try:
        with open(MOUNTINFO, encoding="utf-8", errors="surrogateescape") as f:
            return f.read()
    except OSError:
        return None


def _device(path: str) -> str | None:
    """The device of the file system `path` is on, as mountinfo writes it ("0:21")."""
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return None
    return f"{os.major(dev)}:{os.minor(dev)}"


def inspect_root(root: str) -> LiveRoot:
    """What is mounted at `root`/proc and `root`/sys. `root` may be a link to the folder (the
    kernel lists mount points by their canonical paths), but proc and sys must be mount points
    themselves: a recording whose proc is a link to /proc is files, read inside the recording, and
    never this machine. A mount counts only when the folder is on its device (one hidden under a
    later mount is not what a read there sees). An unreadable mount table shows nothing mounted:
    the folder is read as a recording."""
    mounts = parse_mountinfo(read_mountinfo() or "")
    base = os.path.realpath(root)
    found: dict[str, str | None] = {}
    for name in LIVE_TYPES:
        path = os.path.join(base, name)
        mount = None if os.path.islink(path) else visible(mounts, path)
        found[name] = mount.fstype if mount is not None and mount.device == _device(path) else None
    return LiveRoot(root.rstrip("/") or "/", found)
