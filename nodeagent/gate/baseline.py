"""Baselines: a known-good node (or fleet) recorded once, and what differs from it now.

`save` writes the values of one or several hosts (nodeagent.compare.values.host_values: the facts
and the check findings, flattened into keys) as JSON; `load` reads it back; `compare` is pure and
turns every difference into a WARN finding of check "baseline" (subject: the key, evidence: the
value now, expected: the baseline's), or one OK finding when nothing differs.

Hardware lost is reported at the level the playbook gives it (`lost_hardware`, WARN by default):
- a GPU (by PCI address), an HCA or an interface gone or new is one finding about the device
  ("HCA mlx5_1 gone"), which stands for every key of that device, every key naming it and the
  hardware counts, rather than the dozens of keys a missing card takes with it;
- a link whose lanes or rate dropped (a width or rate key lower than in the baseline), also when
  the check names the link under another subject now (a narrow link gets a finding of its own,
  where the baseline had it among the links at full width).

The expected value of a key:
- a baseline of one host: that host's value;
- a fleet baseline: the value a strict majority of its hosts share, as the fleet comparison decides
  it (nodeagent.compare.fleet.compare: a host lacking the key counts as None). A key with no strict
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
- readings of the moment rather than configuration (left out by values.host_values already);
- what the fleet view leaves out already (values.EXCLUDED_KEYS, applied by host_values).
"""

from __future__ import annotations

import functools
import json
import math
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, TypeGuard

from pydantic import AfterValidator, BaseModel, ConfigDict

from nodeagent import __version__
from nodeagent.compare import fleet, hardware
from nodeagent.compare import values as values_mod
from nodeagent.compare.fleet import Value
from nodeagent.core import jsondoc, safe_write
from nodeagent.core.errors import UsageError
from nodeagent.core.finding import Finding, Status

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
    # The devices of the expected values (_devices), found once: every host is compared with them.
    devices: Mapping[tuple[str, str], str] = field(default_factory=dict)


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


def _this_version(version: int) -> int:
    if version != VERSION:
        raise ValueError(f"is {version}, this nodeagent ({__version__}) reads version {VERSION}")
    return version


def _some_host(hosts: dict[str, dict[str, Value]]) -> dict[str, dict[str, Value]]:
    if not hosts:
        raise ValueError("names no host")
    return hosts


_Value = Annotated[Value, jsondoc.expect("a string, number, boolean or null")]


class BaselineDocument(BaseModel):
    """A baseline file: {version, nodeagent, recorded_at, source, hosts: {NAME: {key: value}}}.

    Strict (a quoted number is not a number: it would never equal the node's value). Unknown
    top-level fields are ignored: a later nodeagent may add one without changing what is compared,
    and bumps VERSION when it does change that."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    version: Annotated[int, AfterValidator(_this_version)]
    nodeagent: str = "?"
    recorded_at: str = "?"
    source: str = "?"
    hosts: Annotated[dict[str, dict[str, _Value]], AfterValidator(_some_host)]


def save(values_by_host: Mapping[str, Mapping[str, Value]], path: Path, source: str) -> None:
    """Write the baseline (BaselineDocument) through the one safe writer (nodeagent.core.safe_write):
    replaced whole, so a gate reading it sees the old one or the new one, never half of one; a link,
    device or FIFO at `path` refused, never followed or replaced. 0644: other users' gates read it too."""
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
    safe_write.write_file(path, text.encode(), mode=0o644)


def load(path: Path) -> Baseline:
    """Read a baseline; every problem is a UsageError of one line naming the file, line and field."""
    wording = jsondoc.Wording("nodeagent baseline", f"record it again with `nodeagent baseline save {path}`")
    try:
        doc = jsondoc.read_json(path, wording)
    except FileNotFoundError:
        raise UsageError(
            f"{path}: no such baseline; record one with `nodeagent baseline save {path}`"
        ) from None
    checked = doc.validate(BaselineDocument)
    return Baseline(
        path=path,
        source=checked.source or "?",
        recorded_at=checked.recorded_at or "?",
        nodeagent=checked.nodeagent or "?",
        hosts=checked.hosts,
    )


# --- The reference ---------------------------------------------------------------------------------


def comparable(values: Mapping[str, Value]) -> dict[str, Value]:
    """The values a baseline compares: finding statuses, the comparisons' own findings, prose and
    readings of the moment left out (see the module docstring)."""
    out: dict[str, Value] = {}
    for key, value in values.items():
        if key.startswith("check.") and (key.endswith(".status") or _prose(value)):
            continue
        if _OWN_KEYS.match(key):
            continue
        out[key] = value  # readings of the moment are already left out (values.EXCLUDED_KEYS)
    return out


