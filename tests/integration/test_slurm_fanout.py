"""`nodeagent check|tune --slurm` against a real Slurm cluster (tests/support/slurmcluster.py: slurmctld,
munged and a slurmd per node, each node a network and UTS namespace nK).

nodeagent runs here as on a login node, with the cluster's SLURM_CONF; the nodes run this
repository's nodeagent (--agent) as a job step, and read a recorded machine (--root, passed to
them), so every node's result is known: what `nodeagent check --root` gives here. A stopped slurmd
fails its node alone, both while slurmctld still has the node up (the task launch fails there) and
once it has marked it DOWN; a drained node is UNKNOWN, not run.

`bench --slurm` is not run here: its cheapest form (--quick) trains for about a minute per node,
which on this 2-CPU machine is several minutes for the cluster. Its path is tune's (on_slurm).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.app import fleet as fleets
from nodeagent.app.check import CheckRequest
from nodeagent.cluster import slurm
from tests.support.cli import run_cli
from tests.support.measured import run_measured
from tests.support.paths import FIXTURES
from tests.support.slurmcluster import SlurmCluster, slurm_available

SLURM_REASON = slurm_available()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group(name="slurm_fanout"),
    pytest.mark.skipif(SLURM_REASON is not None, reason=f"no Slurm test cluster: {SLURM_REASON}"),
]

NODEAGENT = str(Path(sys.executable).with_name("nodeagent"))
MACHINE = str(FIXTURES / "hwloc" / "40intel64-2g2n4c+pcilocality.tar.bz2")
COMMAND_TIMEOUT_S = 180
# slurmctld marks a silent slurmd DOWN after SlurmdTimeout (10 s in the test cluster), pinging it
# every third of that.
DOWN_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    with SlurmCluster(3, tmp_path_factory.mktemp("slurm-fanout")) as built:
        yield built


@pytest.fixture
def in_service(cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """The cluster with every node IDLE before and after the test (a test that stops a slurmd or
    drains a node puts it back), and no job of nodeagent's left pending or running."""
    yield cluster
    queue = subprocess.run(
        ["squeue", "--noheader", "--states=PENDING,RUNNING", "--format=%i %j %T"],
        capture_output=True,
        text=True,
        env=cluster.env,
        timeout=60,
        check=True,
    )
    assert queue.stdout.strip() == "", f"jobs left: {queue.stdout}"
    for node in cluster.nodes:
        cluster.start_slurmd(node)
    cluster.resume_all()
    for node in cluster.nodes:
        cluster.wait_for(node, lambda state, _: state == "IDLE", DOWN_TIMEOUT_S)


def nodeagent(
    cluster: SlurmCluster, *args: str, agent: str | Path = NODEAGENT, env: dict[str, str] | None = None
) -> tuple[int, dict[str, Any], str]:
    done = run_cli(
        *args,
        "--agent",
        str(agent),
        "--format",
        "json",
        env=cluster.env if env is None else env,
        timeout=COMMAND_TIMEOUT_S,
        process=True,
    )
    assert done.stdout, f"exit {done.returncode}, no output; stderr: {done.stderr}"
    return done.returncode, json.loads(done.stdout), done.stderr


