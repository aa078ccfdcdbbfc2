"""Running a flow on every host of a fleet: the checks (agentless, or by the nodes' own nodeagent),
the inter-node bandwidth, or any nodeagent command on each node, gathered into one FleetReport.
The hosts come from an inventory over SSH, or from Slurm (`--slurm`: its nodes run nodeagent as a
job step, nodeagent.cluster.slurm)."""

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
    from nodeagent.cluster.slurm import Shape, Target
    from nodeagent.compare.values import Value
    from nodeagent.core.finding import Status

OnDone = Callable[["HostOutcome"], None]


# The Slurm job's time limit (minutes) per command, capped at the partition's MaxTime: a check
# takes seconds (each check is cut at --timeout); tune --verify and bench run trials for minutes.
SLURM_MINUTES = {"check": 10, "tune": 60, "bench": 60}


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

    def inventory(self) -> Inventory | None:
        """The inventory of `cluster` or `hostlist` (None when neither was given: no fleet, or
        Slurm's nodes)."""
        from nodeagent.cluster.inventory import load
        from nodeagent.core.errors import UsageError

        if sum(1 for given in (self.cluster, self.hostlist, self.slurm) if given) > 1:
            raise UsageError("give one of --cluster FILE, --hosts EXPR and --slurm PARTITION|NODELIST")
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
    hardware (FAIL when not given: nodeagent.gate.judge.lost_hardware)."""
    from nodeagent.cluster.report import FleetReport
    from nodeagent.cluster.runner import run_fleet
    from nodeagent.core.finding import Status

    start = time.monotonic()
    outcomes = run_fleet(inv, job, fleet.workers, fleet.accept_new_host_keys, on_done)
    return FleetReport.build(
        outcomes, time.monotonic() - start, compare=compare, lost_hardware=lost_hardware or Status.FAIL
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
    from nodeagent.gate import judge

    validate_check(inv, request, remote_agent, bandwidth is not None)
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


def validate_check(inv: Inventory, request: CheckRequest, remote_agent: bool, bandwidth: bool) -> None:
    """The usage errors of `check`, found before anything starts (a progress display, a host)."""
    from nodeagent.core.errors import UsageError

    if remote_agent and (request.playbook is not None or request.baseline is not None):
        raise UsageError("--playbook and --baseline judge pulled recordings: leave out --remote-agent")
    local = [spec.name for spec in inv.hosts if spec.connection == "local"]
    if bandwidth and local:
        # Between two local hosts it would measure this machine's loopback, not a network.
        raise UsageError(
            f"--bandwidth measures the network between hosts over SSH, and {', '.join(local[:3])}"
            f"{' ...' if len(local) > 3 else ''} run on this machine (connection: local): leave "
            "out --bandwidth, or --limit the run to SSH hosts"
        )


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


def slurm_target(fleet: FleetRequest) -> Target:
    """The partition or nodelist of `fleet.slurm`, with its nodes' states as Slurm has them."""
    from nodeagent.cluster import slurm

    assert fleet.slurm is not None
    return slurm.resolve(fleet.slurm)


def slurm_check(
    target: Target, request: CheckRequest, fleet: FleetRequest, on_done: OnDone | None = None
) -> FleetRun:
    """The request's checks run by nodeagent on each node of `target`, as one Slurm job step, and
    compared like any fleet. `request.root`, when given, is what each node reads (a path there)."""
    from nodeagent.cluster.slurm import check_outcome

    validate_slurm_check(request)
    return FleetRun(_on_slurm(target, request.argv(), check_outcome, fleet, on_done, compare=True))


def validate_slurm_check(request: CheckRequest) -> None:
    """The usage errors of `check --slurm`, found before anything starts (a progress display, a job)."""
    from nodeagent.core.errors import UsageError

    if request.playbook is not None or request.baseline is not None:
        raise UsageError(
            "--playbook and --baseline judge recordings pulled over SSH; with --slurm the nodes run "
            "their own checks: leave them out, or use --cluster/--hosts"
        )


def on_slurm(
    target: Target,
    argv: Sequence[str],
    fleet: FleetRequest,
    statuses: Mapping[int, str] | None = None,
    on_done: OnDone | None = None,
) -> FleetReport:
    """`nodeagent ARGV --format json` on each node of `target` as one Slurm job step (tune, bench);
    their documents side by side, each node's status from its exit code via `statuses`."""
    from nodeagent.cluster.slurm import agent_outcome

    return _on_slurm(
        target, (*argv, "--format", "json"), agent_outcome(statuses), fleet, on_done, compare=False
    )


def _on_slurm(
    target: Target,
    argv: Sequence[str],
    shape: Shape,
    fleet: FleetRequest,
    on_done: OnDone | None,
    compare: bool,
) -> FleetReport:
    from nodeagent.cluster import slurm
    from nodeagent.cluster.report import FleetReport

    options = slurm.Options(
        agent=fleet.agent or "nodeagent", minutes=SLURM_MINUTES[argv[0]], parallel=fleet.workers
    )
    start = time.monotonic()
    ran = slurm.run(target, argv, shape, options, on_done)
    # Nodes Slurm did not run (drained, busy ...) have no values: left out of the comparison, which
    # would call them short of the fleet's hardware. A node short of the majority's hardware is WARN,
    # as in any fleet without a playbook.
    compared = {
        name: o for name, o in ran.outcomes.items() if (o.doc or {}).get("slurm", {}).get("ran", True)
    }
    report = FleetReport.build(compared, time.monotonic() - start, compare=compare)
    report.outcomes = {name: report.outcomes.get(name, o) for name, o in ran.outcomes.items()}
    report.extra = {"slurm": ran.source}
    return report


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


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "SLURM_MINUTES",
    "FleetRequest",
    "FleetRun",
    "baseline_values",
    "check",
    "on_agents",
    "on_slurm",
    "run",
    "slurm_check",
    "slurm_target",
    "validate_check",
    "validate_slurm_check",
]
