"""GPU health: memory errors, pending repairs, clock slowdowns, persistence, power, temperature, driver, MIG.

A training job on a GPU with uncorrectable memory errors, a pending row remap or clocks held down
by a hardware slowdown either crashes or drags every other rank of the job down with it: these are
the node-level conditions DCGM's level-1 diagnostic and NVIDIA's memory error management guide
tell operators to catch before scheduling work.

A GPU in MIG mode is reported as such, with its MIG devices and their ECC counts: an
uncorrectable error inside an instance is a fault of that GPU, and a MIG mode that differs from
the pending one (set, but not applied until the GPU is reset) is a node left half-reconfigured.

The driver's own recovery flags are judged as NVIDIA's memory error management guide defines
them: a reset required (or a recovery action that is a reset or reboot) FAILs, drain-and-reset
"recommended" WARNs, and a pending row remap WARNs ("unaffected applications can continue running
... and new workloads can be launched" until the reset activates it).

An NVIDIA GPU on the PCI bus that the driver's report (NVML or `nvidia-smi -q -x`) leaves out is a
GPU no job can use: bound to the nvidia driver and listed in /proc/driver/nvidia/gpus (the kernel
module attached it) but not reported, it FAILs (it failed to initialize or fell off the bus); not
bound to nvidia it WARNs; outside /proc/driver/nvidia/gpus it belongs to another environment (a
container sees the host's PCI tree but only its own GPUs) and is SKIPPED. SR-IOV virtual functions
(a `physfn` link) are not GPUs the driver reports and are left out.

Facts come from NVML on this machine and from a recorded `nvidia-smi -q -x` in snapshots (see
nodeagent.facts.nvml). Without NVML or NVIDIA GPUs the check gives one SKIPPED finding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nodeagent.api.check import Area, Check, param
from nodeagent.core.finding import Finding, Status, unparsable
from nodeagent.facts import gpu_report, gpus, nvidia_smi, nvml, pci
from nodeagent.facts.gpu_report import GpuHealth, GpuReport, MigInstance
from nodeagent.facts.nvml import REASON_LABELS
from nodeagent.host import Host

ID = "gpu"
NVML_DOCS = "https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html"
MEMORY_ERRORS_DOCS = "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html"
ROW_REMAP_DOCS = "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/row-remapping.html"
RECOVERY_DOCS = (
    "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html"
)
PERSISTENCE_DOCS = "https://docs.nvidia.com/deploy/driver-persistence/persistence-daemon.html"
CLOCK_REASONS_DOCS = "https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html"
DCGM_DIAG_DOCS = "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html"
MIG_DOCS = "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/"


@dataclass(frozen=True)
class Params:
    fail_clock_reasons: tuple[str, ...] = param(
        ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown"),
        "Clock event reasons that mean the hardware is protecting itself (clocks cut by half or more: "
        f"overheating, power brake from the PSU) rather than a workload's choice ({CLOCK_REASONS_DOCS}).",
    )
    require_persistence: bool = param(
        True,
        "Without persistence the driver tears GPU state down whenever no client holds it, so every job "
        f"start pays seconds of re-initialisation and ECC/clock settings reset ({PERSISTENCE_DOCS}).",
    )
    require_ecc: bool = param(
        True,
        "With ECC off, memory errors corrupt training silently instead of being corrected or reported "
        f"(ECC mode, {NVML_DOCS}).",
    )
    min_power_limit_pct: float = param(
        100.0,
        "A power limit below the board's default caps clocks under load (SW power cap); training "
        f"nodes run at the default (nvmlDeviceGetPowerManagementDefaultLimit, {NVML_DOCS}).",
    )
    min_slowdown_margin_c: float = param(
        5.0,
        "Degrees left before the GPU's HW slowdown threshold; closer than this, a warmer hour or a "
        f"longer step triggers thermal slowdown (NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, {NVML_DOCS}).",
    )


@dataclass(frozen=True)
class BusGpu:
    """An NVIDIA GPU function in the PCI tree (sysfs), whatever drives it."""

    address: str
    driver: str | None  # the bound driver ("nvidia", "vfio-pci", ...); None: none bound
    virtual_function: bool = False  # an SR-IOV VF (vGPU): not a GPU the driver reports


@dataclass(frozen=True)
class Bus:
    gpus: tuple[BusGpu, ...] = ()
    attached: tuple[str, ...] | None = None  # /proc/driver/nvidia/gpus entries; None when absent
    live: bool = True  # this machine's sysfs (a missing driver link means no driver bound)


@dataclass(frozen=True)
class Facts:
    report: GpuReport
    bus: Bus = Bus()


PHYSFN = f"{pci.PCI_DIR}/*/physfn"


def collect_bus(host: Host) -> Bus:
    found = [d for d in pci.collect(host) if d.kind == "gpu" and d.vendor == pci.VENDOR_NVIDIA]
    listed = host.listdir(gpu_report.NVIDIA_PROC_GPUS)
    return Bus(
        tuple(
            BusGpu(d.address, d.driver, host.readlink(f"{pci.PCI_DIR}/{d.address}/physfn") is not None)
            for d in found
        ),
        None if listed is None else tuple(sorted(gpu_report.normalize_bus_id(a) for a in listed)),
        live=host.kind == "local",
    )


def collect(host: Host) -> Facts:
    return Facts(report=nvml.collect(host), bus=collect_bus(host))


def _key(r: GpuReport, g: GpuHealth, what: str) -> str:
    return f"{r.source}: GPU{g.index} {what}"


def _reasons(names: tuple[str, ...]) -> str:
    return ", ".join(REASON_LABELS.get(n, n) for n in names) or "none"


def _memory(r: GpuReport, g: GpuHealth) -> list[Finding]:
    found = (
        _volatile_ecc(r, g),
        _remap_failure(r, g),
        _remap_pending(r, g),
        _retirement_pending(r, g),
        _lifetime_ecc(r, g),
    )
    return [f for f in found if f is not None]


def _volatile_ecc(r: GpuReport, g: GpuHealth) -> Finding | None:
    if not g.volatile_uncorrectable:
        return None
    return Finding(
        ID,
        Status.FAIL,
        f"{g.label}: {g.volatile_uncorrectable} uncorrectable ECC error(s) since the driver loaded",
        {_key(r, g, "volatile uncorrectable ECC errors"): str(g.volatile_uncorrectable)}
        | _instance_errors(r, g),
        expected="0 volatile uncorrectable ECC errors",
        remediation=f"Drain the node; with no process on the GPU reset it "
        f"(`nvidia-smi -r -i {g.index}`) or reboot, then run `dcgmi diag -r 3` before returning it to "
        f"service; errors that recur mean RMA ({MEMORY_ERRORS_DOCS}).",
        subject=g.subject,
    )


def _remap_failure(r: GpuReport, g: GpuHealth) -> Finding | None:
    if not g.remap_failure:
        return None
    return Finding(
        ID,
        Status.FAIL,
        f"{g.label}: a row remapping has failed (a memory bank ran out of spare rows)",
        {_key(r, g, "remapped rows failure"): "yes"},
        expected="no row remapping failure",
        remediation=f"Take the GPU out of service: a remapping failure meets NVIDIA's RMA criteria "
        f"({ROW_REMAP_DOCS}); `nvidia-smi -q -d ROW_REMAPPER -i {g.index}` shows the bank histogram.",
        subject=g.subject,
    )


def _remap_pending(r: GpuReport, g: GpuHealth) -> Finding | None:
    if not g.remap_pending:
        return None
    # NVIDIA: with the flag set "unaffected applications can continue running without affecting
    # accuracy and performance, and new workloads can be launched" (RECOVERY_DOCS): not a FAIL.
    return Finding(
        ID,
        Status.WARN,
        f"{g.label}: a row remapping is pending: reset the GPU to activate it",
        {_key(r, g, "remapped rows pending"): "yes"},
        expected="no pending row remapping",
        remediation=f"At the next opportunity, with no process on the GPU, reset it (`nvidia-smi -r "
        f"-i {g.index}`) or reboot: the spare row is only switched in at reset ({ROW_REMAP_DOCS}, "
        f"{RECOVERY_DOCS}).",
        subject=g.subject,
    )


def _retirement_pending(r: GpuReport, g: GpuHealth) -> Finding | None:
    if not g.retirement_pending:
        return None
    return Finding(
        ID,
        Status.FAIL,
        f"{g.label}: a page retirement is pending and needs a GPU reset to take effect",
        {_key(r, g, "retired pages pending"): "yes"},
        expected="no pending page retirement",
        remediation=f"Drain the node, then reset the GPU (`nvidia-smi -r -i {g.index}`) or reload "
        f"the driver / reboot so the retired pages are blacklisted ({MEMORY_ERRORS_DOCS}).",
        subject=g.subject,
    )


def _lifetime_ecc(r: GpuReport, g: GpuHealth) -> Finding | None:
    """Uncorrectable errors before the driver loaded: history to watch, with the pages and rows spent."""
    history = (g.aggregate_uncorrectable or 0) - (g.volatile_uncorrectable or 0)
    if history <= 0:
        return None
    evidence = {_key(r, g, "aggregate uncorrectable ECC errors"): str(g.aggregate_uncorrectable)}
    for what, value in (
        ("retired pages (double-bit)", g.retired_pages_dbe),
        ("retired pages (single-bit)", g.retired_pages_sbe),
        ("remapped rows (uncorrectable)", g.remapped_uncorrectable),
        ("remapped rows (correctable)", g.remapped_correctable),
    ):
        if value is not None:
            evidence[_key(r, g, what)] = str(value)
    return Finding(
        ID,
        Status.WARN,
        f"{g.label}: {g.aggregate_uncorrectable} uncorrectable ECC error(s) over its lifetime",
        evidence,
        expected="0 aggregate uncorrectable ECC errors",
        remediation="Watch the count "
        f"(`nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER -i {g.index}`); compare with NVIDIA's "
        f"RMA thresholds ({MEMORY_ERRORS_DOCS}).",
        subject=g.subject,
    )


# -- recovery flags ------------------------------------------------------------------------------
# Recovery actions that must be taken before the GPU is used again (RECOVERY_DOCS): what to do.
REQUIRED_ACTIONS = {
    "gpu_reset": "a GPU reset",
    "node_reboot": "a reboot of the node",
    "system_reboot": "a reboot of the system",
    "bus_reset": "a reset of the GPU's PCIe bus",
    "drain_p2p": "all peer-to-peer traffic drained (then a new recovery action)",
    "recover_imex_domain": "the recovery of its IMEX domain",
}


def _recovery_evidence(r: GpuReport, g: GpuHealth) -> dict[str, str]:
    evidence = {}
    if g.reset_required is not None:
        evidence[_key(r, g, "reset required")] = "yes" if g.reset_required else "no"
    if g.drain_and_reset is not None:
        evidence[_key(r, g, "drain and reset recommended")] = "yes" if g.drain_and_reset else "no"
    if g.recovery_action is not None:
        evidence[_key(r, g, "recovery action")] = g.recovery_action
    return evidence


def _recovery(r: GpuReport, g: GpuHealth) -> list[Finding]:
    evidence = _recovery_evidence(r, g)
    required = REQUIRED_ACTIONS.get(g.recovery_action or "") or ("a GPU reset" if g.reset_required else None)
    if required:
        return [
            Finding(
                ID,
                Status.FAIL,
                f"{g.label}: the driver requires {required} before the GPU is used again",
                evidence,
                expected="no recovery action pending",
                remediation=f"Drain the node and stop every process on the GPU; it needs {required} "
                f"(`nvidia-smi -r -i {g.index}` resets the GPU); run `dcgmi diag -r 2` before returning "
                f"it to service ({RECOVERY_DOCS}).",
                subject=g.subject,
            )
        ]
    if g.drain_and_reset or g.recovery_action == "drain_and_reset":
        # "Recommended" in the flag's own name (drain_and_reset_recommended): the GPU still serves
        # work, so not a FAIL; the recovery action that replaced the flag in R575 is read alike.
        return [
            Finding(
                ID,
                Status.WARN,
                f"{g.label}: the driver recommends draining and resetting the GPU",
                evidence,
                expected="no recovery action pending",
                remediation="Let running jobs finish, take no new ones, then stop the GPU's processes and "
                f"reset it (`nvidia-smi -r -i {g.index}`) ({RECOVERY_DOCS}).",
                subject=g.subject,
            )
        ]
    if g.recovery_action not in (None, "none"):
        return [
            Finding(
                ID,
                Status.WARN,
                f"{g.label}: the driver asks for recovery action {g.recovery_action!r}, one this "
                "version of nodeagent does not know",
                evidence,
                expected="no recovery action pending",
                remediation=f"`nvidia-smi -q -i {g.index}` names the action; see {RECOVERY_DOCS}.",
                subject=g.subject,
            )
        ]
    return []


# -- GPUs on the bus that the driver does not report ----------------------------------------------
_PLACED = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


def _absent(f: Facts) -> list[Finding]:
    r = f.report
    if not r.gpus or any(g.pci_address is None or not _PLACED.fullmatch(g.pci_address) for g in r.gpus):
        return []  # nothing to compare with, or GPUs the report cannot place on the bus
    reported = {g.pci_address for g in r.gpus}
    missing = [b for b in f.bus.gpus if b.address not in reported and not b.virtual_function]
    attached = f.bus.attached
    outside = [
        b for b in missing if b.driver == "nvidia" and attached is not None and b.address not in attached
    ]
    # No driver link on a recorded tree may be a link the recording left out: not judged there.
    judged = [b for b in missing if b not in outside and (b.driver is not None or f.bus.live)]
    findings = [_absent_one(r, b, attached) for b in judged]
    if outside:
        findings.append(
            Finding(
                ID,
                Status.SKIPPED,
                f"{len(outside)} NVIDIA GPU(s) on the PCI bus outside this environment's driver view "
                f"(not in {gpu_report.NVIDIA_PROC_GPUS}: a container given some of the node's GPUs?): "
                "not judged",
                {f"{pci.PCI_DIR}/{b.address}/driver": "nvidia" for b in outside}
                | {gpu_report.NVIDIA_PROC_GPUS: ", ".join(attached or ()) or "empty"},
                subject="bus",
            )
        )
    return findings


def _absent_why(b: BusGpu) -> str:
    if b.driver is None:
        return "no driver bound (the nvidia module did not take it: look for NVRM probe errors in `dmesg`)"
    if b.driver != "nvidia":
        return f"bound to {b.driver}, not nvidia: CUDA cannot use it here"
    return f"bound to nvidia, but no {gpu_report.NVIDIA_PROC_GPUS} to confirm the driver attached it"


def _absent_one(r: GpuReport, b: BusGpu, attached: tuple[str, ...] | None) -> Finding:
    evidence = {
        f"{pci.PCI_DIR}/{b.address}/driver": b.driver or "none bound",
        f"{r.source}: GPUs reported": ", ".join(sorted(g.pci_address or "?" for g in r.gpus)),
        gpu_report.NVIDIA_PROC_GPUS: "absent" if attached is None else ", ".join(attached) or "empty",
    }
    expected = f"every NVIDIA GPU on the PCI bus reported by {r.source}"
    if b.driver == "nvidia" and attached is not None:
        return Finding(
            ID,
            Status.FAIL,
            f"{b.address}: an NVIDIA GPU the nvidia driver attached but {r.source} does not report "
            "(it failed to initialize, or fell off the bus)",
            evidence,
            expected=expected,
            remediation="Drain the node; look for Xid 79 and 'RmInitAdapter failed' in `dmesg`; reboot, "
            "and reseat or RMA the GPU if it stays missing.",
            subject=b.address,
        )
    return Finding(
        ID,
        Status.WARN,
        f"{b.address}: an NVIDIA GPU on the PCI bus that {r.source} does not report: {_absent_why(b)}",
        evidence,
        expected=expected,
        remediation="If the GPU is meant for CUDA, bind it to the nvidia driver (or take it out of the "
        "VFIO/passthrough configuration) and reload the driver; otherwise this is by design.",
        subject=b.address,
    )


# -- MIG -----------------------------------------------------------------------------------------
def _faulty_instances(g: GpuHealth) -> list[MigInstance]:
    return [m for m in g.mig_instances if m.volatile_uncorrectable]


def _instance_errors(r: GpuReport, g: GpuHealth) -> dict[str, str]:
    return {
        _key(r, g, f"{m.label} volatile uncorrectable ECC errors"): str(m.volatile_uncorrectable)
        for m in _faulty_instances(g)
    }


def _mig_unparsable(g: GpuHealth) -> dict[str, str]:
    return {path: why for path, why in g.unparsable.items() if path.startswith(("mig_mode/", "mig_devices"))}


def _mig_word(enabled: bool | None) -> str:
    return "?" if enabled is None else "enabled" if enabled else "disabled"


def _mig(r: GpuReport, g: GpuHealth) -> list[Finding]:
    """MIG findings that are not OK: values that did not parse, a pending mode change, errors, no instance."""
    bad = _mig_unparsable(g)
    if bad:
        return [
            Finding(
                ID,
                Status.UNKNOWN,
                f"{g.label}: MIG state unknown: {len(bad)} value(s) could not be parsed",
                {_key(r, g, path): why for path, why in sorted(bad.items())},
                expected="Enabled/Disabled MIG modes and numeric MIG device counters",
                remediation=f"Compare with `nvidia-smi -q -d MIG -i {g.index}` on the node; re-record the "
                "snapshot if it is truncated.",
                subject=g.subject,
            )
        ]
    found = (_mig_change_pending(r, g), _mig_instance_ecc(r, g), _mig_without_devices(r, g))
    return [f for f in found if f is not None]


def _mig_change_pending(r: GpuReport, g: GpuHealth) -> Finding | None:
    if g.mig_current is None or g.mig_pending is None or g.mig_current == g.mig_pending:
        return None
    return Finding(
        ID,
        Status.WARN,
        f"{g.label}: MIG mode change pending: reset the GPU (MIG {_mig_word(g.mig_current)} now, "
        f"{_mig_word(g.mig_pending)} after the next GPU reset)",
        {
            _key(r, g, "MIG mode (current)"): _mig_word(g.mig_current),
            _key(r, g, "MIG mode (pending)"): _mig_word(g.mig_pending),
        },
        expected="the current MIG mode equal to the pending one",
        remediation="Stop the processes on the GPU (and monitoring agents such as DCGM that hold "
        f"it), then `nvidia-smi -r -i {g.index}`, or reboot; until then the GPU keeps its old mode "
        f"({MIG_DOCS}).",
        subject=g.subject,
    )


def _mig_instance_ecc(r: GpuReport, g: GpuHealth) -> Finding | None:
    faulty = _faulty_instances(g)
    if not faulty or g.volatile_uncorrectable:  # else the GPU's own ECC finding lists them
        return None
    total = sum(m.volatile_uncorrectable or 0 for m in faulty)
    return Finding(
        ID,
        Status.FAIL,
        f"{g.label}: {total} uncorrectable ECC error(s) in MIG device(s) "
        + ", ".join(m.label for m in faulty),
        _instance_errors(r, g),
        expected="0 volatile uncorrectable ECC errors in every MIG device",
        remediation=f"Drain the node; with no process on the GPU reset it (`nvidia-smi -r -i "
        f"{g.index}`) or reboot, re-create its MIG layout (MIG devices do not survive a reboot: "
        f"{MIG_DOCS}), then run `dcgmi diag -r 3`; errors that recur mean RMA "
        f"({MEMORY_ERRORS_DOCS}).",
        subject=g.subject,
    )


def _mig_without_devices(r: GpuReport, g: GpuHealth) -> Finding | None:
    if not (g.mig_current and g.mig_listed and not g.mig_instances):
        return None
    return Finding(
        ID,
        Status.WARN,
        f"{g.label}: MIG enabled but no MIG device: CUDA sees no device on this GPU",
        {_key(r, g, "MIG mode (current)"): "enabled", _key(r, g, "MIG devices"): "none"},
        expected="GPU and compute instances created on a GPU in MIG mode",
        remediation=f"Create the instances (`nvidia-smi mig -i {g.index} -cgi PROFILES -C`, or the "
        f"MIG manager / mig-parted layout), or disable MIG (`nvidia-smi -i {g.index} -mig 0`) "
        f"({MIG_DOCS}).",
        subject=g.subject,
    )


def _mig_shapes(instances: tuple[MigInstance, ...]) -> str:
    counts: dict[str, int] = {}
    for m in instances:
        counts[m.shape] = counts.get(m.shape, 0) + 1
    return " + ".join(f"{n}x {shape}" for shape, n in counts.items())


def _mig_ok(r: GpuReport, g: GpuHealth) -> Finding:
    """A GPU in MIG mode whose MIG state is sound: what it is split into, and the instances' ECC."""
    instances = g.mig_instances
    evidence: dict[str, str] = {
        _key(r, g, "MIG mode (current)"): "enabled",
        _key(r, g, "MIG mode (pending)"): _mig_word(g.mig_pending),
    }
    if not g.mig_listed:
        what = f"MIG devices not listed by {r.source}"
        evidence[_key(r, g, "MIG devices")] = "not reported"
    else:
        counts = [m.volatile_uncorrectable for m in instances]
        known = [c for c in counts if c is not None]
        ecc = (
            f"{sum(known)} uncorrectable ECC error(s) in the instances"
            if len(known) == len(counts)
            else "instance ECC not reported"
            if not known
            else f"{sum(known)} uncorrectable ECC error(s) in {len(known)} of {len(counts)} instances"
        )
        what = f"{len(instances)} instance(s) ({_mig_shapes(instances)}); {ecc}"
        for m in instances:
            ecc_text = (
                "?" if m.volatile_uncorrectable is None else f"{m.volatile_uncorrectable} uncorrectable ECC"
            )
            evidence[_key(r, g, m.label)] = f"{m.shape}; {ecc_text}"
    evidence[_key(r, g, g.pci_address or "summary")] = _summary(g)
    evidence.update(_setting_values(r, g))
    evidence[f"{r.source}: driver version"] = r.driver_version or "?"
    return Finding(ID, Status.OK, f"{g.label}: MIG enabled: {what}", evidence, subject=g.subject)


