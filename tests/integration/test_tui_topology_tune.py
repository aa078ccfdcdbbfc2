"""The TUI's Topology and Tune screens, driven by Textual's pilot: on the fake backend (its matrix, its
plan, an apply that records what it was given, a revert, an apply that fails), and on recorded
snapshots (the firecracker VM without a GPU, a DGX A100's `nvidia-smi topo -m`, sysfs GPU trees)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from nodeagent.api.tune import Change, Plan, Scope, Write
from nodeagent.core.errors import UsageError
from nodeagent.facts import node, pci_topology
from nodeagent.facts.topo_matrix import parse_topo
from nodeagent.host import SnapshotHost
from nodeagent.tui.app import NodeAgentApp, make_app
from nodeagent.tui.backend import LocalBackend, SavedProfile
from nodeagent.tui.screens.topology import GRADE_STYLE, TopologyScreen, matrix_from_facts
from nodeagent.tui.screens.tune import JournalPicker, TuneScreen
from nodeagent.tui.widgets.confirm import ConfirmScreen
from nodeagent.tuning import profile as profiles
from nodeagent.tuning.state import STATE_ENV
from tests.support.helpers import GPU, NIC, SYSFS_FIXTURES, nvidia_smi_text, pci_tree
from tests.support.paths import VM
from tests.support.tui_driver import drive as drive_app
from tests.support.tui_driver import notifications_by_severity as notifications
from tests.support.tui_driver import settle, text_of
from tests.support.tui_fakes import FACTS, PROFILE_PATH, FakeBackend

A100 = "topo-m-dgx-a100.txt"
READ_ONLY = "a recorded snapshot (/srv/node07.tar.gz) is read-only: the plan is shown, nothing applies"


# -- driving the app -----------------------------------------------------------------------------


async def press(pilot: Pilot[None], *keys: str) -> None:
    for key in keys:
        await pilot.press(key)
        await settle(pilot)


def drive(
    app: NodeAgentApp, steps: Callable[[Pilot[None]], Awaitable[None]], size: tuple[int, int] = (80, 24)
) -> None:
    drive_app(app, steps, size, settle_first=True)


def table(app: NodeAgentApp, selector: str) -> DataTable[Any]:
    return app.screen.query_one(selector, DataTable)


def row_text(app: NodeAgentApp, selector: str, key: str) -> list[str]:
    return [str(c) for c in table(app, selector).get_row(key)]


def cell_style(app: NodeAgentApp, row: str, column: str) -> str:
    return str(table(app, "#topo-matrix").get_cell(row, column).style)


# -- Topology --------------------------------------------------------------------------------------
def test_topology_shows_the_fakes_matrix_affinity_and_legend() -> None:
    app = make_app(FakeBackend(), start="topology")

    async def steps(pilot: Pilot[None]) -> None:
        assert isinstance(app.screen, TopologyScreen)
        t = table(app, "#topo-matrix")
        assert [str(r.label) for r in t.columns.values()] == ["", "GPU0", "GPU1", "NIC0", "CPUs", "NUMA"]
        assert row_text(app, "#topo-matrix", "GPU0") == ["GPU0", "X", "SYS", "PXB", "0-63,128-191", "0"]
        assert row_text(app, "#topo-matrix", "GPU1") == ["GPU1", "SYS", "X", "SYS", "64-127,192-255", "1"]
        # nvidia-smi prints no affinity for NICs
        assert row_text(app, "#topo-matrix", "NIC0") == ["NIC0", "PXB", "SYS", "X", "", ""]
        assert cell_style(app, "GPU0", "NIC0") == GRADE_STYLE["good"]
        assert cell_style(app, "GPU0", "GPU1") == GRADE_STYLE["bad"]
        assert cell_style(app, "GPU0", "GPU0") == GRADE_STYLE["self"]
        legend = text_of(app, "#topo-legend")
        for word in ("good:", "NV#", "PIX", "PXB", "medium:", "PHB", "NODE", "bad:", "SYS", "X self"):
            assert word in legend
        assert "NICs:" not in legend  # the fake's NIC is already called NIC0
        assert "nvidia-smi topo -m" in text_of(app, "#topo-source")
        # the cursor starts on GPU0-GPU1, explained in words
        assert "GPU0 - GPU1: SYS (bad)" in text_of(app, "#topo-cell")
        await press(pilot, "right")
        assert "GPU0 - NIC0: PXB (good)" in text_of(app, "#topo-cell")
        assert "WARN" not in text_of(app, "#topo-check")
        assert "topology check: SKIPPED" in text_of(app, "#topo-check")

    drive(app, steps)


def _eight_gpus_two_nics() -> dict[str, Any]:
    """A DGX-like node cut to two NICs: NV12 between GPUs, each NIC behind the switch of two GPUs."""
    gpus = [f"GPU{i}" for i in range(8)]
    devices = [*gpus, "mlx5_0", "mlx5_1"]
    near = {"mlx5_0": ("GPU0", "GPU1"), "mlx5_1": ("GPU6", "GPU7")}
    links: dict[str, dict[str, str]] = {}
    for a in devices:
        links[a] = {}
        for b in devices:
            if a == b:
                cell = "X"
            elif a in gpus and b in gpus:
                cell = "NV12"
            elif a in near and b in near:
                cell = "SYS"
            else:
                nic, gpu = (a, b) if a in near else (b, a)
                cell = "PXB" if gpu in near[nic] else "SYS"
            links[a][b] = cell
    facts = copy.deepcopy(FACTS)
    facts["nvidia_smi_topo"] = {
        "devices": devices,
        "links": links,
        "numa_affinity": dict.fromkeys(gpus, 3),
    }
    wide = list(range(112, 128)) + list(range(240, 256))  # "112-127,240-255", the widest A100 cell
    facts["gpus"] = [
        {"index": i, "pci_address": None, "vendor": "NVIDIA", "numa_node": 3, "cpu_affinity": wide}
        for i in range(8)
    ]
    return facts


class EightGpuBackend(FakeBackend):
    def facts(self) -> dict[str, Any]:
        return _eight_gpus_two_nics()


def test_topology_eight_gpus_and_two_nics_fit_80_columns() -> None:
    app = make_app(EightGpuBackend(), start="topology")

    async def steps(pilot: Pilot[None]) -> None:
        t = table(app, "#topo-matrix")
        assert t.row_count == 10
        assert t.virtual_size.width <= 80
        assert t.max_scroll_x == 0  # nothing hidden to the right
        assert row_text(app, "#topo-matrix", "GPU7")[-2:] == ["112-127,240-255", "3"]
        assert row_text(app, "#topo-matrix", "mlx5_1")[:1] == ["NIC1"]
        assert cell_style(app, "GPU0", "GPU1") == GRADE_STYLE["good"]  # NV12
        # the abbreviated headers are named under the matrix
        assert "NIC0 mlx5_0  NIC1 mlx5_1" in text_of(app, "#topo-legend")

    drive(app, steps)


def _a100_snapshot(tmp_path: Path) -> Path:
    """A recording holding only the DGX A100's `nvidia-smi topo -m` (no sysfs PCI tree)."""
    text = nvidia_smi_text(A100)
    (tmp_path / "commands").mkdir()
    (tmp_path / "commands" / "nvidia-smi-topo-m.txt").write_text(text)
    for marker in ("sys", "proc"):
        (tmp_path / marker).mkdir()
    return tmp_path


