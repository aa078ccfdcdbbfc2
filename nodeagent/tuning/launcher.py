"""`nodeagent exec`: run a training job with the process-scope settings of a tuned profile.

The job replaces nodeagent (execve), so its PID, signals and exit code are the job's own, as Slurm,
torchrun and mpirun expect of the command they start. What is prepared before the exec:

- the local rank: --local-rank, else LOCAL_RANK (torchrun), SLURM_LOCALID (srun),
  OMPI_COMM_WORLD_LOCAL_RANK (Open MPI), MPI_LOCALRANKID (MPICH/Intel MPI, Hydra);
- the environment: ours + profile "env" + profile "rank_env"[rank] + the rank's own "env";
- CPU and memory binding of the rank: `numactl --physcpubind --membind` when numactl is on PATH,
  else sched_setaffinity(2) and set_mempolicy(2) on this process; both survive execve(2)
  (sched_setaffinity(2) and set_mempolicy(2), NOTES: "preserved across an execve");
- a CPU wake-up latency limit held open on /dev/cpu_dma_latency for the life of the job
  (Documentation/power/pm_qos_interface.rst: the request lasts while the file stays open);
- the tf.data hook: nodeagent/hooks on PYTHONPATH (a `sitecustomize` that sets default
  tf.data options) with the options in NODEAGENT_TF_DATA_OPTIONS; the folder is put there as well
  when NODEAGENT_MEASURE_DIR is set (by `exec --measure`, or by a caller that measures the job), so
  the same `sitecustomize` measures the job's steps whatever the profile holds.

`exec --measure` runs the same launch as a child instead (`enter`, then `spawn`), since nodeagent
must outlive the job to report on it.

Every failure the user can fix is a UsageError: one line, exit 64, never a traceback. The default
profile missing is not one: the job runs unchanged after a warning (see `plan`); a profile named
with --profile must exist.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, PlainSerializer, computed_field
from pydantic.dataclasses import dataclass as pydantic_dataclass

from nodeagent.core import jsondoc, parse
from nodeagent.core.document import LATE, InKeyOrder
from nodeagent.core.errors import UsageError
from nodeagent.facts import cgroup
from nodeagent.host import LocalHost
from nodeagent.tuning import binding, profile
from nodeagent.tuning.binding import Entry, Warn

# Where launchers put the rank of a process on its node, most specific first.
# HOROVOD_LOCAL_RANK: horovodrun in Gloo mode sets only this one.
RANK_VARS = (
    "LOCAL_RANK",
    "SLURM_LOCALID",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "HOROVOD_LOCAL_RANK",
)
HOOKS_DIR = Path(__file__).resolve().parent.parent / "hooks"
TF_DATA_ENV = "NODEAGENT_TF_DATA_OPTIONS"
MEASURE_DIR_ENV = "NODEAGENT_MEASURE_DIR"  # the measuring hook writes <pid>.json there
NODE_ONLINE = "/sys/devices/system/node/online"


EX_NOTFOUND = 127  # as env(1) and shells exit when the command does not exist
EX_NOEXEC = 126  # ... and when it cannot be executed

_WORDING = jsondoc.Wording("profile", "recreate the profile with `nodeagent tune --apply`")


def _limit(value: int | None) -> int | str | None:
    """A memlock limit as the document writes it: bytes, or "unlimited" (RLIM_INFINITY)."""
    return "unlimited" if value == resource.RLIM_INFINITY else value


@pydantic_dataclass(config=LATE)
class Launch(InKeyOrder):
    """Everything `nodeagent exec` does before the exec, decided without side effects; its
    document is what `exec --dry-run` prints."""

    document_keys = (
        "profile",
        "rank",
        "rank_source",
        "argv",
        "env",
        "affinity",
        "affinity_list",
        "memory_policy",
        "binding",
        "cpu_dma_latency_us",
        "memlock_soft",
        "tf_data",
        "notes",
    )

    profile_path: Annotated[str, Field(serialization_alias="profile")]
    command: Annotated[list[str], Field(exclude=True)]  # the user's command
    argv: list[str]  # what is executed (numactl ... -- command, or the command)
    env: Annotated[dict[str, str], Field(exclude=True)]  # the job's; the document has its change
    # The environment the launch was resolved against (`env` is made from it).
    resolved_in: Annotated[dict[str, str], Field(exclude=True)]
    rank: int
    rank_source: str  # "--local-rank", a variable name, or "default"
    cpus: Annotated[list[int] | None, Field(serialization_alias="affinity")]
    # NUMA nodes memory is bound to (one: the rank's node); the document's memory_policy.
    mems: Annotated[list[int] | None, Field(exclude=True)]
    binding: str  # "numactl", "syscalls" or "none"
    dma_latency_us: Annotated[int | None, Field(serialization_alias="cpu_dma_latency_us")]
    tf_data: dict[str, Any] | None
    notes: list[str] = Field(default_factory=list)
    # Bytes, or resource.RLIM_INFINITY; the pinned-memory tuner's.
    memlock_soft: Annotated[int | None, PlainSerializer(_limit)] = None

    def entry(self, machine: Machine) -> Entry:
        """What is done to the launching process for this launch (nodeagent.tuning.binding)."""
        return Entry(
            self.rank,
            self.binding,
            self.cpus,
            self.mems,
            machine.arch,
            machine.cpuset_source,
            self.memlock_soft,
            self.dma_latency_us,
        )

    @computed_field(alias="env")  # type: ignore[prop-decorator]
    @property
    def env_change(self) -> dict[str, Any]:
        """What the launch sets, and unsets, in the environment it was resolved against."""
        changed = {k: v for k, v in sorted(self.env.items()) if self.resolved_in.get(k) != v}
        return {"set": changed, "unset": sorted(k for k in self.resolved_in if k not in self.env)}

    @computed_field  # type: ignore[prop-decorator]
    @property
    def affinity_list(self) -> str | None:
        return None if self.cpus is None else parse.format_cpulist(self.cpus)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def memory_policy(self) -> dict[str, Any] | None:
        return None if self.mems is None else {"mode": "bind", "nodes": self.mems}


@dataclass(frozen=True)
class Machine:
    """What this machine allows, read once (the pure part of the launcher takes it as data)."""

    online_cpus: list[int] | None
    cpuset: list[int] | None  # the cgroup cpuset that applies to us
    cpuset_source: str | None
    numa_nodes: list[int] | None  # None: a kernel without NUMA (CONFIG_NUMA=n): all memory is node 0
    mems_allowed: list[int] | None
    arch: str


def read_machine() -> Machine:
    cg = cgroup.collect(LocalHost())
    nodes: list[int] | None
    try:
        nodes = parse.cpulist(Path(NODE_ONLINE).read_text())
    except (OSError, ValueError):
        nodes = None
    return Machine(cg.online or None, cg.cpuset, cg.cpuset_source, nodes, cg.mems_allowed, platform.machine())


# -- deciding (pure) -----------------------------------------------------------------------------


def pick_rank(explicit: int | None, environ: Mapping[str, str]) -> tuple[int | None, str]:
    """The local rank and where it came from; (None, "default") when nothing says."""
    if explicit is not None:
        return explicit, "--local-rank"
    for var in RANK_VARS:
        raw = environ.get(var, "").strip()
        if not raw:
            continue
        if not raw.isdigit():
            raise UsageError(
                f"{var}={raw!r} is not a local rank (a number from 0); fix it or pass --local-rank"
            )
        return int(raw), var
    return None, "default"


def _validated(doc: dict[str, Any], path: str) -> profile.ProfileDocument:
    """The document as its model, ProfileDocument: a document handed over directly rather than read
    by profile.load is checked as well. A problem is one UsageError line naming `path`, the line of
    the file as profile.save writes it, and the field."""
    text = profile.text(doc)
    return jsondoc.JsonDocument(path, text, doc, _WORDING).validate(profile.ProfileDocument)


def _local_rank(
    explicit: int | None, environ: Mapping[str, str], ranks: list[profile.RankEntry] | None, notes: list[str]
) -> tuple[int, str]:
    """The local rank and where it came from; rank 0, with a note when there are several, when
    nothing says."""
    rank, source = pick_rank(explicit, environ)
    if rank is not None:
        return rank, source
    if ranks is not None and len(ranks) > 1:
        notes.append(
            f"no local rank given (--local-rank, {', '.join(RANK_VARS)}): running as rank 0 of {len(ranks)}"
        )
    return 0, source


def _rank_entry(
    path: str, name: Any, ranks: list[profile.RankEntry] | None, rank: int
) -> profile.RankEntry | None:
    """The rank's entry (an entry without local_rank is the rank of its place); None without ranks."""
    if not ranks:
        return None
    by_id = {i if entry.local_rank is None else entry.local_rank: entry for i, entry in enumerate(ranks)}
    if rank not in by_id:
        raise UsageError(
            f"local rank {rank} is not in profile {name!r} ({path}), which has "
            f"rank(s) {parse.format_cpulist(by_id)}; re-plan the ranks with `nodeagent tune --apply`"
        )
    return by_id[rank]


