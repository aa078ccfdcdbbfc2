"""C-states and frequency: cpuidle driver and idle states, boot limits, governor, EPP, turbo.

A training step waits on CPU threads that feed the GPUs (input pipeline, kernel launches, NCCL
proxies). A core parked in a deep C-state takes tens to hundreds of microseconds to wake, and a
core left at a low P-state runs the input pipeline slowly: both show up as GPU idle time.

Sources: Documentation/admin-guide/pm/cpuidle.rst (cpuidle sysfs, PM QoS latency limits),
Documentation/admin-guide/pm/cpufreq.rst (policies, governors), intel_pstate.rst and
amd-pstate.rst (status, no_turbo, energy_performance_preference), kernel-parameters.txt
(intel_idle.max_cstate, processor.max_cstate, idle=).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from nodeagent.api.check import Area, Check, param
from nodeagent.core.finding import Finding, Status, unparsable
from nodeagent.core.parse import format_cpulist
from nodeagent.facts import cpufreq, system
from nodeagent.facts.reader import Reader
from nodeagent.host import Host

ID = "cstates"
CPU_DIR = "/sys/devices/system/cpu"
CPUIDLE_DIR = f"{CPU_DIR}/cpuidle"
CPUFREQ_DIR = f"{CPU_DIR}/cpufreq"
INTEL_PSTATE_DIR = f"{CPU_DIR}/intel_pstate"
AMD_PSTATE_DIR = f"{CPU_DIR}/amd_pstate"
CMDLINE = "/proc/cmdline"

_STATE_ATTRS = ("name", "desc", "latency", "disable")
# Kernel parameters that limit idle states or pick the P-state driver (kernel-parameters.txt).
BOOT_PARAMS = (
    "intel_idle.max_cstate",
    "processor.max_cstate",
    "idle",
    "cpuidle.off",
    "cpuidle.governor",
    "intel_pstate",
    "amd_pstate",
)

DOC_CPUIDLE = "https://docs.kernel.org/admin-guide/pm/cpuidle.html"
DOC_CPUFREQ = "https://docs.kernel.org/admin-guide/pm/cpufreq.html"
DOC_INTEL_PSTATE = "https://docs.kernel.org/admin-guide/pm/intel_pstate.html"
DOC_AMD_PSTATE = "https://docs.kernel.org/admin-guide/pm/amd-pstate.html"


@dataclass(frozen=True)
class Params:
    max_exit_latency_us: int = param(
        10,
        "Idle states with a longer exit latency stay enabled only at a wake-up cost on every GPU "
        "feed; tuned's latency-performance profile keeps C1 only (force_latency) and the kernel's "
        f"PM QoS limit works the same way ({DOC_CPUIDLE}#power-management-quality-of-service-for-cpus).",
    )
    governor: str = param(
        "performance",
        "The performance governor keeps cores at the highest frequency the policy allows; "
        "ondemand/powersave ramp up late on bursty input pipelines "
        f"({DOC_CPUFREQ}#performance; NVIDIA DGX and Dell HPC BIOS guides set the same).",
    )
    energy_performance_preference: str = param(
        "performance",
        "With HWP/CPPC the hardware picks the frequency and EPP biases it; anything but "
        f"'performance' trades speed for power ({DOC_INTEL_PSTATE}#energy-vs-performance-hints, "
        f"{DOC_AMD_PSTATE}).",
    )
    turbo: bool = param(
        True,
        "Turbo/boost should be on for training nodes: input decoding and augmentation are "
        f"single-thread bound ({DOC_INTEL_PSTATE}#no-turbo-attr, {DOC_CPUFREQ}#the-boost-file-in-sysfs).",
    )


@dataclass(frozen=True)
class IdleState:
    index: int
    name: str | None
    desc: str | None
    latency_us: int | None
    disabled: bool | None  # None: no readable `disable` file (old kernels): the state is enabled


# Kept under this name: the check's tests and findings speak of frequency policies.
FreqPolicy = cpufreq.Policy


@dataclass(frozen=True)
class Facts:
    cpuidle_present: bool
    idle_driver: str | None
    idle_governor: str | None
    idle_states: dict[int, list[IdleState]]  # CPU -> its states, by index
    cmdline: str | None
    policies: list[cpufreq.Policy]
    intel_pstate_status: str | None = None
    intel_no_turbo: str | None = None
    amd_pstate_status: str | None = None
    boost: str | None = None
    problems: list[str] = field(default_factory=list)
    virtual: str | None = None  # why this is a VM (facts.system.virtual)
    cpus_recorded: bool = True  # /sys/devices/system/cpu exists: without it nothing here was read


def _cpus(host: Host) -> list[int]:
    return sorted(int(m.group(1)) for e in host.listdir(CPU_DIR) or [] if (m := re.fullmatch(r"cpu(\d+)", e)))


def _bool01(r: Reader, path: str) -> bool | None:
    value = r.int(path)
    return None if value is None else value != 0


def _collect_states(r: Reader, cpus: list[int]) -> dict[int, list[IdleState]]:
    out: dict[int, list[IdleState]] = {}
    descs: dict[tuple[int, str | None], str | None] = {}
    for cpu in cpus:
        base = f"{CPU_DIR}/cpu{cpu}/cpuidle"
        entries = r.host.listdir(base)
        if not entries:
            continue
        states: list[IdleState] = []
        for index in sorted(int(m.group(1)) for e in entries if (m := re.fullmatch(r"state(\d+)", e))):
            path = f"{base}/state{index}"
            name = r.value(f"{path}/name")
            # The description is the same on every CPU of one driver: read it once per state.
            key = (index, name)
            if key not in descs:
                descs[key] = r.value(f"{path}/desc")
            states.append(
                IdleState(
                    index=index,
                    name=name,
                    desc=descs[key],
                    latency_us=r.int(f"{path}/latency"),
                    disabled=_bool01(r, f"{path}/disable"),
                )
            )
        out[cpu] = states
    return out


def collect(host: Host) -> Facts:
    r = Reader(host)
    cpus = _cpus(host)
    freq = cpufreq.collect(host)
    governor = r.value(f"{CPUIDLE_DIR}/current_governor")
    if governor is None:
        governor = r.value(f"{CPUIDLE_DIR}/current_governor_ro")
    sysinfo = system.collect(host)
    return Facts(
        cpuidle_present=host.is_dir(CPUIDLE_DIR),
        cpus_recorded=host.is_dir(CPU_DIR),
        idle_driver=r.value(f"{CPUIDLE_DIR}/current_driver"),
        idle_governor=governor,
        idle_states=_collect_states(r, cpus),
        cmdline=sysinfo.cmdline,
        policies=freq.policies,
        intel_pstate_status=r.value(f"{INTEL_PSTATE_DIR}/status"),
        intel_no_turbo=r.value(f"{INTEL_PSTATE_DIR}/no_turbo"),
        amd_pstate_status=r.value(f"{AMD_PSTATE_DIR}/status"),
        boost=r.value(f"{CPUFREQ_DIR}/boost"),
        problems=r.problems + freq.problems,
        virtual=sysinfo.virtual,
    )


# -- evaluation --------------------------------------------------------------------------------


def _label(s: IdleState) -> str:
    name = s.name or f"state{s.index}"
    lat = "?" if s.latency_us is None else str(s.latency_us)
    return f"{name} ({lat} us)"


def _table(states: list[IdleState]) -> str:
    return ", ".join(_label(s) + (" disabled" if s.disabled else "") for s in states) or "(none)"


def _groups(mapping: dict[int, str]) -> dict[str, list[int]]:
    """{cpu: value} -> {value: [cpus]}, in order of the first CPU of each value."""
    out: dict[str, list[int]] = {}
    for cpu in sorted(mapping):
        out.setdefault(mapping[cpu], []).append(cpu)
    return out


def _cpus_text(cpus: Iterable[int]) -> str:
    return format_cpulist(cpus) or "?"


def _cpuidle_present(f: Facts) -> bool:
    # Per-CPU states without the global folder only happen in partial recordings: trust the states.
    return f.cpuidle_present or any(f.idle_states.values())


def _platform(f: Facts) -> str:
    """Where a platform setting is changed: the BIOS on bare metal, the hypervisor for a VM."""
    if f.virtual:
        return "the hypervisor's settings for this VM (a guest cannot change them)"
    return "the BIOS"


def _driver(f: Facts) -> Finding:
    path = f"{CPUIDLE_DIR}/current_driver"
    if not _cpuidle_present(f):
        if f.virtual:
            return Finding(
                ID,
                Status.OK,
                "no cpuidle interface: a virtual machine, whose idle states belong to the host "
                "(the hypervisor's C-state settings decide wake-up latency)",
                {CPUIDLE_DIR: "(absent)", "virtual machine": f.virtual},
                subject="cpuidle",
            )
        return Finding(
            ID,
            Status.OK,
            "no cpuidle interface: C-states are disabled in the BIOS or kernel (cpuidle.off=1, or "
            "cpuidle not built in or not recorded); lowest wake-up latency, but idle cores draw full "
            "power and leave busy cores less turbo headroom",
            {CPUIDLE_DIR: "(absent)"},
            expected="deep C-states limited (disabling them all is fine for latency)",
            subject="cpuidle",
        )
    if f.idle_driver is None:
        return Finding(
            ID,
            Status.SKIPPED,
            f"cpuidle driver not readable at {path}",
            {path: "(absent)"},
            subject="cpuidle",
        )
    evidence = {path: f.idle_driver}
    if f.idle_governor is not None:
        evidence[f"{CPUIDLE_DIR}/current_governor"] = f.idle_governor
    if f.idle_driver == "none":
        return Finding(
            ID,
            Status.OK,
            f"cpuidle driver 'none': C-states are disabled in {_platform(f)} (or no idle driver fits "
            "this CPU), so idle CPUs only halt; lowest wake-up latency, higher idle power and less "
            "turbo headroom",
            evidence,
            subject="cpuidle",
        )
    governor = f", governor {f.idle_governor}" if f.idle_governor else ""
    return Finding(ID, Status.OK, f"cpuidle driver {f.idle_driver}{governor}", evidence, subject="cpuidle")


def _deep(states: list[IdleState], limit: int) -> list[IdleState]:
    return [s for s in states if not s.disabled and s.latency_us is not None and s.latency_us > limit]


def _idle_states(f: Facts, p: Params, boot: dict[str, str]) -> Finding | None:
    if not _cpuidle_present(f) or f.idle_driver == "none":
        return None
    pattern = f"{CPU_DIR}/cpu*/cpuidle/state*"
    if not any(f.idle_states.values()):
        return Finding(
            ID,
            Status.SKIPPED,
            f"no per-CPU idle states readable under {pattern}",
            {pattern: "(absent)"},
            subject="idle-states",
        )
    tables = _groups({cpu: _table(states) for cpu, states in f.idle_states.items() if states})
    evidence = {f"{CPU_DIR}/cpu{cpus[0]}/cpuidle (CPUs {_cpus_text(cpus)})": t for t, cpus in tables.items()}
    limits = {
        k: v
        for k in ("intel_idle.max_cstate", "processor.max_cstate", "idle")
        if (v := boot.get(k)) is not None
    }
    for k, v in limits.items():
        evidence[f"{CMDLINE} {k}"] = v
    differ = "; idle state settings differ across CPUs" if len(tables) > 1 else ""
    deep_by_cpu = {
        cpu: ", ".join(_label(s) for s in deep)
        for cpu, states in f.idle_states.items()
        if (deep := _deep(states, p.max_exit_latency_us))
    }
    if not deep_by_cpu:
        enabled = ""
        if len(tables) == 1:
            states = next(s for s in f.idle_states.values() if s)
            enabled = "; enabled: " + ", ".join(_label(s) for s in states if not s.disabled)
        return Finding(
            ID,
            Status.OK,
            f"no idle state with exit latency above {p.max_exit_latency_us} us is enabled{enabled}{differ}",
            evidence,
            expected=f"enabled idle states exit within {p.max_exit_latency_us} us",
            subject="idle-states",
        )
    return _deep_states(f, p, deep_by_cpu, evidence, differ)


def _deep_states(
    f: Facts, p: Params, deep_by_cpu: dict[int, str], evidence: dict[str, str], differ: str
) -> Finding:
    """Idle states deeper than the latency limit are enabled: where, and how to limit them."""
    parts = [f"{labels} on CPUs {_cpus_text(cpus)}" for labels, cpus in _groups(deep_by_cpu).items()]
    limited = sorted(set(f.idle_states) - set(deep_by_cpu))
    if limited:
        parts.append(f"CPUs {_cpus_text(limited)} have them limited")
    driver = f.idle_driver or ""
    if driver == "intel_idle":
        boot_fix = "intel_idle.max_cstate=1 (keeps C1/C1E)"
    elif driver == "acpi_idle":
        boot_fix = "processor.max_cstate=1"
    else:
        boot_fix = "intel_idle.max_cstate=1 processor.max_cstate=1 (x86) or the platform's idle limit"
    return Finding(
        ID,
        Status.WARN,
        f"deep C-states enabled: {'; '.join(parts)}{differ}",
        evidence,
        expected=f"no enabled idle state with exit latency above {p.max_exit_latency_us} us",
        remediation=f"At run time: cpupower idle-set -D {p.max_exit_latency_us} (disables states with "
        "a longer exit latency; lost at reboot; a PM QoS limit via /dev/cpu_dma_latency lasts only while "
        f"the file is held open). At boot: add {boot_fix} to the kernel command line, or set C-states "
        f"to C1 only in {_platform(f)} (Dell: System Profile 'Performance'). Costs idle power.",
        subject="idle-states",
        fix="c-states",
    )


def _boot(f: Facts, boot: dict[str, str]) -> Finding:
    if f.cmdline is None:
        return Finding(
            ID,
            Status.SKIPPED,
            f"kernel command line not readable at {CMDLINE}",
            {CMDLINE: "(absent)"},
            subject="boot",
        )
    found = {k: boot[k] for k in BOOT_PARAMS if k in boot}
    evidence = {f"{CMDLINE} {k}": v or "(set)" for k, v in found.items()} or {CMDLINE: f.cmdline[:200]}
    listed = " ".join(f"{k}={v}" if v else k for k, v in found.items())
    idle = found.get("idle")
    if idle == "poll":
        return Finding(
            ID,
            Status.WARN,
            "idle=poll on the kernel command line: idle CPUs spin, stealing cycles from their SMT "
            "siblings, running hot and lowering turbo headroom",
            evidence,
            expected="C-states limited with intel_idle.max_cstate / processor.max_cstate, not idle=poll",
            remediation="Replace idle=poll with intel_idle.max_cstate=1 processor.max_cstate=1 in "
            "GRUB_CMDLINE_LINUX (/etc/default/grub), update-grub, reboot (kernel-parameters.txt calls "
            "idle=poll 'not recommended').",
            subject="boot",
            fix="c-states",
        )
    if not found:
        return Finding(
            ID,
            Status.OK,
            "no C-state or P-state driver options on the kernel command line",
            evidence,
            subject="boot",
        )
    note = ""
    if idle in ("halt", "nomwait"):
        note = f": idle={idle} limits idle CPUs to HLT (C1)"
    return Finding(ID, Status.OK, f"kernel command line sets {listed}{note}", evidence, subject="boot")


def _pstate_evidence(f: Facts) -> dict[str, str]:
    evidence = {}
    if f.intel_pstate_status is not None:
        evidence[f"{INTEL_PSTATE_DIR}/status"] = f.intel_pstate_status
    if f.amd_pstate_status is not None:
        evidence[f"{AMD_PSTATE_DIR}/status"] = f.amd_pstate_status
    return evidence


def _driver_text(f: Facts) -> str:
    drivers = sorted({p.driver for p in f.policies if p.driver})
    text = "driver " + ("/".join(drivers) or "unknown")
    modes = [
        f"{name} {status}"
        for name, status in (("intel_pstate", f.intel_pstate_status), ("amd_pstate", f.amd_pstate_status))
        if status
    ]
    return text + (f", {', '.join(modes)} mode" if modes else "")


def governor_accepted(governor: str, p: Params) -> bool:
    """Whether the check accepts a policy's scaling governor."""
    return governor == p.governor


