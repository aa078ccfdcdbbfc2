"""What a GPU report holds, whichever source filled it (NVML on the node itself, or a recorded or
remote `nvidia-smi -q -x`): each GPU's health, links and MIG instances, and where the driver is.

nodeagent.facts.nvml and nodeagent.facts.nvidia_smi both produce a GpuReport; the checks read it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from nodeagent.facts import pci
from nodeagent.host import Host

NVIDIA_PROC_GPUS = "/proc/driver/nvidia/gpus"
MODULE_VERSION = "/sys/module/nvidia/version"
PROC_VERSION = "/proc/driver/nvidia/version"
NVML_SOURCE = "NVML"  # the report of NVML on the node itself (nodeagent.facts.nvml)
SMI_COMMAND = ("nvidia-smi", "-q", "-x")  # the driver's report, read by facts.nvidia_smi
SMI_SOURCE = "nvidia-smi -q -x"

# nvmlDeviceGpuRecoveryAction_t (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION), by value, and the words
# `nvidia-smi -q -x` prints for them in <gpu_recovery_action> (lower-cased).
RECOVERY_ACTIONS = {
    0: "none",
    1: "gpu_reset",
    2: "node_reboot",
    3: "drain_p2p",
    4: "drain_and_reset",
    5: "recover_imex_domain",
    6: "bus_reset",
    7: "system_reboot",
}
RECOVERY_WORDS = {
    "none": "none",
    "reset": "gpu_reset",
    "gpu reset": "gpu_reset",
    "reboot": "node_reboot",
    "node reboot": "node_reboot",
    "drain p2p": "drain_p2p",
    "drain and reset": "drain_and_reset",
    "drain p2p and reset": "drain_and_reset",
    "recover imex domain": "recover_imex_domain",
    "bus reset": "bus_reset",
    "system reboot": "system_reboot",
}


@dataclass(frozen=True)
class NvLink:
    link: int
    active: bool | None  # None: a state the reader did not recognize
    version: int | None = None  # as NVML reports it (nvmlDeviceGetNvLinkVersion)
    remote_pci: str | None = None  # the peer (GPU or NVSwitch) at the other end
    speed: str | None = None  # "25 GB/s", from `nvidia-smi nvlink -s`
    errors: Mapping[str, int] = field(default_factory=dict)  # counter -> count, where readable


@dataclass(frozen=True)
class MigInstance:
    """One MIG device of a GPU in MIG mode: a compute instance inside a GPU instance."""

    index: int  # the MIG device's index on its GPU (nvidia-smi's "MIG device" index)
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    profile: str | None = None  # "1g.10gb", where the source names it (NVML; the -q -x XML does not)
    multiprocessors: int | None = None
    memory_mib: float | None = None  # the instance's framebuffer
    volatile_uncorrectable: int | None = None  # ECC errors in the instance since the driver loaded

    @property
    def label(self) -> str:
        ids = f"GI {_id(self.gpu_instance_id)}/CI {_id(self.compute_instance_id)}"
        return f"MIG {self.index} ({ids})"

    @property
    def shape(self) -> str:
        """The profile, else what the instance has: "1g.10gb" or "14 SMs/19968 MiB"."""
        if self.profile:
            return self.profile
        parts = []
        if self.multiprocessors is not None:
            parts.append(f"{self.multiprocessors} SMs")
        if self.memory_mib is not None:
            parts.append(f"{self.memory_mib:g} MiB")
        return "/".join(parts) or "size not reported"


def _id(value: int | None) -> str:
    return "?" if value is None else str(value)


@dataclass(frozen=True)
class PcieLink:
    """A GPU's PCIe link as its driver reports it (NVML or nvidia-smi); None where not reported."""

    gen_current: int | None = None
    gen_max: int | None = None  # the highest generation the GPU and the host together allow
    gen_device_max: int | None = None  # the GPU's own highest generation
    gen_host_max: int | None = None  # the host's (slot's) highest generation: nvidia-smi only
    width_current: int | None = None
    width_max: int | None = None  # the widest the GPU and the slot together allow

    @property
    def host_limited(self) -> bool:
        """The host, not the GPU, sets the ceiling: the link's max is below what the GPU supports."""
        top = self.gen_max if self.gen_max is not None else self.gen_host_max
        return top is not None and self.gen_device_max is not None and top < self.gen_device_max


