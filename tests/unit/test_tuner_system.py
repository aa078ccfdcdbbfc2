"""Plans of the system tuners (cpu-governor, c-states, hugepages, thp) on recorded hwloc trees, on
hand-built facts for every branch, and on hand-built trees for collect's edge cases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nodeagent.api.tune import Change, Plan, Scope, Write, plan_documents, runtime_write
from nodeagent.checks import cstates as cstates_check
from nodeagent.checks.cstates import IdleState
from nodeagent.core.errors import UsageError
from nodeagent.host import Host
from nodeagent.tuners import c_states, cpu_governor, hugepages, thp
from tests.support.helpers import FIXTURE_TREES, fixture_host, make_tree

CPU = "/sys/devices/system/cpu"
NODE = "/sys/devices/system/node"
THP = "/sys/kernel/mm/transparent_hugepage"
SYSTEM_TUNERS = (cpu_governor.TUNER, c_states.TUNER, hugepages.TUNER, thp.TUNER)


def only(plan: Plan, target_prefix: str) -> Change:
    hits = [c for c in plan.changes if c.target.startswith(target_prefix)]
    assert len(hits) == 1, [(c.target, c.before, c.after) for c in plan.changes]
    return hits[0]


def notes_text(plan: Plan) -> str:
    return " | ".join(plan.notes)


# -- recorded trees ------------------------------------------------------------------------------


def test_cpu_governor_on_intel_pstate_hybrid() -> None:
    """20 policies of intel_pstate (active), powersave with EPP balance_performance, turbo on."""
    plan = cpu_governor.TUNER.run_plan(fixture_host("20em64t-hybrid-1p6c2t+2ca4co1t"), cpu_governor.Params())
    assert [c.target for c in plan.changes] == [
        "energy_performance_preference of CPUs 0-19",
        "scaling_governor of CPUs 0-19",
    ]  # EPP first: revert (newest first) then restores the governor before EPP
    epp, gov = plan.changes
    assert all(c.scope is Scope.RUNTIME for c in plan.changes)
    assert (epp.before, epp.after, gov.before, gov.after) == (
        "balance_performance",
        "performance",
        "powersave",
        "performance",
    )
    assert [w.path for w in gov.writes] == [
        f"{CPU}/cpufreq/policy{i}/scaling_governor" for i in sorted(range(20), key=str)
    ]
    assert len(epp.writes) == 20
    assert {w.before for w in epp.writes} == {"balance_performance"}
    assert "intel_pstate" in gov.why and "cpufreq.html" in gov.why
    assert "intel_pstate.html" in epp.why and "amd-pstate.html" in epp.why
    assert "turbo is already on" in notes_text(plan)


def test_cpu_governor_on_old_arm_kernel_without_policy_folders() -> None:
    """2arm-2c: a 2.6-era kernel, only cpu0/cpufreq (shared by CPUs 0-1), ondemand, no EPP, no turbo."""
    plan = cpu_governor.TUNER.run_plan(fixture_host("2arm-2c"), cpu_governor.Params())
    gov = only(plan, "scaling_governor")
    assert gov.target == "scaling_governor of CPUs 0-1"
    assert gov.writes == (Write(f"{CPU}/cpu0/cpufreq/scaling_governor", "ondemand", "performance"),)
    assert "U8500" in gov.why
    assert "no energy_performance_preference" in notes_text(plan)
    assert "no turbo control exposed" in notes_text(plan)


def test_cpu_governor_already_performance_and_no_cpufreq() -> None:
    done = cpu_governor.TUNER.run_plan(fixture_host("32em64t-2n8c+dax+nvme+mic+dimms"), cpu_governor.Params())
    assert done.changes == [] and "already performance on every policy" in notes_text(done)
    none = cpu_governor.TUNER.run_plan(fixture_host("40intel64-2g2n4c+pcilocality"), cpu_governor.Params())
    assert none.changes == [] and none.notes[0].startswith("no cpufreq policies under")
    # nvidiagpunumanodes: cpu0/cpufreq is a link to a policy folder that was not recorded.
    dangling = cpu_governor.TUNER.run_plan(fixture_host("nvidiagpunumanodes"), cpu_governor.Params())
    assert dangling.changes == [] and "nothing to plan" in notes_text(dangling)


def test_c_states_on_intel_idle_tree() -> None:
    """40intel64: intel_idle with NHM-C3 (20 us) and NHM-C6 (200 us) on all 40 CPUs."""
    plan = c_states.TUNER.run_plan(fixture_host("40intel64-2g2n4c+pcilocality"), c_states.Params())
    held, boot = plan.changes
    assert held.scope is Scope.PROCESS
    assert held.profile_key == "launcher.cpu_dma_latency_us" and held.value == 10
    assert held.before == "no limit: NHM-C3 (20 us), NHM-C6 (200 us) on CPUs 0-39"
    assert held.after == "10 us"
    assert (
        "held through /dev/cpu_dma_latency only while `nodeagent exec` runs the job "
        "(PM QoS: the limit lasts as long as the file stays open)"
    ) in held.why
    assert "pm_qos_interface" in held.why
    assert boot.scope is Scope.BOOT and boot.writes == ()
    assert boot.after == "intel_idle.max_cstate=1"
    assert boot.before == "(/proc/cmdline not readable)"  # hwloc did not record it
    assert "grubby --update-kernel=ALL --args=intel_idle.max_cstate=1" in boot.why
    assert "GRUB_CMDLINE_LINUX" in boot.why and "intel_idle.html" in boot.why


def test_c_states_on_acpi_idle_and_unknown_driver() -> None:
    acpi = c_states.TUNER.run_plan(fixture_host("32em64t-2n8c+dax+nvme+mic+dimms"), c_states.Params())
    assert acpi.changes[0].before == "no limit: C2 (93 us), C3 (93 us) on CPUs 0-15"
    assert acpi.changes[1].after == "processor.max_cstate=1"
    arm = c_states.TUNER.run_plan(fixture_host("2arm-2c"), c_states.Params())
    assert [c.scope for c in arm.changes] == [Scope.PROCESS]
    assert "cpuidle_driver" in notes_text(arm) and "no boot advice" in notes_text(arm)
    assert "C5 (8800 us)" in arm.changes[0].before


def test_c_states_nothing_without_cpuidle() -> None:
    plan = c_states.TUNER.run_plan(fixture_host("20em64t-hybrid-1p6c2t+2ca4co1t"), c_states.Params())
    assert plan.changes == [] and "no cpuidle interface" in plan.notes[0]


def test_hugepages_per_node_on_four_node_tree() -> None:
    host = fixture_host("40intel64-2g2n4c+pcilocality")
    assert hugepages.TUNER.run_plan(host, hugepages.Params()).changes == []
    plan = hugepages.TUNER.run_plan(host, hugepages.Params(pages_per_node=1024))
    change = only(plan, "2 MiB huge pages")
    assert change.target == "2 MiB huge pages on nodes 0-3"
    assert [w.path for w in change.writes] == [
        f"{NODE}/node{n}/hugepages/hugepages-2048kB/nr_hugepages" for n in range(4)
    ]
    assert {(w.before, w.after) for w in change.writes} == {("0", "1024")}
    assert "2048 MiB per node" in change.why
    # Node 0 has 134204252 kB = 131059 MiB: 32768 x 2 MiB (64 GiB) is more than half of it.
    refused = hugepages.TUNER.run_plan(host, hugepages.Params(pages_per_node=32768))
    assert refused.changes == []
    assert "node 0: 32768 x 2 MiB = 65536 MiB is more than 0.5 of its 131059 MiB" in notes_text(refused)
    # Node 1 has 131072 MiB, exactly twice the request, which max_fraction 0.5 allows.
    assert "node 1:" not in notes_text(refused)


def test_hugepages_skips_gpu_memory_nodes_and_sizes() -> None:
    host = fixture_host("nvidiagpunumanodes")
    plan = hugepages.TUNER.run_plan(host, hugepages.Params(size="1GB", pages_per_node=2))
    change = only(plan, "1 GiB huge pages")
    assert change.target == "1 GiB huge pages on nodes 0,8"
    assert "GPU memory nodes 250, 251, 252, 253, 254, 255 are left out" in notes_text(plan)
    missing = hugepages.TUNER.run_plan(
        fixture_host("40intel64-2g2n4c+pcilocality"), hugepages.Params(size="1GB", pages_per_node=2)
    )
    assert missing.changes == [] and "node 0 has no 1 GiB pool (sizes offered: 2 MiB)" in notes_text(missing)


def test_hugepages_global_pool_without_numa_folders() -> None:
    plan = hugepages.TUNER.run_plan(
        fixture_host("2i386-2t-hugepagesizecount"), hugepages.Params(pages_per_node=4)
    )
    change = only(plan, "2 MiB huge pages")
    assert change.target == "2 MiB huge pages on the machine"
    assert change.writes == (Write("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "1", "4"),)


@pytest.mark.parametrize("name", FIXTURE_TREES)
def test_every_tree_plans_without_raising(name: str) -> None:
    host = fixture_host(name)
    for tuner in SYSTEM_TUNERS:
        for params in (tuner.make_params(), *_extra_params(tuner.id)):
            plan = tuner.run_plan(host, params)
            json.dumps(plan_documents([plan]))  # the JSON plan is plain data
            assert plan.changes or plan.notes, f"{tuner.id} on {name}: no change and no note saying why"
            for c in plan.changes:
                assert c.tuner == tuner.id and c.why and "https://" in c.why
                if c.scope is Scope.RUNTIME:
                    assert c.writes and all(w.before is not None for w in c.writes)


def _extra_params(tuner_id: str) -> list[Any]:
    if tuner_id == "hugepages":
        return [hugepages.Params(pages_per_node=8), hugepages.Params(size="1GB", pages_per_node=1)]
    return []


def test_thp_absent_on_recorded_trees() -> None:
    plan = thp.TUNER.run_plan(fixture_host("64amd64-4s2n4ca2co"), thp.Params())
    assert plan.changes == [] and "no transparent huge pages" in plan.notes[0]


# -- cpu-governor: hand-built facts --------------------------------------------------------------


def policy(cpu: int, **kw: Any) -> cpu_governor.Policy:
    base: dict[str, Any] = {
        "path": f"{CPU}/cpufreq/policy{cpu}",
        "cpus": [cpu],
        "driver": "intel_pstate",
        "governor": "powersave",
        "governors": ["performance", "powersave"],
        "epp": "balance_power",
        "epps": ["default", "performance", "balance_performance", "balance_power", "power"],
    }
    base.update(kw)
    return cpu_governor.Policy(**base)


def gov_plan(*policies: cpu_governor.Policy, **kw: Any) -> Plan:
    params = kw.pop("params", cpu_governor.Params())
    return cpu_governor.plan(cpu_governor.Facts(list(policies), **kw), params)


def test_governor_no_policies() -> None:
    plan = gov_plan()
    assert plan.changes == [] and "frequency scaling is not exposed" in plan.notes[0]


def test_governor_epp_before_governor_and_turbo_last() -> None:
    plan = gov_plan(policy(0), policy(1), no_turbo="1")
    assert [c.target for c in plan.changes] == [
        "energy_performance_preference of CPUs 0-1",
        "scaling_governor of CPUs 0-1",
        "turbo (intel_pstate/no_turbo)",
    ]
    turbo = plan.changes[2]
    assert turbo.writes == (Write(f"{CPU}/intel_pstate/no_turbo", "1", "0"),)
    assert "BIOS" in turbo.why


def test_governor_not_offered_or_unreadable() -> None:
    plan = gov_plan(
        policy(0, governors=["ondemand", "userspace"], epp=None),
        policy(1, governor=None, epp=None),
        policy(2, governors=None, epp=None),
        policy(3, epp=None),
    )
    gov = only(plan, "scaling_governor")
    assert gov.target == "scaling_governor of CPUs 3"
    text = notes_text(plan)
    assert "CPUs 0,2: 'performance' is not in scaling_available_governors (ondemand userspace;" in text
    assert "scaling_governor unreadable for CPUs 1" in text


def test_epp_pinned_by_performance_governor_or_not_offered() -> None:
    plan = gov_plan(
        policy(0, governor="performance", epp="balance_performance"),
        policy(1, epps=["default", "balance_performance", "power"]),
        policy(2),
    )
    epp = only(plan, "energy_performance_preference")
    assert [w.path for w in epp.writes] == [f"{CPU}/cpufreq/policy2/energy_performance_preference"]
    text = notes_text(plan)
    assert "CPUs 0 already run the performance governor, which pins EPP itself" in text
    assert "CPUs 1 does not offer 'performance'" in text


def test_epp_already_and_absent() -> None:
    assert "already performance on every policy" in notes_text(gov_plan(policy(0, epp="performance")))
    assert "no energy_performance_preference" in notes_text(gov_plan(policy(0, epp=None)))


@pytest.mark.parametrize(
    ("kw", "params", "changed", "note"),
    [
        ({"boost": "0"}, cpu_governor.Params(), ("/sys/devices/system/cpu/cpufreq/boost", "0", "1"), None),
        ({"boost": "1"}, cpu_governor.Params(), None, "turbo is already on"),
        ({"no_turbo": "0", "boost": "0"}, cpu_governor.Params(), None, "turbo is already on"),
        ({"no_turbo": "x"}, cpu_governor.Params(), None, "neither 0 nor 1"),
        ({}, cpu_governor.Params(), None, "no turbo control exposed"),
        ({"no_turbo": "1"}, cpu_governor.Params(turbo=False), None, "turbo left as is"),
    ],
)
def test_turbo_branches(
    kw: dict[str, str], params: cpu_governor.Params, changed: tuple[str, str, str] | None, note: str | None
) -> None:
    plan = gov_plan(policy(0, governor="performance", epp="performance"), params=params, **kw)
    turbo = [c for c in plan.changes if c.target.startswith("turbo")]
    if changed:
        assert [w for c in turbo for w in c.writes] == [Write(*changed)]
    else:
        assert turbo == []
    if note:
        assert note in notes_text(plan)


def test_governor_changes_name_the_cstates_findings_they_answer() -> None:
    plan = gov_plan(policy(0), no_turbo="1")
    assert [(c.answers, c.asked) for c in plan.changes] == [
        (("cstates/epp",), None),
        (("cstates/governor",), None),
        (("cstates/turbo",), None),
    ]


def test_governor_left_where_the_check_accepts_it_unless_asked() -> None:
    """performance is what the cstates check accepts: schedutil is written over it only because
    the parameter asks, and the change says so; a policy the check flags is answered as well."""
    accepted = policy(0, governor="performance", epp="performance", governors=["performance", "schedutil"])
    flagged = policy(1, governors=["performance", "schedutil", "powersave"], epp="performance")
    assert gov_plan(accepted).changes == []
    (gov,) = gov_plan(accepted, flagged, params=cpu_governor.Params(governor="schedutil")).changes
    assert (gov.target, gov.answers, gov.asked) == (
        "scaling_governor of CPUs 0-1",
        ("cstates/governor",),
        "cpu-governor.governor",
    )
    assert gov.why.startswith(
        "governor=schedutil asked by the tuner parameter cpu-governor.governor; the cstates check "
        "accepts performance"
    )
    with pytest.raises(UsageError, match="parameter 'governor' wants a name"):
        cpu_governor.Params(governor="")


def test_governor_declines_what_it_cannot_write() -> None:
    plan = gov_plan(
        policy(0, governors=["ondemand"], governor="ondemand", epp="balance_power"),
        policy(1, governor="performance", epp="balance_performance"),
    )
    assert set(plan.declined) == {"cstates/governor", "cstates/epp"}
    assert "pins EPP itself" in plan.declined["cstates/epp"]
    assert "'performance' is not in scaling_available_governors" in plan.declined["cstates/governor"]
    both = gov_plan(policy(0, governor="performance", epp="performance"), no_turbo="0", boost="0")
    assert "cpufreq/boost = 0: left as is" in both.declined["cstates/turbo"]
    kept_off = gov_plan(policy(0), no_turbo="1", params=cpu_governor.Params(turbo=False))
    assert "turbo=false" in kept_off.declined["cstates/turbo"]


def test_governor_collect_old_layout_links_and_corrupt_cpu_list(tmp_path: Path) -> None:
    """Kernels before 4.3: cpu0/cpufreq is the policy folder and cpu1/cpufreq links to it."""
    base = f"{CPU}/cpu0/cpufreq"
    host = make_tree(
        tmp_path,
        {
            f"{CPU}/cpu0/online": "1\n",
            f"{CPU}/cpu2/topology/core_id": "0\n",
            f"{base}/scaling_driver": "acpi-cpufreq\n",
            f"{base}/scaling_governor": "ondemand\n",
            f"{base}/scaling_available_governors": "conservative ondemand userspace powersave performance\n",
            f"{base}/related_cpus": "0 1\n",
            f"{CPU}/cpu2/cpufreq/scaling_governor": "ondemand\n",
            f"{CPU}/cpu2/cpufreq/scaling_available_governors": "ondemand performance\n",
            f"{CPU}/cpu2/cpufreq/related_cpus": "zz\n",
            f"{CPU}/cpufreq/boost": "0\n",
        },
        links={f"{CPU}/cpu1/cpufreq": "../cpu0/cpufreq"},
    )
    facts = cpu_governor.collect(host)
    assert [(p.path, p.cpus) for p in facts.policies] == [(base, [0, 1]), (f"{CPU}/cpu2/cpufreq", [2])]
    assert facts.problems == [f"{CPU}/cpu2/cpufreq/related_cpus: unparsable value 'zz'"]
    plan = cpu_governor.plan(facts, cpu_governor.Params())
    gov = only(plan, "scaling_governor")
    assert gov.target == "scaling_governor of CPUs 0-2"
    assert [w.path for w in gov.writes] == [
        f"{base}/scaling_governor",
        f"{CPU}/cpu2/cpufreq/scaling_governor",
    ]
    assert only(plan, "turbo").writes == (Write(f"{CPU}/cpufreq/boost", "0", "1"),)
    assert "unreadable: " in notes_text(plan)


def test_governor_collect_empty_tree(tmp_path: Path) -> None:
    plan = cpu_governor.TUNER.run_plan(make_tree(tmp_path, {}), cpu_governor.Params())
    assert plan.changes == [] and "nothing to plan" in plan.notes[0]


# -- c-states: hand-built facts -------------------------------------------------------------------


def state(index: int, name: str, latency: int | None, disabled: bool | None = False) -> IdleState:
    return IdleState(index, name, None, latency, disabled)


INTEL = [state(0, "POLL", 0), state(1, "C1", 2), state(2, "C1E", 10), state(3, "C6", 133)]


def cfacts(**kw: Any) -> cstates_check.Facts:
    base: dict[str, Any] = {
        "cpuidle_present": True,
        "idle_driver": "intel_idle",
        "idle_governor": "menu",
        "idle_states": {0: INTEL, 1: INTEL},
        "cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/sda1 quiet",
        "policies": [],
    }
    base.update(kw)
    return cstates_check.Facts(**base)


def test_c_states_default_is_the_check_threshold() -> None:
    assert c_states.Params().max_latency_us is None
    assert c_states.Params().limit_us == cstates_check.Params().max_exit_latency_us == 10


def test_c_states_deep_state_plans_held_limit_and_boot_advice() -> None:
    plan = c_states.plan(cfacts(), c_states.Params())
    held, boot = plan.changes
    assert held.before == "no limit: C6 (133 us) on CPUs 0-1"  # C1E (10 us) is within the limit
    doc = plan_documents([plan])[0]["changes"][0]  # held
    assert doc["value"] == 10 and doc["profile_key"] == c_states.PROFILE_KEY
    assert (boot.before, boot.after) == ("no intel_idle.max_cstate", "intel_idle.max_cstate=1")
    assert [c.answers for c in plan.changes] == [("cstates/idle-states",)] * 2
    tighter = c_states.plan(cfacts(), c_states.Params(max_latency_us=5))
    assert tighter.changes[0].before == "no limit: C1E (10 us), C6 (133 us) on CPUs 0-1"
    assert tighter.changes[0].value == 5


def test_c_states_tighter_limit_where_the_check_flags_nothing_is_asked() -> None:
    """C1E (10 us) is within the check's threshold: limiting it is the parameter's doing."""
    accepted = cfacts(idle_states={0: INTEL[:3]})
    assert c_states.plan(accepted, c_states.Params()).changes == []
    held, boot = c_states.plan(accepted, c_states.Params(max_latency_us=5)).changes
    assert held.asked == boot.asked == "c-states.max_latency_us" and held.answers == boot.answers == ()
    assert held.why.startswith(
        "max_latency_us=5 asked by the tuner parameter c-states.max_latency_us; the cstates check "
        "accepts exit latencies up to 10 us"
    )


def test_c_states_looser_limit_declines_what_the_check_flags() -> None:
    plan = c_states.plan(cfacts(), c_states.Params(max_latency_us=200))
    assert plan.changes == []
    assert "max_latency_us=200: no enabled idle state exits slower" in plan.declined["cstates/idle-states"]


def test_c_states_idle_poll_gets_the_c1_limit_instead() -> None:
    """idle=poll: no idle driver registers (cpuidle 'none'), so which max_cstate applies is unknown."""
    plan = c_states.plan(
        cfacts(idle_driver="none", idle_states={}, cmdline="ro idle=poll"), c_states.Params()
    )
    (advice,) = plan.changes
    assert (advice.scope, advice.before, advice.after) == (
        Scope.BOOT,
        "idle=poll",
        "intel_idle.max_cstate=1 processor.max_cstate=1",
    )
    assert advice.answers == ("cstates/boot",)
    findings = cstates_check.evaluate(
        cfacts(idle_driver="none", idle_states={}, cmdline="ro idle=poll"), cstates_check.Params()
    )
    boot = next(f for f in findings if f.subject == "boot")
    assert boot.status.value == "WARN" and boot.fix == c_states.ID
    # With deep states and a known driver: one command-line change, answering both findings.
    both = c_states.plan(cfacts(cmdline="idle=poll"), c_states.Params())
    assert [(c.scope, c.after, c.answers) for c in both.changes] == [
        (Scope.PROCESS, "10 us", ("cstates/idle-states",)),
        (Scope.BOOT, "intel_idle.max_cstate=1", ("cstates/boot", "cstates/idle-states")),
    ]


@pytest.mark.parametrize(
    ("kw", "note"),
    [
        ({"cpuidle_present": False, "idle_states": {}}, "no cpuidle interface"),
        ({"idle_driver": "none", "idle_states": {}}, "cpuidle driver 'none'"),
        ({"idle_states": {}}, "no idle states readable"),
        (
            {"idle_states": {0: INTEL[:3]}},
            "no enabled idle state exits slower than 10 us (deepest enabled: C1E (10 us))",
        ),
        (
            {"idle_states": {0: [*INTEL[:3], state(3, "C6", 133, disabled=True)]}},
            "nothing to limit",
        ),
        ({"idle_states": {0: [state(0, "POLL", None)]}}, "no enabled idle state exits slower"),
    ],
)
def test_c_states_nothing_to_do(kw: dict[str, Any], note: str) -> None:
    plan = c_states.plan(cfacts(**kw), c_states.Params())
    assert plan.changes == []
    assert note in notes_text(plan)


def test_c_states_boot_parameter_already_or_weaker() -> None:
    done = c_states.plan(cfacts(cmdline="quiet intel_idle.max_cstate=1"), c_states.Params())
    assert [c.scope for c in done.changes] == [Scope.PROCESS]
    assert "intel_idle.max_cstate=1 is already on the kernel command line" in notes_text(done)
    weaker = c_states.plan(cfacts(cmdline="quiet intel_idle.max_cstate=3"), c_states.Params())
    assert weaker.changes[1].before == "intel_idle.max_cstate=3"
    acpi = c_states.plan(cfacts(idle_driver="acpi_idle", cmdline="processor.max_cstate=0"), c_states.Params())
    assert "processor.max_cstate=0 is already" in notes_text(acpi)


def test_c_states_differing_cpus_and_bad_params() -> None:
    plan = c_states.plan(cfacts(idle_states={0: INTEL, 1: INTEL[:3], 2: INTEL}), c_states.Params())
    assert plan.changes[0].before == "no limit: C6 (133 us) on CPUs 0,2"
    with pytest.raises(UsageError, match="max_latency_us"):
        c_states.Params(max_latency_us=-1)


# -- hugepages: hand-built facts -----------------------------------------------------------------


def hnode(node: int, nr: str | None = "0", memory: int | None = 16384, cpus: bool = True) -> hugepages.Node:
    return hugepages.Node(node, [node] if cpus else [], memory, {2048: nr, 1048576: "0"})


def hplan(nodes: list[hugepages.Node], params: hugepages.Params, **kw: Any) -> Plan:
    base: dict[str, Any] = {"per_node": True, "nodes": nodes, "global_pools": {2048: "0"}}
    base.update(kw)
    return hugepages.plan(hugepages.Facts(**base), params)


def test_hugepages_zero_is_a_deliberate_default() -> None:
    plan = hplan([hnode(0)], hugepages.Params())
    assert plan.changes == []
    assert "pages_per_node is 0: nothing reserved" in plan.notes[0]
    assert "taken from the memory the job can use" in plan.notes[0]
    # Whatever the check says of the pools is left to people, and the plan says why.
    assert plan.declined == {"hugepages/hugepages-*": plan.notes[0]}


def test_hugepages_reservation_is_asked_by_its_parameter() -> None:
    (change,) = hplan([hnode(0)], hugepages.Params(pages_per_node=8)).changes
    assert (change.answers, change.asked) == ((), "hugepages.pages_per_node")
    assert change.why.startswith("pages_per_node=8 asked by the tuner parameter hugepages.pages_per_node;")


def test_hugepages_plans_each_cpu_node() -> None:
    nodes = [hnode(0, "8"), hnode(1), hnode(2, memory=None, cpus=False), hnode(3, memory=0)]
    plan = hplan(nodes, hugepages.Params(size="2048kB", pages_per_node=256), gpu_memory_nodes=[4])
    change = only(plan, "2 MiB")
    assert change.target == "2 MiB huge pages on nodes 0-1"
    assert [(w.before, w.after) for w in change.writes] == [("8", "256"), ("0", "256")]
    text = notes_text(plan)
    assert "nodes without CPUs (2) are left out" in text
    assert "nodes 3 have no memory" in text
    assert "GPU memory nodes 4 are left out" in text


@pytest.mark.parametrize(
    ("nodes", "params", "note"),
    [
        (
            [hnode(0, memory=1000)],
            hugepages.Params(pages_per_node=300),
            "600 MiB is more than 0.5 of its 1000 MiB",
        ),
        ([hnode(0, memory=1000)], hugepages.Params(pages_per_node=300, max_fraction=0.7), None),
        ([hnode(0, memory=None)], hugepages.Params(pages_per_node=1), "memory of node 0 unknown"),
        ([hnode(0, nr=None)], hugepages.Params(pages_per_node=1), "nr_hugepages unreadable on node 0"),
        ([hnode(0, nr="lots")], hugepages.Params(pages_per_node=1), "nr_hugepages unreadable on node 0"),
        ([hnode(0, nr="4"), hnode(1, nr="4")], hugepages.Params(pages_per_node=4), "already 4 x 2 MiB pages"),
        ([hnode(0)], hugepages.Params(size="16GB", pages_per_node=1), "node 0 has no 16 GiB pool"),
        ([hnode(0, cpus=False)], hugepages.Params(pages_per_node=1), "no NUMA node with CPUs and memory"),
    ],
)
def test_hugepages_refusals_and_notes(
    nodes: list[hugepages.Node], params: hugepages.Params, note: str | None
) -> None:
    plan = hplan(nodes, params)
    if note is None:
        assert len(plan.changes) == 1
    else:
        assert plan.changes == []
        assert note in notes_text(plan)


def test_hugepages_without_numa_folders() -> None:
    facts: dict[str, Any] = {"per_node": False, "global_pools": {2048: "3"}, "memory_total_mib": 4096}
    plan = hplan([hnode(0)], hugepages.Params(pages_per_node=100), **facts)
    assert only(plan, "2 MiB").writes == (
        Write("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "3", "100"),
    )
    big = hplan([hnode(0)], hugepages.Params(pages_per_node=1100), **facts)
    assert "the machine: 1100 x 2 MiB = 2200 MiB is more than 0.5 of its 4096 MiB" in notes_text(big)
    other = hplan([hnode(0)], hugepages.Params(size="1GB", pages_per_node=1), **facts)
    assert "no 1 GiB pool under /sys/kernel/mm/hugepages (sizes: 2 MiB)" in notes_text(other)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"size": "3XB"}, "not a page size"),
        ({"size": "0MB"}, "not a page size"),
        ({"pages_per_node": -1}, "0 or more"),
        ({"max_fraction": 0}, r"\(0, 1\]"),
        ({"max_fraction": 1.5}, r"\(0, 1\]"),
    ],
)
def test_hugepages_bad_params(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        hugepages.Params(**kw)


def test_hugepages_size_spellings() -> None:
    for size in ("2MB", "2M", "2048kB", "2048"):
        plan = hplan([hnode(0)], hugepages.Params(size=size, pages_per_node=1))
        assert only(plan, "2 MiB").writes[0].path.endswith("hugepages-2048kB/nr_hugepages")


def _pool_tree(tmp_path: Path, values: dict[int, str]) -> Host:
    return make_tree(
        tmp_path,
        {f"{NODE}/node{n}/hugepages/hugepages-2048kB/nr_hugepages": v + "\n" for n, v in values.items()},
    )


def _reserve(nodes: list[int], asked: int) -> Change:
    paths = {f"{NODE}/node{n}/hugepages/hugepages-2048kB/nr_hugepages": "0" for n in nodes}
    return runtime_write("hugepages", "2 MiB huge pages on nodes 0-1", "why", paths, str(asked))


def test_hugepages_verify_reports_the_shortfall(tmp_path: Path) -> None:
    host = _pool_tree(tmp_path, {0: "512", 1: "300"})
    (finding,) = hugepages.verify(host, [_reserve([0, 1], 512)])
    assert finding.status.value == "WARN" and finding.fix == "hugepages"
    assert finding.summary == "hugepages: 2 MiB huge pages on nodes 0-1: node 1 got 300 of 512 (212 short)"
    assert finding.evidence[f"{NODE}/node1/hugepages/hugepages-2048kB/nr_hugepages"] == "300 (asked 512)"
    assert "hugepagesz=2M hugepages=0:512,1:512" in finding.remediation
    assert "compact_memory" in finding.remediation


def test_hugepages_verify_ok_over_and_unreadable(tmp_path: Path) -> None:
    (ok,) = hugepages.verify(_pool_tree(tmp_path / "a", {0: "512", 1: "512"}), [_reserve([0, 1], 512)])
    assert ok.status.value == "OK"
    (over,) = hugepages.verify(_pool_tree(tmp_path / "b", {0: "700", 1: "512"}), [_reserve([0, 1], 512)])
    assert over.status.value == "WARN" and "node 0 holds 700, 188 more than asked" in over.summary
    (bad,) = hugepages.verify(_pool_tree(tmp_path / "c", {0: "x"}), [_reserve([0, 1], 512)])
    assert bad.status.value == "FAIL" and "unreadable on node 0, node 1" in bad.summary
    other = Change("thp", "t", "a", "b", Scope.RUNTIME, "why", writes=(Write("/x", "a", "b"),))
    assert hugepages.verify(_pool_tree(tmp_path / "a", {}), [other]) == []


# -- thp: hand-built facts -------------------------------------------------------------------------


def test_thp_remedies_are_what_the_hugepages_check_accepts() -> None:
    from nodeagent.checks import hugepages as check

    assert thp.Params() == thp.Params(enabled=None, defrag=None)  # unset: the check decides
    accepted = check.Params()
    assert check.thp_enabled_accepted(check.thp_enabled_remedy(accepted), accepted)
    assert all(check.thp_defrag_accepted(r, accepted) for r in check.THP_DEFRAG_REMEDIES)


def test_thp_plans_bare_words_and_keeps_the_selected_value_as_before() -> None:
    plan = thp.plan(
        thp.Facts("always madvise [never]", "[always] defer defer+madvise madvise never"), thp.Params()
    )
    enabled, defrag = plan.changes
    assert enabled.writes == (Write(f"{THP}/enabled", "never", "madvise"),)
    assert defrag.writes == (Write(f"{THP}/defrag", "always", "defer+madvise"),)
    assert (enabled.before, defrag.before) == ("never", "always")
    assert "transhuge.html" in enabled.why
    # With THP off the check judges no defrag: turning THP on answers its `thp` finding, and
    # makes the flagged defrag matter.
    assert enabled.answers == defrag.answers == ("hugepages/thp",)
    assert enabled.asked is None and defrag.asked is None


def test_thp_leaves_what_the_check_accepts_unless_a_parameter_asks() -> None:
    """The hugepages check accepts enabled=always and defrag=madvise: the tuner leaves both, and
    changes them only when a parameter set explicitly asks, saying so in the change's why."""
    facts = thp.Facts("[always] madvise never", "always defer defer+madvise [madvise] never")
    plan = thp.plan(facts, thp.Params())
    assert plan.changes == []
    assert "transparent_hugepage/defrag is madvise, which the hugepages check accepts" in notes_text(plan)
    assert "transparent_hugepage/enabled is always, which the hugepages check accepts" in notes_text(plan)

    (defrag,) = thp.plan(facts, thp.Params(defrag="defer+madvise")).changes
    assert (defrag.before, defrag.after, defrag.answers, defrag.asked) == (
        "madvise",
        "defer+madvise",
        (),
        "thp.defrag",
    )
    assert defrag.why.startswith(
        "defrag=defer+madvise asked by the tuner parameter thp.defrag; the hugepages check accepts madvise"
    )


