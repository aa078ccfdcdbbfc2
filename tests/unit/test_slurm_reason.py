"""The Slurm drain reason (nodeagent/render/slurm.py) as `sinfo -R` shows it: nothing at all for a
node that may run the job; else one line, at most the field's length, of whole words: the first
refusing finding's subject and summary (the default REASON column keeps 20 characters: the first 40
must name it), then how many more there are, never an evidence key."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.api.report import Verdict
from nodeagent.core.finding import Finding, Status
from nodeagent.engine import CheckResult, Report
from nodeagent.gate import judge
from nodeagent.render import jsonout
from nodeagent.render.slurm import ALLOWED, clean, slurm_lines, slurm_reason
from tests.support import corpus
from tests.support.cli import RunCli

HEAD = "nodeagent: "
SINFO = 40  # the characters that must carry the failing subject


def finding(check_id: str, status: Status, subject: str, summary: str, **kw: Any) -> Finding:
    return Finding(check_id, status, summary, subject=subject, host="gpu-07", **kw)


def document(
    *results: CheckResult, playbook: str | None = "preflight", verdict: Verdict | None = None
) -> dict[str, Any]:
    """A run's document as `--format json` prints it (and a reader loads it back)."""
    report = Report("gpu-07", list(results), 1.0, 0.5)
    doc = judge.document(report, None, None, verdict)
    if playbook is not None:
        doc["playbook"] = playbook
    loaded: dict[str, Any] = json.loads(jsonout.dumps(doc))
    return loaded


_REASON = re.compile(r"nodeagent: (.*?) (FAIL|UNKNOWN|WARN)(?:: (.*?))?(?: \+(\d+) more)?")


def parts(reason: str) -> tuple[str, str, str, int]:
    """(subject, status, summary, more) of a reason."""
    m = _REASON.fullmatch(reason)
    assert m is not None, reason
    return m.group(1), m.group(2), m.group(3) or "", int(m.group(4) or 0)


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
    """The playbook's threshold on the kernel check's memlock value, where no kernel finding carries
    it (nodeagent.gate.fold folds it into one that does)."""
    key = "check.kernel.memlock./proc/self/limits soft"
    return finding("playbook", status, key, f"{key} = 64 KiB, expected unlimited", evidence={key: "64 KiB"})


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


def threads_warn() -> CheckResult:
    warn = finding("threads", Status.WARN, "OMP_NUM_THREADS", "OMP_NUM_THREADS=64 oversubscribes 8 CPUs")
    return CheckResult("threads", "Threads", [warn], 0.01)


def test_the_first_fail_with_its_summary_and_the_count_of_the_rest() -> None:
    doc = document(
        CheckResult("kernel", "Kernel settings", [memlock(Status.FAIL)], 0.01),
        threads_warn(),
        CheckResult("rdma", "RDMA ports", [port_down()], 0.01),
        CheckResult("numa", "NUMA", [finding("numa", Status.OK, "layout", "1 node")], 0.01),
    )
    reason = slurm_reason(doc)
    assert reason == (
        "nodeagent: kernel/memlock FAIL: memlock limited (soft 64 KiB, hard 64 KiB): RDMA registration fails "
        "beyond it +1 more"
    )
    assert len(reason) <= 120 and set(reason) <= ALLOWED
    assert "threads" not in reason and "WARN" not in reason  # a WARN beside FAILs is not counted


def test_a_threshold_on_a_checks_value_is_that_checks_problem_once() -> None:
    doc = document(
        CheckResult("kernel", "Kernel settings", [memlock(Status.WARN)], 0.01),
        CheckResult("rdma", "RDMA ports", [port_down()], 0.01),
        CheckResult("playbook", "thresholds", [memlock_threshold(Status.FAIL), port_threshold()], 0.01),
    )
    reason = slurm_reason(doc)
    subject, status, summary, more = parts(reason)
    # rdma/mlx5_0/1 (the check's and the threshold's) and kernel/memlock (the threshold's): two.
    assert (subject, status, more) == ("rdma/mlx5_0/1", "FAIL", 1)
    assert summary == "port mlx5_0/1 is DOWN (phys_state Disabled): no traffic on this rail"
    assert "check." not in reason and "playbook/" not in reason and "[" not in reason


def test_a_threshold_alone_is_named_by_its_check_never_by_its_key() -> None:
    doc = document(CheckResult("playbook", "thresholds", [memlock_threshold(Status.FAIL)], 0.01))
    reason = slurm_reason(doc)
    assert reason == "nodeagent: kernel/memlock FAIL: /proc/self/limits soft = 64 KiB, expected unlimited"


def test_a_long_summary_is_cut_between_words() -> None:
    words = "the link trained at x8 where the slot and the card both support x16 lanes " * 4
    doc = document(CheckResult("pcie", "PCIe", [finding("pcie", Status.FAIL, "0000:17:00.0", words)], 0.01))
    for max_len in (40, 60, 80, 120, 200):
        reason = slurm_reason(doc, max_len)
        assert len(reason) <= max_len, reason
        subject, _, summary, _ = parts(reason)
        assert subject == "pcie/0000:17:00.0"
        assert words.startswith(summary) and words[len(summary)] == " ", (max_len, reason)


