"""`nodeagent check|tune --cluster` against a real cluster: network namespaces each running a real
sshd (tests/support/sshcluster.py), reached only at the addresses of those namespaces.

Hosts get different trees through sshd's SetEnv NODEAGENT_ROOT (the recorder reads the node's /sys
and /proc below it, as in a container that mounts the host's at /host), so drift is real drift.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeagent.cluster import ssh
from tests.support.cli import run_cli
from tests.support.paths import VM
from tests.support.sshcluster import SSHCluster

# One worker builds the module's cluster once (--dist loadgroup keeps the group together).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ssh-cluster")]

NODEAGENT = str(Path(sys.executable).with_name("nodeagent"))
ODD = "h3"  # the host whose tree differs


def make_tree(base: Path, name: str) -> Path:
    """A recorded node's tree for host `name`; the odd one has another kernel and THP mode."""
    root = base / "trees" / name
    root.mkdir(parents=True)
    with tarfile.open(VM) as tf:
        tf.extractall(root, filter="tar")
    (root / "proc/sys/kernel/hostname").write_text(f"{name}\n")
    if name == ODD:
        (root / "proc/sys/kernel/osrelease").write_text("6.1.0-99-odd\n")
        (root / "sys/kernel/mm/transparent_hugepage/enabled").write_text("always madvise [never]\n")
    return root


def tree_env(base: Path) -> Any:
    def env(i: int) -> dict[str, str]:
        return {"NODEAGENT_ROOT": str(make_tree(base, f"h{i}"))}

    return env


@pytest.fixture(scope="module")
def cluster(module_ssh_cluster_factory: Any, tmp_path_factory: pytest.TempPathFactory) -> SSHCluster:
    """Four hosts, h3 the odd one, for the tests that only read them (each writes its inventory
    and known_hosts in its own tmp_path)."""
    c: SSHCluster = module_ssh_cluster_factory(4, env=tree_env(tmp_path_factory.mktemp("trees")))
    return c


def test_check_over_the_fleet_reports_every_host_and_the_drift(cluster: SSHCluster, tmp_path: Path) -> None:
    inv = cluster.write_inventory(tmp_path / "hosts.yml")
    proc = run_cli("check", "--cluster", str(inv), "--format", "json", process=True)
    doc = proc.json()
    assert set(doc["hosts"]) == {"h1", "h2", "h3", "h4"}
    for name, host in doc["hosts"].items():
        assert "error" not in host, host
        assert host["findings"], name
        assert {f["host"] for f in host["findings"]} == {name}
        assert host["checks"]
    drift = {d["key"]: d for d in doc["drift"]}
    assert drift["kernel.release"]["hosts"] == {ODD: "6.1.0-99-odd"}, sorted(drift)
    odd_keys = [k for k, d in drift.items() if set(d["hosts"]) == {ODD}]
    assert any("transparent_hugepage" in k or "thp" in k.lower() for k in odd_keys), odd_keys
    assert not [k for k, d in drift.items() if set(d["hosts"]) - {ODD}], "only the odd host drifts"
    worst = max(
        (h["status"] for h in doc["hosts"].values()), key=["SKIPPED", "OK", "WARN", "UNKNOWN", "FAIL"].index
    )
    assert doc["status"] == worst
    assert proc.returncode == {"OK": 0, "SKIPPED": 0, "WARN": 1, "FAIL": 2, "UNKNOWN": 3}[worst]


def test_the_ansible_inventory_and_the_table(cluster: SSHCluster, tmp_path: Path) -> None:
    inv = cluster.write_ansible_inventory(tmp_path / "inventory.yml")
    text = yaml.safe_load(inv.read_text())
    assert "all" in text
    # An Ansible inventory carries no known_hosts: pass the cluster's through ~/.ssh/known_hosts.
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "known_hosts").write_text(cluster.known_hosts.read_text())
    proc = run_cli(
        "check", "--cluster", str(inv), "--only", "hugepages,kernel", env={"HOME": str(home)}, process=True
    )
    assert proc.returncode in (0, 1, 2), proc.stderr
    out = proc.stdout
    for h in ("h1", "h2", "h3", "h4"):
        assert h in out
    assert "6.1.0-99-odd" in out  # the drift table shows the odd kernel
    assert "4 hosts" in out


