"""numa-pinning: bind each local rank to the CPUs and memory of its GPU's NUMA node (its nearest NIC
noted), or, without GPUs, one rank per NUMA node.

An unpinned rank runs on every CPU of the node and allocates wherever the scheduler happens to
run it: its host buffers, the pinned staging memory of its GPU and NCCL's proxy threads end up
across the inter-socket link from the GPU. NCCL binds its own threads to "the CPU affinity of the
GPU" (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-ignore-cpu-affinity)
and NVIDIA's DGX guides launch each rank under numactl on its GPU's node
(https://docs.nvidia.com/dgx/dgxa100-user-guide/index.html). The layout comes from
nodeagent.facts.ranks; this tuner writes it into the profile ("ranks"), and `nodeagent exec
--local-rank N` applies rank N's entry with numactl --physcpubind/--membind (numactl(8),
https://man7.org/linux/man-pages/man8/numactl.8.html), or sched_setaffinity(2) and set_mempolicy(2)
where numactl is absent.

The `topology` check reports where each GPU sits; the binding puts each GPU's rank on exactly that
NUMA node (one rule, facts.ranks.node_by_cpus, where the firmware gives none), and leaves unpinned
a GPU the check finds outside the job's CPU set. The binding answers the `threads` check's
`pinning` finding (running ranks sharing CPUs): a job started by `nodeagent exec` runs bound.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from nodeagent.api.check import param
from nodeagent.api.tune import Change, Plan, Scope, Tuner, finding_key
from nodeagent.checks import threads as threads_check
from nodeagent.core import document, parse
from nodeagent.facts import ranks
from nodeagent.facts.ranks import RankFacts, RankLayout, RankSlot
from nodeagent.host import Host

ID = "numa-pinning"
TARGET = "launcher: CPU and memory binding per rank"
PROFILE_KEY = "ranks"
NCCL_AFFINITY_DOC = (
    "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-ignore-cpu-affinity"
)
NUMACTL_DOC = "https://man7.org/linux/man-pages/man8/numactl.8.html"
PINNING_FINDING = finding_key(threads_check.ID, "pinning")


@dataclass(frozen=True)
class Params:
    ranks: int = param(
        0,
        "Local ranks on this node; 0 = one per GPU, or one per NUMA node on CPU-only nodes "
        f"(one rank per GPU on its NUMA node: {NCCL_AFFINITY_DOC}).",
    )
    smt: bool = param(
        True,
        "Bind ranks to the SMT siblings of their cores too (listed after the physical cores); False "
        "binds one hardware thread per core (Intel: one compute thread per physical core, "
        "https://www.intel.com/content/www/us/en/developer/articles/technical/"
        "maximize-tensorflow-performance-on-cpu-considerations-and-recommendations-for-inference.html).",
    )
    split_shared_nodes: bool = param(
        False,
        "Ranks sharing a NUMA node (2 GPUs per node on a DGX A100) get disjoint sets of whole cores "
        "instead of the node's full CPU affinity as `nvidia-smi topo -m` reports it "
        f"(numactl --physcpubind, {NUMACTL_DOC}).",
    )
    cpu_only: bool = param(
        False,
        "Plan one rank per NUMA node even where GPUs exist (CPU training or preprocessing ranks); "
        f"memory stays on the rank's node with --membind ({NUMACTL_DOC}).",
    )


Facts = RankFacts


def collect(host: Host) -> RankFacts:
    return ranks.collect(host)


def _entry(slot: RankSlot, smt: bool) -> dict[str, Any]:
    out = document.dump(slot)
    if not smt and slot.physical_cores:
        # Physical cores come first in `cpus`: the first `physical_cores` are one thread per core.
        cpus = slot.cpus[: slot.physical_cores]
        out["cpus"] = cpus
        out["cpulist"] = parse.format_cpulist(cpus)
    return out


def _shown(e: dict[str, Any]) -> str:
    parts = [f"rank {e['local_rank']}"]
    if e["gpu"]:
        parts.append(e["gpu"])
    parts.append(f"CPUs {e['cpulist']}" if e["cpulist"] else "not pinned")
    if e["numa_node"] is not None:
        parts.append(f"node {e['numa_node']}")
    elif e["mems"]:
        parts.append(f"nodes {parse.format_cpulist(e['mems'])}")
    if e["nic"]:
        parts.append(f"NIC {','.join(e['nic'])}" + (f" ({e['nic_level']})" if e["nic_level"] else ""))
    return " ".join(parts)


def _changes_nothing(f: RankFacts, lay: RankLayout, entries: list[dict[str, Any]]) -> bool:
    """Every rank bound to all the CPUs it may use anyway, on a node with one memory node: numactl
    would not change where anything runs or allocates."""
    allowed = f.allowed
    if allowed is None:
        return False
    cpu_nodes = [n for n in f.topology.numa_nodes if n.cpus]
    return len(cpu_nodes) <= 1 and all(set(e["cpus"] or []) == set(allowed) for e in entries)


def plan(f: RankFacts, p: Params) -> Plan:
    out = _plan(f, p)
    if out.changes:
        return out
    return dataclasses.replace(out, declined={PINNING_FINDING: out.notes[0]})


def _plan(f: RankFacts, p: Params) -> Plan:
    lay = ranks.build(f, p.ranks, split_shared_nodes=p.split_shared_nodes, cpu_only=p.cpu_only)
    notes = list(lay.notes)
    if lay.error:
        return Plan(ID, notes=[f"nothing planned: {lay.error}", *notes])
    if not lay.slots:
        return Plan(ID, notes=["nothing planned: no rank could be placed (see below)", *notes])
    entries = [_entry(s, p.smt) for s in lay.slots]
    if not any(e["cpus"] for e in entries):
        return Plan(ID, notes=["nothing planned: no rank's CPUs are known or allowed here", *notes])
    if _changes_nothing(f, lay, entries):
        return Plan(
            ID,
            notes=[
                f"nothing planned: one NUMA node, and every rank would be bound to all "
                f"{len(f.allowed or [])} allowed CPUs ({parse.format_cpulist(f.allowed or [])}): "
                f"binding changes nothing; set {ID}.ranks=N with {ID}.split_shared_nodes=true for "
                "disjoint per-rank cores",
                *notes,
            ],
            details={"ranks": entries, "layout_source": lay.source},
        )
    notes += _sharing_notes(lay, p)
    notes.append(
        "applied per job by `nodeagent exec --local-rank N -- CMD` (rank from LOCAL_RANK, SLURM_LOCALID "
        "or OMPI_COMM_WORLD_LOCAL_RANK otherwise): numactl --physcpubind=<cpus> --membind=<numa_node>, "
        "or sched_setaffinity + set_mempolicy without numactl"
    )
    change = _binding(f, lay, entries)
    return Plan(ID, [change], notes, details={"ranks": entries, "layout_source": lay.source})


def _sharing_notes(lay: RankLayout, p: Params) -> list[str]:
    """What the binding leaves shared: SMT siblings kept when they are unknown, ranks on one node's CPUs."""
    notes = []
    if not p.smt and any(s.cpus and s.physical_cores is None for s in lay.slots):
        notes.append("smt=false asked for one thread per core, but SMT siblings are unknown: all CPUs kept")
    shared = [s.local_rank for s in lay.slots if s.shares_with]
    if shared:
        notes.append(
            f"ranks {parse.format_cpulist(shared)} each get their GPU's full NUMA-local CPU affinity, shared "
            f"with the other ranks of the node (tf-threads divides the pools); {ID}.split_shared_nodes=true "
            "gives each rank cores of its own"
        )
    return notes


