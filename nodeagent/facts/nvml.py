"""GPU health from NVML (pynvml, the `nvidia-ml-py` distribution), and the choice of where to read it.

On this machine the facts come from NVML; on a snapshot or a remote host (no NVML there) they come
from a recorded `nvidia-smi -q -x` (see nodeagent.facts.nvidia_smi). Both give a GpuReport.

pynvml is imported lazily, only for a local host that has an NVIDIA device, so that `nodeagent
check` stays fast and works where the driver or pynvml is absent. nvmlInit runs once per run (the
report is memoized on the host) and nvmlShutdown right after everything is read.

Every NVML query may raise NVMLError_NotSupported (older or consumer GPUs, MIG, features of other
generations): that value is None, never a failure of the GPU or of the run.

Recovery: the action the driver asks for after an uncorrectable error, through field values
(nvmlDeviceGetFieldValues): NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (R575 and later) and, before it,
NVML_FI_DEV_RESET_STATUS ("reset required") and NVML_FI_DEV_DRAIN_AND_RESET_STATUS ("drain and
reset recommended"), https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html

MIG (Multi-Instance GPU): the mode now and after the next GPU reset (nvmlDeviceGetMigMode), and
each MIG device of a GPU in MIG mode (nvmlDeviceGetMaxMigDeviceCount slots, empty ones answer
NOT_FOUND; nvmlDeviceGetMigDeviceHandleByIndex). PCIe: the link generation and width now and at
most, as the driver sees them (for recordings and platforms whose sysfs lacks the link files).

References: NVML API, https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html ;
clock event reasons, https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html ;
memory errors and row remapping, https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html ;
MIG, https://docs.nvidia.com/datacenter/tesla/mig-user-guide/ and
https://docs.nvidia.com/deploy/nvml-api/group__nvmlMultiInstanceGPU.html
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nodeagent.facts import gpus as gpu_facts
from nodeagent.facts import pci
from nodeagent.host import Host

NVIDIA_PROC_GPUS = "/proc/driver/nvidia/gpus"
MODULE_VERSION = "/sys/module/nvidia/version"
PROC_VERSION = "/proc/driver/nvidia/version"
PATHS = (*pci.PATHS, f"{NVIDIA_PROC_GPUS}/*/information", MODULE_VERSION, PROC_VERSION)
SOURCE = "NVML"

# Clock event (formerly "throttle") reasons: (name, suffix of the NVML constant, value in nvml.h).
# The value is only a fallback for a pynvml that lacks the constant; the NVML collector decodes with
# pynvml's own constants, and the nvidia-smi XML names the same reasons in words.
CLOCK_REASONS: tuple[tuple[str, str, int], ...] = (
    ("gpu_idle", "GpuIdle", 0x1),
    ("applications_clocks_setting", "ApplicationsClocksSetting", 0x2),
    ("sw_power_cap", "SwPowerCap", 0x4),
    ("hw_slowdown", "HwSlowdown", 0x8),
    ("sync_boost", "SyncBoost", 0x10),
    ("sw_thermal_slowdown", "SwThermalSlowdown", 0x20),
    ("hw_thermal_slowdown", "HwThermalSlowdown", 0x40),
    ("hw_power_brake_slowdown", "HwPowerBrakeSlowdown", 0x80),
    ("display_clocks_setting", "DisplayClockSetting", 0x100),
    ("board_limit", "BoardLimit", 0x200),
    ("reliability", "Reliability", 0x400),
)
REASON_LABELS = {
    "gpu_idle": "GPU idle",
    "applications_clocks_setting": "applications clocks setting",
    "sw_power_cap": "SW power cap",
    "hw_slowdown": "HW slowdown",
    "sync_boost": "sync boost",
    "sw_thermal_slowdown": "SW thermal slowdown",
    "hw_thermal_slowdown": "HW thermal slowdown",
    "hw_power_brake_slowdown": "HW power brake slowdown",
    "display_clocks_setting": "display clocks setting",
    "board_limit": "board limit",
    "reliability": "reliability",
}

# Where each GpuHealth link/load value comes from in NVML: the evidence names the function.
# nvmlDeviceGetMaxPcieLinkGeneration/-Width are "the maximum possible with this device and system"
# (a Gen4 GPU in a Gen3 slot reports 3); nvmlDeviceGetGpuMaxPcieLinkGeneration is the GPU's own.
# NVML has no call for the host's maximum alone.
PCIE_QUERIES = {
    "gen_current": "nvmlDeviceGetCurrPcieLinkGeneration",
    "gen_max": "nvmlDeviceGetMaxPcieLinkGeneration",
    "gen_device_max": "nvmlDeviceGetGpuMaxPcieLinkGeneration",
    "width_current": "nvmlDeviceGetCurrPcieLinkWidth",
    "width_max": "nvmlDeviceGetMaxPcieLinkWidth",
}
LOAD_QUERIES = {
    "utilization_pct": "nvmlDeviceGetUtilizationRates",
    "performance_state": "nvmlDeviceGetPerformanceState",
}
PSTATE_UNKNOWN = 32  # NVML_PSTATE_UNKNOWN
# A MIG device's name ends with its profile: "NVIDIA A100-SXM4-80GB MIG 1g.10gb", "... MIG 1c.3g.20gb"
# for a compute instance smaller than its GPU instance (as `nvidia-smi -L` lists MIG devices).
_MIG_PROFILE = re.compile(r"\bMIG\s+(\S+)\s*$")

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
# Field values read for recovery: (GpuHealth attribute, pynvml constant). The first two are the
# pre-R575 flags the recovery action replaced; a driver answers NOT_SUPPORTED for what it lacks.
RECOVERY_FIELDS = (
    ("reset_required", "NVML_FI_DEV_RESET_STATUS"),
    ("drain_and_reset", "NVML_FI_DEV_DRAIN_AND_RESET_STATUS"),
    ("recovery_action", "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION"),
)

# NVLink data-link error counters (nvmlNvLinkErrorCounter_t), by the pynvml constant's name.
LINK_COUNTERS = (
    ("replay", "NVML_NVLINK_ERROR_DL_REPLAY"),
    ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY"),
    ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT"),
    ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA"),
    ("ecc_data", "NVML_NVLINK_ERROR_DL_ECC_DATA"),
)


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
    nvlink_source: str = SOURCE
    nvlink_reason: str | None = None  # NVLink state unavailable although the GPUs were read
    problems: tuple[str, ...] = ()  # values present but unparsable
    evidence: Mapping[str, str] = field(default_factory=dict)  # where `reason`/`failure`/`error` was seen

    def status_evidence(self) -> dict[str, str]:
        """Evidence for a finding about `reason`, `failure` or `error`."""
        if self.evidence:
            return dict(self.evidence)
        return {self.source: self.reason or self.failure or self.error or ""}


def decode_reasons(mask: int, table: Mapping[str, int] | None = None) -> tuple[str, ...]:
    """A clock event reason bit mask -> reason names; bits NVML has not documented read as "0x...".

    `table` maps names to bits (from pynvml at run time); the values of nvml.h otherwise.
    """
    bits = dict(table) if table is not None else {name: bit for name, _, bit in CLOCK_REASONS}
    names = [name for name, bit in bits.items() if bit and mask & bit]
    rest = mask & ~sum(set(bits.values()))
    names += [f"0x{1 << i:x}" for i in range(rest.bit_length()) if rest >> i & 1]
    return tuple(names)


def cuda_version_text(raw: int | None) -> str | None:
    """nvmlSystemGetCudaDriverVersion's 12020 -> "12.2" (1000 * major + 10 * minor)."""
    if raw is None or raw <= 0:
        return None
    return f"{raw // 1000}.{raw % 1000 // 10}"


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