def _clocks(r: GpuReport, g: GpuHealth, p: Params) -> list[Finding]:
    active = g.clock_reasons or ()
    bad = tuple(n for n in active if n in p.fail_clock_reasons)
    if not bad:
        return []
    return [
        Finding(
            ID,
            Status.FAIL,
            f"{g.label}: clocks held down by {_reasons(bad)}",
            {
                _key(r, g, "clock event reasons"): _reasons(active),
                _key(r, g, "temperature"): "?" if g.temperature_c is None else f"{g.temperature_c:g} C",
            },
            expected=f"none of: {_reasons(p.fail_clock_reasons)}",
            remediation="Check cooling (inlet temperature, fans, airflow) and the power supply's brake "
            f"signal (`nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER -i {g.index}`), then run "
            f"`dcgmi diag -r 2` ({CLOCK_REASONS_DOCS}, {DCGM_DIAG_DOCS}).",
            subject=g.subject,
        )
    ]


def _settings(r: GpuReport, g: GpuHealth, p: Params) -> list[Finding]:
    found = (_ecc_off(r, g, p), _power_capped(r, g, p), _near_slowdown(r, g, p))
    return [f for f in found if f is not None]


def _ecc_off(r: GpuReport, g: GpuHealth, p: Params) -> Finding | None:
    if not p.require_ecc or g.ecc_enabled is not False:
        return None
    return Finding(
        ID,
        Status.WARN,
        f"{g.label}: ECC is disabled",
        {_key(r, g, "ECC mode"): "disabled"},
        expected="ECC enabled",
        remediation=f"`nvidia-smi -i {g.index} -e 1`, then reset the GPU or reboot ({NVML_DOCS}).",
        subject=g.subject,
    )


