"""The nvlink check: NVML (tests/support/fake_nvml.py), recorded `nvidia-smi nvlink -s/-e`,
hand-built facts."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from nodeagent.checks import nvlink
from nodeagent.core.finding import Finding, Status
from nodeagent.facts import nvidia_smi, nvml
from nodeagent.facts.gpu_report import GpuHealth, GpuReport, NvLink
from nodeagent.host import Host, LocalHost
from tests.support import fake_nvml as fake
from tests.support.gpu_samples import A100_XML, local_gpu_host
from tests.support.helpers import FIXTURE_TREES, fixture_host, make_tree

DEFAULT = nvlink.Params()

# aws-samples/awsome-distributed-training, 1.architectures/efa-cheatsheet.md (MIT-0): GPU 0 of a
# p4de.24xlarge (8x A100-SXM4-80GB on NVSwitch), `nvidia-smi nvlink -s`, tabs as printed.
P4DE_STATUS = """GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-370ec676-e407-3115-836a-8ebcb3c4f62a)
\t Link 0: 25 GB/s
\t Link 1: 25 GB/s
\t Link 2: 25 GB/s
\t Link 3: 25 GB/s
\t Link 4: 25 GB/s
\t Link 5: 25 GB/s
\t Link 6: 25 GB/s
\t Link 7: 25 GB/s
\t Link 8: 25 GB/s
\t Link 9: 25 GB/s
\t Link 10: 25 GB/s
\t Link 11: 25 GB/s
"""

# `nvidia-smi nvlink -e` prints three counters per link in this layout (R450-R535).
P4DE_ERRORS = (
    P4DE_STATUS.splitlines()[0]
    + "\n"
    + "".join(
        f"\t Link {n}: Replay Errors: 0\n\t Link {n}: Recovery Errors: 0\n"
        f"\t Link {n}: CRC Errors: {7 if n == 5 else 0}\n\n"
        for n in range(12)
    )
)

# An H100 PCIe pair on NVLink bridges with one link not trained, as `nvidia-smi nvlink -s` shows it.
H100_PCIE_STATUS = """GPU 0: NVIDIA H100 PCIe (UUID: GPU-a1bf2ff6-a98d-edac-a422-0bd80fbd9724)
         Link 0: 26.562 GB/s
         Link 1: 26.562 GB/s
         Link 2: 26.562 GB/s
         Link 3: 26.562 GB/s
         Link 4: <inactive>
         Link 5: 26.562 GB/s
GPU 1: NVIDIA H100 PCIe (UUID: GPU-b1bf2ff6-a98d-edac-a422-0bd80fbd9724)
         Link 0: 26.562 GB/s
         Link 1: 26.562 GB/s
         Link 2: 26.562 GB/s
         Link 3: 26.562 GB/s
         Link 4: 26.562 GB/s
         Link 5: Training