def test_topology_of_a_recorded_dgx_a100_at_120x40(tmp_path: Path) -> None:
    root = _a100_snapshot(tmp_path)
    expected = parse_topo(nvidia_smi_text(A100))
    app = make_app(LocalBackend(root=str(root)), start="topology")

    async def steps(pilot: Pilot[None]) -> None:
        t = table(app, "#topo-matrix")
        assert t.row_count == len(expected.devices) == 20
        for a in expected.devices:
            cells = row_text(app, "#topo-matrix", a)
            assert cells[1:21] == [expected.links[a][b] for b in expected.devices]
        gpu0 = row_text(app, "#topo-matrix", "GPU0")
        assert gpu0[0] == "GPU0"
        assert gpu0[-2:] == ["48-63,176-191", "3"]  # as nvidia-smi printed them
        assert row_text(app, "#topo-matrix", "GPU6")[-2:] == ["80-95,208-223", "5"]
        assert row_text(app, "#topo-matrix", "mlx5_10")[0] == "NIC10"
        assert "NICn is mlx5_n (NIC0-NIC11)" in text_of(app, "#topo-legend")
        # 20 device columns and the affinity are wider than 120 columns: the table scrolls, the
        # device names stay (a fixed column)
        assert t.max_scroll_x > 0
        assert t.fixed_columns == 1
        await press(pilot, *["right"] * 7)  # GPU0 - NIC0
        assert "GPU0 - NIC0 (mlx5_0): PXB (good)" in text_of(app, "#topo-cell")
        await press(pilot, *["right"] * 13)
        assert t.scroll_x > 0
        assert "GPU0: CPU affinity 48-63,176-191, NUMA affinity 3" in text_of(app, "#topo-cell")

    drive(app, steps, size=(120, 40))


