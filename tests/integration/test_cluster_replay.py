"""The controller's central path on worker processes gives what one process gives: the same fleet
document from run_fleet on 1 or 2 processes and from replay_fleet on the same recorded pulls, each
host's own result when a worker process dies under another, and the pull's two ways of loading
the recorder on a node (compiled here, or compiled there) record the same tree."""

from __future__ import annotations

import marshal
import os
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from nodeagent import checks
from nodeagent.api.report import HostError
from nodeagent.cluster import pull, ssh
from nodeagent.cluster.inventory.load import HostSpec, load_inventory
from nodeagent.cluster.report import FleetReport
from nodeagent.cluster.runner import CheckJob, HostOutcome, replay_fleet, run_fleet
from nodeagent.core import pool
from nodeagent.core.finding import Status
from nodeagent.host import LocalHost, open_host, recorder
from nodeagent.host.local import TreeHost
from tests.support import fakefleet
from tests.support.golden_docs import stable

# Four hosts, three machines (two alike, so the fleet comparison has a majority to hold to).
FLEET = {
    "node01": "40intel64-2g2n4c+pcilocality",
    "node02": "40intel64-2g2n4c+pcilocality",
    "node03": "16em64t-4s2c2t-offlines",
    "node04": "2arm-2c",
}

pytestmark = [
    pytest.mark.skipif(not pool.can_fork(), reason="worker processes are forked: not on this OS"),
]


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("replay")


@pytest.fixture(scope="module")
def job() -> CheckJob:
    return CheckJob(checks.select())


@pytest.fixture(scope="module")
def streams(job: CheckJob, trees: Path) -> dict[str, bytes]:
    """Each host's pull stream, as its node would have sent it (the recorder and its encoding)."""
    patterns, commands = job.declared()
    out = {}
    for name, machine in FLEET.items():
        with open_host(fakefleet.recorded_root(machine, trees)) as host:
            assert isinstance(host, TreeHost)
            rec = recorder.record(host, patterns, commands)
            out[name] = recorder.encode(rec, recorder.metadata(host, patterns, commands, ""))
    return out


def fleet_doc(outcomes: dict[str, HostOutcome]) -> Any:
    return stable(FleetReport.build(outcomes, 0.0).to_dict())


def test_two_worker_processes_give_the_document_of_one(
    trees: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job: CheckJob
) -> None:
    inventory = load_inventory(fakefleet.install(monkeypatch, FLEET, trees, tmp_path / "hosts.yml"))
    alone = run_fleet(inventory, job, processes=1)
    spread = run_fleet(inventory, job, processes=2)
    assert all(o.ok for o in spread.values()), {n: o.error for n, o in spread.items()}
    assert fleet_doc(spread) == fleet_doc(alone)
    assert list(spread) == list(FLEET)  # inventory order, whatever order the workers finished in
    assert all(o.values is not None for o in spread.values())  # computed on the workers


def test_replaying_recorded_pulls_gives_the_document_of_the_ssh_path(
    trees: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job: CheckJob, streams: dict[str, bytes]
) -> None:
    inventory = load_inventory(fakefleet.install(monkeypatch, FLEET, trees, tmp_path / "hosts.yml"))
    over_ssh = run_fleet(inventory, job, processes=1)
    specs = [HostSpec(name, name) for name in FLEET]  # fakefleet's inventory: each name its address
    for processes in (1, 2):
        replayed = replay_fleet(streams, job, processes=processes, hosts=specs)
        assert fleet_doc(replayed) == fleet_doc(over_ssh)


def test_precomputed_values_are_what_the_report_would_compute(
    job: CheckJob, streams: dict[str, bytes]
) -> None:
    outcomes = replay_fleet(streams, job, processes=1)
    without = {name: HostOutcome(o.name, o.address, o.doc, o.facts) for name, o in outcomes.items()}
    assert FleetReport.build(outcomes, 0.0).to_dict() == FleetReport.build(without, 0.0).to_dict()