def test_checks_cut_at_the_budget_are_named_by_id() -> None:
    cut = CheckResult(
        "nvlink",
        "NVLink",
        [finding("nvlink", Status.UNKNOWN, "", "NVLink: cut at the run's budget of 1s")],
        1.0,
        timed_out=True,
    )
    crashed = CheckResult(
        "gpu", "GPU health", [finding("gpu", Status.UNKNOWN, "", "GPU health: the check failed (boom)")], 0.1
    )
    reason = slurm_reason(document(cut, crashed, threads_warn()))
    assert reason == "nodeagent: nvlink UNKNOWN: timed out +1 more"


def test_a_node_that_may_run_the_job_has_no_reason() -> None:
    ok = CheckResult("numa", "NUMA", [finding("numa", Status.OK, "layout", "1 node")], 0.01)
    assert slurm_reason(document(ok)) == ""
    assert slurm_reason(document(ok, threads_warn())) == ""  # a WARN refuses only under --fail-on warn
    assert slurm_lines(document(ok, threads_warn())) == ""
    allowed = Verdict(allowed=True, fail_on="fail", reason="no finding at FAIL/UNKNOWN")
    assert slurm_reason(document(ok, threads_warn(), verdict=allowed)) == ""
    refused_at_warn = Verdict(allowed=False, fail_on="warn", reason="1 WARN")
    reason = slurm_reason(document(ok, threads_warn(), verdict=refused_at_warn))
    assert reason == "nodeagent: threads/OMP_NUM_THREADS WARN: OMP_NUM_THREADS=64 oversubscribes 8 CPUs"


SUBJECTS = st.text(alphabet="abcdefxyz019/._-:, ", min_size=0, max_size=20)
SUMMARIES = st.text(alphabet="abcxyz019 .,:;()%=-/'\"$`", min_size=0, max_size=200)


def _shown(check_id: str, subject: str) -> str:
    """A finding's name as the reason shows it: check/subject in Slurm-safe characters, a comma (the
    separator of Slurm's lists) as a space."""
    name = clean(f"{check_id}/{subject.strip()}") if subject.strip() else check_id
    return " ".join(name.replace(",", " ").split())


@settings(max_examples=200, deadline=None)
@given(
    findings=st.lists(
        st.tuples(
            st.sampled_from(["gpu", "rdma", "kernel", "nic"]),
            SUBJECTS,
            st.sampled_from(list(Status)),
            SUMMARIES,
        ),
        min_size=1,
        max_size=12,
    ),
    max_len=st.integers(min_value=40, max_value=200),
)
def test_the_reason_is_the_first_refusing_finding_in_whole_words(
    findings: list[tuple[str, str, Status, str]], max_len: int
) -> None:
    results = [
        CheckResult(cid, cid, [finding(cid, status, subject, summary)], 0.01)
        for cid, subject, status, summary in findings
    ]
    reason = slurm_reason(document(*results), max_len)
    refusing = [(c, sj, s, sm) for c, sj, s, sm in findings if s in (Status.FAIL, Status.UNKNOWN)]
    if not refusing:
        assert reason == ""
        return
    assert len(reason) <= max_len and set(reason) <= ALLOWED and "\n" not in reason
    worst = max((s for _, _, s, _ in refusing), key=lambda s: s.rank)
    first = next(f for f in refusing if f[2] is worst)
    name = _shown(first[0], first[1])
    names = {_shown(c, sj) for c, sj, _, _ in refusing}
    subject, status, summary, more = parts(reason)
    assert status == worst.value
    assert more == len(names) - 1 or (more == 0 and len(names) == 1)
    if subject == name:
        # Whole words of the summary, from its start (a headline naming the subject may be left out).
        words = clean(first[3]).split()
        shown = summary.split()
        assert any(words[i : i + len(shown)] == shown for i in range(len(words) + 1)), (reason, first)
    else:
        assert name.startswith(subject) and not summary  # a name too long for the field: cut


def test_a_recorded_gpu_node_through_preflight(tmp_path: Path, run_cli: RunCli) -> None:
    """The real command on a recorded V100 with uncorrectable ECC errors (FAIL) and a lifetime count
    (WARN): the GPU first, by its PCI address."""
    tree = corpus.build_tree(corpus.load("smi-openpai-v100-sxm3-dbe-retired-pages"), tmp_path / "tree")
    argv = ["preflight", "--root", str(tree), "--playbook", "gpu-training", "--format", "slurm"]
    proc = run_cli(*argv)
    assert proc.returncode == 2, proc.stderr
    reason = proc.stdout.strip()
    assert proc.stdout.count("\n") == 1
    assert reason.startswith("nodeagent: gpu/0000:34:00.0 FAIL: "), reason
    assert "0000:34:00.0" in reason[:SINFO] and reason.count("gpu/0000:34:00.0") == 1
    assert "lifetime" not in reason  # the WARN's headline


def test_an_allowed_node_prints_nothing(tmp_path: Path, run_cli: RunCli) -> None:
    """The real command on a recorded node the preflight playbook allows: exit 0 and no output, so
    the prolog drains exactly when there is a line."""
    tree = corpus.build_tree(corpus.load("sysfs-ghw-xeon-l5640-2socket"), tmp_path / "tree")
    argv = ["preflight", "--root", str(tree), "--playbook", "preflight", "--format", "slurm"]
    proc = run_cli(*argv)
    assert (proc.returncode, proc.stdout) == (0, ""), (proc.stdout, proc.stderr)
