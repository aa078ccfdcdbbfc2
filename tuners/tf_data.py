"""tf-data: input-pipeline defaults for TensorFlow jobs, without touching their code.

A tf.data pipeline written the obvious way (`ds.map(f).batch(n)`) runs its map on one thread and
leaves the accelerator waiting for input; the fixes are in TensorFlow's guide "Better performance
with the tf.data API" (https://www.tensorflow.org/guide/data_performance): parallel map and
interleave with num_parallel_calls=tf.data.AUTOTUNE, prefetch(AUTOTUNE) at the end, and
deterministic=False where order does not matter. Most of it is also reachable through dataset
options (tf.data.Options: autotune, experimental_optimization.map_parallelization /
inject_prefetch / parallel_batch, deterministic, threading; https://www.tensorflow.org/api_docs/python/tf/data/Options),
which is what this tuner plans, two ways:

- process scope, profile "tf_data": the options, applied by `nodeagent exec` through a
  `sitecustomize` hook (nodeagent/hooks) to every dataset the job iterates, never overriding an
  option the program set itself;
- code scope, profile "snippets.tf-data": the same as Python to paste into the input pipeline,
  for jobs not started by `nodeagent exec` (and for the parts options cannot reach: interleave's
  parallelism).

The private thread pool is sized to the physical cores of one rank (layout of nodeagent.facts.ranks,
the one numa-pinning binds to), so the input pipeline of a rank does not spread beyond its cores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from nodeagent.api.check import param
from nodeagent.api.tune import Change, Plan, Scope, Tuner, check_thread_count
from nodeagent.core import parse
from nodeagent.core.errors import UsageError
from nodeagent.facts import ranks
from nodeagent.facts.ranks import RankFacts, RankSlot
from nodeagent.host import Host

ID = "tf-data"
PROFILE_KEY = "tf_data"
SNIPPET_KEY = f"snippets.{ID}"
GUIDE = "https://www.tensorflow.org/guide/data_performance"
OPTIONS_DOC = "https://www.tensorflow.org/api_docs/python/tf/data/Options"
OPTIMIZATION_DOC = "https://www.tensorflow.org/api_docs/python/tf/data/experimental/OptimizationOptions"
THREADING_DOC = "https://www.tensorflow.org/api_docs/python/tf/data/ThreadingOptions"
BWC_DOC = "https://docs.kernel.org/scheduler/sched-bwc.html"


@dataclass(frozen=True)
class Params:
    autotune: bool = param(
        True,
        f"autotune.enabled: tf.data tunes parallelism and buffer sizes of AUTOTUNE stages ({OPTIONS_DOC}).",
    )
    map_parallelization: bool = param(
        True,
        "experimental_optimization.map_parallelization: a sequential map of a stateless function runs "
        f"in parallel ({OPTIMIZATION_DOC}; {GUIDE}#parallelizing_data_transformation).",
    )
    inject_prefetch: bool = param(
        True,
        "experimental_optimization.inject_prefetch: a prefetch is added after a final synchronous "
        f"stage, overlapping input with training ({OPTIMIZATION_DOC}; {GUIDE}#prefetching).",
    )
    parallel_batch: bool = param(
        True,
        f"experimental_optimization.parallel_batch: batch copies elements in parallel ({OPTIMIZATION_DOC}).",
    )
    allow_nondeterminism: bool = param(
        True,
        "deterministic=False: parallel stages hand out elements as soon as they are ready instead of "
        "waiting for the slowest in order; never applied when the program enables op determinism "
        f"({OPTIONS_DOC}; {GUIDE}).",
    )
    private_threadpool_size: int = param(
        0,
        "threading.private_threadpool_size: 0 = the physical cores of one rank (its own pool, not "
        "the process-wide inter-op pool); a positive number is used as is; -1 leaves it unset "
        f"({THREADING_DOC}).",
    )
    max_intra_op_parallelism: int = param(
        1,
        "threading.max_intra_op_parallelism: 1 keeps each tf.data op on one thread, the parallelism "
        f"coming from parallel calls instead of nested pools; 0 leaves it unset ({THREADING_DOC}).",
    )
    ranks: int = param(
        0,
        "Local ranks on this node (as numa-pinning.ranks): 0 = one per GPU, or one per NUMA node "
        "without GPUs; each rank's pool is sized from its own cores (docs.nvidia.com/deeplearning/nccl/"
        "user-guide/docs/env.html#nccl-ignore-cpu-affinity).",
    )
    split_shared_nodes: bool = param(
        False,
        "As numa-pinning.split_shared_nodes: ranks sharing a NUMA node get disjoint cores, so each "
        "pool is sized to its own share (https://man7.org/linux/man-pages/man8/numactl.8.html).",
    )
    cpu_only: bool = param(
        False,
        "As numa-pinning.cpu_only: one rank per NUMA node even where GPUs exist "
        "(https://man7.org/linux/man-pages/man8/numactl.8.html).",
    )

    def __post_init__(self) -> None:
        if self.private_threadpool_size < -1:
            raise UsageError(
                f"tuner {ID}: private_threadpool_size={self.private_threadpool_size}: give a thread count, "
                "0 (the rank's physical cores) or -1 (unset)"
            )
        if self.max_intra_op_parallelism < 0:
            raise UsageError(
                f"tuner {ID}: max_intra_op_parallelism={self.max_intra_op_parallelism}: give a thread "
                "count, or 0 (unset)"
            )


Facts = RankFacts


def collect(host: Host) -> RankFacts:
    return ranks.collect(host)


def _rank_pool(slot: RankSlot) -> int | None:
    """Physical cores of one rank; ranks whose CPUs overlap divide them (each runs a pipeline)."""
    cores = slot.physical_cores if slot.physical_cores is not None else (len(slot.cpus) or None)
    if cores is None:
        return None
    return max(1, cores // (1 + len(slot.shares_with)))


def _whole_process_pool(f: RankFacts) -> int | None:
    allowed = f.allowed
    if not allowed:
        return None
    core_of = f.topology.core_of
    if all(c in core_of for c in allowed):
        return len({core_of[c] for c in allowed})
    return len(allowed)


def _quota_cap(f: RankFacts, pool: int, ranks_here: int) -> tuple[int, list[str]]:
    """A CFS quota caps the CPU time of all ranks together (sched-bwc.rst): each rank's pool gets
    at most its share of it, as tf-threads' intra-op pool does."""
    quota = f.cpus.quota_cpus
    if quota is None:
        return pool, []
    share = max(1, math.floor(quota / ranks_here))
    if share >= pool:
        return pool, []
    return share, [
        f"CFS quota {quota:g} CPUs ({f.cpus.quota_source}) shared by {ranks_here} rank(s): a pool of "
        f"at most {share} thread(s) each ({BWC_DOC})"
    ]