def test_topology_without_nvidia_smi_is_the_checks_sysfs_matrix(tmp_path: Path) -> None:
    """A GPU and an RDMA NIC under one PCIe switch (PIX), an Ethernet port on the other socket (SYS):
    the screen shows exactly the matrix the topology check derives from the same tree."""
    switch = "pci0000:00/0000:00:01.0/0000:01:00.0"
    host = pci_tree(
        tmp_path,
        {
            f"{switch}/0000:02:00.0/0000:03:00.0": {**GPU, "numa_node": "0", "local_cpulist": "0-3"},
            f"{switch}/0000:02:01.0/0000:04:00.0": {**NIC, "numa_node": "0"},
            "pci0000:80/0000:80:01.0/0000:81:00.0": {
                "class": "0x020000",
                "vendor": "0x8086",
                "device": "0x1593",
                "numa_node": "1",
            },
        },
        rdma={"mlx5_0": "0000:04:00.0"},
        netdevs={"eth4": ("0000:81:00.0", 100000)},
        nodes={0: "0-3", 1: "4-7"},
    )
    derived = pci_topology.collect(host)
    assert derived.links["GPU0"]["mlx5_0"] == "PIX"  # the tree says what the test says it does
    assert derived.links["GPU0"]["eth4"] == "SYS"
    app = make_app(LocalBackend(root=str(tmp_path)), start="topology")

    async def steps(pilot: Pilot[None]) -> None:
        assert "matrix from the PCI tree in sysfs" in text_of(app, "#topo-source")
        names = ["GPU0", "mlx5_0", "eth4"]
        for a in names:
            assert row_text(app, "#topo-matrix", a)[1:4] == [derived.links[a][b] for b in names]
        assert row_text(app, "#topo-matrix", "GPU0")[-2:] == ["0-3", "0"]
        assert cell_style(app, "GPU0", "mlx5_0") == GRADE_STYLE["good"]
        assert cell_style(app, "GPU0", "eth4") == GRADE_STYLE["bad"]
        assert "NIC0 mlx5_0  NIC1 eth4" in text_of(app, "#topo-legend")

    drive(app, steps)


def test_sysfs_matrix_from_facts_agrees_with_the_check_on_a_recorded_gpu_tree() -> None:
    """POWER9 with six NVIDIA GPUs (hwloc's nvidiagpunumanodes): the same endpoints and levels as
    nodeagent.facts.pci_topology, from the facts document alone."""
    host = SnapshotHost(SYSFS_FIXTURES / "nvidiagpunumanodes.tar.bz2")
    derived = pci_topology.collect(host)
    m = matrix_from_facts(node.collect(host))
    assert m is not None
    assert m.devices == [e.name for e in derived.gpus + derived.nics]
    assert len(m.gpus) == 6
    for a in m.devices:
        for b in m.devices:
            assert m.link(a, b) == ("X" if a == b else derived.link(a, b))


def test_topology_recorded_gpu_tree_shows_gpu_rows() -> None:
    archive = SYSFS_FIXTURES / "nvidiagpunumanodes.tar.bz2"
    app = make_app(LocalBackend(root=str(archive)), start="topology")

    async def steps(pilot: Pilot[None]) -> None:
        t = table(app, "#topo-matrix")
        assert [str(t.get_row_at(i)[0]) for i in range(t.row_count)] == [f"GPU{i}" for i in range(6)]
        # sysfs does not place these GPUs: unknown, and said so rather than guessed
        assert row_text(app, "#topo-matrix", "GPU0")[2] == "?"
        assert "6 GPU(s), 0 NIC(s)" in text_of(app, "#topo-source")

    drive(app, steps)


def test_topology_without_gpu_says_skipped_in_one_line() -> None:
    app = make_app(LocalBackend(root=str(VM)), start="topology")

    async def steps(pilot: Pilot[None]) -> None:
        source = text_of(app, "#topo-source")
        assert source.startswith("SKIPPED no GPU: none among the 6 PCI device(s)")
        assert "nvidia-smi: command not found" in source
        assert not table(app, "#topo-matrix").display  # no empty table
        assert not app.screen.query_one("#topo-legend", Static).display
        assert "topology check: SKIPPED" in text_of(app, "#topo-check")

    drive(app, steps)


