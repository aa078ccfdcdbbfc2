"""Topology: the GPU/NIC/NUMA matrix in `nvidia-smi topo -m` terms, coloured by how close each pair
is and readable without colour (the level letters are the information), with each GPU's CPU and
NUMA affinity as nvidia-smi prints them.

The matrix is the driver's (`facts["nvidia_smi_topo"]`, live or recorded) when there is one, else
the one the topology check derives from the PCI tree in sysfs, rebuilt here from the same facts
document with the check's own level rules (nodeagent.facts.pci_topology.matrix), so the screen
needs nothing from the backend but `facts()`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import DataTable, Footer, Header, Static

from nodeagent.core.finding import Status, worst
from nodeagent.core.parse import format_cpulist
from nodeagent.render.literal import lit, shown
from nodeagent.tui import messages
from nodeagent.tui.screens.base import NodeAgentScreen
from nodeagent.tui.widgets.status import status_text

SMI = "nvidia-smi topo -m"

# How good a link is for GPU<->GPU and GPUDirect RDMA traffic. NVLink and paths that stay below a
# PCIe switch are good; through the CPU's host bridge(s) is medium; across the inter-socket link is
# bad ("the two devices must share the same upstream PCI Express root complex",
# https://docs.nvidia.com/cuda/gpudirect-rdma/index.html; NCCL's default NCCL_P2P_LEVEL /
# NCCL_NET_GDR_LEVEL stop at PXB/PHB, https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html).
GRADE_STYLE = {"good": "green", "medium": "yellow", "bad": "bold red", "self": "dim", "unknown": "magenta"}

# nvidia-smi's own legend (the text it prints under the matrix), for the cell under the cursor.
MEANING = {
    "X": "self",
    "SYS": "connection traversing PCIe as well as the SMP interconnect between NUMA nodes (QPI/UPI)",
    "SOC": "connection traversing PCIe as well as the SMP interconnect between NUMA nodes (old name of SYS)",
    "NODE": "connection traversing PCIe as well as the interconnect between PCIe host bridges "
    "within a NUMA node",
    "PHB": "connection traversing PCIe as well as a PCIe host bridge (typically the CPU)",
    "PXB": "connection traversing multiple PCIe bridges (without traversing the PCIe host bridge)",
    "PIX": "connection traversing at most a single PCIe bridge",
}

CELL = 4  # the widest level, "NODE" / "NV12"
_GPU = re.compile(r"GPU\d+")


def grade(cell: str | None) -> str:
    if cell is None:
        return "unknown"
    if cell == "X":
        return "self"
    if cell.startswith("NV") or cell in ("PIX", "PXB"):
        return "good"
    if cell in ("PHB", "NODE"):
        return "medium"
    if cell in ("SYS", "SOC"):
        return "bad"
    return "unknown"


def meaning(cell: str | None) -> str:
    if cell is None:
        return "unknown: not placed in the PCI tree, and no nvidia-smi matrix"
    if cell.startswith("NV") and cell[2:].isdigit():
        return f"connection traversing a bonded set of {cell[2:]} NVLinks"
    return MEANING.get(cell, "not a level nvidia-smi prints")


@dataclass(frozen=True)
class Matrix:
    """What the screen shows: devices in nvidia-smi's order (GPUs, then NICs), the level of every
    pair (None: unknown), and the affinity columns of the GPU rows."""

    devices: list[str]
    links: dict[str, dict[str, str | None]]
    cpu_affinity: dict[str, str]
    numa_affinity: dict[str, str]
    source: str

    @property
    def gpus(self) -> list[str]:
        return [d for d in self.devices if _is_gpu(d)]

    def link(self, a: str, b: str) -> str | None:
        return self.links.get(a, {}).get(b)

    def label(self, device: str) -> str:
        """The column header: GPUs as named, NICs as NIC0..NICn (as recent drivers print them)."""
        if _is_gpu(device):
            return device
        nics = [d for d in self.devices if not _is_gpu(d)]
        return f"NIC{nics.index(device)}"


def _is_gpu(name: str) -> bool:
    return bool(_GPU.fullmatch(name)) or name.rsplit("-", maxsplit=1)[-1].startswith("GPU")


def _gpu_docs(facts: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The facts' GPUs under nvidia-smi's names. As in nodeagent.facts.pci_topology: NVIDIA GPUs are
    GPU0.. in PCI order, counted per vendor, so that GPU0 here is GPU0 for the driver; a GPU known
    only from a recorded nvidia-smi has its index and no PCI address."""
    out: dict[str, dict[str, Any]] = {}
    per_vendor: dict[str, int] = {}
    for g in facts.get("gpus") or []:
        if g.get("pci_address") is None:
            if g.get("index") is not None:
                out[f"GPU{g['index']}"] = g
            continue
        vendor = str(g.get("vendor") or "?")
        k = per_vendor.get(vendor, 0)
        per_vendor[vendor] = k + 1
        out[f"GPU{k}" if vendor == "NVIDIA" else f"{vendor}-GPU{k}"] = g
    return out


