"""The fleet runner: one job per inventory host, over SSH or on this machine, in parallel, every
result kept.

Each host gives exactly one HostOutcome: its result document, or a HostError (unreachable, auth
failed, host key rejected, timeout, nodeagent missing, remote error) that never stops the others.
Hosts run on nodeagent.core.pool's bounded daemon threads, each within its connect + command time
limit, so a host that stops answering mid-run costs its limit and no more.

The controller's own work per host is Python: the SSH handshake (paramiko), inflating and decoding
the pulled recording, the checks and facts on it. Threads share one interpreter lock, so on one
process that work ran on one core however many the controller has. A fleet of many hosts is split
over forked worker processes (nodeagent.core.pool.in_processes), one per core, each running its
share of the hosts exactly as a single process runs all of them (same jobs, threads, time limits)
and sending each HostOutcome back as it is done; the fleet comparison and the report stay here.

Jobs run their commands on a host through a Shell (nodeagent.cluster.shell): an SSH connection
(ssh.SSHShell), or for a host whose inventory entry says `connection: local` a shell on this
machine (shell.LocalShell: no sshd, no host keys, no SSH settings); one fleet may mix both.
- CheckJob, agentless (default): one command records exactly what the checks declare with the
  node's own python3 (nodeagent.cluster.pull), and the checks and facts run here, on that snapshot;
- CheckJob with remote_agent: `nodeagent check --format json --facts` on the node, JSON parsed;
- AgentJob: any other nodeagent command on the node (`tune`, `bench`), its JSON gathered.

A fleet with a local host runs in this process alone, never over worker processes: a local host's
commands are stopped (their process groups, shell.stop) when the run is interrupted, which a worker
process killed with SIGKILL could not do.

`replay_fleet` runs the agentless central part (decode, checks, facts, comparable values) on pull
streams recorded earlier, on the same processes: the controller's work without the network.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import shlex
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from nodeagent.api.check import declared_commands, declared_paths
from nodeagent.api.report import DocumentError, HostError, HostResult, validate
from nodeagent.cluster import DEFAULT_PARALLEL, pull, shell, ssh
from nodeagent.cluster.inventory.load import HostSpec
from nodeagent.compare import fleet
from nodeagent.core import limits, pool
from nodeagent.core.errors import UsageError
from nodeagent.facts import node
from nodeagent.gate.node_run import NodeRun, agent_check_argv
from nodeagent.host import SnapshotHost
from nodeagent.host.archive import MemoryTree

if TYPE_CHECKING:
    from nodeagent.api.check import Check
    from nodeagent.cluster.inventory.load import Inventory
    from nodeagent.cluster.shell import Shell
    from nodeagent.compare.values import Value
    from nodeagent.gate.baseline import Baseline
    from nodeagent.gate.playbook import Playbook

# Beyond connect + command time: the snapshot's evaluation here, and paramiko's own teardown.
_SLACK_S = 5.0
# The control node's CPU-bound steps (the SSH handshake, checking a pulled recording) run at most
# this many at once, while any number of hosts wait on their remote side: measured with 64 hosts
# on 2 CPUs, letting all 64 handshake and evaluate at once took 6.5-7.8 s against 4.7 s for 8 at
# once, the GIL and the CPUs thrashing between them (tests/perf/cluster_speed.py).
_CPU_BOUND = threading.BoundedSemaphore(max(2, 2 * (os.cpu_count() or 1)))
# Each command a check declares (nvidia-smi ...), on the node while recording.
COMMAND_TIMEOUT_S = 30.0
# A remote command that exits with this was not found by the node's shell (POSIX: 127).
_NOT_FOUND = 127

# Worker processes for a fleet (see the module docstring): one per core this process may run on, at
# most MAX_PROCESSES, and only with at least MIN_HOSTS_PER_PROCESS hosts each. A worker costs about
# 0.1 s of CPU (its first checks compile the regular expressions and fill the caches this process
# never filled, and it copies the memory pages it writes to), while a host costs about 20 ms
# (tests/perf/cluster_replay.py): with 64 hosts each, that is under a tenth of a worker's work.
# NODEAGENT_PROCESSES sets the number (1: everything in this process).
MAX_PROCESSES = 16
MIN_HOSTS_PER_PROCESS = 64
PROCESSES_ENV = "NODEAGENT_PROCESSES"
# What checking a pulled recording loads on first use (CheckJob.evaluate).
_EVALUATION_MODULES = (
    "nodeagent.engine",
    "nodeagent.cluster.pull",
    "nodeagent.compare.fleet",
    "nodeagent.facts.node",
    "nodeagent.host.archive",
    "nodeagent.host.snapshot",
)
# A worker that sends nothing for this long beyond a host's whole time limit is stuck (each of its
# hosts finishes or is cut within its limit, so results come at least that often) and is stopped.
_WORKER_QUIET_SLACK_S = 30.0


@dataclass
class HostOutcome:
    name: str
    address: str
    doc: dict[str, Any] | None = None  # the job's result document (a check report for checks)
    facts: dict[str, Any] | None = None
    error: HostError | None = None
    duration_s: float = 0.0
    groups: tuple[str, ...] = ()
    # The host's comparable values (nodeagent.compare.values.host_values of its facts and findings)
    # when the job computed them beside the checks, on the worker processes; else FleetReport.build
    # computes them.
    values: dict[str, Value] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        base: dict[str, Any] = {"address": self.address, "duration_s": round(self.duration_s, 3)}
        if self.error is not None:
            return base | {"status": "FAIL", "error": asdict(self.error)}
        return base | (self.doc or {})


class Job(Protocol):
    def __call__(self, spec: HostSpec, host: Shell) -> HostOutcome: ...


def _values(outcome: HostOutcome) -> HostOutcome:
    """`outcome` with its comparable values, computed where the job ran."""
    outcome.values = fleet.host_values(outcome.facts, (outcome.doc or {}).get("findings", []))
    return outcome


def _agent_json(spec: HostSpec, host: Shell, argv: Sequence[str]) -> tuple[dict[str, Any], int]:
    """Run `nodeagent ARGV` on the node; the JSON it printed, and its exit code."""
    command = shlex.join([spec.nodeagent, *argv])
    out = host.run(command, spec.command_timeout)
    stderr = out.stderr.decode(errors="replace").strip()
    last = stderr.splitlines()[-1] if stderr else ""
    if out.exited == _NOT_FOUND:
        raise HostError(
            ssh.MISSING,
            f"`{spec.nodeagent}` is not installed on {spec.name} ({last or 'command not found'}); "
            "install it there (pip install nodeagent), set `nodeagent:` in the inventory, "
            "or leave out --remote-agent",
        )
    try:
        doc = limits.loads_json(out.stdout)
    except json.JSONDecodeError:
        raise HostError(
            ssh.REMOTE,
            f"`{command}` exited {out.exited} without JSON: {last or out.stdout[:200]!r}",
        ) from None
    except ValueError as e:  # nested too deeply
        raise HostError(ssh.REMOTE, f"`{command}` printed JSON {e}") from None
    if not isinstance(doc, dict):
        raise HostError(ssh.REMOTE, f"`{command}` printed JSON that is not an object")
    return doc, out.exited


@dataclass(frozen=True)
class CheckJob:
    """The checks, on the node's pulled snapshot (or by the node's own nodeagent)."""

    checks: Sequence[Check[Any, Any]]
    params: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 20.0
    remote_agent: bool = False
    playbook: Playbook | None = None  # its thresholds judge each host's values here
    baseline: Baseline | None = None
    # Its work here is CPU in Python (checks on every pulled recording) and reads only: worth
    # spreading over worker processes.
    spread: ClassVar[bool] = True

    def declared(self) -> tuple[list[str], list[tuple[str, ...]]]:
        patterns = sorted({*declared_paths(self.checks), *node.PATHS})
        commands = sorted({*declared_commands(self.checks), *node.COMMANDS})
        return patterns, commands

    @functools.cached_property
    def pull_payload(self) -> bytes:
        """What every node is sent (the same for all: built once, not once per host)."""
        patterns, commands = self.declared()
        return pull.payload(patterns, commands, COMMAND_TIMEOUT_S)

    def prepare(self) -> None:
        """Build what every host shares before the worker processes fork, so that they inherit it
        instead of each building it: the pull payload, the modules the checks and facts load on
        first use."""
        for module in _EVALUATION_MODULES:
            importlib.import_module(module)
        if not self.remote_agent:
            _ = self.pull_payload
        if self.playbook is not None or self.baseline is not None:
            importlib.import_module("nodeagent.gate.judge")

    def __call__(self, spec: HostSpec, host: Shell) -> HostOutcome:
        if self.remote_agent:
            doc, _ = _agent_json(spec, host, agent_check_argv([c.id for c in self.checks], self.timeout_s))
            # The node names itself by its hostname; the fleet knows it by its inventory name.
            doc["hostname"] = doc.get("host")
            doc["host"] = spec.name
            for finding in doc.get("findings", []):
                finding["host"] = spec.name
            facts = doc.pop("facts", None)
            _check_report(spec, doc)
            return _values(
                HostOutcome(spec.name, spec.address, doc, facts if isinstance(facts, dict) else None)
            )
        stream = self.pull(spec, host)
        host.close()  # the node's session ends now, not after the checks here
        return self.evaluate(spec, stream)

    def pull(self, spec: HostSpec, host: Shell) -> bytes:
        """The node's recording, as the pull stream it sent (nodeagent.cluster.pull)."""
        out = host.run(pull.command(spec.python), spec.command_timeout, stdin=self.pull_payload)
        if out.exited != 0 or not out.stdout:
            err = out.stderr.decode(errors="replace").strip().splitlines()
            last = err[-1] if err else f"exit {out.exited}"
            if out.exited == _NOT_FOUND:
                raise HostError(
                    ssh.MISSING,
                    f"`{spec.python}` is not on {spec.name} ({last}); the agentless pull needs "
                    "python3 there: set `python:` in the inventory, or install nodeagent and use "
                    "--remote-agent",
                )
            raise HostError(ssh.REMOTE, f"recording {spec.name} failed: {last}")
        return out.stdout

    def evaluate(self, spec: HostSpec, stream: bytes) -> HostOutcome:
        """The checks and facts on the recording in `stream`, with the host's comparable values."""
        try:
            rec = pull.read(stream)
        except ValueError as e:
            raise HostError(ssh.REMOTE, f"the recording pulled from {spec.name} is unreadable: {e}") from None
        try:
            host = SnapshotHost(spec.name, tree=MemoryTree(rec.dirs, rec.links, rec.files))
        except UsageError as e:  # its nodeagent.json: a node's data, that host's error alone
            raise HostError(ssh.REMOTE, f"the recording pulled from {spec.name} is unreadable: {e}") from None
        host.name = spec.name
        # One worker: the recording is in memory, so the checks wait on nothing, and the fleet's
        # hosts already run side by side (more threads would only contend for the GIL).
        with _CPU_BOUND:
            facts = node.collect(host)
            # The recording's facts, commands included, give the values the playbook and baseline judge.
            report = NodeRun(
                host,
                self.checks,
                self.params,
                self.timeout_s,
                self.playbook,
                self.baseline,
                workers=1,
                facts=facts,
            ).finish()
            return _values(HostOutcome(spec.name, spec.address, report.to_dict(), facts))


