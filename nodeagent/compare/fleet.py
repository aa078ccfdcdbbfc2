"""The fleet comparison: the odd node out, found by comparing nodes with each other.

No per-model threshold tables: nodes of one training cluster are meant to be alike, so the value
most of them have is the reference. Each host is flattened into comparable keys (`host_values`:
its facts document and its check findings), then `compare` reports

- **drift**: for every key, the hosts whose value differs from the one a strict majority shares
  (a driver, a kernel, a BIOS version, a governor, a huge page pool, a link speed). When no value
  has a strict majority (a fleet split in halves) the key is reported with every host's value,
  `majority` None and `majority_hosts` 0: a split fleet is exactly what the user must see, and
  "which half is right" is theirs to decide.
- **outliers**: for keys that are numbers on at least `min_hosts` hosts, the hosts whose modified
  z-score 0.6745 * (x - median) / MAD exceeds 3.5 in absolute value (Iglewicz and Hoaglin, "How to
  Detect and Handle Outliers", 1993; NIST/SEMATECH e-Handbook 1.3.5.17,
  https://www.itl.nist.gov/div898/handbook/eda/section3/eda35h.htm). The median and the median
  absolute deviation are not dragged by the outlier itself, as a mean and a standard deviation are
  (one host at 10% of the others inflates the standard deviation enough to hide itself among few
  hosts). 0.6745 is the 0.75 quantile of the standard normal, making MAD comparable to sigma.
  When MAD is 0 more than half the hosts share the median exactly, so every host that differs is
  already drift; no outlier is reported then (its score would be infinite).

Flattening leaves out what differs between hosts or moments by nature (EXCLUDED_KEYS,
EXCLUDED_VALUES, and the host's own name, replaced by "<host>" wherever it is quoted), otherwise
every run would report every node.
"""

from __future__ import annotations

import functools
import math
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeAlias, TypeGuard

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from nodeagent.core.errors import UsageError
from nodeagent.core.finding import Finding, Status
from nodeagent.facts.system import parse_cmdline
from nodeagent.gate import hardware
from nodeagent.render.literal import lits

Value: TypeAlias = str | int | float | bool | None

# Iglewicz & Hoaglin (1993): |modified z| > 3.5 marks a potential outlier (NIST e-Handbook 1.3.5.17).
THRESHOLD = 3.5
MAD_TO_Z = 0.6745  # the standard normal's 0.75 quantile: E[MAD] = 0.6745 sigma for normal data
MIN_HOSTS = 3  # with 2 values the median sits halfway and both scores are +-0.6745: nobody stands out

