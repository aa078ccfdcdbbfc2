"""Parser for `nvidia-smi topo -m` (and `-mp`): the GPU/NIC affinity matrix as the driver sees it.

Both layouts are handled: NICs named in the header (mlx5_0 ...) and the newer NIC0..NICn columns
with a "NIC Legend:" block naming them. Cells: X (self), PIX, PXB, PHB, NODE, SYS, NV# (a bonded
set of # NVLinks). Legend as printed by nvidia-smi; see also NVML's nvmlGpuTopologyLevel_t
(https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceEnumvs.html).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from nodeagent.core import parse

COMMAND = ("nvidia-smi", "topo", "-m")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_LINK = re.compile(r"^(X|PIX|PXB|PHB|NODE|SYS|SOC|NV\d+|N/A)$")

# Closeness, best first, for choosing the nearest NIC. SOC is the pre-2017 name of SYS.
LINK_RANK = {"X": 0, "PIX": 2, "PXB": 3, "PHB": 4, "NODE": 5, "SYS": 6, "SOC": 6}


def link_rank(link: str) -> int:
    return 1 if link.startswith("NV") else LINK_RANK.get(link, 99)


@dataclass(frozen=True)
class TopoMatrix:
    devices: list[str]  # column order, NICs under their real names (mlx5_0), not NIC0
    links: dict[str, dict[str, str]]  # row -> column -> cell ("N/A" where the driver printed it)
    cpu_affinity: dict[str, list[int] | None] = field(default_factory=dict)  # per GPU
    numa_affinity: dict[str, int | None] = field(default_factory=dict)  # per GPU
    gpu_numa_id: dict[str, int | None] = field(default_factory=dict)  # per GPU, where printed
    notes: tuple[str, ...] = ()  # what the output lacked (NIC rows, legend entries, affinity cells)

    @property
    def gpus(self) -> list[str]:
        return [d for d in self.devices if re.fullmatch(r"GPU\d+", d)]

    @property
    def nics(self) -> list[str]:
        return [d for d in self.devices if d not in self.gpus]

    def link(self, a: str, b: str) -> str | None:
        cell = self.links.get(a, {}).get(b)
        if cell is None:  # the matrix is symmetric: a NIC without a row is read from the GPU rows
            cell = self.links.get(b, {}).get(a)
        return cell

    def nvlinks(self, gpu: str) -> dict[str, int]:
        """Peer GPU -> number of bonded NVLinks (the # of an NV# cell)."""
        return {
            peer: int(cell[2:])
            for peer in self.gpus
            if (cell := self.link(gpu, peer) or "").startswith("NV") and parse.is_decimal(cell[2:])
        }

    def nearest_nics(self, gpu: str) -> list[str]:
        """The NICs with the closest PCIe path to `gpu` (all ties), none when every NIC is SYS."""
        ranked = [(link_rank(self.link(gpu, n) or "SYS"), n) for n in self.nics]
        best = min((r for r, _ in ranked), default=99)
        if best >= LINK_RANK["SYS"]:
            return []
        return [n for r, n in ranked if r == best]


@dataclass(frozen=True)
class _Header:
    line: str
    columns: list[str]  # every column after the row label, multi-word names kept whole
    starts: list[int]  # where each column's name starts in the (tab-expanded) header line
    tabs: bool

    @property
    def devices(self) -> list[str]:
        return [c for c in self.columns if c not in _INFO_COLUMNS]


_INFO_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_HEADER_TOKEN = re.compile("|".join(map(re.escape, _INFO_COLUMNS)) + r"|GPU\d+|\S+")
_GLUED = re.compile(r"(?:GPU\d+){2,}\S*")  # "GPU0GPU1...GPU7mlx5_0": a header printed without tabs
_UNSET = ("", "N/A")


def _header(line: str) -> _Header:
    tabs = "\t" in line
    if tabs:
        # The row-label column is an empty first cell; some drivers print the header without it.
        columns = [c.strip() for c in line.split("\t")]
        columns = columns[1:] if not columns[0] else columns
        while columns and not columns[-1]:
            columns.pop()
        columns = [
            part for c in columns for part in (re.findall(r"GPU\d+|\S+", c) if _GLUED.fullmatch(c) else [c])
        ]
        starts: list[int] = []
    else:
        found = list(_HEADER_TOKEN.finditer(line.expandtabs(8)))
        columns, starts = [m.group() for m in found], [m.start() for m in found]
    return _Header(line, columns, starts, tabs)


def _row_cells(header: _Header, line: str) -> tuple[str, dict[str, str]] | None:
    """The row label and its cells by column name, or None when the cells cannot be placed.

    Tab-separated output (what nvidia-smi prints) is read by tab position, so an empty cell stays
    empty. Output whose tabs became spaces is read by the header's column positions; when those do
    not line up, the matrix cells (never empty) are still read in order and the info columns only
    when the count leaves no doubt.
    """
    if header.tabs and "\t" in line:
        parts = [c.strip() for c in line.split("\t")]
        label, values = parts[0], parts[1:]
        n = len(header.devices)
        if len(values) < n:
            return None
        return label, {**dict(zip(header.devices, values, strict=False)), **_info_cells(header, values[n:])}
    retabbed = _retab(line)
    if retabbed is not None and header.starts:
        return _row_cells(dataclasses.replace(header, tabs=True), retabbed)
    words = line.split()
    n = len(header.devices)
    if len(words) < n + 1:
        return None
    label, matrix, tail = words[0], words[1 : n + 1], words[n + 1 :]
    cells = dict(zip(header.devices, matrix, strict=True))
    info = [c for c in header.columns if c in _INFO_COLUMNS]
    # Re-spaced by hand: the info cells are known only when their count leaves no doubt.
    cells.update(zip(info, tail, strict=True) if len(tail) == len(info) else dict.fromkeys(info, "?"))
    return label, cells


def _retab(line: str) -> str | None:
    """Output whose tabs were expanded to spaces, with the tabs put back; None when the words do not
    sit on 8-column tab stops (spaced by hand). Each tab moves to the next multiple of 8, so the
    stops between two words are the tabs between them; an empty cell is one more tab."""
    expanded = line.expandtabs(8)
    out: list[str] = []
    end = 0
    for m in re.finditer(r"\S+", expanded):
        start = m.start()
        if m.group() == "X" and expanded[start - 1 : start] == " ":
            start -= 1  # the diagonal cell is printed " X "
        if out and start % 8:
            return None
        if out:
            out.append("\t" * (start // 8 - end // 8))
        out.append(m.group())
        end = m.end()
    return "".join(out)


def _info_cells(header: _Header, tail: list[str]) -> dict[str, str]:
    """The info cells of a tab-separated row (what follows the matrix cells).

    Drivers pad these cells with extra tabs, and not the same way: R3xx-R4xx print
    "cpus\t\tnuma", newer ones "cpus\tnuma\t\tgpu-numa-id", and NIC rows end in empty cells. The
    CPU Affinity cell comes right after the matrix (empty inside a cpuset that excludes the GPU's
    CPUs); the later columns take the following non-empty cells in order. More non-empty cells
    than columns make every info cell "?" (unknown) rather than a guess.
    """
    info = [c for c in header.columns if c in _INFO_COLUMNS]
    if not info:
        return {}
    first, rest = (tail[0] if tail else ""), [c for c in tail[1:] if c]
    if len(rest) > len(info) - 1:
        return dict.fromkeys(info, "?")
    rest += [""] * (len(info) - 1 - len(rest))
    return dict(zip(info, [first, *rest], strict=True))


def _legend(lines: list[str]) -> dict[str, str]:
    """Newer drivers name NIC columns NIC0..NICn and map them below the legend: "  NIC0: mlx5_0"."""
    legend: dict[str, str] = {}
    for line in lines:
        m = re.match(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$", line)
        if m:
            legend[m.group(1)] = m.group(2)
    return legend


def _cpus(cell: str, gpu: str, notes: list[str]) -> list[int] | None:
    if cell in _UNSET or cell == "?":
        return None
    try:
        return parse.cpulist(cell)
    except ValueError:
        notes.append(f"{gpu}: CPU Affinity {cell!r} is not a CPU list")
        return None


def _number(cell: str) -> int | None:
    return int(cell) if parse.is_decimal(cell) else None


def _is_header(line: str) -> bool:
    """The header names GPU0 first (some drivers glue the names together) and has no X cell."""
    words = line.split()
    return bool(words) and words[0].startswith("GPU0") and "X" not in words


@dataclass
class _Rows:
    """The matrix and affinity cells of the rows read, by device name (NICs under their real names)."""

    links: dict[str, dict[str, str]] = field(default_factory=dict)
    cpu_aff: dict[str, list[int] | None] = field(default_factory=dict)
    numa_aff: dict[str, int | None] = field(default_factory=dict)
    gpu_numa: dict[str, int | None] = field(default_factory=dict)


def parse_topo(text: str) -> TopoMatrix:
    """Parse `nvidia-smi topo -m` (or `-mp`) output; ValueError when it holds no complete matrix.

    Strict where a wrong answer would cost: every GPU column needs its row, every row its "X" on
    the diagonal, and no cell may land in another column. Lenient where the output is merely
    short: NIC rows may be absent (the GPU rows hold the same cells), an empty or N/A affinity
    cell is unknown, and NIC columns without a legend keep their NICn names. What was missing is
    listed in `notes`.
    """
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    # The header is the first line that starts with GPU0 and is not a row (a warning above it may
    # mention GPU0 too, but not first).
    header_at = next((i for i, line in enumerate(lines) if _is_header(line)), None)
    if header_at is None:
        raise ValueError("no GPU0 column: not `nvidia-smi topo -m` output")
    header = _header(lines[header_at])
    devices = header.devices
    if len(set(devices)) != len(devices):
        raise ValueError(f"repeated column in the header: {lines[header_at].strip()!r}")
    body = lines[header_at + 1 :]
    legend = _legend(body)
    notes: list[str] = []
    rows = _read_rows(header, body, legend, notes)
    _check_complete(header, rows, legend, notes)
    names = [legend.get(d, d) for d in devices]
    return TopoMatrix(names, rows.links, rows.cpu_aff, rows.numa_aff, rows.gpu_numa, tuple(notes))


def _read_rows(header: _Header, body: list[str], legend: dict[str, str], notes: list[str]) -> _Rows:
    """The rows below the header, up to the legend; ValueError on a row whose cells cannot be placed."""
    devices = header.devices
    rows = _Rows()
    for line in body:
        first = line.split()[:1]
        if not first:
            continue
        if first[0] in ("Legend:", "NIC") or first[0].startswith("Legend"):
            break
        if first[0] not in devices:
            continue
        row, cells = _matrix_row(header, line, first[0])
        rows.links[legend.get(row, row)] = {legend.get(d, d): cells.get(d, "") for d in devices}
        if row.startswith("GPU"):
            if "?" in cells.values():
                notes.append(f"{row}: the affinity cells do not line up with the header; read as unknown")
            rows.cpu_aff[row] = _cpus(cells.get("CPU Affinity", ""), row, notes)
            rows.numa_aff[row] = _number(cells.get("NUMA Affinity", ""))
            if "GPU NUMA ID" in header.columns:
                rows.gpu_numa[row] = _number(cells.get("GPU NUMA ID", ""))
    return rows


def _matrix_row(header: _Header, line: str, first: str) -> tuple[str, dict[str, str]]:
    """A row's label and cells, each matrix cell a link and "X" on the diagonal; else ValueError."""
    placed = _row_cells(header, line)
    if placed is None:
        raise ValueError(f"malformed row for {first}: {line.strip()!r}")
    row, cells = placed
    if not all(_LINK.match(cells.get(d, "")) for d in header.devices):
        raise ValueError(f"malformed row for {row}: {line.strip()!r}")
    if cells[row] != "X":
        raise ValueError(f"misaligned row for {row} (no X on the diagonal): {line.strip()!r}")
    return row, cells


def _check_complete(header: _Header, rows: _Rows, legend: dict[str, str], notes: list[str]) -> None:
    """ValueError without rows or with a GPU column lacking its row; notes for what is merely short."""
    devices = header.devices
    if not rows.links:
        raise ValueError("no matrix rows after the header")
    missing_gpus = [d for d in devices if d.startswith("GPU") and legend.get(d, d) not in rows.links]
    if missing_gpus:
        raise ValueError(f"truncated: no row for {', '.join(missing_gpus)}")
    missing_nics = [legend.get(d, d) for d in devices if legend.get(d, d) not in rows.links]
    if missing_nics:
        notes.append(f"no rows for {', '.join(missing_nics)}: NIC links read from the GPU rows")
    unnamed = [d for d in devices if re.fullmatch(r"NIC\d+", d) and d not in legend]
    if unnamed:
        notes.append(f"no NIC Legend entry for {', '.join(unnamed)}: device names unknown")
    for gpu, cpus in rows.cpu_aff.items():
        if cpus is None and "CPU Affinity" in header.columns:
            notes.append(
                f"{gpu}: no CPU Affinity (empty or N/A: e.g. a job whose cpuset excludes those CPUs)"
            )