def _check_report(spec: HostSpec, doc: dict[str, Any]) -> None:
    """A node's own report must be one the fleet document can hold (nodeagent.api.report): a report
    nodeagent cannot read (a newer version's status word, a truncated field) is that host's error,
    so the other hosts' results and every --output of the fleet still stand."""
    try:
        validate(HostResult, {"address": spec.address, **doc}, f"the report of {spec.name}")
    except DocumentError as e:
        raise HostError(
            ssh.REMOTE,
            f"{spec.name}'s nodeagent answered a report this one cannot read ({e.field_problem}); "
            "install the same nodeagent version on the node, or leave out --remote-agent",
        ) from None


# `nodeagent check` and `tune` exit with the worst status's code (nodeagent.core.finding.Status).
EXIT_STATUS = {0: "OK", 1: "WARN", 2: "FAIL", 3: "UNKNOWN"}


@dataclass(frozen=True)
class AgentJob:
    """`nodeagent ARGV` on every node (tune, bench: they change or measure the node itself).
    The host's status comes from the command's exit code through `statuses` (else FAIL)."""

    argv: tuple[str, ...]
    statuses: Mapping[int, str] = field(default_factory=lambda: dict(EXIT_STATUS))

    def __call__(self, spec: HostSpec, host: Shell) -> HostOutcome:
        doc, exited = _agent_json(spec, host, self.argv)
        doc = {"status": self.statuses.get(exited, "FAIL"), "exit_code": exited, **doc}
        return HostOutcome(spec.name, spec.address, doc)


