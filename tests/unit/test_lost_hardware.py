"""A node that lost hardware does not pass `preflight --playbook gpu-training`; the same node intact does.

The nodes are built from real recordings (tests/fixtures/corpus): one of GPU side, one of RDMA
side, put in one snapshot tree (nobody has published a whole recording of a GPU node with its
HCAs). The loss is then made the way the driver and the kernel show it, in the recorded files:
- a GPU that fell off the bus is missing from `nvidia-smi -q -x` (one <gpu> element fewer and
  <attached_gpus> one lower, as nvidia-smi prints for the GPUs the driver still has);
- an HCA that is gone is missing from /sys/class/infiniband (its ibstat "CA" block removed);
- NVLinks that are down print "<inactive>" in `nvidia-smi nvlink -s` (as in the azhpc recording
  nvlink-azhpc-diagnostics-73-v100-two-links-down);
- a link that trained narrower prints a lower <current_link_width>.

The expected hardware comes from where a platform team has it: a playbook that includes
gpu-training and states `expect:`, or a baseline recorded on the intact node. With neither, a
node without any RDMA port and a GPU with NVLinks down fail gpu-training on their own.

The kernel check is skipped throughout (`gpu_training` below: gpu-training with skip_checks:
[kernel]): the recordings hold no /proc/self/limits, and the memlock rule of gpu-training would
(rightly) refuse a node whose limit it cannot read.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli
from tests.support.recorded_nodes import (
    GPUS,
    HCAS,
    NVLINK,
    NVLINK_S,
    SMI_XML,
    bus_ids,
    drop_gpu,
    drop_hca,
    node,
    save_baseline,
)


def gate(tree: Path, *args: str) -> tuple[int, dict[str, Any]]:
    result = run_cli("preflight", "--root", str(tree), "--format", "json", *args)
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.json()


def failing(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(f["check_id"], f["subject"], f["summary"]) for f in doc["findings"] if f["status"] == "FAIL"]


def user_playbook(tmp_path: Path, expect: str | None = None) -> str:
    """gpu-training without the kernel check, and with `expect` when given."""
    path = tmp_path / ("ours.yml" if expect else "gpu-training-recorded.yml")
    text = "description: our GPU nodes\ninclude: [gpu-training]\nskip_checks: [kernel]\n"
    path.write_text(text + (f"expect: {expect}\n" if expect else ""))
    return str(path)


@pytest.fixture
def k80_node(tmp_path: Path) -> Path:
    # Not named after the GPU: the fleet view hides the host's name wherever it appears in a key.
    return node(tmp_path, "node-a", GPUS, HCAS)


def test_the_intact_nodes_pass(tmp_path: Path, k80_node: Path) -> None:
    for tree in (k80_node, node(tmp_path, "node-b", NVLINK, HCAS)):
        code, doc = gate(tree, "--playbook", user_playbook(tmp_path))
        assert (code, failing(doc)) in ((0, []), (1, [])), doc["verdict"]
        assert doc["verdict"]["allowed"] is True
    # ... also against their stated hardware: 4 GPUs (the recording's <attached_gpus>4), 12 HCAs.
    stated = user_playbook(
        tmp_path, "{gpus: 4, gpu_models: {Tesla K80: 4}, rdma_hcas: 12, rdma_ports_active: 12}"
    )
    code, doc = gate(k80_node, "--playbook", stated)
    assert doc["verdict"]["allowed"] is True, failing(doc)


def test_a_lost_gpu_fails_against_the_playbook_and_the_baseline(tmp_path: Path, k80_node: Path) -> None:
    saved = tmp_path / "intact.json"
    save_baseline(k80_node, saved)
    lost = bus_ids(k80_node)[2]
    drop_gpu(k80_node, lost)
    assert len(bus_ids(k80_node)) == 3

    code, doc = gate(k80_node, "--playbook", user_playbook(tmp_path, "{gpus: 4}"))
    assert code == 2 and not doc["verdict"]["allowed"]
    assert ("playbook", "hardware.gpus", "hardware.gpus = 3, expected >= 4") in failing(doc)

    code, doc = gate(k80_node, "--playbook", user_playbook(tmp_path), "--baseline", str(saved))
    assert code == 2
    address = lost.lower().removeprefix("0000")  # 00000000:0D:00.0 as the facts normalise it
    gone = [f for f in failing(doc) if f[0] == "baseline"]
    assert len(gone) == 1, gone  # one finding for the card, not one per value it had
    # ... and nothing else from the baseline: the values of the lost card, and those of the cards
    # the driver renumbered after it (GPU3 is now GPU2), are that one change.
    others = [f["subject"] for f in doc["findings"] if f["check_id"] == "baseline" and f["status"] != "FAIL"]
    assert others == []
    assert gone[0][1].startswith("GPU ") and gone[0][1].lower().endswith(address[-7:])
    assert "gone" in gone[0][2]


def test_a_lost_hca_fails(tmp_path: Path, k80_node: Path) -> None:
    saved = tmp_path / "intact.json"
    save_baseline(k80_node, saved)
    drop_hca(k80_node, "mlx5_3")
    code, doc = gate(
        k80_node, "--playbook", user_playbook(tmp_path, "{rdma_hcas: 12, rdma_ports_active: 12}")
    )
    assert code == 2
    assert {f[1] for f in failing(doc)} == {"hardware.rdma_hcas", "hardware.rdma_ports_active"}

    code, doc = gate(k80_node, "--playbook", user_playbook(tmp_path), "--baseline", str(saved))
    assert code == 2
    assert [f[:2] for f in failing(doc)] == [("baseline", "HCA mlx5_3")]
    assert [f["subject"] for f in doc["findings"] if f["check_id"] == "baseline"] == ["HCA mlx5_3"]


def test_a_node_without_any_rdma_port_fails_gpu_training_alone(tmp_path: Path, k80_node: Path) -> None:
    shutil.rmtree(k80_node / "sys" / "class" / "infiniband")
    code, doc = gate(k80_node, "--playbook", user_playbook(tmp_path))
    assert code == 2
    assert [f[:2] for f in failing(doc)] == [("playbook", "rdma[*].state")]
    # The preflight playbook judges RDMA at warn level: a missing port warns there, and passes.
    code, doc = gate(k80_node, "--playbook", "preflight")
    assert doc["verdict"]["allowed"] is True


def test_nvlinks_down_fail_gpu_training_alone(tmp_path: Path) -> None:
    tree = node(tmp_path, "node-b", NVLINK, HCAS)
    text = (tree / NVLINK_S).read_text()
    # The recording lists GPU 0's 18 links (NV18 in the topo matrix); links 4 and 5 go down.
    assert len(re.findall(r"Link \d+: 26.562 GB/s", text)) == 18
    (tree / NVLINK_S).write_text(re.sub(r"(Link [45]): .*", r"\1: <inactive>", text))
    code, doc = gate(tree, "--playbook", user_playbook(tmp_path))
    assert code == 2
    (nvlink,) = [f for f in failing(doc) if f[0] == "nvlink"]
    assert nvlink[1:] == ("GPU0", "GPU0: 16 NVLink(s) active where 18 are expected; inactive: 4-5")
    # And with the count stated in a playbook (expect: nvlinks_per_gpu) the same.
    code, doc = gate(tree, "--playbook", user_playbook(tmp_path, "{nvlinks_per_gpu: 18}"))
    assert code == 2


def test_a_narrower_gpu_link_fails_against_the_expected_width(tmp_path: Path, k80_node: Path) -> None:
    save_baseline(k80_node, tmp_path / "intact.json")
    xml = k80_node / SMI_XML
    text = xml.read_text()
    widths = re.findall(r"<current_link_width>(\d+)x</current_link_width>", text)
    assert widths == ["16x".removesuffix("x")] * 4  # the recording: every K80 at x16
    xml.write_text(
        text.replace(
            "<current_link_width>16x</current_link_width>", "<current_link_width>8x</current_link_width>", 1
        )
    )
    stated = user_playbook(tmp_path, "{gpu_min_pcie_width: 16}")
    code, doc = gate(k80_node, "--playbook", stated)
    assert code == 2
    (pcie,) = [f for f in failing(doc) if f[0] == "pcie"]
    assert "width x8 below the expected x16" in pcie[2]
    # Against the baseline the narrower link is lost hardware: it re-judges the pcie check's finding
    # about that GPU's link (one fact, one finding), which says what the baseline had.
    code, doc = gate(
        k80_node, "--playbook", user_playbook(tmp_path), "--baseline", str(tmp_path / "intact.json")
    )
    assert code == 2
    (dropped,) = failing(doc)
    assert dropped[0] == "pcie" and "current_link_width is 8x; the baseline has 16x" in dropped[2]
    assert not [f for f in doc["findings"] if f["check_id"] == "baseline"]
    # Intact, the same playbook passes.
    xml.write_text(text)
    code, doc = gate(k80_node, "--playbook", stated)
    assert doc["verdict"]["allowed"] is True, failing(doc)
