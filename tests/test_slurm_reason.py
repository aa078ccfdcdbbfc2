"""The Slurm drain reason (nodeagent/render/slurm.py) as `sinfo -R` shows it: the failing subjects
first (the default REASON column keeps 20 characters: the first 40 must name them), FAIL findings
only when there is a FAIL, each subject once (a playbook threshold on a check's evidence is that
check's problem), whole subjects when cut, and the playbook at the end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.core.finding import Finding, Status
from nodeagent.engine import CheckResult, Report
from nodeagent.gate import judge
from nodeagent.render import jsonout
from nodeagent.render.slurm import ALLOWED, slurm_reason
from tests import corpus

HEAD = "nodeagent: "
SINFO = 40  # the characters that must carry the failing subjects


def finding(check_id: str, status: Status, subject: str, summary: str, **kw: Any) -> Finding:
    return Finding(check_id, status, summary, subject=subject, host="gpu-07", **kw)


def document(*results: CheckResult, playbook: str | None = "preflight") -> dict[str, Any]:
    """A run's document as `--format json` prints it (and a reader loads it back)."""
    doc = judge.document(Report("gpu-07", list(results), 1.0, 0.5), None, None, None)
    if playbook is not None:
        doc["playbook"] = playbook
    loaded: dict[str, Any] = json.loads(jsonout.dumps(doc))
    return loaded


def names_in(reason: str, status: str) -> list[str]:
    """The subjects a reason names: between "nodeagent: " and the count or the status."""
    assert reason.startswith(HEAD), reason
    head = reason[len(HEAD) : reason.index(f" {status}")]
    return head.split(" (+")[0].split(",")


def memlock(status: Status) -> Finding:
    return finding(
        "kernel",
        status,
        "memlock",
        "memlock limited (soft 64 KiB, hard 64 KiB): RDMA registration fails beyond it",
        evidence={"/proc/self/limits": "Max locked memory: soft 64 KiB, hard 64 KiB"},
        remediation="Set '* hard memlock unlimited' in /etc/security/limits.d/rdma.conf",
    )


def memlock_threshold(status: Status) -> Finding:
    """The playbook's threshold on the kernel check's memlock evidence (nodeagent.gate.thresholds)."""
    key = "check.kernel.memlock./proc/self/limits"
    return finding(
        "playbook",
        status,
        key,
        f"{key} = Max locked memory: soft 64 KiB, hard 64 KiB, expected one of unlimited",
        evidence={key: "Max locked memory: soft 64 KiB, hard 64 KiB"},
    )


def port_down(status: Status = Status.FAIL) -> Finding:
    return finding(
        "rdma",
        status,
        "mlx5_0/1",
        "port mlx5_0/1 is DOWN (phys_state Disabled): no traffic on this rail",
        evidence={"/sys/class/infiniband/mlx5_0/ports/1/state": "1: DOWN"},
    )


def port_threshold() -> Finding:
    """A threshold on a fact of the same port: rdma[mlx5_0/1].state (fleet.host_values's key)."""
    key = "rdma[mlx5_0/1].state"
    return finding(
        "playbook", Status.FAIL, key, f"{key} = DOWN, expected one of ACTIVE", evidence={key: "DOWN"}
    )


def test_fail_and_warn_name_the_fails_only() -> None:
    doc = document(
        CheckResult("kernel", "Kernel settings", [memlock(Status.FAIL)], 0.01),
        CheckResult(
            "threads",
            "Threads",
            [finding("threads", Status.WARN, "OMP_NUM_THREADS", "OMP_NUM_THREADS=64 oversubscribes 8 CPUs")],
            0.01,
        ),
        CheckResult("rdma", "RDMA ports", [port_down()], 0.01),
        CheckResult("numa", "NUMA", [finding("numa", Status.OK, "layout", "1 node")], 0.01),
    )
    reason = slurm_reason(doc)
    assert names_in(reason, "FAIL") == ["kernel/memlock", "rdma/mlx5_0/1"]
    assert "threads" not in reason and "OMP" not in reason and "WARN" not in reason
    assert reason[:SINFO] == "nodeagent: kernel/memlock,rdma/mlx5_0/1 "
    assert reason.startswith("nodeagent: kernel/memlock,rdma/mlx5_0/1 FAIL: memlock limited")
    assert reason.endswith(" (playbook preflight)") and "preflight" not in reason[:SINFO]
    assert len(reason) <= 120 and set(reason) <= ALLOWED


def test_a_threshold_on_a_checks_evidence_is_that_checks_problem() -> None:
    doc = document(
        CheckResult("kernel", "Kernel settings", [memlock(Status.FAIL)], 0.01),
        CheckResult("rdma", "RDMA ports", [port_down()], 0.01),
        CheckResult(
            "playbook", "Playbook thresholds", [memlock_threshold(Status.FAIL), port_threshold()], 0.0
        ),
    )
    reason = slurm_reason(doc)
    assert names_in(reason, "FAIL") == ["kernel/memlock", "rdma/mlx5_0/1"]
    assert reason.count("kernel/memlock") == 1 and reason.count("rdma/mlx5_0/1") == 1
    assert "check." not in reason and "playbook/" not in reason and "[" not in reason
    # The check's own headline, not the threshold's value key.
    assert "FAIL: memlock limited (soft 64 KiB, hard 64 KiB)" in reason


