"""Golden documents: the JSON of `check`, `facts`, `tune` (the plan) and `check --cluster` on
recorded machines must stay byte-for-byte what it was when the goldens were written, apart from the
fields that change from run to run (durations, times, the tool's version). A refactoring that
changes a verdict, a key or an order fails here.

The machines are real recordings (tests/fixtures/hwloc, tests/fixtures/corpus); the fleet is four of
them behind a fake SSH transport that answers the agentless pull with each machine's recording, so
everything but the socket runs as in production.

Regenerate (only when a change of output is intended, and say why in the commit):
    NODEAGENT_WRITE_GOLDEN=1 pytest tests/test_golden.py
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests import corpus
from tests.helpers import SYSFS_FIXTURES

GOLDEN = Path(__file__).parent / "golden"
WRITE = os.environ.get("NODEAGENT_WRITE_GOLDEN") == "1"

HWLOC = ["40intel64-2g2n4c+pcilocality", "16em64t-4s2c2t-offlines", "2arm-2c", "nvidiagpunumanodes"]
CORPUS = [
    "ib-gpud-h100-roce-cx7-400-all-active",
    "nvlink-azhpc-diagnostics-73-v100-two-links-down",
    "smi-openpai-v100-sxm3-dbe-retired-pages",
    "smix-pai-azure-4x-tesla-k80",
    "sysfs-ghw-xeon-l5640-2socket",
    "topo-ml-engineering-h100-8gpu-nv18",
    "topo-oyanghd-dgx-a100-8gpu-nic-legend",
    "vm-virt-what-aws-ec2-c5-large",
]
FLEET = {
    "node01": "40intel64-2g2n4c+pcilocality",
    "node02": "40intel64-2g2n4c+pcilocality",
    "node03": "16em64t-4s2c2t-offlines",
    "node04": "sysfs-ghw-xeon-l5640-2socket",
}
# What differs between two runs on the same input.
VOLATILE = {
    "duration_s",
    "started",
    "finished",
    "elapsed_s",
    "generated_at",
    "nodeagent_version",
    "version",
    "time",
    "timestamp",
}


def _stable(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: ("<volatile>" if k in VOLATILE else _stable(v)) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_stable(v) for v in doc]
    return doc


def _root(name: str, tmp: Path) -> str:
    if name in HWLOC:
        return str(SYSFS_FIXTURES / f"{name}.tar.bz2")
    dest = tmp / name
    if not dest.exists():
        corpus.build_tree(corpus.load(name), dest)
    return str(dest)


def _run(argv: list[str]) -> Any:
    from nodeagent.cli.main import cli

    result = CliRunner().invoke(cli, argv, catch_exceptions=False)
    assert result.exit_code in (0, 1, 2, 3), result.output
    return json.loads(result.stdout)


def _compare(name: str, doc: Any) -> None:
    path = GOLDEN / f"{name}.json"
    text = json.dumps(_stable(doc), indent=1, sort_keys=False) + "\n"
    if WRITE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.read_text() == text, f"{path.name} changed: rerun with NODEAGENT_WRITE_GOLDEN=1 if intended"


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("golden")


@pytest.mark.parametrize("machine", HWLOC + CORPUS)
@pytest.mark.parametrize("command", ["check", "facts", "tune"])
def test_document_is_unchanged(command: str, machine: str, trees: Path) -> None:
    doc = _run([command, "--root", _root(machine, trees), "--format", "json"])
    _compare(f"{command}--{machine}", doc)


@pytest.fixture
def fake_fleet(trees: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An inventory of FLEET whose SSH transport answers each pull with that machine's recording."""
    from nodeagent.cluster import ssh
    from nodeagent.host import open_host
    from nodeagent.host.local import TreeHost
    from nodeagent.host.recorder import encode, metadata, record

    class Conn:
        def __init__(self, name: str) -> None:
            self.name = name

        def close(self) -> None:
            return None

    def connection(spec: Any, keys: Any) -> Conn:
        return Conn(spec.name)

    def open_connection(*args: Any) -> None:
        return None

    def run(conn: Conn, command: str, timeout: float, stdin: bytes | None = None) -> ssh.Output:
        spec = json.loads(zlib.decompress(stdin or b""))["spec"]
        patterns, commands = spec["patterns"], [tuple(c) for c in spec["commands"]]
        with open_host(_root(FLEET[conn.name], trees)) as host:
            assert isinstance(host, TreeHost)
            rec = record(host, patterns, commands)
            meta = metadata(host, patterns, commands, "")
        return ssh.Output(encode(rec, meta), b"", 0)

    monkeypatch.setattr(ssh, "connection", connection)
    monkeypatch.setattr(ssh, "open_connection", open_connection)
    monkeypatch.setattr(ssh, "run", run)
    inv = tmp_path / "hosts.yml"
    inv.write_text(f"hosts: [{', '.join(FLEET)}]\n")
    yield inv


def test_cluster_document_is_unchanged(fake_fleet: Path) -> None:
    doc = _run(["check", "--cluster", str(fake_fleet), "--format", "json"])
    _compare("check-cluster", doc)