def test_an_unknown_host_key_is_refused_unless_accepted(cluster: SSHCluster, tmp_path: Path) -> None:
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    inv = cluster.write_inventory(tmp_path / "hosts.yml", known_hosts=str(empty))
    proc = run_cli("check", "--cluster", str(inv), "--only", "kernel", "--format", "json", process=True)
    doc = proc.json()
    assert proc.returncode == 2
    for host in doc["hosts"].values():
        assert host["status"] == "FAIL"
        assert host["error"]["kind"] == ssh.HOST_KEY
        assert "--accept-new-host-keys" in host["error"]["message"]
    proc = run_cli(
        "check",
        "--cluster",
        str(inv),
        "--only",
        "kernel",
        "--format",
        "json",
        "--accept-new-host-keys",
        process=True,
    )
    doc = proc.json()
    assert all("error" not in h for h in doc["hosts"].values()), doc["hosts"]
    assert len(empty.read_text().splitlines()) == 4  # recorded, as OpenSSH's accept-new does
    # Now one host presents another key than the recorded one: refused even with accept-new.
    lines = empty.read_text().splitlines()
    h1, h2 = cluster.host("h1").address, cluster.host("h2").address
    key_h2 = next(line.split(" ", 1)[1] for line in lines if line.startswith(h2 + " "))
    empty.write_text(
        "\n".join(f"{h1} {key_h2}" if line.startswith(h1 + " ") else line for line in lines) + "\n"
    )
    proc = run_cli(
        "check",
        "--cluster",
        str(inv),
        "--only",
        "kernel",
        "--format",
        "json",
        "--accept-new-host-keys",
        process=True,
    )
    doc = proc.json()
    assert doc["hosts"]["h1"]["error"]["kind"] == ssh.HOST_KEY
    assert "CHANGED" in doc["hosts"]["h1"]["error"]["message"]
    assert "error" not in doc["hosts"]["h2"]


def test_a_hostname_with_shell_syntax_never_runs(cluster: SSHCluster, tmp_path: Path) -> None:
    pwned = tmp_path / "pwned"
    inv = tmp_path / "hosts.yml"
    inv.write_text(f"hosts:\n  - h1\n  - 'node1;touch {pwned}'\n")
    proc = run_cli("check", "--cluster", str(inv), process=True)
    assert proc.returncode == 64
    assert len(proc.stderr.strip().splitlines()) == 1 and "hosts.yml:3" in proc.stderr
    proc = run_cli("check", "--hosts", f"node1;touch {pwned}", process=True)
    assert proc.returncode == 64 and "Traceback" not in proc.stderr
    # A value that reaches the remote shell is quoted: the command is looked up whole, not split.
    good = cluster.write_inventory(tmp_path / "good.yml", nodeagent=f"/nonexistent/nodeagent; touch {pwned}")
    proc = run_cli(
        "check",
        "--cluster",
        str(good),
        "--remote-agent",
        "--format",
        "json",
        "--only",
        "kernel",
        process=True,
    )
    doc = proc.json()
    for host in doc["hosts"].values():
        assert host["error"]["kind"] == ssh.MISSING, host
    assert not pwned.exists()


def test_a_dead_host_and_a_wrong_key_fail_alone(cluster: SSHCluster, tmp_path: Path) -> None:
    inv = cluster.write_inventory(tmp_path / "hosts.yml", connect_timeout=1)
    doc = yaml.safe_load(inv.read_text())
    doc["hosts"].append({"name": "dead", "host": cluster.dead_address()})
    other_key = tmp_path / "other_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True)
    doc["hosts"].append(
        {"name": "badkey", "host": cluster.host("h2").address, "identity_file": str(other_key)}
    )
    inv.write_text(yaml.safe_dump(doc))
    proc = run_cli("check", "--cluster", str(inv), "--only", "kernel", "--format", "json", process=True)
    out = proc.json()
    assert out["hosts"]["dead"]["error"]["kind"] == ssh.UNREACHABLE
    assert out["hosts"]["badkey"]["error"]["kind"] == ssh.AUTH
    assert all("error" not in out["hosts"][h] for h in ("h1", "h2", "h3", "h4"))
    assert out["summary"]["unreachable"] == 2
    assert proc.returncode == 2  # unreachable counts as FAIL
    assert "Traceback" not in proc.stderr and "paramiko" not in proc.stderr, proc.stderr


@contextlib.contextmanager
def not_sshd() -> Iterator[tuple[int, int]]:
    """Two loopback ports that accept TCP but speak no SSH: one closes at once, one answers like a
    web server. paramiko's transport thread fails reading the banner there, and logs a traceback."""
    servers = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    replies = [b"", b"HTTP/1.0 400 Bad Request\r\n\r\n"]
    stop = threading.Event()

    def serve(server: socket.socket, reply: bytes) -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(reply)

    threads = [
        threading.Thread(target=serve, args=pair, daemon=True) for pair in zip(servers, replies, strict=True)
    ]
    for t in threads:
        t.start()
    try:
        yield servers[0].getsockname()[1], servers[1].getsockname()[1]
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        for s in servers:
            s.close()


