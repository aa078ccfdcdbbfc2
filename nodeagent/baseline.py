"""Baselines: a known-good node (or fleet) recorded once, and what differs from it now.

`save` writes the values of one or several hosts (nodeagent.cluster.fleet.host_values: the facts
and the check findings, flattened into keys) as JSON; `load` reads it back; `compare` is pure and
turns every difference into a WARN finding of check "baseline" (subject: the key, evidence: the
value now, expected: the baseline's), or one OK finding when nothing differs.

The expected value of a key:
- a baseline of one host: that host's value;
- a fleet baseline: the value a strict majority of its hosts share, as the fleet comparison decides
  it (nodeagent.cluster.fleet.compare: a host lacking the key counts as None). A key with no strict
  majority (a fleet split in halves) sets no expectation and is not compared, and a key only one
  host of the fleet had is that host's own (an interface, a device path), as in the fleet view.

Values are equal when
- strings, booleans and None: exactly;
- numbers: exactly (1 == 1.0), except memory sizes (MEMORY_KEYS), within MEMORY_REL_TOL. The
  kernel's usable memory (MemTotal, a NUMA node's MemTotal, `memory_total_mib`) is the installed
  memory minus what the firmware and the kernel reserve (proc(5), /proc/meminfo "MemTotal"), which
  moves by a few MiB with a BIOS or kernel update on an unchanged machine; a missing DIMM removes at
  least 1/N of the memory of a node with N DIMMs, above 1% on any node with fewer than 100 DIMMs.
  For a fleet baseline the expected memory size is the median of its hosts (the fleet's outlier
  rule also measures from the median), because identical nodes that differ by a few MiB have no
  exact majority.

Left out of the comparison:
- the status of each finding (keys ending in ".status"): the checks of this run judge every finding
  themselves; the baseline compares the values (facts and evidence);
- a check that did not run both then and now (`check --only kernel` against a baseline of every
  check compares the kernel check's values and the facts, and reports no other check as missing);
- the findings of the baseline and playbook comparisons themselves ("check.baseline.",
  "check.playbook.");
- readings of the moment rather than configuration (left out by fleet.host_values already);
- what the fleet view leaves out already (fleet.EXCLUDED_KEYS, applied by host_values).
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import statistics
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeGuard

from nodeagent import __version__
from nodeagent.cluster import fleet
from nodeagent.cluster.fleet import Value
from nodeagent.errors import UsageError
from nodeagent.finding import Finding, Status

VERSION = 1  # of the file format; bumped on any incompatible change
CHECK_ID = "baseline"

MEMORY_KEYS = re.compile(r"mem(ory)?[._ ]?total(_mib|_kb|_bytes)?$|memory_mib$", re.IGNORECASE)
MEMORY_REL_TOL = 0.01  # see the module docstring: firmware/kernel reservations vs one missing DIMM

# Keys the comparison itself produces, and finding statuses (judged by the checks of this run).
_OWN_KEYS = re.compile(r"^check\.(baseline|playbook)\.")
_CHECK_KEY = re.compile(r"^check\.([^.]+)\.")
ABSENT = "(absent)"  # a key a host does not have, or has as null: the fleet view counts both as None


@dataclass(frozen=True)
class Expected:
    """The baseline's value of one key, and how many of its hosts have it (of how many)."""

    value: Value
    hosts: int
    of: int
    median: bool = False  # a memory size: the median of the fleet's hosts, compared within a tolerance

    def describe(self, key: str) -> str:
        shown = _show(self.value)
        if MEMORY_KEYS.search(key) and self.value is not None:
            shown += f" within {MEMORY_REL_TOL:.0%}"
        if self.median:
            return f"{shown} (median of {self.hosts} baseline hosts)"
        if self.of == 1:
            return shown
        return f"{shown} (on {self.hosts} of {self.of} baseline hosts)"


@dataclass(frozen=True)
class Reference:
    """What a baseline expects: a value per key, the keys it cannot decide, the checks it holds."""

    expected: dict[str, Expected]
    unsettled: frozenset[str] = frozenset()  # no strict majority, or on one host of a fleet only
    checks: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Baseline:
    path: Path
    source: str
    recorded_at: str
    nodeagent: str
    hosts: Mapping[str, Mapping[str, Value]] = field(default_factory=dict)

    @functools.cached_property
    def reference(self) -> Reference:
        """Computed once per loaded baseline: a fleet run compares every host against it."""
        return _reference(self.hosts)

    def describe(self) -> str:
        n = len(self.hosts)
        who = next(iter(self.hosts)) if n == 1 else f"{n} hosts"
        return f"{self.path.name} ({who}, {self.source}, recorded {self.recorded_at})"


# --- Saving and loading ----------------------------------------------------------------------------


