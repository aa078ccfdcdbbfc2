"""c-states: keep cores out of deep idle states while a training job runs.

A core parked in a deep C-state takes tens to hundreds of microseconds to wake, on every wake-up
of an input-pipeline thread or NCCL proxy. Two ways out, both planned here:

- process scope: a CPU latency limit through PM QoS. A process opens /dev/cpu_dma_latency and
  writes the limit; the kernel keeps it only while the file stays open and drops it on close
  (Documentation/power/pm_qos_interface.rst). So a one-shot `nodeagent tune --apply` cannot hold
  it: `nodeagent exec` holds it for the life of the job, from the profile. TuneD's plugin_cpu
  (force_latency) works the same way, from its long-running daemon.
- boot scope (advice): intel_idle.max_cstate=1 / processor.max_cstate=1 on the kernel command
  line, which stops the deeper states from being registered at all (kernel-parameters.txt,
  Documentation/admin-guide/pm/intel_idle.rst).

The threshold is the `cstates` check's, so what the launcher holds is what the check expects, and
both are planned only where the check flags an idle state (its `idle-states` finding); a tighter
`max_latency_us`, set explicitly, asks for more than the check requires, and the changes say so.
An `idle=poll` on the kernel command line (the check's `boot` finding) gets the advice to replace
it with the same C1 limit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from nodeagent.api.check import param
from nodeagent.api.tune import Change, Plan, Scope, Tuner, asked_why, finding_key
from nodeagent.checks import cstates as cstates_check
from nodeagent.checks.cstates import CPU_DIR, CPUIDLE_DIR, IdleState
from nodeagent.core.errors import UsageError
from nodeagent.core.parse import format_cpulist
from nodeagent.facts import system

ID = "c-states"
PROFILE_KEY = "launcher.cpu_dma_latency_us"
# What the plan says about the process change; tests and the launcher's docs quote it.
HELD = (
    "held through /dev/cpu_dma_latency only while `nodeagent exec` runs the job "
    "(PM QoS: the limit lasts as long as the file stays open)"
)
DOC_PM_QOS = "https://docs.kernel.org/power/pm_qos_interface.html"
DOC_INTEL_IDLE = "https://docs.kernel.org/admin-guide/pm/intel_idle.html"
DOC_PARAMS = "https://docs.kernel.org/admin-guide/kernel-parameters.html"

# cpuidle driver -> the kernel parameter that caps its states at C1 (kernel-parameters.txt).
BOOT_LIMITS = {"intel_idle": "intel_idle.max_cstate", "acpi_idle": "processor.max_cstate"}
BOOT_LIMIT = 1  # C1 (and POLL) stay: their exit latency is a few microseconds
IDLE_FINDING = finding_key(cstates_check.ID, "idle-states")
BOOT_FINDING = finding_key(cstates_check.ID, "boot")

Facts = cstates_check.Facts


@dataclass(frozen=True)
class Params:
    max_latency_us: int | None = param(
        None,
        "CPU wake-up latency limit (us) the launcher requests through /dev/cpu_dma_latency: idle "
        "states with a longer exit latency are not entered while the job runs. Unset: the cstates "
        "check's max_exit_latency_us (10), planned only where the check flags a state; set: planned "
        f"wherever an enabled state exits slower ({DOC_PM_QOS}; tuned's latency-performance "
        "force_latency).",
    )

    def __post_init__(self) -> None:
        # PM QoS takes an s32 in microseconds; negative values are rejected by the kernel.
        value = self.max_latency_us
        if value is None:
            return
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 2_000_000_000:
            raise UsageError(f"tuner {ID}: max_latency_us must be between 0 and 2000000000 us, got {value}")

    @property
    def limit_us(self) -> int:
        """The limit planned: the parameter, else the cstates check's threshold."""
        if self.max_latency_us is not None:
            return self.max_latency_us
        return cstates_check.Params().max_exit_latency_us


def _label(s: IdleState) -> str:
    return f"{s.name or f'state{s.index}'} ({s.latency_us} us)"


def _boot_advice(f: Facts, boot: dict[str, str], notes: list[str]) -> Change | None:
    driver = f.idle_driver or ""
    name = BOOT_LIMITS.get(driver)
    if name is None:
        notes.append(
            f"no kernel parameter caps the states of cpuidle driver {driver or '(unknown)'!r} (only "
            "intel_idle and acpi_idle have one): no boot advice; the BIOS C-state setting is the "
            "persistent way"
        )
        return None
    current = boot.get(name)
    if current is not None and current.isdigit() and int(current) <= BOOT_LIMIT:
        notes.append(f"{name}={current} is already on the kernel command line")
        return None
    setting = f"{name}={BOOT_LIMIT}"
    if current is not None:
        before = f"{name}={current}"
    else:
        before = f"no {name}" if f.cmdline is not None else "(/proc/cmdline not readable)"
    return Change(ID, "kernel command line", before, setting, Scope.BOOT, _boot_why(setting))


def _boot_why(setting: str) -> str:
    return (
        f"persistent limit from the next boot on: `grubby --update-kernel=ALL --args={setting}` "
        f"(RHEL/Fedora), or add {setting} to GRUB_CMDLINE_LINUX in /etc/default/grub and run "
        f"update-grub (Debian/Ubuntu); costs idle power ({DOC_INTEL_IDLE}, {DOC_PARAMS})"
    )


