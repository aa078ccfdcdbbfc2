"""The areas of the overview: which checks speak for each part of the node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from nodeagent.core.finding import Status, worst

if TYPE_CHECKING:
    from nodeagent.engine import CheckResult

AREAS: dict[str, tuple[str, ...]] = {
    "CPU and power": ("cstates",),
    "NUMA and memory": ("numa", "hugepages"),
    "PCIe and topology": ("pcie", "topology"),
    "GPUs and NVLink": ("gpu", "nvlink"),
    "NICs and RDMA": ("nic", "rdma"),
    "Kernel and threads": ("kernel", "threads"),
}


def area_of(check_id: str) -> str:
    return next((a for a, ids in AREAS.items() if check_id in ids), "Other")


def area_status(results: Mapping[str, CheckResult], area: str) -> Status | None:
    """The worst status of an area's checks, None while any of them has no result yet."""
    ids = AREAS.get(area) or tuple(c for c in results if area_of(c) == area)
    if any(i not in results for i in ids):
        return None
    return worst(s for i in ids for s in [results[i].status])
