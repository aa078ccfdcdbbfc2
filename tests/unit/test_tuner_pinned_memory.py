"""pinned-memory: TF host-memory limit per rank, GPU thread mode, memlock soft limit (only the last
without GPUs)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from nodeagent.api.tune import Plan, Scope
from nodeagent.facts.limits import UNLIMITED, Limit
from nodeagent.facts.ranks import GpuPlace
from nodeagent.host import LocalHost
from nodeagent.tuners import pinned_memory
from nodeagent.tuners.pinned_memory import HOST_MEM, THREAD_COUNT, THREAD_MODE, Facts, Params
from tests.support.helpers import fixture_host, make_tree
from tests.support.rank_nodes import A100, hand_facts, smi_host

MIB = 1 << 20
LIMITS = (
    "Limit                     Soft Limit           Hard Limit           Units     \n"
    "Max open files            1024                 1048576              files     \n"
    "Max locked memory         {soft}              {hard}              bytes     \n"
)


def plan_of(host: Any, **params: Any) -> Plan:
    return pinned_memory.TUNER.run_plan(host, pinned_memory.TUNER.make_params(params))


def settings(plan: Plan) -> dict[str, Any]:
    assert all(c.scope is Scope.PROCESS for c in plan.changes)
    return {c.profile_key or "": c.value for c in plan.changes}


def gpu_facts(
    memlock: Limit | None = None, environ: dict[str, str] | None = None, readable: bool = True
) -> Facts:
    """Two NUMA nodes of 256 GiB, four GPUs (two per node)."""
    gpus = [GpuPlace(f"GPU{i}", None, i // 2, None) for i in range(4)]
    rf = hand_facts({0: "0-15", 1: "16-31"}, gpus=gpus, memory_mib={0: 262144, 1: 262144})
    return Facts(rf, environ if environ is not None else {}, memlock, readable)


@pytest.mark.parametrize("name", ["16amd64-8n2c", "64amd64-4s2n4ca2co", "32em64t-2n8c+dax+nvme+mic+dimms"])
def test_no_gpu_plans_nothing_and_says_why(name: str) -> None:
    plan = plan_of(fixture_host(name))
    assert plan.changes == []
    assert plan.notes[0].startswith("nothing planned: no GPU on this node")
    assert "nvidia-smi topo -m" in plan.notes[0]


def test_power9_host_memory_share_per_node() -> None:
    plan = plan_of(fixture_host("nvidiagpunumanodes"))
    # Node 0 has 126796 MiB and 3 GPU ranks: 0.5 x 126796 / 3 = 21132 MiB, in 256 MiB steps 20992
    # (node 8: 130812 MiB, a larger share; the smallest wins so that no node is over-committed).
    assert settings(plan) == {
        f"env.{HOST_MEM}": "20992",
        f"env.{THREAD_MODE}": "gpu_private",
        f"env.{THREAD_COUNT}": "2",
    }
    change = next(c for c in plan.changes if c.profile_key == f"env.{HOST_MEM}")
    assert "node 0: 126796 MiB / 3 rank(s)" in change.why and "gpu_process_state.cc" in change.why
    assert any("memlock not judged" in n for n in plan.notes)  # the recording has no /proc/self/limits


def test_dgx_a100_without_memory_sizes(tmp_path: Path) -> None:
    plan = plan_of(smi_host(tmp_path, A100))
    assert settings(plan) == {f"env.{THREAD_MODE}": "gpu_private", f"env.{THREAD_COUNT}": "2"}
    assert any(n.startswith(f"{HOST_MEM} not planned: no node memory size") for n in plan.notes)


def test_fraction_and_ranks_size_the_limit() -> None:
    facts = gpu_facts()
    assert settings(pinned_memory.plan(facts, Params()))[f"env.{HOST_MEM}"] == "65536"  # 0.5 x 256 GiB / 2
    assert settings(pinned_memory.plan(facts, Params(host_mem_fraction=0.25)))[f"env.{HOST_MEM}"] == "32768"
    # Two ranks, both on node 0's GPUs: still two ranks sharing node 0.
    assert settings(pinned_memory.plan(facts, Params(ranks=2)))[f"env.{HOST_MEM}"] == "65536"
    assert settings(pinned_memory.plan(facts, Params(ranks=1)))[f"env.{HOST_MEM}"] == "131072"
    too_many = pinned_memory.plan(facts, Params(ranks=5))
    assert too_many.changes == [] and "ranks=5" in too_many.notes[0]


def test_memlock_soft_below_unlimited_hard_is_raised_by_the_launcher() -> None:
    plan = pinned_memory.plan(gpu_facts(Limit(8 * MIB, UNLIMITED, "bytes")), Params())
    change = next(c for c in plan.changes if c.profile_key == "launcher.memlock_soft")
    assert change.scope is Scope.PROCESS and change.value == "unlimited"
    assert change.before == "soft 8 MiB, hard unlimited" and "setrlimit" in change.why
    off = pinned_memory.plan(gpu_facts(Limit(8 * MIB, UNLIMITED, "bytes")), Params(raise_memlock=False))
    assert "launcher.memlock_soft" not in settings(off)
    assert any("raise_memlock=false" in n for n in off.notes)


def test_memlock_without_gpus_answers_the_kernel_check(tmp_path: Path) -> None:
    """RDMA registration needs the limit on CPU-only nodes too: the kernel check flags it there, so
    the launcher raises it there (or the plan says why it cannot)."""
    from nodeagent.checks import kernel

    cpu = {"/sys/devices/system/cpu/online": "0-3\n"}
    raisable = make_tree(
        tmp_path / "a", {**cpu, "/proc/self/limits": LIMITS.format(soft="8388608", hard="unlimited")}
    )
    (flagged,) = [f for f in kernel.CHECK.run(raisable, kernel.Params()) if f.subject == "memlock"]
    assert flagged.status.value == "WARN" and flagged.fix == pinned_memory.ID
    plan = plan_of(raisable)
    (change,) = plan.changes
    assert (change.profile_key, change.value, change.answers) == (
        "launcher.memlock_soft",
        "unlimited",
        ("kernel/memlock",),
    )
    assert plan.notes[0].startswith("no GPU settings: no GPU on this node")
    fixed = plan_of(
        make_tree(tmp_path / "b", {**cpu, "/proc/self/limits": LIMITS.format(soft="8388608", hard="8388608")})
    )
    assert fixed.changes == [] and "a process cannot raise it" in fixed.declined["kernel/memlock"]


def test_memlock_hard_limit_is_advice_only() -> None:
    fixed = pinned_memory.plan(gpu_facts(Limit(64 * MIB, 64 * MIB, "bytes")), Params())
    assert "launcher.memlock_soft" not in settings(fixed)
    advice = next(n for n in fixed.notes if n.startswith("memlock is limited (soft 64 MiB, hard 64 MiB)"))
    assert "limits.d" in advice and "LimitMEMLOCK=infinity" in advice and "--ulimit memlock=-1" in advice
    partial = pinned_memory.plan(gpu_facts(Limit(64 * 1024, 64 * MIB, "bytes")), Params())
    assert settings(partial)["launcher.memlock_soft"] == 64 * MIB
    assert any(n.startswith("memlock hard limit is 64 MiB") for n in partial.notes)
    unlimited = pinned_memory.plan(gpu_facts(Limit(UNLIMITED, UNLIMITED, "bytes")), Params())
    assert "launcher.memlock_soft" not in settings(unlimited)
    assert any(n.startswith("memlock is unlimited") for n in unlimited.notes)


def test_collect_reads_limits_and_environment(tmp_path: Path) -> None:
    smi = "\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-3\t0\n"
    files = {
        "/proc/self/limits": LIMITS.format(soft="8388608", hard="unlimited"),
        "/proc/self/environ": f"{THREAD_MODE}=global\x00HOME=/root\x00",
        "/proc/meminfo": "MemTotal:       16777216 kB\n",
    }
    plan = plan_of(make_tree(tmp_path, files, commands={"nvidia-smi-topo-m": smi}))
    before = {c.profile_key: c.before for c in plan.changes}
    assert before[f"env.{THREAD_MODE}"] == "global" and before[f"env.{THREAD_COUNT}"] == "(unset)"
    # No node folders: node 0 is the whole machine (MemTotal 16 GiB); half of it for the single rank.
    assert settings(plan)[f"env.{HOST_MEM}"] == "8192"
    assert settings(plan)["launcher.memlock_soft"] == "unlimited"


def test_plan_is_pure() -> None:
    facts = gpu_facts(Limit(8 * MIB, UNLIMITED, "bytes"), environ={THREAD_COUNT: "4"})
    frozen = copy.deepcopy(facts)
    first = pinned_memory.plan(facts, Params())
    assert pinned_memory.plan(facts, Params()) == first and facts == frozen
    assert next(c.before for c in first.changes if c.profile_key == f"env.{THREAD_COUNT}") == "4"


def test_this_machine() -> None:
    host = LocalHost()
    facts = pinned_memory.collect(host)
    plan = plan_of(host)
    if not facts.ranks.gpus:
        assert all(c.profile_key == "launcher.memlock_soft" for c in plan.changes)
        assert "no GPU" in plan.notes[0]
    else:
        assert settings(plan)[f"env.{THREAD_MODE}"] == "gpu_private"
