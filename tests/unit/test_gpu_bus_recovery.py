"""The gpu check's view of what the driver says needs doing, and of GPUs the driver lost.

- Recovery flags: `nvidia-smi -q -x` <gpu_reset_status><reset_required>/<drain_and_reset_recommended>
  (R525-R570) and <gpu_recovery_action> (R575+), NVML's field values NVML_FI_DEV_RESET_STATUS,
  NVML_FI_DEV_DRAIN_AND_RESET_STATUS and NVML_FI_DEV_GET_GPU_RECOVERY_ACTION. Element names and the
  "Requested functionality has been deprecated" value come from the real recordings of the corpus.
  Verdicts: NVIDIA's error recovery flags
  (https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html):
  a reset or reboot the driver requires FAILs, a drain-and-reset it recommends WARNs.
- An NVIDIA GPU in the PCI tree that the driver's report leaves out: FAIL only where the nvidia
  driver is bound and /proc/driver/nvidia/gpus lists it (the driver attached it).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nodeagent.checks import gpu
from nodeagent.core.finding import Finding, Status
from nodeagent.facts import nvidia_smi, nvml
from nodeagent.facts.gpu_report import GpuReport
from nodeagent.host import LocalHost
from tests.support import fake_nvml as fake
from tests.support.gpu_samples import NVIDIA_PCI, healthy, report
from tests.support.helpers import make_tree
from tests.support.paths import FIXTURES

CORPUS = FIXTURES / "corpus"
DEFAULT = gpu.Params()


def flagged(findings: list[Finding]) -> list[tuple[Status, str]]:
    return [(f.status, f.summary) for f in findings if f.status is not Status.OK]


# -- recovery flags in real `nvidia-smi -q -x` recordings -------------------------------------------


def test_real_recordings_read_no_recovery_pending() -> None:
    # A100 (R535): <reset_required>No</reset_required><drain_and_reset_recommended>No</...>
    (a100, *_) = nvidia_smi.parse_xml(
        (CORPUS / "smi-telegraf-a100-sxm4-mig" / "nvidia-smi-q-x.xml").read_text()
    ).gpus
    assert (a100.reset_required, a100.drain_and_reset, a100.recovery_action) == (False, False, None)
    # RTX 3060 (R575+): both flags "Requested functionality has been deprecated", action "None".
    log = nvidia_smi.parse_xml((CORPUS / "smi-telegraf-rtx-3060" / "nvidia-smi-q-x.xml").read_text())
    (rtx,) = log.gpus
    assert (rtx.reset_required, rtx.drain_and_reset, rtx.recovery_action) == (None, None, "none")
    assert log.problems == ()


def _a100_with(old: str, new: str) -> str:
    text = (CORPUS / "smi-telegraf-a100-sxm4-mig" / "nvidia-smi-q-x.xml").read_text()
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize(
    ("old", "new", "status", "words"),
    [
        (
            "<reset_required>No</reset_required>",
            "<reset_required>Yes</reset_required>",
            Status.FAIL,
            "requires a GPU reset",
        ),
        (
            "<drain_and_reset_recommended>No</drain_and_reset_recommended>",
            "<drain_and_reset_recommended>Yes</drain_and_reset_recommended>",
            Status.WARN,
            "recommends draining and resetting",
        ),
    ],
)
def test_recorded_reset_flags(tmp_path: Path, old: str, new: str, status: Status, words: str) -> None:
    host = make_tree(tmp_path, {}, commands={"nvidia-smi-q-x": _a100_with(old, new)})
    findings = gpu.CHECK.run(host, DEFAULT)
    mine = [f for f in findings if words in f.summary]
    assert [f.status for f in mine] == [status]
    assert mine[0].subject == "0000:01:00.0"


@pytest.mark.parametrize(
    ("word", "action"),
    [
        ("None", "none"),
        ("Reset", "gpu_reset"),
        ("Reboot", "node_reboot"),
        ("Drain P2P", "drain_p2p"),
        ("Drain and Reset", "drain_and_reset"),
    ],
)
def test_recovery_action_words(word: str, action: str) -> None:
    text = (CORPUS / "smi-telegraf-rtx-3060" / "nvidia-smi-q-x.xml").read_text()
    text = text.replace(
        "<gpu_recovery_action>None</gpu_recovery_action>",
        f"<gpu_recovery_action>{word}</gpu_recovery_action>",
    )
    (g,) = nvidia_smi.parse_xml(text).gpus
    assert g.recovery_action == action


def test_an_unknown_recovery_word_is_a_problem_not_a_guess() -> None:
    text = (CORPUS / "smi-telegraf-rtx-3060" / "nvidia-smi-q-x.xml").read_text()
    text = text.replace(
        "<gpu_recovery_action>None</gpu_recovery_action>",
        "<gpu_recovery_action>Repaint</gpu_recovery_action>",
    )
    log = nvidia_smi.parse_xml(text)
    assert log.gpus[0].recovery_action is None
    assert [p for p in log.problems if "gpu_recovery_action" in p] == [
        "GPU 00000000:2D:00.0 gpu_recovery_action: unknown recovery action 'Repaint'"
    ]


@pytest.mark.parametrize(
    ("change", "status", "summary"),
    [
        (
            {"reset_required": True},
            Status.FAIL,
            "the driver requires a GPU reset before the GPU is used again",
        ),
        (
            {"recovery_action": "gpu_reset"},
            Status.FAIL,
            "the driver requires a GPU reset before the GPU is used again",
        ),
        ({"recovery_action": "node_reboot"}, Status.FAIL, "the driver requires a reboot of the node"),
        ({"recovery_action": "drain_p2p"}, Status.FAIL, "all peer-to-peer traffic drained"),
        (
            {"recovery_action": "drain_and_reset"},
            Status.WARN,
            "the driver recommends draining and resetting the GPU",
        ),
        ({"drain_and_reset": True}, Status.WARN, "the driver recommends draining and resetting the GPU"),
        ({"recovery_action": "action 9"}, Status.WARN, "recovery action 'action 9'"),
        ({"reset_required": False, "drain_and_reset": False, "recovery_action": "none"}, None, ""),
    ],
)
def test_recovery_verdicts(change: dict[str, Any], status: Status | None, summary: str) -> None:
    findings = gpu.evaluate(report(healthy(0), healthy(1, **change)), DEFAULT)
    got = flagged(findings)
    if status is None:
        assert got == []
    else:
        assert len(got) == 1 and got[0][0] is status and summary in got[0][1], got


# -- NVML field values ------------------------------------------------------------------------------


def _field(value: int | None, ret: int = 0) -> Any:
    """An nvmlFieldValue_t as pynvml returns it: valueType 1 (unsigned int) in value.uiVal."""
    return SimpleNamespace(nvmlReturn=ret, valueType=1, value=SimpleNamespace(uiVal=value))


def test_nvml_recovery_fields(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = fake.module(fake.hgx(2))
    # The constants as in pynvml (nvidia-ml-py 13.615.71): 226, 227 deprecated by 230.
    mod.NVML_FI_DEV_RESET_STATUS = 226  # type: ignore[attr-defined]
    mod.NVML_FI_DEV_DRAIN_AND_RESET_STATUS = 227  # type: ignore[attr-defined]
    mod.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230  # type: ignore[attr-defined]
    answers = {
        0: {226: _field(0), 227: _field(0), 230: _field(0)},
        1: {226: _field(None, 3), 227: _field(None, 3), 230: _field(1)},
    }
    asked: list[list[int]] = []

    def field_values(handle: Any, ids: list[int]) -> list[Any]:
        asked.append(list(ids))
        return [answers[handle.index][i] for i in ids]

    mod.nvmlDeviceGetFieldValues = field_values  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    for bus in ("0000:07:00.0", "0000:0f:00.0"):
        for name, value in NVIDIA_PCI.items():
            path = tmp_path / f"sys/bus/pci/devices/{bus}/{name}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(value)
    (tmp_path / "proc").mkdir()
    rep = nvml.collect_nvml()
    assert asked == [[226, 227, 230], [226, 227, 230]]
    assert [(g.reset_required, g.drain_and_reset, g.recovery_action) for g in rep.gpus] == [
        (False, False, "none"),
        (None, None, "gpu_reset"),  # NOT_SUPPORTED (3) for the deprecated flags
    ]
    findings = gpu.CHECK.run(LocalHost(str(tmp_path)), DEFAULT)
    assert flagged(findings) == [
        (Status.FAIL, "GPU1 (0000:0f:00.0): the driver requires a GPU reset before the GPU is used again")
    ]


def test_a_pynvml_without_field_values_reads_nothing() -> None:
    mod = fake.module(fake.hgx(1))
    q = nvml._Queries(mod)
    assert nvml._read_recovery(mod, q, object()) == {}


# -- GPUs on the bus that the driver does not report --------------------------------------------------


def bus(
    gpus: dict[str, str | None], attached: list[str] | None, live: bool = True, vf: tuple[str, ...] = ()
) -> gpu.Bus:
    return gpu.Bus(
        tuple(gpu.BusGpu(a, d, a in vf) for a, d in gpus.items()),
        None if attached is None else tuple(attached),
        live,
    )


def facts_with(b: gpu.Bus) -> gpu.Facts:
    return dataclasses.replace(report(healthy(0), healthy(1)), bus=b)


REPORTED = {"0000:18:00.0": "nvidia", "0000:19:00.0": "nvidia"}


@pytest.mark.parametrize(
    ("extra", "attached", "live", "vf", "expected"),
    [
        # Bound to nvidia, attached by the driver, not reported: it failed init or fell off the bus.
        (
            {"0000:1a:00.0": "nvidia"},
            ["0000:18:00.0", "0000:19:00.0", "0000:1a:00.0"],
            True,
            (),
            [Status.FAIL],
        ),
        # Not in /proc/driver/nvidia/gpus: another environment's GPU (a container's view).
        ({"0000:1a:00.0": "nvidia"}, ["0000:18:00.0", "0000:19:00.0"], True, (), [Status.SKIPPED]),
        # Bound to nvidia but no /proc/driver/nvidia/gpus to confirm the attach.
        ({"0000:1a:00.0": "nvidia"}, None, True, (), [Status.WARN]),
        # Given to VFIO (passthrough): not usable by CUDA here.
        ({"0000:1a:00.0": "vfio-pci"}, ["0000:18:00.0", "0000:19:00.0"], True, (), [Status.WARN]),
        # No driver on this machine: the nvidia module did not take it.
        ({"0000:1a:00.0": None}, ["0000:18:00.0", "0000:19:00.0"], True, (), [Status.WARN]),
        # No driver link in a recording: maybe a link the recording left out, not judged.
        ({"0000:1a:00.0": None}, ["0000:18:00.0", "0000:19:00.0"], False, (), []),
        # An SR-IOV virtual function is not a GPU the driver reports.
        ({"0000:1a:00.4": "nvidia"}, ["0000:18:00.0", "0000:19:00.0"], True, ("0000:1a:00.4",), []),
        # Every GPU reported.
        ({}, ["0000:18:00.0", "0000:19:00.0"], True, (), []),
    ],
)
def test_gpus_the_driver_does_not_report(
    extra: dict[str, str | None],
    attached: list[str] | None,
    live: bool,
    vf: tuple[str, ...],
    expected: list[Status],
) -> None:
    findings = gpu.evaluate(facts_with(bus({**REPORTED, **extra}, attached, live, vf)), DEFAULT)
    assert [f.status for f in findings if f.status is not Status.OK] == expected
    for f in findings:
        if f.status is not Status.OK:
            assert "0000:1a:00" in f.summary or "1 NVIDIA GPU(s)" in f.summary


def test_no_comparison_without_a_driver_report() -> None:
    b = bus({"0000:1a:00.0": "nvidia"}, ["0000:1a:00.0"])
    no_nvml = gpu.Facts(GpuReport("NVML", reason="NVML not available: x"), bus=b)
    assert [f.status for f in gpu.evaluate(no_nvml, DEFAULT)] == [Status.SKIPPED]
    unplaced = dataclasses.replace(report(healthy(0, pci_address=None)), bus=b)
    assert not [f for f in gpu.evaluate(unplaced, DEFAULT) if "does not report" in f.summary]


def test_live_bus_from_sysfs_and_proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake.module(fake.hgx(1)))  # reports 0000:07:00.0 only
    for address in ("0000:07:00.0", "0000:3b:00.0"):
        for name, value in NVIDIA_PCI.items():
            path = tmp_path / f"sys/bus/pci/devices/{address}/{name}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(value)
        (tmp_path / f"proc/driver/nvidia/gpus/{address}").mkdir(parents=True)
        (tmp_path / f"sys/bus/pci/devices/{address}/driver").symlink_to("../../../bus/pci/drivers/nvidia")
    host = LocalHost(str(tmp_path))
    facts = gpu.collect(host)
    assert facts.bus == gpu.Bus(
        (gpu.BusGpu("0000:07:00.0", "nvidia"), gpu.BusGpu("0000:3b:00.0", "nvidia")),
        ("0000:07:00.0", "0000:3b:00.0"),
        live=True,
    )
    fail = [f for f in gpu.evaluate(facts, DEFAULT) if f.status is Status.FAIL]
    assert [f.subject for f in fail] == ["0000:3b:00.0"]
    assert fail[0].evidence["/sys/bus/pci/devices/0000:3b:00.0/driver"] == "nvidia"
    assert "Xid 79" in fail[0].remediation


def test_gpu_check_records_the_physfn_links() -> None:
    assert gpu.PHYSFN in gpu.CHECK.paths