# --- What naturally differs, left out of the comparison --------------------------------------------
# Searched (case-insensitive) in every flattened key at every level of nesting, so that a match on a
# list entry ("nics[veth1a2b]") drops the whole entry. Keys look like "dmi.bios_version",
# "nics[eth0].speed_mbps" (facts) or "check.nic.eth0./sys/class/net/eth0/speed" (findings).
EXCLUDED_KEYS: tuple[str, ...] = (
    # Who the host is and how it was reached.
    r"^(host|source)$",
    r"(^|[./ ])(hostname|nodename|fqdn)$",
    # When the run happened and how long it took.
    r"(^|[./ ])(timestamp|time|started|finished|duration|duration_s|elapsed|uptime|boot_id)$",
    # Identities of parts: MAC addresses (sysfs-class-net "address"), serial numbers, UUIDs,
    # InfiniBand GUIDs and GIDs, asset tags.
    r"(^|[./ _])(mac|macaddr|mac_address|hwaddr|perm_addr|permaddr)$",
    r"/sys/class/net/[^/]+/address$",
    r"serial|uuid|guid|/gids/|asset_tag",
    # The boot line's per-host parameters (root and resume devices by UUID, the node's address).
    # Facts compare the boot line parameter by parameter (kernel.cmdline.<name>); the whole line a
    # check quotes as evidence would differ on every host through root=UUID=.
    r"^kernel\.cmdline\.(root|resume|ip|hostname|nfsroot)$",
    r"(^|\.)/proc/cmdline$",
    # One process, one login or one job rather than the node: /proc/<pid>/, findings about
    # "pid 1234", the cgroup the checker's SSH session or batch job runs in (session-42.scope,
    # user-1000.slice, job_1234, torque/513099), and the size of the process table.
    r"/proc/\d+(/|$| )",
    r"/proc/(self|thread-self)/(cgroup|cpuset|mountinfo)",
    r"(^|\.)pid \d+(\.|$)",
    r"(^|[._ ])pids?$",
    r"(/sys/fs/cgroup|/dev/cpuset)/\S*\d",
    r"(^|\.)/proc$",
    # What is in use at this moment rather than configured: available memory, free/reserved/surplus
    # huge pages (a node's per_node pairs are (total, free); the hugepages check's per-node evidence
    # keeps the totals), traffic and error counters.
    r"(^|\.)(available_mib|free|reserved|surplus)$",
    r"\.per_node\.",
    r"/(free|resv|surplus)_hugepages$",
    r"/statistics/|/(hw_)?counters/",
    r"(^|[./ _])(rx|tx)_(packets|bytes|errors|dropped)$",
    # Readings of the moment rather than configuration: the gpu check's temperatures, margin to the
    # slowdown temperature and clock event reasons (NVML says "GPU idle" whenever no job runs:
    # https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html).
    r"temperature|slowdown margin|clock event reasons",
    # Virtual interfaces created per container or VM under random names (veth1a2b3c, cali..., tap...).
    r"(nics\[|/sys/class/net/)(veth|cali|tap|vnet|docker|br-|cni|flannel|vxlan)",
)
# Values that identify one part wherever they are quoted (searched in string values).
EXCLUDED_VALUES: tuple[str, ...] = (
    r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",  # UUIDs (RFC 9562 text form)
    r"\b[0-9a-f]{2}(:[0-9a-f]{2}){5,}\b",  # MAC and InfiniBand hardware addresses
)
_EXCLUDED_KEY = re.compile("|".join(f"(?:{r})" for r in EXCLUDED_KEYS), re.IGNORECASE)
_EXCLUDED_VALUE = re.compile("|".join(f"(?:{r})" for r in EXCLUDED_VALUES), re.IGNORECASE)


@functools.lru_cache(maxsize=1 << 16)
def _key_excluded(key: str) -> bool:
    """Whether a key is left out. Remembered: the hosts of a fleet share nearly all their keys, and
    the alternation above costs more than the rest of flattening."""
    return _EXCLUDED_KEY.search(key) is not None


HOST_PLACEHOLDER = "<host>"
FLEET_CHECK_ID = "fleet"  # findings of the comparison itself

# A list of dicts is keyed by the first of these fields its entries have ("nics[eth0]"); when that
# repeats (two ports of one RDMA device) by as many as it takes ("rdma[mlx5_0/1]"), else by position.
# pci_address keys GPUs the driver has not numbered; size_kb keys huge page pools by page size. Both
# keep a missing GPU or pool from shifting the positions (and so the keys) of the rest.
IDENTITY_FIELDS = ("id", "address", "name", "device", "port", "index", "pci_address", "size_kb")