@pytest.fixture(scope="module")
def local_report() -> dict[str, Any]:
    """What nodeagent gives for the recorded machine here: every node reads the same."""
    done = subprocess.run(
        [NODEAGENT, "check", "--root", MACHINE, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    doc: dict[str, Any] = json.loads(done.stdout)
    doc["exit_code"] = done.returncode
    return doc


def findings(doc: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return [(f["check_id"], f["subject"], f["status"], f["summary"]) for f in doc["findings"]]


def test_check_on_a_partition_gives_each_node_its_own_result(
    in_service: SlurmCluster, local_report: dict[str, Any]
) -> None:
    code, doc, stderr = nodeagent(in_service, "check", "--slurm", in_service.partition, "--root", MACHINE)
    assert code == local_report["exit_code"], stderr
    assert list(doc["hosts"]) == in_service.nodes == ["n1", "n2", "n3"]
    for name, host in doc["hosts"].items():
        assert (host["host"], host["hostname"]) == (name, local_report["host"])
        assert host["status"] == local_report["status"]
        assert findings(host) == findings(local_report)
        assert {f["host"] for f in host["findings"]} == {name}
    assert doc["summary"]["unreachable"] == 0 and doc["drift"] == [] and doc["outliers"] == []
    assert doc["slurm"]["kind"] == "partition" and doc["slurm"]["partition"] == in_service.partition
    assert isinstance(doc["slurm"]["job_id"], int)


def test_a_nodelist_selects_its_nodes(in_service: SlurmCluster, local_report: dict[str, Any]) -> None:
    code, doc, stderr = nodeagent(in_service, "check", "--slurm", "n[1,3]", "--root", MACHINE)
    assert code == local_report["exit_code"], stderr
    assert list(doc["hosts"]) == ["n1", "n3"]
    assert (doc["slurm"]["kind"], doc["slurm"]["partition"]) == ("nodelist", in_service.partition)


def test_tune_plans_on_every_node(in_service: SlurmCluster) -> None:
    local = json.loads(
        subprocess.run(
            [NODEAGENT, "tune", "--root", MACHINE, "--format", "json"],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=True,
        ).stdout
    )
    code, doc, stderr = nodeagent(in_service, "tune", "--slurm", in_service.partition, "--root", MACHINE)
    assert code == 0, stderr
    assert list(doc["hosts"]) == in_service.nodes
    for host in doc["hosts"].values():
        assert (host["status"], host["exit_code"]) == ("OK", 0)
        assert [p["tuner"] for p in host["plans"]] == [p["tuner"] for p in local["plans"]]
        assert host["plans"] == local["plans"]


def test_a_drained_node_is_not_run_and_unknown(
    in_service: SlurmCluster, local_report: dict[str, Any]
) -> None:
    reason = "fan 3 replaced | ticket 77"
    in_service.scontrol("update", "nodename=n3", "state=drain", f"reason={reason}")
    code, doc, _ = nodeagent(in_service, "check", "--slurm", in_service.partition, "--root", MACHINE)
    n3 = doc["hosts"]["n3"]
    assert n3["status"] == "UNKNOWN" and n3["slurm"] == {
        "ran": False,
        "state": "IDLE+DRAIN",
        "reason": reason,
    }
    assert "drained" in n3["findings"][0]["summary"] and reason in n3["findings"][0]["summary"]
    assert [doc["hosts"][n]["status"] for n in ("n1", "n2")] == [local_report["status"]] * 2
    assert code == 3  # UNKNOWN: nodeagent saw nothing on n3, good or bad


def test_a_stopped_slurmd_fails_its_node_alone_before_and_after_slurm_marks_it_down(
    in_service: SlurmCluster, local_report: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("SLURM_CONF", "PATH"):
        monkeypatch.setenv(key, in_service.env[key])
    # slurmctld still has n2 IDLE: the states are read, then its slurmd stops before the job starts.
    target = slurm.resolve(in_service.partition)
    assert [n.state_text for n in target.nodes] == ["IDLE"] * 3
    in_service.stop_slurmd("n2")
    request = CheckRequest(MACHINE)
    source = fleets.SlurmSource(in_service.partition, NODEAGENT, resolved=target)
    report = fleets.check(source, fleets.FleetCheck(request)).report
    doc = report.to_dict()
    n2 = doc["hosts"]["n2"]
    assert n2["status"] == "FAIL" and n2["error"]["kind"] == "unreachable"
    # The launch failed there (or, had slurmctld pinged it first, it is NOT_RESPONDING).
    assert "n2" in n2["error"]["message"]
    assert "failed on node n2" in n2["error"]["message"] or "not responding" in n2["error"]["message"]
    for name in ("n1", "n3"):
        assert findings(doc["hosts"][name]) and doc["hosts"][name]["status"] == local_report["status"]
    assert report.exit_code == 2

    state, reason = in_service.wait_for("n2", lambda state, _: state.startswith("DOWN"), DOWN_TIMEOUT_S)
    code, doc, _ = nodeagent(in_service, "check", "--slurm", in_service.partition, "--root", MACHINE)
    assert code == 2
    n2 = doc["hosts"]["n2"]
    assert n2["error"] == {
        "kind": "unreachable",
        "message": f"slurmd on n2 is not responding (State={state}, Reason={reason}); start slurmd there",
    }
    assert [doc["hosts"][n]["status"] for n in ("n1", "n3")] == [local_report["status"]] * 2


def write_executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def telling_agent(folder: Path) -> Path:
    """nodeagent on a node, its report naming the machine it ran on (`hostname` in the node's UTS
    namespace; --hostname): which node a report came from, apart from what Slurm calls it."""
    return write_executable(
        folder / "agent", f'#!/bin/sh\nexec {NODEAGENT} "$@" --hostname "ran-on-$(hostname)"\n'
    )


def test_each_report_is_from_its_node_in_any_nodelist_order(
    in_service: SlurmCluster, tmp_path: Path, local_report: dict[str, Any]
) -> None:
    """Task i runs on the i-th node named (--distribution=arbitrary): Slurm's default layout would
    run n3,n1,n2 in slurm.conf's order, and every node would be a mismatch."""
    code, doc, stderr = nodeagent(
        in_service, "check", "--slurm", "n3,n1,n2", "--root", MACHINE, agent=telling_agent(tmp_path)
    )
    assert list(doc["hosts"]) == ["n3", "n1", "n2"], stderr
    assert {name: host.get("hostname") for name, host in doc["hosts"].items()} == {
        name: f"ran-on-{name}" for name in ("n3", "n1", "n2")
    }, stderr
    assert code == local_report["exit_code"]
    assert [host["status"] for host in doc["hosts"].values()] == [local_report["status"]] * 3


def test_a_node_naming_another_is_its_own_error_and_takes_no_other_s_place(
    in_service: SlurmCluster, tmp_path: Path
) -> None:
    """n2's task names n1 (its `sh`, first on the PATH srun passes on, changes SLURMD_NODENAME
    there): n1 keeps its own report and n2 is the mismatch, naming both. Before, n2's report could
    take n1's place, and n2 "did not start a task"."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write_executable(
        bin_dir / "sh",
        '#!/bin/sh\n[ "$SLURMD_NODENAME" = n2 ] && SLURMD_NODENAME=n1\nexec /bin/sh "$@"\n',
    )
    env = {**in_service.env, "PATH": f"{bin_dir}{os.pathsep}{in_service.env['PATH']}"}
    code, doc, stderr = nodeagent(
        in_service,
        "check",
        "--slurm",
        in_service.partition,
        "--root",
        MACHINE,
        agent=telling_agent(tmp_path),
        env=env,
    )
    hosts = doc["hosts"]
    assert [hosts[n].get("hostname") for n in ("n1", "n3")] == ["ran-on-n1", "ran-on-n3"], stderr
    assert hosts["n2"]["error"] == {
        "kind": "remote error",
        "message": f"Slurm ran this task on n2, but its {slurm.NODE_MARK} line names 'n1': its output is "
        "taken for neither node",
    }
    assert code == 2


def measured(argv: list[str], env: dict[str, str]) -> tuple[int, dict[str, Any], str, float]:
    """`argv` run to its end (SIGTERM past COMMAND_TIMEOUT_S: nodeagent then cancels its job): its
    exit code, JSON document, stderr and peak RSS in MB (its own, from wait4)."""
    m = run_measured(argv, env, COMMAND_TIMEOUT_S)
    assert m.stdout, f"exit {m.code}, no output; stderr: {m.stderr}"
    return m.code, json.loads(m.stdout), m.stderr, m.peak_mb


def test_a_node_printing_without_end_is_its_own_error_and_costs_the_limit(
    in_service: SlurmCluster, tmp_path: Path, local_report: dict[str, Any]
) -> None:
    """n1 writes short lines without end straight to its task's stdout (past the node script's
    base64, as any program there can): they count against NODEAGENT_MAX_STDOUT_MIB (1 MiB here),
    past which they are n1's FAIL, discarded, and the step is stopped once the others are done.
    They were kept a string each (1.5 GB in 60 s at the default limit), and the step ran until the
    job's time limit."""
    agent = write_executable(
        tmp_path / "agent",
        '#!/bin/sh\n[ "$(hostname)" = n1 ] && exec yes AA > "/proc/$SLURM_TASK_PID/fd/1"\n'
        f'exec {NODEAGENT} "$@"\n',
    )
    argv = [NODEAGENT, "check", "--slurm", in_service.partition, "--root", MACHINE, "--agent", str(agent)]
    env = {**in_service.env, "NODEAGENT_MAX_STDOUT_MIB": "1"}
    code, doc, stderr, peak_mb = measured([*argv, "--format", "json"], env)
    error = doc["hosts"]["n1"]["error"]
    assert error["kind"] == "remote error" and error["message"].startswith(f"`{agent} check "), stderr
    assert error["message"].endswith(
        " on n1: stdout output larger than 1 MiB (limit NODEAGENT_MAX_STDOUT_MIB); the rest of it was "
        "discarded"
    )
    assert [doc["hosts"][n]["status"] for n in ("n2", "n3")] == [local_report["status"]] * 2
    assert code == 2
    assert peak_mb < 500


def test_a_controller_nodeagent_cannot_reach_is_one_line_and_exit_69(
    in_service: SlurmCluster, tmp_path: Path
) -> None:
    # The cluster's configuration with slurmctld's port moved to one nothing listens on.
    conf = tmp_path / "slurm.conf"
    lines = Path(in_service.env["SLURM_CONF"]).read_text().splitlines()
    conf.write_text(
        "\n".join("SlurmctldPort=9" if ln.startswith("SlurmctldPort=") else ln for ln in lines) + "\n"
    )
    done = subprocess.run(
        [NODEAGENT, "check", "--slurm", in_service.partition],
        capture_output=True,
        text=True,
        env={**in_service.env, "SLURM_CONF": str(conf)},
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    assert (done.returncode, done.stdout) == (69, "")
    assert (
        done.stderr.startswith("nodeagent: error: `sinfo --all --noheader") and done.stderr.count("\n") == 1
    )
    assert "Unable to contact slurm controller" in done.stderr


def test_an_unknown_name_is_bad_input(in_service: SlurmCluster) -> None:
    done = subprocess.run(
        [NODEAGENT, "check", "--slurm", "gpu[01-02]"],
        capture_output=True,
        text=True,
        env=in_service.env,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 64
    assert done.stderr == (
        "nodeagent: error: --slurm 'gpu[01-02]': Slurm has no node gpu01, gpu02 and no partition of that "
        f"name (partitions: {in_service.partition})\n"
    )
