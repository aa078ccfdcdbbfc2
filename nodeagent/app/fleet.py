"""Running a flow on every host of a fleet: the checks (agentless, or by the nodes' own nodeagent),
the inter-node bandwidth, or any nodeagent command on each node, gathered into one FleetReport."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nodeagent.app.check import DEFAULT_TIMEOUT_S

if TYPE_CHECKING:  # paramiko loads only when a fleet really runs: `nodeagent check` stays light
    from nodeagent.app.check import CheckRequest
    from nodeagent.cluster.bandwidth.measure import Params as BandwidthParams
    from nodeagent.cluster.bandwidth.report import BandwidthReport
    from nodeagent.cluster.inventory.load import Inventory
    from nodeagent.cluster.report import FleetReport
    from nodeagent.cluster.runner import HostOutcome, Job
    from nodeagent.compare.values import Value
    from nodeagent.core.finding import Status

OnDone = Callable[["HostOutcome"], None]


@dataclass(frozen=True)
class FleetRequest:
    """Which hosts (an inventory file, or a Slurm hostlist) and how they are reached."""

    cluster: str | None = None
    hostlist: str | None = None
    limit: str | None = None
    parallel: int | None = None  # None: nodeagent.cluster.DEFAULT_PARALLEL
    accept_new_host_keys: bool = False

    def inventory(self) -> Inventory | None:
        """The inventory of `cluster` or `hostlist` (None when neither was given)."""
        from nodeagent.cluster.inventory import load
        from nodeagent.core.errors import UsageError

        if self.cluster and self.hostlist:
            raise UsageError("give --cluster FILE or --hosts EXPR, not both")
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
        from nodeagent.cluster import DEFAULT_PARALLEL

        return self.parallel or DEFAULT_PARALLEL


@dataclass
class FleetRun:
    """The fleet's report, and the bandwidth measurement when one was asked for."""

    report: FleetReport
    bandwidth: BandwidthReport | None = None


def run(
    inv: Inventory,
    job: Job,
    fleet: FleetRequest,
    on_done: OnDone | None = None,
    compare: bool = True,
    lost_hardware: Status | None = None,
) -> FleetReport:
    """`job` on every host; `lost_hardware` is the level of a host short of the fleet majority's
    hardware (WARN when not given)."""
    from nodeagent.cluster.report import FleetReport
    from nodeagent.cluster.runner import run_fleet
    from nodeagent.core.finding import Status

    start = time.monotonic()
    outcomes = run_fleet(inv, job, fleet.workers, fleet.accept_new_host_keys, on_done)
    return FleetReport.build(
        outcomes, time.monotonic() - start, compare=compare, lost_hardware=lost_hardware or Status.WARN
    )


def check(
    inv: Inventory,
    request: CheckRequest,
    fleet: FleetRequest,
    on_done: OnDone | None = None,
    remote_agent: bool = False,
    bandwidth: BandwidthParams | None = None,
) -> FleetRun:
    """The request's checks, parameters, thresholds and baseline on every host, compared."""
    from nodeagent.cluster.runner import CheckJob
    from nodeagent.core.errors import UsageError
    from nodeagent.gate import judge

    if remote_agent and (request.playbook is not None or request.baseline is not None):
        raise UsageError("--playbook and --baseline judge pulled recordings: leave out --remote-agent")
    selected = request.checks()
    params = judge.check_params(request.playbook, selected)
    job = CheckJob(
        selected,
        params,
        request.timeout_s,
        remote_agent,
        playbook=request.playbook,
        baseline=request.baseline,
    )
    report = run(inv, job, fleet, on_done, lost_hardware=judge.lost_hardware(request.playbook))
    measured = None
    if bandwidth is not None:
        from nodeagent.cluster import ssh
        from nodeagent.cluster.bandwidth import measure

        keys = ssh.HostKeys.default(inv.known_hosts, fleet.accept_new_host_keys)
        measured = measure.measure(inv, keys, bandwidth, fleet.workers)
        report.extra = measured.to_dict()
        report.extra_status = measured.status()
    return FleetRun(report, measured)


def on_agents(
    inv: Inventory,
    argv: Sequence[str],
    fleet: FleetRequest,
    statuses: Mapping[int, str] | None = None,
    on_done: OnDone | None = None,
) -> FleetReport:
    """`nodeagent ARGV --format json` on every host (tune, bench: they change or measure the node
    itself); their documents side by side, each host's status from its exit code via `statuses`."""
    from nodeagent.cluster.runner import EXIT_STATUS, AgentJob

    job = AgentJob((*argv, "--format", "json"), statuses or EXIT_STATUS)
    return run(inv, job, fleet, on_done, compare=False)


def baseline_values(
    inv: Inventory, fleet: FleetRequest, on_done: OnDone | None = None
) -> dict[str, dict[str, Value]]:
    """Every host's comparable values for a fleet baseline; every host must answer."""
    from nodeagent import checks
    from nodeagent.cluster.runner import CheckJob
    from nodeagent.compare.values import host_values
    from nodeagent.core.errors import UsageError

    report = run(inv, CheckJob(checks.select()), fleet, on_done)
    failed = [o.name for o in report.outcomes.values() if not o.ok]
    if failed:
        raise UsageError(
            f"no result from {', '.join(failed)}: a baseline needs every host; fix or --limit them"
        )
    return {
        name: host_values(o.facts, (o.doc or {}).get("findings", [])) for name, o in report.outcomes.items()
    }


__all__ = ["DEFAULT_TIMEOUT_S", "FleetRequest", "FleetRun", "baseline_values", "check", "on_agents", "run"]
