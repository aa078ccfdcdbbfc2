"""CPU frequency policies (Documentation/admin-guide/pm/cpufreq.rst): driver, governor, EPP.

Modern kernels (4.3+) have cpufreq/policyN, with cpuN/cpufreq a link to it; older ones only have
cpuN/cpufreq, a folder on the policy owner and a link on the other CPUs. Both are tried, and a
policy reached twice (through a link, or as the same set of CPUs) is one policy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nodeagent.core import parse
from nodeagent.facts.reader import Reader
from nodeagent.host import Host

CPU_DIR = "/sys/devices/system/cpu"
CPUFREQ_DIR = f"{CPU_DIR}/cpufreq"
_ATTRS = (
    "scaling_driver",
    "scaling_governor",
    "scaling_available_governors",
    "energy_performance_preference",
    "energy_performance_available_preferences",
    "related_cpus",
    "affected_cpus",
)
PATHS = (
    *(f"{CPUFREQ_DIR}/policy*/{a}" for a in _ATTRS),
    *(f"{CPU_DIR}/cpu*/cpufreq/{a}" for a in _ATTRS),
    f"{CPU_DIR}/cpu*/cpufreq",
)


@dataclass(frozen=True)
class Policy:
    path: str
    cpus: list[int]
    driver: str | None
    governor: str | None  # None: unreadable (an inactive policy, all its CPUs offline, reads EBUSY)
    epp: str | None  # None: no EPP (not intel_pstate/amd-pstate active mode, or HWP/CPPC off)
    governors: list[str] | None = None  # scaling_available_governors; None when absent
    epps: list[str] | None = None  # energy_performance_available_preferences


@dataclass(frozen=True)
class CpuFreq:
    policies: list[Policy]
    problems: list[str]


def _cpu_words(text: str) -> list[int]:
    """related_cpus / affected_cpus: "0 1 2" (space separated, unlike cpulist files)."""
    words = text.split()
    if not words or not all(parse.is_decimal(w) and int(w) < parse.MAX_CPU for w in words):
        raise ValueError(f"not a CPU list: {text!r}")
    return sorted({int(w) for w in words})


def _words(r: Reader, path: str) -> list[str] | None:
    text = r.value(path)
    return None if text is None else text.split()


def collect(host: Host) -> CpuFreq:
    return host.memo("facts.cpufreq", lambda: _collect(host))


def _collect(host: Host) -> CpuFreq:
    r = Reader(host)
    names = host.listdir(CPU_DIR) or []
    cpus = sorted(int(m.group(1)) for e in names if (m := re.fullmatch(r"cpu(\d{1,6})", e)))
    candidates = [
        f"{CPUFREQ_DIR}/{e}"
        for e in sorted(host.listdir(CPUFREQ_DIR) or [], key=lambda e: (len(e), e))
        if re.fullmatch(r"policy\d+", e)
    ]
    candidates += [f"{CPU_DIR}/cpu{c}/cpufreq" for c in cpus]
    seen_dirs: set[str] = set()
    seen_cpus: set[frozenset[int]] = set()
    out: list[Policy] = []
    for path in candidates:
        real = host.realpath(path)
        if real is None or real in seen_dirs or not host.is_dir(path):
            continue
        seen_dirs.add(real)
        driver = r.value(f"{path}/scaling_driver")
        governor = r.value(f"{path}/scaling_governor")
        governors = _words(r, f"{path}/scaling_available_governors")
        if driver is None and governor is None and governors is None:
            continue  # an empty folder (a partial recording): nothing to read or write there
        owned = r.parsed(f"{path}/related_cpus", _cpu_words) or r.parsed(f"{path}/affected_cpus", _cpu_words)
        if not owned:
            m = re.search(r"/(?:cpu|policy)(\d{1,6})(?:/cpufreq)?$", path)
            owned = [int(m.group(1))] if m else []
        key = frozenset(owned)
        if owned and key in seen_cpus:
            continue
        seen_cpus.add(key)
        out.append(
            Policy(
                path=path,
                cpus=owned,
                driver=driver,
                governor=governor or None,
                epp=r.value(f"{path}/energy_performance_preference") or None,
                governors=governors,
                epps=_words(r, f"{path}/energy_performance_available_preferences"),
            )
        )
    out.sort(key=lambda p: (p.cpus[:1] or [1 << 30], p.path))
    return CpuFreq(out, r.problems)