def save(values_by_host: Mapping[str, Mapping[str, Value]], path: Path, source: str) -> None:
    """Write the baseline: {version, nodeagent, recorded_at, source, hosts: {NAME: {key: value}}}.

    Written to a temporary file beside `path`, synced, then renamed over it (os.replace, atomic on
    POSIX): a gate reading the baseline sees the old one or the new one, never half of one.
    """
    if not values_by_host:
        raise UsageError(f"{path}: no host gave values; nothing to save as a baseline")
    doc = {
        "version": VERSION,
        "nodeagent": __version__,
        "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "source": source,
        "hosts": {name: dict(sorted(values.items())) for name, values in sorted(values_by_host.items())},
    }
    text = json.dumps(doc, indent=1, sort_keys=False) + "\n"
    if path.is_dir():
        raise UsageError(f"{path}: is a directory; give the baseline file's name")
    if not path.parent.is_dir():
        raise UsageError(f"{path}: the folder {path.parent} does not exist; create it first")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; other users' gates read the baseline too
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise UsageError(f"{path}: cannot write the baseline ({e.strerror or e})") from None
    _sync_dir(path.parent)


def _sync_dir(folder: Path) -> None:
    # The rename is durable once the folder is synced (fsync(2), NOTES); some filesystems refuse.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def load(path: Path) -> Baseline:
    """Read a baseline; every problem is a UsageError of one line naming the file and field."""
    again = f"record it again with `nodeagent baseline save {path}`"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        record = f"record one with `nodeagent baseline save {path}`"
        raise UsageError(f"{path}: no such baseline; {record}") from None
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
        raise UsageError(f"{path}: cannot read the baseline ({why}); {again}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: line {e.lineno}: not JSON ({e.msg}); {again}") from None
    if not isinstance(doc, dict) or "hosts" not in doc:
        raise UsageError(f"{path}: line 1: not a nodeagent baseline (no hosts); {again}")
    version = doc.get("version")
    if version != VERSION or isinstance(version, bool):
        raise UsageError(
            f"{path}: line {_line_of(text, 'version')}: field version is {version!r}, this nodeagent "
            f"({__version__}) reads version {VERSION}; {again}"
        )
    hosts = _hosts(doc["hosts"], path, text, again)
    return Baseline(
        path=path,
        source=str(doc.get("source") or "?"),
        recorded_at=str(doc.get("recorded_at") or "?"),
        nodeagent=str(doc.get("nodeagent") or "?"),
        hosts=hosts,
    )


def _hosts(raw: Any, path: Path, text: str, again: str) -> dict[str, dict[str, Value]]:
    if not isinstance(raw, dict) or not raw:
        what = "empty" if isinstance(raw, dict) else f"a {type(raw).__name__}"
        raise UsageError(
            f"{path}: line {_line_of(text, 'hosts')}: field hosts is {what}, expected an object of "
            f"hosts; {again}"
        )
    hosts: dict[str, dict[str, Value]] = {}
    for name, values in raw.items():
        if not isinstance(values, dict):
            raise UsageError(
                f"{path}: line {_line_of(text, name)}: field hosts.{name} is a {type(values).__name__}, "
                f"expected an object of values; {again}"
            )
        for key, value in values.items():
            if value is not None and not isinstance(value, str | int | float | bool):
                line = _line_of(text, key, after=name)
                raise UsageError(
                    f"{path}: line {line}: field hosts.{name}.{key} is a {type(value).__name__}, "
                    f"expected a string, number, boolean or null; {again}"
                )
        hosts[str(name)] = values
    return hosts


def _line_of(text: str, name: str, after: str | None = None) -> int:
    """The line of the first `"name":` (after the first `"after":`), 1 when not found."""
    start = 0
    if after is not None:
        found = text.find(json.dumps(after) + ":")
        start = max(found, 0)
    at = text.find(json.dumps(name) + ":", start)
    return text.count("\n", 0, at) + 1 if at >= 0 else 1


# --- The reference ---------------------------------------------------------------------------------


def comparable(values: Mapping[str, Value]) -> dict[str, Value]:
    """The values a baseline compares: finding statuses, the comparisons' own findings and readings
    of the moment left out (see the module docstring)."""
    out: dict[str, Value] = {}
    for key, value in values.items():
        if (key.startswith("check.") and key.endswith(".status")) or _OWN_KEYS.match(key):
            continue
        out[key] = value  # readings of the moment are already left out (fleet.EXCLUDED_KEYS)
    return out


def _checks_in(values: Mapping[str, Value]) -> set[str]:
    return {m.group(1) for key in values if (m := _CHECK_KEY.match(key))}