# A check's evidence is compared when it is a typed value: a number (host_values converts numbers
# with units), a state (one word, as a sysfs file holds it: "performance", "[madvise]", "ACTIVE") or a
# count of a total ("16 of 18" active NVLinks). Anything else is a check's prose about what it saw
# ("dmesg: not recorded in snapshot n1", "Max locked memory: soft unlimited, ..."), which differs
# with the words and the recording's name: the facts and these values carry what it describes.
_COUNT_OF = re.compile(r"\d+ of \d+")


def _prose(value: Value) -> bool:
    return isinstance(value, str) and any(c.isspace() for c in value) and not _COUNT_OF.fullmatch(value)


def _checks_in(values: Mapping[str, Value]) -> set[str]:
    return {m.group(1) for key in values if (m := _CHECK_KEY.match(key))}


def _reference(hosts: Mapping[str, Mapping[str, Value]]) -> Reference:
    clean = {name: comparable(values) for name, values in hosts.items()}
    checks = frozenset(c for values in clean.values() for c in _checks_in(values))
    if len(clean) == 1:
        (only,) = clean.values()
        return Reference(
            {k: Expected(v, 1, 1) for k, v in only.items()}, checks=checks, devices=_devices(only)
        )
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
    devices = _devices({k: e.value for k, e in expected.items()})
    return Reference(expected, frozenset(unsettled), checks, devices)


# --- Comparing -------------------------------------------------------------------------------------


def compare(
    baseline: Baseline, values: Mapping[str, Value], host: str, devices: Status = Status.FAIL
) -> list[Finding]:
    """What differs between `values` (values.host_values of one host) and the baseline: one finding
    per device gone or new (at `devices`, see `_device_changes`), one WARN per other key that
    differs, is missing or is new, one UNKNOWN per place the node's recording did not hold where the
    baseline has values; one OK finding when nothing differs.

    A place not recorded on one side is not compared ("not recorded" on both sides is equal), and a
    hardware count (hardware.gpus, hardware.rdma_ports_active) is reported only when no device or
    value of its list explains it: two ports down are two findings, not two and a count."""
    ref = baseline.reference
    now = comparable(values)
    gaps_now = _gaps(now)
    gaps_then = _gaps({k: e.value for k, e in ref.expected.items() if k.startswith(values_mod.UNRECORDED)})
    findings = _gap_findings(gaps_now, gaps_then, ref, host)
    unseen = (*gaps_now, *gaps_then)  # prefixes: str.startswith takes them all at once
    changes = [c for c in _device_changes(ref.devices, _devices(now)) if not c.section.startswith(unseen)]
    # A device gone is hardware lost (`devices`); one added is a change to look at, not a fault.
    findings += [_device_finding(c, devices if c.gone else Status.WARN, baseline, host) for c in changes]
    moved = _moved_links(ref.expected, now)
    for then, key in moved.items():
        if not _equal(key, ref.expected[then], now.get(key)):
            findings.append(_changed(key, now, ref.expected[then], devices, baseline, host))
    both = ref.checks & _checks_in(now)
    compared = [k for k in sorted(set(ref.expected) | set(now)) if _compared(k, ref, both, unseen)]
    counts: list[Finding] = []
    for key in compared:
        if any(c.explains(key) for c in changes) or key in moved or key in moved.values():
            continue
        found = _difference(key, ref.expected.get(key), now, devices, baseline, host)
        if found is not None:
            (counts if key.startswith(hardware.SECTION + ".") else findings).append(found)
    changed_lists = {_list_of(f.subject) for f in findings} | {c.section for c in changes}
    findings += [f for f in counts if _list_of(f.subject) not in changed_lists]
    return findings or [_all_as_before(len(compared), ref, baseline, host)]


def _compared(key: str, ref: Reference, both: frozenset[str], unseen: tuple[str, ...]) -> bool:
    """Whether a key is compared: a check's value only when the check ran then and now (`both`),
    never a key without a majority in a fleet baseline, nor one under a place either side did not
    record."""
    check = _CHECK_KEY.match(key)
    if check is not None and check.group(1) not in both:
        return False
    if key in ref.unsettled or key.startswith(values_mod.UNRECORDED):
        return False
    return not _place(key).startswith(unseen)


def _difference(
    key: str,
    expected: Expected | None,
    now: Mapping[str, Value],
    devices: Status,
    baseline: Baseline,
    host: str,
) -> Finding | None:
    if expected is None:
        # A null value is an absent one, as in the fleet view.
        return _new(key, now[key], baseline, host) if now[key] is not None else None
    if _equal(key, expected, now.get(key)):
        return None
    return _changed(key, now, expected, devices, baseline, host)