def nvidia_devices(host: Host) -> list[str]:
    """NVIDIA GPUs this host shows without any driver library: PCI devices and /proc/driver/nvidia/gpus."""
    found = {g.pci_address or f"GPU{g.index}" for g in gpu_facts.collect(host) if g.vendor == "NVIDIA"}
    found.update(normalize_bus_id(a) for a in host.listdir(NVIDIA_PROC_GPUS) or [])
    return sorted(found)


def collect(host: Host) -> GpuReport:
    """The GPU report for this run: NVML on a local host with NVIDIA devices, else recorded nvidia-smi."""
    return host.memo("facts.gpu_health", lambda: _collect(host))


def _collect(host: Host) -> GpuReport:
    module_version = kernel_module_version(host)
    if host.kind != "local":
        # Imported here: nvidia_smi builds on this module's types.
        from nodeagent.facts import nvidia_smi

        return nvidia_smi.collect_report(host, module_version)
    if not nvidia_devices(host):
        return GpuReport(
            SOURCE,
            kernel_module_version=module_version,
            reason=f"no NVIDIA GPU: none on the PCI bus ({pci.PCI_DIR}) and no {NVIDIA_PROC_GPUS}",
            evidence={
                pci.PCI_DIR: f"no display or 3D controller of vendor {pci.VENDOR_NVIDIA}",
                NVIDIA_PROC_GPUS: "absent or empty",
            },
        )
    return collect_nvml(module_version)