def options_for(p: Params, pool: int | None) -> dict[str, Any]:
    """The option values, as dotted paths of tf.data.Options (what the hook reads)."""
    out: dict[str, Any] = {}
    if p.autotune:
        out["autotune.enabled"] = True
    if p.map_parallelization:
        out["experimental_optimization.map_parallelization"] = True
    if p.inject_prefetch:
        out["experimental_optimization.inject_prefetch"] = True
    if p.parallel_batch:
        out["experimental_optimization.parallel_batch"] = True
    if p.allow_nondeterminism:
        out["deterministic"] = False
    if pool is not None:
        out["threading.private_threadpool_size"] = pool
    if p.max_intra_op_parallelism > 0:
        out["threading.max_intra_op_parallelism"] = p.max_intra_op_parallelism
    return out


def snippet(options: dict[str, Any], cores_note: str) -> str:
    """The Python equivalent of the options plus the code-only parts (AUTOTUNE stages)."""
    det = ", deterministic=False" if options.get("deterministic") is False else ""
    lines = [
        f"# nodeagent {ID}: {GUIDE}",
        f"# {cores_note}",
        "import tensorflow as tf",
        "",
        "files = tf.data.Dataset.list_files(FILE_PATTERN, shuffle=True)",
        "ds = files.interleave(",
        f"    tf.data.TFRecordDataset, num_parallel_calls=tf.data.AUTOTUNE{det}",
        ")",
        f"ds = ds.map(parse_and_augment, num_parallel_calls=tf.data.AUTOTUNE{det})",
        f"ds = ds.batch(BATCH_SIZE, drop_remainder=True, num_parallel_calls=tf.data.AUTOTUNE{det})",
        "ds = ds.prefetch(tf.data.AUTOTUNE)",
        "",
        "options = tf.data.Options()",
    ]
    lines += [f"options.{path} = {value!r}" for path, value in options.items()]
    lines.append("ds = ds.with_options(options)")
    return "\n".join(lines) + "\n"


def _shown(options: dict[str, Any]) -> str:
    """ "autotune, map_parallelization, ..., private_threadpool_size=16": on-switches by name."""
    labels = {"autotune.enabled": "autotune"}
    return ", ".join(
        labels.get(path, path.rsplit(".", 1)[-1]) + ("" if value is True else f"={value}")
        for path, value in options.items()
    )