def _all_as_before(compared: int, ref: Reference, baseline: Baseline, host: str) -> Finding:
    skipped = (
        f"; {len(ref.unsettled)} not compared (no majority, or on one baseline host only)"
        if ref.unsettled
        else ""
    )
    return Finding(
        CHECK_ID,
        Status.OK,
        f"{compared} values as in the baseline {baseline.describe()}{skipped}",
        {"baseline": str(baseline.path)},
        expected="every value as in the baseline",
        subject="all",
        host=host,
    )


def _gap_findings(
    gaps_now: Mapping[str, str], gaps_then: Mapping[str, str], ref: Reference, host: str
) -> list[Finding]:
    """One UNKNOWN per place the node's recording did not hold and the baseline's did."""
    by_place: dict[str, list[str]] = {}  # one place is the prefix of a fact and the root of evidence
    for prefix, place in gaps_now.items():
        if prefix not in gaps_then:
            by_place.setdefault(place, []).append(prefix)
    gaps = (_unrecorded(prefixes, place, ref, host) for place, prefixes in by_place.items())
    return [f for f in gaps if f is not None]


def _list_of(key: str) -> str:
    """The part of the facts a key is read from: "rdma" for rdma[mlx5_0/1].state and
    hardware.rdma_ports_active, the key itself otherwise."""
    for count, section in values_mod.COUNTED_FROM:
        if key.startswith(count):
            return section
    m = _DEVICE_KEY.match(key)
    return m.group(1) if m else key


def _place(key: str) -> str:
    """Where a key's value is read, as the facts' `unrecorded` names places: a check's evidence by
    its path ("/proc/self/limits soft"), a fact by its part of the document (`_list_of`)."""
    return values_mod.evidence_place(key) or _list_of(key)


def _gaps(values: Mapping[str, Value]) -> dict[str, str]:
    """Value key prefix -> place, for the places a recording did not hold (values.UNRECORDED)."""
    n = len(values_mod.UNRECORDED)
    return {k[n:]: str(v) for k, v in values.items() if k.startswith(values_mod.UNRECORDED)}


def _unrecorded(prefixes: list[str], place: str, ref: Reference, host: str) -> Finding | None:
    """UNKNOWN for a place the node's recording did not hold where the baseline has values: they
    cannot be compared, and nothing is claimed gone. None where the baseline has none there either."""
    theirs = sorted(
        k
        for k, e in ref.expected.items()
        if e.value is not None
        and not k.startswith(values_mod.UNRECORDED)
        and _place(k).startswith(tuple(prefixes))
    )
    if not theirs:
        return None
    return Finding(
        CHECK_ID,
        Status.UNKNOWN,
        f"not recorded: {place}, so {len(theirs)} baseline value(s) there cannot be compared",
        {place: values_mod.NOT_RECORDED},
        expected=f"{place} in the recording, as in the baseline",
        remediation="Record the node again with `nodeagent snapshot` (it records what every check reads), "
        "or mount the node's /sys and /proc whole.",
        subject=place,
        host=host,
    )


# --- Devices gone or new ---------------------------------------------------------------------------

# The device lists of the facts document, how host_values labels their entries, and what an
# operator calls one: GPUs by PCI address (their labels are driver indices, which shift when one
# is lost), RDMA ports by their HCA, interfaces by name.
_DEVICE_SECTIONS = {"gpus": "GPU", "rdma": "HCA", "nics": "interface"}
_DRIVER_INDEX = re.compile(r"\bGPU\d+\b")  # nvidia-smi's and NVML's index in evidence keys
_DEVICE_KEY = re.compile(r"^(gpus|rdma|nics)\[([^\]]*)\]\.(.+)$")


@dataclass(frozen=True)
class DeviceChange:
    kind: str  # "GPU", "HCA", "interface"
    name: str  # 0000:82:00.0, mlx5_1, ib1
    gone: bool  # False: new since the baseline
    detail: str  # the model, where the facts name it
    section: str

    def explains(self, key: str) -> bool:
        """Whether a differing key is part of this change: the device's own keys (for GPUs every
        GPU key, whose index labels shift), keys naming the device, and the hardware counts."""
        if key.startswith("hardware."):
            return True
        m = _DEVICE_KEY.match(key)
        if m is not None and m.group(1) == self.section:
            return self.section == "gpus" or _device_name(m.group(1), m.group(2)) == self.name
        if self.section == "gpus" and _DRIVER_INDEX.search(key):
            return True  # the driver renumbers the GPUs after the lost one: "GPU3" is now "GPU2"
        return re.search(rf"(?<![\w:]){re.escape(self.name)}(?![\w:])", key) is not None


def _device_name(section: str, label: str) -> str:
    return label.split("/", 1)[0] if section == "rdma" else label


