"""A real Slurm cluster on this machine, for the tests of nodeagent's Slurm integration.

Debian's slurm-wlm and munge, run as subprocesses this module owns, each with its own files:

- the controller is a network namespace ``ctl`` with its own hostname (UTS namespace), running
  its own munged (a key made for the cluster, a socket of its own) and slurmctld;
- every node ``nK`` is a network namespace plus a UTS namespace whose hostname is ``nK``, running
  slurmd: slurmd finds its NodeName by hostname as on a real node, and a job, a prolog or a health
  check on the node sees ``hostname`` = nK;
- the namespaces hang off a bridge in the root namespace (the bridge's address is the machine's
  side), so scontrol, srun and sinfo run here as on a login node.

One slurm.conf, written per cluster, holds it together (AuthInfo=socket= points every Slurm program
at this munged); ``env`` carries SLURM_CONF for any Slurm or nodeagent subprocess. The network
names carry the pytest process id and a per-process slot letter, the /24 is picked per process,
and the ClusterName is unique per process, so parallel runs do not collide; leftovers of an
earlier process with the same id are removed before building.

Use ``with SlurmCluster(3, tmp_path) as cluster:`` or the ``slurm_cluster_factory`` fixture; both
tear everything down (slurmd, slurmstepd, slurmctld, munged, anything else in the namespaces, the
namespaces, veths and bridge) even when the test fails, and an atexit hook catches clusters that
were never closed.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import IO, Protocol

import pytest

from tests.support.sshcluster import (
    NETNS_DIR,
    Slots,
    _netns_probe,
    _remove_network,
    _run_batch,
    _which,
    free_subnet,
)

# The programs a cluster runs, and the Debian package of each (slurm-wlm pulls in the Slurm ones).
TOOLS = {
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "slurmstepd": "slurmd",
    "munged": "munge",
    "scontrol": "slurm-client",
    "srun": "slurm-client",
    "sbatch": "slurm-client",
    "scancel": "slurm-client",
    "sinfo": "slurm-client",
    "nsenter": "util-linux",
    "unshare": "util-linux",
    "ip": "iproute2",
}

MAX_NODES = 32
CONTROLLER_OCTET = 250
BRIDGE_OCTET = 254
# Subnets 10.250.0.0/24 .. 10.254.249.0/24, the first one derived from the pid: apart from the SSH
# test clusters' 10.200-249 range, so the two kinds never race for the same /24.
SUBNET_SECOND_BASE = 250
SUBNET_SECOND_OCTETS = 5
IFNAME_MAX = 15
# A pytest process's own names: sl<pid><slot>n<i> (node namespace), sl<pid><slot>c (controller
# namespace), sl<pid><slot>v<i> (root-side veth; v0 is the controller's), slb<pid><slot> (bridge).
NAME_PREFIX = "sl"
# Each daemon has its own namespace, so the default ports are free there (slurm.conf(5)).
SLURMCTLD_PORT = 6817
SLURMD_PORT = 6818
# How long slurmctld waits for a slurmd's answer before it sets the node DOWN (slurm.conf(5),
# SlurmdTimeout; default 300). With 10 a stopped slurmd shows NOT_RESPONDING after about 15 s and
# DOWN after about 30 s here, and it is still far above what a busy 2-CPU machine takes to answer.
SLURMD_TIMEOUT_S = 10
READY_TIMEOUT_S = 60.0
STOP_GRACE_S = 5.0
COMMAND_TIMEOUT_S = 60.0
POLL_S = 0.2
LOG_TAIL = 3000

# `scontrol show node -o`: one line of Key=Value fields. Reason is free text followed by
# " [user@time]" (src/api/node_info.c, slurm_sprint_node_table), and the next field, when there is
# one, starts with a space and a capitalised key.
_STATE = re.compile(r"(?:^| )State=(\S+)")
_REASON = re.compile(r"(?:^| )Reason=(.*?) \[[^\[\]@ ]*@[^\[\]]*\](?= [A-Z][A-Za-z]*=|$)")


def slurm_available() -> str | None:
    """None when a Slurm test cluster can be built here, else the reason."""
    if os.geteuid() != 0:
        return f"a Slurm test cluster needs root (running as uid {os.geteuid()})"
    for tool, package in TOOLS.items():
        if _which(tool) is None:
            return f"no {tool} (Debian package {package})"
    return _netns_probe()


def _tool(name: str) -> str:
    path = _which(name)
    if path is None:
        raise RuntimeError(f"no {name} (Debian package {TOOLS[name]})")
    return path


@cache
def _hardware() -> dict[str, str]:
    """This machine's CPU layout as slurmd reports it (`slurmd -C`), for every node's NodeName line.

    Each node runs on this machine, so each has its CPUs; RealMemory is left to the cluster (a
    small value: a node with more memory than configured is fine, one with less is drained).
    """
    out = subprocess.run([_tool("slurmd"), "-C"], capture_output=True, text=True, timeout=30, check=True)
    first = out.stdout.splitlines()[0]
    fields = dict(word.split("=", 1) for word in first.split() if "=" in word)
    wanted = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")
    missing = [key for key in wanted if key not in fields]
    if missing:
        raise RuntimeError(f"`slurmd -C` printed no {', '.join(missing)}: {first!r}")
    return {key: fields[key] for key in wanted}


def _terminate(proc: subprocess.Popen[bytes] | None, grace: float = STOP_GRACE_S) -> None:
    """SIGTERM, then SIGKILL after the grace period; waits for the process (each daemon runs in a
    session of its own, started with -D: no forking, so the process is the daemon)."""
    if proc is None:
        return
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
    proc.wait(timeout=30)


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-LOG_TAIL:]
    except OSError as exc:
        return f"({path}: {exc.strerror})"


@dataclass
class _Node:
    name: str
    address: str
    namespace: str
    veth: str
    log: Path
    holder: subprocess.Popen[bytes] | None = None  # keeps the UTS namespace (hostname) alive
    slurmd: subprocess.Popen[bytes] | None = None


@dataclass
class _Daemons:
    munged: subprocess.Popen[bytes] | None = None
    slurmctld: subprocess.Popen[bytes] | None = None
    controller_holder: subprocess.Popen[bytes] | None = None
    logs: list[IO[bytes]] = field(default_factory=list)


_SLOTS: Slots[SlurmCluster] = Slots(NAME_PREFIX, "Slurm clusters")


class SlurmCluster:
    """``nodes`` Slurm nodes n1..nN in one partition, each IDLE when the cluster is entered.

    ``prolog`` and ``health_check`` are written into slurm.conf as Prolog= and HealthCheckProgram=,
    with HealthCheckInterval=``health_check_interval``: slurmd runs the program that often and once
    when it starts, and never without an interval (Slurm's default, 0, disables it). slurmd runs
    both with a minimal environment (a health check gets SLURMD_NODENAME alone), so they are usually
    small generated wrappers that set what they need. ``slurmd_timeout`` is SlurmdTimeout, and
    ``extra_conf`` lines are appended to slurm.conf (e.g. ``PrologFlags=Alloc``).
    """

    def __init__(
        self,
        nodes: int,
        tmp_path: Path,
        *,
        prolog: Path | None = None,
        health_check: Path | None = None,
        health_check_interval: int | None = None,
        slurmd_timeout: int = SLURMD_TIMEOUT_S,
        extra_conf: Sequence[str] = (),
    ) -> None:
        if not 1 <= nodes <= MAX_NODES:
            raise ValueError(f"nodes must be 1..{MAX_NODES}, not {nodes}")
        self.nodes: list[str] = [f"n{i}" for i in range(1, nodes + 1)]
        self.partition = "test"
        self.workdir = tmp_path.resolve() / "slurm"
        self.conf = self.workdir / "slurm.conf"
        self.env: dict[str, str] = {}
        self.cluster_name = ""
        self.controller_address = ""
        self._prolog = prolog
        self._health_check = health_check
        self._health_check_interval = health_check_interval
        self._slurmd_timeout = slurmd_timeout
        self._extra = list(extra_conf)
        self._slot: str | None = None
        self._network: ipaddress.IPv4Network | None = None
        self._runtime: Path | None = None  # munge socket and slurmd spool (short paths)
        self._nodes: dict[str, _Node] = {}
        self._daemons = _Daemons()

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> SlurmCluster:
        self.build()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def build(self) -> None:
        """Starts munged, slurmctld and every slurmd, and waits until every node is IDLE; undoes it
        all on error."""
        if self._slot is not None:
            raise RuntimeError("this cluster is already built")
        reason = slurm_available()
        if reason is not None:
            raise RuntimeError(f"cannot build a Slurm test cluster here: {reason}")
        self._slot = _SLOTS.claim(self)
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            (self.workdir / "log").mkdir(exist_ok=True)
            self._remove_leftovers()
            self._make_runtime_dir()
            self._network = self._choose_network()
            self._plan()
            self._create_network()
            self._write_munge_key()
            self._write_conf()
            self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
            self._start_controller()
            for name in self.nodes:
                self._start_holder(name)
                self._launch_slurmd(name)
            for name in self.nodes:
                self.wait_for(name, _registered_idle, READY_TIMEOUT_S)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stops every daemon, kills what is left in the namespaces, removes namespaces, veths and
        bridge, and the short runtime folder. Idempotent; every step runs even when one fails."""
        if self._slot is None:
            return
        try:
            for node in self._nodes.values():
                _terminate(node.slurmd)
                node.slurmd = None
            _terminate(self._daemons.slurmctld)
            _terminate(self._daemons.munged)
        finally:
            try:
                # Also kills what is still in the namespaces: slurmstepd, jobs, the UTS holders.
                _remove_network(self._namespace_names(), self._veth_names(), [self._bridge_name()])
                for proc in self._holders():
                    _terminate(proc, grace=0)
            finally:
                for log in self._daemons.logs:
                    log.close()
                self._daemons = _Daemons()
                if self._runtime is not None:
                    shutil.rmtree(self._runtime, ignore_errors=True)
                    self._runtime = None
                _SLOTS.release(self._slot)
                self._slot = None

    # -- the public API --------------------------------------------------------------------------

    def scontrol(self, *args: str) -> str:
        """Runs this cluster's scontrol and returns its stdout; raises with its stderr on failure."""
        argv = [_tool("scontrol"), *args]
        done = subprocess.run(
            argv, capture_output=True, text=True, env=self.env, timeout=COMMAND_TIMEOUT_S, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"scontrol {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def node_state(self, node: str) -> tuple[str, str | None]:
        """(State, e.g. "IDLE+DRAIN", and the Reason without its " [user@time]", or None)."""
        return self._show_node(node)

    def wait_for(
        self, node: str, predicate: Callable[[str, str | None], bool], timeout: float = 30
    ) -> tuple[str, str | None]:
        """Polls the node's (State, Reason) until the predicate holds; raises with them and the
        slurmd log on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            state, reason = self.node_state(node)
            if predicate(state, reason):
                return state, reason
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"node {node} still State={state} Reason={reason!r} after {timeout:.0f} s;"
                    f" slurmd log ({self._node(node).log}):\n{_tail(self._node(node).log)}"
                )
            time.sleep(POLL_S)

    def run_on(
        self,
        node: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        timeout: float = COMMAND_TIMEOUT_S,
    ) -> subprocess.CompletedProcess[str]:
        """Runs a command inside the node's network and UTS namespaces, as root (as slurmd runs its
        HealthCheckProgram). ``env`` defaults to ``self.env``."""
        return subprocess.run(
            self._in_node(node, argv),
            capture_output=True,
            text=True,
            env=dict(self.env if env is None else env),
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )

    def stop_slurmd(self, node: str) -> None:
        """Stops the node's slurmd (jobs' slurmstepd keep running, as on a real node)."""
        entry = self._node(node)
        _terminate(entry.slurmd)
        entry.slurmd = None

    def start_slurmd(self, node: str) -> None:
        """Starts the node's slurmd again and waits until it answers and slurmctld counts the node
        as responding (a node that was NOT_RESPONDING or DOWN is back once slurmd registered)."""
        entry = self._node(node)
        if entry.slurmd is not None and entry.slurmd.poll() is None:
            return
        self._launch_slurmd(node)
        self._wait_for_slurmd(entry)
        self.wait_for(node, _responding, READY_TIMEOUT_S)

    # -- more for tests --------------------------------------------------------------------------

    def slurmd_log(self, node: str) -> str:
        return _tail(self._node(node).log)

    def slurmctld_log(self) -> str:
        return _tail(self.workdir / "log" / "slurmctld.log")

    @property
    def namespaces(self) -> list[str]:
        """The network namespaces (/run/netns) of the controller and the nodes, while built."""
        return self._namespace_names() if self._slot is not None else []

    @property
    def bridge(self) -> str:
        """The bridge in the root namespace that every namespace's veth is on, while built."""
        if self._slot is None:
            raise RuntimeError("the cluster is not built")
        return self._bridge_name()

    def resume_all(self) -> None:
        """Brings drained nodes back (a test's cleanup); a node already in service is left as is."""
        for node in self.nodes:
            state, _ = self.node_state(node)
            if "DRAIN" in state or state.startswith("DOWN"):
                self.scontrol("update", f"nodename={node}", "state=resume")

    # -- building blocks -------------------------------------------------------------------------

    @property
    def _tag(self) -> str:
        return _SLOTS.tag(self._slot)

    def _controller_namespace(self) -> str:
        return f"{self._tag}c"

    def _namespace_names(self) -> list[str]:
        return [self._controller_namespace(), *(f"{self._tag}n{i}" for i in range(1, len(self.nodes) + 1))]

    def _veth_names(self) -> list[str]:
        return [f"{self._tag}v{i}" for i in range(len(self.nodes) + 1)]

    def _bridge_name(self) -> str:
        return f"{NAME_PREFIX}b{self._tag[len(NAME_PREFIX) :]}"

    def _holders(self) -> list[subprocess.Popen[bytes]]:
        holders = [node.holder for node in self._nodes.values()] + [self._daemons.controller_holder]
        return [proc for proc in holders if proc is not None]

    def _make_runtime_dir(self) -> None:
        """A folder of its own in the temporary directory for munge's socket and slurmd's spool.

        munged refuses a socket folder that not everyone may search (pytest's tmp_path is 0700),
        and a Unix socket path holds at most 107 bytes (unix(7)): slurmd's step sockets are
        SlurmdSpoolDir/NODE_JOBID.STEPID, too long below a deep tmp_path.
        """
        self._runtime = Path(tempfile.mkdtemp(prefix=f"{self._tag}-"))
        self._runtime.chmod(0o755)

    def _remove_leftovers(self) -> None:
        """Removes what an earlier process with this pid left under this slot (never anyone else's)."""
        own = re.compile(rf"{re.escape(self._tag)}(?:c|n\d+)")
        namespaces = [p.name for p in NETNS_DIR.glob(f"{self._tag}*") if own.fullmatch(p.name)]
        own_veth = re.compile(rf"{re.escape(self._tag)}v\d+")
        veths = [p.name for p in Path("/sys/class/net").glob(f"{self._tag}v*") if own_veth.fullmatch(p.name)]
        bridges = [self._bridge_name()] if Path("/sys/class/net", self._bridge_name()).exists() else []
        if namespaces or veths or bridges:
            _remove_network(namespaces, veths, bridges)
        for folder in Path(tempfile.gettempdir()).glob(f"{self._tag}-*"):
            shutil.rmtree(folder, ignore_errors=True)

    def _choose_network(self) -> ipaddress.IPv4Network:
        assert self._slot is not None
        return free_subnet(self._slot, SUBNET_SECOND_BASE, SUBNET_SECOND_OCTETS, "the Slurm test cluster")

    def _plan(self) -> None:
        assert self._network is not None
        self.cluster_name = f"t{self._tag}"
        self.controller_address = str(self._network.network_address + CONTROLLER_OCTET)
        for i, name in enumerate(self.nodes, start=1):
            veth = f"{self._tag}v{i}"
            assert len(veth) <= IFNAME_MAX, veth
            self._nodes[name] = _Node(
                name=name,
                address=str(self._network.network_address + i),
                namespace=f"{self._tag}n{i}",
                veth=veth,
                log=self.workdir / "log" / f"slurmd-{name}.log",
            )

    def _create_network(self) -> None:
        """The bridge, and a namespace with a veth on it for the controller and each node."""
        assert self._network is not None
        bridge = self._bridge_name()
        assert len(bridge) <= IFNAME_MAX, bridge
        prefix = self._network.prefixlen
        bridge_address = self._network.network_address + BRIDGE_OCTET
        # addrgenmode none: no IPv6 link-local addresses, so no router solicitations or MLD either.
        root = [
            f"link add {bridge} type bridge",
            f"link set {bridge} addrgenmode none",
            f"addr add {bridge_address}/{prefix} dev {bridge}",
            f"link set {bridge} up",
        ]
        members = [(self._controller_namespace(), f"{self._tag}v0", self.controller_address)]
        members += [(node.namespace, node.veth, node.address) for node in self._nodes.values()]
        for namespace, veth, _ in members:
            root += [
                f"netns add {namespace}",
                f"link add {veth} type veth peer name eth0 netns {namespace}",
                f"link set {veth} addrgenmode none",
                f"link set {veth} master {bridge}",
                f"link set {veth} up",
            ]
        _run_batch(["ip", "-batch", "-"], root)
        for namespace, _, address in members:
            inside = [
                "link set eth0 addrgenmode none",
                f"addr add {address}/{prefix} dev eth0",
                "link set eth0 up",
                "link set lo up",
            ]
            _run_batch(["ip", "-n", namespace, "-batch", "-"], inside)

    def _write_munge_key(self) -> None:
        """munged refuses a key that others can read (munged(8), --key-file): 0600, made so."""
        key = self.workdir / "munge.key"
        with contextlib.suppress(FileNotFoundError):
            key.unlink()
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(os.urandom(1024))

    @property
    def _munge_socket(self) -> Path:
        assert self._runtime is not None
        return self._runtime / "munge.socket"

    def _write_conf(self) -> None:
        assert self._runtime is not None and self._network is not None
        work, run, log = self.workdir, self._runtime, self.workdir / "log"
        (work / "state").mkdir(exist_ok=True)
        for name in self.nodes:
            (run / "spool" / name).mkdir(parents=True, exist_ok=True)
        plugstack = work / "plugstack.conf"
        plugstack.write_text("")  # no SPANK plugins from /etc/slurm/plugstack.conf.d
        hardware = " ".join(f"{key}={value}" for key, value in _hardware().items())
        lines = [
            f"ClusterName={self.cluster_name}",
            f"SlurmctldHost=ctl({self.controller_address})",
            f"SlurmctldPort={SLURMCTLD_PORT}",
            f"SlurmdPort={SLURMD_PORT}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self._munge_socket}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={work / 'state'}",
            f"SlurmdSpoolDir={run / 'spool' / '%n'}",
            f"SlurmctldPidFile={run / 'slurmctld.pid'}",
            f"SlurmdPidFile={run / 'spool' / '%n.pid'}",
            f"SlurmctldLogFile={log / 'slurmctld.log'}",
            f"SlurmdLogFile={log / 'slurmd-%n.log'}",
            f"PlugStackConfig={plugstack}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            # No cgroups: the nodes share this machine's cgroup tree, and a container may not
            # delegate one. Processes are tracked by process group.
            "ProctrackType=proctrack/pgid",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "SwitchType=switch/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            "MpiDefault=none",
            "MailProg=/bin/true",
            # A DOWN node with a valid configuration returns to service when its slurmd registers.
            "ReturnToService=2",
            f"SlurmdTimeout={self._slurmd_timeout}",
            "InactiveLimit=0",
            "KillWait=2",
            "MinJobAge=5",
        ]
        if self._prolog is not None:
            lines.append(f"Prolog={self._prolog}")
        if self._health_check is not None:
            lines.append(f"HealthCheckProgram={self._health_check}")
        if self._health_check_interval is not None:
            lines.append(f"HealthCheckInterval={self._health_check_interval}")
        lines += self._extra
        for node in self._nodes.values():
            lines.append(
                f"NodeName={node.name} NodeAddr={node.address} {hardware} RealMemory=100 State=UNKNOWN"
            )
        lines.append(f"PartitionName={self.partition} Nodes=ALL Default=YES MaxTime=10 State=UP")
        self.conf.write_text("\n".join(lines) + "\n")

    def _open_log(self, name: str) -> IO[bytes]:
        log = (self.workdir / "log" / name).open("ab")
        self._daemons.logs.append(log)
        return log

    def _spawn(self, argv: Sequence[str], log_name: str) -> subprocess.Popen[bytes]:
        log = self._open_log(log_name)
        # A session of its own: a Ctrl-C in the terminal running pytest does not reach it.
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=self.env,
            cwd=self.workdir,  # slurmd runs its health check and prologs here
            start_new_session=True,
        )

    def _start_uts_holder(self, namespace: str, hostname: str, log_name: str) -> subprocess.Popen[bytes]:
        """A process in the network namespace that owns a new UTS namespace with this hostname,
        which the daemons and run_on then enter (nsenter), so the hostname survives a slurmd restart."""
        argv = [
            _tool("nsenter"),
            f"--net={NETNS_DIR / namespace}",
            _tool("unshare"),
            "--uts",
            "sh",
            "-c",
            'hostname "$1" && echo ready && exec sleep infinity',
            "holder",
            hostname,
        ]
        log = self._open_log(log_name)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        proc.stdout.close()
        if line.strip() != b"ready":
            proc.wait(timeout=30)
            log_text = _tail(self.workdir / "log" / log_name)
            raise RuntimeError(f"could not set hostname {hostname} in a new UTS namespace: {log_text}")
        return proc

    def _enter(
        self, namespace: str, holder: subprocess.Popen[bytes] | None, argv: Sequence[str]
    ) -> list[str]:
        assert holder is not None
        return [
            _tool("nsenter"),
            f"--net={NETNS_DIR / namespace}",
            f"--uts=/proc/{holder.pid}/ns/uts",
            "--",
            *argv,
        ]

    def _start_controller(self) -> None:
        namespace = self._controller_namespace()
        holder = self._start_uts_holder(namespace, "ctl", "ctl-holder.log")
        self._daemons.controller_holder = holder
        munged = [
            _tool("munged"),
            "--foreground",
            f"--socket={self._munge_socket}",
            f"--key-file={self.workdir / 'munge.key'}",
            f"--pid-file={self.workdir / 'munged.pid'}",
            f"--log-file={self.workdir / 'log' / 'munged.log'}",
            f"--seed-file={self.workdir / 'munged.seed'}",
            # The address credentials carry; without it munged resolves the hostname, which no DNS
            # here knows.
            f"--origin={self.controller_address}",
        ]
        self._daemons.munged = self._spawn(self._enter(namespace, holder, munged), "munged.out")
        self._wait_for_socket(self._munge_socket, self._daemons.munged, "munged.out")
        slurmctld = [_tool("slurmctld"), "-D", "-c", "-f", str(self.conf)]
        self._daemons.slurmctld = self._spawn(self._enter(namespace, holder, slurmctld), "slurmctld.out")
        self._wait_for_controller()

    def _wait_for_socket(self, path: Path, proc: subprocess.Popen[bytes], log_name: str) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not path.is_socket():
            if proc.poll() is not None or time.monotonic() > deadline:
                log_text = _tail(self.workdir / "log" / log_name)
                raise RuntimeError(f"{path.name}: no socket (exit {proc.poll()}); log:\n{log_text}")
            time.sleep(0.02)

    def _wait_for_controller(self) -> None:
        """Until `scontrol ping` reaches slurmctld (UP), or it exits."""
        proc = self._daemons.slurmctld
        assert proc is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            done = subprocess.run(
                [_tool("scontrol"), "ping"],
                capture_output=True,
                text=True,
                env=self.env,
                timeout=30,
                check=False,
            )
            if done.returncode == 0 and "is UP" in done.stdout:
                return
            if proc.poll() is not None or time.monotonic() > deadline:
                output = _tail(self.workdir / "log" / "slurmctld.out")
                raise RuntimeError(
                    f"slurmctld did not answer (exit {proc.poll()}; scontrol ping: {done.stdout.strip()}"
                    f" {done.stderr.strip()}); log:\n{self.slurmctld_log()}\n{output}"
                )
            time.sleep(POLL_S)

    def _start_holder(self, name: str) -> None:
        node = self._node(name)
        node.holder = self._start_uts_holder(node.namespace, name, f"{name}-holder.log")

    def _launch_slurmd(self, name: str) -> None:
        node = self._node(name)
        # slurmd finds its NodeName by hostname (nK, the UTS namespace's), as on a real node.
        argv = [_tool("slurmd"), "-D", "-f", str(self.conf)]
        node.slurmd = self._spawn(self._enter(node.namespace, node.holder, argv), f"slurmd-{name}.out")

    def _wait_for_slurmd(self, node: _Node) -> None:
        """Until the node's slurmd answers `scontrol show slurmd` there with its own pid (it listens
        once it has read its configuration), or exits."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            assert node.slurmd is not None
            status = self.run_on(node.name, [_tool("scontrol"), "show", "slurmd"], timeout=30)
            if _slurmd_pid(status.stdout) == node.slurmd.pid:
                return
            if node.slurmd.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"slurmd of {node.name} did not answer (exit {node.slurmd.poll()}; scontrol show"
                    f" slurmd: {status.stderr.strip()}); log:\n{_tail(node.log)}\n"
                    f"{_tail(node.log.with_suffix('.out'))}"
                )
            time.sleep(0.05)

    def _in_node(self, name: str, argv: Sequence[str]) -> list[str]:
        node = self._node(name)
        return self._enter(node.namespace, node.holder, argv)

    def _node(self, name: str) -> _Node:
        try:
            return self._nodes[name]
        except KeyError:
            raise KeyError(f"no node {name!r} in this cluster (nodes: {', '.join(self.nodes)})") from None

    def _show_node(self, node: str) -> tuple[str, str | None]:
        """(State, Reason or None) from `scontrol show node -o NODE`."""
        line = self.scontrol("show", "node", "-o", node).strip()
        state = _STATE.search(line)
        if state is None:
            raise RuntimeError(f"`scontrol show node -o {node}` printed no State=: {line!r}")
        reason = _REASON.search(line)
        return state[1], reason[1] if reason else None


def _registered_idle(state: str, reason: str | None) -> bool:
    """The slurmd registered and the node can take jobs unless drained: IDLE, with no NOT_RESPONDING
    (a drain by a health check at slurmd's start still counts: the node is up)."""
    flags = state.split("+")
    return flags[0] == "IDLE" and "NOT_RESPONDING" not in flags


def _slurmd_pid(status: str) -> int | None:
    """The "Slurmd PID" of `scontrol show slurmd` ("Name  = value" lines, src/api/slurmd_info.c)."""
    for line in status.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == "Slurmd PID" and value.strip().isdigit():
            return int(value)
    return None


def _responding(state: str, reason: str | None) -> bool:
    flags = state.split("+")
    return flags[0] != "DOWN" and "NOT_RESPONDING" not in flags


class SlurmClusterFactory(Protocol):
    def __call__(
        self,
        nodes: int = 3,
        *,
        prolog: Path | None = None,
        health_check: Path | None = None,
        health_check_interval: int | None = None,
        slurmd_timeout: int = SLURMD_TIMEOUT_S,
        extra_conf: Sequence[str] = (),
    ) -> SlurmCluster: ...


@pytest.fixture
def slurm_cluster_factory(tmp_path: Path) -> Iterator[SlurmClusterFactory]:
    """Builds Slurm clusters under tmp_path (skipping with the reason where none can be built here)
    and tears them all down when the test ends, passed or failed."""
    built: list[SlurmCluster] = []

    def build(
        nodes: int = 3,
        *,
        prolog: Path | None = None,
        health_check: Path | None = None,
        health_check_interval: int | None = None,
        slurmd_timeout: int = SLURMD_TIMEOUT_S,
        extra_conf: Sequence[str] = (),
    ) -> SlurmCluster:
        reason = slurm_available()
        if reason is not None:
            pytest.skip(f"no Slurm test cluster: {reason}")
        cluster = SlurmCluster(
            nodes,
            tmp_path / f"slurm{len(built) + 1}",
            prolog=prolog,
            health_check=health_check,
            health_check_interval=health_check_interval,
            slurmd_timeout=slurmd_timeout,
            extra_conf=extra_conf,
        )
        built.append(cluster)
        cluster.build()
        return cluster

    yield build
    for cluster in reversed(built):
        cluster.close()