def _environment(
    environ: Mapping[str, str], document: profile.ProfileDocument, rank: int, entry: profile.RankEntry | None
) -> dict[str, str]:
    """The job's environment: ours < the profile's env < its rank_env[rank] < the rank's own env;
    null unsets a variable, true/false are "1"/"0"."""
    env = dict(environ)
    layers = (document.env, (document.rank_env or {}).get(str(rank)), entry.env if entry else None)
    for layer in layers:
        for key, value in (layer or {}).items():
            if value is None:
                env.pop(key, None)
            elif isinstance(value, bool):
                env[key] = "1" if value else "0"
            else:
                env[key] = str(value)
    return env


def _cpu_list(cpus: str | list[int] | None) -> list[int] | None:
    if cpus is None:
        return None
    return parse.cpulist(cpus) if isinstance(cpus, str) else sorted(set(cpus))


def _memory_nodes(entry: profile.RankEntry) -> list[int] | None:
    """The rank's memory nodes: `numa_node`, else `mems` (a CPU rank spanning several nodes)."""
    if entry.numa_node is not None:
        return [entry.numa_node]
    return sorted(set(entry.mems)) if entry.mems else None


def _binding_targets(
    rank: int, entry: profile.RankEntry | None, machine: Machine, notes: list[str]
) -> tuple[list[int] | None, list[int] | None]:
    """The CPUs and memory nodes to bind the rank to, refused where this machine does not allow them."""
    if entry is None:
        return None, None
    cpus = _cpu_list(entry.cpus)
    mems = _memory_nodes(entry)
    if cpus is not None:
        _check_cpus(rank, cpus, machine)
    if mems is not None:
        mems = _check_mems(rank, mems, machine, notes)
    return cpus, mems


