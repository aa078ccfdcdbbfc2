"""`--slurm` without daemons: what nodeagent reads from sinfo and srun (recorded on the real test
cluster, tests/fixtures/slurm/fanout/README.md), which nodes it runs, what a node's task gives, and
the whole `check --slurm` flow against Slurm commands that replay those recordings.

The same flow against a real Slurm cluster: tests/integration/test_slurm_fanout.py."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from nodeagent.api.report import FleetDocument, HostError, HostResult, validate
from nodeagent.cluster import slurm
from nodeagent.cluster.ssh import MISSING, REMOTE, UNREACHABLE
from nodeagent.core.errors import UsageError
from nodeagent.core.limits import MiB
from tests.support import slurm_replay
from tests.support.cli import RunCli
from tests.support.paths import FIXTURES

FIXTURES = FIXTURES / "slurm" / "fanout"


def recorded(name: str) -> str:
    return (FIXTURES / name).read_text()


def replay(name: str, nodes: tuple[str, ...], max_stdout: int | None = None) -> slurm.StepOutput:
    """A step's output as nodeagent reads it, line by line from the recorded stdout and stderr; its
    task i ran on `nodes[i]` (the step's --nodelist, as recorded)."""
    out = slurm.StepOutput(nodes) if max_stdout is None else slurm.StepOutput(nodes, max_stdout=max_stdout)
    for line in recorded(f"{name}.stdout").splitlines(keepends=True):
        out.stdout_line(line, 1.0)
    stderr = FIXTURES / f"{name}.stderr"
    if stderr.exists():
        for line in stderr.read_text().splitlines(keepends=True):
            out.stderr_line(line)
    return out


# The nodes of the recorded `srun-check` step, in its --nodelist order (task 0 on n1, task 1 on n3).
CHECKED = ("n1", "n3")


def nodes(name: str) -> dict[str, slurm.SlurmNode]:
    return {n.name: n for n in slurm.parse_nodes(recorded(f"{name}.stdout"))}


# -- sinfo ----------------------------------------------------------------------------------------


def test_partitions_with_their_default_and_time_limit() -> None:
    assert slurm.parse_partitions(recorded("sinfo-partitions.stdout")) == [
        slurm.Partition("test", default=True, max_minutes=10, available="up")
    ]


def test_a_partition_listed_once_per_node_state_is_one_partition() -> None:
    text = "gpu*|1-00:00:00|up\ngpu*|1-00:00:00|up\ndebug|30:00|down\n"
    assert [(p.name, p.max_minutes, p.available) for p in slurm.parse_partitions(text)] == [
        ("gpu", 1440, "up"),
        ("debug", 30, "down"),
    ]


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("infinite", None),
        ("10:00", 10),  # M:SS, as sinfo prints MaxTime=10
        ("0:30", 1),  # seconds round up: the job must fit the limit, not exceed it
        ("1:30:00", 90),
        ("1-02:04:00", 1564),
        ("2-12", 3600),  # D-H, as slurm.conf takes it
        ("45", 45),
        ("n/a", None),
        ("", None),
    ],
)
def test_slurm_time_limits_in_minutes(text: str, minutes: int | None) -> None:
    assert slurm.parse_minutes(text) == minutes


def test_node_states_flags_and_reasons_as_recorded() -> None:
    found = nodes("sinfo-nodes-not-responding-drain-maint")
    assert [(n.name, n.state_text, n.reason, n.partitions) for n in found.values()] == [
        ("n1", "IDLE", None, ("test",)),
        ("n2", "IDLE+NOT_RESPONDING", None, ("test",)),
        # The reason is free text holding the separator: it is the last field, split off whole.
        ("n3", "IDLE+DRAIN", "nodeagent: FAIL gpu/0 | ECC errors", ("test",)),
        ("n4", "IDLE+MAINTENANCE+RESERVED", None, ("test",)),
    ]
    assert found["n1"].address.startswith("10.")