# Evidence numbers with a unit are normalised to the base unit, so "1000 Mb/s" and "1 Gb/s" compare
# equal. The kernel's "kB" is 1024 bytes (proc(5), /proc/meminfo); Ki/Mi/Gi/Ti are binary and
# M/G/T with "B" decimal (IEC 80000-13); link rates and frequencies are SI.
_UNITS: dict[str, float] = {
    "": 1,
    "%": 1,
    "B": 1,
    "kB": 1024,
    "KB": 1024,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "TiB": 1024**4,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "b/s": 1,
    "bit/s": 1,
    "kb/s": 1e3,
    "Kb/s": 1e3,
    "Mb/s": 1e6,
    "Gb/s": 1e9,
    "Tb/s": 1e12,
    "Mb/sec": 1e6,
    "Gb/sec": 1e9,
    "Mbps": 1e6,
    "Gbps": 1e9,
    "MT/s": 1e6,
    "GT/s": 1e9,
    "Hz": 1,
    "kHz": 1e3,
    "MHz": 1e6,
    "GHz": 1e9,
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1,
    "sec": 1,
}
# A number, an optional unit, and an optional remark in parentheses that is dropped:
# "40 Gb/sec (4X QDR)" -> 40e9, "512 (free 3)" -> 512 (the free count is the moment's use).
_NUMBER = re.compile(r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([^\s\d()]*)\s*(?:\([^()]*\))?")


# --- Flattening one host ---------------------------------------------------------------------------


def host_values(facts: Mapping[str, Any] | None, findings: Sequence[Mapping[str, Any]]) -> dict[str, Value]:
    """One host as comparable keys: facts by path ("nics[eth0].speed_mbps"), the hardware counts
    derived from them (nodeagent.gate.hardware: "hardware.gpus") and findings as
    "check.<check_id>.<subject>.status" and "check.<check_id>.<subject>.<evidence key>".

    Lists of dicts are keyed by IDENTITY_FIELDS, lists of scalars joined with ",". Evidence values
    that are a whole number (optionally with a unit in _UNITS) become floats. An empty subject is
    "-". When several findings share a check and subject (a GPU's memory and clock findings), the
    worst status is kept. Keys and values in EXCLUDED_KEYS / EXCLUDED_VALUES are left out, and the
    host's name (from facts["host"] and the findings' "host") is replaced by "<host>".
    """
    out: dict[str, Value] = {}
    if facts is not None:
        _flatten("", facts, out)
        out.update(hardware.counts(facts))
    _add_findings(findings, out)
    names = {str(facts.get("host") or "")} if facts is not None else set()
    names |= {str(f.get("host") or "") for f in findings}
    scrub = _name_scrubber(names)
    clean: dict[str, Value] = {}
    for raw_key, raw_value in out.items():
        key = scrub(raw_key)
        value = scrub(raw_value) if isinstance(raw_value, str) else raw_value
        if isinstance(value, str) and _EXCLUDED_VALUE.search(value):
            continue
        if not _key_excluded(key):
            clean[key] = value
    return clean


def _flatten(prefix: str, obj: Any, out: dict[str, Value]) -> None:
    if prefix and _key_excluded(prefix):
        return
    if prefix == "kernel.cmdline" and isinstance(obj, str):
        # Parameter by parameter: one changed parameter is one drift, and root=UUID= drops out.
        obj = {name: value or True for name, value in parse_cmdline(obj).items()}
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(obj, list | tuple):
        if obj and all(isinstance(e, Mapping) for e in obj):
            for (label, used), entry in zip(_labels(obj), obj, strict=True):
                for k, v in entry.items():
                    if k not in used:
                        _flatten(f"{prefix}[{label}].{k}", v, out)
        elif all(_is_scalar(e) for e in obj):
            out[prefix] = ",".join(_text(e) for e in obj)
        else:
            for i, e in enumerate(obj):
                _flatten(f"{prefix}[{i}]", e, out)
    else:
        out[prefix] = _scalar(obj)


def _labels(entries: Sequence[Mapping[str, Any]]) -> list[tuple[str, set[str]]]:
    """Each entry's label inside the brackets and the identity fields it used: the first identity
    field, then as many more as it takes to tell the entries apart; positions when nothing does."""
    fields = [[f for f in IDENTITY_FIELDS if e.get(f) is not None] for e in entries]
    if all(fields):
        for n in range(1, max(len(fs) for fs in fields) + 1):
            labels = ["/".join(_text(e[f]) for f in fs[:n]) for e, fs in zip(entries, fields, strict=True)]
            if len(set(labels)) == len(labels):
                return [(label, set(fs[:n])) for label, fs in zip(labels, fields, strict=True)]
    return [(str(i), set()) for i in range(len(entries))]


def _add_findings(findings: Sequence[Mapping[str, Any]], out: dict[str, Value]) -> None:
    # Worst last, so that it is the status and evidence kept when a check and subject repeat. A
    # report from a node (--remote-agent, report merge) is data: entries that are not findings
    # are left out rather than trusted.
    usable = [f for f in findings if isinstance(f, Mapping)]
    for f in sorted(usable, key=lambda f: (_rank(f.get("status")), str(f.get("summary", "")))):
        base = f"check.{f.get('check_id') or '?'}.{f.get('subject') or '-'}"
        evidence = f.get("evidence")
        for where, value in evidence.items() if isinstance(evidence, Mapping) else ():
            out[f"{base}.{where}"] = _evidence_value(value)
        out[f"{base}.status"] = _text(f.get("status"))


def _rank(status: Any) -> int:
    try:
        return Status(status).rank
    except ValueError:
        return -1


# The same readings inside a healthy GPU's evidence text ("A100, 45 C, clocks: GPU idle"; checks/gpu.py).
READING_PARTS = re.compile(r", -?\d+(?:\.\d+)? C(?=,|$)|, clocks: .*$")


def _evidence_value(value: Any) -> Value:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value)
    text = READING_PARTS.sub("", str(value).strip())
    number = parse_number(text)
    return text if number is None else number