def test_unreachable_hosts_are_one_line_each_and_no_traceback(tmp_path: Path) -> None:
    """No cluster needed: a port nothing listens on, and two that are not sshd. stderr holds the
    progress lines alone (no paramiko's logged tracebacks, no "Exception in thread"), each host's
    error is one line."""
    known = tmp_path / "known_hosts"
    known.write_text("")
    with not_sshd() as (closes, web):
        hosts = [
            {"name": "refused", "host": "127.0.0.1", "port": 1},
            {"name": "closes", "host": "127.0.0.1", "port": closes},
            {"name": "web", "host": "127.0.0.1", "port": web},
        ]
        inv = tmp_path / "hosts.yml"
        defaults = {"known_hosts": str(known), "connect_timeout": 2, "command_timeout": 5}
        inv.write_text(yaml.safe_dump({"defaults": defaults, "hosts": hosts}))
        as_json = run_cli(
            "check", "--cluster", str(inv), "--only", "kernel", "--format", "json", process=True
        )
        table = run_cli("check", "--cluster", str(inv), "--only", "kernel", process=True)
    for proc in (as_json, table):
        assert proc.returncode == 2
        assert all(line.startswith("fleet: ") for line in proc.stderr.splitlines()), proc.stderr
        assert "fleet: 3/3 hosts done, 3 errors" in proc.stderr
    doc = as_json.json()
    for name in ("refused", "closes", "web"):
        error = doc["hosts"][name]["error"]
        assert error["kind"] == ssh.UNREACHABLE, error
        assert "\n" not in error["message"] and "Traceback" not in error["message"]
    assert "connection refused" in doc["hosts"]["refused"]["error"]["message"].lower()
    assert "no SSH greeting" in doc["hosts"]["web"]["error"]["message"]
    for name in ("refused", "closes", "web"):
        assert name in table.stdout
    assert table.stdout.count("unreachable") == 3


def test_a_host_whose_sshd_stops_mid_run_leaves_the_others_complete(
    ssh_cluster_factory: Any, tmp_path: Path
) -> None:
    """h2's interpreter waits for a file before recording; its sshd is stopped while it waits (on
    a cluster of its own)."""
    cluster: SSHCluster = ssh_cluster_factory(4, env=tree_env(tmp_path))
    gate = tmp_path / "h2-started"
    slow = tmp_path / "slow-python"
    slow.write_text(f'#!/bin/sh\ntouch {gate}\nsleep 30\nexec python3 "$@"\n')
    slow.chmod(0o755)
    inv = cluster.write_inventory(tmp_path / "hosts.yml")
    doc = yaml.safe_load(inv.read_text())
    for h in doc["hosts"]:
        if h["name"] == "h2":
            h["python"] = str(slow)
    inv.write_text(yaml.safe_dump(doc))

    def stop_when_started() -> None:
        deadline = time.monotonic() + 60
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        cluster.stop("h2")

    stopper = threading.Thread(target=stop_when_started)
    stopper.start()
    proc = run_cli("check", "--cluster", str(inv), "--format", "json", process=True)
    stopper.join()
    doc = proc.json()
    assert doc["hosts"]["h2"]["error"]["kind"] in (ssh.UNREACHABLE, ssh.REMOTE), doc["hosts"]["h2"]
    for name in ("h1", "h3", "h4"):
        host = doc["hosts"][name]
        assert "error" not in host and host["findings"], name
        assert {c["id"] for c in host["checks"]} >= {"kernel", "hugepages", "numa"}
    assert proc.returncode == 2


def test_remote_agent_and_tune_on_the_fleet(ssh_cluster_factory: Any, tmp_path: Path) -> None:
    # No NODEAGENT_ROOT trees (each host's nodeagent would read its tree, as --root): every agent
    # reads this machine.
    cluster: SSHCluster = ssh_cluster_factory(4)
    inv = cluster.write_inventory(tmp_path / "hosts.yml", nodeagent=NODEAGENT)
    proc = run_cli("check", "--cluster", str(inv), "--remote-agent", "--format", "json", process=True)
    doc = proc.json()
    for name, host in doc["hosts"].items():
        assert "error" not in host, host
        assert host["findings"] and {f["host"] for f in host["findings"]} == {name}
    # The agent on each host reads the same live machine: no drift.
    assert doc["drift"] == [] and doc["outliers"] == []
    proc = run_cli("tune", "--cluster", str(inv), "--only", "thp", "--format", "json", process=True)
    doc = proc.json()
    for host in doc["hosts"].values():
        assert host["exit_code"] == 0 and host["applied"] is False
        assert [p["tuner"] for p in host["plans"]] == ["thp"]
        assert host["story"][1].startswith("dry run: nothing was changed")
    # The table shows each host's planned changes (as Ansible's --diff): the same live machine
    # behind every host here, so one group of four.
    changes = doc["hosts"]["h1"]["plans"][0]["changes"]
    table = run_cli("tune", "--cluster", str(inv), "--only", "thp", process=True)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    head = lines.index("planned changes per host")
    group = "h1, h2, h3, h4 (4 hosts): " + (f"{len(changes)} change(s)" if changes else "no change")
    assert lines[head + 1] == group
    for c in changes:
        assert f"  thp [runtime] {c['target']}: {c['before']} -> {c['after']}" in lines


