"""Host keys: each known_hosts file is parsed once per run, and every connection gets the keys of its
own host as paramiko would have read them from the files (the first file wins per key type; a port
other than 22 is looked up as "[host]:port"). The sshd-backed tests in test_cluster.py prove the
refusals (unknown, changed) end to end. --accept-new-host-keys adds a new host's key to the file
by the safe writer: a line at the end, or nothing and the host refused."""

from __future__ import annotations

from pathlib import Path

import paramiko
import pytest
from fabric import Config, Connection

from nodeagent.cluster import ssh, ssh_policies
from nodeagent.cluster.inventory.schema import HostSpec


def line(name: str, key: paramiko.PKey) -> str:
    return f"{name} {key.get_name()} {key.get_base64()}\n"


@pytest.fixture(scope="module")
def keys() -> dict[str, paramiko.PKey]:
    return {
        "p256": paramiko.ECDSAKey.generate(bits=256),
        "p256-other": paramiko.ECDSAKey.generate(bits=256),
        "p384": paramiko.ECDSAKey.generate(bits=384),
    }


def connection(host: str, port: int = 22) -> Connection:
    return Connection(host, port=port, config=Config())  # not opened: install() only sets up the client


def test_each_host_gets_its_keys_first_file_first(tmp_path: Path, keys: dict[str, paramiko.PKey]) -> None:
    first, second = tmp_path / "inventory_known_hosts", tmp_path / "system_known_hosts"
    first.write_text(line("10.9.0.1", keys["p256"]) + line("[10.9.0.2]:2222", keys["p384"]))
    # The second file has another key of a type the first already gave (ignored), and a new type.
    second.write_text(line("10.9.0.1", keys["p256-other"]) + line("10.9.0.1", keys["p384"]))
    host_keys = ssh.HostKeys((first, second))

    one = connection("10.9.0.1")
    host_keys.install(one)
    known = one.client.get_host_keys().lookup("10.9.0.1")
    assert known is not None
    assert dict(known) == {"ecdsa-sha2-nistp256": keys["p256"], "ecdsa-sha2-nistp384": keys["p384"]}

    two = connection("10.9.0.2", 2222)
    host_keys.install(two)
    assert dict(two.client.get_host_keys().lookup("[10.9.0.2]:2222") or {}) == {
        "ecdsa-sha2-nistp384": keys["p384"]
    }
    assert two.client.get_host_keys().lookup("10.9.0.2") is None  # only its own name and port
    assert isinstance(two.client._policy, ssh_policies.RejectUnknown)  # what paramiko will ask


def test_a_file_is_parsed_once_for_the_whole_fleet(
    tmp_path: Path, keys: dict[str, paramiko.PKey], monkeypatch: pytest.MonkeyPatch
) -> None:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("".join(line(f"10.9.1.{i}", keys["p256"]) for i in range(1, 51)))
    loads: list[str] = []
    real_load = paramiko.HostKeys.load

    def counting_load(self: paramiko.HostKeys, filename: str) -> None:
        loads.append(filename)
        real_load(self, filename)

    monkeypatch.setattr(paramiko.HostKeys, "load", counting_load)
    host_keys = ssh.HostKeys((known_hosts, tmp_path / "absent"), accept_new=True)
    for i in range(1, 51):
        conn = connection(f"10.9.1.{i}")
        host_keys.install(conn)
        assert conn.client.get_host_keys().lookup(f"10.9.1.{i}") is not None
    assert loads == [str(known_hosts)]
    assert isinstance(conn.client._policy, ssh_policies.AcceptNew)


def test_a_new_key_is_added_at_the_end_of_known_hosts(tmp_path: Path, keys: dict[str, paramiko.PKey]) -> None:
    known_hosts = tmp_path / "ssh" / "known_hosts"
    policy = ssh_policies.AcceptNew(known_hosts)
    client = paramiko.SSHClient()
    policy.missing_host_key(client, "10.9.2.1", keys["p256"])
    assert (known_hosts.parent.stat().st_mode & 0o777, known_hosts.stat().st_mode & 0o777) == (0o700, 0o600)
    with known_hosts.open("a") as other:  # ssh adding its own line meanwhile
        other.write(line("10.9.2.9", keys["p384"]))
    policy.missing_host_key(client, "[10.9.2.2]:2222", keys["p256-other"])
    assert known_hosts.read_text() == (
        line("10.9.2.1", keys["p256"])
        + line("10.9.2.9", keys["p384"])
        + line("[10.9.2.2]:2222", keys["p256-other"])
    )
    assert client.get_host_keys().lookup("10.9.2.1") is not None


def test_a_linked_known_hosts_is_not_followed_and_the_host_is_refused(
    tmp_path: Path, keys: dict[str, paramiko.PKey]
) -> None:
    real = tmp_path / "managed_known_hosts"
    real.write_text(line("10.9.3.1", keys["p384"]))
    known_hosts = tmp_path / "known_hosts"
    known_hosts.symlink_to(real)
    client = paramiko.SSHClient()
    with pytest.raises(ssh_policies.HostKeyNotRecorded) as e:
        ssh_policies.AcceptNew(known_hosts).missing_host_key(client, "10.9.3.2", keys["p256"])
    assert real.read_text() == line("10.9.3.1", keys["p384"])
    assert client.get_host_keys().lookup("10.9.3.2") is None  # not trusted unrecorded
    error = ssh.classify(e.value, HostSpec(name="n2", address="10.9.3.2"), ssh.HostKeys((known_hosts,)))
    assert error.kind == ssh.HOST_KEY
    assert f"{known_hosts}: is a symbolic link (to {real})" in error.message
    assert "\n" not in error.message
