"""The `nvidia-smi topo -m` parser on published outputs of real machines, and on broken ones."""

from __future__ import annotations

import re

import pytest

from nodeagent.facts.topo_matrix import TopoMatrix, link_rank, parse_topo
from tests.support.helpers import nvidia_smi_text

A100 = "topo-m-dgx-a100.txt"
DGX1 = "topo-m-dgx1-pcie.txt"

# Recent drivers (R470 on) print NIC columns as NIC0..NICn and name them after the legend, like
# this DGX A100 output (tabs as printed; NIC rows end with empty CPU/NUMA Affinity cells):
#   \tGPU0\t...\tNIC0\t...\tNIC9\tCPU Affinity\tNUMA Affinity
#   NIC0\tPXB\tPXB\tSYS...\t X \tPXB\tSYS...\t\t
#   ...
#   NIC Legend:
#
#     NIC0: mlx5_0
NIC_LEGEND_HEADER = "NIC Legend:"


def _nic_form(text: str, gpu_numa_id: bool = False) -> str:
    """The A100 fixture as a recent driver prints it: NICn columns and rows, the legend at the end."""
    names = re.findall(r"\bmlx5_\d+\b", text.splitlines()[0])
    lines = []
    for original in text.splitlines():
        line = original
        for i, name in enumerate(names):
            line = re.sub(rf"\b{re.escape(name)}\b", f"NIC{i}", line)
        if line.startswith("NIC"):
            line += "\t\t" + ("\t" if gpu_numa_id else "")
        elif gpu_numa_id and line.startswith("GPU"):
            line += "\t\tN/A"
        elif gpu_numa_id and line.startswith("\tGPU0"):
            line += "\tGPU NUMA ID"
        lines.append(line)
    legend = ["", NIC_LEGEND_HEADER, ""] + [f"  NIC{i}: {n}" for i, n in enumerate(names)] + [""]
    return "\n".join(lines + legend) + "\n"


def _ansi(text: str) -> str:
    """As on a terminal: the header underlined, the row labels bold."""
    lines = text.splitlines()
    lines[0] = "\x1b[4m" + lines[0] + "\x1b[0m"
    return "\n".join(re.sub(r"^(GPU\d+|mlx5_\d+|NIC\d+)", "\x1b[1m\\1\x1b[0m", line) for line in lines)


def _same(a: TopoMatrix, b: TopoMatrix) -> None:
    assert a.devices == b.devices
    assert a.links == b.links
    assert a.cpu_affinity == b.cpu_affinity
    assert a.numa_affinity == b.numa_affinity


def test_dgx_a100() -> None:
    m = parse_topo(nvidia_smi_text(A100))
    assert m.gpus == [f"GPU{i}" for i in range(8)]
    assert m.nics == [f"mlx5_{i}" for i in range(12)]
    assert m.cpu_affinity["GPU0"] == [*range(48, 64), *range(176, 192)]
    assert m.numa_affinity["GPU0"] == 3
    assert m.cpu_affinity["GPU2"] == [*range(16, 32), *range(144, 160)]
    assert m.numa_affinity["GPU2"] == 1
    assert [m.numa_affinity[g] for g in m.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert m.nearest_nics("GPU0") == ["mlx5_0", "mlx5_1"]
    assert m.link("GPU0", "mlx5_0") == "PXB"
    assert m.link("GPU0", "GPU1") == "NV12"
    assert m.link("GPU7", "GPU6") == "NV12"
    assert m.link("GPU0", "GPU0") == "X"
    assert m.link("mlx5_4", "mlx5_5") == "PIX"
    assert m.nearest_nics("GPU6") == ["mlx5_8", "mlx5_9"]
    assert "mlx5_0" not in m.cpu_affinity  # NIC rows carry no affinity


def test_dgx1_pcie_paths() -> None:
    m = parse_topo(nvidia_smi_text(DGX1))
    assert m.gpus == [f"GPU{i}" for i in range(8)]
    assert m.nics == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert m.link("GPU0", "GPU1") == "PIX"
    assert m.link("GPU0", "GPU2") == "PHB"
    assert m.link("GPU0", "GPU4") == "SYS"
    assert m.link("mlx5_3", "GPU7") == "PIX"
    assert m.link("mlx5_3", "mlx5_3") == "X"  # the last cell of the last row, no trailing blank
    assert m.nearest_nics("GPU2") == ["mlx5_1"]
    assert m.cpu_affinity["GPU4"] == [*range(20, 40), *range(60, 80)]
    assert m.numa_affinity == {f"GPU{i}": 0 if i < 4 else 1 for i in range(8)}


@pytest.mark.parametrize("gpu_numa_id", [False, True])
def test_nic_legend_form_names_nics(gpu_numa_id: bool) -> None:
    plain = parse_topo(nvidia_smi_text(A100))
    text = _nic_form(nvidia_smi_text(A100), gpu_numa_id)
    assert "\tNIC11\t" in text and "  NIC11: mlx5_11" in text and "mlx5_0\t" not in text
    _same(parse_topo(text), plain)


def test_ansi_escapes_and_crlf() -> None:
    plain = parse_topo(nvidia_smi_text(A100))
    _same(parse_topo(_ansi(nvidia_smi_text(A100)).replace("\n", "\r\n")), plain)
    _same(parse_topo(_ansi(_nic_form(nvidia_smi_text(A100)))), plain)


def test_noise_before_the_matrix_is_ignored() -> None:
    text = "Warning: GPU0 is in a degraded state\n\n" + nvidia_smi_text(DGX1)
    assert parse_topo(text).link("GPU0", "GPU1") == "PIX"


def test_legacy_soc_cell() -> None:
    text = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSOC\t0-7\nGPU1\tSOC\t X \t8-15\n"
    m = parse_topo(text)
    assert m.link("GPU0", "GPU1") == "SOC" and link_rank("SOC") == link_rank("SYS")
    assert m.cpu_affinity == {"GPU0": list(range(8)), "GPU1": list(range(8, 16))}
    assert m.numa_affinity == {"GPU0": None, "GPU1": None}


def _drop_cell(text: str, row: str) -> str:
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith(row + "\t"))
    cells = lines[i].split("\t")
    del cells[3]
    lines[i] = "\t".join(cells)
    return "\n".join(lines)


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param(lambda a: "", id="empty"),
        pytest.param(
            lambda a: "NVIDIA-SMI has failed because it couldn't communicate with the driver.\n",
            id="no-driver",
        ),
        pytest.param(lambda a: a.splitlines()[0] + "\n", id="header-only"),
        pytest.param(lambda a: "\n".join(a.splitlines()[:5]), id="truncated-rows"),
        pytest.param(lambda a: a.replace("PXB", "FOO", 1), id="unknown-cell"),
        pytest.param(lambda a: _drop_cell(a, "GPU3"), id="short-row"),
        pytest.param(lambda a: _drop_cell(a, "mlx5_7"), id="short-nic-row"),
        pytest.param(lambda a: a.replace("GPU1\tNV12\t X ", "GPU1\t X \tNV12", 1), id="misaligned"),
        pytest.param(lambda a: a.replace("\tGPU1\t", "\tGPU0\t", 1), id="repeated-column"),
    ],
)
def test_malformed_input_raises_value_error(broken: object) -> None:
    text = broken(nvidia_smi_text(A100))  # type: ignore[operator]
    with pytest.raises(ValueError):
        parse_topo(text)