def test_thp_explicit_value_over_a_flagged_one_answers_the_finding() -> None:
    facts = thp.Facts("[always] madvise never", "[always] defer defer+madvise madvise never")
    (defrag,) = thp.plan(facts, thp.Params(defrag="madvise")).changes
    assert (defrag.after, defrag.answers, defrag.asked) == ("madvise", ("hugepages/thp-defrag",), None)


def test_thp_defrag_falls_back_to_madvise_on_kernels_without_defer_madvise() -> None:
    # Kernels before 4.11 offer no defer+madvise; madvise is the check's next remedy.
    (defrag,) = thp.plan(thp.Facts("[always] madvise never", "[always] madvise never"), thp.Params()).changes
    assert (defrag.before, defrag.after, defrag.answers) == ("always", "madvise", ("hugepages/thp-defrag",))


@pytest.mark.parametrize(
    ("facts", "note"),
    [
        (thp.Facts(None, None), "no transparent huge pages; nothing to plan"),
        (thp.Facts("always [madvise] never", None), "defrag is absent"),
        (thp.Facts("always [madvise] never", "defer+madvise [madvise]"), "enabled is madvise, which the"),
        (thp.Facts("garbage\x00", "[madvise]"), "no [selected] choice"),
    ],
)
def test_thp_notes(facts: thp.Facts, note: str) -> None:
    plan = thp.plan(facts, thp.Params())
    assert note in notes_text(plan)


