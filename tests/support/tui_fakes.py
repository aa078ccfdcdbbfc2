"""A fake Backend for the TUI's pilot tests: slow checks that stream, an UNKNOWN finding, a check
that fails, plans with changes, an apply that records what it was given (and saves its process
settings in a profile kept in memory, which revert restores), a benchmark that reports progress,
a verify whose blocks of A/B trials go through nodeagent's own sequential loop (ab.run_trials: the
estimates, the looks and a disturbed block left out are the real ones), a history of verify
decisions, and a fleet with a dead host. Real types throughout (Finding, Plan, BenchResult,
ProfileVerdict, Record, FleetReport), so the screens render exactly what the engine would give
them."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeagent import checks as check_registry
from nodeagent.api.check import Check
from nodeagent.api.report import HostError
from nodeagent.api.tune import Change, Plan, Scope, Write
from nodeagent.bench import ab, run, stats
from nodeagent.bench import verify as verifying
from nodeagent.bench.paired import Estimate
from nodeagent.bench.run import QUICK, BenchResult, ConfigResult, Progress
from nodeagent.cluster.report import FleetReport
from nodeagent.cluster.runner import HostOutcome
from nodeagent.cluster.ssh import UNREACHABLE
from nodeagent.compare.fleet import Drift, FleetComparison, Outlier
from nodeagent.core.errors import UsageError
from nodeagent.core.finding import Finding, Status, documents
from nodeagent.engine import CheckResult
from nodeagent.tui.backend import SavedProfile
from nodeagent.tuning import profile as profiles
from nodeagent.tuning.apply import ApplyResult
from nodeagent.tuning.history import Record
from nodeagent.tuning.journal import Journal

# The ids a plain run has: the registry's, less the on-demand ones (what `nodeagent check` runs).
CHECK_IDS = tuple(c.id for c in check_registry.select())
PROFILE_PATH = Path("/var/lib/nodeagent/profiles/default.json")  # shown only: the fake writes no file
HISTORY_PATH = Path("/var/lib/nodeagent/history.jsonl")  # shown only: the fake's history is a list

FINDINGS: dict[str, list[Finding]] = {
    "cstates": [
        Finding(
            "cstates",
            Status.WARN,
            "deep C-state C6 (exit latency 133 us) is enabled",
            {"/sys/devices/system/cpu/cpu0/cpuidle/state3/latency": "133"},
            "no state above 10 us while training",
            "limit C-states (c-states tuner) or intel_idle.max_cstate=1",
            subject="cpuidle",
            fix="c-states",
        )
    ],
    "numa": [
        Finding(
            "numa", Status.OK, "2 NUMA nodes, memory balanced", {"/sys/devices/system/node": "node0 node1"}
        )
    ],
    "hugepages": [
        Finding(
            "hugepages",
            Status.FAIL,
            "transparent huge pages never",
            {"/sys/kernel/mm/transparent_hugepage/enabled": "always madvise [never]"},
            "madvise or always",
            "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled",
            subject="thp",
            fix="thp",
        )
    ],
    "kernel": [
        Finding("kernel", Status.OK, "swappiness 10", {"/proc/sys/vm/swappiness": "10"}, subject="swappiness")
    ],
    "threads": [
        Finding(
            "threads",
            Status.UNKNOWN,
            "cgroup cpu.max unparsable",
            {"/sys/fs/cgroup/cpu.max": "max banana"},
            remediation="report it with a snapshot",
            subject="cgroup",
        )
    ],
    "pcie": [Finding("pcie", Status.OK, "every GPU link at x16 16 GT/s", subject="links")],
    "topology": [Finding("topology", Status.SKIPPED, "no GPU", subject="matrix")],
    "gpu": [Finding("gpu", Status.SKIPPED, "no NVIDIA GPU (NVML absent)", subject="nvml")],
    "nvlink": [Finding("nvlink", Status.SKIPPED, "no GPU", subject="links")],
    "nic": [
        Finding(
            "nic",
            Status.OK,
            "eth0 up at 100000 Mb/s",
            {"/sys/class/net/eth0/speed": "100000"},
            subject="eth0",
        )
    ],
    "rdma": [Finding("rdma", Status.SKIPPED, "no RDMA device", subject="ports")],
}

FACTS: dict[str, Any] = {
    "host": "gpu-node-07",
    "source": "local",
    "topology": {
        "cpu_model": "AMD EPYC 7763 64-Core Processor",
        "packages": 2,
        "cores": 128,
        "threads_per_core": 2,
        "cpus_online": list(range(256)),
        "numa_nodes": [
            {"id": 0, "cpus": list(range(64)) + list(range(128, 192)), "memory_mib": 515000, "distances": {}},
            {
                "id": 1,
                "cpus": list(range(64, 128)) + list(range(192, 256)),
                "memory_mib": 516000,
                "distances": {},
            },
        ],
    },
    "gpus": [
        {"index": 0, "pci_address": "0000:07:00.0", "numa_node": 0},
        {"index": 1, "pci_address": "0000:0f:00.0", "numa_node": 1},
    ],
    "nics": [{"name": "ib0", "speed_mbps": 200000}],
    "rdma": [{"device": "mlx5_0", "port": 1, "state": "ACTIVE"}],
    "kernel": {"release": "5.15.0-91-generic"},
    "dmi": {"bios_vendor": "AMI", "bios_version": "2.3a", "bios_date": "01/12/2024"},
    "nvidia_smi_topo": {
        "devices": ["GPU0", "GPU1", "NIC0"],
        "links": {
            "GPU0": {"GPU0": "X", "GPU1": "SYS", "NIC0": "PXB"},
            "GPU1": {"GPU0": "SYS", "GPU1": "X", "NIC0": "SYS"},
            "NIC0": {"GPU0": "PXB", "GPU1": "SYS", "NIC0": "X"},
        },
        "numa_affinity": {"GPU0": "0", "GPU1": "1"},
    },
}


def plans() -> list[Plan]:
    return [
        Plan(
            "thp",
            [
                Change(
                    "thp",
                    "transparent_hugepage/enabled",
                    "never",
                    "madvise",
                    Scope.RUNTIME,
                    "large tensors in 2 MiB pages",
                    (Write("/sys/kernel/mm/transparent_hugepage/enabled", "never", "madvise"),),
                )
            ],
        ),
        Plan(
            "tf-threads",
            [
                Change(
                    "tf-threads",
                    "env TF_NUM_INTRAOP_THREADS",
                    "(unset)",
                    "64",
                    Scope.PROCESS,
                    "one thread per physical core of the rank's NUMA node",
                    profile_key="env.TF_NUM_INTRAOP_THREADS",
                    value="64",
                )
            ],
        ),
        Plan(
            "c-states",
            [Change("c-states", "kernel command line", "", "intel_idle.max_cstate=1", Scope.BOOT, "advice")],
        ),
        Plan("numa-balancing", notes=["already off"]),
    ]


def bench_result() -> BenchResult:
    """A benchmark's result whose bound and fractions nodeagent.bench.run computes from the configs'
    figures, as after a run: stage bound min(1553, 1668) = 1553; CPU budget 2 CPUs / (0.0011 +
    0.0009) CPU-s per image = 1000, the bound; naive 530 / 1000 = 0.53 of it. The stages, which
    wait on no input (the worker reports none), have a CPU cost instead."""

    def config(name: str, median: float, cpu_s: float | None = None) -> ConfigResult:
        summary = stats.Summary(median, (median * 0.96, median * 1.04), 9, 3)
        wait = None if name in run.STAGES else 0.1
        return ConfigResult(
            name, "ok", summary=summary, input_wait_fraction=wait, cpu_seconds_per_image=cpu_s
        )

    configs = {
        "naive": config("naive", 530.0),
        "autotune": config("autotune", 869.0),
        "tuned": config("tuned", 894.0),
        "input_only": config("input_only", 1553.0, 0.0011),
        "compute_only": config("compute_only", 1668.0, 0.0009),
    }
    bound = run.bounds(configs, cpus=2)
    run.finish(configs, bound)
    verdicts = {
        "tuned_vs_naive": {
            "verdict": stats.FASTER,
            "ratio": 1.69,
            "ratio_ci95": [1.5, 1.8],
            "reason": "faster",
        },
        "tuned_vs_autotune": {
            "verdict": stats.SAME,
            "ratio": 1.03,
            "ratio_ci95": [0.92, 1.16],
            "reason": "same",
        },
    }
    return BenchResult(configs, bound, verdicts, True, 12.0, QUICK, "default")


# The fake verify's blocks: log(B/A) of each counted block, in order. Not decided at the first look
# (7 pairs: the interval still holds 1), decided at the second (10 pairs: B is 3.6% faster). The
# tests' figures are these values' Hodges-Lehmann estimate and exact signed-rank intervals, worked
# out apart from nodeagent (Walsh averages; the null distribution over all 2**n sign patterns).
VERIFY_VALUES = (0.05, -0.02, 0.04, 0.03, -0.01, 0.06, 0.02, 0.05, 0.04, 0.03)
VERIFY_DISTURBED = 4  # this block is disturbed by other processes: left out and run again
VERIFY_A_RATE = 880.0  # images/s of side A in every block
VERIFIED_AT = "2026-11-23T12:30:00Z"  # the fake's record: a fixed time, for the snapshots


class FakeWorkload:
    """Blocks of one A and one B trial whose rates give VERIFY_VALUES; block VERIFY_DISTURBED ran
    while other processes took 40% of the CPUs (the loop leaves it out and runs the block again)."""

    label = "built-in tf.data + XLA benchmark"
    metric = ab.IMAGES

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.values = iter(VERIFY_VALUES)
        self.trials = 0

    def block(self, number: int, order: tuple[str, str], switch: ab.Switch, on_trial: ab.TrialFn) -> ab.Block:
        time.sleep(self.delay_s)
        disturbed = number == VERIFY_DISTURBED
        value = 0.09 if disturbed else next(self.values)
        rates = {ab.A: VERIFY_A_RATE, ab.B: VERIFY_A_RATE * math.exp(value)}
        out = ab.Block(number, order)
        for side in order:
            switch(side)
            self.trials += 1
            busy = 0.4 if disturbed else 0.02
            trial = ab.Trial(self.trials, number, side, rates[side], 1.5, interference=busy)
            out.trials.append(trial)
            on_trial(trial)
        out.value = math.log(rates[ab.B] / rates[ab.A])
        if disturbed:
            out.disturbed = "other processes used 40% of the CPU time while the block ran"
        return out

    def close(self) -> None:
        return None


def history_records() -> list[Record]:
    """Three decisions, oldest first: a change kept, a change reverted, a whole profile measured."""

    def decided(
        when: str, command: list[str] | None, change: str, outcome: tuple[str, str], figures: str
    ) -> Record:
        verdict, decision = outcome
        ratio, lo, hi, pairs = (float(f) for f in figures.split())
        return Record(
            time=when,
            node="gpu-node-07",
            command=command,
            profile="default",
            change=change,
            settings={},
            runtime=[],
            metric=ab.STEPS if command else ab.IMAGES,
            pairs=int(pairs),
            ratio=ratio,
            interval=(lo, hi),
            level=0.9833,
            verdict=verdict,
            decision=decision,
            reason=f"{verdict}: B/A = {ratio:.3f}",
            wall_s=600.0,
        )

    train = ["python", "train.py", "--epochs", "1", "--data", "/scratch/imagenet/train"]
    return [
        decided("2026-11-20T09:12:03Z", train, "tf-threads", (stats.FASTER, "kept"), "1.084 1.052 1.117 11"),
        decided("2026-11-20T09:30:40Z", train, "thp", (stats.SAME, "reverted"), "0.996 0.981 1.012 16"),
        decided("2026-11-22T14:02:11Z", None, "profile", (stats.FASTER, "measured"), "1.051 1.030 1.073 7"),
    ]


def fleet_report(on_done: Callable[[HostOutcome], None], delay_s: float) -> FleetReport:
    outcomes: dict[str, HostOutcome] = {}
    for i in range(1, 9):
        name = f"node{i:02d}"
        if i == 5:
            outcome = HostOutcome(
                name, f"10.0.0.{i}", error=HostError(UNREACHABLE, "no answer from 10.0.0.5:22 within 3s")
            )
        else:
            status = "WARN" if i == 3 else "OK"
            findings = [d | {"host": name} for d in documents(FINDINGS["kernel"])]
            if i == 3:
                findings.append(documents(FINDINGS["hugepages"])[0] | {"host": name, "status": "WARN"})
            outcome = HostOutcome(name, f"10.0.0.{i}", {"status": status, "findings": findings, "checks": []})
        outcome.duration_s = 0.5
        time.sleep(delay_s)
        on_done(outcome)
        outcomes[name] = outcome
    comparison = FleetComparison(
        7,
        [
            Drift(
                key="kernel.release",
                majority="5.15.0-91-generic",
                majority_hosts=6,
                hosts={"node03": "5.15.0-88-generic"},
            )
        ],
        [
            Outlier(
                key="topology.memory_total_mib",
                host="node07",
                value=250000.0,
                median=1031000.0,
                mad=1000.0,
                score=-526.6,
                direction="low",
            )
        ],
    )
    return FleetReport(outcomes, comparison, 1.0)


@dataclass
class FakeBackend:
    """`delay_s` between checks (findings stream in), `fail_checks` makes the check run raise.
    A plain run runs the registry's default selection, asked when it starts (so a check a test adds
    to the registry runs too), each check giving its `findings` (none when not listed there)."""

    delay_s: float = 0.05
    read_only: str | None = None
    cluster: str | None = "hosts.yml"
    fail_checks: bool = False
    findings: dict[str, list[Finding]] = field(default_factory=lambda: FINDINGS)
    fail_bench: str | None = None
    applied: list[list[Plan]] = field(default_factory=list)
    reverted: list[str] = field(default_factory=list)
    gate: threading.Event | None = None  # when set, checks wait for it (to look at a half-run state)
    profile: dict[str, Any] | None = None  # the saved profile (None: no file); apply saves into it
    profile_error: str | None = None  # reading the profile raises this (a corrupt file)
    # The profile before each apply since the last revert: the fake's one journal restores the first.
    profile_before: list[dict[str, Any] | None] = field(default_factory=list)
    fail_verify: str | None = None  # verify raises this UsageError (no profile, no TensorFlow)
    fail_history: str | None = None  # reading the history raises this UsageError (a corrupt line)
    records: list[Record] = field(default_factory=history_records)  # the history; verify appends

    @property
    def name(self) -> str:
        return "gpu-node-07"

    @property
    def tune_read_only(self) -> str | None:
        return self.read_only

    @property
    def cluster_source(self) -> str | None:
        return self.cluster

    def facts(self) -> dict[str, Any]:
        return FACTS

    def checks(self) -> Sequence[Check[Any, Any]]:
        return check_registry.select()  # as LocalBackend's without a playbook

    def run_checks(self, only: Sequence[str] = ()) -> Iterator[CheckResult]:
        if self.fail_checks:
            raise RuntimeError("the node's /sys is not mounted")
        for i, cid in enumerate(only or [c.id for c in check_registry.select()]):
            if self.gate is not None and i == 3:
                self.gate.wait(10)
            time.sleep(self.delay_s)
            yield CheckResult(cid, cid, self.findings.get(cid, []), self.delay_s)

    def plans(self) -> list[Plan]:
        return plans()

    def apply(self, plans: list[Plan]) -> ApplyResult:
        self.applied.append(plans)
        j = Journal(
            "20261123-120000-abcd",
            {"kind": "local"},
            "2026-11-23T12:00:00Z",
            "applied",
            path=Path("/tmp/j.json"),
        )
        # As apply.apply: process and code settings are merged into the profile.
        settings = [
            (c.profile_key, c.value)
            for p in plans
            for c in p.changes
            if c.scope in (Scope.PROCESS, Scope.CODE) and c.profile_key
        ]
        saved = None
        if settings:
            self.profile_before.append(self.profile)
            self.profile = profiles.merged(self.profile or {}, settings, "default", self.name)
            saved = PROFILE_PATH
        return ApplyResult(j, saved, [Finding("tune", Status.OK, "thp: madvise read back")])

    def saved_profile(self) -> SavedProfile | None:
        if self.profile_error is not None:
            raise UsageError(self.profile_error)
        return None if self.profile is None else SavedProfile("default", PROFILE_PATH, self.profile)

    def journals(self) -> list[Journal]:
        return [Journal("20261123-120000-abcd", {"kind": "local"}, "2026-11-23T12:00:00Z", "applied")]

    def revert(self, journal_id: str) -> list[Finding]:
        self.reverted.append(journal_id)
        if self.profile_before:
            self.profile = self.profile_before[0]
            self.profile_before.clear()
        return [Finding("revert", Status.OK, "restored transparent_hugepage/enabled = never")]

    def bench(self, quick: bool, on_progress: Callable[[Progress], None]) -> BenchResult:
        if self.fail_bench:
            raise RuntimeError(self.fail_bench)
        for step in range(1, 11):
            time.sleep(self.delay_s / 5)
            on_progress(Progress("naive", 1, 1, step, 10, step / 10))
        return bench_result()

    def verify(
        self, quick: bool, on_block: Callable[[ab.Block, Estimate | None], None]
    ) -> verifying.ProfileVerdict:
        if self.fail_verify:
            raise UsageError(self.fail_verify)
        job = verifying.Job(quick=quick)
        workload = FakeWorkload(self.delay_s / 5)
        result = ab.run_trials(workload, job.limits(), lambda side: None, on_block=on_block)
        # The fake's trials take no time: its wall time is what they claim, the same on any machine.
        result.wall_s = sum(t.wall_s for b in result.blocks for t in b.trials)
        settings = {"env.TF_NUM_INTRAOP_THREADS": "64"}
        out = verifying.ProfileVerdict("default", job, result, settings, [], HISTORY_PATH)
        measured = verifying.MEASURED
        recorded = verifying.record(job, self.name, "default", "profile", result, measured, settings, [])
        self.records.append(recorded.model_copy(update={"time": VERIFIED_AT}))
        return out

    def history(self) -> list[Record]:
        if self.fail_history:
            raise UsageError(self.fail_history)
        return list(self.records)

    def run_cluster(self, on_done: Callable[[HostOutcome], None]) -> FleetReport:
        return fleet_report(on_done, self.delay_s)
