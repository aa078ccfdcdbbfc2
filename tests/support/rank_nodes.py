"""Nodes for the rank-layout tests (nodeagent.facts.ranks and the per-rank tuners built on it):
recorded `nvidia-smi topo -m` outputs, multi-socket hwloc trees, a cgroup v2 mount, and RankFacts
built by hand."""

from __future__ import annotations

from pathlib import Path

from nodeagent.core.parse import cpulist
from nodeagent.facts.cgroup import CgroupCpus
from nodeagent.facts.ranks import GpuPlace, RankFacts
from nodeagent.facts.topology import NumaNode, Topology
from nodeagent.host import SnapshotHost
from tests.support.helpers import make_tree, nvidia_smi_text

A100 = "topo-m-dgx-a100.txt"
DGX1 = "topo-m-dgx1-pcie.txt"
SMI_CMD = "nvidia-smi-topo-m"


def smi_host(tmp_path: Path, name: str) -> SnapshotHost:
    """A snapshot holding only commands/nvidia-smi-topo-m.txt (the recorded fixture, read at test time)."""
    return make_tree(tmp_path, {}, commands={SMI_CMD: nvidia_smi_text(name)})


def hand_facts(
    nodes: dict[int, str],
    *,
    siblings: dict[int, int] | None = None,
    gpus: list[GpuPlace] | None = None,
    cpuset: str | None = None,
    quota: float | None = None,
    memory_mib: dict[int, int] | None = None,
    smt_known: bool = True,
) -> RankFacts:
    """RankFacts built by hand: `nodes` {node: "0-3"}, `siblings` {cpu: core} (default: a core per CPU)."""
    node_cpus = {n: cpulist(spec) for n, spec in nodes.items()}
    online = sorted(c for cpus in node_cpus.values() for c in cpus)
    core_of = dict(siblings) if siblings is not None else {c: c for c in online}
    if not smt_known:
        core_of = {}
    topo = Topology(
        cpus_online=online,
        cpus_offline=[],
        packages=len(nodes),
        cores=len(set(core_of.values())),
        threads_per_core=1,
        numa_nodes=[NumaNode(n, cpus, (memory_mib or {}).get(n)) for n, cpus in node_cpus.items()],
        gpu_memory_nodes=[],
        ignored_numa_nodes={},
        cpu_model=None,
        smt_control=None,
        memory_total_mib=sum((memory_mib or {}).values()) or None,
        cpu_package=dict.fromkeys(online, 0),
        core_of=core_of,
        problems=[],
    )
    cg = CgroupCpus(
        affinity=None,
        mems_allowed=None,
        cpuset=None if cpuset is None else cpulist(cpuset),
        cpuset_source=None if cpuset is None else "/sys/fs/cgroup/job/cpuset.cpus.effective",
        quota_cpus=quota,
        quota_source=None if quota is None else "/sys/fs/cgroup/job/cpu.max",
        online=online,
        cpu_version=2,
        cpuset_version=2,
        cgroup_paths={},
        namespace_root=False,
    )
    return RankFacts(topology=topo, cpus=cg, gpus=gpus or [], smi_missing=None)


# hwloc fixture trees of CPU-only machines with several NUMA nodes.
MULTI_SOCKET = [
    "16amd64-8n2c",
    "40intel64-2g2n4c+pcilocality",
    "64amd64-4s2n4ca2co",
    "32em64t-2n8c+dax+nvme+mic+dimms",
]

# A cgroup v2 mount at /sys/fs/cgroup, the process in /job, cpuset and cpu controllers enabled.
CGROUP2 = {
    "/proc/self/cgroup": "0::/job\n",
    "/proc/self/mountinfo": "30 25 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n",
    "/sys/fs/cgroup/cgroup.controllers": "cpuset cpu\n",
}
