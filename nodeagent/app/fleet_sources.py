"""Where a fleet's hosts come from and how a job reaches them: the sources behind
nodeagent.app.fleet's FleetSource. Each says how many hosts it will report, refuses what it cannot
do before anything starts, runs the checks or a nodeagent command on its hosts, and describes in a
few lines where the report came from.

- SshSource: the hosts of an inventory file or a hostlist, over SSH (or run here: `connection:
  local`), judged here (nodeagent.cluster.runner).
- SlurmSource: Slurm's nodes, a partition or a nodelist; nodeagent on each node runs as one job
  step (nodeagent.cluster.slurm).
- PrometheusSource: what a Prometheus holds of the nodes' last runs, read-only
  (nodeagent.cluster.prometheus_view).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Literal

from nodeagent.core.errors import UsageError

if TYPE_CHECKING:  # paramiko loads only when a fleet really runs: `nodeagent check` stays light
    from nodeagent.app.check import CheckRequest
    from nodeagent.cluster.bandwidth.measure import Params as BandwidthParams
    from nodeagent.cluster.bandwidth.report import BandwidthReport
    from nodeagent.cluster.inventory.load import Inventory
    from nodeagent.cluster.prometheus import Client
    from nodeagent.cluster.prometheus_view import PrometheusFleetRequest
    from nodeagent.cluster.report import FleetReport
    from nodeagent.cluster.runner import HostOutcome, Job
    from nodeagent.cluster.slurm import Shape, Target
    from nodeagent.core.finding import Status

OnDone = Callable[["HostOutcome"], None]
# The options that name the one node a command reads: a recorded tree, and its name.
NodeOption = Literal["root", "hostname"]
ONE_NODE = {"root": "reads one node", "hostname": "names the one node read here"}

# The Slurm job's time limit (minutes) per command, capped at the partition's MaxTime: a check
# takes seconds (each check is cut at --timeout); tune --verify and bench run trials for minutes.
SLURM_MINUTES = {"check": 10, "tune": 60, "bench": 60}


@dataclass(frozen=True)
class FleetCheck:
    """What `check` asks of a fleet: the request, whether the hosts' own nodeagent runs the checks
    (SSH: else they are collected over SSH and judged here), and the links to measure, if any."""

    request: CheckRequest
    remote_agent: bool = False
    bandwidth: BandwidthParams | None = None


@dataclass
class FleetRun:
    """The fleet's report, and the bandwidth measurement when one was asked for."""

    report: FleetReport
    bandwidth: BandwidthReport | None = None


def _no_judging_here(request: CheckRequest, why: str) -> None:
    if request.playbook is not None or request.baseline is not None:
        raise UsageError(f"--playbook and --baseline judge recordings pulled over SSH; {why}")