def parse_number(text: str) -> float | None:
    """The value of "1000", "2048 kB", "16 GT/s", "40 Gb/sec (4X QDR)" in base units; None otherwise."""
    m = _NUMBER.fullmatch(text.strip())
    if m is None or m.group(2) not in _UNITS:
        return None
    return float(m.group(1)) * _UNITS[m.group(2)]


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, str | int | float | bool)


def _scalar(v: Any) -> Value:
    if v is None or isinstance(v, bool | int | float):
        return v
    return str(v).strip()


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return "" if v is None else str(v).strip()


def _name_scrubber(names: Iterable[str]) -> Callable[[str], str]:
    # Names without a letter or shorter than 3 characters ("1", "n1") would also match ordinary
    # values, so they are left alone. Boundaries: not inside a longer word ("node1" in "node10").
    usable = sorted((n for n in names if len(n) >= 3 and re.search(r"[A-Za-z]", n)), key=len, reverse=True)
    if not usable:
        return lambda s: s
    pattern = re.compile(
        r"(?<![\w-])(?:" + "|".join(re.escape(n) for n in usable) + r")(?![\w-])", re.IGNORECASE
    )
    return lambda s: pattern.sub(HOST_PLACEHOLDER, s)


# --- Comparing hosts -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Drift:
    """Hosts whose value of `key` differs from the majority's. `majority_hosts` 0 means no value has
    a strict majority; `hosts` then lists every host. A missing key shows as None."""

    key: str
    majority: Value
    majority_hosts: int
    hosts: dict[str, Value]

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "majority": self.majority,
            "majority_hosts": self.majority_hosts,
            "hosts": dict(self.hosts),
        }


@dataclass(frozen=True)
class Outlier:
    """One host whose number is far from the fleet's median, in MADs (see the module docstring)."""

    key: str
    host: str
    value: float
    median: float
    mad: float  # median absolute deviation, unscaled
    score: float  # modified z-score 0.6745 * (value - median) / mad
    direction: str  # "high" | "low"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class FleetComparison:
    hosts: int
    drift: list[Drift]
    outliers: list[Outlier]

    def to_dict(self) -> dict[str, Any]:
        return {
            "hosts": self.hosts,
            "drift": [d.to_dict() for d in self.drift],
            "outliers": [o.to_dict() for o in self.outliers],
        }


def compare(
    values: Mapping[str, Mapping[str, Value]], min_hosts: int = MIN_HOSTS, threshold: float = THRESHOLD
) -> FleetComparison:
    """Drift and numeric outliers across hosts (host -> host_values(...)); see the module docstring.

    A key is compared when at least 2 hosts have it: a key only one host has is mostly that host's
    own name for something (an interface, a device path). Hosts without a key count as None.
    Results are sorted by key, then host.
    """
    _check_params(min_hosts, threshold)
    hosts = sorted(values)
    seen: dict[str, int] = {}
    for h in hosts:
        for key in values[h]:
            seen[key] = seen.get(key, 0) + 1
    drift: list[Drift] = []
    outliers: list[Outlier] = []
    for key in sorted(k for k, n in seen.items() if n >= 2):
        column = {h: values[h].get(key) for h in hosts}
        found = _drift(key, column)
        if found is not None:
            drift.append(found)
        numbers = {h: float(v) for h, v in column.items() if _is_number(v)}
        outliers.extend(outliers_in(numbers, key, threshold, min_hosts))
    outliers.sort(key=lambda o: (o.key, o.host))
    return FleetComparison(len(hosts), drift, outliers)