def epp_accepted(epp: str, p: Params) -> bool:
    """Whether the check accepts a policy's energy_performance_preference."""
    return epp == p.energy_performance_preference


def turbo_accepted(on: bool, p: Params) -> bool:
    """Whether the check accepts turbo/boost being on (True) or off."""
    return on == p.turbo


def _governor(f: Facts, p: Params) -> Finding:
    by_cpu = {cpu: pol.governor for pol in f.policies if pol.governor for cpu in pol.cpus}
    evidence = {f"{pol.path}/scaling_governor": pol.governor or "(absent)" for pol in f.policies}
    evidence.update({f"{pol.path}/scaling_driver": pol.driver for pol in f.policies if pol.driver})
    evidence.update(_pstate_evidence(f))
    if not by_cpu:
        return Finding(
            ID,
            Status.SKIPPED,
            "scaling governor not readable in any cpufreq policy",
            evidence,
            subject="governor",
        )
    groups = _groups(by_cpu)
    where = "; ".join(f"{g} on CPUs {_cpus_text(cpus)}" for g, cpus in groups.items())
    if all(governor_accepted(g, p) for g in groups):
        return Finding(
            ID,
            Status.OK,
            f"governor {p.governor} on all {len(by_cpu)} CPUs ({_driver_text(f)})",
            evidence,
            expected=p.governor,
            subject="governor",
        )
    mixed = "mixed governors: " if len(groups) > 1 else "governor "
    hint = ""
    if f.intel_pstate_status == "active" and "powersave" in groups:
        hint = "; its powersave still lets cores drop to low P-states"
    return Finding(
        ID,
        Status.WARN,
        f"{mixed}{where} ({_driver_text(f)}{hint})",
        evidence,
        expected=f"{p.governor} on every CPU",
        remediation=f"cpupower frequency-set -g {p.governor} (or echo {p.governor} | tee "
        f"{CPU_DIR}/cpu*/cpufreq/scaling_governor); persist it with `tuned-adm profile "
        f"throughput-performance` or a systemd unit, and set the power profile in {_platform(f)} to OS "
        "control or Maximum Performance.",
        subject="governor",
        fix="cpu-governor",
    )


