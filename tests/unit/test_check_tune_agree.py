"""Checks and tuners share one judgement, on every recorded machine: the corpus
(tests/fixtures/corpus, trees built by tests/support/corpus.py as `make fixtures` builds them) and hwloc's
trees (tests/fixtures/hwloc, the POWER9 among them).

With default parameters (nothing asked explicitly), on each recording, `nodeagent check` and
`nodeagent tune` must agree:
- a change of the node (RUNTIME, BOOT) or a launcher setting that fixes a finding (the PM QoS limit,
  the memlock soft limit) answers a finding its check does not accept (WARN, FAIL or UNKNOWN);
- every such finding naming a tuner (`fix=`) is answered by that tuner's plan, or declined with why;
- the job settings (numa-pinning's binding, tf-threads' pool sizes) are what the checks accept:
  each GPU's rank bound to the NUMA node the topology check gives that GPU, none on a GPU the check
  finds outside the job's CPU set, and each rank's pool sizes within the threads check's budget.
  pinned-memory's and tf-data's TF settings are judged by no check.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import pytest

from nodeagent.api.tune import Change, Plan, Scope, answered, finding_key
from nodeagent.app import check as check_flow
from nodeagent.app import tune as tune_flow
from nodeagent.checks import threads as threads_check
from nodeagent.checks import topology as topology_check
from nodeagent.core.finding import Finding, Status
from nodeagent.host import SnapshotHost
from nodeagent.tuners import numa_pinning, tf_threads
from tests.support import corpus
from tests.support.helpers import FIXTURE_TREES, fixture_host

pytestmark = pytest.mark.slow  # two full runs (check, tune) on ~90 recordings: some 20 s

# One xdist group per recording: its four tests share one worker, so its check and tune run once.
RECORDINGS = [
    pytest.param(name, marks=pytest.mark.xdist_group(name=f"agree-{name}"))
    for name in [f"corpus/{n}" for n in corpus.names()] + [f"hwloc/{n}" for n in FIXTURE_TREES]
]
NOT_ACCEPTED = (Status.WARN, Status.FAIL, Status.UNKNOWN)
# Launcher settings planned only to fix what a check flags (c-states' PM QoS limit, pinned-memory's
# memlock soft limit): held to the same rule as changes of the node.
FIXES_IN_PROFILE = ("launcher.cpu_dma_latency_us", "launcher.memlock_soft")


@dataclasses.dataclass(frozen=True)
class Judged:
    host: SnapshotHost
    findings: list[Finding]
    plans: dict[str, Plan]

    def not_accepted(self) -> dict[str, Finding]:
        return {finding_key(f.check_id, f.subject): f for f in self.findings if f.status in NOT_ACCEPTED}


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("agree")


@functools.cache
def _judged(name: str, trees: Path) -> Judged:
    """What `nodeagent check` and `nodeagent tune` (their application flows, every check and tuner
    with its defaults) say of one recording."""
    kind, _, recording = name.partition("/")
    if kind == "corpus":
        host = SnapshotHost(corpus.build_tree(corpus.load(recording), trees / recording))
    else:
        host = fixture_host(recording)
    findings = check_flow.run_on(check_flow.CheckRequest(), host).report.findings
    plans = {p.tuner: p for p in tune_flow.plans_on(tune_flow.TuneRequest(), host)}
    return Judged(host, findings, plans)


def _fixes(c: Change) -> bool:
    return c.scope in (Scope.RUNTIME, Scope.BOOT) or c.profile_key in FIXES_IN_PROFILE


@pytest.mark.parametrize("name", RECORDINGS)
def test_a_change_answers_a_finding_its_check_does_not_accept(name: str, trees: Path) -> None:
    j = _judged(name, trees)
    flagged = j.not_accepted()
    for plan in j.plans.values():
        for c in plan.changes:
            assert c.asked is None, f"{c.tuner}: {c.target}: asked by {c.asked} with default parameters"
            if not _fixes(c):
                continue
            hits = [key for key in flagged if answered(key, c.answers)]
            assert hits, (
                f"{c.tuner} plans {c.target} ({c.before} -> {c.after}) but the check accepts it: none of "
                f"{list(c.answers)} is flagged (flagged: {sorted(flagged)})"
            )


@pytest.mark.parametrize("name", RECORDINGS)
def test_a_finding_naming_a_tuner_is_planned_or_declined(name: str, trees: Path) -> None:
    j = _judged(name, trees)
    for key, f in j.not_accepted().items():
        if f.fix is None:
            continue
        plan = j.plans[f.fix]
        planned = any(answered(key, c.answers) for c in plan.changes)
        assert planned or answered(key, list(plan.declined)), (
            f"{key} is {f.status.value} ({f.summary}) and names tuner {f.fix}, whose plan neither "
            f"answers nor declines it: changes {[(c.target, c.answers) for c in plan.changes]}, "
            f"notes {plan.notes}"
        )


@pytest.mark.parametrize("name", RECORDINGS)
def test_ranks_are_bound_where_the_topology_check_places_their_gpus(name: str, trees: Path) -> None:
    j = _judged(name, trees)
    facts = topology_check.collect(j.host)
    nodes = topology_check.gpu_nodes(facts, topology_check.Params())
    outside = set(topology_check.gpus_outside_cpuset(facts, topology_check.Params()))
    entries: list[dict[str, Any]] = j.plans[numa_pinning.ID].details.get("ranks", [])
    for e in entries:
        gpu = e["gpu"]
        if gpu is None:
            continue
        where = f"rank {e['local_rank']} ({gpu}) bound to node {e['numa_node']}, CPUs {e['cpulist']}"
        if gpu in outside:
            # Its node's CPUs are not the job's: not pinned, and no memory binding there either.
            assert e["cpus"] is None and e["numa_node"] is None, f"{where}, outside the job's CPU set"
        else:
            assert e["numa_node"] == nodes.get(gpu), f"{where}; the topology check: node {nodes.get(gpu)}"


@pytest.mark.parametrize("name", RECORDINGS)
def test_pool_sizes_are_what_the_threads_check_accepts(name: str, trees: Path) -> None:
    j = _judged(name, trees)
    envs: dict[int | None, dict[str, str]] = {}
    for c in j.plans[tf_threads.ID].changes:
        key = c.profile_key or ""
        if key.startswith("env."):
            envs.setdefault(None, {})[key.removeprefix("env.")] = str(c.value)
        elif key.startswith("rank_env."):
            _, rank, var = key.split(".", 2)
            envs.setdefault(int(rank), {})[var] = str(c.value)
    shared = envs.pop(None, {})
    facts = threads_check.collect(j.host)
    for rank_env in list(envs.values()) or [{}]:
        env = {**shared, **rank_env}
        if not env:
            continue
        judged = threads_check.evaluate(dataclasses.replace(facts, environ=env), threads_check.Params())
        flagged = [f for f in judged if f.subject in env and f.status is not Status.OK]
        assert flagged == [], f"tf-threads sets {env}; the threads check flags {[f.summary for f in flagged]}"