def _power_capped(r: GpuReport, g: GpuHealth, p: Params) -> Finding | None:
    cap, default = g.power_cap_w, g.default_power_limit_w
    if cap is None or not default or cap >= default * p.min_power_limit_pct / 100 - 0.5:
        return None
    top = f", max {g.max_power_limit_w:g} W" if g.max_power_limit_w else ""
    return Finding(
        ID,
        Status.WARN,
        f"{g.label}: power limit {cap:g} W is below the default {default:g} W{top}",
        {
            _key(r, g, "power limit"): "?" if g.power_limit_w is None else f"{g.power_limit_w:g} W",
            _key(r, g, "enforced power limit"): (
                "?" if g.enforced_power_limit_w is None else f"{g.enforced_power_limit_w:g} W"
            ),
            _key(r, g, "default power limit"): f"{default:g} W",
        },
        expected=f">= {p.min_power_limit_pct:g}% of the default power limit",
        remediation=f"`nvidia-smi -i {g.index} -pl {default:g}` (as root; persistence mode keeps it "
        "until reboot). If the enforced limit is the lower one, a chassis or PSU limit caps the "
        "board: check the BMC's power capping.",
        subject=g.subject,
    )


def _near_slowdown(r: GpuReport, g: GpuHealth, p: Params) -> Finding | None:
    margin = g.slowdown_margin_c
    if margin is None or margin > p.min_slowdown_margin_c:
        return None
    temp = "?" if g.temperature_c is None else f"{g.temperature_c:g} C"
    threshold = f" (slowdown at {g.slowdown_temp_c:g} C)" if g.slowdown_temp_c is not None else ""
    return Finding(
        ID,
        Status.WARN,
        f"{g.label}: {temp}, {margin:g} C from HW slowdown{threshold}",
        {_key(r, g, "temperature"): temp, _key(r, g, "slowdown margin"): f"{margin:g} C"},
        expected=f"more than {p.min_slowdown_margin_c:g} C below the slowdown threshold",
        remediation="Improve cooling: inlet air temperature, fan speed policy in the BMC, blanking "
        "panels, blocked airflow; `nvidia-smi -q -d TEMPERATURE` shows the thresholds.",
        subject=g.subject,
    )