def _numa_cpus(facts: Mapping[str, Any], node: int | None) -> list[int] | None:
    for n in (facts.get("topology") or {}).get("numa_nodes") or []:
        if node is not None and n.get("id") == node:
            return list(n.get("cpus") or []) or None
    return None


def _affinity(
    facts: Mapping[str, Any], gpus: list[str], numa: Mapping[str, int | None]
) -> tuple[dict[str, str], dict[str, str]]:
    """CPU and NUMA Affinity columns: the GPU's local CPUs (what nvidia-smi prints, read from the
    device's local_cpulist), else its NUMA node's CPUs; "N/A" as nvidia-smi says when unknown."""
    docs = _gpu_docs(facts)
    cpu: dict[str, str] = {}
    node: dict[str, str] = {}
    for g in gpus:
        doc = docs.get(g, {})
        n = numa.get(g)
        if n is None:
            n = doc.get("numa_node")
        cpus = doc.get("cpu_affinity") or _numa_cpus(facts, n)
        cpu[g] = format_cpulist(cpus) if cpus else "N/A"
        node[g] = "N/A" if n is None or int(n) < 0 else str(n)
    return cpu, node


def _from_smi(facts: Mapping[str, Any], smi: Mapping[str, Any]) -> Matrix:
    devices = [str(d) for d in smi["devices"]]
    links: dict[str, dict[str, str | None]] = {
        a: {b: (None if cell is None else str(cell).strip()) for b, cell in row.items()}
        for a, row in smi["links"].items()
    }
    numa: dict[str, int | None] = {}
    for g, n in (smi.get("numa_affinity") or {}).items():
        numa[g] = int(n) if n is not None and str(n).lstrip("-").isdigit() else None
    gpus = [d for d in devices if _is_gpu(d)]
    cpu, node = _affinity(facts, gpus, numa)
    return Matrix(devices, links, cpu, node, f"`{SMI}`")


def _from_sysfs(facts: Mapping[str, Any]) -> Matrix | None:
    """The topology check's matrix, derived from the PCI tree in sysfs (facts["pci_topology"],
    nodeagent.facts.pci_topology): GPUs, then RDMA devices and the other netdevs."""
    pt = facts.get("pci_topology") or {}
    gpus = [str(e["name"]) for e in pt.get("gpus") or []]
    if not gpus:
        return None
    devices = gpus + [str(e["name"]) for e in pt.get("nics") or []]
    links = {a: {b: (pt.get("links") or {}).get(a, {}).get(b) for b in devices} for a in devices}
    for d in devices:  # the diagonal is X even for a device sysfs does not place
        links[d][d] = "X"
    numa = {str(e["name"]): e.get("numa_node") for e in pt["gpus"]}
    cpu, node = _affinity(facts, gpus, numa)
    return Matrix(devices, links, cpu, node, "the PCI tree in sysfs")


def matrix_from_facts(facts: Mapping[str, Any]) -> Matrix | None:
    """The driver's matrix when recorded, else the sysfs one; None when the node has no GPU."""
    smi = facts.get("nvidia_smi_topo")
    if smi and any(_is_gpu(str(d)) for d in smi.get("devices") or []):
        return _from_smi(facts, smi)
    return _from_sysfs(facts)


