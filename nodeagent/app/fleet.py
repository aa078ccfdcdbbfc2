"""Running a flow on every host of a fleet, wherever its hosts come from: the checks (agentless,
or by the nodes' own nodeagent), the inter-node bandwidth, or any nodeagent command on each node,
gathered into one FleetReport. A FleetSource (nodeagent.app.fleet_sources) is where the hosts come
from: an inventory or a hostlist over SSH, Slurm's nodes as one job step, or the read-only view of
a Prometheus. FleetRequest says which, and builds it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from nodeagent import checks
from nodeagent.app.fleet_sources import (
    SLURM_MINUTES,
    FleetCheck,
    FleetRun,
    NodeOption,
    OnDone,
    PrometheusSource,
    SlurmSource,
    SshSource,
)
from nodeagent.cluster import DEFAULT_PARALLEL
from nodeagent.cluster.inventory import load
from nodeagent.compare.values import host_values
from nodeagent.core.errors import UsageError

if TYPE_CHECKING:
    from nodeagent.cluster.inventory.load import Inventory
    from nodeagent.cluster.report import FleetReport
    from nodeagent.compare.values import Value


class FleetSource(Protocol):
    """Where a fleet's hosts come from and how a job reaches them."""

    def size(self) -> int | None:
        """How many hosts the report will have, for progress (None: known only from the answer).
        May ask the source (Slurm: its nodes and their states)."""
        ...

    def validate(self, check: FleetCheck) -> None:
        """Refuse, as a UsageError, what this source cannot do, before anything starts."""
        ...

    def check(self, check: FleetCheck, on_done: OnDone | None = None) -> FleetRun:
        """The checks on every host, judged and compared; `on_done` as each host ends."""
        ...

    def on_agents(
        self, argv: Sequence[str], statuses: Mapping[int, str] | None = None, on_done: OnDone | None = None
    ) -> FleetReport:
        """`nodeagent ARGV --format json` on every host (tune, bench: they change or measure the node
        itself); their documents side by side, each host's status from its exit code via `statuses`."""
        ...

    def source_lines(self, report: FleetReport) -> list[str]:
        """Where `report` came from, in lines shown under its tables (none when the hosts table
        says it all)."""
        ...

    def refuses(self, option: NodeOption) -> str | None:
        """Why this source's hosts cannot take a one-node option (`--root`, `--hostname`), after
        the option's name in the user's error; None when they can."""
        ...


@dataclass(frozen=True)
class FleetRequest:
    """Which hosts (an inventory file, a hostlist reached over SSH, or Slurm's nodes: a partition
    or a nodelist) and how they are reached."""

    cluster: str | None = None
    hostlist: str | None = None
    limit: str | None = None
    parallel: int | None = None  # None: nodeagent.cluster.DEFAULT_PARALLEL
    accept_new_host_keys: bool = False
    slurm: str | None = None  # a partition or a nodelist: the nodes run nodeagent as a Slurm job step
    agent: str | None = None  # with `slurm`: nodeagent on the nodes (None: `nodeagent` on their PATH)

    def source(self) -> FleetSource | None:
        """The source the options name (None: no fleet, this node)."""
        inv = self.inventory()
        if inv is not None:
            return SshSource(inv, self.workers, self.accept_new_host_keys)
        if self.slurm:
            return SlurmSource(self.slurm, self.agent or "nodeagent", self.workers)
        return None

    def source_options(self) -> dict[str, str | None]:
        """Each option that names a fleet source, as the user writes it, and its value: one at most
        may be given."""
        return {
            "--cluster FILE": self.cluster,
            "--hosts EXPR": self.hostlist,
            "--slurm PARTITION|NODELIST": self.slurm,
        }

    def inventory(self) -> Inventory | None:
        """The inventory of `cluster` or `hostlist` (None when neither was given: no fleet, or
        Slurm's nodes)."""
        options = self.source_options()
        if sum(1 for value in options.values() if value) > 1:
            *others, last = options
            raise UsageError(f"give one of {', '.join(others)} and {last}")
        if self.agent is not None and not self.slurm:
            raise UsageError(
                "--agent names nodeagent on Slurm's nodes: use it with --slurm (over SSH, `nodeagent:` "
                "in the inventory names it)"
            )
        if self.slurm and self.limit:
            raise UsageError(
                "--limit selects from an inventory file; with --slurm, name the nodes in its value"
            )
        if self.cluster:
            return load.load_inventory(Path(self.cluster), limit=self.limit)
        if self.hostlist:
            if self.limit:
                raise UsageError("--limit selects from an inventory file: use it with --cluster")
            return load.from_hostlist(self.hostlist)
        if self.limit:
            raise UsageError("--limit selects from an inventory file: give --cluster FILE too")
        return None

    @property
    def workers(self) -> int:
        return self.parallel or DEFAULT_PARALLEL


def check(source: FleetSource, check: FleetCheck, on_done: OnDone | None = None) -> FleetRun:
    """The checks of `check.request` on every host of `source`, judged and compared."""
    source.validate(check)
    return source.check(check, on_done)


def on_agents(
    source: FleetSource,
    argv: Sequence[str],
    statuses: Mapping[int, str] | None = None,
    on_done: OnDone | None = None,
) -> FleetReport:
    """`nodeagent ARGV --format json` on every host of `source`, side by side."""
    return source.on_agents(argv, statuses, on_done)


def baseline_values(source: SshSource, on_done: OnDone | None = None) -> dict[str, dict[str, Value]]:
    """Every host's comparable values for a fleet baseline; every host must answer."""
    # The fleet's runner (SSH, worker processes): loaded by the commands that run one.
    from nodeagent.cluster.runner import CheckJob  # noqa: PLC0415

    report = source.run(CheckJob(checks.select()), on_done)
    failed = [o.name for o in report.outcomes.values() if not o.ok]
    if failed:
        raise UsageError(
            f"no result from {', '.join(failed)}: a baseline needs every host; fix or --limit them"
        )
    return {
        name: host_values(o.facts, (o.doc or {}).get("findings", [])) for name, o in report.outcomes.items()
    }


__all__ = [
    "SLURM_MINUTES",
    "FleetCheck",
    "FleetRequest",
    "FleetRun",
    "FleetSource",
    "NodeOption",
    "OnDone",
    "PrometheusSource",
    "SlurmSource",
    "SshSource",
    "baseline_values",
    "check",
    "on_agents",
]
