"""numa-balancing: turn automatic NUMA balancing off on multi-node machines.

Pinned training ranks already allocate locally; the balancer's hinting page faults and page
migrations only add latency (https://docs.kernel.org/admin-guide/sysctl/kernel.html#numa-balancing).
What is written is the value the `numa` check expects (its `kernel.numa_balancing` finding), on the
machines where the check judges it (more than one NUMA node with CPUs); another value is written
only when `value` is set explicitly, and the change then says so.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from nodeagent.api.check import param
from nodeagent.api.tune import Plan, Tuner, asked_why, finding_key, runtime_write
from nodeagent.checks import numa as numa_check
from nodeagent.core.errors import UsageError
from nodeagent.facts import system, topology
from nodeagent.host import Host

ID = "numa-balancing"
SYSCTL = numa_check.NUMA_BALANCING
PATH = "/proc/sys/kernel/numa_balancing"
FINDING = finding_key(numa_check.ID, SYSCTL)
DOC = "docs.kernel.org/admin-guide/sysctl/kernel.html#numa-balancing"


@dataclass(frozen=True)
class Params:
    value: int | None = param(
        None,
        "Value to write to kernel.numa_balancing. Unset: the numa check's (0, balancing off), written "
        "only where the check flags another; set: written even over a value the check accepts "
        f"(https://{DOC}).",
    )

    def __post_init__(self) -> None:
        if self.value is not None and (not isinstance(self.value, int) or isinstance(self.value, bool)):
            raise UsageError(f"tuner {ID}: parameter 'value' wants int, got {self.value!r}")
        if self.value is not None and self.value < 0:
            raise UsageError(f"tuner {ID}: value must be 0 or more, got {self.value}")


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
    expected = numa_check.Params().numa_balancing  # what `nodeagent check` judges with
    want = expected if p.value is None else p.value
    if f.current.strip() == str(want):
        return Plan(ID, notes=[f"{SYSCTL} is already {want}"])
    why = f"pinned ranks allocate locally; balancing only adds page faults and migrations ({DOC})"
    change = runtime_write(ID, SYSCTL, why, {PATH: f.current}, str(want))
    if not numa_check.sysctl_accepted(f.current, expected):
        return Plan(ID, [dataclasses.replace(change, answers=(FINDING,))])
    param_name = f"{ID}.value"
    asked = f"{asked_why(param_name, want, numa_check.ID, f.current.strip())} ({DOC})"
    return Plan(ID, [dataclasses.replace(change, asked=param_name, why=asked)])


TUNER = Tuner(
    id=ID,
    title="Automatic NUMA balancing",
    collect=collect,
    plan=plan,
    params=Params,
    paths=(PATH, *topology.PATHS),
    writes=(PATH,),
)