def collect_nvml(module_version: str | None = None) -> GpuReport:
    """Read every GPU through NVML: init, query, shutdown. Never raises for an NVML error."""
    try:
        # Lazy by design: only a local host with NVIDIA devices pays for importing it.
        import pynvml
    except ImportError as e:
        return GpuReport(
            SOURCE,
            kernel_module_version=module_version,
            reason=f"NVML not available: the pynvml module (nvidia-ml-py) is not installed ({e})",
            evidence={"import pynvml": str(e)},
        )
    nv: Any = pynvml
    try:
        nv.nvmlInit()
    except nv.NVMLError as e:
        return _init_failure(nv, e, module_version)
    try:
        return _read_all(nv, module_version)
    finally:
        # The values are read; a failing shutdown changes none of them.
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlShutdown()


def _code(e: BaseException) -> int | None:
    value = getattr(e, "value", None)
    return value if isinstance(value, int) else None


def _init_failure(nv: Any, e: BaseException, module_version: str | None) -> GpuReport:
    code = _code(e)
    evidence = {"nvmlInit()": str(e) or type(e).__name__}
    if module_version:
        evidence[f"{MODULE_VERSION} or {PROC_VERSION}"] = module_version
    if code == nv.NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return GpuReport(
            SOURCE,
            kernel_module_version=module_version,
            evidence=evidence,
            failure=f"NVML refuses to start: {e} (user-space driver library and loaded kernel module "
            f"{module_version or '?'} differ, typically after a driver upgrade without a reboot)",
        )
    if code == nv.NVML_ERROR_LIBRARY_NOT_FOUND:
        why = f"libnvidia-ml.so.1 not found ({e}): the NVIDIA driver's user-space libraries are not installed"
    elif code == nv.NVML_ERROR_DRIVER_NOT_LOADED:
        why = f"the NVIDIA kernel driver is not loaded ({e})"
    elif code == nv.NVML_ERROR_NO_PERMISSION:
        why = f"no permission to open the NVIDIA devices ({e})"
    else:
        why = str(e) or type(e).__name__
    return GpuReport(
        SOURCE, kernel_module_version=module_version, reason=f"NVML not available: {why}", evidence=evidence
    )


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    return (value.strip("\x00 ") or None) if isinstance(value, str) else None


class _Queries:
    """NVML calls for one GPU: an error becomes None; errors other than "not supported" are kept."""

    def __init__(self, nv: Any) -> None:
        self.nv = nv
        self.errors: dict[str, str] = {}
        self.lost = False
        self.unavailable: set[str] = set()  # functions this driver or pynvml does not have
        self.quiet = {nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_FUNCTION_NOT_FOUND}

    def __call__(self, name: str, *args: Any, what: str | None = None, absent: int | None = None) -> Any:
        """`absent`: one more error code that only means "nothing there" (an empty MIG slot)."""
        fn: Callable[..., Any] | None = getattr(self.nv, name, None)
        if fn is None:
            self.unavailable.add(name)
            return None
        try:
            return fn(*args)
        except self.nv.NVMLError as e:
            code = _code(e)
            if code == self.nv.NVML_ERROR_FUNCTION_NOT_FOUND:
                self.unavailable.add(name)
            if code == self.nv.NVML_ERROR_GPU_IS_LOST:
                self.lost = True
            if code not in self.quiet and code != absent:
                self.errors[what or name] = str(e) or type(e).__name__
            return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _watts(milliwatts: Any) -> float | None:
    mw = _int(milliwatts)
    return None if mw is None else mw / 1000


