"""Golden documents: the JSON of `check`, `facts`, `tune` (the plan) and `check --cluster` on
recorded machines must stay byte-for-byte what it was when the goldens were written, apart from the
fields that change from run to run (durations, times, the tool's version). A refactoring that
changes a verdict, a key or an order fails here.

The machines are real recordings (tests/fixtures/hwloc, tests/fixtures/corpus); the fleet is four of
them behind a fake SSH transport (tests/support/fakefleet.py).

Regenerate (only when a change of output is intended, and say why in the commit):
    NODEAGENT_WRITE_GOLDEN=1 pytest tests/unit/test_golden.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support import fakefleet
from tests.support.cli import RunCli
from tests.support.golden_docs import stable
from tests.support.paths import GOLDEN

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


def _root(name: str, tmp: Path) -> str:
    return fakefleet.recorded_root(name, tmp)


def _run(run_cli: RunCli, *args: str) -> Any:
    result = run_cli(*args)
    assert result.returncode in (0, 1, 2, 3), result.stderr
    return result.json()


def _compare(name: str, doc: Any) -> None:
    path = GOLDEN / f"{name}.json"
    text = json.dumps(stable(doc), indent=1, sort_keys=False) + "\n"
    if WRITE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.read_text() == text, f"{path.name} changed: rerun with NODEAGENT_WRITE_GOLDEN=1 if intended"


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("golden")


@pytest.mark.parametrize("machine", HWLOC + CORPUS)
@pytest.mark.parametrize("command", ["check", "facts", "tune"])
def test_document_is_unchanged(run_cli: RunCli, command: str, machine: str, trees: Path) -> None:
    doc = _run(run_cli, command, "--root", _root(machine, trees), "--format", "json")
    _compare(f"{command}--{machine}", doc)


@pytest.fixture
def fake_fleet(trees: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return fakefleet.install(monkeypatch, FLEET, trees, tmp_path / "hosts.yml")


def test_cluster_document_is_unchanged(run_cli: RunCli, fake_fleet: Path) -> None:
    doc = _run(run_cli, "check", "--cluster", str(fake_fleet), "--format", "json")
    _compare("check-cluster", doc)