class CountingBackend(FakeBackend):
    facts_calls: int = 0

    def facts(self) -> dict[str, Any]:
        self.facts_calls += 1
        if self.facts_calls > 1:
            raise OSError("the node's /sys went away")
        return FACTS


def test_topology_reload_reads_again_and_a_failure_is_a_notification() -> None:
    backend = CountingBackend()
    app = make_app(backend, start="topology")

    async def steps(pilot: Pilot[None]) -> None:
        assert backend.facts_calls == 1
        await press(pilot, "r")
        assert backend.facts_calls == 2
        assert ("error", "reading the node's facts: the node's /sys went away") in notifications(app)
        assert "/sys went away" in text_of(app, "#topo-source")
        assert isinstance(app.screen, TopologyScreen)
        assert app.is_running

    drive(app, steps)


# -- Tune ------------------------------------------------------------------------------------------
# Row keys of the fake plan: thp (runtime), tf-threads (process), c-states (boot), numa-balancing.
THP, TF, BOOT, NOTE = "c0.0", "c1.0", "c2.0", "n3"


def marks(app: NodeAgentApp) -> dict[str, str]:
    t = table(app, "#plan")
    return {str(k.value): str(t.get_row(k)[0]) for k in t.rows}


def test_tune_shows_the_plan_before_after_with_scope_and_notes() -> None:
    app = make_app(FakeBackend(), start="tune")

    async def steps(pilot: Pilot[None]) -> None:
        assert isinstance(app.screen, TuneScreen)
        assert row_text(app, "#plan", THP) == [
            "[ ]",  # runtime: system-wide, chosen by hand
            "thp",
            "transparent_hugepage/enabled",
            "never -> madvise",
            "runtime",
        ]
        t = table(app, "#plan")
        assert t.virtual_size.width <= 80  # the columns share the screen: long values are cut (…)
        assert t.ordered_columns[t.get_column_index("target")].width < len("transparent_hugepage/enabled")
        assert row_text(app, "#plan", TF)[3:] == ["(unset) -> 64", "process"]
        assert row_text(app, "#plan", TF)[0] == "[x]"  # process: the profile, preselected
        assert row_text(app, "#plan", BOOT)[0] == " - "  # advice: not selectable
        assert row_text(app, "#plan", BOOT)[4] == "boot"
        assert row_text(app, "#plan", NOTE)[1:3] == ["numa-balancing", "already off"]
        state = text_of(app, "#tune-state")
        assert "3 change(s) from 3 tuner(s); 1 of 2 selected" in state
        assert "boot-scope changes (kernel command line) are advice: shown, not selectable" in state
        detail = text_of(app, "#tune-detail")
        assert "thp: transparent_hugepage/enabled [runtime]" in detail
        assert "large tensors in 2 MiB pages" in detail
        await press(pilot, "down", "down", "down")
        assert "already off" in text_of(app, "#tune-detail")

    drive(app, steps)


def test_tune_toggles_changes_and_boot_advice_stays_unselectable() -> None:
    app = make_app(FakeBackend(), start="tune")

    async def steps(pilot: Pilot[None]) -> None:
        screen = app.screen
        assert isinstance(screen, TuneScreen)
        await press(pilot, "down", "space")
        assert marks(app)[TF] == "[ ]"
        assert screen.selected == set()
        assert "0 of 2 selected" in text_of(app, "#tune-state")
        await press(pilot, "space")
        assert marks(app)[TF] == "[x]"
        await press(pilot, "down", "space")  # the boot change
        assert marks(app)[BOOT] == " - "
        assert BOOT not in screen.selected
        assert any("advice" in msg for sev, msg in notifications(app) if sev == "warning")
        await press(pilot, "a")  # not all were selected: all, never the boot change
        assert screen.selected == {THP, TF}
        assert marks(app)[THP] == marks(app)[TF] == "[x]"
        await press(pilot, "a")  # all were: none
        assert screen.selected == set()
        assert marks(app)[THP] == marks(app)[TF] == "[ ]"

    drive(app, steps)


def test_tune_confirmation_no_cancels() -> None:
    backend = FakeBackend()
    app = make_app(backend, start="tune")

    async def steps(pilot: Pilot[None]) -> None:
        await press(pilot, "p")
        assert isinstance(app.screen, ConfirmScreen)
        assert "Apply 1 change(s) of tf-threads?" in text_of(app, "#confirm-question")
        await press(pilot, "n")
        assert isinstance(app.screen, TuneScreen)
        assert backend.applied == []
        # Enter alone answers No: the focused button
        await press(pilot, "p", "enter")
        assert isinstance(app.screen, TuneScreen)
        assert backend.applied == []

    drive(app, steps)