def _memlock_soft(settings: profile.LauncherSettings) -> int | None:
    if settings.memlock_soft == "unlimited":
        return resource.RLIM_INFINITY
    return settings.memlock_soft


def _add_tf_data_hook(env: dict[str, str], tf_data: dict[str, Any]) -> None:
    """The options for the hook, and the hook's folder first on PYTHONPATH (once)."""
    env[TF_DATA_ENV] = json.dumps(tf_data, sort_keys=True)
    add_hooks_dir(env)


def add_hooks_dir(env: dict[str, str]) -> None:
    """nodeagent/hooks first on PYTHONPATH, once, so the job's Python imports its sitecustomize."""
    hooks = str(HOOKS_DIR)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != hooks]
    env["PYTHONPATH"] = os.pathsep.join([hooks, *parts])


def _bound_command(
    command: list[str],
    cpus: list[int] | None,
    mems: list[int] | None,
    machine: Machine,
    numactl: str | None,
    notes: list[str],
) -> tuple[list[str], str, list[int] | None]:
    """What is executed, how the rank is bound ("numactl" or "syscalls") and the memory nodes bound
    (None where set_mempolicy cannot be called here)."""
    if numactl:
        opts = []
        if cpus is not None:
            opts.append(f"--physcpubind={parse.format_cpulist(cpus)}")
        if mems is not None:
            opts.append(f"--membind={parse.format_cpulist(mems)}")
        return [numactl, *opts, "--", *command], "numactl", mems
    if mems is not None and machine.arch not in binding.SYS_SET_MEMPOLICY:
        notes.append(
            f"set_mempolicy's system call number is not known here ({machine.arch}): memory is "
            f"not bound to node(s) {parse.format_cpulist(mems)}; install numactl"
        )
        mems = None
    return list(command), "syscalls", mems