def test_a_node_in_several_partitions_is_one_node() -> None:
    text = "g1|idle|10.0.0.1|gpu*|none\ng1|idle|10.0.0.1|debug|none\ng2|mixed|10.0.0.2|gpu*|none\n"
    found = slurm.parse_nodes(text)
    assert [(n.name, n.partitions) for n in found] == [("g1", ("gpu", "debug")), ("g2", ("gpu",))]


def test_a_line_that_is_not_the_format_asked_for_is_an_error() -> None:
    with pytest.raises(ValueError, match="not NodeList"):
        slurm.parse_nodes("NODELIST   NODES PARTITION STATE\n")


# -- which nodes run ------------------------------------------------------------------------------


def test_a_stopped_slurmd_is_unreachable_before_and_after_slurm_marks_it_down() -> None:
    responding = nodes("sinfo-nodes-not-responding-drain-maint")["n2"]
    down = nodes("sinfo-nodes-down")
    for node in (responding, down["n2"]):
        reason = slurm.unreachable_reason(node)
        assert reason is not None and "slurmd on n2 is not responding" in reason
        assert node.state_text in reason
    assert "Reason=Not responding" in (slurm.unreachable_reason(down["n2"]) or "")


def test_a_node_an_administrator_set_down_is_unreachable_with_the_reason() -> None:
    reason = slurm.unreachable_reason(nodes("sinfo-nodes-down")["n1"])
    assert reason == ("Slurm has n1 DOWN (State=DOWN, Reason=replacing DIMM B2); it starts no task there")


@pytest.mark.parametrize(
    ("fixture", "node", "why"),
    [
        ("sinfo-nodes-not-responding-drain-maint", "n3", "drained"),
        ("sinfo-nodes-not-responding-drain-maint", "n4", "maintenance reservation"),
        ("sinfo-nodes-stopped-not-yet-down", "n1", "busy"),  # held by a job
    ],
)
def test_nodes_slurm_will_not_give_a_job_are_not_run(fixture: str, node: str, why: str) -> None:
    found = nodes(fixture)[node]
    assert slurm.unreachable_reason(found) is None
    reason = slurm.not_run_reason(found)
    assert reason is not None and why in reason and found.state_text in reason


def test_an_idle_node_runs_and_so_does_one_finishing_a_job() -> None:
    assert slurm.not_run_reason(nodes("sinfo-nodes-not-responding-drain-maint")["n1"]) is None
    completing = slurm.parse_nodes("n9|idle+completing|10.0.0.9|gpu|none\n")[0]
    assert slurm.not_run_reason(completing) is None


def test_a_flag_this_module_does_not_know_keeps_the_node_out() -> None:
    node = slurm.parse_nodes("n9|idle+some_future_flag|10.0.0.9|gpu|none\n")[0]
    assert "SOME_FUTURE_FLAG" in (slurm.not_run_reason(node) or "")


def test_a_node_not_run_is_unknown_in_a_host_entry_the_fleet_document_holds() -> None:
    node = nodes("sinfo-nodes-not-responding-drain-maint")["n3"]
    doc = slurm.not_run_doc(node, slurm.not_run_reason(node) or "")
    validate(HostResult, {"address": node.address, **doc}, "n3")
    assert doc["status"] == "UNKNOWN" and doc["slurm"] == {
        "ran": False,
        "state": "IDLE+DRAIN",
        "reason": "nodeagent: FAIL gpu/0 | ECC errors",
    }
    [finding] = doc["findings"]
    assert (
        finding["status"] == "UNKNOWN"
        and "scontrol update nodename=n3 state=resume" in finding["remediation"]
    )


# -- what --slurm names ---------------------------------------------------------------------------


