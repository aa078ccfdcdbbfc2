"""Inter-node bandwidth and latency (`nodeagent check --cluster hosts.yml --bandwidth`).

Every planned link SRC -> DST is measured over the fleet's SSH connections, with the node's own tools:

- bandwidth: `iperf3 -c DST -t SECONDS -J` on SRC against a one-shot `iperf3 -s -1` started on DST
  (https://software.es.net/iperf/invoking.html); where both ends have perftest's `ib_write_bw` and an
  RDMA device (/sys/class/infiniband not empty), `ib_write_bw --report_gbits -D SECONDS` instead
  (https://github.com/linux-rdma/perftest), since TCP through the kernel says little about the
  fabric a training job's NCCL uses;
- latency: `ping -c 5 -i 0.2 -q DST` on SRC (iputils), the rtt average.

The destination address is the inventory's `vars.data_address` when set, else the SSH address: the
data network (InfiniBand/RoCE, a 100G VLAN) is often not the management network SSH goes over, and
measuring the SSH network would say nothing about training traffic.

Plans (`plan_links`, nodeagent.cluster.bandwidth.plan): "ring" measures every link i -> i+1 at once;
"pairs" every ordered pair, in rounds. In each round the pings run first, on an idle network, then
the bandwidth tests.

`evaluate` (nodeagent.cluster.bandwidth.evaluate) is pure: slow links are found against the fleet and
the playbook's thresholds, and a host whose links are all slow is named as the cause.

Nothing raises for a host: a dead host's links carry its SSH error, and every step is time-limited
(connecting and looking for the tools: the host's connect_timeout + command_timeout; each link:
its seconds plus fixed slack, see the time limits below), so a fleet of n hosts takes about one
link's time in ring mode and 2(n-1) of them in pairs mode.

This module measures over SSH. The pure parts live beside it: bandwidth_plan (Params, the plans),
bandwidth_tools (the tools' command lines and output), bandwidth_eval (evaluate) and bandwidth_report
(Link, BandwidthReport); the names the rest of nodeagent uses are re-exported here.
"""

from __future__ import annotations

import math
import re
import shlex
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias, TypeVar

from nodeagent.api.report import HostError
from nodeagent.cluster import ssh
from nodeagent.cluster.bandwidth.evaluate import evaluate
from nodeagent.cluster.bandwidth.plan import Params, plan_links, schedule
from nodeagent.cluster.bandwidth.report import BandwidthReport, Link
from nodeagent.cluster.bandwidth.tools import (
    IB_WRITE_BW,
    IPERF3,
    PING_DEADLINE_S,
    Parsed,
    bandwidth_commands,
    last_line,
    one_line,
    parse_ping,
    ping_argv,
)
from nodeagent.cluster.inventory.hostnames import is_host
from nodeagent.core import pool
from nodeagent.core.errors import UsageError

if TYPE_CHECKING:
    import paramiko
    from fabric import Connection

    from nodeagent.cluster.inventory.load import HostSpec, Inventory

# Link, Params, BandwidthReport, evaluate and plan_links are defined beside this module and
# re-exported here, where the CLI and the tests import them from.
__all__ = ["BandwidthReport", "Link", "Params", "data_address", "evaluate", "measure", "plan_links"]

DATA_ADDRESS_VAR = "data_address"

# --- Time limits -------------------------------------------------------------------------------------
SLACK_S = 5.0  # beyond each step's own limit: paramiko's channel setup and teardown
# An exec over an open SSH connection plus a bind takes milliseconds; a node busy with a training
# job's data loaders, or a small control node driving a large fleet, can take seconds.
READY_S = 15.0  # for the server to start, and again for it to listen
RETRY_S = 0.2  # between client attempts while the server is not listening yet
CLIENT_SLACK_S = 20.0  # beyond -t/-D (or ping -w): the tools' setup and final exchange
SERVER_EXIT_S = 2.0  # a one-shot server ends by itself once its client is done
KILL_S = 5.0


_Pair: TypeAlias = tuple[str, str]  # (src, dst)
_Latency: TypeAlias = tuple[float | None, str | None]  # ms, error
_Bandwidth: TypeAlias = tuple[str, float | None, str | None]  # tool, Gbit/s, error

# --- Measuring over SSH ---------------------------------------------------------------------------------


