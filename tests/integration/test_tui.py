"""The TUI's app, Overview and Checks screens, driven by Textual's pilot: on a fake slow backend
(findings stream in, an UNKNOWN finding, a backend that fails) and on a recorded snapshot."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable

from nodeagent import checks
from nodeagent.api.check import Area
from nodeagent.core.finding import Finding, Status
from nodeagent.engine import CheckResult
from nodeagent.tui.app import NodeAgentApp, make_app
from nodeagent.tui.backend import LocalBackend
from nodeagent.tui.screens.areas import area_status, by_area
from tests.support.helpers import modules_loaded_by
from tests.support.paths import VM
from tests.support.plugin_checks import plugin_check, register
from tests.support.tmux_session import TmuxSession, tmux_missing
from tests.support.tui_driver import drive, notifications, settle, text_of
from tests.support.tui_fakes import CHECK_IDS, FINDINGS, FakeBackend

# An Xid 79 as the xid check reports it: the GPU fell off the bus (NVIDIA's catalogue: RESTART_BM).
XID_FAIL = Finding(
    "xid",
    Status.FAIL,
    "Xid 79 (GPU has fallen off the bus) x1",
    {"dmesg -r": "NVRM: Xid (PCI:0000:07:00): 79, pid=1234, GPU has fallen off the bus."},
    subject="0000:07:00.0",
)
PROBE_FAIL = Finding("probe", Status.FAIL, "the plug-in's probe failed")


def table_rows(app: NodeAgentApp) -> list[list[str]]:
    table: DataTable[Any] = app.screen.query_one("#findings", DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def area_rows(app: NodeAgentApp) -> dict[str, tuple[str, list[str]]]:
    """The Overview's table of areas: area -> (its status, the ids of its checks)."""
    rows = {}
    for line in text_of(app, "#areas").splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == 3 and cells[0] != "area":  # not the title nor the header
            rows[cells[0]] = (cells[1], cells[2].split(", "))
    return rows


def registered_areas() -> dict[str, str]:
    """Check id -> area name, as the registry's checks declare them."""
    return {c.id: c.area.value for c in checks.all_checks()}


def test_findings_stream_in_as_checks_finish() -> None:
    gate = threading.Event()
    backend = FakeBackend(gate=gate)
    app = make_app(backend, start="checks")

    async def steps(pilot: Pilot[None]) -> None:
        for _ in range(100):  # the first three checks come in, then the run waits on the gate
            await pilot.pause(0.05)
            if len(app.results) == 3:
                break
        assert len(app.results) == 3
        assert len(table_rows(app)) == 3
        assert "running" in text_of(app, "#checks-state")
        gate.set()
        await settle(pilot)
        assert set(app.results) == set(CHECK_IDS)
        rows = table_rows(app)
        assert len(rows) == sum(len(r.findings) for r in app.results.values())
        assert [r[0] for r in rows][:3] == ["FAIL", "UNKNOWN", "WARN"]  # worst first
        assert "running" not in text_of(app, "#checks-state")

    drive(app, steps)


def test_selection_shows_evidence_expected_remediation_and_tuner() -> None:
    app = make_app(FakeBackend(delay_s=0), start="checks")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        table: DataTable[Any] = app.screen.query_one("#findings", DataTable)
        table.focus()
        await pilot.press("ctrl+home")
        await pilot.pause()
        detail = text_of(app, "#detail")
        assert "transparent huge pages never" in detail
        assert "/sys/kernel/mm/transparent_hugepage/enabled" in detail
        assert "madvise or always" in detail and "tuner thp" in detail
        await pilot.press("down")  # the UNKNOWN one: shown like any other
        await pilot.pause()
        assert "UNKNOWN" in text_of(app, "#detail") and "max banana" in text_of(app, "#detail")

    drive(app, steps)


def test_filters_by_status_and_area() -> None:
    app = make_app(FakeBackend(delay_s=0), start="checks")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        everything = len(table_rows(app))
        await pilot.press("f")  # needs attention
        await pilot.pause()
        assert {r[0] for r in table_rows(app)} == {"FAIL", "UNKNOWN", "WARN"}
        assert "needs attention" in text_of(app, "#checks-state")
        await pilot.press("f")  # FAIL only
        await pilot.pause()
        assert [r[1] for r in table_rows(app)] == ["hugepages"]
        for _ in range(5):  # back round to all
            await pilot.press("f")
        await pilot.pause()
        assert len(table_rows(app)) == everything
        await pilot.press("a")  # the first area: CPU and power
        await pilot.pause()
        assert {r[1] for r in table_rows(app)} == {"cstates"}

    drive(app, steps)