@pytest.fixture
def sinfo_calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The sinfo command lines resolve ran; `sinfo_replay` answers them from the recordings."""
    monkeypatch.setattr(slurm, "tool", lambda name: name)
    return []


def sinfo_replay(calls: list[list[str]]) -> slurm.Runner:
    def run(argv: Any, timeout_s: float) -> Any:
        calls.append(list(argv))
        if any(a.startswith("--format=") for a in argv):
            text = recorded("sinfo-partitions.stdout")
        elif any(a.startswith("--nodes=gpu") for a in argv):
            text = ""  # sinfo lists nothing for a node it does not know
        else:
            text = recorded("sinfo-nodes-not-responding-drain-maint.stdout")
        return subprocess.CompletedProcess(argv, 0, text, "")

    return run


def test_a_partition_name_is_the_partition(sinfo_calls: list[list[str]]) -> None:
    target = slurm.resolve("test", run=sinfo_replay(sinfo_calls))
    assert (target.kind, [n.name for n in target.nodes]) == ("partition", ["n1", "n2", "n3", "n4"])
    assert "--partition=test" in sinfo_calls[-1]


def test_anything_else_is_a_nodelist_in_its_own_order(sinfo_calls: list[list[str]]) -> None:
    target = slurm.resolve("n[3-4],n1", run=sinfo_replay(sinfo_calls))
    assert (target.kind, [n.name for n in target.nodes]) == ("nodelist", ["n3", "n4", "n1"])
    assert "--nodes=n3,n4,n1" in sinfo_calls[-1]
    assert target.partition_for(target.nodes).name == "test"


def test_a_name_that_is_neither_says_what_slurm_has(sinfo_calls: list[list[str]]) -> None:
    with pytest.raises(UsageError, match=r"Slurm has no node gpu01 and no partition .* \(partitions: test\)"):
        slurm.resolve("gpu01", run=sinfo_replay(sinfo_calls))
    with pytest.raises(UsageError, match=r"'n\[1-' is not a partition \(Slurm has test\) and not a nodelist"):
        slurm.resolve("n[1-", run=sinfo_replay(sinfo_calls))


def test_nodes_without_a_common_partition_cannot_share_one_allocation() -> None:
    found = slurm.parse_nodes("a1|idle|10.0.0.1|gpu*|none\nb1|idle|10.0.0.2|cpu|none\n")
    target = slurm.Target("a1,b1", "nodelist", tuple(found), (slurm.Partition("gpu", True, None, "up"),))
    with pytest.raises(UsageError, match="share no partition"):
        target.partition_for(found)


def test_the_default_partition_is_preferred_among_the_shared_ones() -> None:
    found = slurm.parse_nodes("a1|idle|10.0.0.1|debug|none\na1|idle|10.0.0.1|gpu*|none\n")
    partitions = (slurm.Partition("debug", False, 30, "up"), slurm.Partition("gpu", True, None, "up"))
    assert slurm.Target("a1", "nodelist", tuple(found), partitions).partition_for(found).name == "gpu"


def test_an_empty_partition_is_bad_input(sinfo_calls: list[list[str]]) -> None:
    def run(argv: Any, timeout_s: float) -> Any:
        listed = any(a.startswith("--format=") for a in argv)
        return subprocess.CompletedProcess(argv, 0, recorded("sinfo-partitions.stdout") if listed else "", "")

    with pytest.raises(UsageError, match="partition test has no nodes"):
        slurm.resolve("test", run=run)


def test_a_partition_that_is_down_runs_nothing() -> None:
    found = tuple(slurm.parse_nodes("n1|idle|10.0.0.1|test|none\n"))
    target = slurm.Target("test", "partition", found, (slurm.Partition("test", True, 10, "down"),))
    with pytest.raises(slurm.SlurmUnavailable, match="partition test is DOWN in Slurm: it starts no job"):
        slurm.run(target, ["check"], slurm.check_outcome, slurm.Options())


def test_slurm_unreachable_is_one_line_and_exit_69(tmp_path: Path) -> None:
    failing = tmp_path / "sinfo"
    message = "slurm_load_partitions: Unable to contact slurm controller (connect failure)"
    failing.write_text(f"#!/bin/sh\necho '{message}' >&2\nexit 1\n")
    failing.chmod(0o755)
    with pytest.raises(slurm.SlurmUnavailable, match="Unable to contact slurm controller") as caught:
        slurm.run_command([str(failing), "--all"], 10)
    assert caught.value.exit_code == 69


# -- what a step printed --------------------------------------------------------------------------


def test_a_launch_that_fails_on_one_node_names_it_and_the_others_answered() -> None:
    out = replay("srun-probe-launch-failed", ("n1", "n2", "n3"))
    assert sorted(out.by_node()) == ["n1", "n3"]
    assert out.naming("n2") == [
        "srun: error: Task launch for StepId=1.0 failed on node n2: Communication connection failure"
    ]
    assert out.naming("n1") == [] and out.naming("n") == []
    alone = replay("srun-probe-alone-launch-failed", ("n2",))
    assert alone.by_node() == {} and "failed on node n2" in alone.about("n2")


def test_each_node_s_document_and_exit_code() -> None:
    out = replay("srun-check", CHECKED)
    words = ["nodeagent", "check"]
    for node in ("n1", "n3"):
        task = out.by_node()[node]
        doc, exit_code = slurm.task_document(task, node, words)
        assert exit_code == 0 and doc["host"] == "40intel64-2g2n4c+pcilocality"
        assert {c["id"] for c in doc["checks"]} == {"numa", "kernel"} and "facts" in doc


def test_each_task_is_told_when_its_exit_line_comes_and_once() -> None:
    """A fleet's progress tells of a node as its task ends: at its exit line, whole by then (the
    recorded step: task 1's exit line comes first, task 0's after all of its output)."""
    ended: list[tuple[int, int | None, bool]] = []
    out = slurm.StepOutput(CHECKED)

    def settled(label: int) -> None:
        task = out.tasks[label]
        ended.append((label, task.exit_code, bool(task.encoded)))

    out.on_settled = settled
    lines = recorded("srun-check.stdout").splitlines(keepends=True)
    exits = [int(line.split(":")[0]) for line in lines if f" {slurm.EXIT_MARK} " in line]
    for line in [*lines, f"0: {slurm.EXIT_MARK} 0\n"]:  # an exit line again: no second telling
        out.stdout_line(line, 1.0)
    assert ended == [(label, 0, True) for label in exits]
    assert exits == [1, 0]


def test_a_check_report_is_named_by_its_slurm_node() -> None:
    out = replay("srun-check", CHECKED)
    node = slurm.SlurmNode("n3", "10.0.0.3", "IDLE", (), None, ("test",))
    doc, exit_code = slurm.task_document(out.by_node()["n3"], "n3", ["nodeagent", "check"])
    outcome = slurm.check_outcome(node, doc, exit_code)
    assert outcome.ok and outcome.doc is not None and outcome.facts is not None
    assert (outcome.doc["host"], outcome.doc["hostname"]) == ("n3", "40intel64-2g2n4c+pcilocality")
    assert {f["host"] for f in outcome.doc["findings"]} == {"n3"} and "facts" not in outcome.doc


def test_nodeagent_missing_on_the_node_says_how_to_name_it() -> None:
    task = replay("srun-check-agent-missing", ("n1",)).by_node()["n1"]
    with pytest.raises(HostError) as caught:
        slurm.task_document(task, "n1", ["/nonexistent/nodeagent", "check"])
    assert caught.value.kind == MISSING
    assert (
        "/nonexistent/nodeagent: not found" in caught.value.message and "--agent PATH" in caught.value.message
    )


def test_nodeagent_failing_on_the_node_gives_its_own_error_line() -> None:
    task = replay("srun-check-bad-root", ("n3",)).by_node()["n3"]
    with pytest.raises(HostError) as caught:
        slurm.task_document(task, "n3", ["nodeagent", "check", "--root", "/nonexistent"])
    assert caught.value.kind == REMOTE
    assert (
        "exited 64 without JSON: nodeagent: error: /nonexistent: no such file or directory"
        in caught.value.message
    )


def test_a_task_cut_before_its_exit_line_has_no_result() -> None:
    out = slurm.StepOutput(CHECKED)
    for line in recorded("srun-check.stdout").splitlines():
        if slurm.EXIT_MARK not in line:
            out.stdout_line(line)
    out.stderr_line("0: slurmstepd-n1: error: *** STEP 1.3 ON n1 CANCELLED AT 2026-11-26T01:24:09 ***\n")
    with pytest.raises(
        HostError, match=r"ended without an exit code \(killed\?\): slurmstepd-n1: error: \*\*\* STEP"
    ):
        slurm.task_document(out.by_node()["n1"], "n1", ["nodeagent", "check"])


def test_a_document_beyond_the_output_limit_is_that_node_s_error() -> None:
    out = replay("srun-check", CHECKED, max_stdout=1000)
    with pytest.raises(HostError, match="NODEAGENT_MAX_STDOUT_MIB"):
        slurm.task_document(out.by_node()["n1"], "n1", ["nodeagent", "check"])


def test_labels_are_right_aligned_past_nine_tasks() -> None:
    out = slurm.StepOutput(tuple(f"gpu{i:02d}" for i in range(13)))
    out.stdout_line(f" 7: {slurm.NODE_MARK} gpu07\n")
    out.stdout_line(f"12: {slurm.NODE_MARK} gpu12\n")
    out.stderr_line(" 7: a warning on gpu07\n")
    assert sorted(out.by_node()) == ["gpu07", "gpu12"] and list(out.tasks[7].stderr) == ["a warning on gpu07"]


def recorded_output(label: int) -> bytes:
    """What task `label`'s command printed in the recorded `srun-check` step (base64 there)."""
    texts = [
        line.split(": ", 1)[1]
        for line in recorded("srun-check.stdout").splitlines()
        if line.startswith(f"{label}: ")
    ]
    return base64.b64decode("".join(t for t in texts if " " not in t))