def test_tune_yes_applies_exactly_the_selected_changes() -> None:
    backend = FakeBackend()
    app = make_app(backend, start="tune")

    async def steps(pilot: Pilot[None]) -> None:
        await press(pilot, "space", "down", "space", "p")  # thp chosen, tf-threads left out
        assert isinstance(app.screen, ConfirmScreen)
        await press(pilot, "y")
        assert isinstance(app.screen, TuneScreen)
        assert len(backend.applied) == 1
        (plans,) = backend.applied
        assert [p.tuner for p in plans] == ["thp"]
        assert plans[0].changes == backend.plans()[0].changes
        assert all(c.scope is not Scope.BOOT for p in plans for c in p.changes)
        result = text_of(app, "#tune-result")
        assert "journal 20261123-120000-abcd" in result
        assert "OK thp: madvise read back" in result

    drive(app, steps)


def test_tune_read_only_refuses_apply_and_revert_with_the_reason() -> None:
    backend = FakeBackend(read_only=READ_ONLY)
    app = make_app(backend, start="tune")

    async def steps(pilot: Pilot[None]) -> None:
        assert "READ-ONLY: " + READ_ONLY in text_of(app, "#tune-state").replace("\n", " ")
        assert marks(app)[THP] == ""  # nothing to select where nothing applies
        await press(pilot, "p")
        assert isinstance(app.screen, TuneScreen)  # no confirmation
        assert ("warning", f"cannot apply: {READ_ONLY}") in notifications(app)
        await press(pilot, "v")
        assert isinstance(app.screen, TuneScreen)
        assert ("warning", f"cannot revert: {READ_ONLY}") in notifications(app)
        assert backend.applied == []
        assert backend.reverted == []

    drive(app, steps)


def test_tune_revert_picks_a_journal_and_confirms() -> None:
    backend = FakeBackend()
    app = make_app(backend, start="tune")

    async def steps(pilot: Pilot[None]) -> None:
        await press(pilot, "v")
        assert isinstance(app.screen, JournalPicker)
        await press(pilot, "escape")
        assert isinstance(app.screen, TuneScreen)
        await press(pilot, "v", "enter")
        assert isinstance(app.screen, ConfirmScreen)
        assert "Revert journal 20261123-120000-abcd?" in text_of(app, "#confirm-question")
        await press(pilot, "n")
        assert backend.reverted == []
        await press(pilot, "v", "enter", "y")
        assert backend.reverted == ["20261123-120000-abcd"]
        result = text_of(app, "#tune-result")
        assert "reverted journal 20261123-120000-abcd" in result
        assert "OK restored transparent_hugepage/enabled = never" in result

    drive(app, steps)


def _every_scope() -> list[Plan]:
    """Changes of every scope across tuners: runtime (two), process (two), code and boot."""

    def runtime(tuner: str, path: str) -> Change:
        return Change(tuner, path, "a", "b", Scope.RUNTIME, "why", (Write(path, "a", "b"),))

    def setting(tuner: str, target: str, scope: Scope) -> Change:
        return Change(tuner, target, "(unset)", "1", scope, "why", profile_key=target, value="1")

    return [
        Plan("cpu-governor", [runtime("cpu-governor", "/sys/devices/system/cpu/cpu0/cpufreq/x")]),
        Plan(
            "tf-threads",
            [setting("tf-threads", "env.A", Scope.PROCESS), setting("tf-threads", "env.B", Scope.PROCESS)],
        ),
        Plan("tf-data", [setting("tf-data", "snippets.tf-data", Scope.CODE)]),
        Plan("thp", [runtime("thp", "/sys/kernel/mm/transparent_hugepage/enabled")]),
        Plan("c-states", [Change("c-states", "kernel command line", "", "x=1", Scope.BOOT, "advice")]),
    ]


class EveryScopeBackend(FakeBackend):
    def plans(self) -> list[Plan]:
        return _every_scope()


def test_tune_preselects_only_process_scope_changes() -> None:
    app = make_app(EveryScopeBackend(), start="tune")

    async def steps(pilot: Pilot[None]) -> None:
        screen = app.screen
        assert isinstance(screen, TuneScreen)
        assert screen.selected == {"c1.0", "c1.1"}  # tf-threads' two environment variables
        assert marks(app) == {
            "c0.0": "[ ]",  # runtime: system-wide, as root
            "c1.0": "[x]",
            "c1.1": "[x]",
            "c2.0": "[ ]",  # code: a snippet to paste, not a setting of the job
            "c3.0": "[ ]",
            "c4.0": " - ",  # boot: advice
        }
        assert "2 of 5 selected" in text_of(app, "#tune-state")

    drive(app, steps)