def _unlaid_pool(f: RankFacts) -> tuple[int | None, str, list[str]]:
    """Without a rank layout: the pool sized to the physical cores this process may use, if known."""
    whole = _whole_process_pool(f)
    if whole is None:
        note = (
            "the CPUs this process may use are unknown (no /sys/devices/system/cpu, no "
            "/proc/self/status): threading.private_threadpool_size is left to TensorFlow"
        )
        return None, "private thread pool left to TensorFlow (CPUs unknown)", [note]
    notes = [
        "no rank layout could be made here (see numa-pinning): the pool is sized to the "
        f"{whole} physical cores this process may use"
    ]
    whole, capped = _quota_cap(f, whole, 1)
    what = f"private thread pool of {whole} threads: the physical cores this process may use"
    return whole, what, notes + capped


def _pool(f: RankFacts, p: Params) -> tuple[int | None, str, list[str], dict[str, Any]]:
    """The private pool size, what it is (for the snippet's comment), notes, and per-rank details."""
    if p.private_threadpool_size > 0:
        pool = p.private_threadpool_size
        return pool, f"private thread pool of {pool} threads ({ID}.private_threadpool_size)", [], {}
    if p.private_threadpool_size < 0:
        return None, f"private thread pool not set ({ID}.private_threadpool_size=-1)", [], {}
    lay = ranks.build(f, p.ranks, split_shared_nodes=p.split_shared_nodes, cpu_only=p.cpu_only)
    notes = [f"rank layout: {lay.error}"] if lay.error else []
    layout_notes = [f"rank layout: {n}" for n in lay.notes]
    pools = {s.local_rank: _rank_pool(s) for s in lay.slots}
    sized = {r: n for r, n in pools.items() if n is not None}
    if not sized:
        whole, what, unlaid = _unlaid_pool(f)
        return whole, what, notes + unlaid + layout_notes, {}
    pool = min(sized.values())
    pool, capped = _quota_cap(f, pool, len(lay.slots))
    notes += capped
    if len(set(sized.values())) > 1:
        counts = ", ".join(f"rank {r}: {n}" for r, n in sized.items())
        notes.append(
            f"ranks have different core counts ({counts}): the pool is sized to the smallest, {pool}, "
            "so no rank oversubscribes its cores"
        )
    shared = [s.local_rank for s in lay.slots if s.shares_with]
    if shared:
        notes.append(
            f"ranks {parse.format_cpulist(shared)} share CPUs: each pool gets its share of the cores; "
            f"{ID}.split_shared_nodes=true (with numa-pinning's) gives each rank its own"
        )
    per_rank = [
        {
            "local_rank": s.local_rank,
            "cpus": s.cpulist or None,
            "physical_cores": s.physical_cores,
            "private_threadpool_size": pools[s.local_rank],
        }
        for s in lay.slots
    ]
    what = f"private thread pool of {pool} threads: the physical cores of one of {len(lay.slots)} rank(s)"
    return pool, what, notes + layout_notes, {"ranks": per_rank}


def plan(f: RankFacts, p: Params) -> Plan:
    for name in ("private_threadpool_size", "max_intra_op_parallelism"):
        check_thread_count(ID, name, getattr(p, name), len(f.topology.cpus_online))
    pool, cores_note, notes, details = _pool(f, p)
    options = options_for(p, pool)
    if not options:
        return Plan(ID, notes=[f"nothing planned: every option is turned off by {ID}'s parameters", *notes])
    notes.append(
        "applied by `nodeagent exec` through a sitecustomize hook (nodeagent/hooks on PYTHONPATH) to "
        "each dataset the job iterates; options the program sets itself are kept; `python -I`, -E "
        "or -S skip the hook (use the snippet there)"
    )
    if "deterministic" in options:
        notes.append(
            "deterministic=False is not applied when the program enables op determinism "
            "(tf.config.experimental.enable_op_determinism or TF_DETERMINISTIC_OPS=1)"
        )
    process = Change(
        ID,
        "tf.data default options (nodeagent exec hook)",
        "TensorFlow's defaults: ordered output, shared inter-op thread pool",
        _shown(options),
        Scope.PROCESS,
        f"parallel, prefetched, autotuned input keeps the accelerator fed ({GUIDE})",
        profile_key=PROFILE_KEY,
        value=options,
    )
    code = Change(
        ID,
        "input pipeline code (snippet)",
        "as written",
        "interleave/map/batch with num_parallel_calls=AUTOTUNE, prefetch(AUTOTUNE), tf.data.Options",
        Scope.CODE,
        f"the guide's parallel interleave/map and prefetch, for jobs run without `nodeagent exec` ({GUIDE})",
        profile_key=SNIPPET_KEY,
        value=snippet(options, cores_note),
    )
    details["options"] = options
    return Plan(ID, [process, code], notes, details={"tf_data": details})


TUNER = Tuner(
    id=ID,
    title="tf.data defaults (AUTOTUNE, parallel map, private thread pool)",
    collect=collect,
    plan=plan,
    params=Params,
    paths=ranks.PATHS,
)
