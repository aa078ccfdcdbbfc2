"""tf-threads: size TensorFlow's and OpenMP's thread pools to the CPUs each rank really has.

TensorFlow sizes its intra-op and inter-op pools from every CPU it may run on, and each rank of a
node does so on its own: eight ranks sharing 64 CPUs start 8 x 64 intra-op threads. TF reads
TF_NUM_INTRAOP_THREADS and TF_NUM_INTEROP_THREADS at start-up
(tensorflow/core/common_runtime/process_util.cc, NumIntraOpThreadsFromEnvironment;
https://www.tensorflow.org/api_docs/python/tf/config/threading), and oneDNN/MKL inside it read
OMP_NUM_THREADS. Intel's guidance: intra-op = physical cores, inter-op = sockets, OMP_NUM_THREADS =
physical cores (https://www.intel.com/content/www/us/en/developer/articles/technical/
maximize-tensorflow-performance-on-cpu-considerations-and-recommendations-for-inference.html).

The ranks are those of numa-pinning (nodeagent.facts.ranks). Ranks whose CPU sets overlap (two GPUs
on one NUMA node, bound to the node's full affinity) divide its cores; a rank that could not be
pinned runs on every allowed CPU and divides those with every rank there. A CFS quota caps the sum.
Per-rank values that differ go to the profile's "rank_env.<local_rank>.<VAR>"; uniform ones to
"env.<VAR>".

The sizes are ones the `threads` check accepts (pools within the CPUs a rank has), and each change
names the threads findings it answers: the variable itself, the runtime defaults, the ranks' sum,
and running processes' pools (which a job started by `nodeagent exec` gets from the profile).
MKL_NUM_THREADS and OPENBLAS_NUM_THREADS, which the check also judges, are not set here: where
they are set, the plan declines them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from nodeagent.api.check import param
from nodeagent.api.tune import Change, Plan, Scope, Tuner, check_thread_count, finding_key
from nodeagent.checks import threads as threads_check
from nodeagent.core import parse
from nodeagent.core.errors import UsageError
from nodeagent.facts import limits, ranks
from nodeagent.facts.ranks import RankFacts, RankSlot
from nodeagent.host import Host

ID = "tf-threads"
INTRA = "TF_NUM_INTRAOP_THREADS"
INTER = "TF_NUM_INTEROP_THREADS"
OMP = "OMP_NUM_THREADS"
VARS = (INTRA, INTER, OMP)
# The threads check's findings a pool variable set in the profile answers.
ANSWERS = {
    var: tuple(finding_key(threads_check.ID, subject) for subject in (var, "defaults", "ranks", "pid *"))
    for var in VARS
}
UNSET_HERE = tuple(v for v in threads_check.POOL_VARS if v not in VARS)
INTEL_DOC = (
    "https://www.intel.com/content/www/us/en/developer/articles/technical/"
    "maximize-tensorflow-performance-on-cpu-considerations-and-recommendations-for-inference.html"
)
TF_DOC = "https://www.tensorflow.org/guide/performance/overview"
CONFIG_PROTO = "https://github.com/tensorflow/tensorflow/blob/master/tensorflow/core/protobuf/config.proto"
BWC_DOC = "https://docs.kernel.org/scheduler/sched-bwc.html"

WHY = {
    INTRA: f"one intra-op thread per physical core of the rank, divided among ranks sharing it ({INTEL_DOC})",
    INTER: f"inter-op = sockets/NUMA nodes the rank spans ({INTEL_DOC}), with a floor ({CONFIG_PROTO})",
    OMP: f"oneDNN/MKL's OpenMP pool matches intra-op: one thread per physical core ({INTEL_DOC})",
}


@dataclass(frozen=True)
class Params:
    ranks: int = param(
        0,
        "Local ranks on this node, as for numa-pinning (0 = one per GPU, or per NUMA node without GPUs); "
        f"each rank starts its own pools ({TF_DOC}).",
    )
    cpu_only: bool = param(
        False, "As numa-pinning.cpu_only: ranks per NUMA node even where GPUs exist (CPU jobs)."
    )
    smt: bool = param(
        False,
        "Count SMT siblings as threads (intra-op = logical CPUs); False gives one thread per physical "
        f"core, as Intel recommends for compute-bound TF ({INTEL_DOC}).",
    )
    intra_op: int = param(
        0,
        "TF_NUM_INTRAOP_THREADS (and OMP_NUM_THREADS) of every rank: 0 derives it from the cores; a "
        "positive value forces it, e.g. to compare against the derived size with `nodeagent tune "
        f"--apply --verify` ({TF_DOC}).",
    )
    min_inter_op: int = param(
        threads_check.INTER_OP_FLOOR,
        "Floor for TF_NUM_INTEROP_THREADS: blocking ops (queue/iterator waits, collectives) hold an "
        "inter-op thread while they wait, so one thread serialises every other op behind them "
        f"(inter_op_parallelism_threads in {CONFIG_PROTO}); the threads check accepts this many on any "
        "CPU count.",
    )

    def __post_init__(self) -> None:
        if self.intra_op < 0:
            raise UsageError(
                f"tuner {ID}: intra_op={self.intra_op}: give a thread count, or 0 (derived from the cores)"
            )


@dataclass(frozen=True)
class Facts:
    ranks: RankFacts
    environ: dict[str, str] | None  # of /proc/self/environ (only the variables set here); None: unreadable
    environ_path: str = limits.ENVIRON_PATH
    others: dict[str, str] = field(default_factory=dict)  # pool variables set there that this tuner leaves


def collect(host: Host) -> Facts:
    env = limits.collect_environ(host)
    if env is None:
        return Facts(ranks.collect(host), None)
    others = {k: v for k, v in env.items() if k in UNSET_HERE}
    return Facts(ranks.collect(host), {k: v for k, v in env.items() if k in VARS}, others=others)


@dataclass(frozen=True)
class Threads:
    """What one rank gets, and from what."""

    local_rank: int
    cpus: list[int]  # the CPUs it runs on (its binding, or every allowed CPU when unpinned)
    cores: int  # physical cores among them (logical CPUs with smt, or when SMT is unknown)
    unit: str  # what `cores` counts: "physical core(s)" or "CPU(s)"
    sharing: int  # ranks whose CPUs overlap these, itself included
    nodes: int  # NUMA nodes spanned
    intra: int
    inter: int


def _cores(cpus: list[int], f: RankFacts, smt: bool) -> tuple[int, bool]:
    """(count, known): physical cores among `cpus`, or logical CPUs when asked or when SMT is unknown."""
    core_of = f.topology.core_of
    if smt:
        return len(cpus), True
    if all(c in core_of for c in cpus):
        return len({core_of[c] for c in cpus}), True
    return len(cpus), False


def threads(f: Facts, p: Params) -> tuple[list[Threads], list[str], str | None]:
    """Per-rank pool sizes, notes, and an error when no sizing is possible (pure)."""
    lay = ranks.build(f.ranks, p.ranks, cpu_only=p.cpu_only)
    notes: list[str] = []
    if lay.error:
        return [], notes, lay.error
    if not lay.slots:
        return [], [*lay.notes], "no rank could be placed"
    runs = _runs(lay.slots, f.ranks.allowed, notes)
    if not any(runs):
        return [], [*lay.notes], "no rank's CPUs are known (no CPU list in sysfs, nvidia-smi or the cgroup)"
    node_of = f.ranks.topology.node_of_cpu
    quota = f.ranks.cpus.quota_cpus
    per_rank_quota = None if quota is None else max(1, math.floor(quota / len(lay.slots)))
    out: list[Threads] = []
    unknown_smt = False
    for s, run in zip(lay.slots, runs, strict=True):
        if not run:
            notes.append(f"rank {s.local_rank}: no CPU known: left at the runtime defaults")
            continue
        cores, known = _cores(run, f.ranks, p.smt)
        unknown_smt |= not known
        sharing = sum(1 for other in runs if set(other) & set(run))
        intra = max(1, cores // sharing)
        if per_rank_quota is not None and per_rank_quota < intra:
            intra = per_rank_quota
        if p.intra_op > 0:
            intra = p.intra_op
        spanned = _nodes(s, run, node_of)
        unit = "physical core(s)" if known and not p.smt else "CPU(s)"
        inter = max(p.min_inter_op, spanned)
        out.append(Threads(s.local_rank, run, cores, unit, sharing, spanned, intra, inter))
    if unknown_smt:
        notes.append(
            "SMT siblings unknown (no CPU topology in sysfs here): logical CPUs counted as cores, so "
            "intra-op may be up to 2x the physical cores on SMT machines"
        )
    if p.intra_op > 0:
        notes.append(f"intra-op forced to {p.intra_op} by {ID}.intra_op (derived from the cores otherwise)")
    if per_rank_quota is not None:
        notes.append(
            f"CFS quota {quota:g} CPUs ({f.ranks.cpus.quota_source}) shared by {len(lay.slots)} rank(s): "
            f"at most {per_rank_quota} intra-op thread(s) each ({BWC_DOC})"
        )
    return out, notes, None


def _runs(slots: list[RankSlot], allowed: list[int] | None, notes: list[str]) -> list[list[int]]:
    """The CPUs each rank runs on: its binding, or every allowed CPU when it is not pinned."""
    runs: list[list[int]] = []
    for s in slots:
        run = s.cpus or list(allowed or [])
        if not s.cpus and run:
            notes.append(f"rank {s.local_rank} is not pinned: sized for every allowed CPU it may run on")
        runs.append(run)
    return runs


def _nodes(s: RankSlot, run: list[int], node_of: dict[int, int]) -> int:
    if s.cpus and s.mems:
        return len(s.mems)
    found = {node_of[c] for c in run if c in node_of}
    return max(1, len(found))


def plan(f: Facts, p: Params) -> Plan:
    check_thread_count(ID, "intra_op", p.intra_op, len(f.ranks.topology.cpus_online))
    check_thread_count(ID, "min_inter_op", p.min_inter_op, len(f.ranks.topology.cpus_online))
    sized, notes, error = threads(f, p)
    if error or not sized:
        nothing = f"nothing planned: {error or 'no rank has known CPUs'}"
        return Plan(ID, notes=[nothing, *notes], declined={finding_key(threads_check.ID, "*"): nothing})
    values = {INTRA: {t.local_rank: t.intra for t in sized}, INTER: {t.local_rank: t.inter for t in sized}}
    values[OMP] = dict(values[INTRA])
    why = dict(WHY)
    if p.intra_op > 0:
        forced = f"forced by {ID}.intra_op={p.intra_op} instead of one thread per physical core ({TF_DOC})"
        why[INTRA] = why[OMP] = forced
    changes = [c for var in VARS for c in _var_changes(var, _before(f, var), values[var], why[var])]
    if p.intra_op > 0:  # the sizes the parameter forces, not the ones derived from the cores
        changes = [
            dataclasses.replace(c, asked=f"{ID}.intra_op")
            if (c.profile_key or "").rsplit(".", 1)[-1] in (INTRA, OMP)
            else c
            for c in changes
        ]
    notes += _group_notes(sized)
    notes.append(
        "set in each job's environment by `nodeagent exec` (TensorFlow reads them once, at start-up)"
    )
    details = {
        "threads": [
            {"local_rank": t.local_rank, INTRA: t.intra, INTER: t.inter, OMP: t.intra, "sharing": t.sharing}
            for t in sized
        ]
    }
    declined = {
        finding_key(threads_check.ID, var): f"{var}={value} left as is: {ID} sets {', '.join(VARS)} only"
        for var, value in f.others.items()
    }
    notes += declined.values()
    return Plan(ID, changes, notes, details, declined=declined)


def _var_changes(var: str, before: str, per_rank: dict[int, int], why: str) -> list[Change]:
    """One change of `var` for every rank when all get the same value, else one per rank."""
    if len(set(per_rank.values())) == 1:
        same = str(next(iter(per_rank.values())))
        return [
            Change(
                ID,
                f"env {var}",
                before,
                same,
                Scope.PROCESS,
                why,
                profile_key=f"env.{var}",
                value=same,
                answers=ANSWERS[var],
            )
        ]
    return [
        Change(
            ID,
            f"env {var} (rank {r})",
            before,
            str(n),
            Scope.PROCESS,
            why,
            profile_key=f"rank_env.{r}.{var}",
            value=str(n),
            answers=ANSWERS[var],
        )
        for r, n in sorted(per_rank.items())
    ]


def _group_notes(sized: list[Threads]) -> list[str]:
    """One line per group of ranks on the same CPUs (eight lines on a DGX would say four things twice)."""
    groups: dict[tuple[int, ...], list[Threads]] = {}
    for t in sized:
        groups.setdefault(tuple(sorted(t.cpus)), []).append(t)
    notes = []
    for group in groups.values():
        t = group[0]
        ids = parse.format_cpulist(g.local_rank for g in group)
        who = f"rank {ids}" if len(group) == 1 else f"ranks {ids}"
        notes.append(
            f"{who}: {t.cores} {t.unit} among CPUs {parse.format_cpulist(t.cpus)}"
            + (f", shared by {t.sharing} ranks" if t.sharing > 1 else "")
            + f", {t.nodes} NUMA node(s): intra-op {t.intra}, inter-op {t.inter} each"
        )
    return notes


def _before(f: Facts, var: str) -> str:
    if f.environ is None:
        return f"(unknown: {f.environ_path} unreadable)"
    return f.environ.get(var, "(unset)")


TUNER = Tuner(
    id=ID,
    title="TensorFlow and OpenMP thread pools per rank",
    collect=collect,
    plan=plan,
    params=Params,
    paths=(*ranks.PATHS, *limits.PATHS),
)