def test_tune_applied_changes_show_as_applied_and_are_never_selected_again() -> None:
    backend = FakeBackend()  # plans the same after an apply, as a profile setting is planned again
    app = make_app(backend, start="tune")

    async def steps(pilot: Pilot[None]) -> None:
        screen = app.screen
        assert isinstance(screen, TuneScreen)
        await press(pilot, "p", "y")  # the preselection: tf-threads
        assert [p.tuner for p in backend.applied[0]] == ["tf-threads"]
        # planned again: the same changes, tf-threads applied and not selected
        assert marks(app) == {THP: "[ ]", TF: "ok", BOOT: " - ", NOTE: ""}
        assert screen.selected == set()
        assert "1 applied (ok); 0 of 1 selected" in text_of(app, "#tune-state")
        await press(pilot, "down", "space")  # selecting it is refused, saying why
        assert screen.selected == set()
        said = "tf-threads: env TF_NUM_INTRAOP_THREADS: applied here, journal 20261123-120000-abcd"
        assert any(m.startswith(said) for _, m in notifications(app))
        assert "applied here, journal 20261123-120000-abcd" in text_of(app, "#tune-detail")
        await press(pilot, "a")  # all: what remains
        assert screen.selected == {THP}
        await press(pilot, "p", "y")
        assert [p.tuner for p in backend.applied[1]] == ["thp"]
        assert marks(app)[THP] == marks(app)[TF] == "ok"
        assert screen.selected == set()
        await press(pilot, "r", "a", "p")  # planned again, by hand: still nothing to select
        assert screen.selected == set()
        assert isinstance(app.screen, TuneScreen)  # no confirmation
        assert len(backend.applied) == 2

    drive(app, steps)


@dataclass
class SlowReplanBackend(FakeBackend):
    """Every plan after the first waits for `replan`: the screen between an apply and its re-plan."""

    replan: threading.Event = field(default_factory=threading.Event)
    planned: int = 0

    def plans(self) -> list[Plan]:
        self.planned += 1
        if self.planned > 1:
            self.replan.wait(10)
        return super().plans()


def test_tune_marks_the_applied_changes_before_the_new_plan_arrives() -> None:
    backend = SlowReplanBackend()
    app = make_app(backend, start="tune")

    async def steps(pilot: Pilot[None]) -> None:
        screen = app.screen
        assert isinstance(screen, TuneScreen)
        await press(pilot, "a")  # all: thp and tf-threads
        await pilot.press("p")
        await pilot.pause()
        await pilot.press("y")
        for _ in range(100):
            await pilot.pause(0.05)
            if backend.applied and not screen.busy:
                break
        assert marks(app)[THP] == marks(app)[TF] == "ok"
        assert screen.selected == set()
        assert "planning..." in text_of(app, "#tune-state")
        backend.replan.set()
        await settle(pilot)
        assert marks(app)[THP] == marks(app)[TF] == "ok"
        assert "planning" not in text_of(app, "#tune-state")

    drive(app, steps)


def test_tune_revert_makes_its_changes_selectable_again() -> None:
    backend = FakeBackend()
    app = make_app(backend, start="tune")

    async def steps(pilot: Pilot[None]) -> None:
        await press(pilot, "p", "y")
        assert marks(app)[TF] == "ok"
        await press(pilot, "v", "enter", "y")
        assert backend.reverted == ["20261123-120000-abcd"]
        assert marks(app)[TF] == "[x]"  # the profile setting is gone: preselected again
        assert "applied" not in text_of(app, "#tune-state")

    drive(app, steps)


# -- the profile that `nodeagent exec` applies: what it already holds is not selected again ------
TF_KEY = "TF_NUM_INTRAOP_THREADS"  # the fake plan's process change: env TF_NUM_INTRAOP_THREADS = 64