def test_rerun_one_check_and_all() -> None:
    backend = FakeBackend(delay_s=0)
    calls: list[tuple[str, ...]] = []
    original = backend.run_checks

    def recording(only: Any = ()) -> Any:
        calls.append(tuple(only))
        return original(only)

    backend.run_checks = recording  # type: ignore[method-assign]
    app = make_app(backend, start="checks")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        app.screen.query_one("#findings", DataTable).focus()
        await pilot.press("ctrl+home", "r")
        await settle(pilot)
        await pilot.press("R")
        await settle(pilot)

    drive(app, steps)
    assert calls == [(), ("hugepages",), ()]


def test_a_failing_backend_is_a_notification_not_a_crash() -> None:
    app = make_app(FakeBackend(fail_checks=True), start="checks")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        assert any("/sys is not mounted" in n for n in notifications(app))
        assert table_rows(app) == []
        await pilot.press("f", "a", "R")  # still usable
        await settle(pilot)

    drive(app, steps)
    assert app.return_code in (None, 0)


def test_overview_shows_the_node_and_the_worst_status_per_area() -> None:
    app = make_app(FakeBackend(delay_s=0))

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        node = text_of(app, "#node")
        assert "AMD EPYC 7763" in node and "2 socket(s)" in node
        assert "NUMA 1" in node and "516000 MiB" in node
        assert "GPU0" in node and "mlx5_0/1 ACTIVE" in node and "5.15.0-91-generic" in node
        areas = text_of(app, "#areas")
        assert "NUMA and memory" in areas and "FAIL" in areas  # hugepages FAIL
        assert "UNKNOWN" in areas  # threads
        assert app.sub_title == "gpu-node-07"

    drive(app, steps)


def test_overview_lists_every_registered_check_under_its_area() -> None:
    app = make_app(FakeBackend(delay_s=0))

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        shown = {cid: area for area, (_, ids) in area_rows(app).items() for cid in ids}
        assert shown == registered_areas()
        assert {"xid", "cpu-isa", "dcgm-diag"} <= set(shown)

    drive(app, steps)