def _unreadable(r: GpuReport, g: GpuHealth) -> list[Finding]:
    if g.lost:
        return [
            Finding(
                ID,
                Status.FAIL,
                f"{g.label}: NVML reports the GPU as lost (fallen off the bus)",
                {_key(r, g, what): err for what, err in g.errors.items()}
                or {_key(r, g, "state"): "GPU is lost"},
                expected="a responsive GPU",
                remediation="Drain the node and reboot; look for Xid 79 in `dmesg`; if it recurs, reseat "
                "the GPU or RMA it.",
                subject=g.subject,
            )
        ]
    if not g.errors:
        return []
    return [
        Finding(
            ID,
            Status.WARN,
            f"{g.label}: {len(g.errors)} value(s) could not be read: {', '.join(sorted(g.errors))}",
            {_key(r, g, what): err for what, err in sorted(g.errors.items())},
            expected="every supported NVML query to answer",
            remediation=f"Run as root, and compare with `nvidia-smi -q -i {g.index}`; errors such as "
            "'Unknown Error' or 'Corrupted infoROM' point at the GPU or driver.",
            subject=g.subject,
        )
    ]


def _persistence(r: GpuReport, p: Params) -> list[Finding]:
    off = [g for g in r.gpus if g.persistence_mode is False]
    if not p.require_persistence or not off:
        return []
    names = ", ".join(f"GPU{g.index}" for g in off)
    return [
        Finding(
            ID,
            Status.WARN,
            f"persistence mode is off on {len(off)} of {len(r.gpus)} GPU(s): {names}",
            {_key(r, g, "persistence mode"): "disabled" for g in off},
            expected="persistence enabled (nvidia-persistenced running)",
            remediation="`systemctl enable --now nvidia-persistenced` (the supported way), or "
            f"`nvidia-smi -pm 1` until the next reboot ({PERSISTENCE_DOCS}).",
            subject="persistence",
        )
    ]


