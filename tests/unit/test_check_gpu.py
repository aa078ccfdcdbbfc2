"""The gpu check: NVML (through tests/support/fake_nvml.py), recorded `nvidia-smi -q -x`, hand-built facts.

This machine has no GPU: the NVML paths run against a fake pynvml whose constants and exceptions
are compared with the real module below; the nvidia-smi parser runs on excerpts of real recordings.
"""

from __future__ import annotations

import ctypes.util
import dataclasses
import importlib
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.checks import gpu, nvlink
from nodeagent.core.finding import Finding, Status
from nodeagent.facts import gpu_report, nvidia_smi, nvml
from nodeagent.facts.gpu_report import GpuReport
from nodeagent.host import Host, LocalHost
from tests.support import fake_nvml as fake
from tests.support.gpu_samples import A100_XML, healthy, local_gpu_host, nvidia_pci_files, report
from tests.support.helpers import FIXTURE_TREES, fixture_host, make_tree

DEFAULT = gpu.Params()

# -- real `nvidia-smi -q -x` recordings (trimmed: memory, clocks and process sections left out) -----

# The A100 with MIG (A100_XML) is in tests/support/gpu_samples.py: the nvlink and redaction tests read it too.

# apache/hadoop, hadoop-yarn-project/.../hadoop-yarn-server-nodemanager/src/test/resources/
# nvidia-smi-sample-output.xml (commit 4994beff, Apache-2.0): two Tesla P100-PCIE-12GB, driver
# 375.66 (nvsmi_device_v8.dtd): the pre-R470 layout (single_bit/double_bit ECC counts, page
# retirement, <clocks_throttle_reasons>, <power_readings>), no CUDA version.
P100_XML = """<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v8.dtd">
<nvidia_smi_log>
    <timestamp>Wed Sep  6 21:52:51 2017</timestamp>
    <driver_version>375.66</driver_version>
    <attached_gpus>2</attached_gpus>
    <gpu id="0000:04:00.0">
        <product_name>Tesla P100-PCIE-12GB</product_name>
        <product_brand>Tesla</product_brand>
        <display_mode>Disabled</display_mode>
        <display_active>Disabled</display_active>
        <persistence_mode>Disabled</persistence_mode>
        <uuid>GPU-28604e81-21ec-cc48-6759-bf2648b22e16</uuid>
        <minor_number>0</minor_number>
        <pci>
            <pci_bus>04</pci_bus>
            <pci_device>00</pci_device>
            <pci_domain>0000</pci_domain>
            <pci_device_id>15F710DE</pci_device_id>
            <pci_bus_id>0000:04:00.0</pci_bus_id>
        </pci>
        <performance_state>P0</performance_state>
        <clocks_throttle_reasons>
            <clocks_throttle_reason_gpu_idle>Active</clocks_throttle_reason_gpu_idle>
            <clocks_throttle_reason_sw_power_cap>Not Active</clocks_throttle_reason_sw_power_cap>
            <clocks_throttle_reason_hw_slowdown>Not Active</clocks_throttle_reason_hw_slowdown>
            <clocks_throttle_reason_sync_boost>Not Active</clocks_throttle_reason_sync_boost>
            <clocks_throttle_reason_unknown>Not Active</clocks_throttle_reason_unknown>
        </clocks_throttle_reasons>
        <ecc_mode>
            <current_ecc>Enabled</current_ecc>
            <pending_ecc>Enabled</pending_ecc>
        </ecc_mode>
        <ecc_errors>
            <volatile>
                <single_bit>
                    <device_memory>0</device_memory>
                    <register_file>0</register_file>
                    <l1_cache>N/A</l1_cache>
                    <l2_cache>0</l2_cache>
                    <texture_memory>0</texture_memory>
                    <texture_shm>0</texture_shm>
                    <total>0</total>
                </single_bit>
                <double_bit>
                    <device_memory>0</device_memory>
                    <register_file>0</register_file>
                    <l1_cache>N/A</l1_cache>
                    <l2_cache>0</l2_cache>
                    <texture_memory>0</texture_memory>
                    <texture_shm>0</texture_shm>
                    <total>0</total>
                </double_bit>
            </volatile>
            <aggregate>
                <single_bit>
                    <device_memory>0</device_memory>
                    <total>0</total>
                </single_bit>
                <double_bit>
                    <device_memory>0</device_memory>
                    <total>0</total>
                </double_bit>
            </aggregate>
        </ecc_errors>
        <retired_pages>
            <multiple_single_bit_retirement>
                <retired_count>0</retired_count>
                <retired_page_addresses>
                </retired_page_addresses>
            </multiple_single_bit_retirement>
            <double_bit_retirement>
                <retired_count>0</retired_count>
                <retired_page_addresses>
                </retired_page_addresses>
            </double_bit_retirement>
            <pending_retirement>No</pending_retirement>
        </retired_pages>
        <temperature>
            <gpu_temp>31 C</gpu_temp>
            <gpu_temp_max_threshold>80 C</gpu_temp_max_threshold>
            <gpu_temp_slow_threshold>88 C</gpu_temp_slow_threshold>
        </temperature>
        <power_readings>
            <power_state>P0</power_state>
            <power_management>Supported</power_management>
            <power_draw>24.84 W</power_draw>
            <power_limit>250.00 W</power_limit>
            <default_power_limit>250.00 W</default_power_limit>
            <enforced_power_limit>250.00 W</enforced_power_limit>
            <min_power_limit>125.00 W</min_power_limit>
            <max_power_limit>250.00 W</max_power_limit>
        </power_readings>
    </gpu>

    <gpu id="0000:82:00.0">
        <product_name>Tesla P100-PCIE-12GB_2</product_name>
        <persistence_mode>Disabled</persistence_mode>
        <uuid>GPU-46915a82-3fd2-8e11-ae26-a80b607c04f3</uuid>
        <pci>
            <pci_bus_id>0000:82:00.0</pci_bus_id>
        </pci>
        <clocks_throttle_reasons>
            <clocks_throttle_reason_gpu_idle>Active</clocks_throttle_reason_gpu_idle>
            <clocks_throttle_reason_sw_power_cap>Not Active</clocks_throttle_reason_sw_power_cap>
            <clocks_throttle_reason_hw_slowdown>Not Active</clocks_throttle_reason_hw_slowdown>
            <clocks_throttle_reason_sync_boost>Not Active</clocks_throttle_reason_sync_boost>
            <clocks_throttle_reason_unknown>Not Active</clocks_throttle_reason_unknown>
        </clocks_throttle_reasons>
        <ecc_mode>
            <current_ecc>Enabled</current_ecc>
            <pending_ecc>Enabled</pending_ecc>
        </ecc_mode>
        <ecc_errors>
            <volatile>
                <double_bit>
                    <device_memory>0</device_memory>
                    <total>0</total>
                </double_bit>
            </volatile>
            <aggregate>
                <double_bit>
                    <device_memory>0</device_memory>
                    <total>0</total>
                </double_bit>
            </aggregate>
        </ecc_errors>
        <retired_pages>
            <multiple_single_bit_retirement>
                <retired_count>0</retired_count>
            </multiple_single_bit_retirement>
            <double_bit_retirement>
                <retired_count>0</retired_count>
            </double_bit_retirement>
            <pending_retirement>No</pending_retirement>
        </retired_pages>
        <temperature>
            <gpu_temp>34 C</gpu_temp>
            <gpu_temp_max_threshold>85 C</gpu_temp_max_threshold>
            <gpu_temp_slow_threshold>82 C</gpu_temp_slow_threshold>
        </temperature>
        <power_readings>
            <power_limit>250.00 W</power_limit>
            <default_power_limit>250.00 W</default_power_limit>
            <enforced_power_limit>250.00 W</enforced_power_limit>
            <min_power_limit>125.00 W</min_power_limit>
            <max_power_limit>250.00 W</max_power_limit>
        </power_readings>
    </gpu>

</nvidia_smi_log>"""

