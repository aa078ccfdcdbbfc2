"""The GPU <-> NIC affinity matrix in `nvidia-smi topo -m` terms, derived from the PCI tree in sysfs.

Works without a GPU driver: it needs only /sys/bus/pci/devices (whose links give each device's
path from its host bridge, e.g. /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/
0000:03:00.0) and the NUMA node of each device.

Levels, closest first, as nvidia-smi prints them (NVML's nvmlGpuTopologyLevel_t in brackets,
https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceEnumvs.html; NCCL's path types of
src/graph/topo.h in braces):

  X     the device itself.
  PIX   at most one PCIe switch between the two devices [NVML_TOPOLOGY_SINGLE, "only need traverse
        a single PCIe switch"] {PATH_PIX}. Also two functions of one device (the ports of a dual-port
        NIC share the card's link; NCCL merges functions into one node for the same reason).
  PXB   several PCIe switches, but not the host bridge [NVML_TOPOLOGY_MULTIPLE] {PATH_PXB}.
  PHB   through the host bridge: the same root complex (pciDDDD:BB), different root ports
        [NVML_TOPOLOGY_HOSTBRIDGE] {PATH_PHB}.
  NODE  different host bridges of one NUMA node [NVML_TOPOLOGY_NODE]. NCCL has no such level: its
        CPU node is the NUMA node, so NODE is PATH_PHB for NCCL.
  SYS   different NUMA nodes: the path crosses the inter-socket link (QPI/UPI, Infinity Fabric)
        [NVML_TOPOLOGY_SYSTEM] {PATH_SYS}.

"PCIe switch" needs a definition, because sysfs shows a switch as two levels of bridges: the
switch's upstream port, and below it one downstream port per slot. A GPU and a NIC in two slots of
one switch are three bridges apart (downstream, upstream, downstream port) and nvidia-smi calls
that PIX. NCCL builds its tree the same way (src/graph/xml.cc, ncclTopoGetXmlFromSys: "Rewind two
'/' and follow the upper PCI switch, or stop if we reach a CPU root complex"): from a device it
climbs two path components at a time, so each upstream/downstream pair becomes one switch node,
and the root port merges into the root complex. `switch_chain` does exactly that, and `level`
applies NCCL's path rules (src/graph/paths.cc): one switch node shared by both devices and
directly above both is PIX, a path through two or more switch nodes is PXB, no common switch
node is PHB.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from nodeagent.core import parse
from nodeagent.facts import gpus, network, pci, topology
from nodeagent.facts.pci import PciDevice
from nodeagent.facts.topo_matrix import LINK_RANK
from nodeagent.host import Host

PATHS = (*pci.PATHS, *network.PATHS, *topology.PATHS, *gpus.PATHS)
COMMANDS = gpus.COMMANDS

LEVELS = ("X", "PIX", "PXB", "PHB", "NODE", "SYS")
# nvmlGpuTopologyLevel_t values, for readers who compare with NVML's API (X is INTERNAL there).
NVML_LEVEL = {"X": 0, "PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}

_BDF = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_HOST_BRIDGE = re.compile(r"^pci[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}$")


def rank(level: str | None) -> int:
    """Closeness for sorting, lower is closer; unknown (None) sorts last."""
    return 99 if level is None else LINK_RANK.get(level, 99)


@dataclass(frozen=True)
class Endpoint:
    """A GPU or a NIC, under the name nvidia-smi gives it (GPU0, mlx5_0; a plain netdev: eth2).

    NICs are the RDMA devices plus every physical netdev without RDMA, with its speed: which of
    those carry training traffic (25 GbE and up, say) is a threshold of the check, not a fact.
    """

    name: str
    kind: str  # "gpu" or "nic"
    pci_address: str
    numa_node: int | None
    rdma: bool = False
    speed_gbps: float | None = None  # netdev speed, or the fastest RDMA port's rate
    netdevs: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PciTopology:
    gpus: list[Endpoint]
    nics: list[Endpoint]
    links: dict[str, dict[str, str | None]]  # name -> name -> level; None: could not be derived
    cpu_numa_nodes: int  # NUMA nodes with CPUs
    unplaced: list[str]  # endpoints without a PCI path from a host bridge in sysfs

    def link(self, a: str, b: str) -> str | None:
        return self.links.get(a, {}).get(b)

    def nearest(self, gpu: str, nics: list[str]) -> tuple[str | None, list[str]]:
        """The closest level from `gpu` to any of `nics` and every NIC at that level."""
        known = [(rank(self.link(gpu, n)), n) for n in nics if self.link(gpu, n) is not None]
        if not known:
            return None, []
        best = min(r for r, _ in known)
        names = [n for r, n in known if r == best]
        return self.link(gpu, names[0]), names


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """ "mlx5_10" after "mlx5_2", as nvidia-smi lists them (sysfs listings sort as text)."""
    return tuple((0, int(part)) if parse.is_decimal(part) else (1, part) for part in re.split(r"(\d+)", name))


def placed(dev: PciDevice) -> bool:
    """True when sysfs gave the device's path from a host bridge (pciDDDD:BB)."""
    return bool(_HOST_BRIDGE.match(dev.root)) and all(_BDF.match(b) for b in dev.upstream)


def switch_chain(dev: PciDevice) -> list[str]:
    """The PCIe switch nodes above `dev`, nearest first, as NCCL's sysfs walk builds them.

    From a device, go up two path components: when both are bridges the upper one (a switch's
    upstream port) is the next switch node; when either is the host bridge the walk has reached the
    root complex. /pci0000:00/R/U1/D1/U2/D2/GPU gives [U2, U1]; /pci0000:00/R/GPU gives [].
    """
    path = [dev.root, *dev.upstream, dev.address]
    chain: list[str] = []
    i = len(path) - 1
    while i >= 2 and _BDF.match(path[i - 1]) and _BDF.match(path[i - 2]):
        i -= 2
        chain.append(path[i])
    return chain


