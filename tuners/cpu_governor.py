"""cpu-governor: the performance governor, the performance EPP hint and turbo, on every cpufreq policy.

A core that ramps up late, or is biased towards saving energy, runs the input pipeline and the
kernel launches that feed the GPUs slowly. Fixes what the `cstates` check reports on its
`governor`, `epp` and `turbo` subjects, with the check's own judgement: a policy whose governor or
EPP the check accepts is left alone unless `governor` or `energy_performance_preference` is set
explicitly, and the change then says that the parameter asked for it.

Sources: Documentation/admin-guide/pm/cpufreq.rst (policy directories, scaling_governor,
scaling_available_governors, the boost file), intel_pstate.rst (active mode, no_turbo, EPP) and
amd-pstate.rst (active/EPP mode, energy_performance_preference).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from nodeagent.api.check import param
from nodeagent.api.tune import Change, Plan, Tuner, asked_why, finding_key, runtime_write
from nodeagent.checks import cstates as cstates_check
from nodeagent.core.errors import UsageError
from nodeagent.core.parse import format_cpulist
from nodeagent.facts import cpufreq
from nodeagent.facts.reader import Reader
from nodeagent.host import Host

ID = "cpu-governor"
CPU_DIR = "/sys/devices/system/cpu"
CPUFREQ_DIR = f"{CPU_DIR}/cpufreq"
NO_TURBO = f"{CPU_DIR}/intel_pstate/no_turbo"
BOOST = f"{CPUFREQ_DIR}/boost"
_WRITTEN = ("scaling_governor", "energy_performance_preference")

DOC_CPUFREQ = "https://docs.kernel.org/admin-guide/pm/cpufreq.html"
DOC_INTEL_PSTATE = "https://docs.kernel.org/admin-guide/pm/intel_pstate.html"
DOC_AMD_PSTATE = "https://docs.kernel.org/admin-guide/pm/amd-pstate.html"


GOVERNOR_FINDING = finding_key(cstates_check.ID, "governor")
EPP_FINDING = finding_key(cstates_check.ID, "epp")
TURBO_FINDING = finding_key(cstates_check.ID, "turbo")


@dataclass(frozen=True)
class Params:
    governor: str | None = param(
        None,
        "Governor to write. Unset: the cstates check's (performance, which keeps each policy at its "
        "highest allowed frequency; ondemand/schedutil/powersave ramp up late on bursty input "
        "pipelines), written only to policies the check flags; set: written to every policy "
        f"({DOC_CPUFREQ}#performance).",
    )
    energy_performance_preference: str | None = param(
        None,
        "EPP hint to write. Unset: the cstates check's (performance: with HWP (intel_pstate) or CPPC "
        "(amd-pstate active mode) the hardware picks the frequency and EPP biases it fully to speed), "
        f"written only to policies the check flags; set: written to every policy ({DOC_INTEL_PSTATE}"
        f"#energy-vs-performance-hints, {DOC_AMD_PSTATE}).",
    )
    turbo: bool = param(
        cstates_check.Params.turbo,
        "Turn turbo/boost on where the cstates check finds it off (intel_pstate/no_turbo=0 or "
        "cpufreq/boost=1): decoding and augmentation are single-thread bound; False leaves it as it "
        f"is ({DOC_INTEL_PSTATE}#no-turbo-attr, {DOC_CPUFREQ}#the-boost-file-in-sysfs).",
    )

    def __post_init__(self) -> None:
        for name in ("governor", "energy_performance_preference"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise UsageError(f"tuner {ID}: parameter {name!r} wants a name, got {value!r}")


Policy = cpufreq.Policy


@dataclass(frozen=True)
class Facts:
    policies: list[Policy]
    intel_pstate_status: str | None = None
    no_turbo: str | None = None
    boost: str | None = None
    problems: list[str] = field(default_factory=list)


def collect(host: Host) -> Facts:
    r = Reader(host)
    freq = cpufreq.collect(host)
    return Facts(
        policies=freq.policies,
        intel_pstate_status=r.value(f"{CPU_DIR}/intel_pstate/status"),
        no_turbo=r.value(NO_TURBO),
        boost=r.value(BOOST),
        problems=r.problems + freq.problems,
    )


def _cpus(policies: list[Policy]) -> str:
    return format_cpulist(c for p in policies for c in p.cpus) or "?"


@dataclass
class _Outcome:
    notes: list[str] = field(default_factory=list)
    declined: dict[str, str] = field(default_factory=dict)

    def decline(self, finding: str, why: str) -> None:
        self.notes.append(why)
        self.declined[finding] = "; ".join(filter(None, (self.declined.get(finding), why)))


def _judged(
    change: Change,
    todo: list[Policy],
    value: Callable[[Policy], str | None],
    accepted: Callable[[str], bool],
    finding: str,
    param_name: str,
    explicit: str | None,
) -> Change:
    """The change, naming the finding it answers (a policy the check flags) and the parameter
    that asked for it (a policy the check accepts, written only because the parameter was set)."""
    flagged = [pol for pol in todo if not accepted(value(pol) or "")]
    kept = sorted({value(pol) or "" for pol in todo if accepted(value(pol) or "")})
    answers = (finding,) if flagged else ()
    if not kept or explicit is None:
        return dataclasses.replace(change, answers=answers)
    why = f"{asked_why(param_name, explicit, cstates_check.ID, ' or '.join(kept))}; {change.why}"
    return dataclasses.replace(change, answers=answers, asked=param_name, why=why)


def _epp(f: Facts, p: Params, out: _Outcome) -> Change | None:
    judged = cstates_check.Params()  # what `nodeagent check` judges with
    explicit = p.energy_performance_preference
    want = explicit if explicit is not None else judged.energy_performance_preference
    with_epp = [pol for pol in f.policies if pol.epp is not None]
    if not with_epp:
        out.notes.append(
            "no energy_performance_preference in any policy (EPP exists only with intel_pstate/"
            "amd-pstate in active mode and HWP/CPPC on): no EPP change"
        )
        return None
    todo: list[Policy] = []
    pinned: list[Policy] = []
    lacking: list[Policy] = []
    for pol in with_epp:
        if pol.epp == want or (explicit is None and cstates_check.epp_accepted(pol.epp or "", judged)):
            continue
        if pol.epps is not None and want not in pol.epps:
            lacking.append(pol)
        elif pol.governor == "performance":
            # Under the performance governor both drivers pin EPP to 0 ("performance") themselves;
            # intel_pstate then rejects other values and amd-pstate any EPP write (EBUSY).
            pinned.append(pol)
        else:
            todo.append(pol)
    if lacking:
        out.decline(
            EPP_FINDING,
            f"energy_performance_available_preferences of CPUs {_cpus(lacking)} does not offer {want!r}: "
            "left as is",
        )
    if pinned:
        out.decline(
            EPP_FINDING,
            f"CPUs {_cpus(pinned)} already run the performance governor, which pins EPP itself: "
            "no EPP write there",
        )
    if not todo:
        if not lacking and not pinned:
            out.notes.append(f"energy_performance_preference is already {want} on every policy")
        return None
    why = (
        "bias HWP/CPPC frequency selection fully to speed; written before the governor because "
        "intel_pstate rejects a non-performance EPP under the performance governor and amd-pstate "
        f"rejects any EPP write then, so revert (newest first) restores the governor, then EPP "
        f"({DOC_INTEL_PSTATE}#energy-vs-performance-hints, {DOC_AMD_PSTATE})"
    )
    change = runtime_write(
        ID,
        f"energy_performance_preference of CPUs {_cpus(todo)}",
        why,
        {f"{pol.path}/energy_performance_preference": pol.epp for pol in todo},
        want,
    )
    return _judged(
        change,
        todo,
        lambda pol: pol.epp,
        lambda epp: cstates_check.epp_accepted(epp, judged),
        EPP_FINDING,
        f"{ID}.energy_performance_preference",
        explicit,
    )


def _governor(f: Facts, p: Params, out: _Outcome) -> Change | None:
    judged = cstates_check.Params()  # what `nodeagent check` judges with
    explicit = p.governor
    want = explicit if explicit is not None else judged.governor
    todo: list[Policy] = []
    unreadable: list[Policy] = []
    lacking: list[Policy] = []
    for pol in f.policies:
        if pol.governor is None:
            unreadable.append(pol)
        elif pol.governor == want or (
            explicit is None and cstates_check.governor_accepted(pol.governor, judged)
        ):
            continue
        elif pol.governors is None or want not in pol.governors:
            lacking.append(pol)
        else:
            todo.append(pol)
    if unreadable:
        out.notes.append(
            f"scaling_governor unreadable for CPUs {_cpus(unreadable)} (an inactive policy: its CPUs are "
            "offline): left as is"
        )
    if lacking:
        offered = sorted({g for pol in lacking for g in pol.governors or []})
        out.decline(
            GOVERNOR_FINDING,
            f"CPUs {_cpus(lacking)}: {want!r} is not in scaling_available_governors "
            f"({' '.join(offered) or 'unreadable'}; the governor module may not be loaded): left as is",
        )
    if not todo:
        if not unreadable and not lacking:
            out.notes.append(f"scaling_governor is already {want} on every policy")
        return None
    drivers = "/".join(sorted({pol.driver for pol in todo if pol.driver})) or "cpufreq"
    why = (
        f"{want} keeps each policy at its highest allowed frequency instead of ramping up late "
        f"({drivers}; {DOC_CPUFREQ}#performance, {DOC_INTEL_PSTATE}#active-mode)"
    )
    change = runtime_write(
        ID,
        f"scaling_governor of CPUs {_cpus(todo)}",
        why,
        {f"{pol.path}/scaling_governor": pol.governor for pol in todo},
        want,
    )
    return _judged(
        change,
        todo,
        lambda pol: pol.governor,
        lambda governor: cstates_check.governor_accepted(governor, judged),
        GOVERNOR_FINDING,
        f"{ID}.governor",
        explicit,
    )


def _turbo(f: Facts, p: Params, out: _Outcome) -> Change | None:
    """Turbo on where the cstates check finds it off. Its judgement is every turbo file's: on only
    when each well-formed one says so."""
    states = cstates_check.turbo_states(f.no_turbo, f.boost)
    flagged = bool(states) and not cstates_check.turbo_accepted(all(states), cstates_check.Params())
    if not p.turbo:
        if flagged:
            out.decline(TURBO_FINDING, "turbo left as is (turbo=false), off as the cstates check flags it")
        else:
            out.notes.append("turbo left as is (turbo=false)")
        return None
    # intel_pstate has its own switch and no cpufreq/boost; acpi-cpufreq and amd-pstate use boost.
    if f.no_turbo is not None:
        path, on, off, doc = NO_TURBO, "0", "1", f"{DOC_INTEL_PSTATE}#no-turbo-attr"
        target, current = "turbo (intel_pstate/no_turbo)", f.no_turbo
        extra = "; writing it fails when the BIOS has turbo disabled"
    elif f.boost is not None:
        path, on, off, doc = BOOST, "1", "0", f"{DOC_CPUFREQ}#the-boost-file-in-sysfs"
        target, current = "turbo (cpufreq/boost)", f.boost
        extra = ""
    else:
        out.notes.append(f"no turbo control exposed (no {NO_TURBO} or {BOOST}): turbo left to the BIOS")
        return None
    if current == on:
        note = f"turbo is already on ({path} = {current})"
        # no_turbo says on and cpufreq/boost off: which one rules is unclear, so neither is written.
        if flagged:
            out.decline(TURBO_FINDING, f"{note}, but {BOOST} = {f.boost}: left as is")
        else:
            out.notes.append(note)
        return None
    if current != off:
        out.notes.append(f"{path} holds {current!r}, neither {on} nor {off}: turbo left as is")
        return None
    why = f"turbo on: input decoding and augmentation are single-thread bound{extra} ({doc})"
    return dataclasses.replace(runtime_write(ID, target, why, {path: current}, on), answers=(TURBO_FINDING,))


def plan(f: Facts, p: Params) -> Plan:
    if not f.policies:
        return Plan(
            ID,
            notes=[
                f"no cpufreq policies under {CPUFREQ_DIR} (nor cpu*/cpufreq): frequency scaling is not "
                "exposed (a VM, or P-states left to the BIOS/firmware); nothing to plan"
            ],
        )
    out = _Outcome()
    # Order matters for EPP: see _epp's why. apply() writes in plan order, revert in reverse.
    changes = [c for c in (_epp(f, p, out), _governor(f, p, out), _turbo(f, p, out)) if c]
    out.notes += [f"unreadable: {problem}" for problem in f.problems]
    return Plan(ID, changes, out.notes, declined=out.declined)


TUNER = Tuner(
    id=ID,
    title="CPU frequency: performance governor, EPP and turbo",
    collect=collect,
    plan=plan,
    params=Params,
    paths=(
        *cpufreq.PATHS,
        f"{CPU_DIR}/intel_pstate/status",
        NO_TURBO,
        BOOST,
    ),
    # Policies as cpufreq/policyN (4.3+) or cpuN/cpufreq (older kernels, facts/cpufreq.py).
    writes=(
        *(f"{d}/{a}" for d in (f"{CPUFREQ_DIR}/policy*", f"{CPU_DIR}/cpu*/cpufreq") for a in _WRITTEN),
        NO_TURBO,
        BOOST,
    ),
)