def recorded_document(label: int) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(recorded_output(label))
    return doc


def run_step_stdout(tasks: list[tuple[str, dict[str, Any]]]) -> str:
    """A run step's stdout as srun --label prints it, each task's lines in turn: task i's NODE_MARK
    line naming `tasks[i][0]`, its document base64-encoded in 76-character lines (base64(1)'s), its
    exit line (0)."""
    lines = []
    for label, (says, doc) in enumerate(tasks):
        encoded = base64.b64encode(json.dumps(doc).encode()).decode()
        lines.append(f"{label}: {slurm.NODE_MARK} {says}")
        lines += [f"{label}: {encoded[i : i + 76]}" for i in range(0, len(encoded), 76)]
        lines.append(f"{label}: {slurm.EXIT_MARK} 0")
    return "\n".join(lines) + "\n"


def test_a_task_is_the_node_slurm_ran_it_on_whatever_it_prints() -> None:
    """Task 1 ran on n3 (the step's nodelist n1,n3) and names n1: n1 stays task 0's, and n3's
    result is the mismatch, naming both. It used to take n1's place."""
    out = slurm.StepOutput(CHECKED)
    out.stdout_line(f"0: {slurm.NODE_MARK} n1\n")
    out.stdout_line(f"1: {slurm.NODE_MARK} n1\n")
    tasks = out.by_node()
    assert tasks == {"n1": out.tasks[0], "n3": out.tasks[1]}
    with pytest.raises(HostError) as caught:
        slurm.task_document(tasks["n3"], "n3", ["nodeagent", "check"])
    assert (caught.value.kind, caught.value.message) == (
        REMOTE,
        f"Slurm ran this task on n3, but its {slurm.NODE_MARK} line names 'n1': its output is taken "
        "for neither node",
    )


