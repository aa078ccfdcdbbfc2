"""kernel: recorded hwloc trees, hand-built facts for every branch, and corrupt or partial trees."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from nodeagent.checks import kernel
from nodeagent.checks.kernel import Disk, Facts, Params
from nodeagent.core.finding import Finding, Status
from nodeagent.facts.limits import UNLIMITED, Limit
from nodeagent.host import LocalHost
from tests.support.helpers import FIXTURE_TREES, fixture_host, make_tree

P = Params()
LIMITS = "/proc/self/limits"


def by_subject(findings: list[Finding], subject: str) -> Finding:
    hits = [f for f in findings if f.subject == subject]
    assert len(hits) == 1, [(f.subject, f.summary) for f in findings]
    return hits[0]


# -- recorded trees ------------------------------------------------------------------------------


def test_32em64t_disks() -> None:
    facts = kernel.collect(fixture_host("32em64t-2n8c+dax+nvme+mic+dimms"))
    disks = {d.name: d for d in facts.disks}
    # loop*, ram* are not data disks; partitions (sda1..5, nvme0n1p1) have no queue/.
    assert sorted(disks) == [
        "nvme0n1",
        "pmem0.1",
        "pmem0.2s",
        "pmem0.3",
        "pmem1",
        "pmem1.1s",
        "pmem1.2",
        "sda",
    ]
    sda = disks["sda"]
    assert (sda.path, sda.raw_scheduler, sda.scheduler, sda.rotational) == (
        "/sys/block/sda",
        "noop anticipatory deadline [cfq]",
        "cfq",
        True,
    )
    # This recording lists the NVMe disk only in /sys/class/block; its old bio-based driver prints
    # a bare "none".
    nvme = disks["nvme0n1"]
    assert (nvme.path, nvme.raw_scheduler, nvme.scheduler, nvme.rotational, nvme.kind) == (
        "/sys/class/block/nvme0n1",
        "none",
        "none",
        False,
        "NVMe",
    )
    assert disks["pmem1"].kind == "pmem"
    findings = kernel.evaluate(facts, P)
    io = by_subject(findings, "io-scheduler")
    assert io.status is Status.OK
    assert "nvme0n1 none (NVMe)" in io.summary and "sda cfq (HDD)" in io.summary
    assert io.evidence["/sys/block/sda/queue/scheduler"] == "noop anticipatory deadline [cfq]"
    # Nothing else was recorded: sysctls and limits are SKIPPED with their paths.
    assert by_subject(findings, "vm.swappiness").evidence == {"/proc/sys/vm/swappiness": "(absent)"}
    assert by_subject(findings, "net.core").status is Status.SKIPPED
    assert by_subject(findings, "limits").evidence == {LIMITS: "(absent)"}


def test_40intel64_disks() -> None:
    facts = kernel.collect(fixture_host("40intel64-2g2n4c+pcilocality"))
    # sr0 (the DVD drive) and loop/ram devices are left out.
    assert [(d.name, d.scheduler, d.rotational) for d in facts.disks] == [("sda", "cfq", True)]
    assert facts.block_dirs_present
    io = by_subject(kernel.evaluate(facts, P), "io-scheduler")
    assert io.summary == "IO schedulers: sda cfq (HDD)"


@pytest.mark.parametrize("name", FIXTURE_TREES)
def test_every_tree_decides(name: str) -> None:
    findings = kernel.CHECK.run(fixture_host(name), P)
    assert all(f.check_id == "kernel" and f.summary for f in findings)
    assert not [f for f in findings if f.status is Status.UNKNOWN]
    assert {"vm.swappiness", "net.core", "limits"} <= {f.subject for f in findings}


def test_this_machine() -> None:
    findings = kernel.CHECK.run(LocalHost(), P)
    assert not [f for f in findings if f.status is Status.UNKNOWN]
    assert by_subject(findings, "vm.swappiness").status is not Status.SKIPPED
    assert by_subject(findings, "memlock").status in (Status.OK, Status.WARN)
    assert by_subject(findings, "nofile").status in (Status.OK, Status.WARN)


# -- hand-built facts ------------------------------------------------------------------------------

GOOD_LIMITS = {
    "Max locked memory": Limit(UNLIMITED, UNLIMITED, "bytes"),
    "Max open files": Limit(1048576, 1048576, "files"),
}


def facts(**kw: object) -> Facts:
    base = Facts(
        sysctls={
            "vm.swappiness": "10",
            "net.core.rmem_max": "4194304",
            "net.core.wmem_max": "4194304",
            "net.core.netdev_max_backlog": "250000",
        },
        swap_total_kb=8 << 20,
        block_dirs_present=True,
        disks=[Disk("nvme0n1", "/sys/block/nvme0n1", "none", "[none] mq-deadline", False)],
        limits=GOOD_LIMITS,
        nic_speeds={"lo": None, "ib0": 100000, "eth0": 25000},
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def with_sysctl(name: str, value: str | None) -> Facts:
    base = facts()
    return replace(base, sysctls={**base.sysctls, name: value})


def test_tuned_node_is_all_ok() -> None:
    findings = kernel.evaluate(facts(), P)
    assert {f.status for f in findings} == {Status.OK}
    assert [f.subject for f in findings] == ["vm.swappiness", "net.core", "io-scheduler", "memlock", "nofile"]


def test_swappiness() -> None:
    high = by_subject(kernel.evaluate(with_sysctl("vm.swappiness", "60"), P), "vm.swappiness")
    assert high.status is Status.WARN and "sysctl -w vm.swappiness=10" in high.remediation
    assert high.evidence == {"/proc/sys/vm/swappiness": "60", "/proc/meminfo SwapTotal": "8388608 kB"}
    no_swap = replace(with_sysctl("vm.swappiness", "60"), swap_total_kb=0)
    assert by_subject(kernel.evaluate(no_swap, P), "vm.swappiness").status is Status.OK
    absent = by_subject(kernel.evaluate(with_sysctl("vm.swappiness", None), P), "vm.swappiness")
    assert absent.status is Status.SKIPPED
    garbage = by_subject(kernel.evaluate(with_sysctl("vm.swappiness", "6\x010"), P), "vm.swappiness")
    assert garbage.status is Status.WARN and "unparsable" in garbage.summary


def test_net_core_low_with_fast_nic() -> None:
    base = facts()
    f = replace(
        base, sysctls={**base.sysctls, "net.core.rmem_max": "212992", "net.core.netdev_max_backlog": "1000"}
    )
    net = by_subject(kernel.evaluate(f, P), "net.core")
    assert net.status is Status.WARN
    assert "ib0 at 100000 Mb/s, eth0 at 25000 Mb/s" in net.summary
    assert "net.core.rmem_max 212992 < 4194304" in net.summary
    assert "net.core.netdev_max_backlog 1000 < 250000" in net.summary
    assert "sysctl -w net.core.rmem_max=4194304;" in net.remediation
    assert "sysctl -w net.core.netdev_max_backlog=250000;" in net.remediation
    assert net.evidence["/sys/class/net/ib0/speed"] == "100000"
    assert net.evidence["/proc/sys/net/core/wmem_max"] == "4194304"


def test_net_core_low_without_fast_nic_is_ok() -> None:
    f = replace(with_sysctl("net.core.netdev_max_backlog", "1000"), nic_speeds={"eth0": 10000, "lo": None})
    net = by_subject(kernel.evaluate(f, P), "net.core")
    assert net.status is Status.OK
    assert "fastest: eth0 at 10000 Mb/s" in net.summary
    unknown = replace(f, nic_speeds={})
    assert "no NIC speed readable" in by_subject(kernel.evaluate(unknown, P), "net.core").summary
    # The threshold moves with the parameter.
    strict = by_subject(kernel.evaluate(f, Params(fast_nic_mbps=10000)), "net.core")
    assert strict.status is Status.WARN


def test_net_core_absent_or_garbage() -> None:
    absent = replace(facts(), sysctls={"vm.swappiness": "10"})
    net = by_subject(kernel.evaluate(absent, P), "net.core")
    assert net.status is Status.SKIPPED and net.evidence["/proc/sys/net/core/rmem_max"] == "(absent)"
    garbage = by_subject(kernel.evaluate(with_sysctl("net.core.wmem_max", "lots"), P), "net.core")
    assert garbage.status is Status.WARN and "net.core.wmem_max = 'lots'" in garbage.summary


def test_nvme_with_a_scheduler() -> None:
    disk = Disk("nvme1n1", "/sys/block/nvme1n1", "mq-deadline", "none [mq-deadline] kyber", False)
    f = facts(disks=[disk, Disk("sda", "/sys/block/sda", "bfq", "mq-deadline [bfq] none", True)])
    findings = kernel.evaluate(f, P)
    nvme = by_subject(findings, "nvme1n1")
    assert nvme.status is Status.WARN
    assert nvme.summary == "nvme1n1 (NVMe) uses the mq-deadline IO scheduler; NVMe wants none"
    assert "echo none > /sys/block/nvme1n1/queue/scheduler" in nvme.remediation
    assert 'KERNEL=="nvme[0-9]*n[0-9]*"' in nvme.remediation
    assert nvme.evidence == {
        "/sys/block/nvme1n1/queue/scheduler": "none [mq-deadline] kyber",
        "/sys/block/nvme1n1/queue/rotational": "0",
    }
    # bfq on a rotating disk is its designed use.
    assert by_subject(findings, "io-scheduler").summary == "IO schedulers: sda bfq (HDD)"


def test_ssd_with_bfq_and_unparsable_scheduler() -> None:
    ssd = Disk("sdb", "/sys/block/sdb", "bfq", "mq-deadline [bfq] none", False)
    odd = Disk("sdc", "/sys/block/sdc", None, "mq-deadline bfq", False)
    findings = kernel.evaluate(facts(disks=[ssd, odd]), P)
    assert by_subject(findings, "sdb").status is Status.WARN
    assert "SSD wants none or mq-deadline" in by_subject(findings, "sdb").summary
    assert by_subject(findings, "sdc").status is Status.WARN
    assert "unparsable" in by_subject(findings, "sdc").summary
    assert "io-scheduler" not in [f.subject for f in findings]


def test_no_block_devices() -> None:
    none = by_subject(kernel.evaluate(facts(block_dirs_present=False, disks=[]), P), "io-scheduler")
    assert none.status is Status.SKIPPED and set(none.evidence) == {"/sys/block", "/sys/class/block"}
    virtual = by_subject(kernel.evaluate(facts(disks=[]), P), "io-scheduler")
    assert virtual.status is Status.OK and "no data disks" in virtual.summary


def test_memlock_limited() -> None:
    f = facts(limits={**GOOD_LIMITS, "Max locked memory": Limit(65536, UNLIMITED, "bytes")})
    memlock = by_subject(kernel.evaluate(f, P), "memlock")
    assert memlock.status is Status.WARN and memlock.fix == "pinned-memory"
    assert "soft 64 KiB, hard unlimited" in memlock.summary
    assert "ulimit -l unlimited" in memlock.remediation and "LimitMEMLOCK=infinity" in memlock.remediation
    # The line for people, and the soft and hard limits as values a playbook or baseline compares.
    assert memlock.evidence == {
        LIMITS: "Max locked memory: soft 64 KiB, hard unlimited",
        f"{LIMITS} soft": "64 KiB",
        f"{LIMITS} hard": "unlimited",
    }
    hard = facts(limits={**GOOD_LIMITS, "Max locked memory": Limit(8 << 20, 8 << 20, "bytes")})
    assert "hard limit must be raised" in by_subject(kernel.evaluate(hard, P), "memlock").remediation
    relaxed = by_subject(kernel.evaluate(hard, Params(memlock_unlimited=False)), "memlock")
    assert relaxed.status is Status.OK


def test_memlock_limited_on_a_node_with_rdma_ports_fails() -> None:
    """The one memlock finding (the rdma check leaves it here): with RDMA ports on the node a limit
    makes their memory registration fail, whatever `memlock_unlimited` says."""
    limited = {**GOOD_LIMITS, "Max locked memory": Limit(8 << 20, 8 << 20, "bytes")}
    for params in (P, Params(memlock_unlimited=False)):
        memlock = by_subject(kernel.evaluate(facts(limits=limited, rdma_ports=2), params), "memlock")
        assert memlock.status is Status.FAIL and "on this node's 2 RDMA port(s)" in memlock.summary
    unlimited = by_subject(kernel.evaluate(facts(rdma_ports=2), P), "memlock")
    assert unlimited.status is Status.OK


def test_memlock_from_proc_self_limits_with_an_hca(tmp_path: Path) -> None:
    """/proc/self/limits at 64 KiB (the kernel's default RLIMIT_MEMLOCK before 5.16) on a node with
    one HCA port: FAIL, once."""
    text = (
        "Limit                     Soft Limit           Hard Limit           Units     \n"
        "Max locked memory         65536                65536                bytes     \n"
    )
    port = "/sys/class/infiniband/mlx5_0/ports/1"
    host = make_tree(tmp_path, {LIMITS: text, f"{port}/state": "4: ACTIVE\n", f"{port}/rate": "200 Gb/sec\n"})
    memlock = by_subject(kernel.CHECK.run(host, P), "memlock")
    assert memlock.status is Status.FAIL and "soft 64 KiB, hard 64 KiB" in memlock.summary


def test_nofile_low() -> None:
    f = facts(limits={**GOOD_LIMITS, "Max open files": Limit(1024, 524288, "files")})
    nofile = by_subject(kernel.evaluate(f, P), "nofile")
    assert nofile.status is Status.WARN and nofile.summary.startswith(
        "nofile soft 1024, hard 524288: below 65536"
    )
    assert "ulimit -n 65536" in nofile.remediation
    hard = facts(limits={**GOOD_LIMITS, "Max open files": Limit(1024, 4096, "files")})
    assert "raise the hard limit" in by_subject(kernel.evaluate(hard, P), "nofile").remediation


def test_limits_absent_or_truncated() -> None:
    absent = kernel.evaluate(facts(limits=None), P)
    assert by_subject(absent, "limits").status is Status.SKIPPED
    truncated = kernel.evaluate(facts(limits={}), P)
    assert by_subject(truncated, "memlock").status is Status.WARN
    assert "missing or unparsable" in by_subject(truncated, "nofile").summary


def test_problems_are_reported() -> None:
    f = facts(problems=["/sys/block/sda/queue/rotational: unparsable value 'x'"])
    problem = by_subject(kernel.evaluate(f, P), "consistency")
    assert problem.status is Status.WARN
    assert problem.evidence == {"/sys/block/sda/queue/rotational": "unparsable value 'x'"}


# -- collect on hand-built trees --------------------------------------------------------------------

LIMITS_TEXT = """\
Limit                     Soft Limit           Hard Limit           Units
Max open files            1024                 524288               files
Max locked memory         unlimited            unlimited            bytes
"""


def test_collect_tree(tmp_path: Path) -> None:
    files = {
        "/proc/sys/vm/swappiness": "1\x00\x00",
        "/proc/sys/net/core/rmem_max": "212992\n",
        "/proc/sys/net/core/netdev_max_backlog": "1000\n",
        "/proc/meminfo": "MemTotal:  1000 kB\nSwapTotal:  2048 kB\n",
        "/proc/self/limits": LIMITS_TEXT,
        "/sys/block/nvme0n1/queue/scheduler": "none [mq-deadline] kyber bfq\n",
        "/sys/block/nvme0n1/queue/rotational": "0\n",
        "/sys/block/sda/queue/scheduler": "deadline cfq\n",  # no selection: corrupt
        "/sys/block/sda/queue/rotational": "1\n",
        "/sys/block/sdb/queue/scheduler": "[none] mq-deadline\n",
        "/sys/block/sdb/queue/rotational": "yes\n",
        "/sys/block/zram0/queue/scheduler": "\n",
        "/sys/block/loop0/queue/scheduler": "[none]\n",
        "/sys/block/dm-0/queue/scheduler": "[none]\n",
        "/sys/class/net/ib0/speed": "100000\n",
        "/sys/class/net/eth0/speed": "-1\n",
    }
    f = kernel.collect(make_tree(tmp_path, files))
    assert f.sysctls == {
        "vm.swappiness": "1",
        "net.core.rmem_max": "212992",
        "net.core.wmem_max": None,
        "net.core.netdev_max_backlog": "1000",
    }
    assert f.swap_total_kb == 2048
    assert [(d.name, d.scheduler, d.rotational) for d in f.disks] == [
        ("nvme0n1", "mq-deadline", False),
        ("sda", None, True),
        ("sdb", "none", None),
    ]
    assert f.nic_speeds == {"eth0": None, "ib0": 100000}
    assert f.limits is not None and f.limits["Max open files"] == Limit(1024, 524288, "files")
    assert sorted(f.problems) == [
        "/sys/block/sda/queue/scheduler: unparsable value 'deadline cfq'",
        "/sys/block/sdb/queue/rotational: unparsable value 'yes'",
    ]
    findings = kernel.evaluate(f, P)
    assert by_subject(findings, "vm.swappiness").status is Status.OK
    net = by_subject(findings, "net.core")
    assert net.status is Status.WARN and net.evidence["/proc/sys/net/core/wmem_max"] == "(absent)"
    assert by_subject(findings, "nvme0n1").status is Status.WARN
    assert by_subject(findings, "sda").status is Status.WARN
    assert by_subject(findings, "io-scheduler").summary == "IO schedulers: sdb none (disk)"
    assert by_subject(findings, "memlock").status is Status.OK
    assert by_subject(findings, "nofile").status is Status.WARN
    assert by_subject(findings, "consistency").status is Status.WARN


def test_collect_truncated_limits(tmp_path: Path) -> None:
    f = kernel.collect(make_tree(tmp_path, {"/proc/self/limits": "Limit  Soft Limit  Hard\nMax open fi"}))
    assert f.limits == {}
    findings = kernel.evaluate(f, P)
    assert by_subject(findings, "memlock").status is Status.WARN
    assert by_subject(findings, "nofile").status is Status.WARN


def test_collect_empty_tree(tmp_path: Path) -> None:
    findings = kernel.CHECK.run(make_tree(tmp_path, {}), P)
    assert {f.subject: f.status for f in findings} == {
        "vm.swappiness": Status.SKIPPED,
        "net.core": Status.SKIPPED,
        "io-scheduler": Status.SKIPPED,
        "limits": Status.SKIPPED,
    }


def test_declared_paths() -> None:
    paths = kernel.CHECK.paths
    for p in (
        "/proc/sys/vm/swappiness",
        "/proc/sys/net/core/netdev_max_backlog",
        "/sys/block/*/queue/scheduler",
        "/sys/class/block/*/queue/rotational",
        "/proc/self/limits",
        "/sys/class/net/*/speed",
    ):
        assert p in paths
    assert "/proc/self/environ" not in paths  # the environment is not this check's business


# /proc/self/limits as fs/proc/base.c prints it ("%-25s %-20s %-20s %-10s"), memlock set to
# RLIM_INFINITY rounded down to whole pages: the kernel prints that as a number, not "unlimited".
PAGE_ROUNDED_INFINITY = (
    "Limit                     Soft Limit           Hard Limit           Units     \n"
    "Max cpu time              unlimited            unlimited            seconds   \n"
    "Max open files            1048576              1048576              files     \n"
    "Max locked memory         18446744073708503040 18446744073708503040 bytes     \n"
    "Max realtime timeout      unlimited            unlimited            us        \n"
)


def test_page_rounded_rlim_infinity_is_unlimited() -> None:
    from nodeagent.facts.limits import parse_limits

    limits = parse_limits(PAGE_ROUNDED_INFINITY)
    assert limits["Max locked memory"] == Limit(UNLIMITED, UNLIMITED, "bytes")
    assert limits["Max open files"] == Limit(1048576, 1048576, "files")
    assert limits["Max realtime timeout"].units == "us"


def test_memlock_page_rounded_infinity_is_ok(tmp_path: Path) -> None:
    host = make_tree(tmp_path, {"/proc/self/limits": PAGE_ROUNDED_INFINITY})
    memlock = by_subject(kernel.CHECK.run(host, P), "memlock")
    assert memlock.status is Status.OK
