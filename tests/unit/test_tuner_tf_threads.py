"""tf-threads: intra-op = physical cores of the rank (divided when ranks share), inter-op = nodes spanned."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from nodeagent.api.tune import Plan, Scope
from nodeagent.facts.ranks import GpuPlace
from nodeagent.host import LocalHost
from nodeagent.tuners import tf_threads
from nodeagent.tuners.tf_threads import INTER, INTRA, OMP, Facts, Params
from tests.support.helpers import fixture_host, make_tree
from tests.support.rank_nodes import A100, hand_facts, smi_host


def plan_of(host: Any, **params: Any) -> Plan:
    return tf_threads.TUNER.run_plan(host, tf_threads.TUNER.make_params(params))


def settings(plan: Plan) -> dict[str, str]:
    assert all(c.scope is Scope.PROCESS for c in plan.changes)
    return {c.profile_key or "": c.value for c in plan.changes}


def smt2(nodes: int, cores: int) -> tuple[dict[int, str], dict[int, int]]:
    """`nodes` nodes of `cores` 2-thread cores, numbered as Linux does: all second threads last."""
    total = nodes * cores
    spec, siblings = {}, {}
    for n in range(nodes):
        first = range(n * cores, (n + 1) * cores)
        spec[n] = f"{first[0]}-{first[-1]},{first[0] + total}-{first[-1] + total}"
        for c in first:
            siblings[c] = siblings[c + total] = c
    return spec, siblings


def test_dgx_a100_two_ranks_per_node(tmp_path: Path) -> None:
    plan = plan_of(smi_host(tmp_path, A100))
    # 32 CPUs per node (SMT unknown without sysfs: counted as cores), shared by 2 ranks: 16 each.
    assert settings(plan) == {f"env.{INTRA}": "16", f"env.{INTER}": "2", f"env.{OMP}": "16"}
    assert [c.before for c in plan.changes] == ["(unknown: /proc/self/environ unreadable)"] * 3
    assert any("SMT siblings unknown" in n for n in plan.notes)
    assert any(
        n.startswith("ranks 0-1: 32 CPU(s) among CPUs 48-63,176-191, shared by 2 ranks") for n in plan.notes
    )
    assert plan.details["threads"][0] == {"local_rank": 0, INTRA: 16, INTER: 2, OMP: 16, "sharing": 2}


def test_shared_node_divides_physical_cores() -> None:
    spec, siblings = smt2(nodes=2, cores=8)
    gpus = [GpuPlace(f"GPU{i}", None, i // 2, None) for i in range(4)]
    facts = Facts(hand_facts(spec, siblings=siblings, gpus=gpus), environ={})
    # 8 physical cores per node, 2 ranks on each: 4 threads per rank, never 8 (oversubscribed) or 16.
    assert settings(tf_threads.plan(facts, Params())) == {
        f"env.{INTRA}": "4",
        f"env.{INTER}": "2",
        f"env.{OMP}": "4",
    }
    assert settings(tf_threads.plan(facts, Params(smt=True)))[f"env.{INTRA}"] == "8"
    assert (
        settings(tf_threads.plan(facts, Params(ranks=2)))[f"env.{INTRA}"] == "4"
    )  # GPU0 and GPU1 share node 0
    assert settings(tf_threads.plan(facts, Params(ranks=1)))[f"env.{INTRA}"] == "8"


def test_uneven_ranks_go_to_rank_env() -> None:
    facts = Facts(hand_facts({0: "0-3", 1: "4-5"}), environ={OMP: "64"})
    plan = tf_threads.plan(facts, Params())
    assert settings(plan) == {
        f"rank_env.0.{INTRA}": "4",
        f"rank_env.1.{INTRA}": "2",
        f"env.{INTER}": "2",
        f"rank_env.0.{OMP}": "4",
        f"rank_env.1.{OMP}": "2",
    }
    before = {c.target: c.before for c in plan.changes}
    assert before[f"env {OMP} (rank 0)"] == "64" and before[f"env {INTER}"] == "(unset)"


def test_cfs_quota_caps_the_sum() -> None:
    facts = Facts(hand_facts({0: "0-7", 1: "8-15"}, quota=3.0), environ={})
    plan = tf_threads.plan(facts, Params())
    assert settings(plan)[f"env.{INTRA}"] == "1"  # 3 CPUs of quota for 2 ranks
    assert any("CFS quota 3 CPUs" in n for n in plan.notes)


def test_one_rank_spanning_every_node_gets_inter_op_per_node() -> None:
    plan = plan_of(fixture_host("16amd64-8n2c"), ranks=1)
    assert settings(plan) == {f"env.{INTRA}": "16", f"env.{INTER}": "8", f"env.{OMP}": "16"}
    per_node = plan_of(fixture_host("16amd64-8n2c"))
    assert settings(per_node) == {f"env.{INTRA}": "2", f"env.{INTER}": "2", f"env.{OMP}": "2"}
    floor = plan_of(fixture_host("16amd64-8n2c"), min_inter_op=1)
    assert settings(floor)[f"env.{INTER}"] == "1"


def test_power9_smt4_and_unpinned_ranks() -> None:
    host = fixture_host("nvidiagpunumanodes")
    cpu = plan_of(host, cpu_only=True)
    assert settings(cpu)[f"env.{INTRA}"] == "4"  # 4 SMT4 cores in node 0 (the cpuset leaves node 8 out)
    gpu = plan_of(host)
    # Ranks 3-5 cannot be pinned (node 8 outside the cpuset) and run on 0-15 with ranks 0-2: 6 ranks, 4 cores.
    assert settings(gpu)[f"env.{INTRA}"] == "1"
    assert any("rank 3 is not pinned" in n for n in gpu.notes)


def test_environment_before_values(tmp_path: Path) -> None:
    files = {
        "/proc/self/environ": f"PATH=/bin\x00{INTRA}=64\x00",
        "/sys/devices/system/cpu/online": "0-3\n",
        "/sys/devices/system/node/node0/cpulist": "0-3\n",
    }
    plan = plan_of(make_tree(tmp_path, files))
    assert {c.target: (c.before, c.after) for c in plan.changes} == {
        f"env {INTRA}": ("64", "4"),
        f"env {INTER}": ("(unset)", "2"),
        f"env {OMP}": ("(unset)", "4"),
    }


def test_pools_answer_the_threads_check_and_leave_what_they_do_not_set(tmp_path: Path) -> None:
    """INTRA=64 on 4 CPUs is what the threads check flags; the profile's sizes are what it accepts
    (two inter-op threads included), MKL_NUM_THREADS is the check's too but no variable of this
    tuner, and intra_op set explicitly asks for its size."""
    from nodeagent.checks import threads

    files = {
        "/proc/self/environ": f"PATH=/bin\x00{INTRA}=64\x00MKL_NUM_THREADS=32\x00",
        "/sys/devices/system/cpu/online": "0-3\n",
        "/sys/devices/system/node/node0/cpulist": "0-3\n",
    }
    host = make_tree(tmp_path, files)
    flagged = {f.subject for f in threads.CHECK.run(host, threads.Params()) if f.fix == tf_threads.ID}
    assert flagged == {INTRA, "MKL_NUM_THREADS"}
    plan = plan_of(host)
    intra = next(c for c in plan.changes if c.profile_key == f"env.{INTRA}")
    assert f"threads/{INTRA}" in intra.answers and intra.asked is None
    assert plan.declined == {
        "threads/MKL_NUM_THREADS": "MKL_NUM_THREADS=32 left as is: tf-threads sets "
        "TF_NUM_INTRAOP_THREADS, TF_NUM_INTEROP_THREADS, OMP_NUM_THREADS only"
    }
    env = {c.profile_key.removeprefix("env."): str(c.value) for c in plan.changes if c.profile_key}
    after = threads.CHECK.run(
        make_tree(
            tmp_path / "after",
            {**files, "/proc/self/environ": "\x00".join(f"{k}={v}" for k, v in env.items()) + "\x00"},
        ),
        threads.Params(),
    )
    assert [f.summary for f in after if f.subject in env and f.status.value != "OK"] == []
    forced = plan_of(host, intra_op=3)
    assert {c.profile_key: c.asked for c in forced.changes} == {
        f"env.{INTRA}": "tf-threads.intra_op",
        f"env.{INTER}": None,
        f"env.{OMP}": "tf-threads.intra_op",
    }


def test_errors_and_empty_facts_plan_nothing(tmp_path: Path) -> None:
    plan = plan_of(smi_host(tmp_path, A100), ranks=9)
    assert plan.changes == [] and "ranks=9" in plan.notes[0]
    (tmp_path / "empty").mkdir()
    empty = plan_of(make_tree(tmp_path / "empty", {}))
    assert empty.changes == [] and empty.notes[0].startswith("nothing planned")


def test_plan_is_pure() -> None:
    facts = Facts(hand_facts({0: "0-7", 1: "8-11"}, gpus=[GpuPlace("GPU0", None, 0, None)]), environ=None)
    frozen = copy.deepcopy(facts)
    first = tf_threads.plan(facts, Params())
    assert tf_threads.plan(facts, Params()) == first and facts == frozen
    assert settings(first)[f"env.{INTRA}"] == "8"


def test_this_machine() -> None:
    host = LocalHost()
    plan = plan_of(host)
    facts = tf_threads.collect(host)
    allowed = facts.ranks.allowed or []
    values = settings(plan)
    assert 1 <= int(values[f"env.{INTRA}"]) <= len(allowed)
    assert values[f"env.{OMP}"] == values[f"env.{INTRA}"] and int(values[f"env.{INTER}"]) >= 2