# The R550+ layout of the ECC and temperature sections, as drivers 555 print them for Ada GPUs
# (sram_uncorrectable_parity/_secded; the slowdown threshold relative to T.Limit). Values are
# illustrative, the element names are nvidia-smi's.
ADA_XML = """<?xml version="1.0" ?>
<nvidia_smi_log>
    <driver_version>555.42.06</driver_version>
    <cuda_version>12.5</cuda_version>
    <gpu id="00000000:01:00.0">
        <product_name>NVIDIA L4</product_name>
        <persistence_mode>Enabled</persistence_mode>
        <ecc_mode><current_ecc>Enabled</current_ecc><pending_ecc>Enabled</pending_ecc></ecc_mode>
        <ecc_errors>
            <volatile>
                <sram_correctable>0</sram_correctable>
                <sram_uncorrectable_parity>1</sram_uncorrectable_parity>
                <sram_uncorrectable_secded>0</sram_uncorrectable_secded>
                <dram_correctable>5</dram_correctable>
                <dram_uncorrectable>2</dram_uncorrectable>
            </volatile>
            <aggregate>
                <sram_correctable>0</sram_correctable>
                <sram_uncorrectable_parity>1</sram_uncorrectable_parity>
                <sram_uncorrectable_secded>0</sram_uncorrectable_secded>
                <dram_correctable>9</dram_correctable>
                <dram_uncorrectable>6</dram_uncorrectable>
                <sram_threshold_exceeded>No</sram_threshold_exceeded>
            </aggregate>
        </ecc_errors>
        <remapped_rows>
            <remapped_row_corr>0</remapped_row_corr>
            <remapped_row_unc>2</remapped_row_unc>
            <remapped_row_pending>Yes</remapped_row_pending>
            <remapped_row_failure>No</remapped_row_failure>
        </remapped_rows>
        <temperature>
            <gpu_temp>45 C</gpu_temp>
            <gpu_temp_tlimit>39 C</gpu_temp_tlimit>
            <gpu_temp_max_tlimit_threshold>-5 C</gpu_temp_max_tlimit_threshold>
            <gpu_temp_slow_tlimit_threshold>-2 C</gpu_temp_slow_tlimit_threshold>
        </temperature>
        <gpu_power_readings>
            <current_power_limit>72.00 W</current_power_limit>
            <requested_power_limit>72.00 W</requested_power_limit>
            <default_power_limit>72.00 W</default_power_limit>
            <max_power_limit>72.00 W</max_power_limit>
        </gpu_power_readings>
    </gpu>
</nvidia_smi_log>"""


def run(check: Any, host: Host) -> list[Finding]:
    return check.run(host, check.make_params())  # type: ignore[no-any-return]


def statuses(findings: list[Finding]) -> list[Status]:
    return [f.status for f in findings]


def by_status(findings: list[Finding], status: Status) -> list[Finding]:
    return [f for f in findings if f.status == status]