def _driver(r: GpuReport) -> list[Finding]:
    module, library = r.kernel_module_version, r.driver_version
    if not module or not library or module == library:
        return []
    return [
        Finding(
            ID,
            Status.WARN,
            f"mixed driver versions: kernel module {module}, user-space driver {library}",
            {
                f"{gpu_report.MODULE_VERSION} or {gpu_report.PROC_VERSION}": module,
                f"{r.source}: driver version": library,
            },
            expected="the loaded kernel module and the user-space driver of the same version",
            remediation="Reboot (or stop every GPU process and `rmmod nvidia_uvm nvidia_drm nvidia_modeset "
            "nvidia && modprobe nvidia`) so the module matches the installed driver.",
            subject="driver",
        )
    ]


def _setting_values(r: GpuReport, g: GpuHealth) -> dict[str, str]:
    """A GPU's settings as values of their own, which a baseline and a playbook compare (a power cap
    lowered, ECC turned off); the summary beside them is for people."""
    out: dict[str, str] = {}
    if g.power_cap_w is not None:
        out[_key(r, g, "power cap")] = f"{g.power_cap_w:g} W"
    if g.ecc_enabled is not None:
        out[_key(r, g, "ECC")] = "on" if g.ecc_enabled else "off"
    return out


def _summary(g: GpuHealth) -> str:
    parts = [g.name or "?"]
    if g.temperature_c is not None:
        parts.append(f"{g.temperature_c:g} C")
    if g.power_cap_w is not None:
        parts.append(f"{g.power_cap_w:g} W cap")
    if g.ecc_enabled is not None:
        parts.append("ECC on" if g.ecc_enabled else "ECC off")
    if g.volatile_uncorrectable is not None:
        parts.append(f"{g.volatile_uncorrectable} volatile uncorrectable")
    if g.clock_reasons:
        parts.append(f"clocks: {_reasons(g.clock_reasons)}")
    return ", ".join(parts)


