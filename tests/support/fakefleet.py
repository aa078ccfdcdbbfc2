"""A fleet of recorded machines behind a fake SSH transport: each host's agentless pull is answered
with its recording (taken by the real recorder from a tree under tests/fixtures), so everything but
the socket runs as in production. For tests that compare what the faces produce on one fleet."""

from __future__ import annotations

import marshal
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.support import corpus
from tests.support.helpers import SYSFS_FIXTURES


def recorded_root(name: str, trees: Path) -> str:
    """The root of recording `name`: an hwloc archive as it is, a corpus recording built into `trees`."""
    archive = SYSFS_FIXTURES / f"{name}.tar.bz2"
    if archive.is_file():
        return str(archive)
    dest = trees / name
    if not dest.exists():
        corpus.build_tree(corpus.load(name), dest)
    return str(dest)


def install(
    monkeypatch: pytest.MonkeyPatch, machines: Mapping[str, str], trees: Path, inventory: Path
) -> Path:
    """Write an inventory of `machines` (host name -> recording) to `inventory` and answer each
    host's pull with its recording."""
    from nodeagent.cluster import ssh

    class Conn:
        def __init__(self, name: str) -> None:
            self.name = name

        def close(self) -> None:
            return None

    def connection(spec: Any, keys: Any) -> Conn:
        return Conn(spec.name)

    def open_connection(*args: Any) -> None:
        return None

    monkeypatch.setattr(ssh, "connection", connection)
    monkeypatch.setattr(ssh, "open_connection", open_connection)
    monkeypatch.setattr(ssh, "run", _answer(lambda name: recorded_root(machines[name], trees)))
    inventory.write_text(f"hosts: [{', '.join(machines)}]\n")
    return inventory


def _answer(root_of: Callable[[str], str]) -> Callable[..., Any]:
    from nodeagent.cluster import ssh
    from nodeagent.host import open_host
    from nodeagent.host.local import TreeHost
    from nodeagent.host.recorder import encode, metadata, record

    def run(conn: Any, command: str, timeout: float, stdin: bytes | None = None) -> ssh.Output:
        spec = marshal.loads(zlib.decompress(stdin or b""))["spec"]
        patterns, commands = spec["patterns"], [tuple(c) for c in spec["commands"]]
        with open_host(root_of(conn.name)) as host:
            assert isinstance(host, TreeHost)
            rec = record(host, patterns, commands)
            meta = metadata(host, patterns, commands, "")
        return ssh.Output(encode(rec, meta), b"", 0)

    return run
