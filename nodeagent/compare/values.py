"""A node's comparable values: its facts document and its check findings flattened into keys
("dmi.bios_version", "nics[eth0].speed_mbps", "check.nic.eth0./sys/class/net/eth0/speed"), the same
keys for the fleet comparison (nodeagent.compare.fleet), a playbook's thresholds and a baseline.

Flattening leaves out what differs between hosts or moments by nature (EXCLUDED_KEYS,
EXCLUDED_VALUES, and the host's own name, replaced by "<host>" wherever it is quoted), otherwise
every comparison would report every node.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from nodeagent.compare import hardware
from nodeagent.core.finding import Status
from nodeagent.facts.system import parse_cmdline

Value: TypeAlias = str | int | float | bool | None

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
    # Likewise its utilisation and performance state (P0 under load, P8 idle: nvidia-smi(1)).
    r"temperature|slowdown margin|clock event reasons|utilization/|performance_state",
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
    "W": 1,
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


# --- What a recording did not hold -----------------------------------------------------------------
# The facts document's `unrecorded` (nodeagent.facts.node: value key prefix -> the place a recording
# did not hold) flattens to "unrecorded.<prefix>"; the hardware counts are read from the device lists.
UNRECORDED = "unrecorded."
NOT_RECORDED = "not recorded"  # how a check's evidence says it (nodeagent.core.finding.not_recorded)
COUNTED_FROM = (("hardware.gpu", "gpus"), ("hardware.rdma_", "rdma"))


def evidence_place(key: str) -> str:
    """The path a check's value was read at ("check.kernel.memlock./proc/self/limits soft" ->
    "/proc/self/limits soft"); "" for a key that names none (a fact, a tool's output)."""
    return key[key.index("./") + 1 :] if key.startswith("check.") and "./" in key else ""


def unrecorded_place(key: str, values: Mapping[str, Value]) -> str | None:
    """Where `key`'s value is read, when the node's recording did not hold that place; None when it
    did (or the node is a machine, where a missing place is absent). A key of a check's evidence is
    unrecorded where that check reported its input not recorded."""
    if key.startswith("check."):
        prefix = "check." + key.split(".", 2)[1] + "."
        for k, v in values.items():
            if k.startswith(prefix) and v == NOT_RECORDED:
                return k[len(prefix) :].split(".", 1)[-1]
        where = evidence_place(key)
        roots = (k[len(UNRECORDED) :] for k in values if k.startswith(UNRECORDED + "/"))
        return next((root for root in roots if where == root or where.startswith(root + "/")), None)
    lookup = next((section for count, section in COUNTED_FROM if key.startswith(count)), key)
    for k, v in values.items():
        if k.startswith(UNRECORDED) and isinstance(v, str) and lookup.startswith(k[len(UNRECORDED) :]):
            return v
    return None


# --- Flattening one host ---------------------------------------------------------------------------


def host_values(facts: Mapping[str, Any] | None, findings: Sequence[Mapping[str, Any]]) -> dict[str, Value]:
    """One host as comparable keys: facts by path ("nics[eth0].speed_mbps"), the hardware counts
    derived from them (nodeagent.compare.hardware: "hardware.gpus") and findings as
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