@dataclass
class _Host:
    spec: HostSpec
    address: str  # where the data network reaches it
    conn: Connection | None = None
    tools: frozenset[str] = frozenset()
    rdma: tuple[str, ...] = ()
    error: HostError | None = None


# Looks for each tool and RDMA device; POSIX sh, whatever the login shell is.
_PROBE = (
    f"for t in {IPERF3} {IB_WRITE_BW} ping timeout; do "
    'command -v "$t" >/dev/null 2>&1 && echo "tool $t"; done; '
    'for d in /sys/class/infiniband/*; do [ -e "$d" ] && echo "rdma ${d##*/}"; done; true'
)
_NOT_LISTENING = re.compile(r"connection refused|couldn't connect|server is busy", re.IGNORECASE)


def data_address(spec: HostSpec, source: str) -> str:
    """vars.data_address when set (checked: it reaches a remote command line), else the SSH address."""
    value = spec.vars.get(DATA_ADDRESS_VAR, "").strip()
    if not value:
        return spec.address
    if not is_host(value):
        raise UsageError(
            f"{source}: host {spec.name}: vars.{DATA_ADDRESS_VAR} {value!r} is not a host name or IP "
            "address; give the address of its data-network interface"
        )
    return value


def measure(inventory: Inventory, keys: ssh.HostKeys, params: Params, parallel: int = 64) -> BandwidthReport:
    """Measures the planned links over SSH (see the module docstring) and evaluates them."""
    hosts = {spec.name: _Host(spec, data_address(spec, inventory.source)) for spec in inventory.hosts}
    rounds = schedule(list(hosts), params.mode)
    if not rounds:
        return BandwidthReport([], evaluate([], params))
    session = _Session(hosts, keys, params, max(1, parallel))
    try:
        session.connect_all()
        latency: dict[_Pair, _Latency] = {}
        bandwidth: dict[_Pair, _Bandwidth] = {}
        for links in rounds:
            latency |= session.ping_all(links)
            bandwidth |= session.bandwidth_all(links)
    finally:
        session.close()
    measured = []
    for src, dst in (link for links in rounds for link in links):
        ms, ping_error = latency[(src, dst)]
        tool, gbits, bw_error = bandwidth[(src, dst)]
        errors = list(dict.fromkeys(e for e in (bw_error, ping_error) if e))
        measured.append(Link(src, dst, tool, gbits, ms, "; ".join(errors) or None))
    return BandwidthReport(measured, evaluate(measured, params))


_K = TypeVar("_K", bound=Hashable)
_R = TypeVar("_R")


