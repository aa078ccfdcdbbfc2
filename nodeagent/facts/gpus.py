"""GPUs from PCI (works without a driver), else what the driver's tools recorded.

`collect` is the placement view that the topology, rank and pinning code builds on: the GPUs in
the PCI tree; else those of `nvidia-smi topo -m`, then of `nvidia-smi -q -x`, by nvidia-smi's index
and without an address (facts.pci_topology places every GPU that has one in the PCI tree, and
these are not in sysfs). `inventory` is what `nodeagent facts` lists: the same, except that where
sysfs shows no GPU it lists the GPUs of `nvidia-smi -q -x` (the recording the gpu check judges)
with their PCI addresses and names.

Health (ECC, clocks, NVLink, MIG) comes from NVML or `nvidia-smi -q -x`: see facts.nvml.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodeagent.facts import nvidia_smi, pci
from nodeagent.facts.gpu_report import SMI_COMMAND, SMI_SOURCE
from nodeagent.facts.topo_matrix import COMMAND as TOPO_COMMAND
from nodeagent.facts.topo_matrix import TopoMatrix, parse_topo
from nodeagent.host import Host

if TYPE_CHECKING:
    from nodeagent.facts.gpu_report import GpuHealth

NVIDIA_PROC = "/proc/driver/nvidia/gpus"
PATHS: tuple[str, ...] = (*pci.PATHS, f"{NVIDIA_PROC}/*/information")
COMMANDS = (TOPO_COMMAND, SMI_COMMAND)
_NORMALIZED = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


@dataclass(frozen=True)
class Gpu:
    index: int | None  # driver's index (GPUn) when known
    pci_address: str | None
    vendor: str
    numa_node: int | None
    cpu_affinity: list[int] | None
    source: str  # "pci", "nvidia-smi topo -m" or "nvidia-smi -q -x"
    product_name: str | None = None  # the driver's name for it ("NVIDIA A100-SXM4-80GB"); not in sysfs


def topo_matrix(host: Host) -> tuple[TopoMatrix | None, str | None]:
    """The recorded or live `nvidia-smi topo -m`, or None with the reason it is not there."""

    def load() -> tuple[TopoMatrix | None, str | None]:
        result = host.run(TOPO_COMMAND, timeout=15)
        if not result.ok:
            return None, (result.stderr.strip() or f"exit code {result.exited}").splitlines()[0]
        try:
            return parse_topo(result.stdout), None
        except ValueError as e:
            return None, f"unparsable `nvidia-smi topo -m` output: {e}"

    return host.memo("facts.topo_matrix", load)


def collect(host: Host) -> list[Gpu]:
    return host.memo("facts.gpus", lambda: _collect(host))


def _collect(host: Host) -> list[Gpu]:
    # The NVIDIA driver lists its GPUs by PCI address even where sysfs lacks the vendor file.
    nvidia = {pci.normalize_address(a) for a in host.listdir(NVIDIA_PROC) or []}
    devices = [d for d in pci.collect(host) if d.kind == "gpu" or d.address in nvidia]
    # PCI order is the order of CUDA_DEVICE_ORDER=PCI_BUS_ID and of nvidia-smi's indices.
    devices.sort(key=lambda d: d.address)
    gpus = [
        Gpu(
            index=i if all(d.vendor == pci.VENDOR_NVIDIA or d.address in nvidia for d in devices) else None,
            pci_address=d.address,
            vendor="NVIDIA" if d.address in nvidia else pci.GPU_VENDORS.get(d.vendor or "", "?"),
            numa_node=d.numa_node,
            cpu_affinity=d.local_cpus,
            source="pci",
        )
        for i, d in enumerate(devices)
    ]
    if gpus:
        return gpus
    matrix, _ = topo_matrix(host)
    if matrix is None:
        # Nor a matrix: the driver's list of `nvidia-smi -q -x`, without addresses (see `inventory`).
        return [_from_driver(g, None, with_address=False) for g in _smi_gpus(host)]
    # A snapshot may hold only the driver's view (no PCI tree): use it.
    return [
        Gpu(
            index=int(g.removeprefix("GPU")),
            pci_address=None,
            vendor="NVIDIA",
            numa_node=matrix.numa_affinity.get(g),
            cpu_affinity=matrix.cpu_affinity.get(g),
            source="nvidia-smi topo -m",
        )
        for g in matrix.gpus
    ]


def inventory(host: Host) -> list[Gpu]:
    """Every GPU the node shows: `collect`, or where sysfs has none the driver's own list, addressed.

    The driver's index is nvidia-smi's, which counts GPUs in PCI bus order (as `collect` does, and
    as CUDA with CUDA_DEVICE_ORDER=PCI_BUS_ID); CPU and NUMA affinity come from `topo -m`, whose
    GPUn is the same index.
    """
    found = collect(host)
    if any(g.source == "pci" for g in found):
        return found
    driver = _smi_gpus(host)
    if not driver:
        return found
    matrix, _ = topo_matrix(host)
    return [_from_driver(g, matrix, with_address=True) for g in driver]


def _smi_gpus(host: Host) -> tuple[GpuHealth, ...]:
    # Imported here: facts.nvidia_smi builds on this module.

    log = nvidia_smi.run_log(host).log
    return log.gpus if log is not None else ()


def _from_driver(g: GpuHealth, matrix: TopoMatrix | None, with_address: bool) -> Gpu:
    """A GPU of `nvidia-smi -q -x`. `collect` leaves its address out: a GPU with an address is one
    facts.pci_topology places in the PCI tree, and this one is not in sysfs."""
    name = f"GPU{g.index}"
    # Addresses are normalized as sysfs writes them; one that is not an address stays out.
    known = g.pci_address is not None and _NORMALIZED.fullmatch(g.pci_address) is not None
    return Gpu(
        index=g.index,
        pci_address=g.pci_address if with_address and known else None,
        vendor="NVIDIA",
        numa_node=matrix.numa_affinity.get(name) if matrix else None,
        cpu_affinity=matrix.cpu_affinity.get(name) if matrix else None,
        source=SMI_SOURCE,
        product_name=g.name,
    )
