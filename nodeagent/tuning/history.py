"""The history of verify decisions: one JSON line per change judged, in <state>/history.jsonl.

Every `nodeagent verify` and every change `nodeagent tune --apply --verify` judges appends a
record: when, which node, the command (or the built-in workload), what B had that A did not (the
profile's settings and the runtime values), the paired ratio B/A with its interval, the verdict and
what was done about it. `nodeagent history` reads it back.

One line per record, appended with O_APPEND in one write(2): records of concurrent runs never
interleave within a line (POSIX: O_APPEND writes are atomic with respect to the file offset, and one
line is far below what a local file system writes at once). A line this nodeagent cannot read is
one error naming the file and line, never skipped in silence: the history is a record of decisions.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from nodeagent.core import limits
from nodeagent.core.errors import UsageError
from nodeagent.tuning.state import StateDiskError, state_dir

FILE = "history.jsonl"


class RuntimeValue(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str
    before: str
    after: str


class Record(BaseModel):
    """One judged change (or one whole profile, for `nodeagent verify`)."""

    model_config = ConfigDict(extra="forbid")
    time: str  # ISO 8601, UTC
    node: str
    command: list[str] | None  # None: the built-in tf.data + XLA workload
    profile: str
    change: str  # a tuner id, or "profile" for the whole profile
    settings: dict[str, Any]  # what B's profile had that A's did not (dotted keys)
    runtime: list[RuntimeValue]  # the runtime values switched between the sides
    metric: str  # what was compared: "steps/s", "images/s", "--metric REGEX", "1 / wall time"
    pairs: int
    ratio: float | None  # B/A
    interval: tuple[float, float] | None  # B/A, at `level`
    level: float | None
    verdict: str  # faster, slower, no significant difference, could not decide within the budget, failed
    decision: str  # kept, reverted, measured (verify only judges), not applied
    reason: str
    wall_s: float


def path(base: Path | None = None) -> Path:
    return (base or state_dir()) / FILE


def append(record: Record, base: Path | None = None) -> Path:
    """Add `record` as one line; StateDiskError (exit 74) when the state disk refuses it."""
    where = path(base)
    line = (record.model_dump_json() + "\n").encode()
    try:
        where.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(where, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError as e:
        raise StateDiskError(
            f"{where}: cannot append the verify record ({e.strerror or e}); the decision stands, "
            "but it is not in the history: free space or fix permissions"
        ) from None
    return where


def read(base: Path | None = None) -> list[Record]:
    """Every record, oldest first; [] when there is no history yet. Only a regular file up to
    NODEAGENT_MAX_HISTORY_MIB is read (a device or a FIFO put there is refused before reading), as
    UTF-8; what cannot be read is one UsageError line naming the file (and the line)."""
    where = path(base)
    try:
        data = limits.read_input_file(where, "verify history", "NODEAGENT_MAX_HISTORY_MIB")
    except FileNotFoundError:
        return []
    except OSError as e:
        raise UsageError(f"{where}: cannot be read ({e.strerror or e}); fix its permissions") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise UsageError(f"{where}:{line}: not UTF-8 text; {_MOVE_ASIDE}") from None
    records = []
    for number, line_text in enumerate(text.splitlines(), 1):
        if line_text.strip():
            records.append(_record(where, number, line_text))
    return records


_MOVE_ASIDE = "not a nodeagent verify record: move the file aside (a new one is started on the next verify)"


def _record(where: Path, number: int, line: str) -> Record:
    try:
        return Record.model_validate(limits.loads_json(line))
    except ValueError as e:
        first = e.errors()[0] if isinstance(e, ValidationError) else None
        field = ".".join(str(p) for p in first["loc"]) if first else ""
        problem = f"{field}: {first['msg']}" if first else f"not JSON ({e})"
        raise UsageError(f"{where}:{number}: {problem}; {_MOVE_ASIDE}") from None
