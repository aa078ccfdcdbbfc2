"""A real SSH cluster on this machine, for the tests of cluster mode (`nodeagent check --cluster`).

Each host is a network namespace with a veth pair (``eth0`` inside, the other end on a bridge in
the root namespace) and its own real sshd, run as a subprocess this module owns. Names carry the
pytest process id and a per-process slot letter, and the /24 is picked per process, so parallel
runs by other people do not collide; leftovers of an earlier process with the same id are removed
before building. Nothing is routed or forwarded: only the bridge's /24 (and loopback) is ever
contacted.

Where namespaces cannot be made (not root, or not permitted), the cluster falls back to several
sshd on 127.0.0.1 with distinct ports (``loopback=True`` forces that even as root).

Use ``with SSHCluster(3, tmp_path) as cluster:`` or the ``ssh_cluster_factory`` fixture; both tear
everything down (sshd process trees, processes in the namespaces, namespaces, veths, bridge) even
when the test fails, and an atexit hook catches clusters that were never closed.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import Generic, Protocol, TypeVar

import psutil
import pytest
import yaml

# Where Debian puts sshd and ip, which a non-root PATH often lacks. sshd re-executes itself for
# every connection, so it must be started by an absolute path anyway.
SBIN_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
NETNS_DIR = Path("/run/netns")
# sshd's privilege separation directory on Debian (chroot of the pre-auth child); it is made at
# boot by the ssh service, which does not run here. See sshd(8), "Privilege separation".
PRIVSEP_DIR = Path("/run/sshd")

READY_DEADLINE_S = 10.0
STOP_GRACE_S = 2.0
LINK_CLEANUP_WAIT_S = 3.0
COMMAND_TIMEOUT_S = 60.0
# Hosts take .1 to .252 of the /24; .253 is left unused (dead_address) and .254 is the bridge.
MAX_HOSTS = 252
DEAD_OCTET = 253
BRIDGE_OCTET = 254
# Subnets 10.200.0.0/24 .. 10.249.249.0/24: 12,500 candidates, the first one derived from the pid.
SUBNET_SECOND_OCTETS = 50
SUBNET_THIRD_OCTETS = 250
SLOT_LETTERS = "abcdefghijklmnopqrstuvwxyz"
# Linux interface names hold at most 15 characters (IFNAMSIZ 16 with the NUL).
IFNAME_MAX = 15
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A pytest process's own names: na<pid><slot>h<i> (namespace), na<pid><slot>v<i> (root-side veth),
# nab<pid><slot> (bridge). The pid is decimal and the slot one letter, so two processes never share
# a name.
NAME_PREFIX = "na"


@dataclass
class TestHost:
    """One host of the cluster: where to reach its sshd and what its sessions see."""

    __test__ = False  # not a pytest test class, despite the name

    name: str
    address: str
    port: int
    user: str
    namespace: str | None  # None on the loopback fallback
    env: dict[str, str]
    host_key: Path  # private key; the public one is beside it with .pub
    workdir: Path
    sshd: subprocess.Popen[bytes] | None = None
    veth: str | None = None  # root-namespace end of the host's veth pair

    @property
    def config(self) -> Path:
        return self.workdir / "sshd_config"

    @property
    def log(self) -> Path:
        return self.workdir / "sshd.log"


def _which(tool: str) -> str | None:
    return shutil.which(tool) or shutil.which(tool, path=SBIN_PATH)


@cache
def _netns_probe() -> str | None:
    """Creates and removes a namespace, a veth into it and a bridge: None when all of that works."""
    tag = f"{NAME_PREFIX}{os.getpid()}"
    cleanup = [f"link del {tag}pb", f"link del {tag}pv", f"netns del {tag}probe"]
    _ip_force_batch(cleanup)  # what an earlier process with this pid may have left
    created = subprocess.run(
        ["ip", "-batch", "-"],
        input=f"netns add {tag}probe\nlink add {tag}pv type veth peer name eth0 netns {tag}probe\n"
        f"link add {tag}pb type bridge\n",
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    _ip_force_batch(cleanup)
    if created.returncode != 0:
        return f"network namespaces are not permitted here: {created.stderr.strip()}"
    return None


def cluster_available(loopback: bool = False) -> str | None:
    """None when a cluster can be built here, else the reason.

    ``loopback=False`` asks for the namespace cluster (root, iproute2, namespaces permitted);
    ``loopback=True`` only for the 127.0.0.1 fallback (sshd and ssh-keygen).
    """
    for tool, package in (("sshd", "openssh-server"), ("ssh-keygen", "openssh-client")):
        if _which(tool) is None:
            return f"no {tool} (Debian package {package})"
    if loopback:
        return None
    if os.geteuid() != 0:
        return f"network namespaces need root (running as uid {os.geteuid()})"
    for tool in ("ip", "tc"):
        if _which(tool) is None:
            return f"no {tool} (Debian package iproute2)"
    return _netns_probe()


@cache
def _sshd_version() -> tuple[int, int]:
    sshd = _which("sshd")
    assert sshd is not None
    # `sshd -V` exists from OpenSSH 9.1; older ones print the version in their usage message.
    out = subprocess.run([sshd, "-V"], capture_output=True, text=True, timeout=10, check=False)
    found = re.search(r"OpenSSH_(\d+)\.(\d+)", out.stdout + out.stderr)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def _login_user() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _setenv_line(env: Mapping[str, str]) -> str:
    """One SetEnv line: sshd keeps only the first SetEnv directive it reads (servconf.c, sSetEnv)."""
    words = []
    for name, value in env.items():
        if not ENV_NAME.fullmatch(name):
            raise ValueError(f"environment variable name {name!r} is not a shell identifier")
        if any(c in value for c in '"\\\n'):
            raise ValueError(f"{name}: sshd_config cannot carry quotes, backslashes or newlines: {value!r}")
        words.append(f'"{name}={value}"')
    return "SetEnv " + " ".join(words)


def _processes_in_namespaces(namespaces: Sequence[str]) -> list[int]:
    """Pids whose network namespace is one of these (what `ip netns pids` does, without a fork each)."""
    inodes = set()
    for ns in namespaces:
        try:
            inodes.add(os.stat(NETNS_DIR / ns).st_ino)
        except OSError:
            continue
    if not inodes:
        return []
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry.name}/ns/net").st_ino in inodes:
                pids.append(int(entry.name))
        except OSError:
            continue
    return [pid for pid in pids if pid != os.getpid()]


def _kill_pids(pids: Sequence[int]) -> None:
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            continue
    _wait_exited(procs, STOP_GRACE_S)


def _wait_exited(procs: Sequence[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Waits until each process has exited and returns those still running at the deadline.

    A zombie has exited: it holds no socket or namespace any more. psutil.wait_procs would wait for
    it to be reaped, and sshd's orphans are reaped by whatever runs as pid 1, which in a container
    may take seconds or never happen.
    """
    deadline = time.monotonic() + timeout
    running = list(procs)
    while running:
        running = [proc for proc in running if _running(proc)]
        if not running or time.monotonic() > deadline:
            break
        time.sleep(0.005)
    return running


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _remove_network(namespaces: Sequence[str], veths: Sequence[str], bridges: Sequence[str]) -> None:
    """Kills every process in the namespaces, then deletes them, the veths and the bridges (missing
    ones are fine).

    Namespaces go first: the kernel then destroys their veth pairs in one batched cleanup, where
    deleting 64 veths one by one takes over a second (each waits for an RCU grace period).
    """
    _kill_pids(_processes_in_namespaces(namespaces))
    _ip_force_batch([f"netns del {ns}" for ns in namespaces if (NETNS_DIR / ns).exists()])
    deadline = time.monotonic() + LINK_CLEANUP_WAIT_S
    remaining = [link for link in veths if Path("/sys/class/net", link).exists()]
    while remaining and time.monotonic() < deadline:
        time.sleep(0.02)
        remaining = [link for link in remaining if Path("/sys/class/net", link).exists()]
    # The bridge, and any veth whose namespace was not destroyed in time (or was already gone).
    remaining += [link for link in bridges if Path("/sys/class/net", link).exists()]
    _ip_force_batch([f"link del {link}" for link in remaining])