def no_gpu_reason(facts: Mapping[str, Any]) -> str:
    """Why there is no matrix, in the words of the topology check's SKIPPED finding."""
    pci = facts.get("pci")
    smi = next((n.split(": ", 1)[1] for n in facts.get("notes") or [] if n.startswith(f"{SMI}: ")), None)
    where = f"none among the {len(pci)} PCI device(s)" if pci is not None else "none in the facts"
    return f"no GPU: {where}; {SMI}: {smi or 'no GPU'}"


def legend() -> Text:
    """Two lines at 80 columns: each level with its grade in words, so no colour is needed."""
    t = Text()
    parts: list[tuple[str, str, str]] = [
        ("good", "NV#", "NVLinks"),
        ("good", "PIX", "one PCIe bridge"),
        ("good", "PXB", "several"),
        ("medium", "PHB", "host bridge"),
        ("medium", "NODE", "host bridges of a NUMA node"),
        ("bad", "SYS", "across sockets"),
        ("self", "X", "self"),
        ("unknown", "?", "unknown"),
    ]
    previous = ""
    for g, level, what in parts:
        if g in ("self", "unknown"):
            t.append("; " if g == "self" else ", ")
        elif g != previous:
            t.append(("; " if previous else "") + f"{g}: ", style="bold")
        else:
            t.append(", ")
        t.append(level, style=GRADE_STYLE[g])
        t.append(f" {what}")
        previous = g
    return t


def nic_legend(m: Matrix) -> Text | None:
    """Which NIC each NICn column is (nvidia-smi's "NIC Legend"), in one line where the names
    follow the numbering (mlx5_0..mlx5_11)."""
    nics = [d for d in m.devices if not _is_gpu(d) and m.label(d) != d]
    if not nics:
        return None
    t = Text("NICs: ", style="bold")
    stems = {re.sub(r"\d+$", "", n) for n in nics}
    numbered = all(n.removeprefix(next(iter(stems))) == m.label(n).removeprefix("NIC") for n in nics)
    if len(stems) == 1 and numbered and len(nics) > 2:
        t.append(shown(f"NICn is {next(iter(stems))}n ({m.label(nics[0])}-{m.label(nics[-1])})"))
    else:
        t.append(shown("  ".join(f"{m.label(n)} {n}" for n in nics)))
    return t


def _cell(level: str | None) -> Text:
    return lit(level or "?", style=GRADE_STYLE[grade(level)])


@dataclass
class TopologyLoaded(Message):
    """The facts were read: a matrix, or why there is none (no GPU), or the error that stopped it."""

    matrix: Matrix | None
    skipped: str | None = None
    error: str | None = None