def _epp(f: Facts, p: Params) -> Finding:
    by_cpu = {cpu: pol.epp for pol in f.policies if pol.epp for cpu in pol.cpus}
    pattern = f"{CPUFREQ_DIR}/policy*/energy_performance_preference"
    if not by_cpu:
        return Finding(
            ID,
            Status.SKIPPED,
            f"no energy_performance_preference ({_driver_text(f)}: no EPP hint, "
            "HWP/CPPC off or not supported)",
            {pattern: "(absent)"},
            subject="epp",
        )
    evidence = {f"{pol.path}/energy_performance_preference": pol.epp for pol in f.policies if pol.epp}
    groups = _groups(by_cpu)
    if all(epp_accepted(epp, p) for epp in groups):
        return Finding(
            ID,
            Status.OK,
            f"energy_performance_preference {p.energy_performance_preference} on all {len(by_cpu)} CPUs",
            evidence,
            expected=p.energy_performance_preference,
            subject="epp",
        )
    where = "; ".join(f"{g} on CPUs {_cpus_text(cpus)}" for g, cpus in groups.items())
    return Finding(
        ID,
        Status.WARN,
        f"energy_performance_preference {where}",
        evidence,
        expected=f"{p.energy_performance_preference} on every CPU",
        remediation=f"echo {p.energy_performance_preference} | tee "
        f"{CPU_DIR}/cpu*/cpufreq/energy_performance_preference (intel_pstate's performance governor "
        "sets it by itself); persist it with tuned or a systemd unit.",
        subject="epp",
        fix="cpu-governor",
    )