def _ip_force_batch(commands: Sequence[str]) -> None:
    if commands:
        # -force: go on after an error, so one odd leftover does not keep the rest alive.
        subprocess.run(
            ["ip", "-force", "-batch", "-"],
            input="\n".join(commands) + "\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


def _terminate_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL, sshd and every process below it, and waits for them.

    sshd's per-connection children call setsid() (sshd.c, "Create a new session"), so they leave the
    listener's process group: they are found through the process tree instead. The listener is
    stopped while the tree is gathered so that it cannot fork a child that the gathering misses.
    """
    if proc.poll() is None:
        try:
            root = psutil.Process(proc.pid)
            os.kill(proc.pid, signal.SIGSTOP)
            tree = [root, *root.children(recursive=True)]
        except (psutil.NoSuchProcess, ProcessLookupError):
            tree = []
        for member in tree:
            try:
                member.terminate()
            except psutil.NoSuchProcess:
                continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)  # a stopped process acts on SIGTERM only once continued
        for member in _wait_exited(tree, STOP_GRACE_S):
            try:
                member.kill()
            except psutil.NoSuchProcess:
                continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # anything left in the listener's own group
    proc.wait(timeout=30)


class Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=Closable)


class Slots(Generic[C]):
    """The letters of the clusters of one kind alive in this process: a cluster's namespaces,
    links and bridge are named PREFIX<pid><letter>..., so clusters of parallel test processes, and
    of one process, never share a name. Clusters a test forgot are closed at exit."""

    def __init__(self, prefix: str, kind: str) -> None:
        self.prefix = prefix
        self.kind = kind
        self._lock = threading.Lock()
        self._live: dict[str, C] = {}
        atexit.register(self._close_forgotten)

    def claim(self, cluster: C) -> str:
        with self._lock:
            free = [letter for letter in SLOT_LETTERS if letter not in self._live]
            if not free:
                raise RuntimeError(f"more than {len(SLOT_LETTERS)} {self.kind} at once in one process")
            self._live[free[0]] = cluster
            return free[0]

    def release(self, slot: str) -> None:
        with self._lock:
            self._live.pop(slot, None)

    def tag(self, slot: str | None) -> str:
        assert slot is not None
        return f"{self.prefix}{os.getpid()}{slot}"

    def _close_forgotten(self) -> None:
        for cluster in list(self._live.values()):
            cluster.close()


_SLOTS: Slots[SSHCluster] = Slots(NAME_PREFIX, "clusters")


class SSHCluster:
    """``count`` hosts h1..hN, each running a real sshd that accepts the cluster's client key.

    ``env(i)`` gives host hi's extra session environment (sshd SetEnv), added to
    ``NODEAGENT_TEST_HOST=hi``. ``loopback=None`` uses namespaces when cluster_available() allows
    and 127.0.0.1 otherwise. ``sshd_config_extra`` lines are appended to every sshd_config.
    """

    def __init__(
        self,
        count: int,
        workdir: Path,
        env: Callable[[int], dict[str, str]] | None = None,
        *,
        loopback: bool | None = None,
        sshd_config_extra: Sequence[str] = (),
        user: str | None = None,
    ) -> None:
        """`user`: the account every host logs in as (default root, or the current user on the
        loopback fallback); it must exist, and its shell is what runs each command."""
        if not 1 <= count <= MAX_HOSTS:
            raise ValueError(f"count must be 1..{MAX_HOSTS}, not {count}")
        self.count = count
        self.workdir = workdir.resolve()
        self._env = env
        self.loopback = cluster_available() is not None if loopback is None else loopback
        self._extra = list(sshd_config_extra)
        self._user = user
        self.hosts: list[TestHost] = []
        self.key = self.workdir / "client_ed25519"
        self.known_hosts = self.workdir / "known_hosts"
        self.ssh_config = self.workdir / "ssh_config"
        self.network: ipaddress.IPv4Network | None = None
        self.bridge: str | None = None
        self._slot: str | None = None
        self._spawned: list[subprocess.Popen[bytes]] = []

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> SSHCluster:
        self.build()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def build(self) -> None:
        """Creates the hosts and waits until every sshd accepts connections; undoes it all on error."""
        if self._slot is not None:
            raise RuntimeError("this cluster is already built")
        reason = cluster_available(loopback=self.loopback)
        if reason is not None:
            raise RuntimeError(f"cannot build an SSH cluster here: {reason}")
        self._slot = _SLOTS.claim(self)
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            if not self.loopback:
                self._remove_leftovers()
                self.network = self._choose_network()
            self.hosts = [self._plan_host(i) for i in range(1, self.count + 1)]
            self._generate_keys()
            if not self.loopback:
                self._create_network()
            if os.geteuid() == 0:
                PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
            for host in self.hosts:
                self._launch(host)
            self._wait_ready(self.hosts)
            self._write_client_files()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Kills every sshd tree and spawned process, removes namespaces, veths and bridge. Idempotent.

        Every step runs even when an earlier one fails; the first failure is raised at the end.
        """
        if self._slot is None:
            return
        errors: list[Exception] = []
        for host in self.hosts:
            try:
                self.stop(host.name)
            except Exception as exc:
                errors.append(exc)
        for proc in self._spawned:
            try:
                self._kill_spawned(proc)
            except Exception as exc:
                errors.append(exc)
        self._spawned.clear()
        try:
            if not self.loopback:
                # Also kills whatever still runs in the namespaces, e.g. sessions of an sshd that
                # could not be stopped above.
                _remove_network(self._namespace_names(), self._veth_names(), [self._bridge_name()])
        finally:
            _SLOTS.release(self._slot)
            self._slot = None
        if errors:
            raise errors[0]

    # -- hosts -----------------------------------------------------------------------------------

    def host(self, name: str) -> TestHost:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(f"no host {name!r} in this cluster (hosts: {', '.join(h.name for h in self.hosts)})")

    def stop(self, name: str) -> None:
        """Kills the host's sshd and its per-connection children, so in-flight sessions die too."""
        host = self.host(name)
        if host.sshd is not None:
            _terminate_tree(host.sshd)
            host.sshd = None

    def start(self, name: str) -> None:
        """Starts the host's sshd again (same config and host key) and waits until it accepts."""
        host = self.host(name)
        if host.sshd is not None and host.sshd.poll() is None:
            return
        self._launch(host)
        self._wait_ready([host])

    def slow_link(
        self, name: str, rate: str = "10mbit", burst: str = "32kbit", latency: str = "50ms"
    ) -> None:
        """Limits the host's link both ways with a token bucket on each end of its veth.

        The root-side end limits traffic toward the host, eth0 inside the namespace traffic from it.
        A 4 KiB bucket (32 kbit) holds a couple of full frames, and 50 ms bounds the queue; tbf
        splits GSO super-packets larger than the bucket: https://man7.org/linux/man-pages/man8/tc-tbf.8.html
        """
        host = self._namespace_host(name, "slow_link")
        assert host.veth is not None and host.namespace is not None
        tbf = ["root", "tbf", "rate", rate, "burst", burst, "latency", latency]
        for argv in (
            ["tc", "qdisc", "replace", "dev", host.veth, *tbf],
            ["tc", "-n", host.namespace, "qdisc", "replace", "dev", "eth0", *tbf],
        ):
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"{shlex.join(argv)} failed: {done.stderr.strip()}")

    def slow_path(
        self, src: str, dst: str, rate: str = "10mbit", burst: str = "32kbit", latency: str = "50ms"
    ) -> None:
        """Limits only what `src` sends to `dst`'s address: one direction of one pair, as a bad
        cable or switch port on that path would, while `src`'s other traffic (its ACKs for what
        other hosts send it, its traffic to other hosts) keeps the full rate.

        On eth0 inside `src`'s namespace: an htb qdisc, which sends what no filter classifies
        straight out (default 0, https://man7.org/linux/man-pages/man8/tc-htb.8.html), a class at
        `rate` holding slow_link's token bucket, and a u32 filter putting `dst`'s address in it.
        (Not prio: some kernels the tests run on lack it.) clear_link removes it.
        """
        host = self._namespace_host(src, "slow_path")
        assert host.namespace is not None
        address = self.host(dst).address
        tc = ["tc", "-n", host.namespace]
        tbf = ["tbf", "rate", rate, "burst", burst, "latency", latency]
        match = ["protocol", "ip", "prio", "1", "u32", "match", "ip", "dst", f"{address}/32", "flowid", "1:1"]
        for argv in (
            [*tc, "qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "htb"],
            [*tc, "class", "replace", "dev", "eth0", "parent", "1:", "classid", "1:1", "htb", "rate", rate],
            [*tc, "qdisc", "replace", "dev", "eth0", "parent", "1:1", "handle", "10:", *tbf],
            [*tc, "filter", "replace", "dev", "eth0", "parent", "1:", *match],
        ):
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"{shlex.join(argv)} failed: {done.stderr.strip()}")

    def clear_link(self, name: str) -> None:
        """Removes what slow_link added (no-op on a link without it)."""
        host = self._namespace_host(name, "clear_link")
        assert host.veth is not None and host.namespace is not None
        for argv in (
            ["tc", "qdisc", "del", "dev", host.veth, "root"],
            ["tc", "-n", host.namespace, "qdisc", "del", "dev", "eth0", "root"],
        ):
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
            # tc's answer when the device has only its default qdisc: nothing to clear.
            if done.returncode != 0 and "handle of zero" not in done.stderr:
                raise RuntimeError(f"{shlex.join(argv)} failed: {done.stderr.strip()}")

    def exec(
        self, name: str, argv: Sequence[str], *, timeout: float = COMMAND_TIMEOUT_S, check: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """Runs a command inside the host's namespace (on this machine as is, on loopback)."""
        return subprocess.run(
            self._in_host(name, argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
            stdin=subprocess.DEVNULL,
        )

    def spawn(self, name: str, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        """Starts a background command in the host (stdout and stderr piped); killed at teardown."""
        proc = subprocess.Popen(
            self._in_host(name, argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self._spawned.append(proc)
        return proc

    def ssh_argv(self, name: str, *command: str, known_hosts: Path | None = None) -> list[str]:
        """An OpenSSH client command line for the host that reads no user or system ssh config."""
        host = self.host(name)
        options = {
            "IdentitiesOnly": "yes",
            "UserKnownHostsFile": known_hosts or self.known_hosts,
            "GlobalKnownHostsFile": "/dev/null",
            "StrictHostKeyChecking": "yes",
            "BatchMode": "yes",
            "ConnectTimeout": 3,
        }
        argv = ["ssh", "-F", "/dev/null", "-i", str(self.key), "-p", str(host.port)]
        for option, value in options.items():
            argv += ["-o", f"{option}={value}"]
        return [*argv, f"{host.user}@{host.address}", *command]

    def dead_address(self) -> str:
        """An address on the cluster's /24 that nothing answers (not even ARP): connecting times out."""
        if self.network is None:
            pytest.skip("dead_address needs network namespaces: this cluster runs on loopback")
        return str(self.network.network_address + DEAD_OCTET)

    # -- inventories -----------------------------------------------------------------------------

    def write_inventory(self, path: Path, **defaults: object) -> Path:
        """Writes a native hosts.yml; keyword arguments override the defaults (None drops one)."""
        merged: dict[str, object] = {
            "user": self.hosts[0].user,
            "port": 22,
            "identity_file": str(self.key),
            "known_hosts": str(self.known_hosts),
            "connect_timeout": 3,
            "command_timeout": 60,
        }
        merged.update(defaults)
        hosts: list[dict[str, object]] = []
        for host in self.hosts:
            entry: dict[str, object] = {"name": host.name, "host": host.address}
            if host.port != 22:
                entry["port"] = host.port
            hosts.append(entry)
        document = {"defaults": {k: v for k, v in merged.items() if v is not None}, "hosts": hosts}
        path.write_text(yaml.safe_dump(document, sort_keys=False, default_flow_style=None))
        return path

    def write_ansible_inventory(self, path: Path) -> Path:
        """Writes the same hosts as an Ansible YAML inventory; known_hosts goes in the ssh arguments.

        https://docs.ansible.com/ansible/latest/inventory_guide/intro_inventory.html
        """
        hosts = {
            host.name: {
                "ansible_host": host.address,
                "ansible_port": host.port,
                "ansible_user": host.user,
                "ansible_ssh_private_key_file": str(self.key),
            }
            for host in self.hosts
        }
        common = f"-o UserKnownHostsFile={shlex.quote(str(self.known_hosts))} -o StrictHostKeyChecking=yes"
        document = {"all": {"hosts": hosts, "vars": {"ansible_ssh_common_args": common}}}
        path.write_text(yaml.safe_dump(document, sort_keys=False, default_flow_style=None))
        return path

    # -- building blocks -------------------------------------------------------------------------

    @property
    def _tag(self) -> str:
        return _SLOTS.tag(self._slot)

    def _namespace_names(self) -> list[str]:
        return [f"{self._tag}h{i}" for i in range(1, self.count + 1)]

    def _veth_names(self) -> list[str]:
        return [f"{self._tag}v{i}" for i in range(1, self.count + 1)]

    def _bridge_name(self) -> str:
        return f"{NAME_PREFIX}b{self._tag[len(NAME_PREFIX) :]}"

    def _remove_leftovers(self) -> None:
        """Removes what an earlier process with this pid left under this slot (never anyone else's)."""
        own = re.compile(rf"{re.escape(self._tag)}h\d+")
        namespaces = [p.name for p in NETNS_DIR.glob(f"{self._tag}h*") if own.fullmatch(p.name)]
        own_veth = re.compile(rf"{re.escape(self._tag)}v\d+")
        veths = [p.name for p in Path("/sys/class/net").glob(f"{self._tag}v*") if own_veth.fullmatch(p.name)]
        bridges = [self._bridge_name()] if Path("/sys/class/net", self._bridge_name()).exists() else []
        if namespaces or veths or bridges:
            _remove_network(namespaces, veths, bridges)

    def _choose_network(self) -> ipaddress.IPv4Network:
        assert self._slot is not None
        return free_subnet(self._slot, 200, SUBNET_SECOND_OCTETS, "the test cluster")

    def _plan_host(self, i: int) -> TestHost:
        name = f"h{i}"
        env = {"NODEAGENT_TEST_HOST": name, **(self._env(i) if self._env else {})}
        workdir = self.workdir / name
        workdir.mkdir(exist_ok=True)
        if self.loopback:
            return TestHost(
                name=name,
                address="127.0.0.1",
                port=_free_loopback_port(),
                user=self._user or _login_user(),
                namespace=None,
                env=env,
                host_key=workdir / "ssh_host_ed25519_key",
                workdir=workdir,
            )
        assert self.network is not None
        veth = f"{self._tag}v{i}"
        assert len(veth) <= IFNAME_MAX, veth
        return TestHost(
            name=name,
            address=str(self.network.network_address + i),
            port=22,
            user=self._user or "root",
            namespace=f"{self._tag}h{i}",
            env=env,
            host_key=workdir / "ssh_host_ed25519_key",
            workdir=workdir,
            veth=veth,
        )

    def _generate_keys(self) -> None:
        """The client key and every host key, generated concurrently."""
        keygen = _which("ssh-keygen")
        assert keygen is not None
        jobs = [(self.key, "nodeagent-test-client")] + [(h.host_key, h.name) for h in self.hosts]
        procs = []
        for path, comment in jobs:
            argv = [keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)]
            procs.append(
                subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
                )
            )
        failures = []
        for proc, (path, _) in zip(procs, jobs, strict=True):
            out, _ = proc.communicate(timeout=60)
            if proc.returncode != 0:
                failures.append(f"{path}: {out.decode(errors='replace').strip()}")
        if failures:
            raise RuntimeError("ssh-keygen failed: " + "; ".join(failures))
        (self.workdir / "authorized_keys").write_text(self.key.with_suffix(".pub").read_text())

    def _create_network(self) -> None:
        """One `ip -batch` for the bridge, namespaces and veths, then one per namespace, concurrently."""
        assert self.network is not None
        bridge = self._bridge_name()
        assert len(bridge) <= IFNAME_MAX, bridge
        self.bridge = bridge
        bridge_address = self.network.network_address + BRIDGE_OCTET
        # addrgenmode none: no IPv6 link-local addresses, so no router solicitations or MLD either.
        root = [
            f"link add {bridge} type bridge",
            f"link set {bridge} addrgenmode none",
            f"addr add {bridge_address}/{self.network.prefixlen} dev {bridge}",
            f"link set {bridge} up",
        ]
        for host in self.hosts:
            root += [
                f"netns add {host.namespace}",
                f"link add {host.veth} type veth peer name eth0 netns {host.namespace}",
                f"link set {host.veth} addrgenmode none",
                f"link set {host.veth} master {bridge}",
                f"link set {host.veth} up",
            ]
        _run_batch(["ip", "-batch", "-"], root)
        started = []
        for host in self.hosts:
            assert host.namespace is not None
            inside = [
                "link set eth0 addrgenmode none",
                f"addr add {host.address}/{self.network.prefixlen} dev eth0",
                "link set eth0 up",
                "link set lo up",
            ]
            argv = ["ip", "-n", host.namespace, "-batch", "-"]
            started.append((_start_batch(argv, inside), argv))
        for proc, argv in started:
            _finish_batch(proc, argv)

    def _write_sshd_config(self, host: TestHost) -> None:
        lines = [
            f"ListenAddress {host.address}",
            f"Port {host.port}",
            f"HostKey {host.host_key}",
            f"PidFile {host.workdir / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.workdir / 'authorized_keys'}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            # The key files live in a pytest tmp dir whose parents sshd would otherwise audit.
            "StrictModes no",
            # A perf script opens 64 hosts at once, each with several sessions: sshd_config(5).
            "MaxStartups 200:30:300",
            "MaxSessions 50",
            "PrintMotd no",
            "PrintLastLog no",
            "X11Forwarding no",
            "Subsystem sftp internal-sftp",
        ]
        if _sshd_version() >= (9, 8):
            # From OpenSSH 9.8 sshd refuses sources after failed or aborted logins, and every test
            # connection comes from the one bridge address: https://www.openssh.com/txt/release-9.8
            lines.append("PerSourcePenalties no")
        if host.env:
            lines.append(_setenv_line(host.env))
        lines += self._extra
        host.config.write_text("\n".join(lines) + "\n")

    def _launch(self, host: TestHost) -> None:
        self._write_sshd_config(host)
        sshd = _which("sshd")
        assert sshd is not None
        argv = [sshd, "-D", "-e", "-f", str(host.config)]
        with host.log.open("ab") as log:
            # A session of its own: its process group is the listener alone, killed on stop().
            host.sshd = subprocess.Popen(
                self._in_host(host.name, argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )

    def _wait_ready(self, hosts: Sequence[TestHost]) -> None:
        """Polls a TCP connect to every sshd until all accept; on loopback, retries a taken port."""
        pending = list(hosts)
        deadline = time.monotonic() + READY_DEADLINE_S
        port_retries = 3
        while pending:
            still = []
            for host in pending:
                assert host.sshd is not None
                if host.sshd.poll() is not None:
                    log = host.log.read_text(errors="replace")
                    if self.loopback and "Address already in use" in log and port_retries > 0:
                        port_retries -= 1
                        host.port = _free_loopback_port()
                        self._launch(host)
                        still.append(host)
                        continue
                    raise RuntimeError(
                        f"sshd for {host.name} exited with {host.sshd.returncode} before accepting"
                        f" connections; its log ({host.log}):\n{log[-4000:]}"
                    )
                try:
                    with socket.create_connection((host.address, host.port), timeout=0.2):
                        pass
                except OSError:
                    still.append(host)
            pending = still
            if pending and time.monotonic() > deadline:
                host = pending[0]
                log = host.log.read_text(errors="replace")
                raise RuntimeError(
                    f"sshd for {', '.join(h.name for h in pending)} did not accept connections on"
                    f" {host.address}:{host.port} within {READY_DEADLINE_S:.0f} s; log of {host.name}:\n"
                    f"{log[-4000:]}"
                )
            if pending:
                time.sleep(0.02)

    def _write_client_files(self) -> None:
        known = []
        config = []
        for host in self.hosts:
            key_type, key_b64 = host.host_key.with_suffix(".pub").read_text().split()[:2]
            # ssh writes a non-default port as [host]:port (sshd(8), SSH_KNOWN_HOSTS FILE FORMAT).
            where = host.address if host.port == 22 else f"[{host.address}]:{host.port}"
            known.append(f"{where} {key_type} {key_b64}")
            config += [
                f"Host {host.name}",
                f"    HostName {host.address}",
                f"    Port {host.port}",
                f"    User {host.user}",
                f"    IdentityFile {self.key}",
                f"    UserKnownHostsFile {self.known_hosts}",
                "    IdentitiesOnly yes",
                "    StrictHostKeyChecking yes",
                "",
            ]
        self.known_hosts.write_text("\n".join(known) + "\n")
        self.ssh_config.write_text("\n".join(config))

    def _in_host(self, name: str, argv: Sequence[str]) -> list[str]:
        host = self.host(name)
        if host.namespace is None:
            return list(argv)
        return ["ip", "netns", "exec", host.namespace, *argv]

    def _namespace_host(self, name: str, what: str) -> TestHost:
        host = self.host(name)
        if host.namespace is None:
            pytest.skip(f"{what} needs network namespaces: this cluster runs on loopback")
        return host

    def _kill_spawned(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)


def free_subnet(slot: str, second_base: int, second_octets: int, what: str) -> ipaddress.IPv4Network:
    """The first 10.<second_base + i>.<j>.0/24 (i < second_octets, j < SUBNET_THIRD_OCTETS) from this
    pid's and slot's starting point that overlaps no address or route here."""
    used = []
    for argv in (["ip", "-4", "-o", "addr", "show"], ["ip", "-4", "route", "show", "table", "all"]):
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout
        for word in re.findall(r"\b\d+\.\d+\.\d+\.\d+(?:/\d+)?\b", out):
            used.append(ipaddress.ip_network(word, strict=False))
    candidates = second_octets * SUBNET_THIRD_OCTETS
    start = (os.getpid() + SLOT_LETTERS.index(slot) * 101) % candidates
    for step in range(candidates):
        n = (start + step) % candidates
        net = ipaddress.IPv4Network(f"10.{second_base + n % second_octets}.{n // second_octets}.0/24")
        if not any(net.overlaps(other) for other in used if other.prefixlen > 0):
            return net
    last = second_base + second_octets - 1
    raise RuntimeError(f"no free 10.{second_base}-{last}.x.0/24 subnet for {what}")


def _start_batch(argv: list[str], commands: Sequence[str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None
    # A few hundred bytes: the pipe takes them without blocking, so all batches start at once.
    proc.stdin.write("\n".join(commands) + "\n")
    proc.stdin.close()
    return proc


def _finish_batch(proc: subprocess.Popen[str], argv: list[str]) -> None:
    proc.stdin = None  # written and closed by _start_batch: communicate() would flush it again
    _, err = proc.communicate(timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} failed: {err.strip()}")


def _run_batch(argv: list[str], commands: Sequence[str]) -> None:
    _finish_batch(_start_batch(argv, commands), argv)


class ClusterFactory(Protocol):
    def __call__(
        self,
        count: int = 3,
        *,
        env: Callable[[int], dict[str, str]] | None = None,
        loopback: bool | None = None,
        sshd_config_extra: Sequence[str] = (),
    ) -> SSHCluster: ...


@pytest.fixture
def ssh_cluster_factory(tmp_path: Path) -> Iterator[ClusterFactory]:
    """Builds clusters under tmp_path (skipping with the reason where none can be built here) and
    tears them all down when the test ends, passed or failed."""
    with cluster_factory(tmp_path) as build:
        yield build


@pytest.fixture(scope="module")
def module_ssh_cluster_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterFactory]:
    """ssh_cluster_factory for a module's tests that only read the cluster (a module fixture
    builds it once): torn down when the module's last test ends."""
    with cluster_factory(tmp_path_factory.mktemp("clusters")) as build:
        yield build


@contextlib.contextmanager
def cluster_factory(folder: Path) -> Iterator[ClusterFactory]:
    built: list[SSHCluster] = []

    def build(
        count: int = 3,
        *,
        env: Callable[[int], dict[str, str]] | None = None,
        loopback: bool | None = None,
        sshd_config_extra: Sequence[str] = (),
    ) -> SSHCluster:
        if loopback is None:
            loopback = cluster_available() is not None
        reason = cluster_available(loopback=loopback)
        if reason is not None:
            pytest.skip(f"no SSH test cluster: {reason}")
        cluster = SSHCluster(
            count,
            folder / f"cluster{len(built) + 1}",
            env,
            loopback=loopback,
            sshd_config_extra=sshd_config_extra,
        )
        built.append(cluster)
        cluster.build()
        return cluster

    try:
        yield build
    finally:
        for cluster in reversed(built):
            cluster.close()
