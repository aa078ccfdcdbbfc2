"""GPU test data shared by the gpu, nvlink, bus-recovery and redaction tests: a real
`nvidia-smi -q -x` recording, the sysfs PCI attributes of NVIDIA GPUs, and NVML facts built by hand."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from nodeagent.checks import gpu
from nodeagent.facts.gpu_report import GpuHealth, GpuReport
from nodeagent.host import LocalHost

# Checkmk/checkmk, tests/unit-shell/agents/plugins/test_nvidia_smi.sh (commit 8ef3ba86): an
# A100-SXM4-80GB with MIG enabled and four MIG devices (GPU instances 3-6, compute instance 0, 14 SMs
# and 19968 MiB each, 0 volatile uncorrectable SRAM errors each), driver 535.54.03
# (nvsmi_device_v12.dtd). Row remapping reads N/A there (NVML does not report it while MIG
# instances exist) and persistence mode is off. The <mig_devices> block is verbatim.
A100_XML = """
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
    <timestamp>Fri Aug  4 11:44:30 2023</timestamp>
    <driver_version>535.54.03</driver_version>
    <cuda_version>12.2</cuda_version>
    <attached_gpus>4</attached_gpus>
    <gpu id="00000000:01:00.0">
        <product_name>NVIDIA A100-SXM4-80GB</product_name>
        <product_brand>NVIDIA</product_brand>
        <product_architecture>Ampere</product_architecture>
        <display_mode>Enabled</display_mode>
        <display_active>Disabled</display_active>
        <persistence_mode>Disabled</persistence_mode>
        <addressing_mode>None</addressing_mode>
        <mig_mode>
            <current_mig>Enabled</current_mig>
            <pending_mig>Enabled</pending_mig>
        </mig_mode>
        <mig_devices>
            <mig_device>
                <index>0</index>
                <gpu_instance_id>3</gpu_instance_id>
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
                        <sram_uncorrectable>0</sram_uncorrectable>
                    </volatile_count>
                </ecc_error_count>
                <fb_memory_usage>
                    <total>19968 MiB</total>
                    <reserved>0 MiB</reserved>
                    <used>12 MiB</used>
                    <free>19955 MiB</free>
                </fb_memory_usage>
                <bar1_memory_usage>
                    <total>32767 MiB</total>
                    <used>0 MiB</used>
                    <free>32767 MiB</free>
                </bar1_memory_usage>
            </mig_device>
            <mig_device>
                <index>1</index>
                <gpu_instance_id>4</gpu_instance_id>
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
                        <sram_uncorrectable>0</sram_uncorrectable>
                    </volatile_count>
                </ecc_error_count>
                <fb_memory_usage>
                    <total>19968 MiB</total>
                    <reserved>0 MiB</reserved>
                    <used>12 MiB</used>
                    <free>19955 MiB</free>
                </fb_memory_usage>
                <bar1_memory_usage>
                    <total>32767 MiB</total>
                    <used>0 MiB</used>
                    <free>32767 MiB</free>
                </bar1_memory_usage>
            </mig_device>
            <mig_device>
                <index>2</index>
                <gpu_instance_id>5</gpu_instance_id>
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
                        <sram_uncorrectable>0</sram_uncorrectable>
                    </volatile_count>
                </ecc_error_count>
                <fb_memory_usage>
                    <total>19968 MiB</total>
                    <reserved>0 MiB</reserved>
                    <used>12 MiB</used>
                    <free>19955 MiB</free>
                </fb_memory_usage>
                <bar1_memory_usage>
                    <total>32767 MiB</total>
                    <used>0 MiB</used>
                    <free>32767 MiB</free>
                </bar1_memory_usage>
            </mig_device>
            <mig_device>
                <index>3</index>
                <gpu_instance_id>6</gpu_instance_id>
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
                        <sram_uncorrectable>0</sram_uncorrectable>
                    </volatile_count>
                </ecc_error_count>
                <fb_memory_usage>
                    <total>19968 MiB</total>
                    <reserved>0 MiB</reserved>
                    <used>12 MiB</used>
                    <free>19955 MiB</free>
                </fb_memory_usage>
                <bar1_memory_usage>
                    <total>32767 MiB</total>
                    <used>0 MiB</used>
                    <free>32767 MiB</free>
                </bar1_memory_usage>
            </mig_device>
        </mig_devices>
        <serial>1650522003820</serial>
        <uuid>GPU-513536b6-7d19-9063-b049-1e69664bb298</uuid>
        <minor_number>1</minor_number>
        <vbios_version>92.00.36.00.02</vbios_version>
        <gpu_module_id>4</gpu_module_id>
        <gpu_reset_status>
            <reset_required>No</reset_required>
            <drain_and_reset_recommended>No</drain_and_reset_recommended>
        </gpu_reset_status>
        <pci>
            <pci_bus>01</pci_bus>
            <pci_device>00</pci_device>
            <pci_domain>0000</pci_domain>
            <pci_device_id>20B210DE</pci_device_id>
            <pci_bus_id>00000000:01:00.0</pci_bus_id>
            <pci_sub_system_id>147F10DE</pci_sub_system_id>
            <replay_counter>0</replay_counter>
        </pci>
        <fan_speed>N/A</fan_speed>
        <performance_state>P0</performance_state>
        <clocks_event_reasons>
            <clocks_event_reason_gpu_idle>Not Active</clocks_event_reason_gpu_idle>
            <clocks_event_reason_sw_power_cap>Not Active</clocks_event_reason_sw_power_cap>
            <clocks_event_reason_hw_slowdown>Not Active</clocks_event_reason_hw_slowdown>
            <clocks_event_reason_hw_thermal_slowdown>Not Active</clocks_event_reason_hw_thermal_slowdown>
            <clocks_event_reason_sync_boost>Not Active</clocks_event_reason_sync_boost>
            <clocks_event_reason_sw_thermal_slowdown>Not Active</clocks_event_reason_sw_thermal_slowdown>
        </clocks_event_reasons>
        <compute_mode>Default</compute_mode>
        <ecc_mode>
            <current_ecc>Enabled</current_ecc>
            <pending_ecc>Enabled</pending_ecc>
        </ecc_mode>
        <ecc_errors>
            <volatile>
                <sram_correctable>0</sram_correctable>
                <sram_uncorrectable>0</sram_uncorrectable>
                <dram_correctable>0</dram_correctable>
                <dram_uncorrectable>0</dram_uncorrectable>
            </volatile>
            <aggregate>
                <sram_correctable>0</sram_correctable>
                <sram_uncorrectable>0</sram_uncorrectable>
                <dram_correctable>0</dram_correctable>
                <dram_uncorrectable>0</dram_uncorrectable>
            </aggregate>
        </ecc_errors>
        <retired_pages>
            <multiple_single_bit_retirement>
                <retired_count>N/A</retired_count>
                <retired_pagelist>N/A</retired_pagelist>
            </multiple_single_bit_retirement>
            <double_bit_retirement>
                <retired_count>N/A</retired_count>
                <retired_pagelist>N/A</retired_pagelist>
            </double_bit_retirement>
            <pending_blacklist>N/A</pending_blacklist>
            <pending_retirement>N/A</pending_retirement>
        </retired_pages>
        <remapped_rows>N/A</remapped_rows>
        <temperature>
            <gpu_temp>27 C</gpu_temp>
            <gpu_temp_tlimit>N/A</gpu_temp_tlimit>
            <gpu_temp_max_threshold>92 C</gpu_temp_max_threshold>
            <gpu_temp_slow_threshold>89 C</gpu_temp_slow_threshold>
            <gpu_temp_max_gpu_threshold>85 C</gpu_temp_max_gpu_threshold>
            <gpu_target_temperature>N/A</gpu_target_temperature>
            <memory_temp>44 C</memory_temp>
            <gpu_temp_max_mem_threshold>95 C</gpu_temp_max_mem_threshold>
        </temperature>
        <gpu_power_readings>
            <power_state>P0</power_state>
            <power_draw>67.03 W</power_draw>
            <current_power_limit>500.00 W</current_power_limit>
            <requested_power_limit>500.00 W</requested_power_limit>
            <default_power_limit>500.00 W</default_power_limit>
            <min_power_limit>100.00 W</min_power_limit>
            <max_power_limit>500.00 W</max_power_limit>
        </gpu_power_readings>
        <processes />
        <accounted_processes />
    </gpu>