def _devices(values: Mapping[str, Value]) -> dict[tuple[str, str], str]:
    """(section, device name) -> detail, for every device in `values`."""
    out: dict[tuple[str, str], str] = {}
    labels: dict[tuple[str, str], dict[str, Value]] = {}
    for key, value in values.items():
        m = _DEVICE_KEY.match(key)
        if m is not None:
            labels.setdefault((m.group(1), m.group(2)), {})[m.group(3)] = value
    for (section, label), fields in labels.items():
        if section == "gpus":
            name = str(fields.get("pci_address") or label)
            out[(section, name)] = str(fields.get("product_name") or fields.get("vendor") or "")
        else:
            out.setdefault((section, _device_name(section, label)), str(fields.get("hca_type") or ""))
    return out


def _device_changes(
    before: Mapping[tuple[str, str], str], after: Mapping[tuple[str, str], str]
) -> list[DeviceChange]:
    return [
        DeviceChange(_DEVICE_SECTIONS[section], name, gone, detail, section)
        for gone, (a, b) in ((True, (before, after)), (False, (after, before)))
        for (section, name), detail in sorted(a.items())
        if (section, name) not in b
    ]


def _device_finding(c: DeviceChange, status: Status, baseline: Baseline, host: str) -> Finding:
    what = f"{c.kind} {c.name}" + (f" ({c.detail})" if c.detail else "")
    if c.gone:
        summary = f"{what} gone: in the baseline, not on this node"
        remediation = (
            f"A {c.kind} that vanished fell off the bus, lost its driver or failed: check "
            "`dmesg` for the device (Xid 79, link down, firmware errors), reseat or replace it; "
            "if it was removed on purpose, record the baseline again with `nodeagent baseline save`."
        )
    else:
        summary = f"{what} new since the baseline"
        remediation = (
            "If the device was added on purpose, record the baseline again (`nodeagent baseline save`)."
        )
    return Finding(
        CHECK_ID,
        status,
        summary,
        {f"{c.section}[{c.name}]": "(absent)" if c.gone else "present"},
        expected=f"{'present' if c.gone else 'absent'}, as in {baseline.path.name}",
        remediation=remediation,
        subject=f"{c.kind} {c.name}",
        host=host,
    )


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


# A link's lanes or rate, or a GPU's active NVLinks ("16 of 18"): lower than in the baseline is
# hardware lost (a lane, a cable, an NVLink), judged at the playbook's device level. sysfs widths and
# rates are numbers; the driver's are text like "8x".
_LINK_KEY = re.compile(r"(^|[._/\]])(width|current_link_width|rate_gbps|speed_gts)$|(^|[ .])active links$")
_LEADING_NUMBER = re.compile(r"^\s*(\d+(?:\.\d+)?)")


# Where a check's evidence comes from, after the finding's subject (a path or a tool): the subject
# of a value changes with its verdict (a check groups links at full width in one finding and names a
# narrow one on its own), so the same link's width, and every value read with it, can move from one
# key to another. Compared by where it was read, it is one value.
_SOURCE = re.compile(r"^check\.([^.]+)\..*?\.((?:/|nvidia-smi |NVML|dcgmi ).*)$")


def _moved_links(expected: Mapping[str, Expected], now: Mapping[str, Value]) -> dict[str, str]:
    """Baseline key -> key now, for the check values read at the same place under another subject."""
    gone = {_link_source(k): k for k in expected if k not in now}
    gone.pop(None, None)
    out: dict[str, str] = {}
    for key in now:
        if key in expected:
            continue
        source = _link_source(key)
        if source is not None and source in gone:
            out[gone.pop(source)] = key
    return out


def _link_source(key: str) -> tuple[str, str] | None:
    m = _SOURCE.match(key)
    return (m.group(1), m.group(2)) if m else None


def _changed(
    key: str, now: Mapping[str, Value], expected: Expected, devices: Status, baseline: Baseline, host: str
) -> Finding:
    """A value that differs: at the device level when it is a link that lost lanes or rate."""
    status = devices if _link_dropped(key, expected.value, now.get(key)) else Status.WARN
    return _differs(key, now, expected, baseline, host, status)


def _link_dropped(key: str, then: Value, now: Value) -> bool:
    if _LINK_KEY.search(key) is None:
        return False
    a, b = _link_number(then), _link_number(now)
    return a is not None and b is not None and b < a


def _link_number(value: Value) -> float | None:
    if _is_number(value):
        return float(value)
    m = _LEADING_NUMBER.match(value) if isinstance(value, str) else None
    return float(m.group(1)) if m else None


def _differs(
    key: str,
    now: Mapping[str, Value],
    expected: Expected,
    baseline: Baseline,
    host: str,
    status: Status = Status.WARN,
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
        status,
        summary,
        {key: _show(value), f"{key} in {baseline.path.name}": expected.describe(key)},
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