def test_a_later_line_naming_another_node_is_a_mismatch_too() -> None:
    """The node script prints one NODE_MARK line; another one naming another node (written past the
    script, to the step's stdout) is the task's error, not ignored."""
    out = replay("srun-check", CHECKED)
    out.stdout_line(f"1: {slurm.NODE_MARK} n1\n")
    doc, _ = slurm.task_document(out.by_node()["n1"], "n1", ["nodeagent", "check"])
    assert doc == recorded_document(0)
    with pytest.raises(HostError, match=r"Slurm ran this task on n3, but its .* line names 'n1'"):
        slurm.task_document(out.by_node()["n3"], "n3", ["nodeagent", "check"])


def test_a_label_beyond_the_step_s_tasks_is_no_task() -> None:
    out = slurm.StepOutput(("n1",))
    out.stdout_line(f"5: {slurm.NODE_MARK} n1\n")
    out.stderr_line("5: a line from no task of this step\n")
    assert out.by_node() == {} and out.tasks == {}


def test_the_node_script_keeps_the_exit_line_after_the_whole_output(tmp_path: Path) -> None:
    """The command's output goes through base64 and its exit code after it, even when the command
    prints more than a pipe holds and no newline at its end."""
    program = "import sys; sys.stdout.write('x' * 300000); sys.exit(3)"
    env = {**os.environ, "SLURMD_NODENAME": "n9"}
    done = subprocess.run(
        ["sh", "-c", slurm.RUN_SCRIPT, "nodeagent-slurm", sys.executable, "-c", program],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    )  # fmt: skip
    out = slurm.StepOutput(("n9",))
    for line in done.stdout.splitlines():
        out.stdout_line(f"0: {line}")
    task = out.by_node()["n9"]
    assert task.exit_code == 3 and done.stdout.splitlines()[-1] == f"{slurm.EXIT_MARK} 3"
    assert base64.b64decode(task.encoded) == b"x" * 300000


