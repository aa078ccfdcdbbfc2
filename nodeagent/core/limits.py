"""Size limits on what nodeagent reads from files and from nodes, so hostile or broken input costs
an error line rather than the controller's memory.

Each limit has a default and an environment variable that raises or lowers it (a whole number;
MiB where the name says so). A limit reached is one line naming the limit and its variable:
a UsageError (exit 64) for a file given on the command line, a FAIL for one host's output.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodeagent.core.errors import UsageError

__all__ = [
    "MiB",
    "TooLarge",
    "check_json_depth",
    "limit",
    "loads_json",
    "read_capped",
    "read_input_file",
]

MiB = 1 << 20

# name -> (default, unit): the documented defaults (docs/limits.md).
DEFAULTS: dict[str, tuple[int, str]] = {
    # A file given as inventory, playbook (and its includes) or baseline.
    "NODEAGENT_MAX_INPUT_MIB": (1, "MiB"),
    # What one node may print on stdout / stderr to one SSH command (the pull stream, a JSON report).
    "NODEAGENT_MAX_STDOUT_MIB": (64, "MiB"),
    "NODEAGENT_MAX_STDERR_MIB": (1, "MiB"),
    # A pulled recording once decompressed.
    "NODEAGENT_MAX_RECORDING_MIB": (256, "MiB"),
    # Nesting of YAML and JSON inputs (lists and mappings inside each other).
    "NODEAGENT_MAX_DEPTH": (64, "levels"),
    # Values a YAML file's aliases (*name) may add once expanded.
    "NODEAGENT_MAX_ALIAS_VALUES": (10_000, "values"),
    # The verify history (<state>/history.jsonl): a record is about 1 KiB, so some 60,000 decisions.
    "NODEAGENT_MAX_HISTORY_MIB": (64, "MiB"),
    # Lines of a verify trial's stdout and of its stderr kept (each cut at 4 KiB): --metric reads them.
    "NODEAGENT_TRIAL_TAIL_LINES": (1000, "lines"),
    # Matching --metric against one trial's kept lines; past it the trial fails (a pattern that
    # backtracks: Python's re cannot be interrupted, so the match runs in an interpreter of its own).
    "NODEAGENT_METRIC_TIMEOUT_S": (2, "s"),
    # One answer of Prometheus's HTTP API (`fleet --prometheus`). The fleet view's largest is about
    # 6 KiB a node (tests/fixtures/prometheus), so some 10,000 nodes. Parsed, an answer takes about
    # thirteen times its size, and the view holds its answers' series together: four answers at
    # this limit took 1.6 GB (tests/perf/prometheus_bounds.py).
    "NODEAGENT_MAX_PROMETHEUS_MIB": (64, "MiB"),
}


# Ranks on one node (`--set ID.ranks=N`): CONFIG_NR_CPUS is at most 8192 (arch/x86/Kconfig), a
# rank wants a core and two threads at least, so 4096 is beyond any machine; one million ranks
# made a layout of 7 GB.
MAX_RANKS = 4096
# Any other integer setting: beyond 2**53 it is not even exact in the JSON the results are written in.
MAX_SETTING_INT = 1 << 53


def setting_problem(name: str, value: Any) -> str | None:
    """Why a command-line setting's value is refused, or None: a number that is not finite, a rank
    count above MAX_RANKS, an integer beyond MAX_SETTING_INT (the tuners check their own ranges)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number; give a number"
    if isinstance(value, int):
        if name == "ranks" and value > MAX_RANKS:
            return (
                f"{value} ranks is more than {MAX_RANKS} (nodeagent.core.limits.MAX_RANKS); "
                "give one node's ranks"
            )
        if abs(value) > MAX_SETTING_INT:
            return "the integer is beyond +/-2**53; give a realistic value"
    return None


def limit(name: str) -> int:
    """The limit `name` (a key of DEFAULTS): the environment's value when it is a positive integer."""
    default, _unit = DEFAULTS[name]
    raw = os.environ.get(name, "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return default


def limit_bytes(name: str) -> int:
    return limit(name) * MiB


def read_input_file(path: Path, what: str, cap_name: str = "NODEAGENT_MAX_INPUT_MIB") -> bytes:
    """The bytes of `path`, a regular file no larger than NODEAGENT_MAX_INPUT_MIB: a device, pipe or
    folder is refused before reading (`/dev/zero` would never end), and at most the cap + 1 bytes
    are read (a file growing while read). OSError is left to the caller (FileNotFoundError...)."""
    cap_mib = limit(cap_name)
    cap = cap_mib * MiB
    st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(21, "Is a directory", str(path))
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{path}: not a regular file (a device, pipe or socket); give the {what} file")
    too_big = (
        f"{path}: larger than {cap_mib} MiB (limit {cap_name}); is this the {what}? raise the limit if it is"
    )
    if st.st_size > cap:
        raise UsageError(too_big)
    with open(path, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # replaced between stat and open
            raise UsageError(f"{path}: not a regular file; give the {what} file")
        data = f.read(cap + 1)
    if len(data) > cap:
        raise UsageError(too_big)
    return data


class TooLarge(ValueError):
    """More bytes came than the limit `name` allows; its text says so, naming the limit."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"more than {limit(name)} MiB (limit {name})")


def read_capped(read1: Callable[[int], bytes], cap_name: str, piece: int = MiB) -> bytes:
    """All that `read1(n)` gives (up to n bytes a call, as soon as some came; b"" at the end),
    counted while read: TooLarge once more than the limit `cap_name` came, no byte past it read.
    A stream that never ends costs the limit, never more."""
    cap = limit_bytes(cap_name)
    pieces: list[bytes] = []
    size = 0
    while chunk := read1(min(piece, cap + 1 - size)):
        size += len(chunk)
        if size > cap:
            raise TooLarge(cap_name)
        pieces.append(chunk)
    return b"".join(pieces)


def check_json_depth(doc: Any, max_depth: int | None = None) -> None:
    """ValueError when `doc` (parsed JSON) nests lists and objects deeper than NODEAGENT_MAX_DEPTH.
    Iterative, so a deep document cannot exhaust the stack here."""
    cap = limit("NODEAGENT_MAX_DEPTH") if max_depth is None else max_depth
    stack: list[tuple[Any, int]] = [(doc, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth + 1 > cap:
            raise ValueError(f"nested deeper than {cap} levels (limit NODEAGENT_MAX_DEPTH)")
        stack.extend((child, depth + 1) for child in children)


def loads_json(text: str | bytes) -> Any:
    """json.loads with the nesting capped: json.JSONDecodeError for bad JSON, ValueError (never
    RecursionError) for a document nested too deeply."""
    try:
        doc = json.loads(text)
    except RecursionError:
        raise ValueError(
            f"nested deeper than {limit('NODEAGENT_MAX_DEPTH')} levels (limit NODEAGENT_MAX_DEPTH)"
        ) from None
    check_json_depth(doc)
    return doc
