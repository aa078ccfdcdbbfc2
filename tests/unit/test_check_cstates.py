"""cstates: recorded hwloc trees, hand-built facts for every branch, and corrupt or partial trees."""

from __future__ import annotations

import glob
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.checks import cstates
from nodeagent.checks.cstates import CPU_DIR, CPUFREQ_DIR, CPUIDLE_DIR, Facts, FreqPolicy, IdleState, Params
from nodeagent.core.finding import Finding, Status
from nodeagent.facts import system
from nodeagent.host import LocalHost
from tests.support.helpers import FIXTURE_TREES, fixture_host, make_tree

P = Params()


def by_subject(findings: list[Finding], subject: str) -> Finding:
    hits = [f for f in findings if f.subject == subject]
    assert len(hits) == 1, [(f.subject, f.summary) for f in findings]
    return hits[0]


def subjects(findings: list[Finding]) -> list[str]:
    return [f.subject for f in findings]


# -- recorded trees ------------------------------------------------------------------------------


def test_2arm_idle_states_and_ondemand() -> None:
    facts = cstates.collect(fixture_host("2arm-2c"))
    assert facts.idle_driver == "cpuidle_driver"
    assert facts.idle_governor == "menu"
    assert sorted(facts.idle_states) == [0, 1]
    cpu0 = {s.name: s for s in facts.idle_states[0]}
    assert [s.name for s in facts.idle_states[0]] == ["C0", "C1", "C2", "C3", "C4", "C5", "C6"]
    assert cpu0["C5"].latency_us == 8800 and cpu0["C5"].desc == "ApSleep, UL PLL off"
    assert cpu0["C6"].latency_us == 8500
    assert cpu0["C1"].latency_us == 0
    assert cpu0["C6"].disabled is None  # this 2.6-era kernel has no `disable` files
    # One policy shared by both CPUs (related_cpus "0 1"); cpu1/cpufreq was not recorded.
    assert [(p.cpus, p.driver, p.governor, p.epp) for p in facts.policies] == [
        ([0, 1], "U8500", "ondemand", None)
    ]

    findings = cstates.evaluate(facts, P)
    idle = by_subject(findings, "idle-states")
    assert idle.status is Status.WARN and idle.fix == "c-states"
    assert "C4 (800 us)" in idle.summary and "C5 (8800 us)" in idle.summary and "CPUs 0-1" in idle.summary
    assert "C1 (0 us)" not in idle.summary
    gov = by_subject(findings, "governor")
    assert gov.status is Status.WARN and gov.fix == "cpu-governor"
    assert "ondemand on CPUs 0-1" in gov.summary and "U8500" in gov.summary
    assert gov.evidence[f"{CPU_DIR}/cpu0/cpufreq/scaling_governor"] == "ondemand"
    assert by_subject(findings, "epp").status is Status.SKIPPED
    assert by_subject(findings, "turbo").status is Status.SKIPPED
    assert by_subject(findings, "boot").status is Status.SKIPPED  # no /proc/cmdline recorded


def test_hybrid_intel_pstate_powersave_balance_performance() -> None:
    facts = cstates.collect(fixture_host("20em64t-hybrid-1p6c2t+2ca4co1t"))
    assert not facts.cpuidle_present and facts.idle_states == {}
    assert len(facts.policies) == 20  # policy0..19 and their cpuN/cpufreq links, deduplicated
    assert [p.cpus for p in facts.policies] == [[c] for c in range(20)]
    assert {(p.driver, p.governor, p.epp) for p in facts.policies} == {
        ("intel_pstate", "powersave", "balance_performance")
    }
    assert facts.intel_pstate_status == "active"
    assert facts.intel_no_turbo == "0"
    assert facts.boost is None and facts.amd_pstate_status is None
    assert facts.cmdline is not None and "vmlinuz-6.1.0-13-amd64" in facts.cmdline

    findings = cstates.evaluate(facts, P)
    driver = by_subject(findings, "cpuidle")
    assert driver.status is Status.OK and "disabled in the BIOS" in driver.summary
    assert "idle-states" not in subjects(findings)
    gov = by_subject(findings, "governor")
    assert gov.status is Status.WARN
    assert "powersave on CPUs 0-19" in gov.summary and "intel_pstate active" in gov.summary
    assert gov.evidence[f"{CPU_DIR}/intel_pstate/status"] == "active"
    epp = by_subject(findings, "epp")
    assert epp.status is Status.WARN and "balance_performance on CPUs 0-19" in epp.summary
    turbo = by_subject(findings, "turbo")
    assert turbo.status is Status.OK and turbo.evidence == {f"{CPU_DIR}/intel_pstate/no_turbo": "0"}
    assert by_subject(findings, "boot").status is Status.OK