@pytest.fixture
def nvml_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Install a fake pynvml and return a function making a local host of its GPUs."""

    def make(gpus: list[fake.FakeGpu], **kw: Any) -> tuple[LocalHost, Any]:
        mod = fake.module(gpus, **kw)
        monkeypatch.setitem(sys.modules, "pynvml", mod)
        buses = [nvml_bus(g.bus_id) for g in gpus] or ["0000:07:00.0"]
        return local_gpu_host(tmp_path, buses), mod.state

    return make


def nvml_bus(bus: str) -> str:
    return bus[4:].lower()


# -- the fake is the real API ------------------------------------------------------------------


def test_fake_matches_real_pynvml() -> None:
    real = importlib.import_module("pynvml")
    for name, value in fake.CONSTANTS.items():
        assert getattr(real, name) == value, name
    for name, klass in fake.EXCEPTIONS.items():
        real_class = getattr(real, name)
        assert issubclass(real_class, real.NVMLError)
        if name != "NVMLError":
            assert real.NVMLError(klass().value).__class__ is real_class
            assert str(klass()) == str(real_class()), name
    missing = [name for name in fake.API if not hasattr(real, name)]
    assert missing == []


def test_fake_errors_behave_like_pynvml() -> None:
    err = fake.NVMLError(fake.NVML_ERROR_NOT_SUPPORTED)
    assert isinstance(err, fake.NVMLError_NotSupported)
    assert err.value == 3
    assert str(err) == "Not Supported"


def test_real_pynvml_without_the_library_gives_a_reason() -> None:
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("libnvidia-ml is installed here: the library-missing path cannot be shown for real")
    sys.modules.pop("pynvml", None)
    report = nvml.collect_nvml()
    assert report.reason is not None
    assert "libnvidia-ml.so.1 not found" in report.reason
    assert report.gpus == ()


# -- this machine --------------------------------------------------------------------------------


def test_this_machine_skips_without_importing_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    host = LocalHost()
    if nvml.nvidia_devices(host):
        pytest.skip("this machine has an NVIDIA GPU")
    for check in (gpu.CHECK, nvlink.CHECK):
        findings = run(check, host)
        assert statuses(findings) == [Status.SKIPPED]
        assert findings[0].summary.startswith("no NVIDIA GPU")
        assert "/sys/bus/pci/devices" in findings[0].evidence
    assert "pynvml" not in sys.modules


# -- NVML ----------------------------------------------------------------------------------------


def test_healthy_8_gpu_node(nvml_node: Any) -> None:
    host, state = nvml_node(fake.hgx(8))
    findings = run(gpu.CHECK, host)
    assert statuses(findings) == [Status.OK]
    ok = findings[0]
    assert ok.summary == "8 of 8 GPU(s) healthy (NVIDIA A100-SXM4-80GB); driver 535.104.05, CUDA 12.2"
    assert ok.evidence["NVML: driver version"] == "535.104.05"
    assert ok.evidence["NVML: CUDA version"] == "12.2"
    assert ok.evidence["NVML: GPU3 0000:4e:00.0"].startswith("NVIDIA A100-SXM4-80GB, 34 C, 400 W cap, ECC on")
    run(nvlink.CHECK, host)
    # One NVML session per run, shared by both checks, and closed.
    assert (state.inits, state.shutdowns) == (1, 1)
    assert state.calls == ["nvmlInit", "nvmlShutdown"]


def test_nvml_facts_of_one_gpu(nvml_node: Any) -> None:
    host, _ = nvml_node(
        [fake.FakeGpu(clock_reasons=fake.nvmlClocksEventReasonSwPowerCap | 0x800, remapped_rows=(3, 1, 0, 0))]
    )
    report = nvml.collect(host)
    g = report.gpus[0]
    assert (g.index, g.pci_address, g.name) == (0, "0000:07:00.0", "NVIDIA A100-SXM4-80GB")
    assert (g.persistence_mode, g.ecc_enabled, g.volatile_uncorrectable) == (True, True, 0)
    assert (g.retired_pages_dbe, g.retirement_pending) == (None, None)  # NotSupported on Ampere
    assert (g.remapped_correctable, g.remapped_uncorrectable, g.remap_pending) == (3, 1, False)
    assert g.clock_reasons == ("sw_power_cap", "0x800")
    assert (g.power_limit_w, g.default_power_limit_w, g.max_power_limit_w) == (400.0, 400.0, 400.0)
    assert (g.temperature_c, g.slowdown_temp_c, g.slowdown_margin_c) == (34.0, 92.0, 58.0)
    assert len(g.nvlinks) == 12
    assert g.nvlinks[0].remote_pci == "0000:c7:00.0"
    assert g.nvlinks[0].errors == {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0, "ecc_data": 0}
    assert g.errors == {}


def test_ecc_errors(nvml_node: Any) -> None:
    gpus = fake.hgx(8)
    gpus[3].volatile_uncorrectable = 4
    gpus[3].aggregate_uncorrectable = 4
    gpus[5].aggregate_uncorrectable = 7
    host, _ = nvml_node(gpus)
    findings = run(gpu.CHECK, host)
    fail = by_status(findings, Status.FAIL)
    assert [(f.subject, f.summary) for f in fail] == [
        ("0000:4e:00.0", "GPU3 (0000:4e:00.0): 4 uncorrectable ECC error(s) since the driver loaded")
    ]
    assert "nvidia-smi -r -i 3" in fail[0].remediation
    warn = by_status(findings, Status.WARN)
    assert [(f.subject, f.evidence["NVML: GPU5 aggregate uncorrectable ECC errors"]) for f in warn] == [
        ("0000:90:00.0", "7")
    ]
    assert "6 of 8 GPU(s) healthy" in by_status(findings, Status.OK)[0].summary


def test_remap_pending_and_failure(nvml_node: Any) -> None:
    gpus = fake.hgx(2)
    gpus[0].remapped_rows = (0, 1, 1, 0)
    gpus[1].remapped_rows = (0, 8, 0, 1)
    host, _ = nvml_node(gpus)
    findings = run(gpu.CHECK, host)
    fail = {f.subject: f for f in by_status(findings, Status.FAIL)}
    # A pending remap is a WARN: NVIDIA's recovery flags say new workloads can still be launched
    # until the reset activates it (error-recovery-and-response-flags.html).
    warn = {f.subject: f for f in by_status(findings, Status.WARN)}
    assert "0000:07:00.0" not in fail
    assert "pending: reset the GPU" in warn["0000:07:00.0"].summary
    assert "nvidia-smi -r -i 0" in warn["0000:07:00.0"].remediation
    assert "row remapping has failed" in fail["0000:0f:00.0"].summary
    assert "RMA" in fail["0000:0f:00.0"].remediation


def test_pending_page_retirement_on_older_gpus(nvml_node: Any) -> None:
    host, _ = nvml_node(
        [fake.FakeGpu(retired_sbe=2, retired_dbe=1, retired_pending=1, remapped_rows=fake.NOT_SUPPORTED)]
    )
    g = nvml.collect(host).gpus[0]
    assert (g.retired_pages_sbe, g.retired_pages_dbe, g.retirement_pending) == (2, 1, True)
    fail = by_status(gpu.evaluate(gpu.Facts(nvml.collect(host)), DEFAULT), Status.FAIL)
    assert [f.summary for f in fail] == [
        "GPU0 (0000:07:00.0): a page retirement is pending and needs a GPU reset to take effect"
    ]


def test_throttling(nvml_node: Any) -> None:
    gpus = fake.hgx(3)
    gpus[0].clock_reasons = fake.nvmlClocksEventReasonHwSlowdown | fake.nvmlClocksEventReasonHwThermalSlowdown
    gpus[0].temperature = 91
    gpus[1].clock_reasons = fake.nvmlClocksEventReasonSwPowerCap  # at its power limit under load: normal
    host, _ = nvml_node(gpus)
    findings = run(gpu.CHECK, host)
    fail = by_status(findings, Status.FAIL)
    assert [f.summary for f in fail] == [
        "GPU0 (0000:07:00.0): clocks held down by HW slowdown, HW thermal slowdown"
    ]
    assert fail[0].evidence["NVML: GPU0 temperature"] == "91 C"
    # 91 C is 1 C from the slowdown threshold: that is said too.
    warn = by_status(findings, Status.WARN)
    assert [f.summary for f in warn] == ["GPU0 (0000:07:00.0): 91 C, 1 C from HW slowdown (slowdown at 92 C)"]
    assert "2 of 3 GPU(s) healthy" in by_status(findings, Status.OK)[0].summary


def test_throttle_reasons_through_the_pre_r535_name(nvml_node: Any) -> None:
    gpus = [
        fake.FakeGpu(has_event_reasons=False, clock_reasons=fake.nvmlClocksEventReasonHwPowerBrakeSlowdown)
    ]
    host, _ = nvml_node(gpus)
    assert nvml.collect(host).gpus[0].clock_reasons == ("hw_power_brake_slowdown",)


def test_throttle_reasons_with_a_pynvml_that_lacks_the_new_name(nvml_node: Any) -> None:
    gpus = [fake.FakeGpu(clock_reasons=fake.nvmlClocksEventReasonHwSlowdown)]
    host, _ = nvml_node(gpus, without=["nvmlDeviceGetCurrentClocksEventReasons"])
    assert nvml.collect(host).gpus[0].clock_reasons == ("hw_slowdown",)


def test_not_supported_everywhere_consumer_gpu(nvml_node: Any) -> None:
    host, _ = nvml_node([fake.FakeGpu.consumer()])
    g = nvml.collect(host).gpus[0]
    assert g.name == "NVIDIA GeForce RTX 4090"
    assert g.pci_address == "0000:01:00.0"
    unknown = [f.name for f in dataclasses.fields(g) if getattr(g, f.name) is None]
    assert "volatile_uncorrectable" in unknown
    assert "temperature_c" in unknown
    assert g.nvlinks == ()
    assert g.errors == {}  # NotSupported is not an error
    findings = run(gpu.CHECK, host)
    assert statuses(findings) == [Status.OK]
    assert findings[0].evidence["NVML: GPU0 0000:01:00.0"] == "NVIDIA GeForce RTX 4090"
    nv = run(nvlink.CHECK, host)
    assert statuses(nv) == [Status.SKIPPED]
    assert nv[0].summary == "none of the 1 GPU(s) reports an NVLink (PCIe-only GPUs)"


def test_library_missing(nvml_node: Any) -> None:
    host, state = nvml_node(fake.hgx(8), init_error=fake.NVML_ERROR_LIBRARY_NOT_FOUND)
    for check in (gpu.CHECK, nvlink.CHECK):
        findings = run(check, host)
        assert statuses(findings) == [Status.SKIPPED]
        assert findings[0].summary.startswith("NVML not available: libnvidia-ml.so.1 not found")
        assert findings[0].evidence == {"nvmlInit()": "NVML Shared Library Not Found"}
    assert state.shutdowns == 0


def test_driver_not_loaded(nvml_node: Any) -> None:
    host, _ = nvml_node(fake.hgx(2), init_error=fake.NVML_ERROR_DRIVER_NOT_LOADED)
    findings = run(gpu.CHECK, host)
    assert statuses(findings) == [Status.SKIPPED]
    assert "NVIDIA kernel driver is not loaded" in findings[0].summary


def test_driver_loaded_but_no_gpu(nvml_node: Any) -> None:
    host, state = nvml_node([])
    for check in (gpu.CHECK, nvlink.CHECK):
        findings = run(check, host)
        assert statuses(findings) == [Status.SKIPPED]
        assert findings[0].summary == "NVML is loaded (driver 535.104.05) but reports no GPU"
    assert (state.inits, state.shutdowns) == (1, 1)


def test_pynvml_not_installed(nvml_node: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    host, _ = nvml_node(fake.hgx(1))
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    findings = run(gpu.CHECK, host)
    assert statuses(findings) == [Status.SKIPPED]
    assert "pynvml module (nvidia-ml-py) is not installed" in findings[0].summary


def test_version_mismatch_fails(nvml_node: Any) -> None:
    host, _ = nvml_node(fake.hgx(1), init_error=fake.NVML_ERROR_LIB_RM_VERSION_MISMATCH)
    findings = run(gpu.CHECK, host)
    assert statuses(findings) == [Status.FAIL]
    assert "NVML refuses to start" in findings[0].summary
    assert statuses(run(nvlink.CHECK, host)) == [Status.SKIPPED]


def test_mixed_driver_versions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake.module(fake.hgx(1), driver="535.104.05"))
    host = local_gpu_host(tmp_path, ["0000:07:00.0"], {"/sys/module/nvidia/version": "535.54.03\n"})
    warn = by_status(run(gpu.CHECK, host), Status.WARN)
    assert [f.summary for f in warn] == [
        "mixed driver versions: kernel module 535.54.03, user-space driver 535.104.05"
    ]


def test_gpu_lost(nvml_node: Any) -> None:
    gpus = fake.hgx(2)
    gpus[1].handle = fake.Fail(fake.NVML_ERROR_GPU_IS_LOST)
    host, _ = nvml_node(gpus)
    fail = by_status(run(gpu.CHECK, host), Status.FAIL)
    assert [f.summary for f in fail] == ["GPU1: NVML reports the GPU as lost (fallen off the bus)"]
    assert fail[0].evidence == {"NVML: GPU1 nvmlDeviceGetHandleByIndex": "GPU is lost"}


def test_unexpected_nvml_errors_are_reported(nvml_node: Any) -> None:
    host, _ = nvml_node([fake.FakeGpu(aggregate_uncorrectable=fake.Fail(fake.NVML_ERROR_NO_PERMISSION))])
    warn = by_status(run(gpu.CHECK, host), Status.WARN)
    assert [f.summary for f in warn] == ["GPU0 (0000:07:00.0): 1 value(s) could not be read: aggregate ECC"]
    assert warn[0].evidence == {"NVML: GPU0 aggregate ECC": "Insufficient Permissions"}


def test_count_error(nvml_node: Any) -> None:
    host, _ = nvml_node(fake.hgx(1), count_error=fake.NVML_ERROR_UNKNOWN)
    findings = run(gpu.CHECK, host)
    assert statuses(findings) == [Status.SKIPPED]
    assert findings[0].summary == "NVML could not count the GPUs: Unknown Error"


def test_proc_driver_gpus_alone_is_enough_to_try_nvml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As on the POWER9 tree: the PCI devices lack a vendor file, the driver lists its GPUs.
    monkeypatch.setitem(sys.modules, "pynvml", fake.module(fake.hgx(1)))
    (tmp_path / "proc/driver/nvidia/gpus/0000:07:00.0").mkdir(parents=True)
    (tmp_path / "sys").mkdir()
    assert statuses(run(gpu.CHECK, LocalHost(str(tmp_path)))) == [Status.OK]


# -- MIG through NVML --------------------------------------------------------------------------


def test_nvml_mig_devices(nvml_node: Any) -> None:
    # Seven 1g.10gb devices, slots 0-6 (NVML names a MIG device "<GPU name> MIG <profile>").
    migs = [fake.FakeMig(gpu_instance_id=7 + i) for i in range(7)]
    gpus = fake.hgx(2)
    gpus[1].mig_mode = (fake.NVML_DEVICE_MIG_ENABLE, fake.NVML_DEVICE_MIG_ENABLE)
    gpus[1].migs = migs
    gpus[1].utilization = fake.NOT_SUPPORTED  # as NVML answers for a GPU in MIG mode
    host, _ = nvml_node(gpus)
    g = nvml.collect(host).gpus[1]
    assert (g.mig_current, g.mig_pending) == (True, True)
    assert g.mig_listed
    assert [(m.index, m.gpu_instance_id, m.compute_instance_id, m.profile) for m in g.mig_instances] == [
        (i, 7 + i, 0, "1g.10gb") for i in range(7)
    ]
    assert (g.mig_instances[0].multiprocessors, g.mig_instances[0].memory_mib) == (14, 9856.0)
    assert g.errors == {}
    assert nvml.collect(host).gpus[0].mig_current is False
    findings = run(gpu.CHECK, host)
    assert statuses(findings) == [Status.OK, Status.OK]
    plain, mig = findings
    assert plain.summary.startswith("1 of 2 GPU(s) healthy (NVIDIA A100-SXM4-80GB)")
    assert plain.summary.endswith("; 1 in MIG mode, reported apart")
    assert mig.summary == (
        "GPU1 (0000:0f:00.0): MIG enabled: 7 instance(s) (7x 1g.10gb); "
        "0 uncorrectable ECC error(s) in the instances"
    )
    assert mig.evidence["NVML: GPU1 MIG 6 (GI 13/CI 0)"] == "1g.10gb; 0 uncorrectable ECC"


def test_nvml_mig_empty_slots_are_not_errors(nvml_node: Any) -> None:
    # A 3g.40gb and a 4g.40gb: NVML answers NOT_FOUND for the slots nobody created.
    gpu0 = fake.FakeGpu(
        mig_mode=(fake.NVML_DEVICE_MIG_ENABLE, fake.NVML_DEVICE_MIG_ENABLE),
        migs=[
            fake.FakeMig(gpu_instance_id=1, name="NVIDIA A100-SXM4-80GB MIG 4g.40gb"),
            None,
            fake.FakeMig(gpu_instance_id=2, name="NVIDIA A100-SXM4-80GB MIG 3g.40gb"),
        ],
    )
    host, _ = nvml_node([gpu0])
    g = nvml.collect(host).gpus[0]
    assert [(m.index, m.profile) for m in g.mig_instances] == [(0, "4g.40gb"), (2, "3g.40gb")]
    assert g.errors == {}


def test_nvml_mig_instance_ecc_is_a_fault_of_the_gpu(nvml_node: Any) -> None:
    gpu0 = fake.FakeGpu(
        mig_mode=(fake.NVML_DEVICE_MIG_ENABLE, fake.NVML_DEVICE_MIG_ENABLE),
        migs=[fake.FakeMig(gpu_instance_id=1), fake.FakeMig(gpu_instance_id=2, volatile_uncorrectable=2)],
    )
    host, _ = nvml_node([gpu0])
    fail = by_status(run(gpu.CHECK, host), Status.FAIL)
    assert [(f.subject, f.summary) for f in fail] == [
        (
            "0000:07:00.0",
            "GPU0 (0000:07:00.0): 2 uncorrectable ECC error(s) in MIG device(s) MIG 1 (GI 2/CI 0)",
        )
    ]
    assert fail[0].evidence == {"NVML: GPU0 MIG 1 (GI 2/CI 0) volatile uncorrectable ECC errors": "2"}


def test_nvml_mig_mode_change_pending(nvml_node: Any) -> None:
    # `nvidia-smi -i 0 -mig 1` with a process on the GPU leaves MIG "pending enable" until a reset.
    host, _ = nvml_node([fake.FakeGpu(mig_mode=(fake.NVML_DEVICE_MIG_DISABLE, fake.NVML_DEVICE_MIG_ENABLE))])
    warn = by_status(run(gpu.CHECK, host), Status.WARN)
    assert [f.summary for f in warn] == [
        "GPU0 (0000:07:00.0): MIG mode change pending: reset the GPU (MIG disabled now, enabled after the "
        "next GPU reset)"
    ]
    assert gpu.MIG_DOCS in warn[0].remediation


def test_nvml_without_mig_functions(nvml_node: Any) -> None:
    host, _ = nvml_node(fake.hgx(1), without=["nvmlDeviceGetMigMode"])
    g = nvml.collect(host).gpus[0]
    assert (g.mig_current, g.mig_pending, g.mig_instances, g.mig_listed) == (None, None, (), False)
    assert statuses(run(gpu.CHECK, host)) == [Status.OK]


# -- nvidia-smi -q -x ----------------------------------------------------------------------------


def test_parse_a100_recording() -> None:
    log = nvidia_smi.parse_xml(A100_XML)
    assert (log.driver_version, log.cuda_version, log.problems) == ("535.54.03", "12.2", ())
    (g,) = log.gpus
    assert (g.index, g.pci_address, g.name) == (0, "0000:01:00.0", "NVIDIA A100-SXM4-80GB")
    assert g.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert (g.persistence_mode, g.ecc_enabled) == (False, True)
    assert (g.volatile_uncorrectable, g.aggregate_uncorrectable) == (0, 0)
    assert (g.retired_pages_dbe, g.retirement_pending, g.remap_pending, g.remap_failure) == (
        None,
        None,
        None,
        None,
    )
    assert g.clock_reasons == ()
    assert (g.power_limit_w, g.enforced_power_limit_w, g.default_power_limit_w, g.max_power_limit_w) == (
        500.0,
        500.0,
        500.0,
        500.0,
    )
    assert (g.temperature_c, g.slowdown_temp_c, g.slowdown_margin_c) == (27.0, 89.0, 62.0)


def test_parse_p100_recording_pre_r470_layout() -> None:
    log = nvidia_smi.parse_xml(P100_XML)
    assert (log.driver_version, log.cuda_version, log.problems) == ("375.66", None, ())
    assert [g.pci_address for g in log.gpus] == ["0000:04:00.0", "0000:82:00.0"]
    first, second = log.gpus
    assert (first.volatile_uncorrectable, first.aggregate_uncorrectable) == (0, 0)
    assert (first.retired_pages_sbe, first.retired_pages_dbe, first.retirement_pending) == (0, 0, False)
    assert first.clock_reasons == ("gpu_idle",)
    assert (first.power_limit_w, first.enforced_power_limit_w, first.default_power_limit_w) == (
        250.0,
        250.0,
        250.0,
    )
    assert (first.temperature_c, first.slowdown_margin_c) == (31.0, 57.0)
    assert (second.temperature_c, second.slowdown_temp_c, second.slowdown_margin_c) == (34.0, 82.0, 48.0)
    assert second.remap_pending is None


def test_parse_r550_layout() -> None:
    (g,) = nvidia_smi.parse_xml(ADA_XML).gpus
    assert (g.volatile_uncorrectable, g.aggregate_uncorrectable) == (3, 7)
    assert (g.remapped_correctable, g.remapped_uncorrectable, g.remap_pending, g.remap_failure) == (
        0,
        2,
        True,
        False,
    )
    assert (g.temperature_c, g.slowdown_temp_c, g.slowdown_margin_c) == (45.0, None, 41.0)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage",
        "<nvidia_smi_log><gpu>",
        A100_XML[: len(A100_XML) // 2],
        "<nvidia_smi_log>\x00</nvidia_smi_log>",
    ],
)
def test_parse_rejects_what_is_not_the_xml(text: str) -> None:
    with pytest.raises(ValueError):
        nvidia_smi.parse_xml(text)


# The fourth MIG device of A100_XML (GPU instance 6), as printed.
_MIG_DEVICE_3 = """<gpu_instance_id>6</gpu_instance_id>
                <compute_instance_id>0</compute_instance_id>
                <device_attributes>
                    <shared>
                        <multiprocessor_count>14</multiprocessor_count>
                        <copy_engine_count>1</copy_engine_count>
                        <encoder_count>0</encoder_count>
                        <decoder_count>1</decoder_count>
                        <ofa_count>0</ofa_count>
                        <jpg_count>0</jpg_count>
                    </shared>
                </device_attributes>
                <ecc_error_count>
                    <volatile_count>
                        <sram_uncorrectable>0</sram_uncorrectable>"""


def test_parse_mig_devices() -> None:
    # Every value below is read off A100_XML: <mig_mode>, then each <mig_device>.
    (g,) = nvidia_smi.parse_xml(A100_XML).gpus
    assert (g.mig_current, g.mig_pending) == (True, True)
    assert g.mig_listed
    assert [
        (m.index, m.gpu_instance_id, m.compute_instance_id, m.multiprocessors, m.memory_mib, m.profile)
        for m in g.mig_instances
    ] == [(i, 3 + i, 0, 14, 19968.0, None) for i in range(4)]
    assert [m.volatile_uncorrectable for m in g.mig_instances] == [0, 0, 0, 0]
    assert g.unparsable == {}


def test_parse_mig_off_and_not_capable() -> None:
    # P100 (R375): no <mig_mode> at all. A100 with MIG off: "Disabled", and <mig_devices>None.
    (p100, _) = nvidia_smi.parse_xml(P100_XML).gpus
    assert (p100.mig_current, p100.mig_pending, p100.mig_listed) == (None, None, False)
    off = A100_XML.replace("<current_mig>Enabled", "<current_mig>Disabled").replace(
        "<pending_mig>Enabled", "<pending_mig>Disabled"
    )
    start, end = off.index("<mig_devices>"), off.index("</mig_devices>")
    (g,) = nvidia_smi.parse_xml(off[:start] + "<mig_devices>\n\t\t\tNone\n\t\t" + off[end:]).gpus
    assert (g.mig_current, g.mig_pending, g.mig_instances, g.mig_listed) == (False, False, (), True)


def test_snapshot_mig_mode_change_pending(tmp_path: Path) -> None:
    # A100_XML with <pending_mig> Disabled: `nvidia-smi -mig 0` was run and the GPU not reset since.
    xml = A100_XML.replace("<pending_mig>Enabled</pending_mig>", "<pending_mig>Disabled</pending_mig>")
    warn = by_status(run(gpu.CHECK, snapshot(tmp_path, xml)), Status.WARN)
    mig = [f for f in warn if f.subject == "0000:01:00.0"]
    assert [f.summary for f in mig] == [
        "GPU0 (0000:01:00.0): MIG mode change pending: reset the GPU (MIG enabled now, disabled after the "
        "next GPU reset)"
    ]
    assert mig[0].evidence == {
        "nvidia-smi -q -x: GPU0 MIG mode (current)": "enabled",
        "nvidia-smi -q -x: GPU0 MIG mode (pending)": "disabled",
    }
    assert "nvidia-smi -r -i 0" in mig[0].remediation
    assert "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/" in mig[0].remediation


def test_snapshot_mig_instance_ecc_fails_the_gpu(tmp_path: Path) -> None:
    # A100_XML with 3 volatile uncorrectable SRAM errors in its fourth MIG device (GPU instance 6).
    assert A100_XML.count(_MIG_DEVICE_3) == 1
    xml = A100_XML.replace(
        _MIG_DEVICE_3, _MIG_DEVICE_3.replace(">0</sram_uncorrectable>", ">3</sram_uncorrectable>")
    )
    fail = by_status(run(gpu.CHECK, snapshot(tmp_path, xml)), Status.FAIL)
    assert [(f.subject, f.summary) for f in fail] == [
        (
            "0000:01:00.0",
            "GPU0 (0000:01:00.0): 3 uncorrectable ECC error(s) in MIG device(s) MIG 3 (GI 6/CI 0)",
        )
    ]
    assert fail[0].evidence == {
        "nvidia-smi -q -x: GPU0 MIG 3 (GI 6/CI 0) volatile uncorrectable ECC errors": "3"
    }


def test_snapshot_mig_instance_ecc_joins_the_gpu_ecc_finding(tmp_path: Path) -> None:
    # The same error counted in the GPU's own volatile SRAM count too: one finding, both counts.
    xml = A100_XML.replace(
        _MIG_DEVICE_3, _MIG_DEVICE_3.replace(">0</sram_uncorrectable>", ">3</sram_uncorrectable>")
    )
    xml = xml.replace(
        "<volatile>\n                <sram_correctable>0</sram_correctable>\n                "
        "<sram_uncorrectable>0</sram_uncorrectable>",
        "<volatile>\n                <sram_correctable>0</sram_correctable>\n                "
        "<sram_uncorrectable>3</sram_uncorrectable>",
    )
    fail = by_status(run(gpu.CHECK, snapshot(tmp_path, xml)), Status.FAIL)
    assert [f.summary for f in fail] == [
        "GPU0 (0000:01:00.0): 3 uncorrectable ECC error(s) since the driver loaded"
    ]
    assert fail[0].evidence == {
        "nvidia-smi -q -x: GPU0 volatile uncorrectable ECC errors": "3",
        "nvidia-smi -q -x: GPU0 MIG 3 (GI 6/CI 0) volatile uncorrectable ECC errors": "3",
    }


def test_snapshot_mig_enabled_without_devices_warns(tmp_path: Path) -> None:
    start, end = A100_XML.index("<mig_devices>"), A100_XML.index("</mig_devices>")
    xml = A100_XML[:start] + "<mig_devices>None" + A100_XML[end:]
    warn = by_status(run(gpu.CHECK, snapshot(tmp_path, xml)), Status.WARN)
    assert [f.summary for f in warn if f.subject == "0000:01:00.0"] == [
        "GPU0 (0000:01:00.0): MIG enabled but no MIG device: CUDA sees no device on this GPU"
    ]


def test_snapshot_mig_mode_unparsable_is_unknown(tmp_path: Path) -> None:
    xml = A100_XML.replace("<current_mig>Enabled</current_mig>", "<current_mig>Enbaled</current_mig>")
    findings = run(gpu.CHECK, snapshot(tmp_path, xml))
    unknown = by_status(findings, Status.UNKNOWN)
    assert [(f.subject, f.summary) for f in unknown] == [
        ("0000:01:00.0", "GPU0 (0000:01:00.0): MIG state unknown: 1 value(s) could not be parsed")
    ]
    assert unknown[0].evidence == {
        "nvidia-smi -q -x: GPU0 mig_mode/current_mig": "unexpected value 'Enbaled'"
    }


def test_parse_records_unparsable_values() -> None:
    log = nvidia_smi.parse_xml(A100_XML.replace("<gpu_temp>27 C</gpu_temp>", "<gpu_temp>hot</gpu_temp>"))
    assert log.gpus[0].temperature_c is None
    assert log.problems == ("GPU 00000000:01:00.0 temperature/gpu_temp: unparsable value 'hot'",)


# -- snapshots -------------------------------------------------------------------------------------


def snapshot(tmp_path: Path, xml: str | None, extra: dict[str, str] | None = None) -> Host:
    commands = {"nvidia-smi-q-x": xml} if xml is not None else {}
    return make_tree(tmp_path, {**nvidia_pci_files(["0000:01:00.0"]), **(extra or {})}, commands=commands)


def test_snapshot_end_to_end(tmp_path: Path) -> None:
    host = snapshot(tmp_path, A100_XML, {"/sys/module/nvidia/version": "535.54.03\n"})
    findings = run(gpu.CHECK, host)
    assert statuses(findings) == [Status.WARN, Status.OK]
    warn, ok = findings
    assert warn.summary == "persistence mode is off on 1 of 1 GPU(s): GPU0"
    assert warn.evidence == {"nvidia-smi -q -x: GPU0 persistence mode": "disabled"}
    assert "nvidia-persistenced" in warn.remediation
    # MIG is on (<current_mig>Enabled</current_mig>): the GPU is reported as split, not as a plain GPU.
    assert ok.subject == "0000:01:00.0"
    assert ok.summary == (
        "GPU0 (0000:01:00.0): MIG enabled: 4 instance(s) (4x 14 SMs/19968 MiB); "
        "0 uncorrectable ECC error(s) in the instances"
    )
    assert ok.evidence["nvidia-smi -q -x: GPU0 MIG 0 (GI 3/CI 0)"] == "14 SMs/19968 MiB; 0 uncorrectable ECC"
    assert ok.evidence["nvidia-smi -q -x: GPU0 MIG 3 (GI 6/CI 0)"] == "14 SMs/19968 MiB; 0 uncorrectable ECC"
    assert ok.evidence["nvidia-smi -q -x: GPU0 0000:01:00.0"] == (
        "NVIDIA A100-SXM4-80GB, 27 C, 500 W cap, ECC on, 0 volatile uncorrectable"
    )
    assert ok.evidence["nvidia-smi -q -x: driver version"] == "535.54.03"


def test_snapshot_remap_pending(tmp_path: Path) -> None:
    xml = A100_XML.replace(
        "<remapped_rows>N/A</remapped_rows>",
        "<remapped_rows><remapped_row_corr>0</remapped_row_corr><remapped_row_unc>1</remapped_row_unc>"
        "<remapped_row_pending>Yes</remapped_row_pending><remapped_row_failure>No</remapped_row_failure>"
        "</remapped_rows>",
    )
    findings = run(gpu.CHECK, snapshot(tmp_path, xml))
    assert by_status(findings, Status.FAIL) == []
    assert [f.summary for f in by_status(findings, Status.WARN)] == [
        "GPU0 (0000:01:00.0): a row remapping is pending: reset the GPU to activate it",
        "persistence mode is off on 1 of 1 GPU(s): GPU0",  # the recording's own setting
    ]


def test_snapshot_throttling_and_ecc(tmp_path: Path) -> None:
    xml = A100_XML.replace(
        "<clocks_event_reason_hw_thermal_slowdown>Not Active",
        "<clocks_event_reason_hw_thermal_slowdown>Active",
    ).replace("<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>2</dram_uncorrectable>")
    fail = by_status(run(gpu.CHECK, snapshot(tmp_path, xml)), Status.FAIL)
    assert sorted(f.summary for f in fail) == [
        "GPU0 (0000:01:00.0): 2 uncorrectable ECC error(s) since the driver loaded",
        "GPU0 (0000:01:00.0): clocks held down by HW thermal slowdown",
    ]


def test_snapshot_legacy_recording_is_healthy_but_persistence_off(tmp_path: Path) -> None:
    findings = run(gpu.CHECK, snapshot(tmp_path, P100_XML))
    assert statuses(findings) == [Status.WARN, Status.OK]
    assert findings[0].summary == "persistence mode is off on 2 of 2 GPU(s): GPU0, GPU1"
    assert findings[1].summary.endswith("driver 375.66, CUDA ?")


def test_snapshot_without_the_recording(tmp_path: Path) -> None:
    findings = run(gpu.CHECK, snapshot(tmp_path, None))
    assert statuses(findings) == [Status.SKIPPED]
    assert findings[0].summary.startswith("1 NVIDIA GPU(s) (0000:01:00.0) but no `nvidia-smi -q -x` data:")
    assert "not recorded in snapshot" in findings[0].summary


def test_snapshot_nvidia_smi_failed(tmp_path: Path) -> None:
    host = snapshot(
        tmp_path,
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n",
        {"/commands/nvidia-smi-q-x.exit": "9\n"},
    )
    findings = run(gpu.CHECK, host)
    assert statuses(findings) == [Status.SKIPPED]
    assert "couldn't communicate with the NVIDIA driver" in findings[0].summary


def test_snapshot_version_mismatch(tmp_path: Path) -> None:
    host = snapshot(
        tmp_path,
        "Failed to initialize NVML: Driver/library version mismatch\n",
        {"/commands/nvidia-smi-q-x.exit": "18\n", "/proc/driver/nvidia/version": _PROC_VERSION},
    )
    findings = run(gpu.CHECK, host)
    assert statuses(findings) == [Status.FAIL]
    assert findings[0].evidence == {
        "nvidia-smi -q -x": "Failed to initialize NVML: Driver/library version mismatch",
        "/sys/module/nvidia/version or /proc/driver/nvidia/version": "535.54.03",
    }


_PROC_VERSION = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.54.03  Tue Jun  6 22:20:39 UTC 2023\n"
    "GCC version:  gcc version 11.3.0 (Ubuntu 11.3.0-1ubuntu1~22.04.1)\n"
)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("535.104.05\n", "535.104.05"),
        ("garbage\n", None),
        ("\x00\x00", None),
    ],
)
def test_kernel_module_version(tmp_path: Path, content: str, expected: str | None) -> None:
    host = make_tree(tmp_path, {"/sys/module/nvidia/version": content})
    assert gpu_report.kernel_module_version(host) == expected


def test_kernel_module_version_from_proc(tmp_path: Path) -> None:
    open_module = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build\n"
    assert gpu_report.kernel_module_version(
        make_tree(tmp_path, {"/proc/driver/nvidia/version": open_module})
    ) == ("580.95.05")


@pytest.mark.parametrize(
    "mangle",
    [
        lambda x: x[: len(x) // 3],
        lambda x: x.replace("<gpu ", "<gpu\x00 "),
        lambda x: "\x00" * 10,
    ],
)
def test_snapshot_corrupt_recording_is_unknown(tmp_path: Path, mangle: Any) -> None:
    findings = run(gpu.CHECK, snapshot(tmp_path, mangle(A100_XML)))
    assert statuses(findings) == [Status.UNKNOWN]
    assert findings[0].summary.startswith("unparsable `nvidia-smi -q -x` output")


def test_snapshot_garbage_values_are_reported(tmp_path: Path) -> None:
    xml = A100_XML.replace("<default_power_limit>500.00 W", "<default_power_limit>5OO W").replace(
        "<persistence_mode>Disabled", "<persistence_mode>sometimes"
    )
    warn = by_status(run(gpu.CHECK, snapshot(tmp_path, xml)), Status.WARN)
    assert [f.subject for f in warn] == ["parse"]
    assert warn[0].evidence == {
        "GPU 00000000:01:00.0 persistence_mode": "unexpected value 'sometimes'",
        "GPU 00000000:01:00.0 gpu_power_readings/default_power_limit": "unparsable value '5OO W'",
    }


# -- recorded hwloc trees --------------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURE_TREES)
def test_fixture_trees_skip_with_a_reason(name: str) -> None:
    findings = run(gpu.CHECK, fixture_host(name))
    assert statuses(findings) == [Status.SKIPPED]
    assert Status.UNKNOWN not in statuses(findings)


def test_power9_tree_names_its_gpus() -> None:
    # nvidiagpunumanodes: six GPUs listed by the driver in /proc/driver/nvidia/gpus (their PCI
    # entries carry only class and local_cpus), and no nvidia-smi recording.
    findings = run(gpu.CHECK, fixture_host("nvidiagpunumanodes"))
    assert findings[0].summary.startswith(
        "6 NVIDIA GPU(s) (0004:05:00.0, 0004:06:00.0, 0006:00:00.0, 0007:00:00.0, ...) but no "
        "`nvidia-smi -q -x` data"
    )


def test_intel_tree_has_no_nvidia_gpu() -> None:
    findings = run(gpu.CHECK, fixture_host("40intel64-2g2n4c+pcilocality"))
    assert findings[0].summary.startswith("no NVIDIA GPU: none on the PCI bus")


# -- evaluate on hand-built facts --------------------------------------------------------------


def test_evaluate_ok() -> None:
    findings = gpu.evaluate(report(healthy(0), healthy(1)), DEFAULT)
    assert statuses(findings) == [Status.OK]
    assert findings[0].summary == "2 of 2 GPU(s) healthy (NVIDIA H100 80GB HBM3); driver 550.54.15, CUDA 12.4"


@pytest.mark.parametrize(
    ("change", "status", "summary"),
    [
        ({"volatile_uncorrectable": 1}, Status.FAIL, "1 uncorrectable ECC error(s) since the driver loaded"),
        ({"remap_failure": True}, Status.FAIL, "a row remapping has failed"),
        ({"remap_pending": True}, Status.WARN, "a row remapping is pending: reset the GPU to activate it"),
        ({"retirement_pending": True}, Status.FAIL, "a page retirement is pending and needs a GPU reset"),
        ({"clock_reasons": ("sw_thermal_slowdown",)}, Status.FAIL, "clocks held down by SW thermal slowdown"),
        ({"lost": True}, Status.FAIL, "NVML reports the GPU as lost"),
        ({"aggregate_uncorrectable": 2}, Status.WARN, "2 uncorrectable ECC error(s) over its lifetime"),
        ({"ecc_enabled": False}, Status.WARN, "ECC is disabled"),
        ({"power_limit_w": 500.0}, Status.WARN, "power limit 500 W is below the default 700 W, max 700 W"),
        ({"enforced_power_limit_w": 600.0}, Status.WARN, "power limit 600 W is below the default 700 W"),
        ({"slowdown_margin_c": 4.0, "temperature_c": 86.0}, Status.WARN, "86 C, 4 C from HW slowdown"),
        ({"errors": {"nvmlDeviceGetUUID": "Unknown Error"}}, Status.WARN, "1 value(s) could not be read"),
    ],
)
def test_evaluate_per_gpu_branches(change: dict[str, Any], status: Status, summary: str) -> None:
    findings = gpu.evaluate(report(healthy(0), healthy(1, **change)), DEFAULT)
    flagged = [f for f in findings if f.status != Status.OK]
    assert [f.status for f in flagged] == [status]
    assert summary in flagged[0].summary
    assert flagged[0].subject == "0000:19:00.0"
    assert flagged[0].remediation
    assert flagged[0].expected
    assert by_status(findings, Status.OK)[0].summary.startswith("1 of 2 GPU(s) healthy")


def test_evaluate_params() -> None:
    facts = report(
        healthy(
            0, persistence_mode=False, ecc_enabled=False, power_limit_w=650.0, clock_reasons=("hw_slowdown",)
        )
    )
    relaxed = gpu.Params(
        require_persistence=False, require_ecc=False, min_power_limit_pct=90.0, fail_clock_reasons=()
    )
    assert statuses(gpu.evaluate(facts, relaxed)) == [Status.OK]
    strict = gpu.Params(min_slowdown_margin_c=60.0)
    assert Status.WARN in statuses(gpu.evaluate(report(healthy(0)), strict))


def test_evaluate_node_wide_branches() -> None:
    facts = report(
        healthy(0, persistence_mode=False), kernel_module_version="550.54.14", problems=("x: bad",)
    )
    findings = gpu.evaluate(facts, DEFAULT)
    assert [(f.status, f.subject) for f in findings] == [
        (Status.WARN, "persistence"),
        (Status.WARN, "driver"),
        (Status.WARN, "parse"),
        (Status.OK, "gpus"),
    ]


def test_evaluate_skipped_unknown_failed() -> None:
    skipped = gpu.evaluate(gpu.Facts(GpuReport("NVML", reason="NVML not available: x")), DEFAULT)
    assert [(f.status, f.summary) for f in skipped] == [(Status.SKIPPED, "NVML not available: x")]
    unknown = gpu.evaluate(gpu.Facts(GpuReport("nvidia-smi -q -x", error="unparsable")), DEFAULT)
    assert [(f.status, f.evidence) for f in unknown] == [(Status.UNKNOWN, {"nvidia-smi -q -x": "unparsable"})]
    failed = gpu.evaluate(gpu.Facts(GpuReport("NVML", failure="mismatch")), DEFAULT)
    assert statuses(failed) == [Status.FAIL]


def test_declared_reads() -> None:
    assert ("nvidia-smi", "-q", "-x") in gpu.CHECK.commands
    assert ("nvidia-smi", "nvlink", "-s") in gpu.CHECK.commands
    assert "/proc/driver/nvidia/gpus/*/information" in gpu.CHECK.paths
    assert "/sys/bus/pci/devices/*/vendor" in gpu.CHECK.paths
    assert gpu.CHECK.tags == ("preflight", "gpu")
    assert gpu.CHECK.title == "GPU health"


def test_malformed_bus_id_in_a_recording_does_not_raise(tmp_path: Path) -> None:
    xml = A100_XML.replace('<gpu id="00000000:01:00.0">', '<gpu id="zz:01:00.0">').replace(
        "<pci_bus_id>00000000:01:00.0</pci_bus_id>", ""
    )
    findings = run(gpu.CHECK, snapshot(tmp_path, xml))
    assert statuses(findings) == [Status.WARN, Status.OK]
    assert "NVIDIA A100-SXM4-80GB" in findings[1].evidence["nvidia-smi -q -x: GPU0 zz:01:00.0"]


@settings(max_examples=150, deadline=None)
@given(
    start=st.integers(min_value=0, max_value=len(A100_XML)),
    length=st.integers(min_value=0, max_value=40),
    junk=st.text(max_size=12),
)
def test_mutated_recordings_never_raise(start: int, length: int, junk: str) -> None:
    text = A100_XML[:start] + junk + A100_XML[start + length :]
    try:
        log = nvidia_smi.parse_xml(text)
    except ValueError:
        return
    facts = gpu.Facts(GpuReport("nvidia-smi -q -x", gpus=log.gpus, problems=log.problems))
    for finding in gpu.evaluate(facts, DEFAULT):
        assert finding.status in Status