def turbo_states(no_turbo: str | None, boost: str | None) -> list[bool]:
    """The turbo states the files say (True: on), one per well-formed file: intel_pstate/no_turbo
    (0 on) and cpufreq/boost (1 on). Turbo is on when every one of them says so."""
    states: list[bool] = []
    if no_turbo in ("0", "1"):
        states.append(no_turbo == "0")
    if boost in ("0", "1"):
        states.append(boost == "1")
    return states


def _turbo_read(f: Facts) -> tuple[dict[str, str], list[bool]]:
    """The turbo files as read, and the states they say (True: turbo on), one per well-formed file."""
    evidence: dict[str, str] = {}
    if f.intel_no_turbo is not None:
        evidence[f"{INTEL_PSTATE_DIR}/no_turbo"] = f.intel_no_turbo
    if f.boost is not None:
        evidence[f"{CPUFREQ_DIR}/boost"] = f.boost
    return evidence, turbo_states(f.intel_no_turbo, f.boost)


def _turbo(f: Facts, p: Params) -> Finding:
    want = "on" if p.turbo else "off"
    evidence, states = _turbo_read(f)
    if not evidence:
        return Finding(
            ID,
            Status.SKIPPED,
            f"turbo state not exposed (no {INTEL_PSTATE_DIR}/no_turbo or {CPUFREQ_DIR}/boost)",
            {f"{INTEL_PSTATE_DIR}/no_turbo": "(absent)", f"{CPUFREQ_DIR}/boost": "(absent)"},
            subject="turbo",
        )
    if not states:
        return Finding(
            ID,
            Status.WARN,
            "turbo state unreadable: " + ", ".join(f"{k} = {v!r}" for k, v in evidence.items()),
            evidence,
            expected="0 or 1",
            remediation="A corrupt recording or a kernel bug: re-record the snapshot or read the "
            "file on the node.",
            subject="turbo",
        )
    on = all(states)
    state = "on" if on else "off"
    if turbo_accepted(on, p):
        return Finding(ID, Status.OK, f"turbo/boost {state}", evidence, expected=want, subject="turbo")
    if p.turbo:
        remediation = (
            f"echo 0 > {INTEL_PSTATE_DIR}/no_turbo (intel_pstate) or echo 1 > {CPUFREQ_DIR}/boost; "
            f"if it will not change, enable Turbo Boost / Core Performance Boost in {_platform(f)}."
        )
    else:
        remediation = f"echo 1 > {INTEL_PSTATE_DIR}/no_turbo (intel_pstate) or echo 0 > {CPUFREQ_DIR}/boost."
    return Finding(
        ID,
        Status.WARN,
        f"turbo/boost {state}, expected {want}",
        evidence,
        expected=want,
        remediation=remediation,
        subject="turbo",
        # The cpu-governor tuner turns turbo on; turning it off is left to people.
        fix="cpu-governor" if p.turbo else None,
    )


