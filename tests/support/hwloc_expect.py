"""hwloc's expected topology for a fixture tree, read from its .console (lstopo text) or .xml."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

_UNITS = {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024, "TiB": 1024 * 1024}


@dataclass(frozen=True)
class Expected:
    numa_memory_mib: dict[int, float]  # NUMA os index -> local memory
    pus: int
    cores: int | None
    packages: int | None


def _console(text: str) -> Expected:
    numa = {
        int(m.group(1)): float(m.group(2)) * _UNITS[m.group(3)]
        for m in re.finditer(r"NUMANode L#\d+ \(P#(\d+) local=([\d.]+)(KiB|MiB|GiB|TiB)", text)
    }

    def depth(kind: str) -> int | None:
        m = re.search(rf"depth \d+:\s+(\d+) {kind} \(type", text)
        return int(m.group(1)) if m else None

    return Expected(numa, depth("PU") or 0, depth("Core"), depth("Package"))


def _xml(text: str) -> Expected:
    root = ET.fromstring(text)
    objects = list(root.iter("object"))
    numa = {
        int(o.get("os_index", "0")): int(o.get("local_memory", "0")) / (1 << 20)
        for o in objects
        if o.get("type") == "NUMANode"
    }

    def count(kind: str) -> int:
        return sum(1 for o in objects if o.get("type") == kind)

    return Expected(numa, count("PU"), count("Core"), count("Package"))


def expected_for(fixtures: Path, name: str) -> Expected:
    console = fixtures / f"{name}.console"
    if console.exists():
        return _console(console.read_text())
    return _xml((fixtures / f"{name}.xml").read_text())
