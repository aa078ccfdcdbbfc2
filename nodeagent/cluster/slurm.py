"""Fleets through Slurm: nodeagent runs on the nodes as a Slurm job step, no SSH.

`--slurm PARTITION|NODELIST` names the nodes. The value is a partition when Slurm lists one of that
name, else a hostlist expression of node names. Then:

1. `sinfo` gives every target node's state (one line per node and partition, an explicit
   `--Format` whose fields end in "|", which no node, address or state holds; the free-text reason
   last). A node Slurm has DOWN or NOT_RESPONDING gets no task: it is that host's error
   (unreachable, FAIL). A node Slurm will not give a job (drained, reserved, in maintenance,
   powered down, busy with another job, in a state this module does not know) is not run: UNKNOWN,
   with Slurm's state and reason, since nodeagent saw nothing there, good or bad.
2. One allocation of the rest (`salloc --no-shell --exclusive --no-kill --immediate`): whole nodes,
   so what nodeagent reads there (the job's cgroup and cpuset, the CPUs a benchmark may use) is the
   node's; --no-kill keeps the job when one of its nodes fails.
3. A probe step (one task per node prints its SLURMD_NODENAME). A step whose launch fails on one
   node is aborted on all of them (srun: "Task launch ... failed on node nX", "Job step aborted"),
   which is what a node whose slurmd stopped shows until slurmctld marks it DOWN. The probe finds
   those nodes before anything runs; a node that printed nothing is probed alone, so its error is
   its own srun message and never a neighbour's.
4. One step of `nodeagent ARGV --format json` on the nodes that answered, `--label`led. srun cuts a
   line longer than 1 KiB into labelled pieces (Slurm 22.05, measured), so each task's stdout is
   sent base64-encoded (short lines), after a line naming its node and before a line with
   nodeagent's exit code; the task's stderr keeps its label. A node whose task printed no exit
   code or no JSON is its own error; the others keep their results. A task's stdout is capped as
   a whole, as over SSH (NODEAGENT_MAX_STDOUT_MIB; StepOutput), and the step is stopped once no
   task has more to give.
5. `scancel` of the job, also after an error or an interrupt.

Which node a line is from is Slurm's word, never the node's: every step is laid out by
`--distribution=arbitrary`, so task i runs on the i-th node of its `--nodelist` (srun(1), "arbitrary":
tasks "laid out on the nodes in the order of the file"; measured on Slurm 22.05 with the nodelist
n3,n1,n2, which the default block layout runs in slurm.conf's order instead), and srun labels each
line with the task's id. The name a task prints (its NODE_MARK line) is only a cross-check: a task
whose line names another node is its own node's error, naming both, and never stands for the other.

salloc's and srun's input environment variables apply (SALLOC_ACCOUNT, SALLOC_QOS,
SALLOC_RESERVATION, SALLOC_GRES where steps are confined to the GPUs they ask for ...), and srun
exports this environment to the tasks, PATH included.

The tools' references: https://slurm.schedmd.com/sinfo.html, https://slurm.schedmd.com/salloc.html,
https://slurm.schedmd.com/srun.html, node states https://slurm.schedmd.com/sinfo.html#SECTION_NODE-STATE-CODES.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import math
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from nodeagent.api.report import DocumentError, HostError, HostResult, validate
from nodeagent.cluster import DEFAULT_PARALLEL
from nodeagent.cluster.inventory.hostlist import expand_hostlist
from nodeagent.cluster.runner import EXIT_STATUS, HostOutcome
from nodeagent.cluster.ssh import MISSING, REMOTE, TIMEOUT, UNREACHABLE
from nodeagent.core import limits, pool
from nodeagent.core.errors import UsageError
from nodeagent.core.finding import Finding, Status, documents

# sysexits.h EX_UNAVAILABLE: Slurm itself did not serve the request (controller unreachable, the
# nodes not allocated in time); 64 stays for what the user typed.
EX_UNAVAILABLE = 69

SEP = "|"
# `sinfo --Node --Format`: ":0" prints a field whole (no width), SEP ends it; Reason, free text that
# may hold SEP, comes last and is split off with maxsplit (sinfo(1), -O/--Format).
NODE_FIELDS = ("NodeList", "StateComplete", "NodeAddr", "Partition")
NODE_FORMAT = ",".join(f"{name}:0{SEP}" for name in NODE_FIELDS) + ",Reason:0"
# `sinfo --format`: %P the partition (a trailing "*" marks the default), %l its time limit, %a up/down.
PARTITION_FORMAT = f"%P{SEP}%l{SEP}%a"

# Flags of a node that can take our job: finishing an earlier job's epilog (the allocation waits
# --immediate for it), or flags that say nothing about availability (sinfo(1) NODE STATE CODES;
# src/common/slurm_protocol_defs.c, node_state_flags). Any other flag, or a base state other than
# IDLE, keeps the node out: conservative for flags a later Slurm adds.
HARMLESS_FLAGS = frozenset({"COMPLETING", "CLOUD", "DYNAMIC_NORM"})
RUNNABLE_STATES = frozenset({"IDLE"})
# What the node's state says when it is not run (the base state or the first flag that applies).
NOT_RUN_WHY = {
    "DRAIN": "drained by an administrator or a health check",
    "FAIL": "set to FAIL by an administrator",
    "RESERVED": "held by a reservation",
    "MAINTENANCE": "in a maintenance reservation",
    "REBOOT_REQUESTED": "waiting for a reboot",
    "REBOOT_ISSUED": "rebooting",
    "POWERED_DOWN": "powered down",
    "POWERING_DOWN": "powering down",
    "POWER_DOWN": "powering down",
    "POWERING_UP": "powering up",
    "INVALID_REG": "registered with a configuration slurm.conf does not match",
    "PLANNED": "planned by the scheduler for a waiting job",
    "ALLOCATED": "busy: another job holds it (nodeagent asks for whole nodes)",
    "MIXED": "busy: another job holds part of it (nodeagent asks for whole nodes)",
    "FUTURE": "not in service yet (FUTURE)",
    "UNKNOWN": "not registered with slurmctld yet",
    "ERROR": "in Slurm's ERROR state",
}

# Waiting for the allocation: long enough for a COMPLETING node's epilog, short enough that a busy
# cluster answers at once instead of queueing us (https://slurm.schedmd.com/salloc.html#OPT_immediate).
IMMEDIATE_S = 30
# A query (sinfo, squeue, scancel) or the allocation beyond --immediate: slurmctld answers in
# milliseconds, and an unreachable one makes the client retry for about MessageTimeout (10 s by
# default, https://slurm.schedmd.com/slurm.conf.html#OPT_MessageTimeout; 9 s measured here).
QUERY_TIMEOUT_S = 60.0
# A probe step: a task launch on a node whose slurmd is gone fails after about MessageTimeout
# (11 s measured on the test cluster).
PROBE_TIMEOUT_S = 90.0
# After the job's time limit Slurm kills the tasks (KillWait, 30 s by default,
# https://slurm.schedmd.com/slurm.conf.html#OPT_KillWait); past this slack srun is stopped.
STEP_SLACK_S = 60.0
STOP_GRACE_S = 5.0
# Per task: the last lines of its stderr kept for its error message; srun's own lines likewise.
STDERR_LINES = 20

NODE_MARK = "nodeagent-slurm-node"
EXIT_MARK = "nodeagent-slurm-exit"
# POSIX sh on the node. The command is "$@" (its words are never re-parsed by a shell). Its stdout
# goes through base64 to the step's stdout (fd 4); its exit code comes back through the command
# substitution (fd 5), so the exit line follows base64's last line: two writers on one pipe would
# interleave mid-line, base64 writing in blocks, not lines.
PROBE_SCRIPT = f"printf '{NODE_MARK} %s\\n' \"$SLURMD_NODENAME\""
RUN_SCRIPT = "\n".join(
    [
        PROBE_SCRIPT,
        "exec 4>&1",
        """rc=$( { { "$@" 4>&- 5>&-; printf '%s' "$?" >&5; } | base64 >&4 5>&-; } 5>&1 )""",
        f"printf '{EXIT_MARK} %s\\n' \"$rc\"",
    ]
)
# `srun --label` prefixes each line with the task id, right-aligned to the widest id.
_LABELLED = re.compile(r"\s*([0-9]{1,9}): ?(.*)")
# An exit code as the wrapper prints it: ASCII digits only (str.isdigit() takes "²", int() does not).
_EXIT_CODE = re.compile(r"[0-9]{1,3}")
# srun cuts a task's lines at 1 KiB (module docstring); a line longer than this is not one of ours,
# and is dropped while it is read, so that a node printing one endless line costs the controller
# this much memory, not all of it.
MAX_LINE_BYTES = 64 * 1024
_BASE64_LINE = re.compile(r"[A-Za-z0-9+/=]+")
# base64(1) wraps at 76 characters, 57 bytes of the command's output: every line of a task counts as
# at least that much against its limit, so that short lines reach it as soon as full ones do (64 MiB
# of "AA" lines took 4 minutes of the controller's CPU, read one by one).
FULL_LINE_BYTES = 57
# A name a task gives itself, as kept for its error message (HOST_NAME_MAX, Linux).
HOST_NAME_MAX = 64
# A remote command that exits with this was not found by the node's shell (POSIX: 127).
_NOT_FOUND = 127


class SlurmUnavailable(UsageError):
    """Slurm did not serve the request: the controller unreachable, a command failing, the nodes
    not allocated within --immediate. One line, exit 69."""

    exit_code = EX_UNAVAILABLE


class AllocationRefused(SlurmUnavailable):
    """salloc did not grant the nodes within --immediate."""


# -- what sinfo says ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool
    max_minutes: int | None  # None: no limit, or one this module cannot read
    available: str  # "up", "down", "drain", "inact"


@dataclass(frozen=True)
class SlurmNode:
    name: str
    address: str
    state: str  # the base state, upper case: IDLE, DOWN, ALLOCATED ...
    flags: tuple[str, ...]  # DRAIN, NOT_RESPONDING ...
    reason: str | None
    partitions: tuple[str, ...]

    @property
    def state_text(self) -> str:
        """As scontrol shows it: IDLE+DRAIN."""
        return "+".join((self.state, *self.flags))

    def described(self) -> str:
        reason = f", Reason={self.reason}" if self.reason else ""
        return f"State={self.state_text}{reason}"


def parse_partitions(text: str) -> list[Partition]:
    """`sinfo --all --noheader --format=PARTITION_FORMAT`: one line per partition and node state,
    so a partition repeats; the first line of each is kept, in sinfo's order."""
    seen: dict[str, Partition] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(SEP)
        if len(parts) != 3:
            raise ValueError(f"sinfo printed {line!r}, not PARTITION|TIMELIMIT|AVAIL")
        raw, limit, available = (p.strip() for p in parts)
        name = raw.removesuffix("*")
        if name and name not in seen:
            seen[name] = Partition(name, raw.endswith("*"), parse_minutes(limit), available.lower())
    return list(seen.values())