def _report_unusable(r: GpuReport) -> Finding | None:
    """The one finding for a report that holds no GPU health to judge; None when it does."""
    if r.gpus and r.source == nvidia_smi.NVLINK_SOURCE:
        # Only `nvidia-smi nvlink -s` names these GPUs: nothing about their health was recorded.
        return Finding(
            ID,
            Status.SKIPPED,
            f"{len(r.gpus)} GPU(s) named by `nvidia-smi nvlink -s`, but their health was not recorded",
            {" ".join(nvidia_smi.COMMAND): "not recorded"},
            subject="gpus",
        )
    if r.failure:
        return Finding(
            ID,
            Status.FAIL,
            r.failure,
            r.status_evidence(),
            expected="NVML and the loaded kernel module of the same driver version",
            remediation="Reboot the node (or reload the nvidia kernel modules) after a driver upgrade; "
            "until then no CUDA job can start.",
            subject="driver",
        )
    if r.reason:
        return Finding(ID, Status.SKIPPED, r.reason, r.status_evidence(), subject="gpus")
    if r.error:
        return unparsable_report(ID, r, "gpus")
    return None


def unparsable_report(check_id: str, r: GpuReport, subject: str) -> Finding:
    """UNKNOWN: the GPU report was there but could not be read (`r.error`); the gpu and nvlink checks
    both say so, each about its own subject."""
    return Finding(
        check_id,
        Status.UNKNOWN,
        r.error or "unreadable GPU report",
        r.status_evidence(),
        expected=f"{r.source} output with a <gpu> element per GPU",
        remediation="Re-record the snapshot (`nodeagent snapshot`) or run `nvidia-smi -q -x` on the node.",
        subject=subject,
    )