@dataclass(frozen=True)
class GpuHealth:
    """One GPU. Every value is None where the GPU, driver or tool does not report it."""

    index: int
    name: str | None = None
    pci_address: str | None = None
    uuid: str | None = None
    persistence_mode: bool | None = None
    ecc_enabled: bool | None = None
    volatile_uncorrectable: int | None = None  # since the driver loaded
    aggregate_uncorrectable: int | None = None  # over the GPU's lifetime (InfoROM)
    retired_pages_sbe: int | None = None  # pages retired for multiple single-bit errors (pre-Ampere)
    retired_pages_dbe: int | None = None  # pages retired for a double-bit error (pre-Ampere)
    retirement_pending: bool | None = None
    remapped_correctable: int | None = None  # rows remapped (Ampere and later)
    remapped_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    reset_required: bool | None = None  # the GPU must be reset before it is used again (before R575)
    drain_and_reset: bool | None = None  # drain and reset recommended (before R575)
    recovery_action: str | None = None  # RECOVERY_ACTIONS name (R575 and later)
    clock_reasons: tuple[str, ...] | None = None  # active clock event reasons (CLOCK_REASONS names)
    power_limit_w: float | None = None  # the limit software asked for
    enforced_power_limit_w: float | None = None  # the limit in effect (lowest of all limiters)
    default_power_limit_w: float | None = None
    max_power_limit_w: float | None = None
    temperature_c: float | None = None
    slowdown_temp_c: float | None = None  # absolute HW slowdown threshold, where reported
    slowdown_margin_c: float | None = None  # degrees left before HW slowdown
    nvlinks: tuple[NvLink, ...] = ()
    errors: Mapping[str, str] = field(default_factory=dict)  # query -> error other than "not supported"
    lost: bool = False  # NVML_ERROR_GPU_IS_LOST: fallen off the bus
    mig_current: bool | None = None  # MIG mode now; None: not MIG-capable or not reported
    mig_pending: bool | None = None  # MIG mode after the next GPU reset
    mig_instances: tuple[MigInstance, ...] = ()  # the MIG devices, where the source lists them
    mig_listed: bool = False  # whether the source listed MIG devices (an empty list included)
    pcie: PcieLink | None = None
    utilization_pct: float | None = None  # GPU busy time over the driver's last sample period
    performance_state: int | None = None  # P0 (0, maximum performance) .. P15 (minimum)
    unparsable: Mapping[str, str] = field(default_factory=dict)  # source path -> what was wrong

    @property
    def label(self) -> str:
        return f"GPU{self.index}" + (f" ({self.pci_address})" if self.pci_address else "")

    @property
    def subject(self) -> str:
        return self.pci_address or f"GPU{self.index}"

    @property
    def power_cap_w(self) -> float | None:
        known = [w for w in (self.power_limit_w, self.enforced_power_limit_w) if w is not None]
        return min(known) if known else None


@dataclass(frozen=True)
class GpuReport:
    """What one host says about its NVIDIA GPUs.

    `reason` set: nothing to check (no library, no driver, no GPU, nothing recorded).
    `failure` set: the driver stack is broken in a way that stops every GPU job (e.g. a version
    mismatch between the kernel module and the user-space library).
    `error` set: data was there but could not be understood.
    """

    source: str  # "NVML" or "nvidia-smi -q -x": the evidence key prefix
    gpus: tuple[GpuHealth, ...] = ()
    driver_version: str | None = None
    cuda_version: str | None = None
    kernel_module_version: str | None = None
    reason: str | None = None
    failure: str | None = None
    error: str | None = None
    nvlink_source: str = NVML_SOURCE
    nvlink_reason: str | None = None  # NVLink state unavailable although the GPUs were read
    problems: tuple[str, ...] = ()  # values present but unparsable
    evidence: Mapping[str, str] = field(default_factory=dict)  # where `reason`/`failure`/`error` was seen

    def status_evidence(self) -> dict[str, str]:
        """Evidence for a finding about `reason`, `failure` or `error`."""
        if self.evidence:
            return dict(self.evidence)
        return {self.source: self.reason or self.failure or self.error or ""}


_MODULE_VERSION_RE = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+)+)")


def kernel_module_version(host: Host) -> str | None:
    """The loaded nvidia.ko's version: /sys/module/nvidia/version, else /proc/driver/nvidia/version."""
    value = host.read_value(MODULE_VERSION)
    if value and re.fullmatch(r"\d+(?:\.\d+)+", value):
        return value
    m = _MODULE_VERSION_RE.search(host.read(PROC_VERSION) or "")
    return m.group(1) if m else None


def normalize_bus_id(addr: str) -> str:
    """pci.normalize_address, but a malformed id (a corrupt recording) stays as it is instead of raising."""
    try:
        return pci.normalize_address(addr)
    except ValueError:
        return addr.strip().lower()
