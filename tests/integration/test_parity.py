"""Both faces run the same flows: what the CLI reports and what the TUI's backend gets, on the same
inputs (real recordings, a fleet of recordings behind a fake SSH transport), are the same documents.

The TUI's screens hold no logic: they render what its Backend returns, so the Backend is where the
TUI's flow is compared. A divergence here once meant that `nodeagent tui --cluster hosts.yml
--playbook preflight` ran every check without the playbook's parameters and thresholds while
`check --cluster` honoured them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nodeagent.api.tune import plan_documents
from nodeagent.gate.playbook import load_playbook
from nodeagent.tui.backend import LocalBackend
from tests.support import fakefleet
from tests.support.cli import run_cli

MACHINES = [
    "40intel64-2g2n4c+pcilocality",
    "topo-ml-engineering-h100-8gpu-nv18",
    "smix-pai-azure-4x-tesla-k80",
]
PLAYBOOKS = [None, "preflight", "gpu-training", "cpu-training"]
FLEET = {"node01": "40intel64-2g2n4c+pcilocality", "node02": "sysfs-ghw-xeon-l5640-2socket"}
VOLATILE = {"duration_s", "started"}


def _stable(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _stable(v) for k, v in doc.items() if k not in VOLATILE}
    if isinstance(doc, list):
        return [_stable(v) for v in doc]
    return doc


def _cli(argv: list[str]) -> Any:
    result = run_cli(*argv, "--format", "json")
    assert result.returncode in (0, 1, 2, 3), result.stderr
    return _stable(result.json())


def _with_playbook(argv: list[str], name: str | None) -> list[str]:
    return [*argv, "--playbook", name] if name else argv


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("parity")


def _tui_check_document(backend: LocalBackend) -> dict[str, Any]:
    """The document of the results the TUI's Checks screen receives, in the checks' order."""
    from nodeagent import engine
    from nodeagent.gate import judge
    from nodeagent.render import jsonout

    # As the app keeps them: by check id, a result re-judged by the playbook replacing the first.
    results = {r.check_id: r for r in backend.run_checks()}
    order = [c.id for c in backend.checks()]
    report = engine.Report(backend.name)
    report.results = sorted(
        results.values(), key=lambda r: order.index(r.check_id) if r.check_id in order else len(order)
    )
    doc: dict[str, Any] = _stable(jsonout.document(judge.document(report, backend.playbook, None, None)))
    return doc


@pytest.mark.parametrize("playbook", PLAYBOOKS)
@pytest.mark.parametrize("machine", MACHINES)
def test_check_is_the_same_in_both_faces(machine: str, playbook: str | None, trees: Path) -> None:
    root = fakefleet.recorded_root(machine, trees)
    pb = load_playbook(playbook) if playbook else None
    cli_doc = _cli(_with_playbook(["check", "--root", root], playbook))
    tui_doc = _tui_check_document(LocalBackend(root=root, playbook=pb))
    assert tui_doc == cli_doc


@pytest.mark.parametrize("playbook", [None, "tune-tf", "gpu-training"])
@pytest.mark.parametrize("machine", MACHINES)
def test_tune_plan_is_the_same_in_both_faces(machine: str, playbook: str | None, trees: Path) -> None:
    root = fakefleet.recorded_root(machine, trees)
    pb = load_playbook(playbook) if playbook else None
    cli_plans = _cli(_with_playbook(["tune", "--root", root], playbook))["plans"]
    tui_plans = [_stable(p) for p in plan_documents(LocalBackend(root=root, playbook=pb).plans())]
    assert tui_plans == cli_plans


@pytest.mark.parametrize("playbook", [None, "preflight", "gpu-training"])
def test_cluster_check_is_the_same_in_both_faces(
    playbook: str | None, trees: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inv = fakefleet.install(monkeypatch, FLEET, trees, tmp_path / "hosts.yml")
    pb = load_playbook(playbook) if playbook else None
    cli_doc = _cli(_with_playbook(["check", "--cluster", str(inv)], playbook))
    backend = LocalBackend(inventory_path=str(inv), playbook=pb)
    tui_doc = _stable(json.loads(json.dumps(backend.run_cluster(lambda outcome: None).to_dict())))
    assert tui_doc["hosts"] == cli_doc["hosts"]
    assert {k: v for k, v in tui_doc.items() if k not in ("schema", "nodeagent")} == {
        k: v for k, v in cli_doc.items() if k not in ("schema", "nodeagent")
    }


def test_cluster_screen_applies_the_playbook(
    trees: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The playbook decides which checks run on the fleet and adds its thresholds' results."""
    inv = fakefleet.install(monkeypatch, FLEET, trees, tmp_path / "hosts.yml")
    pb = load_playbook("preflight")
    report = LocalBackend(inventory_path=str(inv), playbook=pb).run_cluster(lambda outcome: None)
    for outcome in report.outcomes.values():
        ran = [c["id"] for c in (outcome.doc or {})["checks"]]
        assert set(ran) - {"playbook"} == set(pb.checks)
        assert "playbook" in ran  # the thresholds' result


def test_bench_runs_with_the_same_settings_in_both_faces(monkeypatch: pytest.MonkeyPatch) -> None:
    """The benchmark itself is TensorFlow's (tests/integration/test_bench_run.py); here, both faces
    must ask for the same run: the command line's settings, else the playbook's."""
    from nodeagent.bench import run

    asked: list[tuple[Any, ...]] = []

    def fake_bench(
        quick: bool, profile: str | None, repeats: int | None, processes: int | None, **_: Any
    ) -> Any:
        asked.append((quick, profile, repeats, processes))
        sizes = run.sizes_for(quick, repeats, processes)
        return run.BenchResult({}, run.Bound(None, None, None), {}, quick, 0.0, sizes, profile)

    monkeypatch.setattr(run, "run_bench", fake_bench)
    monkeypatch.setattr("nodeagent.app.bench.need_tensorflow", lambda: None)
    pb = load_playbook("tune-tf")
    _cli(["bench", "--playbook", "tune-tf"])
    LocalBackend(playbook=pb).bench(False, lambda progress: None)
    _cli(["bench", "--quick"])
    LocalBackend().bench(True, lambda progress: None)
    assert asked[0] == asked[1]
    assert asked[2] == asked[3]