def _read_all(nv: Any, module_version: str | None) -> GpuReport:
    system = _Queries(nv)
    driver = _text(system("nvmlSystemGetDriverVersion"))
    cuda = cuda_version_text(_int(system("nvmlSystemGetCudaDriverVersion")))
    base = GpuReport(SOURCE, driver_version=driver, cuda_version=cuda, kernel_module_version=module_version)
    try:
        count = int(nv.nvmlDeviceGetCount())
    except nv.NVMLError as e:
        return _replace(
            base, reason=f"NVML could not count the GPUs: {e}", evidence={"nvmlDeviceGetCount()": str(e)}
        )
    if count == 0:
        return _replace(
            base,
            reason=f"NVML is loaded (driver {driver or '?'}) but reports no GPU",
            evidence={"nvmlDeviceGetCount()": "0", "nvmlSystemGetDriverVersion()": driver or "?"},
        )
    gpus = tuple(_read_gpu(nv, i) for i in range(count))
    return _replace(base, gpus=gpus)


def _replace(report: GpuReport, **changes: Any) -> GpuReport:
    return dataclasses.replace(report, **changes)


def _reason_table(nv: Any) -> dict[str, int]:
    table: dict[str, int] = {}
    for name, suffix, bit in CLOCK_REASONS:
        value: Any = getattr(nv, f"nvmlClocksEventReason{suffix}", None)
        if value is None:
            value = getattr(nv, f"nvmlClocksThrottleReason{suffix}", bit)
        table[name] = int(value)
    return table