def outliers_in(
    samples: Mapping[str, float], key: str, threshold: float = THRESHOLD, min_hosts: int = MIN_HOSTS
) -> list[Outlier]:
    """Hosts whose |modified z-score| exceeds `threshold` for one measurement (sorted by host).

    None when fewer than `min_hosts` finite values, or when MAD is 0 (more than half the hosts
    have the median exactly: compare() reports the others as drift). For bandwidth a "low" host
    matters, for latency a "high" one; the direction says which.
    """
    _check_params(min_hosts, threshold)
    finite = {h: float(x) for h, x in samples.items() if math.isfinite(float(x))}
    if len(finite) < min_hosts:
        return []
    med = statistics.median(finite.values())
    mad = statistics.median(abs(x - med) for x in finite.values())
    if mad == 0 or not math.isfinite(mad):
        return []
    out = []
    for host in sorted(finite):
        x = finite[host]
        score = MAD_TO_Z * (x - med) / mad
        if abs(score) > threshold:
            out.append(Outlier(key, host, x, med, mad, score, "high" if score > 0 else "low"))
    return out


def _check_params(min_hosts: int, threshold: float) -> None:
    if not (threshold > 0 and math.isfinite(threshold)):
        raise UsageError(
            f"fleet comparison: threshold {threshold!r} is not a positive number of MADs; "
            f"{THRESHOLD} is the usual cut-off (Iglewicz and Hoaglin)"
        )
    if min_hosts < 1:
        raise UsageError(
            f"fleet comparison: min_hosts {min_hosts!r} must be at least 1 (default {MIN_HOSTS})"
        )


def _is_number(v: Value) -> TypeGuard[int | float]:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _same(v: Value) -> tuple[str, Any]:
    """What two values must share to be equal: 1 == 1.0, but True is not 1 and "1" is not 1."""
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, int | float):
        return ("number", "nan" if math.isnan(v) else v)  # NaN is not equal to itself
    if v is None:
        return ("none", None)
    return ("text", v)


def _drift(key: str, column: Mapping[str, Value]) -> Drift | None:
    groups: dict[tuple[str, Any], list[str]] = {}
    for host, value in column.items():
        groups.setdefault(_same(value), []).append(host)
    if len(groups) == 1:
        return None
    largest = max(groups.values(), key=len)
    if 2 * len(largest) > len(column):
        agree = set(largest)
        differ = {h: v for h, v in column.items() if h not in agree}
        return Drift(key, column[largest[0]], len(largest), differ)
    return Drift(key, None, 0, dict(column))


def below_majority(cmp: FleetComparison, status: Status = Status.WARN) -> dict[str, list[Finding]]:
    """Per host, a finding for each hardware count (nodeagent.gate.hardware) below the one a strict
    majority of the fleet shares: the fleet's own expectation of what a node has (a node of ten
    that shows 7 GPUs where nine show 8 lost one). A host whose count was not read (None) is not
    judged here: that is no evidence of a loss."""
    out: dict[str, list[Finding]] = {}
    for d in cmp.drift:
        want = d.majority
        if not d.key.startswith(f"{hardware.SECTION}.") or not d.majority_hosts or not _is_count(want):
            continue
        for host, value in d.hosts.items():
            if _is_count(value) and value < want:
                out.setdefault(host, []).append(_short(d, host, value, want, cmp.hosts, status))
    return out


