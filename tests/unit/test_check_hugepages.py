"""hugepages: recorded hwloc trees, hand-built facts for every branch, and corrupt or partial trees."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

import pytest

from nodeagent.checks import hugepages
from nodeagent.checks.hugepages import Facts, Params
from nodeagent.core.finding import Finding, Status
from nodeagent.facts.memory import HugePagePool, Memory
from nodeagent.host import LocalHost
from tests.support.helpers import FIXTURE_TREES, fixture_host, make_tree

P = Params()
HUGE = "/sys/kernel/mm/hugepages"
THP = "/sys/kernel/mm/transparent_hugepage"
NODE = "/sys/devices/system/node"


def by_subject(findings: list[Finding], subject: str) -> Finding:
    hits = [f for f in findings if f.subject == subject]
    assert len(hits) == 1, [(f.subject, f.summary) for f in findings]
    return hits[0]


# -- recorded trees ------------------------------------------------------------------------------


def test_2i386_two_sizes_exhausted() -> None:
    facts = hugepages.collect(fixture_host("2i386-2t-hugepagesizecount"))
    assert [(p.size_kb, p.total, p.free, p.reserved, p.surplus) for p in facts.memory.pools] == [
        (2048, 1, 0, 0, 0),
        (16777216, 1, 0, 0, 0),
    ]
    findings = hugepages.evaluate(facts, P)
    small = by_subject(findings, "hugepages-2048kB")
    assert small.status is Status.WARN and small.fix == "hugepages"
    assert small.summary.startswith("2 MiB pool exhausted")
    assert small.evidence[f"{HUGE}/hugepages-2048kB/nr_hugepages"] == "1"
    assert small.evidence[f"{HUGE}/hugepages-2048kB/free_hugepages"] == "0"
    big = by_subject(findings, "hugepages-16777216kB")
    assert big.status is Status.WARN and big.summary.startswith("16 GiB pool exhausted")
    assert by_subject(findings, "thp").status is Status.SKIPPED
    # A job that expects the 2 MiB page finds none available.
    short = by_subject(hugepages.evaluate(facts, Params(expected_pages={"2MB": 1})), "hugepages-2048kB")
    assert short.status is Status.FAIL and "0 pages available, the job expects 1" in short.summary


def test_32em64t_per_node_pools() -> None:
    facts = hugepages.collect(fixture_host("32em64t-2n8c+dax+nvme+mic+dimms"))
    assert facts.cpu_nodes == [0, 1]
    (pool,) = facts.memory.pools
    assert (pool.size_kb, pool.total, pool.free, pool.reserved) == (2048, 0, 0, 0)
    assert pool.per_node == {0: (0, 0), 1: (0, 0)}
    findings = hugepages.evaluate(facts, P)
    assert by_subject(findings, "hugepages-2048kB").summary == "no 2 MiB huge pages set aside"
    assert "hugepages-2048kB-nodes" not in [f.subject for f in findings]  # an empty pool is balanced


def test_gpu_memory_nodes_are_not_pool_nodes() -> None:
    facts = hugepages.collect(fixture_host("nvidiagpunumanodes"))
    assert facts.cpu_nodes == [0, 8]
    assert sorted(facts.memory.pools[0].per_node) == [0, 8, 250, 251, 252, 253, 254, 255]
    assert [p.size_kb for p in facts.memory.pools] == [2048, 1048576]


@pytest.mark.parametrize("name", FIXTURE_TREES)
def test_every_tree_decides(name: str) -> None:
    findings = hugepages.CHECK.run(fixture_host(name), P)
    assert all(f.check_id == "hugepages" and f.summary for f in findings)
    assert not [f for f in findings if f.status is Status.UNKNOWN]
    assert by_subject(findings, "thp")


def test_this_machine() -> None:
    findings = hugepages.CHECK.run(LocalHost(), P)
    assert not [f for f in findings if f.status is Status.UNKNOWN]
    if Path(f"{THP}/enabled").exists():
        assert by_subject(findings, "thp").status in (Status.OK, Status.WARN)


# -- hand-built facts ------------------------------------------------------------------------------


def pool(
    kb: int = 2048, total: int | None = 0, free: int | None = 0, resv: int | None = 0, **kw: object
) -> HugePagePool:
    return HugePagePool(kb, total, free, resv, 0, **kw)  # type: ignore[arg-type]


def facts(pools: list[HugePagePool] | None = None, **kw: object) -> Facts:
    """Facts of a healthy node; keyword arguments naming Memory fields go to the memory facts."""
    mem = Memory(
        total_mib=515000,
        available_mib=500000,
        pools=[pool(), pool(1048576)] if pools is None else pools,
        thp_enabled="madvise",
        thp_defrag="madvise",
        thp_enabled_raw="always [madvise] never",
        thp_defrag_raw="always defer defer+madvise [madvise] never",
        problems=[],
    )
    memory_fields = {f.name for f in fields(Memory)}
    mem = replace(mem, **{k: v for k, v in kw.items() if k in memory_fields})  # type: ignore[arg-type]
    base = Facts(memory=mem, cpu_nodes=[0, 1])
    return replace(base, **{k: v for k, v in kw.items() if k not in memory_fields})  # type: ignore[arg-type]


def with_memory(f: Facts, **kw: object) -> Facts:
    return replace(f, memory=replace(f.memory, **kw))  # type: ignore[arg-type]


def test_default_node_is_all_ok() -> None:
    findings = hugepages.evaluate(facts(), P)
    assert {f.status for f in findings} == {Status.OK}
    assert [f.subject for f in findings] == ["thp", "thp-defrag", "hugepages-2048kB", "hugepages-1048576kB"]


def test_thp_never() -> None:
    f = with_memory(facts(thp_enabled_raw="always madvise [never]"), thp_enabled="never")
    findings = hugepages.evaluate(f, P)
    thp = by_subject(findings, "thp")
    assert thp.status is Status.WARN and thp.fix == "thp"
    assert thp.evidence == {
        f"{THP}/enabled": "always madvise [never]",
        f"{THP}/defrag": facts().memory.thp_defrag_raw,
    }
    assert "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled" in thp.remediation
    assert "thp-defrag" not in [x.subject for x in findings]  # defrag is moot with THP off


def test_thp_defrag_always() -> None:
    f = with_memory(facts(thp_defrag_raw="[always] defer defer+madvise madvise never"), thp_defrag="always")
    defrag = by_subject(hugepages.evaluate(f, P), "thp-defrag")
    assert defrag.status is Status.WARN and defrag.fix == "thp"
    assert "echo defer+madvise" in defrag.remediation


def test_thp_absent_or_garbage() -> None:
    absent = with_memory(facts(thp_enabled_raw=None, thp_defrag_raw=None), thp_enabled=None, thp_defrag=None)
    thp = by_subject(hugepages.evaluate(absent, P), "thp")
    assert thp.status is Status.SKIPPED and thp.evidence == {f"{THP}/enabled": "(absent)"}
    garbage = with_memory(
        facts(thp_enabled_raw="alw\x01ys", thp_defrag_raw="xx"), thp_enabled=None, thp_defrag=None
    )
    findings = hugepages.evaluate(garbage, P)
    assert by_subject(findings, "thp").status is Status.WARN
    assert "unparsable" in by_subject(findings, "thp-defrag").summary


def test_idle_pool_is_memory_taken_from_the_job() -> None:
    f = facts([pool(1048576, total=64, free=64, resv=0)])
    idle = by_subject(hugepages.evaluate(f, P), "hugepages-1048576kB")
    assert idle.status is Status.WARN and idle.fix == "hugepages"
    assert idle.summary.startswith("64 free 1 GiB huge pages (64.0 GiB) set aside")
    assert f"echo 0 > {HUGE}/hugepages-1048576kB/nr_hugepages" in idle.remediation


def test_pool_partly_in_use_keeps_the_used_pages() -> None:
    f = facts([pool(2048, total=1000, free=400, resv=100)])
    idle = by_subject(hugepages.evaluate(f, P), "hugepages-2048kB")
    assert idle.status is Status.WARN
    assert "300 free 2 MiB huge pages (600 MiB)" in idle.summary
    assert f"echo 700 > {HUGE}/hugepages-2048kB/nr_hugepages" in idle.remediation


def test_expected_pages() -> None:
    f = facts([pool(2048, total=4096, free=4096, resv=0), pool(1048576, total=8, free=8, resv=2)])
    exact = Params(expected_pages={"2048kB": 4096, "1G": 6})
    assert {x.status for x in hugepages.evaluate(f, exact)} == {Status.OK}
    short = by_subject(hugepages.evaluate(f, Params(expected_pages={"1GB": 8})), "hugepages-1048576kB")
    assert short.status is Status.FAIL and short.fix == "hugepages"
    assert "6 pages available, the job expects 8" in short.summary
    assert f"echo 10 > {HUGE}/hugepages-1048576kB/nr_hugepages" in short.remediation
    extra = by_subject(hugepages.evaluate(f, Params(expected_pages={2048: 1024})), "hugepages-2048kB")
    assert extra.status is Status.WARN and "3072 pages (6.0 GiB) beyond the 1024" in extra.summary
    # Zero expected for a size is the same as not listing it.
    assert (
        by_subject(hugepages.evaluate(f, Params(expected_pages={"2M": 0})), "hugepages-2048kB").status
        is Status.WARN
    )


def test_expected_size_not_offered_and_bad_keys() -> None:
    findings = hugepages.evaluate(facts(), Params(expected_pages={"16GB": 1, "huge": 3, "2MB": -1}))
    missing = by_subject(findings, "hugepages-16777216kB")
    assert missing.status is Status.FAIL and "hugepagesz=16G" in missing.remediation
    params = by_subject(findings, "params")
    assert params.status is Status.WARN and "'huge': 3" in params.summary and "'2MB': -1" in params.summary


def test_expected_pages_not_a_mapping() -> None:
    params = Params(expected_pages=[2048, 16])  # type: ignore[arg-type]
    bad = by_subject(hugepages.evaluate(facts(), params), "params")
    assert bad.status is Status.WARN and "[2048, 16]" in bad.summary


def test_unreadable_pool() -> None:
    bad = by_subject(hugepages.evaluate(facts([pool(total=None)]), P), "hugepages-2048kB")
    assert bad.status is Status.WARN and "unreadable" in bad.summary


def test_per_node_imbalance() -> None:
    nodes = {0: (1000, 1000), 1: (200, 200), 250: (0, 0)}
    f = facts([pool(2048, total=1200, free=1200, resv=0, per_node=nodes)])
    node = by_subject(hugepages.evaluate(f, Params(expected_pages={"2MB": 1200})), "hugepages-2048kB-nodes")
    assert node.status is Status.WARN and node.fix == "hugepages"
    assert "unbalanced (node 0 1000, node 1 200)" in node.summary
    assert "250" not in node.summary  # a GPU memory node holds no CPUs and no pool
    assert node.evidence[f"{NODE}/node1/hugepages/hugepages-2048kB/nr_hugepages"] == "200 (free 200)"
    assert f"echo 600 > {NODE}/nodeN/hugepages/hugepages-2048kB/nr_hugepages" in node.remediation


def test_per_node_exhausted_and_balanced() -> None:
    exhausted = facts([pool(2048, total=200, free=100, resv=0, per_node={0: (100, 0), 1: (100, 100)})])
    node = by_subject(hugepages.evaluate(exhausted, P), "hugepages-2048kB-nodes")
    assert node.status is Status.WARN and "no free pages left on node 0" in node.summary
    balanced = facts([pool(2048, total=200, free=200, resv=0, per_node={0: (100, 100), 1: (100, 100)})])
    ok = by_subject(hugepages.evaluate(balanced, P), "hugepages-2048kB-nodes")
    assert ok.status is Status.OK and ok.summary == "2 MiB pool balanced across nodes: node 0 100, node 1 100"
    unreadable = facts([pool(2048, total=200, free=200, resv=0, per_node={0: (None, None), 1: (100, 100)})])
    assert by_subject(hugepages.evaluate(unreadable, P), "hugepages-2048kB-nodes").status is Status.WARN


def test_no_pools_is_skipped() -> None:
    none = by_subject(hugepages.evaluate(facts([]), P), "hugetlb")
    assert none.status is Status.SKIPPED and none.evidence == {HUGE: "(absent)"}


def test_problems_are_reported() -> None:
    f = with_memory(facts(), problems=[f"{HUGE}/hugepages-2048kB/nr_hugepages: unparsable value 'x'"])
    problem = by_subject(hugepages.evaluate(f, P), "consistency")
    assert problem.status is Status.WARN
    assert problem.evidence == {f"{HUGE}/hugepages-2048kB/nr_hugepages": "unparsable value 'x'"}


def test_size_kb() -> None:
    assert [hugepages.size_kb(k) for k in (2048, "2048kB", "2MB", "2M", "2MiB", "1GB", "1g", "64KB")] == [
        2048,
        2048,
        2048,
        2048,
        2048,
        1048576,
        1048576,
        64,
    ]
    assert [hugepages.size_kb(k) for k in ("huge", "0", 0, -5, "2TB")] == [None, None, None, None, None]


# -- collect on hand-built trees --------------------------------------------------------------------


def test_collect_tree(tmp_path: Path) -> None:
    files = {
        f"{THP}/enabled": "[always] madvise never\x00",
        f"{THP}/defrag": "[always] defer defer+madvise madvise never\n",
        f"{HUGE}/hugepages-2048kB/nr_hugepages": "512\n",
        f"{HUGE}/hugepages-2048kB/free_hugepages": "512\n",
        f"{HUGE}/hugepages-2048kB/resv_hugepages": "0\n",
        f"{HUGE}/hugepages-2048kB/surplus_hugepages": "0\n",
        f"{HUGE}/hugepages-1048576kB/nr_hugepages": "two\n",
        f"{HUGE}/hugepages-1048576kB/free_hugepages": "0\n",
        "/sys/devices/system/cpu/online": "0-3\n",
        f"{NODE}/node0/cpulist": "0-1\n",
        f"{NODE}/node0/meminfo": "Node 0 MemTotal:  1048576 kB\n",
        f"{NODE}/node1/cpulist": "2-3\n",
        f"{NODE}/node1/meminfo": "Node 1 MemTotal:  1048576 kB\n",
        f"{NODE}/node0/hugepages/hugepages-2048kB/nr_hugepages": "512\n",
        f"{NODE}/node0/hugepages/hugepages-2048kB/free_hugepages": "512\n",
        f"{NODE}/node1/hugepages/hugepages-2048kB/nr_hugepages": "0\n",
        f"{NODE}/node1/hugepages/hugepages-2048kB/free_hugepages": "0\n",
    }
    f = hugepages.collect(make_tree(tmp_path, files))
    assert f.memory.thp_enabled == "always" and f.memory.thp_defrag == "always"
    assert f.cpu_nodes == [0, 1]
    small, big = f.memory.pools
    assert (small.total, small.free, small.per_node) == (512, 512, {0: (512, 512), 1: (0, 0)})
    assert (big.total, big.free, big.reserved) == (None, 0, None)
    findings = hugepages.evaluate(f, Params(expected_pages={"2MB": 512}))
    assert by_subject(findings, "thp").status is Status.OK
    assert by_subject(findings, "thp-defrag").status is Status.WARN
    assert by_subject(findings, "hugepages-2048kB").status is Status.OK
    assert by_subject(findings, "hugepages-2048kB-nodes").status is Status.WARN
    assert by_subject(findings, "hugepages-1048576kB").status is Status.WARN
    assert by_subject(findings, "consistency").evidence == {
        f"{HUGE}/hugepages-1048576kB/nr_hugepages": "unparsable value 'two'"
    }


def test_collect_empty_tree(tmp_path: Path) -> None:
    findings = hugepages.CHECK.run(make_tree(tmp_path, {}), P)
    assert [(f.subject, f.status) for f in findings] == [("thp", Status.SKIPPED), ("hugetlb", Status.SKIPPED)]


def test_declared_paths() -> None:
    paths = hugepages.CHECK.paths
    assert f"{HUGE}/hugepages-*/resv_hugepages" in paths
    assert f"{NODE}/node*/hugepages/hugepages-*/free_hugepages" in paths
    assert f"{THP}/defrag" in paths and f"{NODE}/node*/cpulist" in paths