# -- SSH --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SshSource:
    """The hosts of an inventory (a file, or a hostlist), reached over SSH `workers` at a time."""

    inventory: Inventory
    workers: int
    accept_new_host_keys: bool = False

    def size(self) -> int | None:
        return len(self.inventory.hosts)

    def validate(self, check: FleetCheck) -> None:
        if check.remote_agent and (check.request.playbook is not None or check.request.baseline is not None):
            raise UsageError("--playbook and --baseline judge pulled recordings: leave out --remote-agent")
        local = [spec.name for spec in self.inventory.hosts if spec.connection == "local"]
        if check.bandwidth is not None and local:
            # Between two local hosts it would measure this machine's loopback, not a network.
            raise UsageError(
                f"--bandwidth measures the network between hosts over SSH, and {', '.join(local[:3])}"
                f"{' ...' if len(local) > 3 else ''} run on this machine (connection: local): leave "
                "out --bandwidth, or --limit the run to SSH hosts"
            )

    def check(self, check: FleetCheck, on_done: OnDone | None = None) -> FleetRun:
        """The request's checks, parameters, thresholds and baseline on every host, compared."""
        from nodeagent.cluster.runner import CheckJob
        from nodeagent.gate import judge

        request = check.request
        selected = request.checks()
        job = CheckJob(
            selected,
            judge.check_params(request.playbook, selected),
            request.timeout_s,
            check.remote_agent,
            playbook=request.playbook,
            baseline=request.baseline,
        )
        report = self.run(job, on_done, lost_hardware=judge.lost_hardware(request.playbook))
        if check.bandwidth is None:
            return FleetRun(report)
        from nodeagent.cluster import ssh
        from nodeagent.cluster.bandwidth import measure

        keys = ssh.HostKeys.default(self.inventory.known_hosts, self.accept_new_host_keys)
        measured = measure.measure(self.inventory, keys, check.bandwidth, self.workers)
        report.extra = measured.section()
        report.extra_status = measured.status()
        return FleetRun(report, measured)

    def on_agents(
        self, argv: Sequence[str], statuses: Mapping[int, str] | None = None, on_done: OnDone | None = None
    ) -> FleetReport:
        from nodeagent.cluster.runner import EXIT_STATUS, AgentJob

        job = AgentJob((*argv, "--format", "json"), statuses or EXIT_STATUS)
        return self.run(job, on_done, compare=False)

    def source_lines(self, report: FleetReport) -> list[str]:
        return []  # the hosts table names every host and how it was reached

    def refuses(self, option: NodeOption) -> str | None:
        if option == "root":
            return f"{ONE_NODE[option]}; it cannot be used with --cluster or --hosts"
        return f"{ONE_NODE[option]}; with --cluster or --hosts the inventory names each host"

    def run(
        self,
        job: Job,
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
        outcomes = run_fleet(self.inventory, job, self.workers, self.accept_new_host_keys, on_done)
        return FleetReport.build(
            outcomes, time.monotonic() - start, compare=compare, lost_hardware=lost_hardware or Status.FAIL
        )


# -- Slurm ------------------------------------------------------------------------------------------


@dataclass
class SlurmSource:
    """Slurm's nodes (`nodes`: a partition or a nodelist); nodeagent (`agent`) on each runs as one
    job step. The nodes and their states are asked of Slurm once, when first needed (`resolved`:
    already asked)."""

    nodes: str
    agent: str = "nodeagent"
    workers: int = 1
    resolved: Target | None = field(default=None, repr=False)

    def target(self) -> Target:
        """The partition or nodelist, with its nodes' states as Slurm has them."""
        if self.resolved is None:
            from nodeagent.cluster import slurm

            self.resolved = slurm.resolve(self.nodes)
        return self.resolved

    def size(self) -> int | None:
        return len(self.target().nodes)

    def validate(self, check: FleetCheck) -> None:
        """--remote-agent is implied: the nodes run their own checks."""
        if check.bandwidth is not None:
            raise UsageError("--bandwidth measures between hosts over SSH: use it with --cluster or --hosts")
        why = "with --slurm the nodes run their own checks: leave them out, or use --cluster/--hosts"
        _no_judging_here(check.request, why)

    def check(self, check: FleetCheck, on_done: OnDone | None = None) -> FleetRun:
        """The checks run by nodeagent on each node and compared like any fleet; `request.root`,
        when given, is what each node reads (a path there)."""
        from nodeagent.cluster.slurm import check_outcome

        return FleetRun(self._run(check.request.argv(), check_outcome, on_done, compare=True))

    def on_agents(
        self, argv: Sequence[str], statuses: Mapping[int, str] | None = None, on_done: OnDone | None = None
    ) -> FleetReport:
        from nodeagent.cluster.slurm import agent_outcome

        return self._run((*argv, "--format", "json"), agent_outcome(statuses), on_done, compare=False)

    def source_lines(self, report: FleetReport) -> list[str]:
        """What Slurm ran: the partition or nodelist, the job, and on how many of its nodes nodeagent
        ran (the others are in the hosts table with Slurm's state and reason)."""
        source = (report.extra or {}).get("slurm") or {}
        outcomes = report.outcomes.values()
        ran = sum(1 for o in outcomes if o.ok and (o.doc or {}).get("slurm", {}).get("ran", True))
        not_run = sum(1 for o in outcomes if o.ok) - ran
        without = sum(1 for o in outcomes if not o.ok)
        if source.get("kind") == "partition":
            what = f"partition {source.get('target')}"
        else:
            within = f" in partition {source['partition']}" if source.get("partition") else ""
            what = f"nodes {source.get('target')}{within}"
        job_id = source.get("job_id")
        job = f", job {job_id}" if job_id is not None else ", no job (no node to run on)"
        return [
            f"slurm: {what}{job}: {source.get('agent', 'nodeagent')} ran on {ran} of {len(report.outcomes)} "
            f"nodes; {not_run} not run (drained, reserved, busy ...), {without} without a result"
        ]

    def refuses(self, option: NodeOption) -> str | None:
        if option == "root":
            return None  # a path on each node, which the node's nodeagent reads
        return f"{ONE_NODE[option]}; with --slurm each node is named by its Slurm node name"

    def _run(self, argv: Sequence[str], shape: Shape, on_done: OnDone | None, compare: bool) -> FleetReport:
        from nodeagent.cluster import slurm
        from nodeagent.cluster.report import FleetReport

        options = slurm.Options(agent=self.agent, minutes=SLURM_MINUTES[argv[0]], parallel=self.workers)
        start = time.monotonic()
        ran = slurm.run(self.target(), argv, shape, options, on_done)
        # Nodes Slurm did not run (drained, busy ...) have no values: left out of the comparison,
        # which would call them short of the fleet's hardware. A node short of the majority's
        # hardware is WARN, as in any fleet without a playbook.
        compared = {
            name: o for name, o in ran.outcomes.items() if (o.doc or {}).get("slurm", {}).get("ran", True)
        }
        report = FleetReport.build(compared, time.monotonic() - start, compare=compare)
        report.outcomes = {name: report.outcomes.get(name, o) for name, o in ran.outcomes.items()}
        report.extra = {"slurm": ran.source}
        return report


# -- Prometheus -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrometheusSource:
    """The nodes' last runs as a Prometheus holds them: a view, which contacts no node and runs
    nothing on them."""

    request: PrometheusFleetRequest
    client: Client | None = None  # None: one for request.url

    def size(self) -> int | None:
        return None  # the nodes are known once Prometheus has answered

    def validate(self, check: FleetCheck) -> None:
        """The view shows each node's own verdict, as its last run judged it."""
        _no_judging_here(check.request, "Prometheus holds each node's own verdict: leave them out")
        if check.remote_agent or check.bandwidth is not None:
            raise UsageError("--remote-agent and --bandwidth reach the hosts: use --cluster or --hosts")

    def check(self, check: FleetCheck, on_done: OnDone | None = None) -> FleetRun:
        from nodeagent.cluster import prometheus_view

        return FleetRun(prometheus_view.run(self.request, self.client))

    def on_agents(
        self, argv: Sequence[str], statuses: Mapping[int, str] | None = None, on_done: OnDone | None = None
    ) -> FleetReport:
        raise UsageError(
            f"Prometheus shows the nodes' last results and runs nothing on them: `{argv[0]}` needs "
            "--cluster, --hosts or --slurm"
        )

    def source_lines(self, report: FleetReport) -> list[str]:
        """Where the view came from and how each node was seen; then Prometheus's notes."""
        source = (report.extra or {}).get("prometheus", {})
        evaluated = datetime.fromtimestamp(source.get("evaluated_at", 0), timezone.utc)
        when = evaluated.isoformat(timespec="seconds")
        seen = ", ".join(f"{n} {how}" for how, n in source.get("nodes", {}).items()) or "no nodes"
        selector = f" {source['selector']}" if source.get("selector") else ""
        notes = [f"note: {n}" for n in (report.extra or {}).get("notes", [])]
        return ["", f"from Prometheus {source.get('url', '?')}{selector} at {when}: {seen}", *notes]

    def refuses(self, option: NodeOption) -> str | None:
        return f"{ONE_NODE[option]}; Prometheus holds the runs of its nodes as they named themselves"


__all__ = [
    "SLURM_MINUTES",
    "FleetCheck",
    "FleetRun",
    "NodeOption",
    "OnDone",
    "PrometheusSource",
    "SlurmSource",
    "SshSource",
]