class _Session:
    """The fleet's SSH connections, one per host, shared by every link of that host."""

    def __init__(self, hosts: dict[str, _Host], keys: ssh.HostKeys, params: Params, parallel: int) -> None:
        self.hosts = hosts
        self.keys = keys
        self.params = params
        self.parallel = parallel
        self._lock = threading.Lock()
        self._opened: list[Connection] = []

    # -- hosts ----------------------------------------------------------------------------------------

    def connect_all(self) -> None:
        def limit(name: str) -> float:
            spec = self.hosts[name].spec
            return spec.connect_timeout + spec.command_timeout + SLACK_S

        def overdue(name: str, limit_s: float) -> HostError:
            return HostError(ssh.TIMEOUT, f"no connection within {limit_s:g}s")

        errors = _run_all(list(self.hosts), self._connect, self.parallel, limit, overdue)
        for name, error in errors.items():
            if error is not None:
                self.hosts[name].error = error

    def _connect(self, name: str) -> HostError | None:
        host = self.hosts[name]
        try:
            conn = ssh.connection(host.spec, self.keys)
            with self._lock:
                self._opened.append(conn)
            ssh.open_connection(conn, host.spec, self.keys)
            out = ssh.run(conn, shlex.join(["sh", "-c", _PROBE]), host.spec.command_timeout)
        except HostError as e:
            return e
        except Exception as e:  # a protocol surprise on one host is that host's error
            return ssh.classify(e, host.spec, self.keys)
        words = [line.split(None, 1) for line in out.stdout.decode(errors="replace").splitlines()]
        host.tools = frozenset(w[1] for w in words if len(w) == 2 and w[0] == "tool")
        host.rdma = tuple(w[1] for w in words if len(w) == 2 and w[0] == "rdma")
        host.conn = conn  # set last: a host with a connection is a usable host
        return None

    def close(self) -> None:
        with self._lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            try:
                conn.close()
            except Exception:  # a half-dead connection may raise anything on close; it is gone either way
                continue

    def _usable(self, name: str) -> tuple[_Host | None, str | None]:
        host = self.hosts[name]
        if host.error is not None or host.conn is None:
            return None, f"{name}: {host.error or 'not connected'}"
        return host, None

    # -- latency --------------------------------------------------------------------------------------

    def ping_all(self, links: Sequence[_Pair]) -> dict[_Pair, _Latency]:
        def limit(link: _Pair) -> float:
            return PING_DEADLINE_S + CLIENT_SLACK_S + SLACK_S

        def overdue(link: _Pair, limit_s: float) -> _Latency:
            return None, f"ping from {link[0]} did not finish within {limit_s:g}s"

        return _run_all(links, self._ping, self.parallel, limit, overdue)

    def _ping(self, link: _Pair) -> _Latency:
        src_name, dst_name = link
        src, why = self._usable(src_name)
        if src is None or src.conn is None:
            return None, why
        if "ping" not in src.tools:
            return None, f"ping not installed on {src_name} (Debian: apt install iputils-ping)"
        argv = ping_argv(self.hosts[dst_name].address)
        try:
            out = ssh.run(src.conn, shlex.join(argv), PING_DEADLINE_S + CLIENT_SLACK_S)
        except HostError as e:
            return None, f"{src_name}: {e}"
        except Exception as e:
            return None, f"{src_name}: {type(e).__name__}: {one_line(str(e))}"
        ms, error = parse_ping(out.stdout.decode(errors="replace"))
        if ms is None and out.exited not in (0, 1):  # 1: no reply; else ping itself failed
            error = f"ping on {src_name}: {last_line(out.stderr) or f'exit {out.exited}'}"
        return ms, error and f"{error} ({src_name} to {self.hosts[dst_name].address})"

    # -- bandwidth ------------------------------------------------------------------------------------

    def bandwidth_all(self, links: Sequence[_Pair]) -> dict[_Pair, _Bandwidth]:
        seconds = self.params.whole_seconds

        def limit(link: _Pair) -> float:
            # Starting the server, waiting for it to listen, the client's run, stopping the server.
            return 2 * READY_S + seconds + CLIENT_SLACK_S + SERVER_EXIT_S + KILL_S + SLACK_S

        def overdue(link: _Pair, limit_s: float) -> _Bandwidth:
            return IPERF3, None, f"the measurement did not finish within {limit_s:g}s"

        return _run_all(links, self._bandwidth, self.parallel, limit, overdue)

    def _bandwidth(self, link: _Pair) -> _Bandwidth:
        src_name, dst_name = link
        src, why = self._usable(src_name)
        dst, why_dst = self._usable(dst_name)
        if src is None or dst is None or src.conn is None or dst.conn is None:
            return IPERF3, None, why or why_dst
        tool, missing = _choose_tool(src, dst)
        if tool is None:
            return IPERF3, None, missing
        try:
            gbits, error = self._run_pair(tool, src, dst)
        except HostError as e:
            return tool, None, f"{e}"
        except Exception as e:
            return tool, None, f"{type(e).__name__}: {one_line(str(e))}"
        return tool, gbits, error

    def _run_pair(self, tool: str, src: _Host, dst: _Host) -> Parsed:
        assert src.conn is not None and dst.conn is not None
        seconds = self.params.whole_seconds
        server_limit = math.ceil(READY_S + seconds + CLIENT_SLACK_S)
        server_argv, client_argv, parse = bandwidth_commands(tool, dst.address, self.params.port, seconds)
        if "timeout" in dst.tools:  # coreutils: the server ends even if nobody ever connects
            server_argv = ["timeout", str(server_limit), *server_argv]
        try:
            server = _Server.start(dst.conn, server_argv)
        except HostError as e:
            raise HostError(e.kind, f"{dst.spec.name}: starting the {tool} server: {e.message}") from None
        try:
            return self._client(src, dst, client_argv, parse, server, seconds)
        finally:
            server.stop(dst.conn)

    def _client(
        self,
        src: _Host,
        dst: _Host,
        argv: Sequence[str],
        parse: Callable[[str], Parsed],
        server: _Server,
        seconds: int,
    ) -> Parsed:
        """Runs the client until the server answers (it may not listen yet) or READY_S has passed."""
        assert src.conn is not None
        ready_by = time.monotonic() + READY_S
        while True:
            try:
                out = ssh.run(src.conn, shlex.join(argv), seconds + CLIENT_SLACK_S)
            except HostError as e:
                raise HostError(e.kind, f"{src.spec.name}: {argv[0]} client: {e.message}") from None
            value, error = parse(out.stdout.decode(errors="replace"))
            if value is not None:
                return value, None
            error = error or "no result"
            if out.exited != 0 and ("no JSON" in error or "no 'BW average'" in error):
                error = last_line(out.stderr) or error  # the tool's own complaint says more
            if _NOT_LISTENING.search(error) and server.running() and time.monotonic() < ready_by:
                time.sleep(RETRY_S)
                continue
            if not server.running():
                complaint = server.complaint()
                if complaint:
                    error = f"{error}; server on {dst.spec.name}: {complaint}"
            return None, error