def run_fleet(
    inventory: Inventory,
    job: Job,
    parallel: int = DEFAULT_PARALLEL,
    accept_new_host_keys: bool = False,
    on_done: Callable[[HostOutcome], None] | None = None,
    processes: int | None = None,
) -> dict[str, HostOutcome]:
    """`job` on every host, `parallel` at a time, over `processes` worker processes (None: one per
    core for a job that spreads and a fleet large enough, see processes_for; always 1 when a host is
    local); the outcomes in inventory order. `on_done` is called here, in this thread, as each host
    finishes."""
    count = processes_for(job, len(inventory.hosts)) if processes is None else processes
    reaches: dict[str, _Reach] = {}
    connections = {spec.connection for spec in inventory.hosts}
    if "ssh" in connections:
        reaches["ssh"] = _OverSSH(job, ssh.HostKeys.default(inventory.known_hosts, accept_new_host_keys))
    if "local" in connections:
        reaches["local"] = _OnThisMachine(job)
        count = 1  # see the module docstring
    reach = _ByConnection(reaches)
    try:
        return _gather(inventory.hosts, reach, parallel, count, on_done)
    finally:
        reach.stop()  # an interrupt (or an error here) leaves no local command running


def replay_fleet(
    streams: Mapping[str, bytes],
    job: CheckJob,
    parallel: int = DEFAULT_PARALLEL,
    on_done: Callable[[HostOutcome], None] | None = None,
    processes: int | None = None,
    hosts: Sequence[HostSpec] | None = None,
) -> dict[str, HostOutcome]:
    """The agentless fleet's central work on pull streams recorded earlier (host name -> what its
    pull sent): decoding, checks, facts and comparable values, on the same worker processes as
    run_fleet. `hosts` gives their inventory entries (default: each name as its address)."""
    specs = tuple(hosts) if hosts is not None else tuple(HostSpec(name, name) for name in streams)
    count = processes_for(job, len(specs)) if processes is None else processes
    return _gather(specs, _Recorded(job, streams), parallel, count, on_done)


