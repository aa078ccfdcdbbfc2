"""Thread pools: CPUs a job can use (affinity, cgroup cpuset and quota) against the pools it will start.

TensorFlow, OpenMP, MKL and OpenBLAS size their pools from the CPUs in the affinity mask, not from a
CFS quota, and every rank on a node does so independently: eight unpinned ranks on 64 CPUs start
8 x 64 intra-op threads. Oversubscribed pools spin, migrate and throttle; the step time shows it.

Running processes are read from /proc/<pid>/{status,cmdline,environ} through the Host rather than
with psutil: psutil hard-codes the local /proc, so it can read neither a recorded snapshot nor a
remote node, and the Host can.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nodeagent.api.check import Area, Check, param
from nodeagent.core import parse
from nodeagent.core.finding import Finding, Status
from nodeagent.core.parse import format_cpulist
from nodeagent.facts import cgroup, limits, topology
from nodeagent.facts.cgroup import CgroupCpus
from nodeagent.facts.topology import Topology
from nodeagent.host import Host

ID = "threads"
OMP = "OMP_NUM_THREADS"
INTRA = "TF_NUM_INTRAOP_THREADS"
INTER = "TF_NUM_INTEROP_THREADS"
MKL = "MKL_NUM_THREADS"
OPENBLAS = "OPENBLAS_NUM_THREADS"
POOL_VARS = (OMP, INTRA, INTER, MKL, OPENBLAS)
# Launchers export the number of ranks on this node under these names (torchrun, Open MPI, Slurm, MPICH).
LOCAL_RANK_VARS = (
    "LOCAL_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "SLURM_NTASKS_PER_NODE",
    "MPI_LOCALNRANKS",
)
# Blocking ops (queue and iterator waits, collectives) hold an inter-op thread while they wait, so
# a pool of one serialises every other op behind them (inter_op_parallelism_threads in
# tensorflow/core/protobuf/config.proto); threads that wait do not oversubscribe the CPUs, so an
# inter-op pool of this many is accepted on any CPU count, and the tf-threads tuner never plans fewer.
INTER_OP_FLOOR = 2
# Only these variables are kept from any environment: the rest may hold secrets.
KEPT_VARS = (*POOL_VARS, *LOCAL_RANK_VARS)
# A python process is a training job when its command line names a framework or a training script.
# "train" only at a word start ("train.py", "run_pretraining"), so "constraints.txt" is not a job.
CMDLINE_SEARCHED = 4096
TRAINING_CMDLINE = re.compile(r"tensorflow|torch|keras|(?<![a-z])jax|(?<![a-z])(?:pre)?train", re.IGNORECASE)
PROC = "/proc"
_TF_DOC = "https://www.tensorflow.org/api_docs/python/tf/config/threading"
_INTEL_DOC = (
    "https://www.intel.com/content/www/us/en/developer/articles/technical/"
    "maximize-tensorflow-performance-on-cpu-considerations-and-recommendations-for-inference.html"
)


@dataclass(frozen=True)
class Params:
    count_smt_siblings: bool = param(
        True,
        "Judge pools against logical CPUs (True) or physical cores (False); Intel recommends one "
        f"OpenMP/intra-op thread per physical core for compute-bound work ({_INTEL_DOC}).",
    )
    local_ranks: int = param(
        0,
        "Training ranks per node sharing these CPUs; 0 infers it from LOCAL_WORLD_SIZE, "
        "OMPI_COMM_WORLD_LOCAL_SIZE, SLURM_NTASKS_PER_NODE or the running training processes. Each "
        f"rank sizes its intra-op pool from its own mask ({_TF_DOC}).",
    )
    max_threads_per_cpu: float = param(
        4.0,
        "A TF process at defaults runs an intra-op and an inter-op pool of one thread per CPU plus "
        "tf.data workers (~3 per CPU); more than 4 per allowed CPU means stacked pools "
        f"(OpenMP inside intra-op, one pool per DataLoader worker) that spin and preempt ({_TF_DOC}).",
    )
    min_threads_flagged: int = param(
        64,
        "Runtimes start a fixed set of mostly idle threads (gRPC, CUDA, XLA compilation, event loops), "
        "so small CPU counts are not judged below this many threads "
        "(https://www.tensorflow.org/guide/profiler#optimize_the_tensorflow_threadpool).",
    )


@dataclass(frozen=True)
class Proc:
    """A running training process, from /proc/<pid>/status, cmdline and environ."""

    pid: int
    ppid: int | None
    name: str
    cmdline: str
    threads: int | None
    cpus_allowed: list[int] | None
    env: dict[str, str] = field(default_factory=dict)  # KEPT_VARS that are set


@dataclass(frozen=True)
class Facts:
    cpus: CgroupCpus
    topology: Topology
    environ: dict[str, str] | None  # KEPT_VARS of /proc/self/environ; None when unreadable
    processes: list[Proc]
    scanned: int  # /proc/<pid> folders listed
    problems: list[str] = field(default_factory=list)


def collect(host: Host) -> Facts:
    env = limits.collect_environ(host)
    procs, scanned, problems = training_processes(host)
    return Facts(
        cpus=cgroup.collect(host),
        topology=topology.collect(host),
        environ=None if env is None else {k: v for k, v in env.items() if k in KEPT_VARS},
        processes=procs,
        scanned=scanned,
        problems=problems,
    )


def _is_count(text: str) -> bool:
    # ASCII digits of a bounded length: "²" passes str.isdigit() and a 5000-digit value int()'s
    # digit limit, and neither may raise.
    return parse.is_decimal(text)


def _is_python(name: str, argv0: str) -> bool:
    # PyTorch renames its main thread "pt_main_thread", and comm follows the main thread.
    base = argv0.rsplit("/", 1)[-1]
    return name.startswith("python") or base.startswith("python") or name == "pt_main_thread"


def training_processes(host: Host, kept: tuple[str, ...] = KEPT_VARS) -> tuple[list[Proc], int, list[str]]:
    """Training processes in /proc, with the variables `kept` of their environments (a superset of
    KEPT_VARS: the pool variables tell a pool user), the folders listed, and what did not parse.
    A few hundred small reads, no `ps` spawned, once per host (`threads` and `cpu-isa` both ask)."""
    candidates, listed = host.memo("threads.process_table", lambda: _process_table(host))
    out: list[Proc] = []
    problems: list[str] = []
    for c in candidates:
        env = {k: v for k, v in limits.parse_environ(c.environ).items() if k in kept}
        out.append(_proc(c.pid, parse.key_values(c.status), c.argv, env, problems))
    return out, listed, problems


@dataclass(frozen=True)
class _Candidate:
    """A training process as /proc shows it, before parsing: its environment is kept as read (and
    filtered by each caller), its status parsed only for the few processes that are kept."""

    pid: int
    argv: list[str]
    status: str
    environ: str


def _process_table(host: Host) -> tuple[list[_Candidate], int]:
    """The training processes of /proc (not this process), and how many folders it lists."""
    pids = sorted(int(e) for e in host.listdir(PROC) or [] if _is_count(e))
    self_link = host.readlink(f"{PROC}/self")
    own = int(self_link) if self_link and _is_count(self_link) else None
    found = (_training_process(host, pid) for pid in pids if pid != own)
    return [c for c in found if c is not None], len(pids)


def _training_process(host: Host, pid: int) -> _Candidate | None:
    """/proc/<pid> when it is a training process: python running a framework or a training script,
    or any process running a thread pool sized by a pool variable. None for the others."""
    base = f"{PROC}/{pid}"
    raw_cmdline = host.read(f"{base}/cmdline")
    if not raw_cmdline:
        return None  # kernel threads have an empty command line; vanished processes read as None
    argv = [a for a in raw_cmdline.split("\x00") if a]
    status = host.read(f"{base}/status")
    if status is None or not argv:
        return None
    env_text = host.read(f"{base}/environ") or ""
    # The interpreter's own path ("/envs/torch/bin/python") says nothing about the job: skip argv[0].
    # The script and launcher come first; a long tail (inline code, a payload) is not searched.
    python_job = _is_python(_status_field(status, "Name"), argv[0]) and TRAINING_CMDLINE.search(
        " ".join(argv[1:])[:CMDLINE_SEARCHED]
    )
    # A shell that merely inherited OMP_NUM_THREADS runs one thread; a pool user runs more.
    pool_user = (
        not python_job
        and any(v in limits.parse_environ(env_text) for v in POOL_VARS)
        and _count_above_one(_status_field(status, "Threads"))
    )
    return _Candidate(pid, argv, status, env_text) if python_job or pool_user else None


def _status_field(status: str, key: str) -> str:
    """One "Key:\tvalue" line of /proc/<pid>/status, without parsing the fifty others."""
    at = status.find(f"{key}:")
    while at > 0 and status[at - 1] != "\n":
        at = status.find(f"{key}:", at + 1)
    if at < 0:
        return ""
    return status[at + len(key) + 1 :].split("\n", 1)[0].strip()


def _count_above_one(text: str) -> bool:
    return _is_count(text) and int(text) > 1


def _proc(
    pid: int, fields: dict[str, str], argv: list[str], env: dict[str, str], problems: list[str]
) -> Proc:
    """The Proc of a training process from its status fields; what does not parse goes to `problems`."""
    base = f"{PROC}/{pid}"
    threads = fields.get("Threads", "")
    threads_n = int(threads) if _is_count(threads) else None
    allowed_raw = fields.get("Cpus_allowed_list")
    allowed: list[int] | None = None
    if allowed_raw is not None:
        try:
            allowed = parse.cpulist(allowed_raw)
        except ValueError:
            problems.append(f"{base}/status: unparsable Cpus_allowed_list {allowed_raw[:60]!r}")
    if threads and threads_n is None:
        problems.append(f"{base}/status: unparsable Threads {threads[:60]!r}")
    ppid = fields.get("PPid", "")
    return Proc(
        pid=pid,
        ppid=int(ppid) if _is_count(ppid) else None,
        name=fields.get("Name", argv[0]),
        cmdline=" ".join(argv)[:200],
        threads=threads_n,
        cpus_allowed=allowed,
        env=env,
    )


# -- evaluation (pure) ---------------------------------------------------------------------------


def pool_size(var: str, raw: str) -> int | None:
    """The thread count a variable asks for; None when malformed. "0" for TF means "let TF pick" (-1)."""
    text = raw.strip()
    if var == OMP:
        text = text.split(",", 1)[0].strip()  # nested levels: "8,2" -> the outer level
    if not _is_count(text):
        return None
    n = int(text)
    if n == 0:
        return -1 if var in (INTRA, INTER) else None
    return n


@dataclass(frozen=True)
class _Budget:
    allowed: list[int]  # affinity ∩ cpuset ∩ online
    effective: int  # min(|allowed|, ceil(quota))
    cores: int  # physical cores among `allowed`
    limit: int  # what pools are judged against (effective, or cores when SMT siblings do not count)
    label: str


def _budget(f: Facts, p: Params) -> _Budget | None:
    allowed = f.cpus.allowed
    effective = f.cpus.effective_cpus
    if allowed is None or effective is None:
        return None
    core_of = f.topology.core_of
    cores = len({core_of.get(c, -1 - c) for c in allowed}) if allowed else 0
    if p.count_smt_siblings or not cores:
        return _Budget(allowed, effective, cores, effective, f"{effective} available CPUs")
    limit = min(effective, cores)
    return _Budget(allowed, effective, cores, limit, f"{limit} physical cores")


def _cpu_finding(f: Facts, b: _Budget | None) -> list[Finding]:
    c = f.cpus
    ev = dict(c.evidence)
    if c.online:
        ev[f"{topology.CPU_DIR}/online"] = format_cpulist(c.online)
    if b is None:
        return [
            Finding(
                ID,
                Status.SKIPPED,
                "cannot tell how many CPUs a job gets: no affinity, cpuset or online CPU list readable",
                {cgroup.STATUS: "absent", cgroup.CGROUP: "absent", f"{topology.CPU_DIR}/online": "absent"},
                subject="cpus",
            )
        ]
    parts = [f"affinity {format_cpulist(c.affinity)}" if c.affinity is not None else "affinity unknown"]
    if c.cpuset is not None:
        parts.append(f"cgroup v{c.cpuset_version} cpuset {format_cpulist(c.cpuset)}")
    parts.append(
        f"CFS quota {c.quota_cpus:g} CPUs (v{c.cpu_version})" if c.quota_cpus is not None else "no CFS quota"
    )
    if c.namespace_root:
        parts.append("container: cgroup namespace root used")
    out = [
        Finding(
            ID,
            Status.OK,
            f"{b.effective} CPUs available to a job ({'; '.join(parts)}), {b.cores} physical cores",
            ev,
            subject="cpus",
        )
    ]
    # Topology problems are the numa check's to report; these are the ones that change the budget.
    problems = [*c.problems, *f.problems]
    if problems:
        out.append(
            Finding(
                ID,
                Status.WARN,
                f"{len(problems)} value(s) could not be parsed; the CPU budget may be wrong",
                {pr.split(": ", 1)[0]: pr.split(": ", 1)[-1] for pr in problems},
                expected="well-formed procfs/cgroup values",
                remediation="A corrupt or truncated recording, or a kernel bug: re-record the snapshot, or "
                "compare with `nproc` and `cat /sys/fs/cgroup/.../cpu.max`.",
                subject="cpus",
            )
        )
    return out


def _tf_default(b: _Budget) -> int:
    # TF sizes both pools from the schedulable CPUs (sched_getaffinity), blind to the CFS quota.
    return len(b.allowed)


def _env_findings(f: Facts, b: _Budget | None, p: Params) -> list[Finding]:
    path = limits.ENVIRON_PATH
    if f.environ is None:
        return [
            Finding(
                ID,
                Status.SKIPPED,
                f"thread-pool variables not judged: {path} unreadable",
                {path: "absent"},
                subject="environment",
            )
        ]
    if b is None:
        return []
    out: list[Finding] = []
    unset: list[str] = []
    for var in POOL_VARS:
        raw = f.environ.get(var)
        n = None if raw is None else pool_size(var, raw)
        if raw is None or n == -1:
            unset.append(var)
        else:
            out.append(_pool_var(var, raw, n, b))
    if unset:
        out.append(_runtime_defaults(f, b, unset))
    return out


def pool_limit(var: str, limit: int) -> int:
    """The most threads the check accepts for pool variable `var` on `limit` CPUs."""
    return max(limit, INTER_OP_FLOOR) if var == INTER else limit


def _pool_var(var: str, raw: str, n: int | None, b: _Budget) -> Finding:
    """One pool variable that is set: a thread count within the budget, above it, or not a count."""
    ev = {f"{limits.ENVIRON_PATH} {var}": raw}
    most = pool_limit(var, b.limit)
    if n is None:
        return Finding(
            ID,
            Status.WARN,
            f"{var}={raw!r} is not a thread count: the runtime ignores it and uses its default",
            ev,
            expected="a positive integer",
            remediation=f"export {var}={most}",
            subject=var,
            fix="tf-threads",
        )
    if n > most:
        return Finding(
            ID,
            Status.WARN,
            f"{var}={n} oversubscribes the {b.label}",
            {**ev, "available": b.label},
            expected=f"<= {most}",
            remediation=f"export {var}={most} (or less per rank when several ranks share the node)",
            subject=var,
            fix="tf-threads",
        )
    return Finding(ID, Status.OK, f"{var}={n} fits the {b.label}", ev, subject=var)


def _runtime_defaults(f: Facts, b: _Budget, unset: list[str]) -> Finding:
    """The pools the runtimes size themselves where no variable says: a WARN when they exceed the budget."""
    tf = _tf_default(b)
    defaults = {
        INTRA: f"TF intra-op: {tf} (every CPU in the affinity mask)",
        INTER: f"TF inter-op: {tf}",
        OMP: f"OpenMP: {tf}",
        MKL: f"MKL: {b.cores or tf} (physical cores)",
        OPENBLAS: f"OpenBLAS: {tf}",
    }
    picks = "; ".join(defaults[v] for v in unset)
    ev = {f"{limits.ENVIRON_PATH} {v}": "(unset)" for v in unset}
    over = tf > b.limit
    quota = f" (CFS quota {f.cpus.quota_cpus:g} CPUs)" if f.cpus.quota_cpus is not None else ""
    return Finding(
        ID,
        Status.WARN if over else Status.OK,
        f"{', '.join(unset)} unset: runtimes pick their defaults ({picks})"
        + (f", more than the {b.label}{quota}" if over else ""),
        ev,
        expected=f"pools <= {b.limit}" if over else "",
        remediation=f"export TF_NUM_INTRAOP_THREADS={b.limit} OMP_NUM_THREADS={b.limit} "
        f"TF_NUM_INTEROP_THREADS=2 (see {_TF_DOC})"
        if over
        else "",
        subject="defaults",
        fix="tf-threads" if over else None,
    )


def _intra_request(env: dict[str, str], default: int) -> int:
    for var in (INTRA, OMP):
        n = pool_size(var, env[var]) if var in env else None
        if n is not None and n > 0:
            return n
    return default


def _declared_ranks(env: dict[str, str]) -> tuple[int, str] | None:
    for var in LOCAL_RANK_VARS:
        m = re.match(r"\s*(\d+)", env.get(var, ""))
        if m and int(m.group(1)) > 0:
            return int(m.group(1)), var
    return None


def _classify(procs: list[Proc]) -> tuple[list[Proc], list[Proc], list[Proc]]:
    """(ranks, workers, launchers) among training processes.

    A worker (DataLoader, multiprocessing fork) shares its parent's command line and CPUs by design;
    a launcher (torchrun, mpirun's python wrapper) is the parent of ranks with another command line.
    """
    by_pid = {pr.pid: pr for pr in procs}
    workers = [pr for pr in procs if pr.ppid in by_pid and by_pid[pr.ppid].cmdline == pr.cmdline]
    worker_pids = {w.pid for w in workers}
    launchers = [
        pr
        for pr in procs
        if pr.pid not in worker_pids and any(c.ppid == pr.pid and c.cmdline != pr.cmdline for c in procs)
    ]
    launcher_pids = {lp.pid for lp in launchers}
    ranks = [pr for pr in procs if pr.pid not in worker_pids | launcher_pids]
    return ranks, workers, launchers


def _ranks_finding(f: Facts, b: _Budget | None, p: Params) -> list[Finding]:
    if b is None or f.environ is None:
        return []
    declared = _declared_ranks(f.environ)
    if p.local_ranks > 0:
        n, source = p.local_ranks, "parameter local_ranks"
    elif declared:
        n, source = declared[0], f"{limits.ENVIRON_PATH} {declared[1]}"
    else:
        # Running ranks are judged from their own masks and environments (see _sharing).
        return []
    if n < 2:
        return []
    intra = _intra_request(f.environ, _tf_default(b))
    total = intra * n
    ev = {"local ranks": f"{n} ({source})", "intra-op threads per rank": str(intra), "available": b.label}
    if total <= b.limit:
        return [
            Finding(
                ID,
                Status.OK,
                f"{n} ranks x {intra} intra-op threads = {total} fit the {b.label}",
                ev,
                subject="ranks",
            )
        ]
    per_rank = max(1, b.limit // n)
    return [
        Finding(
            ID,
            Status.WARN,
            f"{n} ranks x {intra} intra-op threads = {total} threads on {b.label}: oversubscribed "
            f"{total / b.limit:.1f}x",
            ev,
            expected=f"ranks x intra-op <= {b.limit}",
            remediation=f"export TF_NUM_INTRAOP_THREADS={per_rank} OMP_NUM_THREADS={per_rank} per rank, and "
            "pin each rank to its own CPUs (numactl --cpunodebind=<node> --membind=<node>).",
            subject="ranks",
            fix="tf-threads",
        )
    ]


def _status_path(pr: Proc) -> str:
    return f"{PROC}/{pr.pid}/status"


def _process_findings(f: Facts, b: _Budget | None, p: Params) -> list[Finding]:
    if not f.processes:
        why = (
            f"no process folders under {PROC} (a recording without processes)"
            if f.scanned == 0
            else f"no training process among {f.scanned} processes"
        )
        return [
            Finding(
                ID, Status.SKIPPED, f"running processes not judged: {why}", {PROC: why}, subject="processes"
            )
        ]
    ranks, workers, launchers = _classify(f.processes)
    out: list[Finding] = []
    fine: list[Proc] = []
    for pr in f.processes:
        cpus = pr.cpus_allowed if pr.cpus_allowed is not None else (b.allowed if b else None)
        if pr.threads is None or not cpus:
            continue
        warnings = _process_warnings(pr, pr.threads, cpus, p)
        out += warnings
        if not warnings:
            fine.append(pr)
    if fine:
        out.append(_processes_within_limits(fine, b))
    out += _sharing(ranks, workers, launchers, b)
    return out


def _process_warnings(pr: Proc, threads: int, cpus: list[int], p: Params) -> list[Finding]:
    """A running process's pools against the CPUs it may run on: oversized pool variables, too many
    threads."""
    ev = {
        f"{_status_path(pr)} Threads": str(threads),
        f"{_status_path(pr)} Cpus_allowed_list": format_cpulist(cpus),
        f"{PROC}/{pr.pid}/cmdline": pr.cmdline,
        **{f"{PROC}/{pr.pid}/environ {k}": v for k, v in pr.env.items() if k in POOL_VARS},
    }
    out: list[Finding] = []
    oversized = {
        var: n for var in POOL_VARS if var in pr.env and (n := pool_size(var, pr.env[var]) or 0) > len(cpus)
    }
    if oversized:
        asks = ", ".join(f"{var}={n}" for var, n in oversized.items())
        out.append(
            Finding(
                ID,
                Status.WARN,
                f"pid {pr.pid} ({pr.name}) asks for {asks} but may run on {len(cpus)} CPUs",
                ev,
                expected=f"pools <= {len(cpus)} (its Cpus_allowed_list)",
                remediation=f"Start it with {' '.join(f'{v}={len(cpus)}' for v in oversized)}.",
                subject=f"pid {pr.pid}",
                fix="tf-threads",
            )
        )
    threshold = max(p.max_threads_per_cpu * len(cpus), p.min_threads_flagged)
    if threads > threshold:
        out.append(
            Finding(
                ID,
                Status.WARN,
                f"pid {pr.pid} ({pr.name}) runs {threads} threads on {len(cpus)} CPUs "
                f"({threads / len(cpus):.1f} per CPU): stacked or oversized pools",
                ev,
                expected=f"<= {threshold:g} threads ({p.max_threads_per_cpu:g} per allowed CPU)",
                remediation=f"Size the pools to the process's CPUs: TF_NUM_INTRAOP_THREADS={len(cpus)}, "
                "TF_NUM_INTEROP_THREADS=2, and one thread inside DataLoader workers "
                "(torch.set_num_threads(1) in worker_init_fn).",
                subject=f"pid {pr.pid}",
                fix="tf-threads",
            )
        )
    return out


def _processes_within_limits(fine: list[Proc], b: _Budget | None) -> Finding:
    listing = "; ".join(
        f"pid {pr.pid} ({pr.name}) {pr.threads} threads on "
        f"{len(pr.cpus_allowed) if pr.cpus_allowed is not None else len(b.allowed) if b else '?'} CPUs"
        for pr in fine[:8]
    )
    return Finding(
        ID,
        Status.OK,
        f"{len(fine)} training process(es) within thread limits: {listing}"
        + (" ..." if len(fine) > 8 else ""),
        {f"{_status_path(pr)} Threads": str(pr.threads) for pr in fine[:16]},
        subject="processes",
    )


def _sharing(
    ranks: list[Proc], workers: list[Proc], launchers: list[Proc], b: _Budget | None
) -> list[Finding]:
    pinned = [
        (pr, set(pr.cpus_allowed if pr.cpus_allowed is not None else (b.allowed if b else [])))
        for pr in ranks
    ]
    pinned = [(pr, cpus) for pr, cpus in pinned if cpus]
    if len(pinned) < 2:
        return []
    shared: set[int] = set()
    sharing: list[Proc] = []
    for i, (a, ca) in enumerate(pinned):
        for other, co in pinned[i + 1 :]:
            overlap = ca & co
            if overlap:
                shared |= overlap
                sharing += [x for x in (a, other) if x not in sharing]
    ev = {f"{_status_path(pr)} Cpus_allowed_list": format_cpulist(cpus) for pr, cpus in pinned}
    note = ""
    if workers or launchers:
        note = f" ({len(workers)} worker(s) and {len(launchers)} launcher(s) not counted)"
    if not sharing:
        return [
            Finding(
                ID,
                Status.OK,
                f"{len(pinned)} training ranks pinned to disjoint CPU sets{note}",
                ev,
                subject="pinning",
            )
        ]
    union = set().union(*(cpus for _, cpus in pinned))
    pools = sum(_intra_request(pr.env, len(cpus)) for pr, cpus in pinned)
    return [
        Finding(
            ID,
            Status.WARN,
            f"{len(sharing)} training processes share CPUs {format_cpulist(shared)} (no per-rank pinning); "
            f"their intra-op pools total {pools} threads on {len(union)} CPUs{note}",
            ev,
            expected="each rank on its own CPUs (its GPU's NUMA node)",
            remediation="Launch each rank pinned to its GPU's NUMA node: "
            "numactl --cpunodebind=<node> --membind=<node> python train.py; with Slurm, --cpu-bind=cores.",
            subject="pinning",
            fix="numa-pinning",
        )
    ]


def evaluate(f: Facts, p: Params) -> list[Finding]:
    b = _budget(f, p)
    findings = _cpu_finding(f, b)
    findings += _env_findings(f, b, p)
    findings += _ranks_finding(f, b, p)
    findings += _process_findings(f, b, p)
    return findings


CHECK = Check(
    id=ID,
    title="Thread pools",
    area=Area.KERNEL,
    tags=("preflight", "cpu"),
    collect=collect,
    evaluate=evaluate,
    params=Params,
    paths=(
        *cgroup.PATHS,
        *topology.PATHS,
        *limits.PATHS,
        f"{PROC}/self",
        f"{PROC}/[0-9]*/status",
        f"{PROC}/[0-9]*/cmdline",
        f"{PROC}/[0-9]*/environ",
    ),
)