class TopologyScreen(NodeAgentScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "reload", "Reload"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.matrix: Matrix | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(Text("reading the node...", style="dim"), id="topo-source")
        table: DataTable[Any] = DataTable(
            id="topo-matrix", cursor_type="cell", cell_padding=0, fixed_columns=1, show_row_labels=False
        )
        yield table
        yield Static(id="topo-cell")
        yield Static(id="topo-legend")
        yield Static(id="topo-check")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        for widget in ("#topo-matrix", "#topo-cell", "#topo-legend"):
            self.query_one(widget).display = False
        self.load()
        self.render_check()

    def on_screen_resume(self) -> None:
        self.render_check()

    def results_changed(self, message: messages.ResultsChanged) -> None:
        self.render_check()

    def action_reload(self) -> None:
        self.query_one("#topo-source", Static).update(Text("reading the node...", style="dim"))
        self.load()
        self.app.run_checks(["topology"])  # type: ignore[attr-defined]

    @work(thread=True, exclusive=True, group="topology")
    def load(self) -> None:
        app: Any = self.app
        try:
            facts = app.backend.facts()
        except Exception as e:
            self.post_message(TopologyLoaded(None, error=f"reading the node's facts: {e}"))
            return
        try:
            m = matrix_from_facts(facts)
            reason = None if m is not None else no_gpu_reason(facts)
        except (KeyError, TypeError, ValueError, AttributeError) as e:  # an odd document: say so
            self.post_message(TopologyLoaded(None, error=f"facts unreadable for the matrix: {e!r}"))
            return
        self.post_message(TopologyLoaded(m, skipped=reason))

    def on_topology_loaded(self, message: TopologyLoaded) -> None:
        self.matrix = message.matrix
        source = self.query_one("#topo-source", Static)
        has_matrix = message.matrix is not None
        for widget in ("#topo-matrix", "#topo-cell", "#topo-legend"):
            self.query_one(widget).display = has_matrix
        if message.error is not None:
            source.update(lit(message.error, style="red"))
            self.app.notify(message.error, title="error", severity="error", markup=False)
            return
        if message.matrix is None:
            line = status_text(Status.SKIPPED)
            line.append(shown(f" {message.skipped or 'no GPU'}"))
            source.update(line)
            return
        m = message.matrix
        nics = len(m.devices) - len(m.gpus)
        source.update(lit(f"{len(m.gpus)} GPU(s), {nics} NIC(s); matrix from {m.source}"))
        self.fill_table(m)
        text = legend()
        nic_line = nic_legend(m)
        if nic_line is not None:
            text = Text("\n").join([nic_line, text])
        self.query_one("#topo-legend", Static).update(text)

    def fill_table(self, m: Matrix) -> None:
        table = self.query_one("#topo-matrix", DataTable)
        table.clear(columns=True)
        name_width = max(len(m.label(d)) for d in m.devices) + 1
        table.add_column("", key="device", width=name_width)
        for d in m.devices:
            # One blank after each cell: with cell_padding 0, eight GPUs and two NICs fit 80 columns.
            table.add_column(lit(m.label(d)), key=d, width=max(CELL, len(m.label(d))) + 1)
        cpu_width = max([len("CPUs"), *(len(c) for c in m.cpu_affinity.values())]) + 1
        # Headers shortened ("CPU Affinity", "NUMA Affinity" in nvidia-smi) for the 80-column fit.
        table.add_column("CPUs", key="cpu", width=cpu_width)
        table.add_column("NUMA", key="numa", width=len("NUMA"))
        for a in m.devices:
            row: list[Text] = [lit(m.label(a), style="bold")]
            row += [_cell(m.link(a, b)) for b in m.devices]
            # nvidia-smi prints the affinity columns for GPU rows only.
            row += [lit(m.cpu_affinity.get(a, "")), lit(m.numa_affinity.get(a, ""))]
            table.add_row(*row, key=a)
        if len(m.devices) > 1:
            table.move_cursor(row=0, column=2)

    def on_data_table_cell_highlighted(self, event: DataTable.CellHighlighted) -> None:
        m = self.matrix
        if m is None:
            return
        a = str(event.cell_key.row_key.value)
        b = str(event.cell_key.column_key.value)
        self.query_one("#topo-cell", Static).update(self.describe(m, a, b))

    @staticmethod
    def describe(m: Matrix, a: str, b: str) -> Text:
        """The cell under the cursor in full: both devices' names, the level and what it means."""

        def named(d: str) -> str:
            return d if m.label(d) == d else f"{m.label(d)} ({d})"

        if b in m.devices:
            level = m.link(a, b)
            t = lit(f"{named(a)} - {named(b)}: ")
            t.append(shown(level or "?"), style=GRADE_STYLE[grade(level)])
            t.append(shown(f" ({grade(level)}) {meaning(level)}"))
            return t
        if a in m.cpu_affinity:
            return Text(
                f"{a}: CPU affinity {m.cpu_affinity[a]}, NUMA affinity {m.numa_affinity.get(a, 'N/A')}"
            )
        return lit(f"{named(a)}: nvidia-smi gives no affinity for NICs")

    def render_check(self) -> None:
        """The topology check's verdict in one line (its findings are on screen 2, Checks)."""
        app: Any = self.app
        result = app.results.get("topology")
        line = Text("topology check: ", style="bold")
        if result is None:
            line.append("running..." if "topology" in app.running else "not run yet", style="dim")
        else:
            findings = result.findings
            status = worst(f.status for f in findings)
            line.append_text(status_text(status))
            flagged = [f for f in findings if f.status is status]
            if flagged:
                line.append(shown(f" {flagged[0].summary}"))
            if len(flagged) > 1:
                line.append(f" (+{len(flagged) - 1} more on screen 2)", style="dim")
        self.query_one("#topo-check", Static).update(line)