def test_ssh_config_and_a_hostlist(cluster: SSHCluster, tmp_path: Path) -> None:
    """`--hosts` names resolved by ~/.ssh/config (HostName, User, IdentityFile, UserKnownHostsFile)."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    lines = []
    for h in cluster.hosts[:2]:
        lines += [
            f"Host node{h.name[1:]}",
            f"  HostName {h.address}",
            f"  Port {h.port}",
            f"  User {h.user}",
            f"  IdentityFile {cluster.key}",
            f"  UserKnownHostsFile {cluster.known_hosts}",
        ]
    (home / ".ssh" / "config").write_text("\n".join(lines) + "\n")
    proc = run_cli(
        "check",
        "--hosts",
        "node[1-2]",
        "--only",
        "kernel",
        "--format",
        "json",
        env={"HOME": str(home)},
        process=True,
    )
    doc = proc.json()
    assert set(doc["hosts"]) == {"node1", "node2"}
    assert all("error" not in h for h in doc["hosts"].values()), doc["hosts"]


def test_bandwidth_names_the_host_with_the_slow_link(ssh_cluster_factory: Any, tmp_path: Path) -> None:
    cluster: SSHCluster = ssh_cluster_factory(5)
    cluster.slow_link("h3", "20mbit")
    inv = cluster.write_inventory(tmp_path / "hosts.yml")
    # The threshold makes the verdict independent of how fast the veths are under load (the
    # median/MAD comparison alone is tested on fixed figures in test_cluster_bandwidth.py).
    proc = run_cli(
        "check",
        "--cluster",
        str(inv),
        "--only",
        "kernel",
        "--bandwidth",
        "--min-gbits",
        "0.1",
        "--format",
        "json",
        process=True,
    )
    doc = proc.json()
    links = {f"{link['src']} -> {link['dst']}": link for link in doc["bandwidth"]["links"]}
    assert set(links) == {"h1 -> h2", "h2 -> h3", "h3 -> h4", "h4 -> h5", "h5 -> h1"}
    assert links["h2 -> h3"]["gbits_per_s"] < 0.05 and links["h3 -> h4"]["gbits_per_s"] < 0.05
    # Only the threshold's FAIL is independent of load: the fleet rules (a link under half the
    # median, a latency outlier) compare links measured at once on this busy machine, and may warn
    # about another link besides (seen once, in a fresh-clone CI run).
    failed = [f for f in doc["bandwidth"]["findings"] if f["status"] == "FAIL"]
    assert failed and all("h3" in f["subject"] + f["summary"] for f in failed), doc["bandwidth"]["findings"]
    assert proc.returncode == 2  # below the minimum: FAIL


@pytest.mark.slow
@pytest.mark.skipif(
    not Path(sys.executable).with_name("nodeagent").exists()
    or __import__("importlib.util").util.find_spec("tensorflow") is None,
    reason="needs nodeagent with its tf extra in this environment (pip install 'nodeagent[tf]')",
)
def test_bench_on_the_fleet_gathers_each_hosts_benchmark(ssh_cluster_factory: Any, tmp_path: Path) -> None:
    cluster: SSHCluster = ssh_cluster_factory(1)
    inv = cluster.write_inventory(tmp_path / "hosts.yml", nodeagent=NODEAGENT, command_timeout=600)
    args = ("--quick", "--repeats", "1", "--processes", "1", "--format", "json")
    proc = run_cli("bench", "--cluster", str(inv), *args, timeout=900, process=True)
    doc = proc.json()
    host = doc["hosts"]["h1"]
    assert "error" not in host, host
    assert host["exit_code"] == 0 and host["status"] == "OK"
    assert host["configs"]["naive"]["images_per_s"]["median"] > 0
    assert proc.returncode == 0
