"""Typed reads through a Host that turn malformed values into None and remember where they were."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import TypeVar

from nodeagent.core import parse
from nodeagent.host import Host

T = TypeVar("T")


class Reader:
    """Reads values for one fact collector.

    A missing file is normal (the kernel lacks the feature) and reads as None; so does an empty one,
    which is how a recording keeps an attribute whose read failed (speed of a link that is down
    gives EINVAL). A file that holds something that does not parse is corrupt: it also reads as
    None, and `problems` records path and value so that a check can report it instead of crashing.
    """

    def __init__(self, host: Host) -> None:
        self.host = host
        self.problems: list[str] = []

    def _read(self, path: str) -> str | None:
        """Host.read; a file that is there but unreadable (larger than the read limit, a FIFO in a
        recording) is recorded in `problems` with the Host's reason, so a check says UNKNOWN."""
        text = self.host.read(path)
        if text is None:
            why = self.host.unreadable(path)
            if why:
                self.problems.append(f"{path}: {why}")
        return text

    def text(self, path: str) -> str | None:
        return self._read(path)

    def value(self, path: str) -> str | None:
        text = self._read(path)
        return None if text is None else text.strip()

    def parsed(self, path: str, parser: Callable[[str], T]) -> T | None:
        raw = self._read(path)
        if raw is None or not raw.strip():
            return None
        try:
            return parser(raw)
        except (ValueError, OverflowError):
            self.problems.append(f"{path}: unparsable value {raw.strip()[:60]!r}")
            return None

    def int(self, path: str) -> builtins.int | None:
        return self.parsed(path, parse.integer)

    def cpulist(self, path: str) -> list[builtins.int] | None:
        return self.parsed(path, parse.cpulist)

    def cpumask(self, path: str) -> list[builtins.int] | None:
        return self.parsed(path, parse.cpumask)
