"""The SSH test cluster builder (tests/support/sshcluster.py): real sshd in network namespaces, or
on loopback."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from tests.support import sshcluster
from tests.support.sshcluster import ClusterFactory, SSHCluster, cluster_available

# Real sshd, TensorFlow or many subprocesses: left out of `make test-fast`.
pytestmark = pytest.mark.slow

# The fixture, made visible to pytest in this module (tests/ has no conftest.py).
ssh_cluster_factory = sshcluster.ssh_cluster_factory

NETNS_REASON = cluster_available()
needs_netns = pytest.mark.skipif(NETNS_REASON is not None, reason=f"no namespace cluster: {NETNS_REASON}")
needs_ssh = pytest.mark.skipif(shutil.which("ssh") is None, reason="no ssh client (Debian openssh-client)")
needs_iperf3 = pytest.mark.skipif(shutil.which("iperf3") is None, reason="no iperf3 (Debian iperf3)")

# slow_link's rate is 10 mbit/s; the bounds leave a factor of 3 and 10 on either side.
SLOW_RATE_MBIT_MAX = 30
FAST_RATE_MBIT_MIN = 100
# A TCP connect to sshd that prints its banner: proof of reachability without ping (not installed).
READ_SSH_BANNER = (
    "import socket, sys; print(socket.create_connection((sys.argv[1], 22), timeout=3).recv(64).decode())"
)


def ssh(cluster: SSHCluster, name: str, command: str, **kwargs: Path) -> subprocess.CompletedProcess[str]:
    argv = cluster.ssh_argv(name, command, **kwargs)
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def alive(pid: int) -> bool:
    """A zombie counts as gone: it holds no socket, namespace or memory, only a table entry."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def sshd_tree(cluster: SSHCluster) -> list[int]:
    pids = []
    for host in cluster.hosts:
        assert host.sshd is not None
        pids += [host.sshd.pid, *(p.pid for p in psutil.Process(host.sshd.pid).children(recursive=True))]
    return pids


def processes_mentioning(text: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if text in " ".join(proc.info["cmdline"] or []) and proc.pid != os.getpid() and alive(proc.pid):
            found.append(proc.pid)
    return found


def netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def netns_pids(namespace: str) -> list[str]:
    argv = ["ip", "netns", "pids", namespace]
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout.split()


def link_names() -> set[str]:
    out = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True, check=True).stdout
    return {link["ifname"] for link in json.loads(out)}


def iperf3_mbit(cluster: SSHCluster, client: str, server: str, *, reverse: bool = False) -> float:
    """Mbit/s received in a 1 s iperf3 run from client to server (server to client with reverse)."""
    argv = ["iperf3", "-c", cluster.host(server).address, "-t", "1", "-J", *(["-R"] if reverse else [])]
    deadline = time.monotonic() + 10
    while True:
        done = cluster.exec(client, argv, timeout=30)
        report = json.loads(done.stdout)
        # The server spawned just before may not listen yet: retry only that.
        if "Connection refused" in report.get("error", "") and time.monotonic() < deadline:
            time.sleep(0.05)
            continue
        assert done.returncode == 0, report.get("error", done.stderr)
        return float(report["end"]["sum_received"]["bits_per_second"]) / 1e6