def test_thp_kept_off_leaves_defrag_alone() -> None:
    """With THP off and kept off (enabled=never asked), the check judges no defrag: nothing to do."""
    plan = thp.plan(
        thp.Facts("always madvise [never]", "[always] madvise never"), thp.Params(enabled="never")
    )
    assert plan.changes == []
    assert "defrag left as is: THP is never, so defrag does not matter" in notes_text(plan)


def test_thp_declines_a_flagged_value_it_cannot_change() -> None:
    plan = thp.plan(thp.Facts("[always] madvise never", "[always] never"), thp.Params())
    assert plan.changes == []
    assert "does not offer 'defer+madvise' or 'madvise'" in plan.declined["hugepages/thp-defrag"]


def test_thp_params_are_checked() -> None:
    assert thp.Params(enabled="always", defrag="madvise").enabled == "always"
    with pytest.raises(UsageError, match="enabled must be one of always, madvise, never"):
        thp.Params(enabled="sometimes")
    with pytest.raises(UsageError, match="defrag must be one of"):
        thp.Params(defrag="later")


def test_thp_collect_tree(tmp_path: Path) -> None:
    host = make_tree(
        tmp_path,
        {
            f"{THP}/enabled": "always [madvise] never\n",
            f"{THP}/defrag": "[always] defer defer+madvise madvise never\n",
        },
    )
    plan = thp.TUNER.run_plan(host, thp.Params())
    assert [c.target for c in plan.changes] == ["transparent_hugepage/defrag"]
    assert "enabled is madvise, which the hugepages check accepts" in notes_text(plan)