</nvidia_smi_log>
"""

NVIDIA_PCI = {"class": "0x030200\n", "vendor": "0x10de\n", "device": "0x20b2\n"}


def nvidia_pci_files(addresses: list[str]) -> dict[str, str]:
    return {
        f"/sys/bus/pci/devices/{a}/{name}": value for a in addresses for name, value in NVIDIA_PCI.items()
    }


def local_gpu_host(tmp_path: Path, addresses: list[str], extra: dict[str, str] | None = None) -> LocalHost:
    """A local host (NVML path) whose sysfs shows NVIDIA GPUs at `addresses`."""
    for path, content in {**nvidia_pci_files(addresses), **(extra or {})}.items():
        target = tmp_path / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    (tmp_path / "proc").mkdir(exist_ok=True)
    return LocalHost(str(tmp_path))


# -- NVML facts built by hand: healthy H100s, changed field by field --------------------


def report(*gpus: GpuHealth, **kw: Any) -> gpu.Facts:
    return gpu.Facts(GpuReport("NVML", gpus=gpus, driver_version="550.54.15", cuda_version="12.4", **kw))


def healthy(index: int = 0, **kw: Any) -> GpuHealth:
    base = GpuHealth(
        index=index,
        name="NVIDIA H100 80GB HBM3",
        pci_address=f"0000:{0x18 + index:02x}:00.0",
        persistence_mode=True,
        ecc_enabled=True,
        volatile_uncorrectable=0,
        aggregate_uncorrectable=0,
        remapped_correctable=0,
        remapped_uncorrectable=0,
        remap_pending=False,
        remap_failure=False,
        clock_reasons=(),
        power_limit_w=700.0,
        enforced_power_limit_w=700.0,
        default_power_limit_w=700.0,
        max_power_limit_w=700.0,
        temperature_c=40.0,
        slowdown_temp_c=90.0,
        slowdown_margin_c=50.0,
    )
    return dataclasses.replace(base, **kw)