def test_40intel64_intel_idle_deep_states_no_cpufreq() -> None:
    facts = cstates.collect(fixture_host("40intel64-2g2n4c+pcilocality"))
    assert facts.idle_driver == "intel_idle"
    assert len(facts.idle_states) == 40
    assert [(s.name, s.latency_us) for s in facts.idle_states[0]] == [
        ("C0", 0),
        ("NHM-C1", 3),
        ("NHM-C3", 20),
        ("NHM-C6", 200),
    ]
    assert facts.policies == []
    findings = cstates.evaluate(facts, P)
    idle = by_subject(findings, "idle-states")
    assert idle.status is Status.WARN
    assert "NHM-C3 (20 us), NHM-C6 (200 us) on CPUs 0-39" in idle.summary
    assert "intel_idle.max_cstate=1" in idle.remediation
    freq = by_subject(findings, "frequency")
    assert freq.status is Status.SKIPPED and CPUFREQ_DIR in freq.evidence


def test_32em64t_acpi_idle_and_performance_governor() -> None:
    facts = cstates.collect(fixture_host("32em64t-2n8c+dax+nvme+mic+dimms"))
    assert facts.idle_driver == "acpi_idle"
    assert [(s.name, s.latency_us) for s in facts.idle_states[15]] == [
        ("C0", 0),
        ("C1", 3),
        ("C2", 93),
        ("C3", 93),
    ]
    assert len(facts.policies) == 16
    assert {(p.driver, p.governor) for p in facts.policies} == {("acpi-cpufreq", "performance")}
    findings = cstates.evaluate(facts, P)
    gov = by_subject(findings, "governor")
    assert gov.status is Status.OK and "performance on all 16 CPUs" in gov.summary
    idle = by_subject(findings, "idle-states")
    assert idle.status is Status.WARN and "processor.max_cstate=1" in idle.remediation
    # A looser latency limit accepts C2/C3 at 93 us.
    relaxed = by_subject(cstates.evaluate(facts, Params(max_exit_latency_us=100)), "idle-states")
    assert relaxed.status is Status.OK


def test_dangling_cpufreq_links_are_no_cpufreq() -> None:
    # nvidiagpunumanodes recorded cpuN/cpufreq -> ../cpufreq/policyN links without their targets.
    facts = cstates.collect(fixture_host("nvidiagpunumanodes"))
    assert facts.policies == []
    findings = cstates.evaluate(facts, P)
    assert by_subject(findings, "frequency").status is Status.SKIPPED
    assert by_subject(findings, "boot").status is Status.OK


@pytest.mark.parametrize("name", FIXTURE_TREES)
def test_every_tree_decides(name: str) -> None:
    findings = cstates.CHECK.run(fixture_host(name), P)
    assert findings
    assert all(f.check_id == "cstates" and f.summary for f in findings)
    assert not [f for f in findings if f.status is Status.UNKNOWN]
    assert by_subject(findings, "cpuidle").status is Status.OK