@needs_netns
@needs_ssh
def test_each_session_runs_in_its_own_namespace_with_its_own_environment(
    ssh_cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    cluster = ssh_cluster_factory(
        3, env=lambda i: {"NODEAGENT_TEST_HOST": f"node-{i}", "NODEAGENT_ROOT": str(tmp_path / f"host{i}")}
    )
    macs = set()
    for i, host in enumerate(cluster.hosts, start=1):
        done = ssh(
            cluster,
            host.name,
            "echo $NODEAGENT_TEST_HOST; echo $NODEAGENT_ROOT; cat /sys/class/net/eth0/address",
        )
        assert done.returncode == 0, done.stderr
        env_host, env_root, mac = done.stdout.split()
        assert (env_host, env_root) == (f"node-{i}", str(tmp_path / f"host{i}"))
        assert host.namespace is not None
        link = subprocess.run(
            ["ip", "-n", host.namespace, "-j", "link", "show", "eth0"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert mac == json.loads(link.stdout)[0]["address"]
        macs.add(mac)
    assert len(macs) == 3
    # Port 22, so known_hosts holds bare addresses, one line per host.
    lines = cluster.known_hosts.read_text().splitlines()
    assert [line.split()[:2] for line in lines] == [[h.address, "ssh-ed25519"] for h in cluster.hosts]


@needs_netns
@needs_ssh
def test_strict_host_key_checking_refuses_a_host_missing_from_known_hosts(
    ssh_cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    cluster = ssh_cluster_factory(1)
    empty = tmp_path / "empty_known_hosts"
    empty.touch()
    refused = ssh(cluster, "h1", "true", known_hosts=empty)
    assert refused.returncode == 255
    assert "Host key verification failed" in refused.stderr
    assert ssh(cluster, "h1", "true").returncode == 0


@needs_netns
@needs_ssh
def test_ssh_config_and_inventories_describe_the_hosts(
    ssh_cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    cluster = ssh_cluster_factory(2)
    by_alias = subprocess.run(
        ["ssh", "-F", str(cluster.ssh_config), "-o", "BatchMode=yes", "h2", "echo $NODEAGENT_TEST_HOST"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (by_alias.returncode, by_alias.stdout.strip()) == (0, "h2"), by_alias.stderr

    native = yaml.safe_load(
        cluster.write_inventory(tmp_path / "hosts.yml", command_timeout=5, known_hosts=None).read_text()
    )
    assert native == {
        "defaults": {
            "user": "root",
            "port": 22,
            "identity_file": str(cluster.key),
            "connect_timeout": 3,
            "command_timeout": 5,
        },
        "hosts": [{"name": h.name, "host": h.address} for h in cluster.hosts],
    }
    ansible = yaml.safe_load(cluster.write_ansible_inventory(tmp_path / "ansible.yml").read_text())
    assert ansible["all"]["hosts"]["h1"] == {
        "ansible_host": cluster.hosts[0].address,
        "ansible_port": 22,
        "ansible_user": "root",
        "ansible_ssh_private_key_file": str(cluster.key),
    }
    assert f"UserKnownHostsFile={cluster.known_hosts}" in ansible["all"]["vars"]["ansible_ssh_common_args"]

    dead = cluster.dead_address()
    assert dead not in {h.address for h in cluster.hosts}
    with pytest.raises(OSError):
        socket.create_connection((dead, 22), timeout=0.5).close()


@needs_netns
def test_hosts_reach_each_other_and_nothing_else(ssh_cluster_factory: ClusterFactory) -> None:
    cluster = ssh_cluster_factory(2)
    h2 = cluster.host("h2")
    banner = cluster.exec("h1", [sys.executable, "-c", READ_SSH_BANNER, h2.address])
    assert banner.returncode == 0, banner.stderr
    assert banner.stdout.startswith("SSH-2.0-OpenSSH")
    if shutil.which("ping"):
        ping = cluster.exec("h1", ["ping", "-c1", "-W1", h2.address])
        assert ping.returncode == 0, ping.stdout + ping.stderr
    # No default route: the only way out of a host is its own /24.
    routes = json.loads(cluster.exec("h1", ["ip", "-j", "-4", "route", "show"], check=True).stdout)
    assert [route["dst"] for route in routes] == [str(cluster.network)]


@needs_netns
@needs_iperf3
def test_slow_link_limits_both_directions_until_cleared(ssh_cluster_factory: ClusterFactory) -> None:
    cluster = ssh_cluster_factory(2)
    server = cluster.spawn("h2", ["iperf3", "-s", "-B", cluster.host("h2").address])
    cluster.slow_link("h2")
    toward_h2 = iperf3_mbit(cluster, "h1", "h2")
    from_h2 = iperf3_mbit(cluster, "h1", "h2", reverse=True)
    cluster.clear_link("h2")
    unlimited = iperf3_mbit(cluster, "h1", "h2")
    assert toward_h2 < SLOW_RATE_MBIT_MAX
    assert from_h2 < SLOW_RATE_MBIT_MAX
    assert unlimited > FAST_RATE_MBIT_MIN
    assert server.poll() is None


@needs_netns
@needs_ssh
def test_stop_kills_sshd_and_its_sessions_and_start_restores_it(ssh_cluster_factory: ClusterFactory) -> None:
    cluster = ssh_cluster_factory(3)
    session = subprocess.Popen(
        cluster.ssh_argv("h2", "echo $$; exec sleep 60"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert session.stdout is not None
    remote_sleep = int(session.stdout.readline())
    cluster.stop("h2")
    _, err = session.communicate(timeout=10)
    assert session.returncode == 255, err
    assert not alive(remote_sleep)
    assert ssh(cluster, "h2", "true").returncode == 255
    assert [ssh(cluster, name, "true").returncode for name in ("h1", "h3")] == [0, 0]
    cluster.start("h2")
    # The same host key again: StrictHostKeyChecking against the cluster's known_hosts accepts it.
    again = ssh(cluster, "h2", "echo $NODEAGENT_TEST_HOST")
    assert (again.returncode, again.stdout.strip()) == (0, "h2"), again.stderr


@needs_ssh
def test_loopback_fallback_serves_each_host_on_its_own_port(
    ssh_cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    cluster = ssh_cluster_factory(2, loopback=True)
    ports = [h.port for h in cluster.hosts]
    assert len(set(ports)) == 2
    assert 22 not in ports
    for host in cluster.hosts:
        assert host.address == "127.0.0.1"
        done = ssh(cluster, host.name, "echo $NODEAGENT_TEST_HOST")
        assert (done.returncode, done.stdout.strip()) == (0, host.name), done.stderr
    entries = [line.split()[0] for line in cluster.known_hosts.read_text().splitlines()]
    assert entries == [f"[127.0.0.1]:{port}" for port in ports]
    native = yaml.safe_load(cluster.write_inventory(tmp_path / "hosts.yml").read_text())
    assert [h["port"] for h in native["hosts"]] == ports
    with pytest.raises(pytest.skip.Exception, match="needs network namespaces"):
        cluster.slow_link("h1")


@needs_netns
@needs_ssh
def test_teardown_removes_everything_even_when_the_test_fails(tmp_path: Path) -> None:
    cluster = SSHCluster(3, tmp_path)
    with pytest.raises(RuntimeError, match="the test failed"), cluster:
        session = subprocess.Popen(
            cluster.ssh_argv("h1", "echo $$; exec sleep 60"),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert session.stdout is not None
        pids = [int(session.stdout.readline()), *sshd_tree(cluster)]
        pids.append(cluster.spawn("h3", ["sleep", "60"]).pid)
        namespaces = {h.namespace for h in cluster.hosts}
        links = {cluster.bridge, *(h.veth for h in cluster.hosts)}
        assert namespaces <= netns_names()
        assert links <= link_names()
        raise RuntimeError("the test failed")
    session.communicate(timeout=10)
    assert not [pid for pid in pids if alive(pid)]
    assert not namespaces & netns_names()
    assert not links & link_names()
    assert processes_mentioning(str(tmp_path)) == []


@needs_netns
def test_sshd_that_fails_to_start_is_reported_with_its_log_and_nothing_is_left(tmp_path: Path) -> None:
    cluster = SSHCluster(2, tmp_path, sshd_config_extra=["NoSuchOption yes"])
    with pytest.raises(RuntimeError, match="NoSuchOption"):
        cluster.build()
    assert not {h.namespace for h in cluster.hosts} & netns_names()
    assert processes_mentioning(str(tmp_path)) == []


@needs_netns
def test_build_removes_leftovers_of_this_process_id_only(tmp_path: Path) -> None:
    # What a crashed earlier process with our pid would have left under the first slot (with a
    # process still inside), and a name that shares its prefix without being one of ours.
    leftover, decoy = f"na{os.getpid()}ah1", f"na{os.getpid()}ah1x"
    squatter = None
    try:
        for name in (leftover, decoy):
            subprocess.run(["ip", "netns", "add", name], check=True)
        squatter = subprocess.Popen(["ip", "netns", "exec", leftover, "sleep", "60"])
        deadline = time.monotonic() + 10
        while str(squatter.pid) not in netns_pids(leftover):
            assert time.monotonic() < deadline, "the squatter never entered its namespace"
            time.sleep(0.01)
        with SSHCluster(1, tmp_path) as cluster:
            assert cluster.hosts[0].namespace == leftover
            squatter.wait(timeout=10)  # killed: `sleep 60` would still run
            assert decoy in netns_names()
    finally:
        if squatter is not None:
            squatter.kill()
            squatter.wait()
        for name in (leftover, decoy):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