def evaluate(f: Facts, p: Params) -> list[Finding]:
    r = f.report
    unusable = _report_unusable(r)
    if unusable is not None:
        return [unusable]
    findings: list[Finding] = []
    healthy = []
    mig_ok: list[Finding] = []
    for g in r.gpus:
        own = _unreadable(r, g) + _memory(r, g) + _recovery(r, g) + _clocks(r, g, p) + _settings(r, g, p)
        mig = _mig(r, g)
        findings += own + mig
        if g.mig_current and not mig:
            mig_ok.append(_mig_ok(r, g))
        elif not own and not mig:
            healthy.append(g)
    findings += (
        _absent(f)
        + _persistence(r, p)
        + _driver(r)
        + unparsable(
            ID,
            r.problems,
            f"value(s) in the {r.source} output",
            "`nvidia-smi -q` on the node",
            subject="parse",
        )
    )
    if healthy:
        findings.append(_healthy(r, healthy, len(mig_ok)))
    return findings + mig_ok


def _healthy(r: GpuReport, healthy: list[GpuHealth], in_mig_mode: int) -> Finding:
    """One OK finding for the GPUs with nothing to report (those in MIG mode are reported apart)."""
    evidence = {
        f"{r.source}: driver version": r.driver_version or "?",
        f"{r.source}: CUDA version": r.cuda_version or "?",
    }
    for g in healthy:
        evidence[_key(r, g, g.pci_address or "summary")] = _summary(g)
        evidence.update(_setting_values(r, g))
    names = sorted({g.name or "?" for g in healthy})
    in_mig = f"; {in_mig_mode} in MIG mode, reported apart" if in_mig_mode else ""
    return Finding(
        ID,
        Status.OK,
        f"{len(healthy)} of {len(r.gpus)} GPU(s) healthy ({', '.join(names)}); "
        f"driver {r.driver_version or '?'}, CUDA {r.cuda_version or '?'}{in_mig}",
        evidence,
        subject="gpus",
    )


CHECK = Check(
    id=ID,
    title="GPU health",
    area=Area.GPU,
    tags=("preflight", "gpu"),
    collect=collect,
    evaluate=evaluate,
    params=Params,
    paths=(*nvml.PATHS, PHYSFN),
    commands=(*gpus.COMMANDS, *nvidia_smi.COMMANDS),
)