def test_a_threshold_alone_is_named_by_its_check() -> None:
    """The check only warns; the playbook's threshold on its evidence fails: one FAIL, kernel/memlock,
    with the threshold's value as the detail (the key's check and subject left out)."""
    doc = document(
        CheckResult("kernel", "Kernel settings", [memlock(Status.WARN)], 0.01),
        CheckResult("playbook", "Playbook thresholds", [memlock_threshold(Status.FAIL)], 0.0),
    )
    reason = slurm_reason(doc)
    assert reason.startswith("nodeagent: kernel/memlock FAIL: /proc/self/limits = Max locked memory")
    assert reason.count("kernel/memlock") == 1 and "check." not in reason


def test_many_fails_keep_whole_subjects_and_count_the_rest() -> None:
    gpus = [f"0000:{bus:02x}:00.0" for bus in range(0x10, 0x90, 0x10)]
    doc = document(
        CheckResult(
            "gpu",
            "GPU health",
            [finding("gpu", Status.FAIL, bus, f"GPU ({bus}): 1 uncorrectable ECC error(s)") for bus in gpus],
            0.1,
        ),
        CheckResult("rdma", "RDMA ports", [port_down(Status.WARN)], 0.01),
    )
    every = [f"gpu/{bus}" for bus in gpus]
    # At the shortest reason the first subject alone does not fit beside the count: it is cut.
    assert slurm_reason(doc, 40) == "nodeagent: gpu/0000:10:00 (+7 more) FAIL"
    for max_len in (50, 60, 80, 120, 200):
        reason = slurm_reason(doc, max_len)
        assert len(reason) <= max_len and set(reason) <= ALLOWED, reason
        named = names_in(reason, "FAIL")
        assert named == every[: len(named)], reason  # whole subjects, in order
        assert named and named[0] in reason[:SINFO]
        left = len(every) - len(named)
        assert (f"(+{left} more)" in reason) == (left > 0), reason
        assert "rdma" not in reason  # a WARN, beside FAILs
    assert names_in(slurm_reason(doc, 300), "FAIL") == every


def test_unknown_only_names_the_cut_and_crashed_checks() -> None:
    doc = document(
        CheckResult(
            "gpu",
            "GPU health",
            [finding("gpu", Status.UNKNOWN, "", "GPU health: the check failed (NVML)")],
            0.5,
        ),
        CheckResult("nvlink", "NVLink", [finding("nvlink", Status.UNKNOWN, "", "did not finish")], 1.0, True),
        CheckResult("threads", "Threads", [finding("threads", Status.WARN, "pinning", "shared CPUs")], 0.01),
    )
    reason = slurm_reason(doc)
    assert names_in(reason, "UNKNOWN") == ["nvlink", "gpu"]
    assert "timed out" in reason and "threads" not in reason


def test_nothing_to_say_is_ok() -> None:
    doc = document(CheckResult("numa", "NUMA", [finding("numa", Status.OK, "layout", "1 node")], 0.01))
    assert slurm_reason(doc) == "nodeagent: OK (playbook preflight)"
    assert slurm_reason(document(*[], playbook=None)) == "nodeagent: OK"


SUBJECTS = st.text(alphabet="abcdefxyz019/._-:, ", min_size=0, max_size=20)


@settings(max_examples=200, deadline=None)
@given(
    findings=st.lists(
        st.tuples(st.sampled_from(["gpu", "rdma", "kernel", "nic"]), SUBJECTS, st.sampled_from(list(Status))),
        min_size=1,
        max_size=12,
    ),
    max_len=st.integers(min_value=40, max_value=200),
)
def test_names_are_the_worst_status_subjects_each_once(
    findings: list[tuple[str, str, Status]], max_len: int
) -> None:
    results = [
        CheckResult(cid, cid, [finding(cid, status, subject, f"{subject} is bad")], 0.01)
        for cid, subject, status in findings
    ]
    doc = document(*results)
    reason = slurm_reason(doc, max_len)
    assert len(reason) <= max_len and set(reason) <= ALLOWED and reason.startswith(HEAD)
    worst = max((s for _, _, s in findings), key=lambda s: s.rank)
    if worst not in (Status.FAIL, Status.UNKNOWN, Status.WARN):
        assert reason.startswith("nodeagent: OK")
        return
    named = names_in(reason, worst.value)
    assert len(named) == len(set(named)), reason  # each subject once
    expected = {
        " ".join(f"{cid}/{subject.strip()}".replace(",", " ").split()) if subject.strip() else cid
        for cid, subject, status in findings
        if status is worst
    }
    cut = len(named) == 1 and named[0] not in expected  # the first alone did not fit: cut
    assert cut or set(named) <= expected, (reason, expected)


def test_a_recorded_gpu_node_through_preflight(tmp_path: Path) -> None:
    """The real command on a recorded V100 with uncorrectable ECC errors (FAIL) and a lifetime count
    (WARN): the GPU first, by its PCI address."""
    tree = corpus.build_tree(corpus.load("smi-openpai-v100-sxm3-dbe-retired-pages"), tmp_path / "tree")
    argv = ["preflight", "--root", str(tree), "--playbook", "gpu-training", "--format", "slurm"]
    proc = subprocess.run(
        [sys.executable, "-m", "nodeagent", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    reason = proc.stdout.strip()
    assert reason.startswith("nodeagent: gpu/0000:34:00.0"), reason
    assert "0000:34:00.0" in reason[:SINFO] and reason.count("gpu/0000:34:00.0") == 1
    assert "lifetime" not in reason  # the WARN's headline
