"""`nvidia-smi -q -x` on real recordings: MIG, PCIe link and load values, and the GPU list of `facts`.

Inputs are the real-machine corpus (tests/fixtures/corpus: raw files as published, with where they
come from in each recording.yml). Every expected value was read off the raw XML (grep), or from
NVIDIA's documentation where a verdict is judged, never from nodeagent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.checks import gpu, topology
from nodeagent.core.finding import Status
from nodeagent.facts import gpu_report, gpus, node, nvidia_smi, pci_topology
from nodeagent.host import SnapshotHost
from tests.support import corpus
from tests.support.helpers import make_tree

MIG = "smix-checkmk-telegraf-5812-a100-sxm4-80gb-mig"
K80 = "smix-pai-azure-4x-tesla-k80"
# An RTX PRO 6000 Blackwell (a PCIe Gen5 GPU) in a Gen4 host: <max_device_link_gen> 5,
# <max_host_link_gen> 4, <max_link_gen> 4, <current_link_gen> 1 at P8 and 0 % utilization.
BLACKWELL = "smi-telegraf-rtx-pro-6000-blackwell-maxq"


def recorded(name: str) -> str:
    raw = corpus.load(name).raw("nvidia-smi -q -x")
    assert raw is not None, f"{name} has no nvidia-smi -q -x recording"
    return raw.decode()


def recording_host(tmp_path: Path, name: str) -> SnapshotHost:
    """The corpus recording as a snapshot: commands/nvidia-smi-q-x.txt, no /sys PCI tree."""
    return SnapshotHost(corpus.build_tree(corpus.load(name), tmp_path / name))


# -- MIG -----------------------------------------------------------------------------------------


def test_mig_devices_of_a_real_recording() -> None:
    # <mig_mode> Enabled/Enabled; four <mig_device>: index 0-3, gpu_instance_id 3-6,
    # compute_instance_id 0, multiprocessor_count 14, fb_memory_usage total 19968 MiB,
    # ecc_error_count/volatile_count/sram_uncorrectable 0.
    (g,) = nvidia_smi.parse_xml(recorded(MIG)).gpus
    assert (g.mig_current, g.mig_pending, g.mig_listed) == (True, True, True)
    assert [
        (m.index, m.gpu_instance_id, m.compute_instance_id, m.multiprocessors, m.memory_mib)
        for m in g.mig_instances
    ] == [(0, 3, 0, 14, 19968.0), (1, 4, 0, 14, 19968.0), (2, 5, 0, 14, 19968.0), (3, 6, 0, 14, 19968.0)]
    assert [m.volatile_uncorrectable for m in g.mig_instances] == [0, 0, 0, 0]
    assert all(m.profile is None for m in g.mig_instances)  # the XML does not name the profile


def test_mig_gpu_is_reported_as_such(tmp_path: Path) -> None:
    findings = gpu.CHECK.run(recording_host(tmp_path, MIG), gpu.Params())
    mig = [f for f in findings if f.subject == "0000:01:00.0"]
    assert [(f.status, f.summary) for f in mig] == [
        (
            Status.OK,
            "GPU0 (0000:01:00.0): MIG enabled: 4 instance(s) (4x 14 SMs/19968 MiB); "
            "0 uncorrectable ECC error(s) in the instances",
        )
    ]
    assert not any("healthy" in f.summary for f in findings)  # not a plain GPU


@pytest.mark.parametrize(
    ("name", "listed"),
    [
        ("smix-a0s-exporter-2x-gtx1080-x1", True),  # <mig_mode> N/A, <mig_devices> None
        ("smix-lampaa-quadro-p2200", False),  # <mig_mode> N/A, no <mig_devices>
        ("smix-tony-2x-tesla-p100-pcie-12gb", False),  # R375: neither element
    ],
)
def test_gpus_without_mig(name: str, listed: bool) -> None:
    for g in nvidia_smi.parse_xml(recorded(name)).gpus:
        assert (g.mig_current, g.mig_pending, g.mig_instances, g.mig_listed) == (None, None, (), listed)


# -- PCIe link and load ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "index", "link", "load"),
    [
        # (current gen, max gen, current width, max width), (gpu_util %, performance state)
        ("smix-a0s-exporter-2x-gtx1080-x1", 0, (3, 3, 1, 16), (100.0, 2)),
        ("smix-check-nvidia-smi-4x-tesla-m10-vgpu-host", 3, (1, 3, 8, 16), (0.0, 8)),
        ("smix-tony-2x-tesla-p100-pcie-12gb", 1, (3, 3, 16, 16), (10.3, 0)),
        (K80, 0, (3, 3, 16, 16), (99.0, 0)),
        (K80, 2, (1, 3, 16, 16), (0.0, 8)),
        (MIG, 0, (4, 4, 16, 16), (None, 0)),  # gpu_util N/A under MIG
        ("smix-lampaa-gt730-link-na", 0, (None, None, None, None), (None, 0)),  # all N/A
    ],
)
def test_link_and_load_values(
    name: str, index: int, link: tuple[int | None, ...], load: tuple[float | None, int | None]
) -> None:
    g = nvidia_smi.parse_xml(recorded(name)).gpus[index]
    pcie = g.pcie or gpu_report.PcieLink()
    assert (pcie.gen_current, pcie.gen_max, pcie.width_current, pcie.width_max) == link
    assert (g.utilization_pct, g.performance_state) == load
    assert g.unparsable == {}


def test_device_and_host_maxima_of_the_newer_schema() -> None:
    (g,) = nvidia_smi.parse_xml(recorded(BLACKWELL)).gpus
    assert g.pcie is not None
    assert (g.pcie.gen_device_max, g.pcie.gen_host_max, g.pcie.gen_max, g.pcie.gen_current) == (5, 4, 4, 1)
    assert g.pcie.host_limited
    (a100,) = nvidia_smi.parse_xml(recorded(MIG)).gpus
    assert a100.pcie is not None
    assert (a100.pcie.gen_device_max, a100.pcie.gen_host_max, a100.pcie.host_limited) == (4, 4, False)


def test_older_schema_has_no_device_or_host_maximum() -> None:
    g = nvidia_smi.parse_xml(recorded(K80)).gpus[0]
    assert g.pcie is not None
    assert (g.pcie.gen_device_max, g.pcie.gen_host_max, g.pcie.host_limited) == (None, None, False)


def test_unparsable_link_values_are_recorded_not_guessed() -> None:
    xml = recorded("smix-lampaa-gtx1650-super-x8").replace(
        "<current_link_width>8x</current_link_width>", "<current_link_width>eight</current_link_width>"
    )
    log = nvidia_smi.parse_xml(xml)
    (g,) = log.gpus
    assert g.pcie is None or g.pcie.width_current is None
    assert g.unparsable == {
        "pci/pci_gpu_link_info/link_widths/current_link_width": "unparsable value 'eight'"
    }
    assert log.problems == (
        "GPU 00000000:06:00.0 pci/pci_gpu_link_info/link_widths/current_link_width: unparsable value 'eight'",
    )


# -- facts: the GPUs -q -x shows when sysfs has none -----------------------------------------------


def test_facts_list_the_gpus_of_nvidia_smi_when_sysfs_has_none(tmp_path: Path) -> None:
    # Four Tesla K80 with <gpu id> 00001580:00:00.0, 00002DF7:00:00.0, 00004968:00:00.0,
    # 0000F8D6:00:00.0 in that order (Azure VM buses), <product_name> Tesla K80.
    host = recording_host(tmp_path, K80)
    listed = node.collect(host)["gpus"]
    assert [(g["index"], g["pci_address"], g["product_name"], g["vendor"], g["source"]) for g in listed] == [
        (0, "1580:00:00.0", "Tesla K80", "NVIDIA", "nvidia-smi -q -x"),
        (1, "2df7:00:00.0", "Tesla K80", "NVIDIA", "nvidia-smi -q -x"),
        (2, "4968:00:00.0", "Tesla K80", "NVIDIA", "nvidia-smi -q -x"),
        (3, "f8d6:00:00.0", "Tesla K80", "NVIDIA", "nvidia-smi -q -x"),
    ]
    assert [(g["numa_node"], g["cpu_affinity"]) for g in listed] == [(None, None)] * 4  # no topo -m


def test_placement_view_keeps_these_gpus_out_of_the_pci_tree(tmp_path: Path) -> None:
    # The same GPUs for topology, ranks and pinning: by index, with no address to place in a tree
    # that was not recorded, so the topology check does not judge a tree it never saw.
    host = recording_host(tmp_path, K80)
    assert [(g.index, g.pci_address, g.source) for g in gpus.collect(host)] == [
        (i, None, "nvidia-smi -q -x") for i in range(4)
    ]
    assert pci_topology.collect(host).gpus == []
    statuses = {f.status for f in topology.CHECK.run(host, topology.Params())}
    assert statuses == {Status.SKIPPED}


def test_facts_keep_the_pci_tree_when_sysfs_has_gpus(tmp_path: Path) -> None:
    host = make_tree(
        tmp_path,
        {
            "/sys/bus/pci/devices/0000:04:00.0/class": "0x030200\n",
            "/sys/bus/pci/devices/0000:04:00.0/vendor": "0x10de\n",
        },
        commands={"nvidia-smi-q-x": recorded("smix-tony-2x-tesla-p100-pcie-12gb")},
    )
    assert [(g.pci_address, g.source, g.product_name) for g in gpus.inventory(host)] == [
        ("0000:04:00.0", "pci", None)
    ]


def test_facts_take_affinity_from_topo_by_nvidia_smi_index(tmp_path: Path) -> None:
    # Two recordings of two different 2-GPU machines, put together only to show the join: GPUn of
    # `topo -m` (CPU Affinity 0-11, NUMA Affinity N/A) is the n-th <gpu> of -q -x.
    topo = corpus.load("topo-ml-engineering-2gpu-phb").raw("nvidia-smi topo -m")
    assert topo is not None
    host = make_tree(
        tmp_path,
        {},
        commands={"nvidia-smi-q-x": recorded("smix-pai-2x-rtx2080ti"), "nvidia-smi-topo-m": topo.decode()},
    )
    assert [(g.index, g.pci_address, g.cpu_affinity, g.numa_node) for g in gpus.inventory(host)] == [
        (0, "0000:02:00.0", list(range(12)), None),
        (1, "0000:03:00.0", list(range(12)), None),
    ]
    # The placement view is the matrix's, as before.
    assert [(g.index, g.pci_address, g.source) for g in gpus.collect(host)] == [
        (0, None, "nvidia-smi topo -m"),
        (1, None, "nvidia-smi topo -m"),
    ]
