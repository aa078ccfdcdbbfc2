"""numa-balancing: turn automatic NUMA balancing off on multi-node machines.

Pinned training ranks already allocate locally; the balancer's hinting page faults and page
migrations only add latency (https://docs.kernel.org/admin-guide/sysctl/kernel.html#numa-balancing).
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.api.check import param
from nodeagent.api.tune import Plan, Tuner, runtime_write
from nodeagent.facts import system, topology
from nodeagent.host import Host

ID = "numa-balancing"
SYSCTL = "kernel.numa_balancing"
PATH = "/proc/sys/kernel/numa_balancing"


@dataclass(frozen=True)
class Params:
    value: int = param(0, "0 disables automatic NUMA balancing (sysctl kernel.numa_balancing, kernel.html).")


@dataclass(frozen=True)
class Facts:
    current: str | None
    cpu_nodes: int


def collect(host: Host) -> Facts:
    t = topology.collect(host)
    return Facts(system.sysctl(host, SYSCTL), len([n for n in t.numa_nodes if n.cpus]))


def plan(f: Facts, p: Params) -> Plan:
    if f.current is None:
        return Plan(ID, notes=[f"{PATH} is absent: this kernel has no automatic NUMA balancing"])
    if f.cpu_nodes < 2:
        return Plan(ID, notes=[f"one NUMA node: {SYSCTL} has nothing to balance, left at {f.current}"])
    if f.current.strip() == str(p.value):
        return Plan(ID, notes=[f"{SYSCTL} is already {p.value}"])
    why = (
        "pinned ranks allocate locally; balancing only adds page faults and migrations "
        "(docs.kernel.org/admin-guide/sysctl/kernel.html#numa-balancing)"
    )
    return Plan(ID, [runtime_write(ID, SYSCTL, why, {PATH: f.current}, str(p.value))])


TUNER = Tuner(
    id=ID,
    title="Automatic NUMA balancing",
    collect=collect,
    plan=plan,
    params=Params,
    paths=(PATH, *topology.PATHS),
    writes=(PATH,),
)