def _reference(hosts: Mapping[str, Mapping[str, Value]]) -> Reference:
    clean = {name: comparable(values) for name, values in hosts.items()}
    checks = frozenset(c for values in clean.values() for c in _checks_in(values))
    if len(clean) == 1:
        (only,) = clean.values()
        return Reference({k: Expected(v, 1, 1) for k, v in only.items()}, checks=checks)
    total = len(clean)
    seen: dict[str, int] = {}
    for values in clean.values():
        for key in values:
            seen[key] = seen.get(key, 0) + 1
    # The fleet comparison decides each key's majority; a key absent from its drift is one every
    # host has alike. Keys on one host only are not compared there, nor here.
    drift = {d.key: d for d in fleet.compare(clean).drift}
    expected: dict[str, Expected] = {}
    unsettled = {key for key, n in seen.items() if n < 2}
    for key in (k for k, n in seen.items() if n >= 2):
        numbers = [v for values in clean.values() if _is_number(v := values.get(key))]
        if MEMORY_KEYS.search(key) and 2 * len(numbers) > total:
            expected[key] = Expected(statistics.median(numbers), len(numbers), total, median=True)
            continue
        d = drift.get(key)
        if d is None:
            value = next(values[key] for values in clean.values() if key in values)
            expected[key] = Expected(value, total, total)
        elif d.majority_hosts:
            expected[key] = Expected(d.majority, d.majority_hosts, total)
        else:
            unsettled.add(key)
    return Reference(expected, frozenset(unsettled), checks)


# --- Comparing -------------------------------------------------------------------------------------


def compare(baseline: Baseline, values: Mapping[str, Value], host: str) -> list[Finding]:
    """What differs between `values` (fleet.host_values of one host) and the baseline: one WARN
    per key that differs, is missing or is new; one OK finding when nothing does."""
    ref = baseline.reference
    now = comparable(values)
    both = ref.checks & _checks_in(now)
    findings: list[Finding] = []
    compared = 0
    for key in sorted(set(ref.expected) | set(now)):
        check = _CHECK_KEY.match(key)
        if (check is not None and check.group(1) not in both) or key in ref.unsettled:
            continue
        compared += 1
        expected = ref.expected.get(key)
        if expected is None:
            if now[key] is not None:  # a null value is an absent one, as in the fleet view
                findings.append(_new(key, now[key], baseline, host))
        elif not _equal(key, expected, now.get(key)):
            findings.append(_differs(key, now, expected, baseline, host))
    if findings:
        return findings
    skipped = (
        f"; {len(ref.unsettled)} not compared (no majority, or on one baseline host only)"
        if ref.unsettled
        else ""
    )
    return [
        Finding(
            CHECK_ID,
            Status.OK,
            f"{compared} values as in the baseline {baseline.describe()}{skipped}",
            {"baseline": str(baseline.path)},
            expected="every value as in the baseline",
            subject="all",
            host=host,
        )
    ]


def _equal(key: str, expected: Expected, now: Value) -> bool:
    want = expected.value
    if isinstance(want, bool) or isinstance(now, bool):
        return type(want) is type(now) and want == now
    if _is_number(want) and _is_number(now):
        if MEMORY_KEYS.search(key):
            return math.isclose(want, now, rel_tol=MEMORY_REL_TOL)
        return want == now or (math.isnan(want) and math.isnan(now))
    return type(want) is type(now) and want == now


def _is_number(v: Value) -> TypeGuard[int | float]:
    return isinstance(v, int | float) and not isinstance(v, bool)


_REMEDIATION = (
    "Find what changed on this node (a driver, kernel, firmware or setting update, a part missing or "
    "replaced); if the change is intended, record the baseline again with `nodeagent baseline save`."
)


def _differs(
    key: str, now: Mapping[str, Value], expected: Expected, baseline: Baseline, host: str
) -> Finding:
    value = now.get(key)
    if value is None:
        summary = f"{key} is absent; the baseline has {_show(expected.value)}"
    elif expected.value is None:
        summary = f"{key} is {_show(value)}; absent in the baseline"
    else:
        summary = f"{key} is {_show(value)}; the baseline has {_show(expected.value)}"
    return Finding(
        CHECK_ID,
        Status.WARN,
        summary,
        {key: _show(value)},
        expected=f"{expected.describe(key)}, as in {baseline.path.name}",
        remediation=_REMEDIATION,
        subject=key,
        host=host,
    )


def _new(key: str, value: Value, baseline: Baseline, host: str) -> Finding:
    return Finding(
        CHECK_ID,
        Status.WARN,
        f"{key} is {_show(value)}, new since the baseline",
        {key: _show(value)},
        expected=f"absent, as in {baseline.path.name}",
        remediation=_REMEDIATION,
        subject=key,
        host=host,
    )


def _show(v: Value) -> str:
    if v is None:
        return ABSENT
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return str(v) if str(v) else '""'