# -- the whole flow, against Slurm commands replaying the recordings ------------------------------


@pytest.fixture
def fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = slurm_replay.install(tmp_path / "bin")
    log = tmp_path / "calls.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_LOG", str(log))
    return log


def test_check_slurm_runs_where_it_can_and_fails_only_the_node_that_did_not_start(
    fake_slurm: Path, run_cli: RunCli
) -> None:
    code, out, err = run_cli("check", "--slurm", "test", "--format", "json", "--quiet")
    doc = json.loads(out)
    validate(FleetDocument, doc, "the fleet document")
    assert code == 2 and err == ""
    hosts = doc["hosts"]
    assert list(hosts) == ["n1", "n2", "n3", "n4"]
    assert (hosts["n1"]["status"], hosts["n3"]["status"], hosts["n3"]["host"]) == ("OK", "OK", "n3")
    assert hosts["n2"]["error"] == {
        "kind": UNREACHABLE,
        "message": "slurmd on n2 did not start a task: srun: error: Task launch for StepId=1.0 failed on "
        "node n2: Communication connection failure",
    }
    assert hosts["n4"]["status"] == "UNKNOWN" and hosts["n4"]["slurm"]["state"] == "IDLE+DRAIN"
    assert doc["slurm"] == {
        "target": "test",
        "kind": "partition",
        "partition": "test",
        "job_id": 1,
        "agent": "nodeagent",
    }
    calls = fake_slurm.read_text().splitlines()
    [salloc] = [c for c in calls if c.startswith("salloc ")]
    # Whole nodes, kept on a node failure, not waiting on a busy cluster, within MaxTime=10.
    for option in (
        "--exclusive",
        "--no-kill",
        "--immediate=30",
        "--time=10",
        "--nodelist=n1,n2,n3",
        "--partition=test",
    ):
        assert option in salloc.split()
    # n2 is named in the shared probe's errors: not probed again; the check runs on n1 and n3 only.
    assert [c.split()[3] for c in calls if c.startswith("srun ")] == ["--nodes=3", "--nodes=2"]
    assert calls[-1].startswith("scancel --name=nodeagent-check-")