def _is_count(v: Value) -> TypeGuard[int | float]:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _short(d: Drift, host: str, value: float, want: float, hosts: int, status: Status) -> Finding:
    return Finding(
        FLEET_CHECK_ID,
        status,
        f"{d.key} = {value:g}, where {d.majority_hosts} of {hosts} hosts have {want:g}",
        {d.key: f"{value:g}"},
        expected=f"{want:g}, as on most of the fleet",
        remediation=(
            "A node with less hardware than its peers lost some (a GPU fallen off the bus, an HCA or "
            "port down): check `nodeagent facts` and the kernel log on it, reseat or replace the part; "
            "state the inventory in the playbook's expect: when the fleet is mixed on purpose."
        ),
        subject=d.key,
        host=host,
    )


# --- Rendering -------------------------------------------------------------------------------------

HOSTS_SHOWN = 3  # host names listed per value before "+N more"
VALUE_WIDTH = 40  # long values (CPU lists, boot lines) are cut: the JSON output has them whole


def render_table(cmp: FleetComparison) -> RenderableType:
    """A 'drift' table (one row per differing value, with its hosts) and an 'outliers' table, or one
    line when the fleet agrees. Plain text in the cells, so it reads the same without colour."""
    if not cmp.drift and not cmp.outliers:
        return Text(f"fleet: no drift, no outliers across {cmp.hosts} hosts")
    parts: list[RenderableType] = [
        Text(f"fleet: {len(cmp.drift)} key(s) drift, {len(cmp.outliers)} outlier(s) across {cmp.hosts} hosts")
    ]
    if cmp.drift:
        parts.append(_drift_table(cmp.drift))
    if cmp.outliers:
        parts.append(_outlier_table(cmp.outliers))
    return Group(*parts)


def _drift_table(drift: Sequence[Drift]) -> Table:
    """Per key: the majority's value and how many hosts have it, then each differing value with
    its hosts (largest group first). Three columns leave room for long keys at 80 columns."""
    table = Table(title="drift", title_justify="left", expand=True, box=box.SIMPLE_HEAD)
    table.add_column("key", overflow="fold", ratio=5)
    table.add_column("value", overflow="fold", ratio=3)
    table.add_column("hosts", overflow="fold", ratio=4)
    for d in drift:
        groups: dict[tuple[str, Any], list[str]] = {}
        for host, value in d.hosts.items():
            groups.setdefault(_same(value), []).append(host)
        if d.majority_hosts:
            rows = [(_show(d.majority), f"{d.majority_hosts} hosts (majority)")]
        else:
            rows = [("(no majority)", f"{len(d.hosts)} hosts, {len(groups)} values")]
        for hosts in sorted(groups.values(), key=lambda hs: (-len(hs), hs[0])):
            rows.append((_show(d.hosts[hosts[0]]), abbreviate(hosts)))
        for i, (value, hosts_text) in enumerate(rows):
            table.add_row(*lits(d.key if i == 0 else "", value, hosts_text), end_section=i == len(rows) - 1)
    return table


def _outlier_table(outliers: Sequence[Outlier]) -> Table:
    table = Table(title="outliers", title_justify="left", expand=True, box=box.SIMPLE_HEAD)
    table.add_column("key", overflow="fold", ratio=3)
    table.add_column("host", overflow="fold", ratio=1)
    table.add_column("value", justify="right")
    table.add_column("median", justify="right")
    table.add_column("score", justify="right")
    table.add_column("direction")
    for o in outliers:
        table.add_row(*lits(o.key, o.host, _show(o.value), _show(o.median), f"{o.score:+.1f}", o.direction))
    return table


def abbreviate(hosts: Sequence[str], shown: int = HOSTS_SHOWN) -> str:
    """ "h03, h07, h09 +12 more" (all of them when only one more would be hidden)."""
    if len(hosts) <= shown + 1:
        return ", ".join(hosts)
    return f"{', '.join(hosts[:shown])} +{len(hosts) - shown} more"


def _show(v: Value) -> str:
    if v is None:
        return "(missing)"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 1e15 else f"{v:.6g}"
    text = str(v)
    if text == "":
        return '""'
    return text if len(text) <= VALUE_WIDTH else text[: VALUE_WIDTH - 1] + "…"