class _DiesOn(CheckJob):
    """A job whose worker process dies (as if killed) while it checks one host."""

    def evaluate(self, spec: HostSpec, stream: bytes) -> HostOutcome:
        if spec.name == "node02":
            os._exit(3)
        return super().evaluate(spec, stream)


def test_a_dead_worker_costs_its_own_hosts_and_no_other(streams: dict[str, bytes]) -> None:
    job = _DiesOn(checks.select())
    # Two workers: node01 and node03 on the first, node02 and node04 on the second.
    outcomes = replay_fleet(streams, job, processes=2, parallel=2)
    assert outcomes["node01"].ok and outcomes["node03"].ok
    error = outcomes["node02"].error
    assert error is not None and error.kind == ssh.CONTROLLER
    assert "no result for node02" in error.message and "exit code 3" in error.message
    # node04 ran beside node02 on the dying worker: done before, or named like it.
    other = outcomes["node04"].error
    assert other is None or other.kind == ssh.CONTROLLER
    assert FleetReport.build(outcomes, 0.0).summary().by_status[Status.FAIL] >= 1


def test_a_worker_that_stops_answering_is_stopped_and_named() -> None:
    def share(items: Sequence[int]) -> Iterator[tuple[int, int]]:
        for i, item in enumerate(items):
            if item == 1:
                time.sleep(60)
            yield i, item * 10

    got = dict(pool.in_processes([0, 1, 2, 3], share, 2, quiet_s=1.0))
    assert got[0] == 0 and got[2] == 20
    assert isinstance(got[1], pool.Lost) and "gave nothing for 1s" in got[1].reason
    assert isinstance(got[3], pool.Lost)  # after the stuck one on the same worker


def test_host_errors_cross_the_pipe_from_the_workers() -> None:
    def share(items: Sequence[str]) -> Iterator[tuple[int, HostOutcome]]:
        for i, name in enumerate(items):
            yield i, HostOutcome(name, name, error=HostError(ssh.AUTH, f"{name} refused"))

    got = dict(pool.in_processes(["a", "b"], share, 2, quiet_s=30))
    outcome = got["a"]
    assert isinstance(outcome, HostOutcome)
    assert outcome.error == HostError(ssh.AUTH, "a refused")


@pytest.mark.parametrize("compiled", [True, False])
def test_the_recorder_compiled_here_or_on_the_node_records_the_same(compiled: bool) -> None:
    paths = [
        "/proc/sys/kernel/osrelease",
        "/sys/devices/system/cpu/cpu*/topology/core_id",
        "/proc/self/limits",
    ]
    sent = pull.payload(paths, [("uname", "-r")], 10.0)
    if not compiled:  # as a node with another interpreter sees it: its bytecode does not match
        doc = marshal.loads(zlib.decompress(sent))
        doc["compiled"]["magic"] = b"\0\0\0\0"
        sent = zlib.compress(marshal.dumps(doc, 4))
    proc = subprocess.run(
        ["/bin/sh", "-c", pull.command(sys.executable)], input=sent, capture_output=True, check=False
    )
    assert proc.returncode == 0, proc.stderr.decode()
    pulled = pull.read(proc.stdout)
    here = recorder.record(LocalHost(), paths, [("uname", "-r")])
    assert (pulled.dirs, pulled.links) == (here.dirs, here.links)
    assert {p: d for p, d in pulled.files.items() if p != "/nodeagent.json"} == here.files


def test_reading_a_pull_stops_at_the_size_limit_and_names_a_cut_stream(streams: dict[str, bytes]) -> None:
    stream = streams["node01"]
    assert pull.read(stream).files == recorder.decode(stream).files
    with pytest.raises(ValueError, match="NODEAGENT_MAX_RECORDING_MIB"):
        pull.read(stream, cap=1000)
    with pytest.raises(ValueError, match="truncated or corrupt"):
        pull.read(stream[: len(stream) // 2])
    with pytest.raises(ValueError, match="not a nodeagent recording"):
        pull.read(b"{}")