def test_overview_lists_a_check_registered_at_run_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plug-in that names no area is under Other, with its FAIL; one that names an area is there."""
    register(monkeypatch, plugin_check("probe", (PROBE_FAIL,)), plugin_check("gpu-probe", area=Area.GPU))
    app = make_app(FakeBackend(delay_s=0, findings=FINDINGS | {"probe": [PROBE_FAIL]}))

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        rows = area_rows(app)
        shown = {cid: area for area, (_, ids) in rows.items() for cid in ids}
        assert shown == registered_areas()
        assert rows["Other"] == ("FAIL", ["probe"])
        assert "gpu-probe" in rows["GPUs and NVLink"][1]

    drive(app, steps)


def test_an_xid_fail_shows_as_fail_in_its_area() -> None:
    app = make_app(FakeBackend(delay_s=0, findings=FINDINGS | {"xid": [XID_FAIL]}))

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        area = registered_areas()["xid"]
        assert area == Area.GPU.value
        status, ids = area_rows(app)[area]
        assert "xid" in ids and status == "FAIL"  # its other checks are SKIPPED: the Xid decides

    drive(app, steps)


def test_an_area_waits_for_its_running_checks_not_for_those_the_run_leaves_out() -> None:
    results = {"gpu": CheckResult("gpu", "GPU health", [Finding("gpu", Status.WARN, "hot")], 0.1)}
    assert area_status(results, set(), ("gpu", "dcgm-diag")) is Status.WARN  # dcgm-diag: on demand
    assert area_status(results, {"xid"}, ("gpu", "xid")) is None
    assert area_status({}, set(), ("gpu",)) is None  # nothing has run yet


def test_results_of_no_registered_check_are_under_other() -> None:
    """A playbook's thresholds and a baseline's differences come as results of their own ids."""
    listed = checks.all_checks()
    grouped = by_area(listed, ["playbook", "gpu", "baseline"])
    assert grouped["Other"] == ("baseline", "playbook")
    assert sorted(i for ids in grouped.values() for i in ids) == sorted(
        [c.id for c in listed] + ["baseline", "playbook"]
    )


def test_the_area_filter_cycles_through_the_registrys_areas(monkeypatch: pytest.MonkeyPatch) -> None:
    register(monkeypatch, plugin_check("probe", (PROBE_FAIL,)))
    backend = FakeBackend(delay_s=0, findings=FINDINGS | {"xid": [XID_FAIL], "probe": [PROBE_FAIL]})
    app = make_app(backend, start="checks")
    declared = registered_areas()
    expected = [a.value for a in Area if a.value in declared.values()]

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        cycled = []
        for _ in range(len(Area) + 1):
            await pilot.press("a")
            await pilot.pause()
            area = re.search(r"filter: all, (.+?);", text_of(app, "#checks-state"))
            assert area is not None
            if area[1] == "all areas":
                break
            cycled.append(area[1])
            shown = {row[1] for row in table_rows(app)}
            assert shown == {cid for cid, a in declared.items() if a == area[1] and backend.findings.get(cid)}
        assert cycled == expected
        assert "Other" in cycled and "GPUs and NVLink" in cycled

    drive(app, steps, size=(120, 40))


def test_every_screen_opens_with_its_key_at_80x24() -> None:
    app = make_app(FakeBackend(delay_s=0))

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        for key, mode in zip(
            "123456", ("overview", "checks", "topology", "tune", "bench", "cluster"), strict=True
        ):
            await pilot.press(key)
            await pilot.pause()
            assert app.current_mode == mode
        await settle(pilot)

    drive(app, steps)


def test_on_a_recorded_snapshot() -> None:
    app = make_app(LocalBackend(root=str(VM)))

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        assert "AMD EPYC" in text_of(app, "#node")
        assert len(app.results) == len(CHECK_IDS)
        await pilot.press("2")
        await pilot.pause()
        assert len(table_rows(app)) > 10

    drive(app, steps, size=(120, 40))


def test_cli_refuses_a_bad_root_in_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nodeagent", "tui", "--root", "/nonexistent/node.tar.gz"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 64
    assert len(proc.stderr.strip().splitlines()) == 1 and "no such file" in proc.stderr


def test_startup_imports_neither_tensorflow_nor_nvml_nor_ssh() -> None:
    code = (
        "from nodeagent.tui.app import make_app\n"
        "from nodeagent.tui.backend import LocalBackend\n"
        "make_app(LocalBackend())"
    )
    heavy = ("tensorflow", "pynvml", "paramiko", "fabric", "textual_plotext")
    assert modules_loaded_by(code, heavy) == []


@pytest.mark.skipif(tmux_missing() is not None, reason=str(tmux_missing()))
def test_the_real_tui_in_a_real_terminal(tmp_path: Path) -> None:
    """`nodeagent tui` in tmux: the overview paints, keys switch screens, q quits."""
    nodeagent = str(Path(sys.executable).with_name("nodeagent"))
    name = f"nodeagent-test-{os.getpid()}"
    with TmuxSession(name, [nodeagent, "tui", "--root", str(VM)], width=100, height=30) as term:
        screen = term.wait_for("status by area", "AMD EPYC", "Screens", "Quit", "NUMA and memory")
        term.wait_for("Kernel and threads", "WARN")  # the checks have run: statuses, not "..."
        term.keys("2")
        screen = term.wait_for("filter: all, all areas")
        assert "hugepages" in screen or "kernel" in screen
        term.keys("f")
        term.wait_for("needs attention")
        term.keys("q")
        deadline = time.monotonic() + 10
        while term.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not term.alive(), term.screen()


@pytest.mark.skipif(tmux_missing() is not None, reason=str(tmux_missing()))
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_the_real_tui_stopped_by_a_signal_gives_the_terminal_back(sig: signal.Signals) -> None:
    """A scheduler's SIGTERM or a hung-up terminal's SIGHUP ends the TUI as Ctrl-C ends a command:
    the screen is the shell's again, one line says why, exit 128 + the signal."""
    import psutil

    nodeagent = shlex.join([str(Path(sys.executable).with_name("nodeagent")), "tui", "--root", str(VM)])
    name = f"nodeagent-test-{os.getpid()}-{sig.name}"
    with TmuxSession(
        name, ["sh", "-c", f"{nodeagent}; echo EXIT=$?; sleep 60"], width=100, height=30
    ) as term:
        term.wait_for("status by area", "Kernel and threads", "WARN")
        (tui,) = psutil.Process(term.pane_pid()).children()
        tui.send_signal(sig)
        screen = term.wait_for(f"EXIT={128 + sig}")
        assert f"nodeagent: interrupted by {sig.name}" in screen
        assert "status by area" not in screen  # the TUI's screen is gone: the terminal is restored


def test_a_playbook_chooses_the_checks_and_adds_its_thresholds() -> None:
    from nodeagent.gate.playbook import load_playbook

    pb = load_playbook("cpu-training")
    app = make_app(LocalBackend(root=str(VM), playbook=pb), start="checks")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        assert set(app.results) == {*pb.checks, "playbook"}
        assert any(f.check_id == "playbook" for f in app.results["playbook"].findings)

    drive(app, steps)


def test_the_bench_screen_on_a_recording_says_it_measures_this_machine() -> None:
    app = make_app(LocalBackend(root=str(VM)), start="bench")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("b")
        await settle(pilot)
        assert any("not a recording" in n for n in notifications(app))

    drive(app, steps)