def processes_for(job: Job, hosts: int) -> int:
    """How many processes a fleet of `hosts` runs `job` on: NODEAGENT_PROCESSES when set; else one
    per usable core (at most MAX_PROCESSES, at least MIN_HOSTS_PER_PROCESS hosts each) for a job
    whose work here is worth spreading, and 1 (this process alone) otherwise."""
    given = os.environ.get(PROCESSES_ENV, "").strip()
    if given:
        if not given.isdigit() or int(given) < 1:
            raise UsageError(
                f"{PROCESSES_ENV}={given!r}: expected a whole number of processes, at least 1 "
                "(1 runs everything in nodeagent's own process)"
            )
        wanted = int(given)
    elif getattr(job, "spread", False):
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        wanted = min(cpus, MAX_PROCESSES, hosts // MIN_HOSTS_PER_PROCESS)
    else:
        wanted = 1
    return max(1, min(wanted, hosts)) if pool.can_fork() else 1


class _Reach(Protocol):
    """How the runner gets one host's outcome: over SSH, or from a recording."""

    def prepare(self) -> None:
        """What every host shares, built before worker processes fork."""

    def __call__(self, spec: HostSpec) -> HostOutcome:
        """The host's outcome; never raises (an error is the outcome's)."""

    def abandon(self, spec: HostSpec) -> None:
        """Free what an overdue host holds (its thread is left behind)."""

    def stop(self) -> None:
        """The run is over, or interrupted: stop what the hosts still run that would outlive
        nodeagent."""


def _prepare_job(job: Job) -> None:
    prepare = getattr(job, "prepare", None)
    if prepare is not None:
        prepare()


class _OverSSH:
    """`job` on each host over its own SSH connection."""

    def __init__(self, job: Job, keys: ssh.HostKeys) -> None:
        self.job = job
        self.keys = keys
        self.shells: dict[str, ssh.SSHShell] = {}
        self.lock = threading.Lock()

    def prepare(self) -> None:
        self.keys.preload()
        _prepare_job(self.job)

    def __call__(self, spec: HostSpec) -> HostOutcome:
        start = time.monotonic()
        try:
            conn = ssh.connection(spec, self.keys)
            host = ssh.SSHShell(conn)
            with self.lock:
                self.shells[spec.name] = host
            ssh.open_connection(conn, spec, self.keys, _CPU_BOUND)
            outcome = self.job(spec, host)
        except HostError as e:
            outcome = HostOutcome(spec.name, spec.address, error=e)
        except Exception as e:  # a bug or a protocol surprise on one host never stops the fleet
            outcome = HostOutcome(spec.name, spec.address, error=_classified(e, spec, self.keys))
        finally:
            self._close(spec)
        outcome.duration_s = time.monotonic() - start
        outcome.groups = spec.groups
        return outcome

    def abandon(self, spec: HostSpec) -> None:
        self._close(spec)  # unblocks the abandoned thread's socket reads

    def stop(self) -> None:
        return None  # a remote command is the node's; its connection ends with nodeagent

    def _close(self, spec: HostSpec) -> None:
        with self.lock:
            host = self.shells.get(spec.name)
        if host is not None:
            host.close()


class _OnThisMachine:
    """`job` on each local host (`connection: local`): its commands in shells on this machine."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.shells: dict[str, shell.LocalShell] = {}
        self.lock = threading.Lock()

    def prepare(self) -> None:
        _prepare_job(self.job)

    def __call__(self, spec: HostSpec) -> HostOutcome:
        start = time.monotonic()
        host = shell.LocalShell(spec.name)
        with self.lock:
            self.shells[spec.name] = host
        try:
            outcome = self.job(spec, host)
        except HostError as e:
            outcome = HostOutcome(spec.name, spec.address, error=e)
        except Exception as e:  # as over SSH: one host's surprise is its own error
            error = HostError(ssh.REMOTE, f"{spec.name}: {type(e).__name__}: {' '.join(str(e).split())}")
            outcome = HostOutcome(spec.name, spec.address, error=error)
        finally:
            host.close()
        outcome.duration_s = time.monotonic() - start
        outcome.groups = spec.groups
        return outcome

    def abandon(self, spec: HostSpec) -> None:
        with self.lock:
            host = self.shells.get(spec.name)
        if host is not None:
            host.close()  # its command's process group stopped: the abandoned thread's reads end

    def stop(self) -> None:
        with self.lock:
            hosts = list(self.shells.values())
        shell.stop(hosts)


class _ByConnection:
    """Each host through the reach of its inventory entry's connection (ssh, local)."""

    def __init__(self, reaches: Mapping[str, _Reach]) -> None:
        self.reaches = reaches

    def prepare(self) -> None:
        for reach in self.reaches.values():
            reach.prepare()

    def __call__(self, spec: HostSpec) -> HostOutcome:
        return self.reaches[spec.connection](spec)

    def abandon(self, spec: HostSpec) -> None:
        self.reaches[spec.connection].abandon(spec)

    def stop(self) -> None:
        for reach in self.reaches.values():
            reach.stop()


class _Recorded:
    """`job`'s central work on each host's recorded pull stream."""

    def __init__(self, job: CheckJob, streams: Mapping[str, bytes]) -> None:
        self.job = job
        self.streams = streams

    def prepare(self) -> None:
        self.job.prepare()

    def __call__(self, spec: HostSpec) -> HostOutcome:
        start = time.monotonic()
        try:
            outcome = self.job.evaluate(spec, self.streams[spec.name])
        except HostError as e:
            outcome = HostOutcome(spec.name, spec.address, error=e)
        except Exception as e:  # as over SSH: one host's surprise is its own error
            error = HostError(ssh.REMOTE, f"{spec.name}: {type(e).__name__}: {e}")
            outcome = HostOutcome(spec.name, spec.address, error=error)
        outcome.duration_s = time.monotonic() - start
        outcome.groups = spec.groups
        return outcome

    def abandon(self, spec: HostSpec) -> None:
        return None

    def stop(self) -> None:
        return None


def _limit(spec: HostSpec) -> float:
    """A host's whole time: connecting over SSH, or stopping a local command past its time limit."""
    if spec.connection == "local":
        return spec.command_timeout + shell.STOP_GRACE_S + _SLACK_S
    return spec.connect_timeout + spec.command_timeout + _SLACK_S


def _gather(
    hosts: Sequence[HostSpec],
    reach: _Reach,
    parallel: int,
    processes: int,
    on_done: Callable[[HostOutcome], None] | None,
) -> dict[str, HostOutcome]:
    processes = min(processes, parallel)  # --parallel 1 is one host at a time, whatever the processes
    if processes > 1:
        stream = _on_processes(hosts, reach, parallel, processes)
    else:
        stream = _on_threads(hosts, reach, parallel)
    results: dict[str, HostOutcome] = {}
    for outcome in stream:
        results[outcome.name] = outcome
        if on_done is not None:
            on_done(outcome)
    return {spec.name: results[spec.name] for spec in hosts}


def _on_threads(hosts: Sequence[HostSpec], reach: _Reach, parallel: int) -> Iterator[HostOutcome]:
    """Every host's outcome, `parallel` hosts at a time on this process's threads."""
    for done in pool.bounded(hosts, reach, parallel, _limit, "nodeagent-host"):
        spec = done.item
        if isinstance(done.outcome, pool.Overdue):
            reach.abandon(spec)
            yield HostOutcome(
                spec.name,
                spec.address,
                error=HostError(ssh.TIMEOUT, f"{spec.name} did not finish within {done.outcome.limit_s:g}s"),
                duration_s=done.duration_s,
                groups=spec.groups,
            )
        else:
            yield done.outcome


def _on_processes(
    hosts: Sequence[HostSpec], reach: _Reach, parallel: int, processes: int
) -> Iterator[HostOutcome]:
    """Every host's outcome, the hosts shared out over `processes` worker processes that each run
    their share as _on_threads does, `parallel` hosts at a time in all."""
    reach.prepare()
    threads = max(1, parallel // processes)  # never more than `parallel` at once (processes <= parallel)

    def share(specs: Sequence[HostSpec]) -> Iterator[tuple[int, HostOutcome]]:
        index = {spec.name: i for i, spec in enumerate(specs)}
        for outcome in _on_threads(specs, reach, threads):
            yield index[outcome.name], outcome

    quiet_s = max(_limit(spec) for spec in hosts) + _WORKER_QUIET_SLACK_S
    start = time.monotonic()
    for spec, result in pool.in_processes(hosts, share, processes, quiet_s):
        if isinstance(result, pool.Lost):
            yield HostOutcome(
                spec.name,
                spec.address,
                error=HostError(ssh.CONTROLLER, f"no result for {spec.name}: {result.reason}"),
                duration_s=time.monotonic() - start,
                groups=spec.groups,
            )
        else:
            yield result


def _classified(exc: Exception, spec: HostSpec, keys: ssh.HostKeys) -> HostError:
    """ssh.classify, which must not fail in turn: this runs on a pool thread, where an escaping
    exception would print a traceback and leave the host to time out instead of naming its error."""
    try:
        return ssh.classify(exc, spec, keys)
    except Exception:
        return HostError(ssh.REMOTE, f"{spec.name}: {type(exc).__name__}: {' '.join(str(exc).split())}")