@pytest.mark.parametrize("enabled", thp.ENABLED_MODES)
@pytest.mark.parametrize("defrag", thp.DEFRAG_MODES)
def test_thp_plans_exactly_what_the_hugepages_check_flags(tmp_path: Path, enabled: str, defrag: str) -> None:
    """Every documented pair of modes (transhuge.rst): with its defaults the tuner changes a file
    exactly when the check does not accept it, and after the change the check accepts it."""
    from nodeagent.checks import hugepages as check

    def selector(modes: tuple[str, ...], chosen: str) -> str:
        return " ".join(f"[{m}]" if m == chosen else m for m in modes) + "\n"

    files = {f"{THP}/enabled": selector(thp.ENABLED_MODES, enabled)}
    files[f"{THP}/defrag"] = selector(thp.DEFRAG_MODES, defrag)
    host = make_tree(tmp_path, files)
    flagged = {
        f.subject for f in check.CHECK.run(host, check.Params()) if f.subject.startswith("thp") and f.fix
    }
    plan = thp.TUNER.run_plan(host, thp.Params())
    assert {a.removeprefix("hugepages/") for c in plan.changes for a in c.answers} == flagged
    assert all(c.asked is None for c in plan.changes)
    for c in plan.changes:
        files[c.writes[0].path] = selector(
            thp.ENABLED_MODES if c.writes[0].path.endswith("enabled") else thp.DEFRAG_MODES, c.after
        )
    after = make_tree(tmp_path / "after", files)
    assert [f for f in check.CHECK.run(after, check.Params()) if f.subject.startswith("thp") and f.fix] == []


def test_tuner_paths_cover_what_they_write() -> None:
    assert f"{CPU}/cpufreq/policy*/scaling_governor" in cpu_governor.TUNER.paths
    assert f"{CPU}/cpufreq/policy*/energy_performance_preference" in cpu_governor.TUNER.paths
    assert f"{NODE}/node*/hugepages/hugepages-*/nr_hugepages" in hugepages.TUNER.paths
    assert f"{THP}/enabled" in thp.TUNER.paths and f"{THP}/defrag" in thp.TUNER.paths
    assert f"{CPU}/cpu[0-9]*/cpuidle/state*/latency" in c_states.TUNER.paths
