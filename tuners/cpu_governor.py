"""cpu-governor: the performance governor, the performance EPP hint and turbo, on every cpufreq policy.

A core that ramps up late, or is biased towards saving energy, runs the input pipeline and the
kernel launches that feed the GPUs slowly. Fixes what the `cstates` check reports on its
`governor` and `epp` subjects (and turns turbo on, which its `turbo` subject expects).

Sources: Documentation/admin-guide/pm/cpufreq.rst (policy directories, scaling_governor,
scaling_available_governors, the boost file), intel_pstate.rst (active mode, no_turbo, EPP) and
amd-pstate.rst (active/EPP mode, energy_performance_preference).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nodeagent.api.check import param
from nodeagent.api.tune import Change, Plan, Tuner, runtime_write
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


@dataclass(frozen=True)
class Params:
    governor: str = param(
        "performance",
        "The performance governor keeps each policy at its highest allowed frequency; ondemand/"
        f"schedutil/powersave ramp up late on bursty input pipelines ({DOC_CPUFREQ}#performance).",
    )
    energy_performance_preference: str = param(
        "performance",
        "With HWP (intel_pstate) or CPPC (amd-pstate active mode) the hardware picks the frequency "
        f"and EPP biases it; 'performance' biases it fully to speed ({DOC_INTEL_PSTATE}"
        f"#energy-vs-performance-hints, {DOC_AMD_PSTATE}).",
    )
    turbo: bool = param(
        True,
        "Turn turbo/boost on (intel_pstate/no_turbo=0 or cpufreq/boost=1): decoding and augmentation "
        f"are single-thread bound; False leaves it as it is ({DOC_INTEL_PSTATE}#no-turbo-attr, "
        f"{DOC_CPUFREQ}#the-boost-file-in-sysfs).",
    )


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


def _epp(f: Facts, p: Params, notes: list[str]) -> Change | None:
    want = p.energy_performance_preference
    with_epp = [pol for pol in f.policies if pol.epp is not None]
    if not with_epp:
        notes.append(
            "no energy_performance_preference in any policy (EPP exists only with intel_pstate/"
            "amd-pstate in active mode and HWP/CPPC on): no EPP change"
        )
        return None
    todo: list[Policy] = []
    pinned: list[Policy] = []
    lacking: list[Policy] = []
    for pol in with_epp:
        if pol.epp == want:
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
        notes.append(
            f"energy_performance_available_preferences of CPUs {_cpus(lacking)} does not offer {want!r}: "
            "left as is"
        )
    if pinned:
        notes.append(
            f"CPUs {_cpus(pinned)} already run the performance governor, which pins EPP itself: "
            "no EPP write there"
        )
    if not todo:
        if not lacking and not pinned:
            notes.append(f"energy_performance_preference is already {want} on every policy")
        return None
    why = (
        "bias HWP/CPPC frequency selection fully to speed; written before the governor because "
        "intel_pstate rejects a non-performance EPP under the performance governor and amd-pstate "
        f"rejects any EPP write then, so revert (newest first) restores the governor, then EPP "
        f"({DOC_INTEL_PSTATE}#energy-vs-performance-hints, {DOC_AMD_PSTATE})"
    )
    return runtime_write(
        ID,
        f"energy_performance_preference of CPUs {_cpus(todo)}",
        why,
        {f"{pol.path}/energy_performance_preference": pol.epp for pol in todo},
        want,
    )


def _governor(f: Facts, p: Params, notes: list[str]) -> Change | None:
    want = p.governor
    todo: list[Policy] = []
    unreadable: list[Policy] = []
    lacking: list[Policy] = []
    for pol in f.policies:
        if pol.governor is None:
            unreadable.append(pol)
        elif pol.governor == want:
            continue
        elif pol.governors is None or want not in pol.governors:
            lacking.append(pol)
        else:
            todo.append(pol)
    if unreadable:
        notes.append(
            f"scaling_governor unreadable for CPUs {_cpus(unreadable)} (an inactive policy: its CPUs are "
            "offline): left as is"
        )
    if lacking:
        offered = sorted({g for pol in lacking for g in pol.governors or []})
        notes.append(
            f"CPUs {_cpus(lacking)}: {want!r} is not in scaling_available_governors "
            f"({' '.join(offered) or 'unreadable'}; the governor module may not be loaded): left as is"
        )
    if not todo:
        if not unreadable and not lacking:
            notes.append(f"scaling_governor is already {want} on every policy")
        return None
    drivers = "/".join(sorted({pol.driver for pol in todo if pol.driver})) or "cpufreq"
    why = (
        f"{want} keeps each policy at its highest allowed frequency instead of ramping up late "
        f"({drivers}; {DOC_CPUFREQ}#performance, {DOC_INTEL_PSTATE}#active-mode)"
    )
    return runtime_write(
        ID,
        f"scaling_governor of CPUs {_cpus(todo)}",
        why,
        {f"{pol.path}/scaling_governor": pol.governor for pol in todo},
        want,
    )


def _turbo(f: Facts, p: Params, notes: list[str]) -> Change | None:
    if not p.turbo:
        notes.append("turbo left as is (turbo=false)")
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
        notes.append(f"no turbo control exposed (no {NO_TURBO} or {BOOST}): turbo left to the BIOS")
        return None
    if current == on:
        notes.append(f"turbo is already on ({path} = {current})")
        return None
    if current != off:
        notes.append(f"{path} holds {current!r}, neither {on} nor {off}: turbo left as is")
        return None
    why = f"turbo on: input decoding and augmentation are single-thread bound{extra} ({doc})"
    return runtime_write(ID, target, why, {path: current}, on)


def plan(f: Facts, p: Params) -> Plan:
    if not f.policies:
        return Plan(
            ID,
            notes=[
                f"no cpufreq policies under {CPUFREQ_DIR} (nor cpu*/cpufreq): frequency scaling is not "
                "exposed (a VM, or P-states left to the BIOS/firmware); nothing to plan"
            ],
        )
    notes: list[str] = []
    # Order matters for EPP: see _epp's why. apply() writes in plan order, revert in reverse.
    changes = [c for c in (_epp(f, p, notes), _governor(f, p, notes), _turbo(f, p, notes)) if c]
    notes += [f"unreadable: {problem}" for problem in f.problems]
    return Plan(ID, changes, notes)


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