def _same_device(a: str, b: str) -> bool:
    """Two functions of one PCI device ("0000:e1:00.0" and "0000:e1:00.1")."""
    return a.rsplit(".", 1)[0].lower() == b.rsplit(".", 1)[0].lower()


def _numa_level(a: PciDevice, b: PciDevice, cpu_numa_nodes: int) -> str | None:
    """NODE or SYS between devices under different host bridges; None when the platform does not say."""
    if a.numa_node is not None and b.numa_node is not None:
        return "NODE" if a.numa_node == b.numa_node else "SYS"
    if cpu_numa_nodes <= 1:
        return "NODE"
    if a.local_cpus and b.local_cpus and not set(a.local_cpus) & set(b.local_cpus):
        return "SYS"
    return None


def level(a: PciDevice, b: PciDevice, cpu_numa_nodes: int = 1) -> str | None:
    """The nvidia-smi topo level between two PCI devices (module docstring), None when unknown."""
    if a.address.lower() == b.address.lower():
        return "X"
    if not (placed(a) and placed(b)):
        # Without a path only NUMA can say something, and only that they are far apart.
        numa = _numa_level(a, b, cpu_numa_nodes)
        return "SYS" if numa == "SYS" else None
    if a.root.lower() != b.root.lower():
        return _numa_level(a, b, cpu_numa_nodes)
    if _same_device(a.address, b.address):
        return "PIX"
    chain_a, chain_b = switch_chain(a), switch_chain(b)
    common = next((s for s in chain_a if s in chain_b), None)
    if common is None:
        return "PHB"
    if chain_a.index(common) == 0 and chain_b.index(common) == 0:
        return "PIX"
    return "PXB"


def matrix(
    endpoints: list[Endpoint], devices: Mapping[str, PciDevice], cpu_numa_nodes: int
) -> dict[str, dict[str, str | None]]:
    out: dict[str, dict[str, str | None]] = {}
    for e in endpoints:
        row: dict[str, str | None] = {}
        for f in endpoints:
            da, db = devices.get(e.pci_address), devices.get(f.pci_address)
            row[f.name] = None if da is None or db is None else level(da, db, cpu_numa_nodes)
        out[e.name] = row
    return out


def collect(host: Host) -> PciTopology:
    return host.memo("facts.pci_topology", lambda: _collect(host))


def _rdma_endpoints(host: Host, devices: Mapping[str, PciDevice]) -> list[Endpoint]:
    by_device: dict[str, list[network.RdmaPort]] = {}
    for port in network.collect_rdma(host):
        by_device.setdefault(port.device, []).append(port)
    out = []
    for name, ports in sorted(by_device.items(), key=lambda item: natural_key(item[0])):
        address = next((p.pci_address for p in ports if p.pci_address), None)
        if address is None:  # soft RDMA (rxe, siw) has no PCI function of its own
            continue
        rates = [p.rate_gbps for p in ports if p.rate_gbps is not None]
        dev = devices.get(address)
        out.append(
            Endpoint(
                name=name,
                kind="nic",
                pci_address=address,
                numa_node=dev.numa_node if dev else ports[0].numa_node,
                rdma=True,
                speed_gbps=max(rates) if rates else None,
                netdevs=list(ports[0].netdevs),
            )
        )
    return out


def _collect(host: Host) -> PciTopology:
    devices = pci.by_address(pci.collect(host))
    t = topology.collect(host)
    cpu_numa_nodes = len([n for n in t.numa_nodes if n.cpus])

    gpu_eps: list[Endpoint] = []
    per_vendor: dict[str, int] = {}
    for g in gpus.collect(host):
        if g.pci_address is None:  # known only from a recorded nvidia-smi: no place in the tree
            continue
        # nvidia-smi numbers NVIDIA GPUs in PCI order and ignores the others (an iGPU, an AMD card):
        # count per vendor so that GPU0 here is GPU0 there.
        k = per_vendor.get(g.vendor, 0)
        per_vendor[g.vendor] = k + 1
        name = f"GPU{k}" if g.vendor == "NVIDIA" else f"{g.vendor}-GPU{k}"
        gpu_eps.append(Endpoint(name, "gpu", g.pci_address, g.numa_node))

    nic_eps = _rdma_endpoints(host, devices)
    covered = {e.pci_address for e in nic_eps}
    for nic in sorted(network.collect_nics(host), key=lambda n: natural_key(n.name)):
        # An RDMA device's netdevs (ib0, the RoCE port) are that device; nvidia-smi names it mlx5_N.
        if nic.pci_address is None or nic.pci_address in covered or nic.pci_address not in devices:
            continue
        nic_eps.append(
            Endpoint(
                name=nic.name,
                kind="nic",
                pci_address=nic.pci_address,
                numa_node=devices[nic.pci_address].numa_node,
                speed_gbps=None if nic.speed_mbps is None else nic.speed_mbps / 1000,
                netdevs=[nic.name],
            )
        )
    endpoints = gpu_eps + nic_eps
    unplaced = [
        e.name for e in endpoints if e.pci_address not in devices or not placed(devices[e.pci_address])
    ]
    return PciTopology(
        gpus=gpu_eps,
        nics=nic_eps,
        links=matrix(endpoints, devices, cpu_numa_nodes),
        cpu_numa_nodes=cpu_numa_nodes,
        unplaced=unplaced,
    )