def prepare(
    doc: dict[str, Any],
    path: str,
    command: list[str],
    explicit_rank: int | None,
    environ: Mapping[str, str],
    machine: Machine,
    which: Callable[[str, str | None], str | None] = lambda name, p: shutil.which(name, path=p),
) -> Launch:
    """The launch a profile asks for, checked against what this machine allows."""
    if not command:
        raise UsageError("give the command to run after `--`, e.g. nodeagent exec -- python train.py")
    document = _validated(doc, path)
    notes: list[str] = []
    rank, source = _local_rank(explicit_rank, environ, document.ranks, notes)
    entry = _rank_entry(path, doc.get("name", "?"), document.ranks, rank)
    env = _environment(environ, document, rank, entry)
    cpus, mems = _binding_targets(rank, entry, machine, notes)
    settings = document.launcher or profile.LauncherSettings()
    if document.tf_data:
        _add_tf_data_hook(env, document.tf_data)
    if env.get(MEASURE_DIR_ENV):
        add_hooks_dir(env)

    search_path = env.get("PATH", os.defpath)
    if "/" not in command[0] and which(command[0], search_path) is None:
        raise _NotFound(command[0], search_path)
    argv, binding = list(command), "none"
    if cpus is not None or mems is not None:
        numactl = which("numactl", search_path)
        argv, binding, mems = _bound_command(command, cpus, mems, machine, numactl, notes)
    return Launch(
        profile_path=path,
        command=list(command),
        argv=argv,
        env=env,
        resolved_in=dict(environ),
        rank=rank,
        rank_source=source,
        cpus=cpus,
        mems=mems,
        binding=binding,
        dma_latency_us=settings.cpu_dma_latency_us,
        tf_data=document.tf_data or None,
        notes=notes,
        memlock_soft=_memlock_soft(settings),
    )


class _NotFound(UsageError):
    exit_code = EX_NOTFOUND

    def __init__(self, name: str, search_path: str) -> None:
        super().__init__(f"{name}: command not found in PATH ({search_path})")


def _check_cpus(rank: int, cpus: list[int], m: Machine) -> None:
    """CPUs outside the cgroup cpuset (or offline) cannot be bound: sched_setaffinity(2) would
    silently drop them (or fail with EINVAL when none is left), so refuse with the reason."""
    allowed = set(m.online_cpus or cpus)
    where = "online CPUs (/sys/devices/system/cpu/online)"
    if m.cpuset is not None:
        allowed &= set(m.cpuset)
        where = f"cgroup cpuset {m.cpuset_source}"
    forbidden = sorted(set(cpus) - allowed)
    if forbidden:
        raise UsageError(
            f"local rank {rank}: CPUs {parse.format_cpulist(forbidden)} are not allowed here: the "
            f"{where} allows {parse.format_cpulist(allowed) or 'none'}; re-plan with `nodeagent tune --apply`"
        )


def _check_mems(rank: int, mems: list[int], m: Machine, notes: list[str]) -> list[int] | None:
    shown = parse.format_cpulist(mems)
    if m.numa_nodes is None:
        # CONFIG_NUMA=n: one memory node, nothing to bind (set_mempolicy would fail with ENOSYS).
        if mems != [0]:
            raise UsageError(
                f"local rank {rank}: NUMA node(s) {shown} do not exist: this kernel has no NUMA "
                f"({NODE_ONLINE} is absent); re-plan with `nodeagent tune --apply`"
            )
        notes.append(f"no NUMA in this kernel ({NODE_ONLINE} absent): memory binding to node 0 skipped")
        return None
    missing = [n for n in mems if n not in m.numa_nodes]
    if missing:
        raise UsageError(
            f"local rank {rank}: NUMA node(s) {parse.format_cpulist(missing)} are not online here "
            f"(online: {parse.format_cpulist(m.numa_nodes)}); re-plan with `nodeagent tune --apply`"
        )
    refused = [n for n in mems if n not in (m.mems_allowed or mems)]
    if refused:
        raise UsageError(
            f"local rank {rank}: memory of NUMA node(s) {parse.format_cpulist(refused)} is not allowed "
            f"here: the cgroup cpuset allows node(s) {parse.format_cpulist(m.mems_allowed or [])} "
            "(Mems_allowed_list of /proc/self/status)"
        )
    return mems


