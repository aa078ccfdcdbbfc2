"""SSH to one inventory host with Fabric: host keys verified, every failure named in one line.

Fabric's Connection reads ~/.ssh/config (HostName, Port, User, IdentityFile, ProxyJump) and gives
the connection settings; but it accepts any host key (it installs paramiko's AutoAddPolicy), which
a tool that runs as root on a fleet must not do. Here host keys are checked against known_hosts
(the inventory's file, the user's, the system's), an unknown key fails that host unless
`--accept-new-host-keys` (OpenSSH's StrictHostKeyChecking=accept-new: a new key is recorded, a
changed one is always refused), and commands run on a raw channel so binary output (the snapshot
tar) and time limits are exact.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import shlex
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodeagent.api.report import HostError
from nodeagent.core import limits
from nodeagent.core.limits import MiB

if TYPE_CHECKING:
    import paramiko
    from fabric import Config as FabricConfig
    from fabric import Connection

    from nodeagent.cluster.inventory.load import HostSpec

# Kinds of host failure, as shown in reports and JSON (`error.kind`).
UNREACHABLE = "unreachable"
AUTH = "auth failed"
HOST_KEY = "host key rejected"
TIMEOUT = "timeout"
MISSING = "nodeagent missing"
REMOTE = "remote error"
CONTROLLER = "controller error"  # this side failed to finish the host (a worker process died)

USER_KNOWN_HOSTS = "~/.ssh/known_hosts"
SYSTEM_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"


@dataclass(frozen=True)
class HostKeys:
    """Where host keys are checked: the files read, and the one a new key is recorded in."""

    files: tuple[Path, ...]
    accept_new: bool = False
    # Each file is parsed once per run, not once per host: paramiko builds a key object per line
    # (27 us each here), and a site's known_hosts holds a line per node, so 2,000 nodes parsed it
    # 2,000 times: 4 million lines.
    _parsed: dict[Path, paramiko.HostKeys] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)
    # Also read once per run, for every connection of it: the SSH client configuration (Fabric's
    # Config parses ~/.ssh/config and /etc/ssh/ssh_config when made) and each identity file
    # (paramiko parses a key file once per key type it tries, three times per host). Together about
    # 1.2 ms of the controller's CPU per host, of 8 for its whole SSH exchange (measured over the
    # namespace hosts of tests/support/sshcluster.py, one at a time).
    _client: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def default(cls, inventory_file: str | None, accept_new: bool) -> HostKeys:
        user = Path(USER_KNOWN_HOSTS).expanduser()
        files = [Path(inventory_file).expanduser()] if inventory_file else [user]
        return cls((*files, Path(SYSTEM_KNOWN_HOSTS)), accept_new)

    def _load(self, path: Path) -> paramiko.HostKeys:
        import paramiko  # paramiko and Fabric load with the first connection, not with nodeagent

        with self._lock:
            if path not in self._parsed:
                parsed = paramiko.HostKeys()
                try:
                    parsed.load(str(path))
                except (OSError, paramiko.SSHException, ValueError) as e:
                    raise HostError(HOST_KEY, f"cannot read known_hosts file {path}: {e}") from None
                self._parsed[path] = parsed
            return self._parsed[path]

    def preload(self) -> None:
        """Parse every known_hosts file now (once, before the run's hosts need them)."""
        for path in self.files:
            if path.is_file():
                self._load(path)

    def client_config(self) -> FabricConfig:
        """A Fabric Config for one connection: a copy of one loaded once per run (loading reads the
        SSH config files). Connections must not share one: a Connection reads and merges its config
        while connecting, and two hosts connecting at once with one Config raced (an AttributeError
        naming the config's keys)."""
        from fabric import Config

        with self._lock:
            if "config" not in self._client:
                self._client["config"] = Config()
            config: FabricConfig = self._client["config"].clone()
            return config

    def identity(self, path: str) -> paramiko.PKey | None:
        """The private key in `path`, parsed once per run; None when paramiko cannot read it here (a
        passphrase, an unknown type: the connection then hands paramiko the file, which names the
        problem as it always did)."""
        import paramiko

        with self._lock:
            keys: dict[str, paramiko.PKey | None] = self._client.setdefault("identities", {})
            if path not in keys:
                try:
                    keys[path] = paramiko.PKey.from_path(path)
                except Exception:  # any reason: paramiko's own attempt with the file will say it
                    keys[path] = None
            return keys[path]

    def install(self, conn: Connection) -> None:
        """Give `conn`'s client the known keys of its host, and the policy for an unknown one."""
        # paramiko's: loaded with the first connection
        from nodeagent.cluster import ssh_policies as policies

        files = list(self.files)
        # ~/.ssh/config's UserKnownHostsFile for this host, as OpenSSH would use it.
        extra = conn.ssh_config.get("userknownhostsfile")
        if extra:
            files[:0] = [Path(os.path.expanduser(p)) for p in str(extra).split()]
        # The name paramiko looks the server's key up by (SSHClient.connect); per key type, the first
        # file that has one wins, as when paramiko loads the files into one HostKeys itself.
        name = conn.host if conn.port in (None, 22) else f"[{conn.host}]:{conn.port}"
        known = conn.client.get_host_keys()
        for path in files:
            if path.is_file():
                for keytype, key in (self._load(path).lookup(name) or {}).items():
                    if keytype not in (known.lookup(name) or {}):
                        known.add(name, keytype, key)
        policy = policies.AcceptNew(files[0]) if self.accept_new else policies.RejectUnknown()
        conn.client.set_missing_host_key_policy(policy)


def connection(spec: HostSpec, keys: HostKeys) -> Connection:
    """A Fabric Connection for `spec`, not yet open."""
    from fabric import Connection

    # its speed-up of paramiko, before any packet
    from nodeagent.cluster import ssh_policies  # noqa: F401

    kwargs: dict[str, Any] = {
        # Only the key the inventory names, when it names one; else ssh-agent and ~/.ssh keys.
        "banner_timeout": spec.connect_timeout,
        "auth_timeout": spec.connect_timeout,
    }
    if spec.identity_file:
        path = os.path.expanduser(spec.identity_file)
        key = keys.identity(path)
        # Tried first either way, before ~/.ssh/config's IdentityFile entries and the agent.
        if key is not None:
            kwargs["pkey"] = key
        else:
            kwargs["key_filename"] = [path]
    config = keys.client_config()
    gateway = None
    if spec.jump_host:
        user, _, hostport = spec.jump_host.rpartition("@")
        # host:port; an IPv6 address (more than one colon) has no port here, as in Fabric.
        host, _, port = hostport.partition(":") if hostport.count(":") == 1 else (hostport, "", "")
        gateway = Connection(
            host,
            user=user or None,
            port=int(port) if port else None,
            config=config,
            connect_timeout=max(1, math.ceil(spec.connect_timeout)),
            connect_kwargs=dict(kwargs),
        )
        keys.install(gateway)
    conn = Connection(
        spec.address,
        user=spec.user,
        port=spec.port,
        config=config,
        gateway=gateway,
        # Fabric truncates this to whole seconds, and 0 would mean "no limit".
        connect_timeout=max(1, math.ceil(spec.connect_timeout)),
        connect_kwargs=kwargs,
    )
    keys.install(conn)
    return conn


def open_connection(
    conn: Connection, spec: HostSpec, keys: HostKeys, cpu: threading.Semaphore | None = None
) -> None:
    """Connect and authenticate, or raise HostError saying what failed and what to do.

    `cpu` bounds the handshake (key exchange and authentication: CPU work here) but not the TCP
    connect before it, so a dead host waits out its connect timeout without holding a slot."""
    try:
        if conn.gateway is None:  # through a jump host, Fabric opens the channel itself
            conn.connect_kwargs["sock"] = socket.create_connection(
                (conn.host, conn.port), timeout=spec.connect_timeout
            )
        with cpu or contextlib.nullcontext():
            conn.open()
    except BaseException as e:
        raise classify(e, spec, keys) from None


def classify(exc: BaseException, spec: HostSpec, keys: HostKeys) -> HostError:
    import paramiko

    # paramiko's: loaded with the first connection
    from nodeagent.cluster.ssh_policies import HostKeyNotRecorded, UnknownHostKey

    where = f"{spec.address}:{spec.port or 22}"
    known = ", ".join(str(p) for p in keys.files[:-1])
    if isinstance(exc, HostError):
        return exc
    if isinstance(exc, UnknownHostKey):
        return HostError(
            HOST_KEY,
            f"{exc.host} is not in known_hosts ({known}); check its {exc.key.get_name()} key "
            f"fingerprint and add it (ssh-keyscan {shlex.quote(spec.address)} >> known_hosts), "
            "or pass --accept-new-host-keys",
        )
    if isinstance(exc, HostKeyNotRecorded):
        return HostError(
            HOST_KEY, f"{exc}; fix the file, or add the key yourself and drop --accept-new-host-keys"
        )
    if isinstance(exc, paramiko.BadHostKeyException):
        return HostError(
            HOST_KEY,
            f"the host key of {spec.address} CHANGED (known_hosts has a different "
            f"{exc.expected_key.get_name()} key): possible man-in-the-middle; if the host was "
            f"reinstalled, remove the old key with `ssh-keygen -R {shlex.quote(spec.address)}`",
        )
    if isinstance(exc, paramiko.AuthenticationException):
        who = f"{spec.user}@{spec.address}" if spec.user else spec.address
        key = f" with key {spec.identity_file}" if spec.identity_file else ""
        return HostError(AUTH, f"{who} refused the login{key} ({exc}); check the user and key")
    if isinstance(exc, socket.gaierror):
        return HostError(UNREACHABLE, f"cannot resolve {spec.address} ({exc.strerror})")
    if isinstance(exc, TimeoutError):
        return HostError(
            UNREACHABLE, f"no answer from {where} within {spec.connect_timeout:g}s (host down or filtered?)"
        )
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        return HostError(UNREACHABLE, f"connection refused by {where} (is sshd running there?)")
    if isinstance(exc, OSError) and exc.errno in (
        errno.ECONNREFUSED,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.ECONNRESET,
    ):
        return HostError(UNREACHABLE, f"{where}: {exc.strerror}")
    if isinstance(exc, paramiko.SSHException) and "protocol banner" in str(exc):
        # paramiko's "Error reading SSH protocol banner" (+ the socket error, unseparated): the peer
        # closed the connection or sent something else than "SSH-2.0-...".
        return HostError(
            UNREACHABLE,
            f"{where} gave no SSH greeting (not sshd on that port, or sshd refusing new connections: "
            "MaxStartups reached?)",
        )
    if isinstance(exc, EOFError | paramiko.SSHException | OSError):
        return HostError(UNREACHABLE, f"{where}: SSH failed ({type(exc).__name__}: {_one_line(exc)})")
    return HostError(REMOTE, f"{where}: {type(exc).__name__}: {_one_line(exc)}")


def _one_line(exc: BaseException) -> str:
    """An exception's text on one line (a host's error is one line in every report)."""
    return " ".join(str(exc).split())


@dataclass(frozen=True)
class Output:
    stdout: bytes
    stderr: bytes
    exited: int


def output_caps(max_stdout: int | None = None, max_stderr: int | None = None) -> tuple[int, int]:
    """The most a host's command may print on stdout and on stderr: the arguments when given, else
    NODEAGENT_MAX_STDOUT_MIB and NODEAGENT_MAX_STDERR_MIB (nodeagent.core.limits)."""
    out_cap = limits.limit_bytes("NODEAGENT_MAX_STDOUT_MIB") if max_stdout is None else max_stdout
    err_cap = limits.limit_bytes("NODEAGENT_MAX_STDERR_MIB") if max_stderr is None else max_stderr
    return out_cap, err_cap


def too_much(stream: str, variable: str, cap: int) -> HostError:
    return HostError(
        REMOTE,
        f"{stream} output larger than {cap / MiB:g} MiB (limit {variable}); the command was stopped",
    )


def run(
    conn: Connection,
    command: str,
    timeout: float,
    stdin: bytes | None = None,
    max_stdout: int | None = None,
    max_stderr: int | None = None,
) -> Output:
    """Run a shell command line (already quoted) on an open connection, `stdin` fed to it; bytes
    out, exact limit.

    Raises HostError(TIMEOUT) when it does not finish within `timeout` seconds (the channel is
    closed, so the remote command gets SIGHUP through sshd), and HostError(REMOTE) as soon as it
    has printed more than `max_stdout` / `max_stderr` bytes (default NODEAGENT_MAX_STDOUT_MIB and
    NODEAGENT_MAX_STDERR_MIB, nodeagent.core.limits): a node that prints without end costs the limit,
    not the controller's memory."""
    out_cap, err_cap = output_caps(max_stdout, max_stderr)
    transport = conn.client.get_transport()
    if transport is None or not transport.is_active():
        raise HostError(UNREACHABLE, "the SSH connection closed")
    deadline = time.monotonic() + timeout
    chan = transport.open_session(timeout=timeout)
    try:
        chan.settimeout(0.2)  # how often the deadline is looked at while the command is silent
        chan.exec_command(command)
        if stdin is not None:
            chan.sendall(stdin)
            chan.shutdown_write()
        out: list[bytes] = []
        err: list[bytes] = []
        out_size = err_size = 0

        def drain_stderr() -> None:
            nonlocal err_size
            data = chan.recv_stderr(1 << 16)
            err_size += len(data)
            if err_size > err_cap:
                raise too_much("stderr", "NODEAGENT_MAX_STDERR_MIB", err_cap)
            err.append(data)

        while True:
            if time.monotonic() > deadline:
                raise HostError(TIMEOUT, f"the command did not finish within {timeout:g}s")
            if chan.recv_stderr_ready():  # drained as it comes, so a chatty stderr cannot stall it
                drain_stderr()
                continue
            try:
                data = chan.recv(1 << 16)
            except TimeoutError:
                continue
            if not data:
                break  # end of its output
            out_size += len(data)
            if out_size > out_cap:
                raise too_much("stdout", "NODEAGENT_MAX_STDOUT_MIB", out_cap)
            out.append(data)
        if not chan.status_event.wait(max(0.0, deadline - time.monotonic())):
            raise HostError(TIMEOUT, f"the command did not exit within {timeout:g}s")
        while chan.recv_stderr_ready():
            drain_stderr()
        if not transport.is_active() and chan.exit_status == -1:
            raise HostError(UNREACHABLE, "the connection closed while the command ran (sshd stopped?)")
        return Output(b"".join(out), b"".join(err), chan.exit_status)
    finally:
        chan.close()


class SSHShell:
    """An open Fabric connection as the runner's jobs use a host (nodeagent.cluster.shell.Shell)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def run(self, command: str, timeout: float, stdin: bytes | None = None) -> Output:
        return run(self.conn, command, timeout, stdin=stdin)

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:  # closing a half-dead connection may raise anything; it is gone either way
            return