def test_each_report_is_under_the_node_slurm_ran_it_on(
    fake_slurm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: RunCli
) -> None:
    """The run step on n1,n3 (n2 failed its probe): task 1, which Slurm ran on n3, names n1, task 0's
    node. n1's report is task 0's and n3 is an error naming both; task 1's report replaced n1's, and
    n3 "did not start"."""
    first, second = recorded_document(0), recorded_document(1)
    first["host"], second["host"] = "machine-of-task-0", "machine-of-task-1"
    (tmp_path / "run.stdout").write_text(run_step_stdout([("n1", first), ("n1", second)]))
    monkeypatch.setenv("FAKE_SRUN_RUN", str(tmp_path / "run"))
    code, out, _ = run_cli("check", "--slurm", "test", "--format", "json")
    hosts = json.loads(out)["hosts"]
    assert (hosts["n1"]["hostname"], hosts["n1"]["status"]) == ("machine-of-task-0", "OK")
    assert hosts["n3"]["error"] == {
        "kind": REMOTE,
        "message": f"Slurm ran this task on n3, but its {slurm.NODE_MARK} line names 'n1': its output "
        "is taken for neither node",
    }
    assert code == 2
    # Task i runs on the i-th node of --nodelist: Slurm's layout, asked for.
    steps = [c.split() for c in fake_slurm.read_text().splitlines() if c.startswith("srun ")]
    assert [s[3] for s in steps] == ["--nodes=3", "--nodes=2"]
    assert {"--distribution=arbitrary", "--nodelist=n1,n3"} <= set(steps[1])


def test_the_table_says_what_slurm_ran(fake_slurm: Path, run_cli: RunCli) -> None:
    code, out, _ = run_cli("check", "--slurm", "n[1-4]", "--agent", "/opt/na/nodeagent", "-v")
    assert code == 2
    assert (
        "slurm: nodes n[1-4] in partition test, job 1: /opt/na/nodeagent ran on 2 of 4 nodes; 1 not"
        in " ".join(out.split())
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["check", "--slurm", "test", "--hosts", "n1"],
            "give one of --cluster FILE, --hosts EXPR",
        ),
        (
            ["check", "--agent", "/x/nodeagent"],
            "--agent names nodeagent on Slurm's nodes: use it with --slurm",
        ),
        (["check", "--slurm", "test", "--limit", "rack1"], "--limit selects from an inventory file"),
        (["check", "--slurm", "test", "--bandwidth"], "--bandwidth measures between hosts over SSH"),
        (
            ["check", "--slurm", "test", "--hostname", "a"],
            "with --slurm each node is named by its Slurm node name",
        ),
        (["bench", "--slurm", "bogus"], "'bogus': Slurm has no node bogus and no partition"),
    ],
)
def test_bad_input_is_one_line_and_exit_64(
    argv: list[str], message: str, fake_slurm: Path, run_cli: RunCli
) -> None:
    code, out, err = run_cli(*argv)
    assert (code, out) == (64, "")
    assert err.startswith("nodeagent: error: ") and message in err and err.count("\n") == 1


def test_without_slurm_s_commands_it_says_which_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: RunCli
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    code, _, err = run_cli("tune", "--slurm", "test")
    assert code == 64 and "--slurm needs Slurm's `sinfo` on PATH" in err


# -- what a node may print: bounded, parsed strictly ---------------------------------------------


class _Endless(io.RawIOBase):
    """A task's stdout as srun passes it on: one line of `size` bytes, then `tail` (the end of that
    line and the task's exit line); made as it is read, so the test itself holds none of it."""

    def __init__(self, size: int, tail: bytes) -> None:
        self.left = size
        self.tail = tail

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.left > 0:
            n = min(len(buffer), self.left)
            buffer[:n] = b"A" * n
            self.left -= n
            return n
        n = min(len(buffer), len(self.tail))
        buffer[:n], self.tail = self.tail[:n], self.tail[n:]
        return n


def test_an_endless_line_costs_the_limit_not_the_line() -> None:
    """A node printing 512 MiB without a newline grew the controller by as much (10-11 GB in 60 s):
    it is dropped as it is read, and what follows it is still read."""
    out = slurm.StepOutput(("n1",))
    stream = io.BufferedReader(_Endless(512 * 1024 * 1024, f"\n0: {slurm.EXIT_MARK} 2\n".encode()))
    tracemalloc.start()
    try:
        slurm._read(stream, out.stdout_line)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * slurm.MAX_LINE_BYTES, peak
    assert out.tasks[0].exit_code == 2


