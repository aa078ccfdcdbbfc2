"""The fleet runner: one job per inventory host over SSH, in parallel, every result kept.

Each host gives exactly one HostOutcome: its result document, or a HostError (unreachable, auth
failed, host key rejected, timeout, nodeagent missing, remote error) that never stops the others.
Hosts run on nodeagent.core.pool's bounded daemon threads, each within its connect + command time
limit, so a host that stops answering mid-run costs its limit and no more.

Jobs:
- CheckJob, agentless (default): one SSH command records exactly what the checks declare with the
  node's own python3 (nodeagent.cluster.pull), and the checks and facts run here, on that snapshot;
- CheckJob with remote_agent: `nodeagent check --format json --facts` on the node, JSON parsed;
- AgentJob: any other nodeagent command on the node (`tune`, `bench`), its JSON gathered.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from nodeagent.cluster import DEFAULT_PARALLEL, ssh
from nodeagent.cluster.ssh import HostError
from nodeagent.core import limits, pool

if TYPE_CHECKING:
    from fabric import Connection

    from nodeagent.api.check import Check
    from nodeagent.cluster.inventory.load import HostSpec, Inventory
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


@dataclass
class HostOutcome:
    name: str
    address: str
    doc: dict[str, Any] | None = None  # the job's result document (a check report for checks)
    facts: dict[str, Any] | None = None
    error: HostError | None = None
    duration_s: float = 0.0
    groups: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        base: dict[str, Any] = {"address": self.address, "duration_s": round(self.duration_s, 3)}
        if self.error is not None:
            return base | {"status": "FAIL", "error": self.error.to_dict()}
        return base | (self.doc or {})


class Job(Protocol):
    def __call__(self, spec: HostSpec, conn: Connection) -> HostOutcome: ...


def _agent_json(spec: HostSpec, conn: Connection, argv: Sequence[str]) -> tuple[dict[str, Any], int]:
    """Run `nodeagent ARGV` on the node; the JSON it printed, and its exit code."""
    command = shlex.join([spec.nodeagent, *argv])
    out = ssh.run(conn, command, spec.command_timeout)
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

    def declared(self) -> tuple[list[str], list[tuple[str, ...]]]:
        from nodeagent.api.check import declared_commands, declared_paths
        from nodeagent.facts import node

        patterns = sorted({*declared_paths(self.checks), *node.PATHS})
        commands = sorted({*declared_commands(self.checks), *node.COMMANDS})
        return patterns, commands

    @functools.cached_property
    def pull_payload(self) -> bytes:
        """What every node is sent (the same for all: built once, not once per host)."""
        from nodeagent.cluster import pull

        patterns, commands = self.declared()
        return pull.payload(patterns, commands, COMMAND_TIMEOUT_S)

    def __call__(self, spec: HostSpec, conn: Connection) -> HostOutcome:
        if self.remote_agent:
            ids = ",".join(c.id for c in self.checks)
            argv = ["check", "--format", "json", "--facts", "--only", ids, "--timeout", f"{self.timeout_s:g}"]
            doc, _ = _agent_json(spec, conn, argv)
            # The node names itself by its hostname; the fleet knows it by its inventory name.
            doc["hostname"] = doc.get("host")
            doc["host"] = spec.name
            for finding in doc.get("findings", []):
                finding["host"] = spec.name
            facts = doc.pop("facts", None)
            _check_report(spec, doc)
            return HostOutcome(spec.name, spec.address, doc, facts if isinstance(facts, dict) else None)
        return self._agentless(spec, conn)

    def _agentless(self, spec: HostSpec, conn: Connection) -> HostOutcome:
        from nodeagent import engine
        from nodeagent.cluster import pull
        from nodeagent.facts import node
        from nodeagent.host import SnapshotHost, recorder
        from nodeagent.host.archive import MemoryTree

        out = ssh.run(conn, pull.command(spec.python), spec.command_timeout, stdin=self.pull_payload)
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
        try:
            pull.check_size(out.stdout)
            rec = recorder.decode(out.stdout)
        except ValueError as e:
            raise HostError(ssh.REMOTE, f"the recording pulled from {spec.name} is unreadable: {e}") from None
        host = SnapshotHost(spec.name, tree=MemoryTree(rec.dirs, rec.links, rec.files))
        host.name = spec.name
        # One worker: the recording is in memory, so the checks wait on nothing, and the fleet's
        # hosts already run side by side (more threads would only contend for the GIL).
        with _CPU_BOUND:
            report = engine.run_report(host, self.checks, self.params, timeout_s=self.timeout_s, workers=1)
            facts = node.collect(host)
            if self.playbook is not None or self.baseline is not None:
                from nodeagent.compare import fleet
                from nodeagent.gate import judge

                values = fleet.host_values(facts, [f.to_dict() for f in report.findings])
                report.results += judge.extra_results(values, self.playbook, self.baseline, spec.name)
            return HostOutcome(spec.name, spec.address, report.to_dict(), facts)


def _check_report(spec: HostSpec, doc: dict[str, Any]) -> None:
    """A node's own report must be one the fleet document can hold (nodeagent.api.report): a report
    nodeagent cannot read (a newer version's status word, a truncated field) is that host's error,
    so the other hosts' results and every --output of the fleet still stand."""
    from nodeagent.api.report import DocumentError, HostResult, validate

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

    def __call__(self, spec: HostSpec, conn: Connection) -> HostOutcome:
        doc, exited = _agent_json(spec, conn, self.argv)
        doc = {"status": self.statuses.get(exited, "FAIL"), "exit_code": exited, **doc}
        return HostOutcome(spec.name, spec.address, doc)


def run_fleet(
    inventory: Inventory,
    job: Job,
    parallel: int = DEFAULT_PARALLEL,
    accept_new_host_keys: bool = False,
    on_done: Callable[[HostOutcome], None] | None = None,
) -> dict[str, HostOutcome]:
    """`job` on every host, `parallel` at a time; the outcomes in inventory order."""
    keys = ssh.HostKeys.default(inventory.known_hosts, accept_new_host_keys)
    connections: dict[str, Connection] = {}
    lock = threading.Lock()

    def one(spec: HostSpec) -> HostOutcome:
        start = time.monotonic()
        try:
            conn = ssh.connection(spec, keys)
            with lock:
                connections[spec.name] = conn
            ssh.open_connection(conn, spec, keys, _CPU_BOUND)
            outcome = job(spec, conn)
        except HostError as e:
            outcome = HostOutcome(spec.name, spec.address, error=e)
        except Exception as e:  # a bug or a protocol surprise on one host never stops the fleet
            outcome = HostOutcome(spec.name, spec.address, error=_classified(e, spec, keys))
        finally:
            _close(connections.get(spec.name))
        outcome.duration_s = time.monotonic() - start
        outcome.groups = spec.groups
        return outcome

    def limit(spec: HostSpec) -> float:
        return spec.connect_timeout + spec.command_timeout + _SLACK_S

    results: dict[str, HostOutcome] = {}
    for done in pool.bounded(inventory.hosts, one, parallel, limit, "nodeagent-host"):
        spec = done.item
        if isinstance(done.outcome, pool.Overdue):
            _close(connections.get(spec.name))  # unblocks the abandoned thread's socket reads
            outcome = HostOutcome(
                spec.name,
                spec.address,
                error=HostError(ssh.TIMEOUT, f"{spec.name} did not finish within {done.outcome.limit_s:g}s"),
                duration_s=done.duration_s,
                groups=spec.groups,
            )
        else:
            outcome = done.outcome
        results[spec.name] = outcome
        if on_done is not None:
            on_done(outcome)
    return {spec.name: results[spec.name] for spec in inventory.hosts}


def _classified(exc: Exception, spec: HostSpec, keys: ssh.HostKeys) -> HostError:
    """ssh.classify, which must not fail in turn: this runs on a pool thread, where an escaping
    exception would print a traceback and leave the host to time out instead of naming its error."""
    try:
        return ssh.classify(exc, spec, keys)
    except Exception:
        return HostError(ssh.REMOTE, f"{spec.name}: {type(exc).__name__}: {' '.join(str(exc).split())}")


def _close(conn: Connection | None) -> None:
    if conn is None:
        return
    try:
        conn.close()
    except Exception:  # closing a half-dead connection may raise anything; it is gone either way
        return
