"""Fleet mode on one machine: inventory hosts with `connection: local` (Ansible's
`ansible_connection: local`) run their commands in a shell here, with no sshd and no SSH at all.

The fleet runs are `nodeagent` started as a subprocess. Where a test says no SSH was used, that
process runs with a sitecustomize (on PYTHONPATH, inherited by the local hosts' own nodeagent too)
that refuses every TCP connection and writes down where it was going: a run that tried SSH would
leave a line there and lose that host (test_the_guard_sees_an_ssh_attempt shows it does). Nothing
but loopback is ever contacted: the one SSH host of these tests is in TEST-NET-1 (RFC 5737), which
no real machine answers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeagent.api.report import HostError
from nodeagent.cluster import shell, ssh
from nodeagent.cluster.inventory.load import HostSpec, Inventory, load_inventory
from nodeagent.cluster.runner import HostOutcome, run_fleet
from nodeagent.cluster.shell import LocalShell
from tests.support.cli import run_cli
from tests.support.paths import REPO

NODEAGENT = str(Path(sys.executable).with_name("nodeagent"))
TEST_NET = "192.0.2.1"  # RFC 5737 TEST-NET-1: documentation only, never routed to a real host
SWAPPINESS = Path("/proc/sys/vm/swappiness")

GUARD = """
import os
import socket

_LOG = os.environ["NODEAGENT_TEST_CONNECTIONS"]


def _refuse(sock, address):
    with open(_LOG, "a") as log:
        log.write(repr(address) + "\\n")
    raise PermissionError(1, "no network connection in this test")


def _guarded(original):
    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            return _refuse(self, address)
        return original(self, address)

    return connect


socket.socket.connect = _guarded(socket.socket.connect)
socket.socket.connect_ex = _guarded(socket.socket.connect_ex)
"""


def empty_home(tmp_path: Path) -> Path:
    """A HOME whose ~/.ssh is empty: no SSH configuration of this machine's user applies."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "known_hosts").write_text("")
    return home


def offline_env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """nodeagent's environment with the TCP guard, and the file where it notes each attempt."""
    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(GUARD)
    log = tmp_path / "connections.log"
    env = dict(os.environ, HOME=str(empty_home(tmp_path)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(guard), env.get("PYTHONPATH")]))
    env["NODEAGENT_TEST_CONNECTIONS"] = str(log)
    return env, log