"""


def run(check: Any, host: Host) -> list[Finding]:
    return check.run(host, check.make_params())  # type: ignore[no-any-return]


def statuses(findings: list[Finding]) -> list[Status]:
    return [f.status for f in findings]


def by_status(findings: list[Finding], status: Status) -> list[Finding]:
    return [f for f in findings if f.status == status]


@pytest.fixture
def nvml_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    def make(gpus: list[fake.FakeGpu], **kw: Any) -> LocalHost:
        monkeypatch.setitem(sys.modules, "pynvml", fake.module(gpus, **kw))
        return local_gpu_host(tmp_path, [g.bus_id[4:].lower() for g in gpus] or ["0000:07:00.0"])

    return make


# -- parsing `nvidia-smi nvlink` -----------------------------------------------------------------


def test_parse_p4de_status() -> None:
    (block,) = nvidia_smi.parse_nvlink_blocks(P4DE_STATUS)
    assert (block.index, block.uuid) == (0, "GPU-370ec676-e407-3115-836a-8ebcb3c4f62a")
    assert sorted(block.links) == list(range(12))
    assert {nvidia_smi.link_state(t) for t in block.links.values()} == {(True, "25 GB/s")}


def test_parse_errors() -> None:
    (block,) = nvidia_smi.parse_nvlink_blocks(P4DE_ERRORS)
    assert nvidia_smi.parse_link_errors(block.links[5]) == {"replay": 0, "recovery": 0, "crc": 7}
    assert nvidia_smi.parse_link_errors(block.links[0]) == {"replay": 0, "recovery": 0, "crc": 0}


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("25 GB/s", (True, "25 GB/s")),
        ("26.562 GB/s", (True, "26.562 GB/s")),
        ("<inactive>", (False, None)),
        ("Training", (None, None)),
        ("", (None, None)),
    ],
)
def test_link_state(text: str, state: tuple[bool | None, str | None]) -> None:
    assert nvidia_smi.link_state(text) == state


def test_links_join_by_uuid_else_by_index() -> None:
    gpus = (
        GpuHealth(index=0, uuid="GPU-b1bf2ff6-a98d-edac-a422-0bd80fbd9724"),  # block "GPU 1" by UUID
        GpuHealth(index=1, uuid="GPU-a1bf2ff6-a98d-edac-a422-0bd80fbd9724"),  # block "GPU 0" by UUID
        GpuHealth(index=0),  # no UUID: block "GPU 0" by index
    )
    by_uuid_1, by_uuid_0, by_index_0 = nvidia_smi.with_nvlinks(gpus, H100_PCIE_STATUS, None)
    assert [link.active for link in by_uuid_1.nvlinks] == [True, True, True, True, True, None]
    assert [link.active for link in by_uuid_0.nvlinks] == [True, True, True, True, False, True]
    assert by_index_0.nvlinks == by_uuid_0.nvlinks
    assert by_uuid_0.nvlinks[0].speed == "26.562 GB/s"


# -- snapshots -------------------------------------------------------------------------------------


def snapshot(tmp_path: Path, commands: dict[str, str]) -> Host:
    device = "/sys/bus/pci/devices/0000:01:00.0"
    files = {f"{device}/vendor": "0x10de\n", f"{device}/class": "0x030200\n"}
    return make_tree(tmp_path, files, commands=commands)


def test_snapshot_end_to_end(tmp_path: Path) -> None:
    host = snapshot(tmp_path, {"nvidia-smi-q-x": A100_XML, "nvidia-smi-nvlink-s": P4DE_STATUS})
    findings = run(nvlink.CHECK, host)
    assert statuses(findings) == [Status.OK]
    assert findings[0].summary == "1 of 1 NVLink GPU(s) with every link active and no errors"
    assert findings[0].evidence == {"nvidia-smi nvlink -s: GPU0 links": "12 of 12 active at 25 GB/s"}


def test_snapshot_with_error_counters(tmp_path: Path) -> None:
    host = snapshot(
        tmp_path,
        {"nvidia-smi-q-x": A100_XML, "nvidia-smi-nvlink-s": P4DE_STATUS, "nvidia-smi-nvlink-e": P4DE_ERRORS},
    )
    findings = run(nvlink.CHECK, host)
    assert statuses(findings) == [Status.WARN]
    assert findings[0].summary == "GPU0 (0000:01:00.0): NVLink error counters above 0: link 5 crc 7"
    assert findings[0].evidence == {"nvidia-smi nvlink -e: GPU0 link 5 crc errors": "7"}


def test_snapshot_link_down(tmp_path: Path) -> None:
    status = P4DE_STATUS.replace("Link 4: 25 GB/s", "Link 4: <inactive>").replace(
        "Link 7: 25 GB/s", "Link 7: <inactive>"
    )
    host = snapshot(tmp_path, {"nvidia-smi-q-x": A100_XML, "nvidia-smi-nvlink-s": status})
    # Against the platform's count (a playbook's expected_links): two wired links down.
    findings = nvlink.CHECK.run(host, nvlink.Params(expected_links=12))
    assert statuses(findings) == [Status.FAIL]
    assert findings[0].summary == (
        "GPU0 (0000:01:00.0): 10 NVLink(s) active where 12 are expected; inactive: 4,7"
    )
    assert findings[0].evidence == {
        "nvidia-smi nvlink -s: GPU0 link 4": "inactive",
        "nvidia-smi nvlink -s: GPU0 link 7": "inactive",
        "nvidia-smi nvlink -s: GPU0 active links": "10 of 12",
        "expected active links": "12 (the expected_links parameter)",
    }
    assert "pcie.gpu_nvlinks_expected_up=12" in findings[0].remediation
    # Without an expected count, one GPU with links inactive may be by design: a WARN, not a drain.
    host.refresh()
    unjudged = run(nvlink.CHECK, host)
    assert statuses(unjudged) == [Status.WARN]
    assert unjudged[0].summary.startswith("GPU0 (0000:01:00.0): 10 of 12 NVLinks active, no expected count")


def test_snapshot_without_nvlink_recording(tmp_path: Path) -> None:
    findings = run(nvlink.CHECK, snapshot(tmp_path, {"nvidia-smi-q-x": A100_XML}))
    assert statuses(findings) == [Status.SKIPPED]
    assert findings[0].summary.startswith("no `nvidia-smi nvlink -s` data: nvidia-smi: not recorded")


def test_snapshot_pcie_gpus_print_no_links(tmp_path: Path) -> None:
    status = "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-513536b6-7d19-9063-b049-1e69664bb298)\n"
    findings = run(
        nvlink.CHECK, snapshot(tmp_path, {"nvidia-smi-q-x": A100_XML, "nvidia-smi-nvlink-s": status})
    )
    assert [(f.status, f.summary) for f in findings] == [
        (Status.SKIPPED, "none of the 1 GPU(s) reports an NVLink (PCIe-only GPUs)")
    ]


def test_snapshot_unknown_link_state(tmp_path: Path) -> None:
    status = P4DE_STATUS.replace("Link 11: 25 GB/s", "Link 11: some future status")
    findings = run(
        nvlink.CHECK, snapshot(tmp_path, {"nvidia-smi-q-x": A100_XML, "nvidia-smi-nvlink-s": status})
    )
    assert statuses(findings) == [Status.UNKNOWN]
    assert findings[0].evidence == {"nvidia-smi nvlink -s: GPU0 link 11": "unknown"}


@pytest.mark.parametrize("status", ["\x00\x00", "garbage\nLink 0: 25 GB/s\n", "GPU x: y\n\tLink q: 1"])
def test_snapshot_garbage_nvlink_output(tmp_path: Path, status: str) -> None:
    findings = run(
        nvlink.CHECK, snapshot(tmp_path, {"nvidia-smi-q-x": A100_XML, "nvidia-smi-nvlink-s": status})
    )
    assert statuses(findings) == [Status.SKIPPED]


# -- NVML ----------------------------------------------------------------------------------------


def test_healthy_hgx(nvml_node: Any) -> None:
    findings = run(nvlink.CHECK, nvml_node(fake.hgx(8)))
    assert statuses(findings) == [Status.OK]
    assert findings[0].summary == "8 of 8 NVLink GPU(s) with every link active and no errors"
    assert findings[0].evidence["NVML: GPU7 links"] == "12 of 12 active version 4 to 0000:c7:00.0"


def test_nvlink_down(nvml_node: Any) -> None:
    gpus = fake.hgx(8)
    gpus[5].nvlinks = [fake.FakeLink(state=fake.NVML_FEATURE_DISABLED if n == 3 else 1) for n in range(12)]
    findings = run(nvlink.CHECK, nvml_node(gpus))
    assert statuses(findings) == [Status.FAIL, Status.OK]
    down, ok = findings
    assert down.subject == "0000:90:00.0"
    assert down.summary == "GPU5 (0000:90:00.0): 11 NVLink(s) active where 12 are expected; inactive: 3"
    assert down.evidence["NVML: GPU5 active links"] == "11 of 12"
    assert down.evidence["expected active links"].startswith("12 (active on another")
    assert ok.summary.startswith("7 of 8 NVLink GPU(s)")


def test_nvlink_error_counters(nvml_node: Any) -> None:
    gpus = fake.hgx(2)
    gpus[1].nvlinks = [fake.FakeLink(errors=(3, 0, 12, 0, 0) if n == 2 else (0,) * 5) for n in range(12)]
    findings = run(nvlink.CHECK, nvml_node(gpus))
    warn = by_status(findings, Status.WARN)
    assert [f.summary for f in warn] == [
        "GPU1 (0000:0f:00.0): NVLink error counters above 0: link 2 crc_flit 12, link 2 replay 3"
    ]


def test_counters_hopper_does_not_support_are_not_errors(nvml_node: Any) -> None:
    gpus = fake.hgx(1, nvlinks=[fake.FakeLink(errors=fake.NOT_SUPPORTED) for _ in range(18)])
    findings = run(nvlink.CHECK, nvml_node(gpus))
    assert statuses(findings) == [Status.OK]
    assert nvml.collect(nvml_node(gpus)).gpus[0].nvlinks[0].errors == {}


def test_all_links_down(nvml_node: Any) -> None:
    gpus = fake.hgx(2, nvlinks=[fake.FakeLink(state=0) for _ in range(12)])
    findings = run(nvlink.CHECK, nvml_node(gpus))
    assert statuses(findings) == [Status.WARN]
    assert findings[0].summary == "no NVLink is active: 24 link(s) on 2 GPU(s) are all inactive"
    assert "nvidia-fabricmanager" in findings[0].remediation


def test_sleeping_link_is_up(nvml_node: Any) -> None:
    gpus = fake.hgx(1, nvlinks=[fake.FakeLink(state=fake.NVML_NVLINK_STATE_SLEEP) for _ in range(18)])
    assert statuses(run(nvlink.CHECK, nvml_node(gpus))) == [Status.OK]


def test_consumer_gpu_has_no_nvlink(nvml_node: Any) -> None:
    findings = run(nvlink.CHECK, nvml_node([fake.FakeGpu.consumer()]))
    assert [(f.status, f.summary) for f in findings] == [
        (Status.SKIPPED, "none of the 1 GPU(s) reports an NVLink (PCIe-only GPUs)")
    ]


def test_library_missing(nvml_node: Any) -> None:
    findings = run(nvlink.CHECK, nvml_node(fake.hgx(8), init_error=fake.NVML_ERROR_LIBRARY_NOT_FOUND))
    assert statuses(findings) == [Status.SKIPPED]
    assert "libnvidia-ml.so.1 not found" in findings[0].summary


def test_driver_loaded_but_no_gpu(nvml_node: Any) -> None:
    findings = run(nvlink.CHECK, nvml_node([]))
    assert [(f.status, f.summary) for f in findings] == [
        (Status.SKIPPED, "NVML is loaded (driver 535.104.05) but reports no GPU")
    ]


def test_expected_links_param(nvml_node: Any) -> None:
    host = nvml_node(fake.hgx(2))
    findings = nvlink.CHECK.run(host, nvlink.Params(expected_links=18))
    assert [f.summary for f in by_status(findings, Status.FAIL)] == [
        "GPU0 (0000:07:00.0): 12 NVLink(s) active where 18 are expected (it has 12)",
        "GPU1 (0000:0f:00.0): 12 NVLink(s) active where 18 are expected (it has 12)",
    ]
    surplus = nvlink.CHECK.run(nvml_node(fake.hgx(2)), nvlink.Params(expected_links=8))
    assert [f.summary for f in by_status(surplus, Status.WARN)] == [
        "2 GPU(s) with more than 8 active NVLinks: GPU0 (12), GPU1 (12)"
    ]


# -- this machine and the recorded trees -----------------------------------------------------------


def test_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    host = LocalHost()
    if nvml.nvidia_devices(host):
        pytest.skip("this machine has an NVIDIA GPU")
    findings = run(nvlink.CHECK, host)
    assert statuses(findings) == [Status.SKIPPED]
    assert findings[0].summary.startswith("no NVIDIA GPU: none on the PCI bus")
    assert "pynvml" not in sys.modules


@pytest.mark.parametrize("name", FIXTURE_TREES)
def test_fixture_trees(name: str) -> None:
    findings = run(nvlink.CHECK, fixture_host(name))
    assert statuses(findings) == [Status.SKIPPED]


def test_power9_tree() -> None:
    findings = run(nvlink.CHECK, fixture_host("nvidiagpunumanodes"))
    assert findings[0].summary.startswith("6 NVIDIA GPU(s)")
    assert findings[0].evidence["NVIDIA GPUs (PCI, /proc/driver/nvidia/gpus)"] == (
        "0004:05:00.0, 0004:06:00.0, 0006:00:00.0, 0007:00:00.0, 0035:04:00.0, 0035:05:00.0"
    )


# -- evaluate on hand-built facts --------------------------------------------------------------


def gpu_with(index: int, states: Sequence[bool | None], errors: dict[str, int] | None = None) -> GpuHealth:
    links = tuple(NvLink(link=n, active=s, version=5, errors=errors or {}) for n, s in enumerate(states))
    return GpuHealth(index=index, pci_address=f"0000:{index + 1:02x}:00.0", nvlinks=links)


def facts(*gpus: GpuHealth, **kw: Any) -> nvlink.Facts:
    return nvlink.Facts(GpuReport("NVML", gpus=gpus, **kw))


def test_evaluate_ok() -> None:
    findings = nvlink.evaluate(facts(gpu_with(0, [True] * 18), gpu_with(1, [True] * 18)), DEFAULT)
    assert [(f.status, f.evidence["NVML: GPU1 links"]) for f in findings] == [
        (Status.OK, "18 of 18 active version 5")
    ]


@pytest.mark.parametrize(
    ("second", "expected"),
    [
        (gpu_with(1, [True] * 17 + [False]), [Status.FAIL, Status.OK]),
        (gpu_with(1, [True] * 17 + [None]), [Status.UNKNOWN, Status.FAIL, Status.OK]),
        (gpu_with(1, [True] * 18, {"replay": 1}), [Status.WARN, Status.OK]),
        (gpu_with(1, [True] * 12), [Status.OK]),
        (gpu_with(1, [False] * 18), [Status.WARN, Status.OK]),
    ],
)
def test_evaluate_branches(second: GpuHealth, expected: list[Status]) -> None:
    findings = nvlink.evaluate(facts(gpu_with(0, [True] * 18), second), DEFAULT)
    assert statuses(findings) == expected
    flagged = [f for f in findings if f.status not in (Status.OK,)]
    assert all(f.remediation and f.expected for f in flagged)


def test_evaluate_error_threshold_param() -> None:
    f = facts(gpu_with(0, [True] * 4, {"crc": 2}))
    assert statuses(nvlink.evaluate(f, nvlink.Params(max_link_errors=2))) == [Status.OK]
    assert statuses(nvlink.evaluate(f, nvlink.Params(max_link_errors=1))) == [Status.WARN]


def test_evaluate_not_applicable() -> None:
    cases = [
        (nvlink.Facts(GpuReport("NVML", reason="NVML not available: x")), "NVML not available: x"),
        (facts(GpuHealth(index=0)), "none of the 1 GPU(s) reports an NVLink (PCIe-only GPUs)"),
        (facts(GpuHealth(index=0), nvlink_reason="no nvlink data: x"), "no nvlink data: x"),
        (nvlink.Facts(GpuReport("NVML", failure="NVML fails")), "NVLink not readable: NVML fails"),
    ]
    for f, summary in cases:
        findings = nvlink.evaluate(f, DEFAULT)
        assert [(x.status, x.summary) for x in findings] == [(Status.SKIPPED, summary)]
    unknown = nvlink.evaluate(nvlink.Facts(GpuReport("nvidia-smi -q -x", error="unparsable")), DEFAULT)
    assert statuses(unknown) == [Status.UNKNOWN]


def test_evaluate_all_down() -> None:
    findings = nvlink.evaluate(facts(gpu_with(0, [False] * 4), gpu_with(1, [False] * 4)), DEFAULT)
    assert statuses(findings) == [Status.WARN]


def test_declared_reads() -> None:
    assert ("nvidia-smi", "nvlink", "-s") in nvlink.CHECK.commands
    assert ("nvidia-smi", "nvlink", "-e") in nvlink.CHECK.commands
    assert nvlink.CHECK.tags == ("gpu",)
    assert nvlink.CHECK.title == "NVLink"
    assert dataclasses.fields(nvlink.Params)[0].metadata["why"]


# An H100 PCIe pair joined by three NVLink bridges: 12 of each card's 18 links are wired.
H100_PAIR_TOPO = (
    "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV12\t0-31\t0\nGPU1\tNV12\t X \t0-31\t0\n"
)


def test_bridged_pcie_pair_is_judged_against_topo_m() -> None:
    from nodeagent.facts.topo_matrix import parse_topo

    wired = [True] * 12 + [False] * 6
    pair = facts(gpu_with(0, wired), gpu_with(1, wired))
    healthy = nvlink.evaluate(dataclasses.replace(pair, matrix=parse_topo(H100_PAIR_TOPO)), DEFAULT)
    assert statuses(healthy) == [Status.OK]
    assert "every wired link active" in healthy[0].summary
    assert "as expected (nvidia-smi topo -m: GPU0 GPU1 NV12)" in healthy[0].evidence["NVML: GPU0 links"]

    one_down = facts(gpu_with(0, wired), gpu_with(1, [True] * 11 + [False] * 7))
    found = nvlink.evaluate(dataclasses.replace(one_down, matrix=parse_topo(H100_PAIR_TOPO)), DEFAULT)
    assert statuses(found) == [Status.FAIL, Status.OK]
    assert found[0].summary == (
        "GPU1 (0000:02:00.0): 11 NVLink(s) active where 12 are expected; inactive: 11-17"
    )


def test_nvswitch_rows_count_the_largest_cell_not_the_sum() -> None:
    from nodeagent.facts.topo_matrix import parse_topo

    header = "\t" + "\t".join(f"GPU{i}" for i in range(4)) + "\n"
    rows = "".join(
        f"GPU{i}\t" + "\t".join(" X " if i == j else "NV18" for j in range(4)) + "\n" for i in range(4)
    )
    gpus = [gpu_with(i, [True] * 18) for i in range(4)]
    found = nvlink.evaluate(dataclasses.replace(facts(*gpus), matrix=parse_topo(header + rows)), DEFAULT)
    assert statuses(found) == [Status.OK]
    gpus[2] = gpu_with(2, [True] * 17 + [False])
    found = nvlink.evaluate(dataclasses.replace(facts(*gpus), matrix=parse_topo(header + rows)), DEFAULT)
    assert statuses(found) == [Status.FAIL, Status.OK]
    assert "17 NVLink(s) active where 18 are expected" in found[0].summary


def test_no_bridge_at_all_is_ok_when_topo_m_shows_no_nvlink() -> None:
    from nodeagent.facts.topo_matrix import parse_topo

    topo = "\tGPU0\tGPU1\nGPU0\t X \tPHB\nGPU1\tPHB\t X \n"
    pair = facts(gpu_with(0, [False] * 18), gpu_with(1, [False] * 18))
    found = nvlink.evaluate(dataclasses.replace(pair, matrix=parse_topo(topo)), DEFAULT)
    assert [(f.status, f.summary.split(":")[0]) for f in found] == [(Status.OK, "no NVLink wired")]