def test_this_machine() -> None:
    findings = cstates.CHECK.run(LocalHost(), P)
    assert not [f for f in findings if f.status is Status.UNKNOWN]
    assert by_subject(findings, "cpuidle")
    if not glob.glob(f"{CPUFREQ_DIR}/policy*/scaling_governor") and not glob.glob(
        f"{CPU_DIR}/cpu[0-9]*/cpufreq/scaling_governor"
    ):
        assert by_subject(findings, "frequency").status is Status.SKIPPED


# -- hand-built facts ------------------------------------------------------------------------------


def state(index: int, name: str, latency: int | None, disabled: bool | None = False) -> IdleState:
    return IdleState(index, name, None, latency, disabled)


INTEL = [state(0, "POLL", 0), state(1, "C1", 2), state(2, "C1E", 10), state(3, "C6", 170)]


def policy(cpu: int, governor: str = "performance", epp: str | None = "performance") -> FreqPolicy:
    return FreqPolicy(f"{CPUFREQ_DIR}/policy{cpu}", [cpu], "intel_pstate", governor, epp)


def facts(**kw: object) -> Facts:
    base = Facts(
        cpuidle_present=True,
        idle_driver="intel_idle",
        idle_governor="menu",
        idle_states=dict.fromkeys(range(4), INTEL),
        cmdline="BOOT_IMAGE=/vmlinuz ro quiet",
        policies=[policy(c) for c in range(4)],
        intel_pstate_status="active",
        intel_no_turbo="0",
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def test_tuned_node_is_all_ok() -> None:
    tuned = [state(0, "POLL", 0), state(1, "C1", 2), state(2, "C1E", 10), state(3, "C6", 170, True)]
    findings = cstates.evaluate(facts(idle_states=dict.fromkeys(range(4), tuned)), P)
    assert {f.status for f in findings} == {Status.OK}
    idle = by_subject(findings, "idle-states")
    assert "C6 (170 us) disabled" in next(iter(idle.evidence.values()))
    assert "enabled: POLL (0 us), C1 (2 us), C1E (10 us)" in idle.summary


def test_deep_states_on_some_cpus_only() -> None:
    limited = [state(0, "POLL", 0), state(1, "C1", 2), state(2, "C1E", 10), state(3, "C6", 170, True)]
    f = facts(idle_states={0: INTEL, 1: INTEL, 2: limited, 3: limited})
    idle = by_subject(cstates.evaluate(f, P), "idle-states")
    assert idle.status is Status.WARN and idle.fix == "c-states"
    assert "C6 (170 us) on CPUs 0-1" in idle.summary
    assert "CPUs 2-3 have them limited" in idle.summary
    assert "differ across CPUs" in idle.summary
    assert len(idle.evidence) == 2  # one entry per distinct state table


def test_unknown_latency_is_not_counted_as_deep() -> None:
    f = facts(idle_states={0: [state(0, "POLL", 0), state(1, "C6", None)]})
    assert by_subject(cstates.evaluate(f, P), "idle-states").status is Status.OK


def test_driver_none_means_bios_disabled() -> None:
    findings = cstates.evaluate(facts(idle_driver="none", idle_states={}), P)
    driver = by_subject(findings, "cpuidle")
    assert driver.status is Status.OK and "disabled in the BIOS" in driver.summary
    assert driver.evidence[f"{CPUIDLE_DIR}/current_driver"] == "none"
    assert "idle-states" not in subjects(findings)


def test_unreadable_driver_and_missing_states_are_skipped() -> None:
    findings = cstates.evaluate(facts(idle_driver=None, idle_states={}), P)
    assert by_subject(findings, "cpuidle").status is Status.SKIPPED
    assert by_subject(findings, "idle-states").status is Status.SKIPPED


def test_idle_poll_warns_and_halt_is_noted() -> None:
    poll = by_subject(cstates.evaluate(facts(cmdline="ro idle=poll"), P), "boot")
    assert poll.status is Status.WARN and poll.fix == "c-states"
    assert poll.evidence == {"/proc/cmdline idle": "poll"}
    halt = by_subject(cstates.evaluate(facts(cmdline="ro idle=halt"), P), "boot")
    assert halt.status is Status.OK and "HLT" in halt.summary
    limits = by_subject(
        cstates.evaluate(facts(cmdline="ro intel_idle.max_cstate=1 processor.max_cstate=1"), P), "boot"
    )
    assert limits.status is Status.OK
    assert limits.summary == "kernel command line sets intel_idle.max_cstate=1 processor.max_cstate=1"
    idle = by_subject(cstates.evaluate(facts(cmdline="ro intel_idle.max_cstate=1"), P), "idle-states")
    assert idle.evidence["/proc/cmdline intel_idle.max_cstate"] == "1"


def test_missing_cmdline_is_skipped() -> None:
    boot = by_subject(cstates.evaluate(facts(cmdline=None), P), "boot")
    assert boot.status is Status.SKIPPED and boot.evidence == {"/proc/cmdline": "(absent)"}


def test_mixed_governors() -> None:
    f = facts(policies=[policy(0), policy(1), policy(2, "powersave"), policy(3, "schedutil")])
    gov = by_subject(cstates.evaluate(f, P), "governor")
    assert gov.status is Status.WARN and gov.fix == "cpu-governor"
    assert gov.summary.startswith(
        "mixed governors: performance on CPUs 0-1; powersave on CPUs 2; schedutil on CPUs 3"
    )
    assert "cpupower frequency-set -g performance" in gov.remediation


def test_unreadable_governor_is_skipped() -> None:
    f = facts(policies=[FreqPolicy(f"{CPUFREQ_DIR}/policy0", [0], "acpi-cpufreq", None, None)])
    assert by_subject(cstates.evaluate(f, P), "governor").status is Status.SKIPPED


def test_epp_not_performance() -> None:
    f = facts(policies=[policy(0), policy(1, epp="balance_power")])
    epp = by_subject(cstates.evaluate(f, P), "epp")
    assert epp.status is Status.WARN and epp.fix == "cpu-governor"
    assert "balance_power on CPUs 1" in epp.summary
    assert epp.evidence[f"{CPUFREQ_DIR}/policy1/energy_performance_preference"] == "balance_power"


def test_epp_absent_is_skipped() -> None:
    f = facts(policies=[policy(0, epp=None)])
    assert by_subject(cstates.evaluate(f, P), "epp").status is Status.SKIPPED


def test_turbo_off() -> None:
    off = by_subject(cstates.evaluate(facts(intel_no_turbo="1"), P), "turbo")
    assert off.status is Status.WARN and "turbo/boost off" in off.summary
    assert "no_turbo" in off.remediation
    boost = by_subject(cstates.evaluate(facts(intel_no_turbo=None, boost="0"), P), "turbo")
    assert boost.status is Status.WARN
    assert boost.evidence == {f"{CPUFREQ_DIR}/boost": "0"}
    # A node pinned to base clocks on purpose (reproducible benchmarks) can say so.
    on = by_subject(cstates.evaluate(facts(), Params(turbo=False)), "turbo")
    assert on.status is Status.WARN and "expected off" in on.summary


def test_turbo_garbage_and_absence() -> None:
    bad = by_subject(cstates.evaluate(facts(intel_no_turbo="yes"), P), "turbo")
    assert bad.status is Status.WARN and "unreadable" in bad.summary
    none = by_subject(cstates.evaluate(facts(intel_no_turbo=None, boost=None), P), "turbo")
    assert none.status is Status.SKIPPED


def test_no_cpufreq_skips_frequency_part_once() -> None:
    findings = cstates.evaluate(facts(policies=[], intel_pstate_status=None, intel_no_turbo=None), P)
    freq = by_subject(findings, "frequency")
    assert freq.status is Status.SKIPPED and freq.evidence == {CPUFREQ_DIR: "(no policies)"}
    assert not {"governor", "epp", "turbo"} & set(subjects(findings))


def test_problems_are_reported() -> None:
    f = facts(problems=[f"{CPU_DIR}/cpu0/cpuidle/state3/latency: unparsable value 'abc'"])
    problem = by_subject(cstates.evaluate(f, P), "consistency")
    assert problem.status is Status.WARN
    assert problem.evidence == {f"{CPU_DIR}/cpu0/cpuidle/state3/latency": "unparsable value 'abc'"}


# -- collect on hand-built trees --------------------------------------------------------------------


def idle_files(cpu: int, states: list[tuple[str, str, str | None]]) -> dict[str, str]:
    out = {}
    for i, (name, latency, disable) in enumerate(states):
        base = f"{CPU_DIR}/cpu{cpu}/cpuidle/state{i}"
        out[f"{base}/name"] = name + "\n"
        out[f"{base}/desc"] = f"{name} desc\n"
        out[f"{base}/latency"] = latency
        if disable is not None:
            out[f"{base}/disable"] = disable
    return out


def test_collect_corrupt_and_nul_values(tmp_path: Path) -> None:
    files = {
        f"{CPUIDLE_DIR}/current_driver": "intel_idle\n",
        f"{CPUIDLE_DIR}/current_governor": "menu\x00\x00",
        **idle_files(0, [("POLL", "0\n", "0\n"), ("C6", "133\x00", "0\n")]),
        **idle_files(1, [("POLL", "0\n", "0\n"), ("C6", "garbage\n", "1\n")]),
        f"{CPU_DIR}/cpu2/online": "1\n",
    }
    f = cstates.collect(make_tree(tmp_path, files))
    assert f.idle_governor == "menu"
    assert f.idle_states[0][1].latency_us == 133
    assert f.idle_states[1][1].latency_us is None and f.idle_states[1][1].disabled is True
    assert 2 not in f.idle_states
    assert f.problems == [f"{CPU_DIR}/cpu1/cpuidle/state1/latency: unparsable value 'garbage'"]
    findings = cstates.evaluate(f, P)
    assert by_subject(findings, "consistency").status is Status.WARN
    idle = by_subject(findings, "idle-states")
    assert idle.status is Status.WARN and "C6 (133 us) on CPUs 0" in idle.summary


def test_collect_missing_disable_means_enabled(tmp_path: Path) -> None:
    files = {
        f"{CPUIDLE_DIR}/current_driver": "acpi_idle\n",
        **idle_files(0, [("C1", "1\n", None), ("C3", "57\n", None)]),
    }
    f = cstates.collect(make_tree(tmp_path, files))
    assert [s.disabled for s in f.idle_states[0]] == [None, None]
    assert by_subject(cstates.evaluate(f, P), "idle-states").status is Status.WARN


def test_collect_policy_links_are_deduplicated(tmp_path: Path) -> None:
    files: dict[str, str] = {}
    for c in range(2):
        base = f"{CPUFREQ_DIR}/policy{c}"
        files |= {
            f"{base}/scaling_driver": "amd-pstate-epp\n",
            f"{base}/scaling_governor": "performance\n",
            f"{base}/energy_performance_preference": "performance\n",
            f"{base}/related_cpus": f"{c}\n",
        }
        files[f"{CPU_DIR}/cpu{c}/online"] = "1\n"
    files[f"{CPU_DIR}/amd_pstate/status"] = "active\n"
    files[f"{CPUFREQ_DIR}/boost"] = "1\n"
    links = {f"{CPU_DIR}/cpu{c}/cpufreq": f"../cpufreq/policy{c}" for c in range(2)}
    f = cstates.collect(make_tree(tmp_path, files, links))
    assert [(p.path, p.cpus) for p in f.policies] == [
        (f"{CPUFREQ_DIR}/policy0", [0]),
        (f"{CPUFREQ_DIR}/policy1", [1]),
    ]
    assert f.amd_pstate_status == "active"
    findings = cstates.evaluate(f, P)
    assert "amd_pstate active" in by_subject(findings, "governor").summary
    assert by_subject(findings, "epp").status is Status.OK
    assert by_subject(findings, "turbo").status is Status.OK


def test_collect_old_layout_shared_policy(tmp_path: Path) -> None:
    # Kernels before 4.3: the policy owner has cpuN/cpufreq as a folder, the others link to it.
    files = {
        f"{CPU_DIR}/cpu0/cpufreq/scaling_driver": "acpi-cpufreq\n",
        f"{CPU_DIR}/cpu0/cpufreq/scaling_governor": "ondemand\n",
        f"{CPU_DIR}/cpu0/cpufreq/affected_cpus": "0 1\n",
    }
    f = cstates.collect(make_tree(tmp_path, files, {f"{CPU_DIR}/cpu1/cpufreq": "../cpu0/cpufreq"}))
    assert [(p.cpus, p.governor) for p in f.policies] == [([0, 1], "ondemand")]


def test_collect_garbage_related_cpus_falls_back_to_the_path(tmp_path: Path) -> None:
    files = {
        f"{CPUFREQ_DIR}/policy3/scaling_governor": "powersave\n",
        f"{CPUFREQ_DIR}/policy3/related_cpus": "x y\n",
    }
    f = cstates.collect(make_tree(tmp_path, files))
    assert [p.cpus for p in f.policies] == [[3]]
    assert f.problems == [f"{CPUFREQ_DIR}/policy3/related_cpus: unparsable value 'x y'"]


def test_collect_empty_tree(tmp_path: Path) -> None:
    """A recording without /sys says nothing about C-states: not "disabled in the BIOS"."""
    findings = cstates.CHECK.run(make_tree(tmp_path, {}), P)
    assert [(f.subject, f.status) for f in findings] == [("cpuidle", Status.SKIPPED)]
    assert "BIOS" not in findings[0].summary


def test_virtual_machine_points_at_the_hypervisor(tmp_path: Path) -> None:
    host = make_tree(
        tmp_path,
        {
            f"{CPU_DIR}/online": "0-1\n",
            f"{CPU_DIR}/cpu0/cpufreq/scaling_governor": "powersave\n",
            "/sys/class/dmi/id/sys_vendor": "QEMU\n",
            "/sys/class/dmi/id/product_name": "Standard PC (Q35 + ICH9, 2009)\n",
        },
    )
    found = {f.subject: f for f in cstates.CHECK.run(host, P)}
    assert found["cpuidle"].status is Status.OK
    assert "virtual machine" in found["cpuidle"].summary
    assert found["cpuidle"].evidence["virtual machine"] == "/sys/class/dmi/id/sys_vendor: QEMU"
    assert "hypervisor" in found["governor"].remediation and "BIOS" not in found["governor"].remediation


def test_declared_paths_cover_what_collect_reads() -> None:
    paths = cstates.CHECK.paths
    assert f"{CPU_DIR}/cpu[0-9]*/cpuidle/state*/latency" in paths
    assert f"{CPUFREQ_DIR}/policy*/energy_performance_preference" in paths
    assert f"{CPU_DIR}/intel_pstate/no_turbo" in paths and f"{CPU_DIR}/amd_pstate/status" in paths
    assert "/proc/cmdline" in paths


@given(st.text(alphabet=st.sampled_from(list("ab=_-.,:/ \t\r\n\x0b\x0c\xa0\"'\\#")), max_size=60))
@settings(max_examples=400, deadline=None)
def test_the_kernel_command_line_splits_as_shlex_does(cmdline: str) -> None:
    """The fast split of a line without quotes is shlex's, and any line's words are shlex's
    whenever shlex can split it (its fallback, on an unbalanced quote, splits at white space)."""
    try:
        want = shlex.split(cmdline)
    except ValueError:
        want = cmdline.split()
    assert list(system._words(cmdline)) == want