def attempts(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def evidence(host: dict[str, Any], key: str) -> list[Any]:
    return [f["evidence"][key] for f in host["findings"] if key in (f.get("evidence") or {})]


def assert_read_here(doc: dict[str, Any], names: set[str]) -> None:
    """Every host of `names` gave its report, read from this machine (its swappiness, as the test
    reads it), with its findings under its own inventory name."""
    assert set(doc["hosts"]) == names
    swappiness = SWAPPINESS.read_text().strip()
    for name, host in doc["hosts"].items():
        assert "error" not in host, host
        assert host["checks"] and host["findings"], name
        assert {f["host"] for f in host["findings"]} == {name}
        assert evidence(host, str(SWAPPINESS)) == [swappiness], name


# --- whole runs ----------------------------------------------------------------------------------


def test_two_local_hosts_of_an_ansible_inventory_without_ssh(tmp_path: Path) -> None:
    inv = write(
        tmp_path / "hosts.yml",
        """
        all:
          hosts:
            local1: {ansible_connection: local}
            local2: {ansible_connection: local}
        """,
    )
    env, log = offline_env(tmp_path)
    proc = run_cli(
        "check", "--cluster", str(inv), "--only", "kernel", "--format", "json", "-q", env=env, process=True
    )
    assert proc.returncode in (0, 1, 2, 3), proc.stderr
    assert proc.stderr == ""
    doc = proc.json()
    assert_read_here(doc, {"local1", "local2"})
    assert doc["summary"]["hosts"] == 2
    assert attempts(log) == []


def test_the_native_form_with_connection_local(tmp_path: Path) -> None:
    inv = write(
        tmp_path / "hosts.yml",
        """
        defaults: {connection: local, command_timeout: 60}
        hosts: [local1, {name: local2}]
        """,
    )
    env, log = offline_env(tmp_path)
    proc = run_cli(
        "check", "--cluster", str(inv), "--only", "kernel", "--format", "json", env=env, process=True
    )
    assert_read_here(proc.json(), {"local1", "local2"})
    assert attempts(log) == []


def test_remote_agent_runs_the_local_nodeagent(tmp_path: Path) -> None:
    inv = write(
        tmp_path / "hosts.yml",
        f"""
        defaults: {{connection: local, nodeagent: {NODEAGENT}}}
        hosts: [local1, local2, {{name: bare, nodeagent: {tmp_path / "not-installed" / "nodeagent"}}}]
        """,
    )
    env, log = offline_env(tmp_path)
    proc = run_cli(
        "check",
        "--cluster",
        str(inv),
        "--remote-agent",
        "--only",
        "kernel",
        "--format",
        "json",
        env=env,
        process=True,
    )
    doc = proc.json()
    bare = doc["hosts"].pop("bare")
    assert_read_here(doc, {"local1", "local2"})
    for host in doc["hosts"].values():
        assert host["hostname"] == os.uname().nodename  # the agent names the machine it ran on
    # A local host without nodeagent fails as an SSH host without it does.
    assert bare["error"]["kind"] == ssh.MISSING, bare
    assert bare["error"]["message"].startswith(
        f"`{tmp_path / 'not-installed' / 'nodeagent'}` is not installed"
    )
    assert proc.returncode == 2  # a host without a result counts as FAIL
    assert attempts(log) == []


def test_an_unreachable_ssh_host_leaves_the_local_one_alone(tmp_path: Path) -> None:
    inv = write(
        tmp_path / "hosts.yml",
        f"""
        all:
          vars: {{ansible_ssh_timeout: 1}}
          hosts:
            local1: {{ansible_connection: local}}
            remote1: {{ansible_host: {TEST_NET}}}
        """,
    )
    env = dict(os.environ, HOME=str(empty_home(tmp_path)))
    proc = run_cli(
        "check", "--cluster", str(inv), "--only", "kernel", "--format", "json", "-q", env=env, process=True
    )
    doc = proc.json()
    remote = doc["hosts"].pop("remote1")
    assert remote["error"]["kind"] == ssh.UNREACHABLE, remote
    assert TEST_NET in remote["error"]["message"]
    assert_read_here(doc, {"local1"})
    assert proc.returncode == 2
    assert proc.stderr == ""


def test_the_guard_sees_an_ssh_attempt(tmp_path: Path) -> None:
    """The TCP guard of the tests above, with an SSH host: the attempt is written down (and the
    host fails before any packet leaves), so an empty log there means SSH was not tried."""
    inv = write(
        tmp_path / "hosts.yml",
        f"""
        all:
          hosts:
            local1: {{ansible_connection: local}}
            remote1: {{ansible_host: {TEST_NET}, ansible_port: 2222}}
        """,
    )
    env, log = offline_env(tmp_path)
    proc = run_cli(
        "check", "--cluster", str(inv), "--only", "kernel", "--format", "json", env=env, process=True
    )
    doc = proc.json()
    assert doc["hosts"]["remote1"]["error"]["kind"] == ssh.UNREACHABLE
    assert "error" not in doc["hosts"]["local1"]
    assert attempts(log) == [repr((TEST_NET, 2222))]


@pytest.mark.parametrize(("connection", "line"), [("docker", 3), ("community.general.lxd", 3), ("winrm", 3)])
def test_an_unsupported_ansible_connection_is_one_line(tmp_path: Path, connection: str, line: int) -> None:
    inv = write(
        tmp_path / "hosts.yml",
        f"""
        all:
          hosts:
            c1: {{ansible_connection: {connection}}}
            local1: {{ansible_connection: local}}
        """,
    )
    proc = run_cli("check", "--cluster", str(inv), process=True)
    assert proc.returncode == 64
    assert proc.stdout == ""
    assert proc.stderr == (
        f"nodeagent: error: {inv}:{line}: all.hosts.c1.ansible_connection: connection {connection!r} is not "
        "supported; nodeagent reaches a host over SSH (ssh, paramiko, smart) or runs on this machine "
        "(local): use one of those, or take the host out of this inventory\n"
    )


def test_bandwidth_between_local_hosts_is_refused(tmp_path: Path) -> None:
    inv = write(tmp_path / "hosts.yml", "hosts: [{name: local1, connection: local}, local2]\n")
    proc = run_cli("check", "--cluster", str(inv), "--bandwidth", process=True)
    assert proc.returncode == 64
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "--bandwidth measures the network between hosts over SSH, and local1 run on this machine" in (
        proc.stderr
    )


# --- stopping a local host's command -------------------------------------------------------------

# Stands in for nodeagent on a local host: writes its process group's id, starts a child that
# ignores SIGTERM (only SIGKILL ends it), and never answers. On SIGTERM it leaves a mark, as
# nodeagent cleans up on SIGTERM, then exits.
STUCK_AGENT = """#!/bin/sh
set -- $(cat /proc/$$/stat)
echo "$5" > "{group}"
trap 'echo cleaned > "{mark}"; exit 143' TERM
(trap '' TERM; exec sleep 300) >/dev/null 2>&1 &
echo started >> "{group}.started"
while :; do sleep 1; done
"""


def stuck_agent(tmp_path: Path) -> tuple[Path, Path, Path]:
    group, mark = tmp_path / "group", tmp_path / "cleaned"
    agent = tmp_path / "stuck-agent"
    agent.write_text(STUCK_AGENT.format(group=group, mark=mark))
    agent.chmod(0o755)
    return agent, group, mark


def live_members(pgid: int) -> list[int]:
    """The processes of group `pgid` that have not exited (a zombie has: it waits only to be
    reaped, which in a container whose init reaps nothing may never happen)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # it exited while listed
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state not in ("Z", "X"):
            found.append(int(stat.parent.name))
    return found


def test_a_local_command_past_its_time_limit_is_its_hosts_error_and_its_group_is_gone(
    tmp_path: Path,
) -> None:
    agent, group, mark = stuck_agent(tmp_path)
    inv = write(
        tmp_path / "hosts.yml",
        f"""
        defaults: {{connection: local}}
        hosts:
          - {{name: stuck, nodeagent: {agent}, command_timeout: 2}}
          - {{name: fine, nodeagent: {NODEAGENT}}}
        """,
    )
    proc = run_cli("tune", "--cluster", str(inv), "--only", "thp", "--format", "json", process=True)
    doc = proc.json()
    assert doc["hosts"]["stuck"]["error"] == {
        "kind": ssh.TIMEOUT,
        "message": "the command did not finish within 2s",
    }
    assert "error" not in doc["hosts"]["fine"] and doc["hosts"]["fine"]["exit_code"] == 0
    assert (tmp_path / "group.started").read_text() == "started\n"  # its child did start
    assert mark.read_text() == "cleaned\n"  # SIGTERM first: its clean-up ran
    assert live_members(int(group.read_text())) == []


def test_an_interrupted_fleet_run_stops_its_local_commands(tmp_path: Path) -> None:
    agent, group, mark = stuck_agent(tmp_path)
    inv = write(
        tmp_path / "hosts.yml",
        f"""
        hosts: [{{name: stuck, connection: local, nodeagent: {agent}}}]
        """,
    )
    with subprocess.Popen(
        [NODEAGENT, "tune", "--cluster", str(inv), "--format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as run:
        deadline = time.monotonic() + 60
        while not (tmp_path / "group.started").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "group.started").exists(), "the local host's command never started"
        run.send_signal(signal.SIGTERM)
        _, stderr = run.communicate(timeout=60)
    assert run.returncode == 143, stderr
    assert stderr.strip().splitlines()[-1] == "nodeagent: interrupted by SIGTERM"
    assert "Traceback" not in stderr
    assert mark.read_text() == "cleaned\n"
    assert live_members(int(group.read_text())) == []


# --- the runner and the local shell, in this process ---------------------------------------------


def local_inventory(*names: str) -> Inventory:
    return Inventory(tuple(HostSpec(name, name, connection="local") for name in names), "test")


def test_local_hosts_consult_no_host_keys_and_run_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_ssh(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a local host used SSH")

    monkeypatch.setattr(ssh.HostKeys, "default", no_ssh)
    monkeypatch.setattr(ssh, "connection", no_ssh)

    def job(spec: HostSpec, host: Any) -> HostOutcome:
        out = host.run('printf "%s %s" "$0" "$PPID"', 10)
        return HostOutcome(spec.name, spec.address, {"out": out.stdout.decode(), "exited": out.exited})

    # Worker processes asked for: a fleet with local hosts stays in this one.
    outcomes = run_fleet(local_inventory("local1", "local2"), job, processes=2)
    for outcome in outcomes.values():
        assert outcome.ok, outcome.error
        assert outcome.doc == {"out": f"{shell.SHELL} {os.getpid()}", "exited": 0}


def test_the_local_shell_feeds_input_larger_than_a_pipe_while_reading_both_outputs() -> None:
    # Many times a pipe's 64 KiB, within the 1 MiB that stderr may carry: written while the command
    # fills both its outputs' pipes.
    data = os.urandom(768 << 10)
    out = LocalShell("local1").run("tee /dev/stderr", 30, stdin=data)
    assert (out.stdout, out.stderr, out.exited) == (data, data, 0)


def test_the_local_shell_gives_exit_codes_and_missing_commands_as_a_shell_does() -> None:
    local = LocalShell("local1")
    assert local.run("exit 3", 10).exited == 3
    missing = local.run("/nonexistent/nodeagent --version", 10)
    assert missing.exited == 127 and b"/nonexistent/nodeagent" in missing.stderr
    assert local.run("cat", 10).stdout == b""  # no input given: end of file at once


@pytest.mark.parametrize(
    ("command", "stream", "variable"),
    [("yes", "stdout", "NODEAGENT_MAX_STDOUT_MIB"), ("yes >&2", "stderr", "NODEAGENT_MAX_STDERR_MIB")],
)
def test_the_local_shell_caps_output_as_over_ssh(
    monkeypatch: pytest.MonkeyPatch, command: str, stream: str, variable: str
) -> None:
    monkeypatch.setenv(variable, "1")
    with pytest.raises(HostError) as caught:
        LocalShell("local1").run(command, 60)
    assert caught.value.kind == ssh.REMOTE
    assert caught.value.message == ssh.too_much(stream, variable, 1 << 20).message
    assert caught.value.message.startswith(f"{stream} output larger than 1 MiB (limit {variable})")


def test_a_closed_local_shell_stops_its_command_and_refuses_more(tmp_path: Path) -> None:
    import threading

    local = LocalShell("local1")
    started = tmp_path / "started"
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(local.run(f"touch {started}; exec sleep 300", 120))
        except HostError as e:
            result.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    local.close()
    thread.join(30)
    assert not thread.is_alive()
    assert result[0].exited == -signal.SIGTERM  # sleep ended by the SIGTERM
    with pytest.raises(HostError) as caught:
        local.run("true", 10)
    assert caught.value.kind == ssh.CONTROLLER


def test_the_docs_example_is_two_local_hosts(tmp_path: Path) -> None:
    """The first example of docs/fleets.md, as written there: the inventory its first command block
    writes (`cat > hosts.yml <<'EOF'`)."""
    page = (REPO / "docs" / "fleets.md").read_text()
    section = page.split("## Fleet mode on one machine", 1)[1]
    example = section.split("cat > hosts.yml <<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0] + "\n"
    assert yaml.safe_load(example) == {
        "all": {
            "hosts": {"local1": {"ansible_connection": "local"}, "local2": {"ansible_connection": "local"}}
        }
    }
    inv = tmp_path / "hosts.yml"
    inv.write_text(example)
    assert [(h.name, h.connection) for h in load_inventory(inv).hosts] == [
        ("local1", "local"),
        ("local2", "local"),
    ]
