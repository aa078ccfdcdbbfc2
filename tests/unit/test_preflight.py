"""`nodeagent preflight`: the gate's verdict and exit code, its time budget (a hung check is cut and
named, never waited for), its outputs, and `--playbook`/`--baseline` on `check`."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from nodeagent import checks
from nodeagent.api.check import Check, NoParams
from nodeagent.core.finding import Finding, Status
from nodeagent.host import Host
from tests.support.cli import RunCli
from tests.support.paths import VM


def test_a_recorded_node_is_judged_by_the_preflight_playbook(run_cli: RunCli) -> None:
    proc = run_cli("preflight", "--root", str(VM), "--format", "json")
    doc = json.loads(proc.stdout)
    assert doc["playbook"] == "preflight"
    assert doc["verdict"]["fail_on"] in ("warn", "fail")
    assert all("duration_s" in c for c in doc["checks"])
    assert doc["timed_out"] == []
    refused = not doc["verdict"]["allowed"]
    assert (proc.returncode != 0) == refused, (proc.returncode, doc["verdict"])
    # --fail-on warn refuses what has warnings (this VM has some: small memlock, nofile)
    strict = run_cli("preflight", "--root", str(VM), "--fail-on", "warn", "--format", "json")
    assert strict.returncode != 0 and not json.loads(strict.stdout)["verdict"]["allowed"]


def test_slurm_format_is_one_line(run_cli: RunCli) -> None:
    proc = run_cli("preflight", "--root", str(VM), "--fail-on", "warn", "--format", "slurm")
    assert proc.returncode != 0
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nodeagent")


def test_outputs_are_written_in_every_format(run_cli: RunCli, tmp_path: Path) -> None:
    outs = {
        fmt: tmp_path / f"run.{fmt}" for fmt in ("json", "junit", "prometheus", "markdown", "html", "slurm")
    }
    args = [a for fmt, path in outs.items() for a in ("--output", f"{fmt}:{path}")]
    proc = run_cli("preflight", "--root", str(VM), *args)
    assert proc.returncode in (0, 1, 2, 3), proc.stderr
    for fmt, path in outs.items():
        # The Slurm reason is empty exactly when the node may run the job.
        assert (path.stat().st_size > 0) == (fmt != "slurm" or proc.returncode != 0), fmt
    assert json.loads(outs["json"].read_text())["playbook"] == "preflight"
    assert "<testsuite" in outs["junit"].read_text()
    assert "nodeagent_check_status" in outs["prometheus"].read_text()


def test_a_bad_output_is_refused_before_running(run_cli: RunCli, tmp_path: Path) -> None:
    proc = run_cli("preflight", "--root", str(VM), "--output", f"yaml:{tmp_path / 'x'}")
    assert proc.returncode == 64 and len(proc.stderr.strip().splitlines()) == 1


@pytest.fixture
def hanging_check(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A check that never returns until released, added to the registry for this test."""
    release = threading.Event()

    def collect(host: Host) -> object:
        release.wait(120)
        return None

    def evaluate(facts: object, params: NoParams) -> list[Finding]:
        return [Finding("hangs", Status.OK, "released")]

    hang: Check[object, NoParams] = Check("hangs", "A check that hangs", (), collect, evaluate, NoParams)
    real = checks.all_checks

    monkeypatch.setattr(checks, "all_checks", lambda: (*real(), hang))
    yield hang
    release.set()


def test_a_hung_check_is_cut_at_the_budget_and_named(
    hanging_check: Any, tmp_path: Path, run_cli: RunCli
) -> None:
    pb = tmp_path / "judge.yml"
    pb.write_text(
        "description: a gate with a check that hangs\nbudget_s: 0.5\nchecks:\n  kernel: {}\n  hangs: {}\n"
    )
    code, out, _ = run_cli("preflight", "--root", str(VM), "--playbook", str(pb), "--format", "json")
    doc = json.loads(out)
    assert doc["timed_out"] == ["hangs"]
    hung = next(c for c in doc["checks"] if c["id"] == "hangs")
    assert hung["timed_out"] and hung["status"] == "UNKNOWN"
    assert not doc["verdict"]["allowed"] and "hangs" in doc["verdict"]["reason"]
    assert code == 3  # UNKNOWN: the gate could not see
    assert doc["duration_s"] < 30  # answered at the budget, not when the check would have returned


def test_check_with_a_playbook_adds_its_thresholds(run_cli: RunCli, tmp_path: Path) -> None:
    pb = tmp_path / "thp.yml"
    pb.write_text(
        "description: THP must be always\n"
        "checks:\n  hugepages: {}\n"
        "thresholds:\n  - {value: hugepages.thp_enabled, equals: always, severity: fail, why: test}\n"
    )
    proc = run_cli("check", "--root", str(VM), "--playbook", str(pb), "--format", "json")
    doc = json.loads(proc.stdout)
    assert {c["id"] for c in doc["checks"]} == {"hugepages", "playbook"}
    rule = next(f for f in doc["findings"] if f["check_id"] == "playbook")
    assert rule["status"] == "FAIL" and rule["evidence"] == {"hugepages.thp_enabled": "madvise"}
    assert proc.returncode == 2


def test_baseline_save_and_compare(run_cli: RunCli, tmp_path: Path) -> None:
    base = tmp_path / "good.json"
    proc = run_cli("baseline", "save", str(base), "--root", str(VM))
    assert proc.returncode == 0, proc.stderr
    same = run_cli(
        "check", "--root", str(VM), "--baseline", str(base), "--only", "kernel", "--format", "json"
    )
    found = [f for f in json.loads(same.stdout)["findings"] if f["check_id"] == "baseline"]
    assert found and all(f["status"] == "OK" for f in found)
    missing = run_cli("check", "--root", str(VM), "--baseline", str(tmp_path / "nope.json"))
    assert missing.returncode == 64 and len(missing.stderr.strip().splitlines()) == 1


def test_playbooks_list_and_show(run_cli: RunCli) -> None:
    listing = run_cli("playbooks")
    assert listing.returncode == 0
    for name in ("preflight", "gpu-training", "cpu-training", "tune-tf"):
        assert name in listing.stdout
    shown = run_cli("playbooks", "show", "gpu-training", "--format", "json")
    doc = json.loads(shown.stdout)
    assert doc["checks"] and doc["thresholds"]


def test_a_playbook_runs_the_on_demand_checks_it_names() -> None:
    from nodeagent.gate import judge
    from nodeagent.gate.playbook import load_playbook

    assert "dcgm-diag" not in [c.id for c in checks.select()]  # never in a plain `check`
    named = [c.id for c in judge.selected_checks(load_playbook("gpu-training"), [], [])]
    assert "dcgm-diag" in named and "xid" in named
    assert "dcgm-diag" not in [c.id for c in judge.selected_checks(load_playbook("preflight"), [], [])]
    assert "dcgm-diag" not in [
        c.id for c in judge.selected_checks(load_playbook("gpu-training"), [], ["dcgm-diag"])
    ]