def parse_minutes(text: str) -> int | None:
    """A Slurm time limit as sinfo prints it (`infinite`, `M:SS`, `H:MM:SS`, `D-H:MM:SS`, and `M`
    or `D-H[:MM]` as slurm.conf takes them) in whole minutes, rounded up; None for no limit or a
    form not listed here (then nothing is capped by it)."""
    days, _, clock = text.strip().rpartition("-")
    parts = clock.split(":")
    if not (days == "" or days.isdigit()) or not all(p.isdigit() for p in parts) or len(parts) > 3:
        return None
    numbers = [int(p) for p in parts]
    if days:  # D-H, D-H:MM, D-H:MM:SS
        numbers += [0] * (3 - len(numbers))
        hours, minutes, seconds = numbers
        hours += 24 * int(days)
    elif len(numbers) == 3:
        hours, minutes, seconds = numbers
    elif len(numbers) == 2:
        hours, (minutes, seconds) = 0, numbers
    else:
        hours, minutes, seconds = 0, numbers[0], 0
    return hours * 60 + minutes + math.ceil(seconds / 60)


def parse_nodes(text: str) -> list[SlurmNode]:
    """`sinfo --Node --noheader --Format=NODE_FORMAT`: a line per node and partition, merged into
    one SlurmNode per node, in sinfo's order. StateComplete is the base state and its flags joined
    by "+" (node_state_string_complete); Reason "none" means none."""
    rows: dict[str, SlurmNode] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(SEP, len(NODE_FIELDS))
        if len(parts) != len(NODE_FIELDS) + 1:
            raise ValueError(f"sinfo printed {line!r}, not {SEP.join((*NODE_FIELDS, 'Reason'))}")
        name, state, address, partition, reason = (p.strip() for p in parts)
        if not name or not state:
            raise ValueError(f"sinfo printed {line!r}: no node name or state")
        base, *flags = state.upper().split("+")
        partition = partition.removesuffix("*")
        known = rows.get(name)
        partitions = (*known.partitions, partition) if known else (partition,)
        rows[name] = SlurmNode(
            name,
            address or name,
            base,
            tuple(flags),
            None if reason in ("", "none") else reason,
            tuple(p for p in dict.fromkeys(partitions) if p),
        )
    return list(rows.values())