def _binding(f: RankFacts, lay: RankLayout, entries: list[dict[str, Any]]) -> Change:
    """The one change: every rank's CPUs, memory node and NIC, applied per job by `nodeagent exec`."""
    allowed = f.allowed
    before = (
        f"not pinned: every rank may run on CPUs {parse.format_cpulist(allowed)} and allocate on any node"
        if allowed
        else "not pinned: every rank runs where the scheduler puts it"
    )
    if lay.slots[0].gpu is not None:
        why = (
            "each rank on its GPU's NUMA-local CPUs and memory, next to its nearest NIC, as NCCL and "
            f"NVIDIA's DGX guides bind them ({NCCL_AFFINITY_DOC})"
        )
    else:
        why = f"each rank's threads and memory stay on its NUMA node(s) (numactl(8), {NUMACTL_DOC})"
    return Change(
        ID,
        TARGET,
        before,
        "; ".join(_shown(e) for e in entries),
        Scope.PROCESS,
        why,
        profile_key=PROFILE_KEY,
        value=entries,
        answers=(PINNING_FINDING,),
    )


TUNER = Tuner(
    id=ID,
    title="NUMA pinning of ranks (CPUs, memory, nearest NIC)",
    collect=collect,
    plan=plan,
    params=Params,
    paths=ranks.PATHS,
)
