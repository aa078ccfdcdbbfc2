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
from typing import Any

from nodeagent.facts import gpus as gpu_facts
from nodeagent.facts import nvidia_smi, pci
from nodeagent.facts.gpu_report import (
    MODULE_VERSION,
    NVIDIA_PROC_GPUS,
    NVML_SOURCE,
    PROC_VERSION,
    RECOVERY_ACTIONS,
    GpuHealth,
    GpuReport,
    MigInstance,
    NvLink,
    PcieLink,
    kernel_module_version,
    normalize_bus_id,
)
from nodeagent.host import Host

PATHS = (*pci.PATHS, f"{NVIDIA_PROC_GPUS}/*/information", MODULE_VERSION, PROC_VERSION)
SOURCE = NVML_SOURCE

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
        return nvidia_smi.collect_report(host, module_version, present=lambda: nvidia_devices(host))
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