def test_tune_a_process_change_already_in_the_profile_is_ok_and_not_selected() -> None:
    backend = FakeBackend(profile={"name": "default", "env": {TF_KEY: "64"}})  # as `tune --apply` left it
    app = make_app(backend, start="tune")

    async def steps(pilot: Pilot[None]) -> None:
        screen = app.screen
        assert isinstance(screen, TuneScreen)
        assert marks(app) == {THP: "[ ]", TF: "ok", BOOT: " - ", NOTE: ""}
        assert screen.selected == set()
        assert "1 applied (ok); 0 of 1 selected" in text_of(app, "#tune-state")
        await press(pilot, "down")
        detail = text_of(app, "#tune-detail")
        assert f"in profile {PROFILE_PATH}" in detail
        assert "journal" not in detail  # not applied in this session
        await press(pilot, "space")  # refused, saying why
        assert screen.selected == set()
        said = f"tf-threads: env {TF_KEY}: in profile {PROFILE_PATH}"
        assert any(m.startswith(said) for _, m in notifications(app))
        await press(pilot, "a")  # all: only what is left
        assert screen.selected == {THP}
        await press(pilot, "p", "y")
        assert [p.tuner for p in backend.applied[0]] == ["thp"]

    drive(app, steps)


def test_tune_a_profile_with_another_value_leaves_the_change_selected() -> None:
    backend = FakeBackend(profile={"name": "default", "env": {TF_KEY: "32", "OMP_NUM_THREADS": "64"}})
    app = make_app(backend, start="tune")

    async def steps(pilot: Pilot[None]) -> None:
        screen = app.screen
        assert isinstance(screen, TuneScreen)
        assert marks(app)[TF] == "[x]"  # 32 saved, 64 planned: applying changes the profile
        assert screen.selected == {TF}
        assert "applied" not in text_of(app, "#tune-state")
        await press(pilot, "down")
        assert "in profile" not in text_of(app, "#tune-detail")

    drive(app, steps)


def test_tune_after_a_restart_shows_what_the_profile_holds_until_it_is_reverted() -> None:
    backend = FakeBackend()  # one node: its profile outlives the TUI
    first = make_app(backend, start="tune")

    async def apply_tf(pilot: Pilot[None]) -> None:
        await press(pilot, "p", "y")  # the preselection: tf-threads, saved in the profile
        assert marks(first)[TF] == "ok"
        assert f"process settings saved in {PROFILE_PATH}" in text_of(first, "#tune-result")

    drive(first, apply_tf)
    assert backend.profile is not None and backend.profile["env"] == {TF_KEY: "64"}
    again = make_app(backend, start="tune")  # a fresh start: nothing applied in this session

    async def steps(pilot: Pilot[None]) -> None:
        screen = again.screen
        assert isinstance(screen, TuneScreen)
        assert screen.applied == {}
        assert marks(again)[TF] == "ok"
        assert screen.selected == set()
        await press(pilot, "down")
        assert f"in profile {PROFILE_PATH}" in text_of(again, "#tune-detail")
        await press(pilot, "v", "enter", "y")  # the revert restores the profile as it was
        assert backend.profile is None
        assert marks(again)[TF] == "[x]"
        assert screen.selected == {TF}

    drive(again, steps)


def test_tune_an_unreadable_profile_is_a_warning_and_the_plan_is_shown() -> None:
    broken = f"{PROFILE_PATH}: not a readable profile (Expecting value: line 1 column 1 (char 0))"
    app = make_app(FakeBackend(profile_error=broken), start="tune")

    async def steps(pilot: Pilot[None]) -> None:
        assert ("warning", f"reading the profile: {broken}") in notifications(app)
        assert marks(app) == {THP: "[ ]", TF: "[x]", BOOT: " - ", NOTE: ""}

    drive(app, steps)


def test_tune_only_process_changes_are_marked_from_the_profile() -> None:
    # env.A as planned, env.B not there; the code snippet saved too, but code is a snippet to paste
    saved = {"env": {"A": "1"}, "snippets": {"tf-data": "1"}}
    app = make_app(EveryScopeBackend(profile=saved), start="tune")

    async def steps(pilot: Pilot[None]) -> None:
        screen = app.screen
        assert isinstance(screen, TuneScreen)
        assert marks(app) == {
            "c0.0": "[ ]",
            "c1.0": "ok",
            "c1.1": "[x]",
            "c2.0": "[ ]",
            "c3.0": "[ ]",
            "c4.0": " - ",
        }
        assert screen.selected == {"c1.1"}

    drive(app, steps)


