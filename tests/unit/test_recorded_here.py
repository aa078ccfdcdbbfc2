"""Every check on a node recorded on this project's own machine with `nodeagent snapshot`.

tests/data/firecracker-vm-2cpu.tar.gz: a 2-CPU Firecracker VM (cgroup v1, no cpufreq, no GPU,
virtio NIC), recorded with OMP_NUM_THREADS=4 in nodeagent's environment while two stand-in
training processes ran unpinned with 40 threads and OMP_NUM_THREADS=16 each.
"""

from __future__ import annotations

import pytest

from nodeagent import checks, engine
from nodeagent.core.finding import Finding, Status
from nodeagent.facts import node
from nodeagent.host import SnapshotHost
from tests.support.paths import VM


@pytest.fixture(scope="module")
def findings() -> dict[tuple[str, str], Finding]:
    report = engine.run_report(SnapshotHost(VM), checks.all_checks())
    return {(f.check_id, f.subject): f for f in report.findings}


def test_every_check_reports_and_none_is_unknown(findings: dict[tuple[str, str], Finding]) -> None:
    assert {c for c, _ in findings} == {c.id for c in checks.all_checks()}
    assert not [f for f in findings.values() if f.status is Status.UNKNOWN]


def test_facts_of_the_recorded_vm() -> None:
    doc = node.collect(SnapshotHost(VM))
    assert doc["host"] == "vm"
    assert doc["topology"]["cpus_online"] == [0, 1]
    assert [n["id"] for n in doc["topology"]["numa_nodes"]] == [0]
    assert [(n["name"], n["driver"]) for n in doc["nics"] if n["pci_address"]] == [("eth0", "virtio_net")]
    assert doc["gpus"] == [] and doc["rdma"] == []


@pytest.mark.parametrize(
    ("check", "subject", "status", "text"),
    [
        ("cstates", "cpuidle", Status.OK, "haltpoll"),
        ("cstates", "frequency", Status.SKIPPED, "no cpufreq"),
        ("numa", "layout", Status.OK, "1 NUMA node"),
        ("hugepages", "thp", Status.OK, "madvise"),
        ("kernel", "memlock", Status.WARN, "8 MiB"),
        ("kernel", "nofile", Status.WARN, "20000"),
        ("threads", "OMP_NUM_THREADS", Status.WARN, "OMP_NUM_THREADS=4 oversubscribes the 2"),
        ("threads", "pinning", Status.WARN, "2 training processes share CPUs 0-1"),
        ("pcie", "links", Status.SKIPPED, "6 PCI devices"),
        ("topology", "matrix", Status.SKIPPED, "no GPUs"),
        ("gpu", "gpus", Status.SKIPPED, "no NVIDIA GPU"),
        ("nvlink", "nvlink", Status.SKIPPED, "no NVIDIA GPU"),
        ("nic", "eth0", Status.OK, "virtio_net"),
        ("rdma", "rdma", Status.SKIPPED, "/sys/class/infiniband absent"),
    ],
)
def test_recorded_finding(
    findings: dict[tuple[str, str], Finding], check: str, subject: str, status: Status, text: str
) -> None:
    f = findings[(check, subject)]
    assert f.status is status, f
    assert text in f.summary, f.summary


def test_recorded_training_processes_are_flagged(findings: dict[tuple[str, str], Finding]) -> None:
    per_process = [f for (c, s), f in findings.items() if c == "threads" and s.startswith("pid ")]
    assert len(per_process) == 2
    assert all(f.status is Status.WARN and "OMP_NUM_THREADS=16" in f.summary for f in per_process)
    assert all(f.evidence.get(f"/proc/{f.subject[4:]}/status Threads") == "41" for f in per_process)
