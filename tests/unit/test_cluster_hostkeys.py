"""Host keys: each known_hosts file is parsed once per run, and every connection gets the keys of its
own host as paramiko would have read them from the files (the first file wins per key type; a port
other than 22 is looked up as "[host]:port"). The sshd-backed tests in test_cluster.py prove the
refusals (unknown, changed) end to end."""

from __future__ import annotations

from pathlib import Path

import paramiko
import pytest
from fabric import Config, Connection

from nodeagent.cluster import ssh, ssh_policies


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