def test_saved_profile_compares_values_as_the_profile_stores_them() -> None:
    def change(key: str, value: Any) -> Change:
        return Change("t", key, "", str(value), Scope.PROCESS, "why", profile_key=key, value=value)

    entries = ({"local_rank": 0, "cpus": (0, 1)}, {"local_rank": 1, "cpus": (2, 3)})
    doc: dict[str, Any] = {
        "rank_env": {"0": {"OMP_NUM_THREADS": "8"}},
        "ranks": [{"local_rank": 0, "cpus": [0, 1]}, {"local_rank": 1, "cpus": [2, 3]}],
        "launcher": {"cpu_dma_latency_us": 10, "memlock_soft": "unlimited"},
        "env": "not a mapping",
    }
    saved = SavedProfile("default", PROFILE_PATH, doc)
    assert saved.holds(change("rank_env.0.OMP_NUM_THREADS", "8"))
    assert not saved.holds(change("rank_env.1.OMP_NUM_THREADS", "8"))  # absent
    assert saved.holds(change("ranks", list(entries)))  # tuples are JSON lists
    assert not saved.holds(change("ranks", list(entries[:1])))
    assert saved.holds(change("launcher.cpu_dma_latency_us", 10))
    assert not saved.holds(change("launcher.cpu_dma_latency_us", "10"))  # "10" is not 10 in JSON
    assert not saved.holds(change("env.OMP_NUM_THREADS", "8"))  # not under a mapping
    assert not saved.holds(Change("t", "x", "", "y", Scope.PROCESS, "why"))  # no profile_key


def test_local_backend_reads_the_profile_that_apply_saves(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv(STATE_ENV, str(tmp_path))
    backend = LocalBackend(root=str(VM))
    assert backend.saved_profile() is None  # no profile yet
    plans = backend.plans()
    process = [c for p in plans for c in p.changes if c.scope is Scope.PROCESS and c.profile_key]
    assert process  # the VM plans process settings (tf-threads at least)
    # Saved as apply.apply saves them: every one of the real tuners' values compares equal.
    settings = [(c.profile_key, c.value) for c in process if c.profile_key]
    path = profiles.profile_path("default", tmp_path)
    profiles.save(path, profiles.merged({}, settings, "default", "vm"))
    saved = backend.saved_profile()
    assert saved is not None and saved.path == path and saved.name == "default"
    assert all(saved.holds(c) for c in process)
    path.write_text("{")
    with pytest.raises(UsageError, match="not a readable profile"):
        backend.saved_profile()


REFUSAL = "applying thp writes /sys and needs root; nothing was changed (see [sudo])"


class RefusingBackend(FakeBackend):
    def apply(self, plans: list[Plan]) -> Any:
        raise UsageError(REFUSAL)


def test_tune_apply_error_is_a_notification_and_the_app_goes_on() -> None:
    backend = RefusingBackend()
    app = make_app(backend, start="tune")

    async def steps(pilot: Pilot[None]) -> None:
        await press(pilot, "p", "y")
        message = f"applying the plan: {REFUSAL}"
        assert ("error", message) in notifications(app)  # brackets kept: not read as markup
        assert app.is_running
        assert isinstance(app.screen, TuneScreen)
        assert "needs root" in text_of(app, "#tune-result")
        assert marks(app)[TF] == "[x]"  # nothing was applied: nothing is marked so
        await press(pilot, "p")  # not stuck "applying"
        assert isinstance(app.screen, ConfirmScreen)

    drive(app, steps)


def test_tune_on_a_recorded_snapshot_is_read_only() -> None:
    app = make_app(LocalBackend(root=str(VM)), start="tune")

    async def steps(pilot: Pilot[None]) -> None:
        state = text_of(app, "#tune-state").replace("\n", " ")
        assert f"READ-ONLY: a recorded snapshot ({VM}) is read-only" in state
        rows = {r[1] for r in (row_text(app, "#plan", str(k.value)) for k in table(app, "#plan").rows)}
        assert {"tf-threads", "thp", "numa-balancing", "c-states"} <= rows
        t = table(app, "#plan")
        notes = [str(t.get_row(k)[2]) for k in t.rows if str(k.value).startswith("n")]
        assert any(n.startswith("one NUMA node") for n in notes)  # numa-balancing has nothing to do
        await press(pilot, "p")
        assert isinstance(app.screen, TuneScreen)
        assert any(sev == "warning" and str(VM) in msg for sev, msg in notifications(app))

    drive(app, steps)


def test_tune_columns_widen_at_120x40() -> None:
    app = make_app(FakeBackend(), start="tune")

    async def steps(pilot: Pilot[None]) -> None:
        t = table(app, "#plan")
        # not cut at 120 columns
        assert t.ordered_columns[t.get_column_index("target")].width >= len("transparent_hugepage/enabled")
        assert t.virtual_size.width <= 120
        assert t.max_scroll_x == 0
        await press(pilot, "p", "y")
        assert "OK thp: madvise read back" in text_of(app, "#tune-result")

    drive(app, steps, size=(120, 40))