# -- which nodes run ------------------------------------------------------------------------------


def unreachable_reason(node: SlurmNode) -> str | None:
    """Why Slurm cannot reach the node (DOWN, NOT_RESPONDING), or None. These count as a host that
    did not answer: slurmctld asked its slurmd and got no answer, or has it out of service as down."""
    if "NOT_RESPONDING" in node.flags:
        return f"slurmd on {node.name} is not responding ({node.described()}); start slurmd there"
    if node.state == "DOWN":
        return f"Slurm has {node.name} DOWN ({node.described()}); it starts no task there"
    return None


def not_run_reason(node: SlurmNode) -> str | None:
    """Why the node gets no task although Slurm reaches it (drained, reserved, busy ...), or None
    when it can take our job."""
    blocking = [f for f in node.flags if f not in HARMLESS_FLAGS]
    if node.state in RUNNABLE_STATES and not blocking:
        return None
    key = blocking[0] if blocking else node.state
    why = NOT_RUN_WHY.get(key, f"in a state nodeagent does not run on ({key})")
    return f"not run: {node.name} is {why} ({node.described()})"


def not_run_finding(node: SlurmNode, why: str) -> Finding:
    return Finding(
        "slurm",
        Status.UNKNOWN,
        why,
        {f"sinfo --nodes={node.name}": node.described()},
        expected="a node Slurm can give a job (IDLE)",
        remediation="Run again once Slurm has the node back in service (`scontrol update "
        f"nodename={node.name} state=resume` after a drain), or check it over SSH (--hosts {node.name}).",
        subject=node.name,
        host=node.name,
    )


def not_run_doc(node: SlurmNode, why: str) -> dict[str, Any]:
    """The host entry of a node that was not run: UNKNOWN, with Slurm's state and reason."""
    return {
        "host": node.name,
        "status": Status.UNKNOWN.value,
        "duration_s": 0.0,
        "checks": [],
        "findings": documents([not_run_finding(node, why)]),
        "slurm": {"ran": False, "state": node.state_text, "reason": node.reason},
    }


@dataclass(frozen=True)
class Target:
    """What --slurm named, and its nodes as sinfo showed them."""

    text: str
    kind: str  # "partition" or "nodelist"
    nodes: tuple[SlurmNode, ...]
    partitions: tuple[Partition, ...]  # every partition Slurm lists

    def partition_for(self, nodes: Sequence[SlurmNode]) -> Partition:
        """The partition the allocation asks for: the named one, else one every node is in (the
        default partition when it is one of them). A job runs in a single partition."""
        by_name = {p.name: p for p in self.partitions}
        if self.kind == "partition":
            return by_name[self.text]
        common = set.intersection(*(set(n.partitions) for n in nodes))
        shared = [p for p in self.partitions if p.name in common]
        if not shared:
            where = "; ".join(f"{n.name}: {','.join(n.partitions) or 'none'}" for n in nodes)
            raise UsageError(
                f"--slurm {self.text}: these nodes share no partition ({where}), and one allocation "
                "runs in one partition: give a partition, or run once per partition"
            )
        return next((p for p in shared if p.default), shared[0])