class _Server:
    """A measurement server running in the background on its own channel of the destination's
    connection. The shell prints its pid and execs the server, so that pid can be killed."""

    def __init__(self, chan: paramiko.Channel, pid: int | None) -> None:
        self.chan = chan
        self.pid = pid
        self._stderr = b""

    @classmethod
    def start(cls, conn: Connection, argv: Sequence[str]) -> _Server:
        transport = conn.client.get_transport()
        if transport is None or not transport.is_active():
            raise HostError(ssh.UNREACHABLE, "the SSH connection closed")
        chan = transport.open_session(timeout=READY_S)
        try:
            chan.settimeout(READY_S)
            chan.exec_command(f"echo $$ && exec {shlex.join(argv)}")
            line = b""
            while b"\n" not in line:
                data = chan.recv(256)
                if not data:
                    break
                line += data
        except TimeoutError:
            chan.close()
            raise HostError(ssh.TIMEOUT, f"no answer within {READY_S:g}s") from None
        except BaseException:
            chan.close()
            raise
        first = line.split(b"\n", 1)[0].strip()
        return cls(chan, int(first) if first.isdigit() else None)

    def running(self) -> bool:
        return not self.chan.exit_status_ready()

    def complaint(self) -> str:
        """The last line the server wrote on stderr (why it exited), or ''."""
        while self.chan.recv_stderr_ready():
            self._stderr += self.chan.recv_stderr(1 << 16)
        return last_line(self._stderr)

    def stop(self, conn: Connection) -> None:
        """Waits briefly for a one-shot server to end by itself, else kills it (its pid is still the
        server's: the channel has not reported an exit)."""
        try:
            if not self.chan.status_event.wait(SERVER_EXIT_S) and self.pid is not None:
                ssh.run(conn, shlex.join(["kill", str(self.pid)]), KILL_S)
        except (
            Exception
        ):  # the connection is gone (any paramiko error): so is the server, or `timeout` ends it
            pass
        finally:
            self.chan.close()


def _choose_tool(src: _Host, dst: _Host) -> tuple[str | None, str | None]:
    """ib_write_bw when both ends have it and an RDMA device, else iperf3; else which host lacks it."""
    if all(IB_WRITE_BW in h.tools and h.rdma for h in (src, dst)):
        return IB_WRITE_BW, None
    missing = [h.spec.name for h in (src, dst) if IPERF3 not in h.tools]
    if missing:
        return None, f"iperf3 not installed on {', '.join(missing)} (Debian: apt install iperf3)"
    return IPERF3, None


def _run_all(
    items: Sequence[_K],
    fn: Callable[[_K], _R],
    parallel: int,
    limit: Callable[[_K], float],
    overdue: Callable[[_K, float], _R],
) -> dict[_K, _R]:
    """`fn` on every item on nodeagent.core.pool's daemon threads; an item past its limit gets `overdue`."""
    out: dict[_K, _R] = {}
    if not items:
        return out
    for done in pool.bounded(items, fn, parallel, limit, "nodeagent-bandwidth"):
        outcome = done.outcome
        out[done.item] = overdue(done.item, outcome.limit_s) if isinstance(outcome, pool.Overdue) else outcome
    return out
