"""Counts of a node's hardware, derived from its facts document: pure, no I/O.

A node that lost a GPU or an HCA shows it first as a count: NHC's check_hw_* and DCGM's expected
GPU count are built on exactly this (https://github.com/mej/nhc, "Hardware Checks";
https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html). The counts are
value keys like any fact (nodeagent.compare.fleet.host_values adds them), so a playbook states what
a node must have (`expect:` or a threshold on `hardware.gpus`), a baseline notices a count that
changed, and the fleet view shows the node whose count differs from the majority.

Keys (all numbers):
- hardware.gpus: the GPUs the node shows (the PCI tree, else the driver's list); absent when
  neither was read, since a tree that was never read is not "no GPU";
- hardware.gpu_models[MODEL]: GPUs of one model (the driver's product name, else the vendor);
- hardware.rdma_hcas, hardware.rdma_ports, hardware.rdma_ports_active: RDMA devices
  (/sys/class/infiniband), their ports and the ports in state ACTIVE.
Memory needs no count of its own: memory.total_mib is already a value key.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

SECTION = "hardware"
KEYS = ("gpus", "gpu_models", "rdma_hcas", "rdma_ports", "rdma_ports_active")
_COUNTED_BY = {f"{SECTION}.gpu_models": f"{SECTION}.gpus"}  # a per-model count and its total
_ACTIVE = "ACTIVE"  # ports/N/state "4: ACTIVE" (https://www.kernel.org/doc/Documentation/ABI/stable/sysfs-class-infiniband)


def counts(facts: Mapping[str, Any]) -> dict[str, int | float]:
    """The hardware.* values of one node's facts document (nodeagent.facts.node.collect)."""
    out: dict[str, int | float] = {}
    # A list a recording did not hold is not an empty one: no count comes from it.
    unrecorded = facts.get("unrecorded")
    if not isinstance(unrecorded, Mapping):
        unrecorded = {}
    gpus = _entries(facts.get("gpus"))
    if "gpus" not in unrecorded and (gpus or ("pci" not in unrecorded and _entries(facts.get("pci")))):
        out[f"{SECTION}.gpus"] = len(gpus)
        for model, n in sorted(Counter(_model(g) for g in gpus).items()):
            out[f"{SECTION}.gpu_models[{model}]"] = n
    ports = _entries(facts.get("rdma"))
    if isinstance(facts.get("rdma"), list) and "rdma" not in unrecorded:
        out[f"{SECTION}.rdma_hcas"] = len({str(p.get("device")) for p in ports})
        out[f"{SECTION}.rdma_ports"] = len(ports)
        out[f"{SECTION}.rdma_ports_active"] = sum(1 for p in ports if p.get("state") == _ACTIVE)
    return out


def _entries(value: Any) -> list[Mapping[str, Any]]:
    return [e for e in value if isinstance(e, Mapping)] if isinstance(value, Sequence) else []


def _model(gpu: Mapping[str, Any]) -> str:
    return str(gpu.get("product_name") or gpu.get("vendor") or "?")


def zero_when_counted(key: str, values: Mapping[str, Any]) -> int | None:
    """0 for a per-model count the node lacks while its GPUs were counted (no GPU of that model is
    0 of them, not an unread source); None otherwise."""
    family = key.split("[", 1)[0]
    counted = _COUNTED_BY.get(family)
    return 0 if "[" in key and counted is not None and counted in values else None