# -- running Slurm's commands ---------------------------------------------------------------------

Runner = Callable[[Sequence[str], float], "subprocess.CompletedProcess[str]"]


def tool(name: str) -> str:
    """The path of Slurm's `name` on PATH; a UsageError saying so when it is not there."""
    path = shutil.which(name)
    if path is None:
        raise UsageError(
            f"--slurm needs Slurm's `{name}` on PATH (Debian/Ubuntu: slurm-client); run nodeagent on a "
            "node that submits jobs (a login node), or use --cluster/--hosts over SSH"
        )
    return path


def run_command(argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Runs a Slurm client command; SlurmUnavailable when it does not finish in time or fails."""
    command = shlex.join([os.path.basename(argv[0]), *argv[1:]])
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise SlurmUnavailable(
            f"`{command}` did not finish within {timeout_s:g}s ({_last_line(e.stderr)}): is slurmctld up, "
            "and SLURM_CONF right?"
        ) from None
    if done.returncode != 0:
        raise SlurmUnavailable(f"`{command}` exited {done.returncode}: {_last_line(done.stderr)}")
    return done


def _last_line(text: str | bytes | None) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def resolve(text: str, run: Runner = run_command) -> Target:
    """The partition or nodelist `text` names, with its nodes' states; UsageError when it names
    neither, SlurmUnavailable when sinfo fails."""
    sinfo = tool("sinfo")
    listed = run([sinfo, "--all", "--noheader", f"--format={PARTITION_FORMAT}"], QUERY_TIMEOUT_S)
    try:
        partitions = tuple(parse_partitions(listed.stdout))
    except ValueError as e:
        raise SlurmUnavailable(f"`sinfo --format={PARTITION_FORMAT}`: {e}") from None
    names = [p.name for p in partitions]
    if text in names:
        argv = [sinfo, "--Node", "--noheader", f"--partition={text}", f"--Format={NODE_FORMAT}"]
        nodes = _nodes(run(argv, QUERY_TIMEOUT_S).stdout)
        if not nodes:
            raise UsageError(f"--slurm {text!r}: partition {text} has no nodes; name one that has")
        return Target(text, "partition", tuple(nodes), partitions)
    try:
        wanted = list(dict.fromkeys(expand_hostlist(text)))
    except UsageError as e:
        raise UsageError(
            f"--slurm {text!r} is not a partition (Slurm has {', '.join(names) or 'none'}) and not a "
            f"nodelist: {e}"
        ) from None
    argv = [sinfo, "--all", "--Node", "--noheader", f"--nodes={','.join(wanted)}", f"--Format={NODE_FORMAT}"]
    found = {n.name: n for n in _nodes(run(argv, QUERY_TIMEOUT_S).stdout)}
    missing = [name for name in wanted if name not in found]
    if missing:
        raise UsageError(
            f"--slurm {text!r}: Slurm has no node {_first(missing)} "
            f"and no partition of that name (partitions: {', '.join(names) or 'none'})"
        )
    return Target(text, "nodelist", tuple(found[name] for name in wanted), partitions)


def _first(names: Sequence[str], count: int = 5) -> str:
    return ", ".join(names[:count]) + (" ..." if len(names) > count else "")


def _nodes(text: str) -> list[SlurmNode]:
    try:
        return parse_nodes(text)
    except ValueError as e:
        raise SlurmUnavailable(f"`sinfo --Format={NODE_FORMAT}`: {e}") from None


# -- one step's output ----------------------------------------------------------------------------


@dataclass
class TaskOutput:
    """What one task of a step printed."""

    node: str  # where Slurm ran it (module docstring)
    started: bool = False  # it printed its NODE_MARK line
    said: str | None = None  # the first other node a NODE_MARK line of it named: a mismatch
    exit_code: int | None = None
    finished_s: float | None = None  # when its exit line arrived, since the step started
    # Its base64 lines, a byte a character: a node's output costs its size, whatever its lines.
    encoded: bytearray = field(default_factory=bytearray)
    # What it printed on stdout, in bytes: base64 lines as the bytes they decode to, others whole,
    # each at least FULL_LINE_BYTES.
    printed: int = 0
    too_big: int | None = None  # the limit its stdout passed (bytes), once it did
    stderr: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_LINES))


@dataclass
class StepOutput:
    """A `--label`led step's lines, by task id; srun's own messages apart. Task i ran on `nodes[i]`
    (the step's `--nodelist`, laid out by Slurm: module docstring); a label beyond them is no task
    of the step and is ignored.

    A task's stdout is capped as a whole, as over SSH: past `max_stdout` it is that node's error and
    what it printed is discarded, kept and to come. `done` is set when srun need not run on for its
    output: every task has printed its exit line or passed the limit, one at least the limit (a
    node printing without end would hold the step until the job's time limit)."""

    nodes: tuple[str, ...]
    tasks: dict[int, TaskOutput] = field(default_factory=dict)
    srun: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_LINES))
    max_stdout: int = field(default_factory=lambda: limits.limit_bytes("NODEAGENT_MAX_STDOUT_MIB"))
    done: threading.Event = field(default_factory=threading.Event, repr=False)
    # Called with a task's label once it has printed its exit line (or passed the limit), from the
    # thread reading srun's stdout: a fleet's progress tells of each node as its task ends.
    on_settled: Callable[[int], None] | None = field(default=None, repr=False)
    _settled: set[int] = field(default_factory=set, repr=False)
    _over: bool = field(default=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def stdout_line(self, line: str, at_s: float = 0.0) -> None:
        match = _LABELLED.fullmatch(line.rstrip("\r\n"))
        if match is None:
            return  # srun labels every line of a task; anything else is not a task's
        label = int(match[1])
        if self._line(label, match[2], at_s) and self.on_settled is not None:
            self.on_settled(label)  # outside the lock: the callback reads the task

    def _line(self, label: int, text: str, at_s: float) -> bool:
        """Take one line of task `label`; True when it settled the task."""
        with self._lock:
            task = self._task(label)
            if task is None:
                return False
            settled = label in self._settled
            encoded = _BASE64_LINE.fullmatch(text) is not None
            self._count(label, task, len(text) * 3 // 4 if encoded else len(text) + 1)
            mark, _, value = text.partition(" ")
            if mark == NODE_MARK:
                task.started = True
                name = value.strip()
                if name != task.node and task.said is None:
                    task.said = name[:HOST_NAME_MAX]
            elif mark == EXIT_MARK and _EXIT_CODE.fullmatch(value.strip()):
                task.exit_code, task.finished_s = int(value), at_s
                self._settle(label)
            elif encoded and task.too_big is None:
                task.encoded += text.encode("ascii")
            return not settled and label in self._settled

    def _count(self, label: int, task: TaskOutput, size: int) -> None:
        """A line of `size` bytes more from task `label`, counted as at least FULL_LINE_BYTES; past
        max_stdout what it printed is dropped, and what it prints from then on is not kept."""
        task.printed += max(FULL_LINE_BYTES, size)
        if task.printed > self.max_stdout and task.too_big is None:
            task.too_big, task.encoded, self._over = self.max_stdout, bytearray(), True
            self._settle(label)

    def _settle(self, label: int) -> None:
        """Task `label` needs srun no more (its exit line came, or its output passed the limit)."""
        self._settled.add(label)
        if self._over and len(self._settled) == len(self.nodes):
            self.done.set()

    def stderr_line(self, line: str) -> None:
        text = line.rstrip("\r\n")
        if not text.strip():
            return
        match = _LABELLED.fullmatch(text)
        with self._lock:
            if match is None:
                self.srun.append(text.strip())
            elif task := self._task(int(match[1])):
                task.stderr.append(match[2].strip())

    def _task(self, label: int) -> TaskOutput | None:
        if label >= len(self.nodes):
            return None
        task = self.tasks.get(label)
        if task is None:
            task = self.tasks[label] = TaskOutput(self.nodes[label])
        return task

    def by_node(self) -> dict[str, TaskOutput]:
        """The tasks that started (printed their NODE_MARK line), by the node Slurm ran each on."""
        return {t.node: t for t in self.tasks.values() if t.started}

    def naming(self, node: str) -> list[str]:
        """srun's own lines that name `node` ("Task launch for StepId=12.0 failed on node n2: ...")."""
        with self._lock:
            return [line for line in self.srun if re.search(rf"(?<![\w.-]){re.escape(node)}(?![\w.-])", line)]

    def about(self, node: str) -> str:
        """srun's lines naming `node`, else its last line: why the node's task did not start."""
        lines = self.naming(node)
        if lines:
            return "; ".join(lines[-2:])
        return self.srun[-1] if self.srun else "srun said nothing"


def task_document(
    task: TaskOutput, node: str, words: Sequence[str], timed_out: str | None = None
) -> tuple[dict[str, Any], int]:
    """The JSON object the task's command `words` printed, and its exit code; HostError when there
    is none. `timed_out`: the limit the step was stopped at, when it was."""
    command = shlex.join(words)
    last = task.stderr[-1] if task.stderr else ""
    if task.said is not None:
        raise HostError(
            REMOTE,
            f"Slurm ran this task on {node}, but its {NODE_MARK} line names {task.said!r}: its "
            "output is taken for neither node",
        )
    if task.too_big is not None:
        raise HostError(
            REMOTE,
            f"`{command}` on {node}: stdout output larger than {task.too_big / limits.MiB:g} MiB (limit "
            "NODEAGENT_MAX_STDOUT_MIB); the rest of it was discarded",
        )
    if task.exit_code is None and timed_out is not None:
        raise HostError(TIMEOUT, f"`{command}` on {node} did not finish within {timed_out}")
    if task.exit_code is None:
        raise HostError(
            REMOTE, f"`{command}` on {node} ended without an exit code (killed?): {last or 'no message'}"
        )
    if task.exit_code == _NOT_FOUND:
        raise HostError(
            MISSING,
            f"`{words[0]}` is not installed on {node} ({last or 'command not found'}); install "
            "it there, or name it with --agent PATH (a shared nodeagent.pyz works)",
        )
    if not task.encoded:
        raise HostError(REMOTE, f"`{command}` exited {task.exit_code} without JSON: {last or 'no message'}")
    try:
        doc = limits.loads_json(base64.b64decode(task.encoded, validate=True))
    except (binascii.Error, ValueError) as e:  # a JSONDecodeError is a ValueError
        raise HostError(
            REMOTE, f"`{command}` exited {task.exit_code} with output that is not JSON ({e})"
        ) from None
    if not isinstance(doc, dict):
        raise HostError(REMOTE, f"`{command}` printed JSON that is not an object")
    return doc, task.exit_code


# -- steps ----------------------------------------------------------------------------------------


def step(
    argv: Sequence[str],
    nodes: Sequence[str],
    timeout_s: float,
    stop: Callable[[], None] | None = None,
    on_settled: Callable[[StepOutput, int], None] | None = None,
) -> tuple[StepOutput, bool]:
    """Runs one srun, whose task i runs on `nodes[i]`, and reads its stdout and stderr line by line
    as they come. Past `timeout_s`, or once no task needs it (StepOutput.done), `stop()` (scancel)
    then SIGTERM and SIGKILL end it. The output, and whether it timed out. `on_settled(output,
    label)`: as each task ends (StepOutput.on_settled)."""
    out = StepOutput(tuple(nodes))
    if on_settled is not None:
        out.on_settled = lambda label: on_settled(out, label)
    start = time.monotonic()
    proc = subprocess.Popen(
        list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    readers = [
        threading.Thread(
            target=_read, args=(proc.stdout, lambda s: out.stdout_line(s, time.monotonic() - start))
        ),
        threading.Thread(target=_read, args=(proc.stderr, out.stderr_line)),
    ]
    for reader in readers:
        reader.daemon = True
        reader.start()
    threading.Thread(target=_done_on_exit, args=(proc, out.done), daemon=True).start()
    try:
        timed_out = not out.done.wait(timeout_s)
        if proc.returncode is None and stop is not None:  # past its time, or no task needs it
            with contextlib.suppress(SlurmUnavailable):
                stop()
    finally:
        _end(proc)
        for reader in readers:
            reader.join(timeout=STOP_GRACE_S)
    return out, timed_out


def _done_on_exit(proc: subprocess.Popen[bytes], done: threading.Event) -> None:
    proc.wait()
    done.set()


def _read(stream: IO[bytes], on_line: Callable[[str], None]) -> None:
    """Each line of `stream` to `on_line`, a line longer than MAX_LINE_BYTES dropped as it is read."""
    with stream:
        overlong = False
        while raw := stream.readline(MAX_LINE_BYTES + 1):
            whole = raw.endswith(b"\n")
            if not overlong and (whole or len(raw) <= MAX_LINE_BYTES):
                on_line(raw.decode(errors="replace"))
            overlong = not whole  # the rest of a line cut at the limit is dropped up to its end


def _end(proc: subprocess.Popen[bytes]) -> None:
    """srun stopped: SIGTERM (srun cancels its step), SIGKILL after STOP_GRACE_S."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()


# -- the run --------------------------------------------------------------------------------------

Shape = Callable[[SlurmNode, dict[str, Any], int], HostOutcome]
OnDone = Callable[[HostOutcome], None]


@dataclass(frozen=True)
class Options:
    agent: str = "nodeagent"
    minutes: int = 10  # the job's time limit, capped at the partition's
    parallel: int = DEFAULT_PARALLEL  # nodes probed alone at once
    immediate_s: int = IMMEDIATE_S


@dataclass
class SlurmRun:
    outcomes: dict[str, HostOutcome]
    source: dict[str, Any]  # the fleet document's "slurm" section


def run(
    target: Target, argv: Sequence[str], shape: Shape, options: Options, on_done: OnDone | None = None
) -> SlurmRun:
    """`options.agent ARGV` on every node of `target` Slurm can run it on; one HostOutcome per node,
    in the target's order. `on_done` hears of each node once, as soon as its outcome is known: the
    nodes Slurm will not run or cannot reach at once, those whose task did not start after the
    probe, the others as their task ends (from the thread reading srun's output)."""
    told = _Told(on_done)
    outcomes, runnable = _sorted_out(target.nodes)
    told.each(outcomes)
    source: dict[str, Any] = {
        "target": target.text,
        "kind": target.kind,
        "partition": target.text if target.kind == "partition" else None,
        "job_id": None,
        "agent": options.agent,
    }
    if runnable:
        partition = target.partition_for(runnable)
        if partition.available != "up":
            raise SlurmUnavailable(
                f"partition {partition.name} is {partition.available.upper()} in Slurm: it starts no job "
                "(`scontrol update partitionname=... state=up`)"
            )
        source["partition"] = partition.name
        try:
            outcomes |= _allocated(runnable, argv, shape, options, partition, source, told)
        except AllocationRefused:
            # A node may have left service since sinfo was asked (a slurmd that just stopped is
            # NOT_RESPONDING, and slurmctld allocates it to no one): asked again, those nodes get
            # their outcome and the rest are allocated once more.
            again, still = _sorted_out(_node_states(runnable))
            if not still or len(still) == len(runnable):
                raise
            told.each(again)
            outcomes |= again | _allocated(still, argv, shape, options, partition, source, told)
    ordered = {node.name: outcomes[node.name] for node in target.nodes}
    told.each(ordered)  # those not told yet: a task that gave no exit line
    return SlurmRun(ordered, source)


class _Told:
    """Each node's outcome to `on_done` once, the first time it is known (a task's from the
    thread reading srun's output, the others from this one)."""

    def __init__(self, on_done: OnDone | None) -> None:
        self.on_done = on_done
        self.names: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, outcome: HostOutcome) -> None:
        if self.on_done is None:
            return
        with self.lock:
            if outcome.name in self.names:
                return
            self.names.add(outcome.name)
        self.on_done(outcome)

    def each(self, outcomes: Mapping[str, HostOutcome]) -> None:
        for outcome in outcomes.values():
            self(outcome)


def _sorted_out(nodes: Sequence[SlurmNode]) -> tuple[dict[str, HostOutcome], list[SlurmNode]]:
    """The outcomes of nodes Slurm cannot reach (errors) or will not run (UNKNOWN), and the others."""
    outcomes: dict[str, HostOutcome] = {}
    runnable: list[SlurmNode] = []
    for node in nodes:
        unreachable, not_run = unreachable_reason(node), not_run_reason(node)
        if unreachable is not None:
            outcomes[node.name] = HostOutcome(
                node.name, node.address, error=HostError(UNREACHABLE, unreachable)
            )
        elif not_run is not None:
            outcomes[node.name] = HostOutcome(node.name, node.address, doc=not_run_doc(node, not_run))
        else:
            runnable.append(node)
    return outcomes, runnable


def _allocated(
    nodes: Sequence[SlurmNode],
    argv: Sequence[str],
    shape: Shape,
    options: Options,
    partition: Partition,
    source: dict[str, Any],
    told: OnDone | None = None,
) -> dict[str, HostOutcome]:
    with allocation(nodes, partition, options, str(argv[0])) as job:
        source["job_id"] = job.job_id
        return job.run(nodes, argv, shape, told)


def _node_states(nodes: Sequence[SlurmNode]) -> list[SlurmNode]:
    """The nodes as sinfo shows them now (a node sinfo no longer lists keeps its earlier state)."""
    names = ",".join(n.name for n in nodes)
    argv = [tool("sinfo"), "--all", "--Node", "--noheader", f"--nodes={names}", f"--Format={NODE_FORMAT}"]
    now = {n.name: n for n in _nodes(run_command(argv, QUERY_TIMEOUT_S).stdout)}
    return [now.get(n.name, n) for n in nodes]


@dataclass
class Job:
    """A granted allocation, and the steps run in it."""

    job_id: int
    name: str
    options: Options
    minutes: int

    def srun(self, nodes: Sequence[SlurmNode], script: str, words: Sequence[str] = ()) -> list[str]:
        names = ",".join(n.name for n in nodes)
        count = len(nodes)
        placement = [f"--nodes={count}", f"--ntasks={count}", "--ntasks-per-node=1"]
        # Task i on the i-th node named: which node a task's output is from is Slurm's layout, not
        # what the task prints (module docstring).
        layout = ["--distribution=arbitrary", f"--nodelist={names}"]
        # --overlap: a step aborted on a dead node may hold its CPUs there until slurmctld gives up on
        # it; --no-kill and --kill-on-bad-exit=0: one node's failure or exit code stops no other task.
        keep_going = ["--overlap", "--no-kill", "--kill-on-bad-exit=0"]
        shell = ["sh", "-c", script, "nodeagent-slurm", *words]
        return [tool("srun"), f"--jobid={self.job_id}", "--label", *placement, *layout, *keep_going, *shell]

    def cancel(self) -> None:
        _cancel(self.name)

    def run(
        self, nodes: Sequence[SlurmNode], argv: Sequence[str], shape: Shape, told: OnDone | None = None
    ) -> dict[str, HostOutcome]:
        """The outcome of every node; `told` hears of the nodes whose task did not start after the
        probe, and of each other node as its task ends."""
        outcomes, started = self._probe(nodes)
        if told is not None:
            for outcome in outcomes.values():
                told(outcome)
        if not started:
            return outcomes
        words = [self.options.agent, *argv]
        begin = time.monotonic()

        def ended(out: StepOutput, label: int) -> None:
            # The final outcome is made once the step is over (a later line may still change it);
            # this one only tells the fleet's progress of a node whose task ended.
            if told is None:
                return
            try:
                task = out.tasks[label]
                told(_task_outcome(started[label], task, words, shape, None, time.monotonic() - begin))
            except Exception:  # srun's reader thread must go on reading, whatever this does
                return

        out, timed_out = step(
            self.srun(started, RUN_SCRIPT, words),
            [n.name for n in started],
            self.minutes * 60 + STEP_SLACK_S,
            self.cancel,
            ended,
        )
        elapsed = time.monotonic() - begin
        tasks = out.by_node()
        limit = f"the job's {self.minutes} min" if timed_out else None
        for node in started:
            outcomes[node.name] = _task_outcome(
                node, tasks.get(node.name), words, shape, limit, elapsed, out.about
            )
        return outcomes

    def _probe(self, nodes: Sequence[SlurmNode]) -> tuple[dict[str, HostOutcome], list[SlurmNode]]:
        """The nodes a task starts on; the others' errors. A node srun names in its errors did not
        start it. A launch that fails on one node aborts the step everywhere, so a node silent but
        not named (its task may have been cut before it printed) is asked again alone: its verdict
        is never a neighbour's."""
        out, _ = step(self.srun(nodes, PROBE_SCRIPT), [n.name for n in nodes], PROBE_TIMEOUT_S)
        answered = out.by_node()
        silent = [n for n in nodes if n.name not in answered]
        named = [n for n in silent if out.naming(n.name) or len(nodes) == 1]
        failed = {n.name: _not_started(n, out) for n in named}
        again = [n for n in silent if n.name not in failed]
        # Beyond the step's own limit: stopping srun (SIGTERM, then SIGKILL) and its readers.
        limit_s = PROBE_TIMEOUT_S + 3 * STOP_GRACE_S
        for done in (
            pool.bounded(again, self._probe_alone, self.options.parallel, lambda _: limit_s) if again else ()
        ):
            node, alone = done.item, done.outcome
            if isinstance(alone, pool.Overdue):
                error = HostError(TIMEOUT, f"no task started on {node.name} within {alone.limit_s:g}s")
                failed[node.name] = HostOutcome(node.name, node.address, error=error)
            elif alone is not None:
                failed[node.name] = alone
        return failed, [n for n in nodes if n.name not in failed]

    def _probe_alone(self, node: SlurmNode) -> HostOutcome | None:
        """None when a task starts on the node, else its error (never raises: a pool thread)."""
        try:
            out, _ = step(self.srun([node], PROBE_SCRIPT), [node.name], PROBE_TIMEOUT_S)
        except Exception as e:
            return HostOutcome(node.name, node.address, error=HostError(REMOTE, f"srun: {e}"))
        return None if node.name in out.by_node() else _not_started(node, out)


def _task_outcome(
    node: SlurmNode,
    task: TaskOutput | None,
    words: Sequence[str],
    shape: Shape,
    limit: str | None,
    elapsed: float,
    about: Callable[[str], str] | None = None,
) -> HostOutcome:
    """The node's outcome from what its task printed (`limit`: the step's, when it ran past it)."""
    try:
        if task is None or not task.started:
            why = about(node.name) if about is not None else "no line from it"
            raise HostError(REMOTE, f"the task on {node.name} did not start: {why}")
        doc, exit_code = task_document(task, node.name, words, limit)
        outcome = shape(node, doc, exit_code)
    except HostError as e:
        outcome = HostOutcome(node.name, node.address, error=e)
    outcome.duration_s = task.finished_s if task and task.finished_s is not None else elapsed
    return outcome


def _not_started(node: SlurmNode, out: StepOutput) -> HostOutcome:
    return HostOutcome(
        node.name,
        node.address,
        error=HostError(UNREACHABLE, f"slurmd on {node.name} did not start a task: {out.about(node.name)}"),
    )


@contextlib.contextmanager
def allocation(
    nodes: Sequence[SlurmNode], partition: Partition, options: Options, what: str
) -> Iterator[Job]:
    """salloc of whole `nodes`, the job cancelled on the way out whatever happens."""
    name = f"nodeagent-{what}-{secrets.token_hex(4)}"
    minutes = min(options.minutes, partition.max_minutes or options.minutes)
    where = [f"--partition={partition.name}", f"--nodes={len(nodes)}", "--ntasks-per-node=1"]
    where.append(f"--nodelist={','.join(n.name for n in nodes)}")
    # --exclusive: whole nodes (module docstring); --no-kill: the job outlives a node that fails.
    how = ["--exclusive", "--no-kill", f"--immediate={options.immediate_s}", f"--time={max(1, minutes)}"]
    argv = [tool("salloc"), "--no-shell", f"--job-name={name}", *where, *how]
    try:
        try:
            run_command(argv, options.immediate_s + QUERY_TIMEOUT_S)
        except SlurmUnavailable as e:
            raise AllocationRefused(
                f"Slurm did not allocate {len(nodes)} node(s) of partition {partition.name}: {e}"
            ) from None
        listed = run_command(
            [tool("squeue"), "--noheader", f"--name={name}", "--format=%i"], QUERY_TIMEOUT_S
        ).stdout.split()
        if not listed or not listed[0].isdigit():
            raise SlurmUnavailable(f"salloc granted job {name}, but squeue does not list it")
        yield Job(int(listed[0]), name, options, minutes)
    finally:
        _cancel(name)


def _cancel(name: str) -> None:
    """scancel of our job by its unique name (which works before its id is known); a job that could
    not be cancelled ends at its time limit, which is why it has one."""
    with contextlib.suppress(SlurmUnavailable, UsageError):
        run_command([tool("scancel"), f"--name={name}"], QUERY_TIMEOUT_S)


# -- shaping each node's document -----------------------------------------------------------------


def check_outcome(node: SlurmNode, doc: dict[str, Any], exit_code: int) -> HostOutcome:
    """A node's `nodeagent check --facts` report, named by its Slurm node name (the name the node
    gave itself kept as `hostname`), its facts apart for the fleet comparison."""
    doc["hostname"] = doc.get("host")
    doc["host"] = node.name
    for finding in doc.get("findings", []):
        if isinstance(finding, dict):
            finding["host"] = node.name
    facts = doc.pop("facts", None)
    try:
        validate(HostResult, {"address": node.address, **doc}, f"the report of {node.name}")
    except DocumentError as e:
        raise HostError(
            REMOTE,
            f"{node.name}'s nodeagent answered a report this one cannot read ({e.field_problem}); "
            "install the same nodeagent version there",
        ) from None
    return HostOutcome(node.name, node.address, doc, facts if isinstance(facts, dict) else None)


def agent_outcome(statuses: Mapping[int, str] | None = None) -> Shape:
    """A node's `nodeagent tune|bench` document; its status from the exit code via `statuses`."""
    table = dict(statuses or EXIT_STATUS)

    def shape(node: SlurmNode, doc: dict[str, Any], exit_code: int) -> HostOutcome:
        return HostOutcome(
            node.name, node.address, {"status": table.get(exit_code, "FAIL"), "exit_code": exit_code, **doc}
        )

    return shape


__all__ = [
    "EX_UNAVAILABLE",
    "Options",
    "Partition",
    "SlurmNode",
    "SlurmRun",
    "SlurmUnavailable",
    "StepOutput",
    "Target",
    "agent_outcome",
    "check_outcome",
    "not_run_reason",
    "parse_minutes",
    "parse_nodes",
    "parse_partitions",
    "resolve",
    "run",
    "task_document",
    "unreachable_reason",
]