def _read_gpu(nv: Any, index: int) -> GpuHealth:
    q = _Queries(nv)
    handle = q("nvmlDeviceGetHandleByIndex", index)
    if handle is None:
        return GpuHealth(index=index, errors=dict(q.errors), lost=q.lost)
    pci_info = q("nvmlDeviceGetPciInfo", handle)
    bus_id = _text(getattr(pci_info, "busId", None)) if pci_info is not None else None
    ecc_mode = q("nvmlDeviceGetEccMode", handle)
    uncorrected = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    sbe_pages = q(
        "nvmlDeviceGetRetiredPages", handle, nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    )
    dbe_pages = q("nvmlDeviceGetRetiredPages", handle, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    pending = _int(q("nvmlDeviceGetRetiredPagesPendingStatus", handle))
    rows = q("nvmlDeviceGetRemappedRows", handle)
    corr, unc, remap_pending, remap_failure = (
        tuple(_int(v) for v in rows) if isinstance(rows, (tuple, list)) and len(rows) == 4 else (None,) * 4
    )
    mask = _int(q("nvmlDeviceGetCurrentClocksEventReasons", handle))
    if mask is None and "nvmlDeviceGetCurrentClocksEventReasons" in q.unavailable:
        # Drivers before R535 only have the older name for the same bit mask.
        mask = _int(q("nvmlDeviceGetCurrentClocksThrottleReasons", handle))
    constraints = q("nvmlDeviceGetPowerManagementLimitConstraints", handle)
    temp = _int(q("nvmlDeviceGetTemperature", handle, nv.NVML_TEMPERATURE_GPU))
    slowdown = _int(q("nvmlDeviceGetTemperatureThreshold", handle, nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN))
    persistence = _int(q("nvmlDeviceGetPersistenceMode", handle))
    nvlinks = _read_links(nv, q, handle)
    recovery = _read_recovery(nv, q, handle)
    mig_current, mig_pending = _mig_mode(nv, q, handle)
    mig_instances, mig_listed = _read_mig_instances(nv, q, handle) if mig_current else ((), False)
    return GpuHealth(
        index=index,
        name=_text(q("nvmlDeviceGetName", handle)),
        pci_address=normalize_bus_id(bus_id) if bus_id else None,
        uuid=_text(q("nvmlDeviceGetUUID", handle)),
        persistence_mode=None if persistence is None else persistence == nv.NVML_FEATURE_ENABLED,
        ecc_enabled=(
            ecc_mode[0] == nv.NVML_FEATURE_ENABLED
            if isinstance(ecc_mode, (list, tuple)) and ecc_mode
            else None
        ),
        volatile_uncorrectable=_int(
            q("nvmlDeviceGetTotalEccErrors", handle, uncorrected, nv.NVML_VOLATILE_ECC)
        ),
        aggregate_uncorrectable=_int(
            q("nvmlDeviceGetTotalEccErrors", handle, uncorrected, nv.NVML_AGGREGATE_ECC, what="aggregate ECC")
        ),
        retired_pages_sbe=len(sbe_pages) if isinstance(sbe_pages, list) else None,
        retired_pages_dbe=len(dbe_pages) if isinstance(dbe_pages, list) else None,
        retirement_pending=None if pending is None else bool(pending),
        remapped_correctable=corr,
        remapped_uncorrectable=unc,
        remap_pending=None if remap_pending is None else bool(remap_pending),
        remap_failure=None if remap_failure is None else bool(remap_failure),
        reset_required=_flag(recovery.get("reset_required")),
        drain_and_reset=_flag(recovery.get("drain_and_reset")),
        recovery_action=_recovery_action(recovery.get("recovery_action")),
        clock_reasons=None if mask is None else decode_reasons(mask, _reason_table(nv)),
        power_limit_w=_watts(q("nvmlDeviceGetPowerManagementLimit", handle)),
        enforced_power_limit_w=_watts(q("nvmlDeviceGetEnforcedPowerLimit", handle)),
        default_power_limit_w=_watts(q("nvmlDeviceGetPowerManagementDefaultLimit", handle)),
        max_power_limit_w=(
            _watts(constraints[1])
            if isinstance(constraints, (list, tuple)) and len(constraints) == 2
            else None
        ),
        temperature_c=None if temp is None else float(temp),
        slowdown_temp_c=None if slowdown is None else float(slowdown),
        slowdown_margin_c=None if temp is None or slowdown is None else float(slowdown - temp),
        nvlinks=nvlinks,
        mig_current=mig_current,
        mig_pending=mig_pending,
        mig_instances=mig_instances,
        mig_listed=mig_listed,
        pcie=_read_pcie(q, handle),
        utilization_pct=_utilization(q("nvmlDeviceGetUtilizationRates", handle)),
        performance_state=_pstate(q("nvmlDeviceGetPerformanceState", handle)),
        errors=dict(q.errors),
        lost=q.lost,
    )


# nvmlValue_t members by nvmlValueType_t (NVML_VALUE_TYPE_DOUBLE is 0, and not a flag or an enum).
_VALUE_MEMBERS = {1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _field_int(nv: Any, value: Any) -> int | None:
    """One nvmlFieldValue_t as an integer; None when NVML answered an error for this field."""
    if getattr(value, "nvmlReturn", None) != getattr(nv, "NVML_SUCCESS", 0):
        return None
    member = _VALUE_MEMBERS.get(_int(getattr(value, "valueType", None)) or 0)
    return _int(getattr(getattr(value, "value", None), member, None)) if member else None


def _read_recovery(nv: Any, q: _Queries, handle: Any) -> dict[str, int | None]:
    """The recovery field values this pynvml knows, by GpuHealth attribute (None: not answered)."""
    wanted = [(name, fid) for name, const in RECOVERY_FIELDS if (fid := getattr(nv, const, None)) is not None]
    if not wanted:
        return {}
    values = q("nvmlDeviceGetFieldValues", handle, [fid for _, fid in wanted], what="recovery field values")
    if values is None:
        return {}
    return {name: _field_int(nv, v) for (name, _), v in zip(wanted, values, strict=False)}


def _flag(value: int | None) -> bool | None:
    return None if value is None else bool(value)


def _recovery_action(code: int | None) -> str | None:
    return None if code is None else RECOVERY_ACTIONS.get(code, f"action {code}")


def _mig_mode(nv: Any, q: _Queries, handle: Any) -> tuple[bool | None, bool | None]:
    """nvmlDeviceGetMigMode -> (current, pending); NotSupported (no MIG on this GPU) -> (None, None)."""
    mode = q("nvmlDeviceGetMigMode", handle)
    if not isinstance(mode, (list, tuple)) or len(mode) != 2:
        return None, None
    current, pending = (_int(m) for m in mode)
    enabled = nv.NVML_DEVICE_MIG_ENABLE
    return (None if current is None else current == enabled), (
        None if pending is None else pending == enabled
    )


def _read_mig_instances(nv: Any, q: _Queries, handle: Any) -> tuple[tuple[MigInstance, ...], bool]:
    """The MIG devices of a GPU in MIG mode, and whether NVML could list them."""
    slots = _int(q("nvmlDeviceGetMaxMigDeviceCount", handle))
    if slots is None:
        return (), False
    found = []
    for slot in range(slots):
        mig = q(
            "nvmlDeviceGetMigDeviceHandleByIndex",
            handle,
            slot,
            what=f"MIG device {slot} handle",
            absent=nv.NVML_ERROR_NOT_FOUND,  # an empty slot: no MIG device was created there
        )
        if mig is not None:
            found.append(_read_mig_instance(nv, q, mig, slot))
    return tuple(found), True


def _read_mig_instance(nv: Any, q: _Queries, mig: Any, slot: int) -> MigInstance:
    name = _text(q("nvmlDeviceGetName", mig, what=f"MIG device {slot} name")) or ""
    profile = _MIG_PROFILE.search(name)
    attrs = q("nvmlDeviceGetAttributes", mig, what=f"MIG device {slot} attributes")
    memory = _int(getattr(attrs, "memorySizeMB", None))
    return MigInstance(
        index=slot,
        gpu_instance_id=_int(q("nvmlDeviceGetGpuInstanceId", mig, what=f"MIG device {slot} GPU instance")),
        compute_instance_id=_int(
            q("nvmlDeviceGetComputeInstanceId", mig, what=f"MIG device {slot} compute instance")
        ),
        profile=profile.group(1) if profile else None,
        multiprocessors=_int(getattr(attrs, "multiprocessorCount", None)),
        memory_mib=None if memory is None else float(memory),
        volatile_uncorrectable=_int(
            q(
                "nvmlDeviceGetTotalEccErrors",
                mig,
                nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                nv.NVML_VOLATILE_ECC,
                what=f"MIG device {slot} volatile ECC",
            )
        ),
    )


def _read_pcie(q: _Queries, handle: Any) -> PcieLink | None:
    values = {name: _int(q(fn, handle)) for name, fn in PCIE_QUERIES.items()}
    return PcieLink(**values) if any(v is not None for v in values.values()) else None


def _utilization(rates: Any) -> float | None:
    """nvmlUtilization_t.gpu: percent of the sample period a kernel was running."""
    value = _int(getattr(rates, "gpu", None))
    return None if value is None else float(value)


def _pstate(value: Any) -> int | None:
    state = _int(value)
    return None if state is None or state == PSTATE_UNKNOWN else state


def _read_links(nv: Any, q: _Queries, handle: Any) -> tuple[NvLink, ...]:
    links: list[NvLink] = []
    for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            state = nv.nvmlDeviceGetNvLinkState(handle, link)
        except nv.NVMLError as e:
            code = _code(e)
            if code == nv.NVML_ERROR_GPU_IS_LOST:
                q.lost = True
                break
            if link == 0 and code in q.quiet:
                break  # no NVLink on this GPU (PCIe-only, or a driver without NVLink support)
            continue  # links past the GPU's count answer INVALID_ARGUMENT; gaps are possible
        sleeping = state == getattr(nv, "NVML_NVLINK_STATE_SLEEP", 2)
        if state != nv.NVML_FEATURE_ENABLED and not sleeping:
            # Down (0), or a state this code does not know: no peer, version or counters to ask for.
            links.append(NvLink(link=link, active=False if state == nv.NVML_FEATURE_DISABLED else None))
            continue
        remote = q("nvmlDeviceGetNvLinkRemotePciInfo", handle, link, what=f"NVLink {link} remote PCI info")
        remote_bus = _text(getattr(remote, "busId", None)) if remote is not None else None
        errors: dict[str, int] = {}
        for counter, const in LINK_COUNTERS:
            kind = getattr(nv, const, None)
            if kind is None:
                continue
            count = _int(
                q("nvmlDeviceGetNvLinkErrorCounter", handle, link, kind, what=f"NVLink {link} {counter}")
            )
            if count is not None:
                errors[counter] = count
        links.append(
            NvLink(
                link=link,
                active=True,
                speed="sleep (low power)" if sleeping else None,
                version=_int(q("nvmlDeviceGetNvLinkVersion", handle, link, what=f"NVLink {link} version")),
                remote_pci=normalize_bus_id(remote_bus) if remote_bus else None,
                errors=errors,
            )
        )
    return tuple(links)