# -- acting --------------------------------------------------------------------------------------


def enter(launch: Launch, machine: Machine, warn: Warn) -> dict[str, str]:
    """Bind this process, raise its memlock limit and hold the wake-up latency request: what the
    job inherits, through execve(2) or fork(2) alike (nodeagent.tuning.binding). Returns the job's
    environment; what could not be done goes to `warn` (the job still runs)."""
    return binding.enter(launch.entry(machine), launch.env, warn)


def _cannot_execute(argv0: str, error: OSError) -> UsageError:
    err = UsageError(f"{argv0}: cannot execute ({error.strerror})")
    err.exit_code = EX_NOEXEC
    return err


def execute(launch: Launch, env: dict[str, str]) -> None:
    """Exec the command (after `enter`) with `env`; returns only by raising."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(launch.argv[0], launch.argv, env)
    except FileNotFoundError:
        raise _NotFound(launch.argv[0], env.get("PATH", os.defpath)) from None
    except OSError as e:
        raise _cannot_execute(launch.argv[0], e) from None


def spawn(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start the job as a child with this process's standard streams, as execve would run it.

    The binding, the memlock limit and the latency request are this process's (`enter`), and
    fork(2) passes them on: CPU affinity and the memory policy are inherited by a child
    (sched_setaffinity(2), set_mempolicy(2)), so nothing has to run in the child between fork and
    exec (subprocess's preexec_fn is not safe with threads: its documentation says so). close_fds
    is off as with execve: what was made inheritable, the latency request's descriptor, stays open
    in the job, the rest is closed on exec anyway (PEP 446).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        return subprocess.Popen(argv, env=env, close_fds=False)
    except FileNotFoundError:
        raise _NotFound(argv[0], env.get("PATH", os.defpath)) from None
    except OSError as e:
        raise _cannot_execute(argv[0], e) from None


def no_profile_warning(name: str, path: Path) -> str:
    return (
        f"no profile {name} at {path}: running the job unchanged; create one with "
        f"`nodeagent tune --apply --profile {name}`"
    )


def plan(
    profile_name: str,
    local_rank: int | None,
    command: list[str],
    warn: Warn,
    dry_run: bool = False,
    named: bool = False,
    environ: Mapping[str, str] | None = None,
) -> tuple[Launch, Machine]:
    """The launch of `nodeagent exec` and the machine it was checked against; the job's environment
    is made from `environ` (default: this process's).

    Without the default profile the job runs unchanged, after one warning: the shipped
    launchers (nodeagent/integrations/launch-*.sh) start every rank through `nodeagent exec`, and
    a node where nobody ran `tune --apply` must still run the job, as it would without nodeagent.
    A profile the user `named` (--profile) that is not there is an error (exit 64), and so is one
    that exists but cannot be read: running unpinned when pinning was asked for (a misspelt name)
    hides the fault."""
    environ = os.environ if environ is None else environ
    path = profile.profile_path(profile_name)
    doc = profile.load_if_present(profile_name)
    if doc is None and named:
        raise UsageError(profile.missing(profile_name))
    machine = read_machine()
    if doc is None:
        warning = no_profile_warning(profile_name, path)
        warn(warning)  # before the job's command is looked for: a missing one still ends in 127
        # An empty profile: no binding, no environment, no hook but the measuring one a caller
        # asked for (NODEAGENT_MEASURE_DIR). The rank selects nothing, so a launcher's rank
        # variable is not even parsed: the job runs exactly as it would without us.
        launch = prepare({}, str(path), command, local_rank or 0, environ, machine)
        launch.rank_source = "none (no profile)"
        if dry_run:  # shown in the launch it prints
            launch.notes.append(warning)
    else:
        launch = prepare(doc, str(path), command, local_rank, environ, machine)
    return launch, machine