def _without_cpu_affinity(text: str, gpus: range) -> str:
    """As recorded inside a job whose cpuset holds none of these GPUs' CPUs: the cell is empty."""
    out = []
    for line in text.splitlines():
        cells = line.split("\t")
        if cells[0] in {f"GPU{i}" for i in gpus}:
            cells[-2] = ""
        out.append("\t".join(cells))
    return "\n".join(out) + "\n"


def test_empty_cpu_affinity_cells_do_not_shift_the_numa_column() -> None:
    m = parse_topo(_without_cpu_affinity(nvidia_smi_text(A100), range(4, 8)))
    assert [m.cpu_affinity[f"GPU{i}"] for i in range(4, 8)] == [None] * 4
    assert [m.numa_affinity[g] for g in m.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert m.cpu_affinity["GPU0"] == [*range(48, 64), *range(176, 192)]
    assert any("GPU4: no CPU Affinity" in n for n in m.notes)


def test_tabs_expanded_to_spaces_are_put_back() -> None:
    tabbed = nvidia_smi_text(A100)
    _same(parse_topo(tabbed.expandtabs(8)), parse_topo(tabbed))
    # An empty cell in the space form is a run of spaces across one more tab stop: the NUMA value
    # stays in its column.
    emptied = _without_cpu_affinity(tabbed, range(4, 8))
    _same(parse_topo(emptied.expandtabs(8)), parse_topo(emptied))


def test_hand_spaced_output_keeps_only_unambiguous_cells() -> None:
    lines = [
        re.sub(r"\t+", "  ", line)
        for line in _without_cpu_affinity(nvidia_smi_text(A100), range(4, 5)).splitlines()
    ]
    m = parse_topo("\n".join(lines))
    assert m.link("GPU0", "GPU1") == "NV12"
    assert m.numa_affinity["GPU0"] == 3
    assert (m.cpu_affinity["GPU4"], m.numa_affinity["GPU4"]) == (None, None)


def test_gpu_numa_id_after_two_tabs() -> None:
    m = parse_topo(_nic_form(nvidia_smi_text(A100), gpu_numa_id=True))
    assert m.gpu_numa_id == dict.fromkeys(m.gpus, None)
    assert [m.numa_affinity[g] for g in m.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]


def test_matrix_without_nic_rows_keeps_every_gpu() -> None:
    text = "\n".join(line for line in nvidia_smi_text(A100).splitlines() if not line.startswith("mlx5_"))
    m = parse_topo(text)
    assert m.gpus == [f"GPU{i}" for i in range(8)]
    assert m.link("mlx5_0", "GPU0") == "PXB"
    assert m.nearest_nics("GPU6") == ["mlx5_8", "mlx5_9"]
    assert any("no rows for mlx5_0" in n for n in m.notes)


def test_nic_columns_without_a_legend_keep_their_names() -> None:
    m = parse_topo(_nic_form(nvidia_smi_text(A100)).split(NIC_LEGEND_HEADER)[0])
    assert m.nics == [f"NIC{i}" for i in range(12)]
    assert any("no NIC Legend entry" in n for n in m.notes)


def test_na_cells() -> None:
    text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tN/A\tN/A\tN/A\nGPU1\tN/A\t X \t0-7\t0\n"
    m = parse_topo(text)
    assert m.link("GPU0", "GPU1") == "N/A"
    assert m.cpu_affinity == {"GPU0": None, "GPU1": list(range(8))}
    assert m.numa_affinity == {"GPU0": None, "GPU1": 0}
