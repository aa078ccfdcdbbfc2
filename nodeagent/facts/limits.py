"""Resource limits (/proc/<pid>/limits) and the environment of a process, read through the Host.

On this machine /proc/self is nodeagent itself, whose limits and environment are those the shell
(or the scheduler's prolog) hands to the training job it launches; on a snapshot, the recorder's.
Format: fs/proc/base.c (proc_pid_limits): "Limit  Soft Limit  Hard Limit  Units".
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.core import parse
from nodeagent.host import Host

LIMITS_PATH = "/proc/self/limits"
ENVIRON_PATH = "/proc/self/environ"
PATHS = (LIMITS_PATH, ENVIRON_PATH)

UNLIMITED = -1
# RLIM_INFINITY is 2**64-1 (include/uapi/asm-generic/resource.h); the kernel prints it as
# "unlimited", but a limit set to it rounded down to whole pages (18446744073708503040, as systemd
# and some container runtimes write) is printed as a number. No machine has 2**63 bytes or files:
# anything that large means unlimited.
_EFFECTIVELY_UNLIMITED = 1 << 63


@dataclass(frozen=True)
class Limit:
    soft: int  # UNLIMITED (-1) for "unlimited"
    hard: int
    units: str


def _value(text: str) -> int | None:
    if text == "unlimited":
        return UNLIMITED
    if not parse.is_decimal(text):
        return None
    return UNLIMITED if int(text) >= _EFFECTIVELY_UNLIMITED else int(text)


def parse_limits(text: str) -> dict[str, Limit]:
    """ "Max locked memory  8388608  8388608  bytes" -> {"Max locked memory": Limit(...)}.

    The file is a table whose header ("Limit  Soft Limit  Hard Limit  Units") gives the column
    starts (fs/proc/base.c prints each row with "%-25s %-20s %-20s %-10s"); rows are cut there.
    """
    lines = text.splitlines()
    header = lines[0] if lines else ""
    starts = [header.find(name) for name in ("Soft Limit", "Hard Limit", "Units")]
    if min(starts) < 0:
        return {}
    soft_at, hard_at, units_at = starts
    out: dict[str, Limit] = {}
    for line in lines[1:]:
        name = line[:soft_at].strip()
        soft, hard = _value(line[soft_at:hard_at].strip()), _value(line[hard_at:units_at].strip())
        if name and soft is not None and hard is not None:
            out[name] = Limit(soft, hard, line[units_at:].strip())
    return out


def collect_limits(host: Host, path: str = LIMITS_PATH) -> dict[str, Limit] | None:
    text = host.read(path)
    return None if text is None else parse_limits(text)


def parse_environ(data: str) -> dict[str, str]:
    """NUL-separated KEY=value pairs (/proc/<pid>/environ)."""
    out: dict[str, str] = {}
    for item in data.split("\x00"):
        key, found, value = item.partition("=")
        if found and key:
            out[key] = value
    return out


def collect_environ(host: Host, path: str = ENVIRON_PATH) -> dict[str, str] | None:
    text = host.read(path)
    return None if text is None else parse_environ(text)