@pytest.mark.parametrize("code", ["²", "٣", "1e3", "-1", "99999", ""])
def test_an_exit_line_that_is_not_an_exit_code_is_ignored(code: str) -> None:
    """`str.isdigit()` takes "²" and "٣", which int() refuses: the reader thread died on them."""
    out = slurm.StepOutput(("n1",))
    out.stdout_line(f"0: {slurm.EXIT_MARK} {code}\n")
    out.stdout_line(f"0: {slurm.EXIT_MARK} 3\n")
    assert out.tasks[0].exit_code == 3


def test_endless_short_lines_cost_the_limit_not_the_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Short lines without end from one node (through a real srun: 1.5 GB in 60 s, a string each)
    are counted whole against NODEAGENT_MAX_STDOUT_MIB and kept a byte a character; past the limit
    what the node printed is dropped and the rest discarded: the node's error, as over SSH."""
    monkeypatch.setenv("NODEAGENT_MAX_STDOUT_MIB", "1")
    out = slurm.StepOutput(("n1", "n2"))
    out.stdout_line(f"0: {slurm.NODE_MARK} n1\n")
    tracemalloc.start()
    try:
        for _ in range(100_000):  # each counts as a full base64 line, 57 bytes: 5.4 MiB
            out.stdout_line(f"0: {'A' * 16}\n")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * MiB, peak
    task = out.tasks[0]
    assert len(task.encoded) == 0
    with pytest.raises(HostError) as caught:
        slurm.task_document(task, "n1", ["nodeagent", "check"])
    assert (caught.value.kind, caught.value.message) == (
        REMOTE,
        "`nodeagent check` on n1: stdout output larger than 1 MiB (limit NODEAGENT_MAX_STDOUT_MIB); "
        "the rest of it was discarded",
    )
    assert not out.done.is_set()  # n2 has yet to finish


def test_a_document_within_the_limit_is_read_whole() -> None:
    """The limit is on what the command printed (base64 is a third more): the recorded document,
    limited to its own size, is read. Each line counts as at least a full base64 line (57 bytes): the
    last, partial one and the node's name and exit lines."""
    out = replay("srun-check", CHECKED, max_stdout=len(recorded_output(0)) + 3 * 57)
    doc, _ = slurm.task_document(out.by_node()["n1"], "n1", ["nodeagent", "check"])
    assert doc == recorded_document(0)
    short = replay("srun-check", CHECKED, max_stdout=len(recorded_output(0)) - 1)
    with pytest.raises(HostError, match="stdout output larger than"):
        slurm.task_document(short.by_node()["n1"], "n1", ["nodeagent", "check"])


def test_a_step_whose_tasks_all_ended_or_passed_the_limit_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Task 0 prints without end, task 1 finishes: once task 0 is past the limit nothing is left to
    read, and the step is stopped (scancel) instead of running until the job's time limit."""
    monkeypatch.setenv("NODEAGENT_MAX_STDOUT_MIB", "1")
    encoded = base64.b64encode(json.dumps(recorded_document(1)).encode()).decode()
    fake = tmp_path / "srun"
    fake.write_text(
        f"#!/bin/sh\necho '0: {slurm.NODE_MARK} n1'\necho '1: {slurm.NODE_MARK} n2'\n"
        f"echo '1: {encoded}'\necho '1: {slurm.EXIT_MARK} 0'\nexec yes '0: AAAA'\n"
    )
    fake.chmod(0o755)
    stops: list[str] = []
    out, timed_out = slurm.step([str(fake)], ["n1", "n2"], 120, lambda: stops.append("scancel"))
    assert (timed_out, stops) == (False, ["scancel"])
    assert out.tasks[0].too_big == MiB and out.done.is_set()
    doc, exit_code = slurm.task_document(out.tasks[1], "n2", ["nodeagent", "check"])
    assert (doc, exit_code) == (recorded_document(1), 0)
