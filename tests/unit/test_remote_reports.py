"""With --remote-agent each node's own nodeagent writes its report. One the fleet cannot read (a
newer version's status word, a field of the wrong type) is that host's error, never the fleet's:
the other hosts' results and every --output still stand."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.support import fakefleet
from tests.support.cli import run_cli

FLEET = {"node01": "40intel64-2g2n4c+pcilocality", "node02": "sysfs-ghw-xeon-l5640-2socket"}


@pytest.fixture
def agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fleet's nodes answer `nodeagent check ...` with a real report of their recording; node02's
    has a status word this nodeagent does not know."""
    from nodeagent.cluster import ssh

    inv = fakefleet.install(monkeypatch, FLEET, tmp_path / "trees", tmp_path / "hosts.yml")
    (tmp_path / "trees").mkdir()

    def run(conn: Any, command: str, timeout: float, stdin: bytes | None = None) -> ssh.Output:
        argv = shlex.split(command)[1:]  # `nodeagent check --format json --facts ...`
        root = fakefleet.recorded_root(FLEET[conn.name], tmp_path / "trees")
        # A process of its own: the fleet runs hosts on threads, and an in-process run would swap
        # the sys.stdout they share.
        doc = run_cli(*argv, "--root", root, process=True).json()
        if conn.name == "node02":
            doc["findings"][0]["status"] = "SUPERB"
        return ssh.Output(json.dumps(doc).encode(), b"", 1)

    monkeypatch.setattr(ssh, "run", run)
    return inv


def test_an_unreadable_report_is_that_hosts_error(agents: Path, tmp_path: Path) -> None:
    report = tmp_path / "fleet.md"
    result = run_cli(
        "check",
        "--cluster",
        str(agents),
        "--remote-agent",
        "--format",
        "json",
        "--output",
        f"markdown:{report}",
    )
    assert result.returncode == 2, result.stderr  # a host without a result counts as FAIL
    doc = json.loads(result.stdout)
    good, bad = doc["hosts"]["node01"], doc["hosts"]["node02"]
    assert "error" not in good and good["findings"]
    assert bad["status"] == "FAIL"
    assert bad["error"]["kind"] == "remote error"
    assert "findings[0].status" in bad["error"]["message"]
    assert "install the same nodeagent version" in bad["error"]["message"]
    assert "node01" in report.read_text() and "node02" in report.read_text()