def evaluate(f: Facts, p: Params) -> list[Finding]:
    if not f.cpus_recorded:
        return [
            Finding(
                ID,
                Status.SKIPPED,
                f"no {CPU_DIR}: C-states and frequency scaling not readable",
                {CPU_DIR: "(absent)"},
                subject="cpuidle",
            )
        ]
    boot = system.parse_cmdline(f.cmdline or "")
    findings = [_driver(f)]
    states = _idle_states(f, p, boot)
    if states:
        findings.append(states)
    findings.append(_boot(f, boot))
    if not f.policies:
        findings.append(
            Finding(
                ID,
                Status.SKIPPED,
                f"no cpufreq policies under {CPUFREQ_DIR}: frequency scaling is not exposed (a VM, or "
                "P-states left to the BIOS/firmware)",
                {CPUFREQ_DIR: "(no policies)", **_pstate_evidence(f)},
                subject="frequency",
            )
        )
    else:
        findings += [_governor(f, p), _epp(f, p), _turbo(f, p)]
    findings += unparsable(
        ID, f.problems, "C-state/frequency file(s)", "`cpupower idle-info` and `cpupower frequency-info`"
    )
    return findings


CHECK = Check(
    id=ID,
    title="C-states and frequency",
    area=Area.CPU,
    tags=("preflight", "cpu"),
    collect=collect,
    evaluate=evaluate,
    params=Params,
    paths=(
        f"{CPUIDLE_DIR}/current_driver",
        f"{CPUIDLE_DIR}/current_governor",
        f"{CPUIDLE_DIR}/current_governor_ro",
        *(f"{CPU_DIR}/cpu[0-9]*/cpuidle/state*/{a}" for a in _STATE_ATTRS),
        *cpufreq.PATHS,
        f"{CPUFREQ_DIR}/boost",
        f"{INTEL_PSTATE_DIR}/status",
        f"{INTEL_PSTATE_DIR}/no_turbo",
        f"{AMD_PSTATE_DIR}/status",
        *system.PATHS,
    ),
)