def _poll_advice(f: Facts, boot: dict[str, str]) -> Change | None:
    """idle=poll spins idle CPUs (the check's `boot` finding): the same C1 limit, without spinning.
    Under idle=poll no idle driver registers, so the one to cap is unknown unless recorded: both."""
    if boot.get("idle") != "poll":
        return None
    name = BOOT_LIMITS.get(f.idle_driver or "")
    names = [name] if name else list(BOOT_LIMITS.values())
    setting = " ".join(f"{n}={BOOT_LIMIT}" for n in names)
    why = (
        f"idle=poll spins idle CPUs, stealing cycles from their SMT siblings; remove it and set {setting}: "
        + _boot_why(setting)
    )
    return Change(ID, "kernel command line", "idle=poll", setting, Scope.BOOT, why, answers=(BOOT_FINDING,))


def _deep_states(f: Facts, max_latency_us: int) -> tuple[dict[int, str], IdleState | None]:
    """CPU -> its enabled idle states slower to exit than `max_latency_us`, and the deepest enabled state."""
    deep_by_cpu: dict[int, str] = {}
    deepest: IdleState | None = None
    for cpu, states in sorted(f.idle_states.items()):
        enabled = [s for s in states if not s.disabled and s.latency_us is not None]
        for s in enabled:
            if deepest is None or (s.latency_us or 0) > (deepest.latency_us or 0):
                deepest = s
        labels = [_label(s) for s in enabled if (s.latency_us or 0) > max_latency_us]
        if labels:
            deep_by_cpu[cpu] = ", ".join(labels)
    return deep_by_cpu, deepest


def _latency_limit(deep_by_cpu: dict[int, str], max_latency_us: int) -> Change:
    """The PM QoS wake-up latency limit, held while jobs run, naming the states it keeps CPUs out of."""
    groups: dict[str, list[int]] = {}
    for cpu, text in deep_by_cpu.items():
        groups.setdefault(text, []).append(cpu)
    where = "; ".join(f"{text} on CPUs {format_cpulist(cpus)}" for text, cpus in groups.items())
    return Change(
        ID,
        "CPU wake-up latency limit (/dev/cpu_dma_latency)",
        f"no limit: {where}",
        f"{max_latency_us} us",
        Scope.PROCESS,
        f"{HELD}; deeper idle states are not entered meanwhile ({DOC_PM_QOS}; "
        "tuned plugin_cpu force_latency does the same)",
        profile_key=PROFILE_KEY,
        value=max_latency_us,
    )


def _nothing_to_limit(f: Facts) -> str | None:
    """Why no latency limit can help here, or None."""
    if not f.cpuidle_present and not any(f.idle_states.values()):
        return (
            f"no cpuidle interface ({CPUIDLE_DIR} absent): C-states are off in the BIOS or the "
            "kernel (cpuidle.off=1), so idle CPUs cannot go deep; nothing to limit"
        )
    if f.idle_driver == "none":
        return (
            "cpuidle driver 'none': no idle states are registered (disabled in the BIOS, or no "
            "driver for this CPU); nothing to limit"
        )
    if not any(f.idle_states.values()):
        return f"no idle states readable under {CPU_DIR}/cpu*/cpuidle/state*: nothing to limit"
    return None


def plan(f: Facts, p: Params) -> Plan:
    boot = system.parse_cmdline(f.cmdline or "")
    poll = _poll_advice(f, boot)
    held = [poll] if poll else []
    why_not = _nothing_to_limit(f)
    if why_not:
        return Plan(ID, held, notes=[why_not])
    limit = p.limit_us
    deep_by_cpu, deepest = _deep_states(f, limit)
    # The check's own judgement: states slower than its threshold are what it flags.
    flagged = bool(_deep_states(f, cstates_check.Params().max_exit_latency_us)[0])
    if not deep_by_cpu:
        seen = f" (deepest enabled: {_label(deepest)})" if deepest else ""
        note = f"no enabled idle state exits slower than {limit} us{seen}: nothing to limit"
        declined = {IDLE_FINDING: f"max_latency_us={limit}: {note}"} if flagged else {}
        return Plan(ID, held, notes=[note], declined=declined)
    notes: list[str] = []
    changes = [_latency_limit(deep_by_cpu, limit)]
    if poll is None:
        advice = _boot_advice(f, boot, notes)
        if advice:
            changes.append(advice)
    judged = [_judged(c, flagged, p) for c in changes]
    if poll is not None:
        # One command-line change: replacing idle=poll with the C1 limit answers both findings.
        answers = (BOOT_FINDING, IDLE_FINDING) if flagged else (BOOT_FINDING,)
        judged.append(dataclasses.replace(poll, answers=answers))
    return Plan(ID, judged, notes)


def _judged(change: Change, flagged: bool, p: Params) -> Change:
    """A limit the check asks for answers its idle-states finding; a tighter one, set explicitly
    where the check flags nothing, was asked by the parameter, and says so."""
    if flagged:
        return dataclasses.replace(change, answers=(IDLE_FINDING,))
    name = f"{ID}.max_latency_us"
    threshold = cstates_check.Params().max_exit_latency_us
    asked = asked_why(name, p.limit_us, cstates_check.ID, f"exit latencies up to {threshold} us")
    return dataclasses.replace(change, asked=name, why=f"{asked}; {change.why}")


TUNER = Tuner(
    id=ID,
    title="C-states: PM QoS latency limit while jobs run, kernel command line advice",
    collect=cstates_check.collect,
    plan=plan,
    params=Params,
    paths=cstates_check.CHECK.paths,
)
