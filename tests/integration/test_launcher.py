"""`nodeagent exec` for real on this machine: the child reports its CPU affinity, memory policy,
environment and open files from the inside, with numactl and without it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.core import parse
from nodeagent.core.errors import UsageError
from nodeagent.tuning import binding, launcher
from tests.support.launch_child import CHILD, needs_two_cpus, write_profile

EXE = [sys.executable, "-m", "nodeagent", "exec"]
DEV = binding.DMA_LATENCY_DEV


RANK_VARS = launcher.RANK_VARS


numactl_missing = shutil.which("numactl") is None
NO_NUMACTL = (
    "numactl is not installed (Debian package `numactl`; `apt-get install numactl`), so the numactl "
    "path cannot run here"
)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    (tmp_path / "state" / "profiles").mkdir(parents=True)
    return tmp_path / "state"


@pytest.fixture
def child(tmp_path: Path) -> Path:
    path = tmp_path / "child.py"
    path.write_text(CHILD)
    return path


def _env(state: Path, numactl: bool, tmp: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in RANK_VARS and not k.startswith("NODEAGENT_")}
    env["NODEAGENT_STATE_DIR"] = str(state)
    env.pop("PYTHONPATH", None)
    if not numactl:
        # A PATH without numactl (the interpreter and the child are given by absolute path).
        empty = tmp / "bin-without-numactl"
        empty.mkdir(exist_ok=True)
        env["PATH"] = str(empty)
    env.update(extra or {})
    return env


def run_exec(
    state: Path,
    args: list[str],
    *,
    numactl: bool = False,
    extra: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = _env(state, numactl, state.parent, extra)
    return subprocess.run([*EXE, *args], capture_output=True, text=True, env=env, timeout=120, check=False)


def report(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def dry_run(state: Path, args: list[str], **kw: Any) -> dict[str, Any]:
    proc = run_exec(state, ["--dry-run", *args], **kw)
    return report(proc)


def _rank(cpus: Any, node: int | None = 0, **extra: Any) -> dict[str, Any]:
    return {"cpus": cpus, "numa_node": node, **extra}


PATHS = [
    pytest.param(False, id="syscalls"),
    pytest.param(True, id="numactl", marks=pytest.mark.skipif(numactl_missing, reason=NO_NUMACTL)),
]


# -- binding, for real ---------------------------------------------------------------------------


@needs_two_cpus
@pytest.mark.parametrize("numactl", PATHS)
@pytest.mark.parametrize(("cpus", "want"), [("1", [1]), ([0, 1], [0, 1])], ids=["cpu1", "cpus0-1"])
def test_child_runs_on_the_ranks_cpus_with_memory_bound_to_node_0(
    state: Path, child: Path, numactl: bool, cpus: Any, want: list[int]
) -> None:
    write_profile(state, {"name": "default", "ranks": [{"local_rank": 0, **_rank(cpus)}]})
    args = ["--local-rank", "0", "--", sys.executable, str(child)]
    plan = dry_run(state, args, numactl=numactl)
    assert plan["binding"] == ("numactl" if numactl else "syscalls")
    if numactl:
        assert plan["argv"][0].endswith("numactl")
        assert f"--physcpubind={parse.format_cpulist(want)}" in plan["argv"]
        assert "--membind=0" in plan["argv"]
    else:
        assert plan["argv"] == [sys.executable, str(child)]
    assert plan["affinity"] == want and plan["memory_policy"] == {"mode": "bind", "nodes": [0]}

    got = report(run_exec(state, args, numactl=numactl))
    assert got["affinity"] == want
    assert got["mempolicy"]["mode"] == "bind" and got["mempolicy"]["nodes"] == [0], got["mempolicy"]


@needs_two_cpus
@pytest.mark.parametrize("numactl", PATHS)
def test_a_rank_without_numa_node_gets_cpus_only(state: Path, child: Path, numactl: bool) -> None:
    write_profile(state, {"ranks": [{"local_rank": 0, "cpus": [1], "numa_node": None}]})
    got = report(run_exec(state, ["--", sys.executable, str(child)], numactl=numactl))
    assert got["affinity"] == [1]
    assert got["mempolicy"]["mode"] == "default"


def test_a_profile_without_ranks_binds_nothing(state: Path, child: Path) -> None:
    write_profile(state, {"env": {"A": "1"}})
    before = sorted(os.sched_getaffinity(0))
    got = report(run_exec(state, ["--", sys.executable, str(child)]))
    assert got["affinity"] == before and got["mempolicy"]["mode"] == "default"
    assert got["env"]["A"] == "1"


# -- no profile: the job runs unchanged, unless one was named ------------------------------------


def test_without_a_profile_the_job_runs_unchanged_after_one_warning(state: Path, child: Path) -> None:
    """A node where nobody ran `tune --apply`: the launchers start every rank through `nodeagent
    exec` (without --profile unless NODEAGENT_PROFILE names one), so the job must run as it would
    without nodeagent, with its own PID and exit code."""
    path = state / "profiles" / "default.json"
    env = _env(state, False, state.parent, {"CHILD_EXIT": "7", "LOCAL_RANK": "not-a-number"})
    proc = subprocess.Popen(
        [*EXE, "--", sys.executable, str(child)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 7, err  # the job's exit code: it ran
    got = json.loads(out)
    assert got["pid"] == proc.pid  # exec'd, as with a profile
    assert got["affinity"] == sorted(os.sched_getaffinity(0)) and got["mempolicy"]["mode"] == "default"
    # The environment is the caller's: no tf.data hook, no thread variables, nothing of ours.
    assert {k: v for k, v in got["env"].items() if k != "LC_CTYPE"} == {
        k: v for k, v in env.items() if k != "LC_CTYPE"
    }
    assert err.splitlines() == [
        f"nodeagent exec: warning: no profile default at {path}: running the job unchanged; create one "
        "with `nodeagent tune --apply --profile default`"
    ]
    plan = dry_run(state, ["--", sys.executable, "-c", "pass"])
    assert plan["argv"] == [sys.executable, "-c", "pass"] and plan["env"] == {"set": {}, "unset": []}
    assert plan["affinity"] is None and plan["tf_data"] is None
    assert plan["rank_source"] == "none (no profile)"
    assert any("running the job unchanged" in n for n in plan["notes"])


def test_without_a_profile_a_missing_command_is_still_127(state: Path) -> None:
    proc = run_exec(state, ["--", "no-such-command-here"])
    assert proc.returncode == 127
    assert "no profile default" in proc.stderr and "no-such-command-here: command not found" in proc.stderr


@pytest.mark.parametrize("mode", [[], ["--dry-run"], ["--measure"]], ids=["exec", "dry-run", "measure"])
def test_a_profile_named_explicitly_must_exist(state: Path, tmp_path: Path, mode: list[str]) -> None:
    """`--profile typo`: the job is not started (a pinned run was asked for, not an unpinned one),
    and the one line names the profile, the folder and the profiles that are there."""
    write_profile(state, {}, "fast")
    write_profile(state, {}, "default")
    marker = tmp_path / "started"
    job = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    proc = run_exec(state, [*mode, "--profile", "typo", "--", *job])
    line = _one_line_error(proc)
    assert line == (
        f"nodeagent: error: no profile 'typo' in {state / 'profiles'} (there: default, fast); name "
        "one of those, or create it with `nodeagent tune --apply --profile typo`"
    )
    assert not marker.exists()


def test_a_profile_named_explicitly_in_an_empty_state_folder(tmp_path: Path) -> None:
    state = tmp_path / "never-tuned"
    marker = tmp_path / "started"
    job = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    line = _one_line_error(run_exec(state, ["--profile", "default", "--", *job]))
    assert f"no profile 'default' in {state / 'profiles'} (there: none)" in line
    assert not marker.exists()


def test_a_corrupt_profile_is_still_an_error_not_a_silent_unpinned_run(state: Path, child: Path) -> None:
    write_profile(state, "{not json")
    line = _one_line_error(run_exec(state, ["--", sys.executable, str(child)]))
    assert "not a readable profile" in line


# -- rank selection ------------------------------------------------------------------------------


def _two_ranks(state: Path) -> None:
    write_profile(
        state,
        {
            "ranks": [
                {"local_rank": 0, "cpus": [0], "numa_node": 0, "env": {"WHO": "rank0"}},
                {"local_rank": 1, "cpus": [1], "numa_node": 0, "env": {"WHO": "rank1"}},
            ]
        },
    )


@needs_two_cpus
@pytest.mark.parametrize("var", RANK_VARS)
def test_rank_from_the_launchers_variable(state: Path, child: Path, var: str) -> None:
    _two_ranks(state)
    proc = run_exec(state, ["--", sys.executable, str(child)], extra={var: "1"})
    got = report(proc)
    assert got["affinity"] == [1] and got["env"]["WHO"] == "rank1"
    assert proc.stderr == ""


@needs_two_cpus
def test_rank_variables_in_order_and_the_option_first(state: Path, child: Path) -> None:
    _two_ranks(state)
    args = ["--", sys.executable, str(child)]
    both = {"LOCAL_RANK": "1", "SLURM_LOCALID": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}
    assert report(run_exec(state, args, extra=both))["env"]["WHO"] == "rank1"
    slurm_first = {"SLURM_LOCALID": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "0", "MPI_LOCALRANKID": "0"}
    assert report(run_exec(state, args, extra=slurm_first))["env"]["WHO"] == "rank1"
    assert report(run_exec(state, ["--local-rank", "0", *args], extra=both))["env"]["WHO"] == "rank0"
    plan = dry_run(state, args, extra=slurm_first)
    assert (plan["rank"], plan["rank_source"]) == (1, "SLURM_LOCALID")


@needs_two_cpus
def test_no_rank_given_runs_rank_0_and_says_so_on_stderr(state: Path, child: Path) -> None:
    _two_ranks(state)
    proc = run_exec(state, ["--", sys.executable, str(child)])
    got = report(proc)
    assert got["affinity"] == [0] and got["env"]["WHO"] == "rank0"
    assert "no local rank given" in proc.stderr and "rank 0 of 2" in proc.stderr
    # With a single rank there is nothing to choose: no note.
    write_profile(state, {"ranks": [{"local_rank": 0, "cpus": [0], "numa_node": 0}]})
    assert run_exec(state, ["--", sys.executable, str(child)]).stderr == ""


# -- environment ---------------------------------------------------------------------------------


def test_environment_layers_rank_env_and_tf_data_hook(state: Path, child: Path) -> None:
    write_profile(
        state,
        {
            "env": {"OMP_NUM_THREADS": 2, "LAYER": "profile", "DROP_ME": None, "FLAG": True},
            "rank_env": {"0": {"TF_NUM_INTRAOP_THREADS": "2", "LAYER": "rank_env"}},
            "ranks": [{"local_rank": 0, "cpus": None, "numa_node": None, "env": {"LAYER": "rank"}}],
            "tf_data": {"threading.private_threadpool_size": 2, "deterministic": False},
        },
    )
    extra = {"KEEP": "mine", "DROP_ME": "x", "PYTHONPATH": "/opt/lib", "LAYER": "caller"}
    got = report(run_exec(state, ["--", sys.executable, str(child)], extra=extra))
    env = got["env"]
    assert env["KEEP"] == "mine"  # the caller's environment passes through
    assert "DROP_ME" not in env  # null in the profile unsets
    assert env["OMP_NUM_THREADS"] == "2" and env["FLAG"] == "1"
    assert env["TF_NUM_INTRAOP_THREADS"] == "2"
    assert env["LAYER"] == "rank"  # os.environ < env < rank_env < the rank's own env
    assert env["PYTHONPATH"].split(os.pathsep) == [str(launcher.HOOKS_DIR), "/opt/lib"]
    assert json.loads(env[launcher.TF_DATA_ENV]) == {
        "deterministic": False,
        "threading.private_threadpool_size": 2,
    }
    plan = dry_run(state, ["--", sys.executable, str(child)], extra=extra)
    assert plan["env"]["unset"] == ["DROP_ME"]
    assert plan["env"]["set"]["LAYER"] == "rank" and "KEEP" not in plan["env"]["set"]


# -- the job replaces nodeagent ------------------------------------------------------------------


@pytest.mark.parametrize("numactl", PATHS)
def test_the_job_keeps_nodeagents_pid_exit_code_and_signals(state: Path, child: Path, numactl: bool) -> None:
    write_profile(state, {"ranks": [{"local_rank": 0, "cpus": [0], "numa_node": 0}]})
    env = _env(state, numactl, state.parent, {"CHILD_EXIT": "7"})
    proc = subprocess.Popen(
        [*EXE, "--", sys.executable, str(child)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 7, err
    assert json.loads(out)["pid"] == proc.pid  # execve: same process, no wrapper left behind

    env["CHILD_SIGNAL"] = str(int(signal.SIGTERM))
    env.pop("CHILD_EXIT")
    done = subprocess.run([*EXE, "--", sys.executable, str(child)], capture_output=True, env=env, check=False)
    assert done.returncode == -signal.SIGTERM


# -- /dev/cpu_dma_latency ------------------------------------------------------------------------


def _aggregate_latency() -> int:
    with open(DEV, "rb") as f:
        return int.from_bytes(f.read(4), sys.byteorder, signed=True)


def test_cpu_dma_latency_is_held_by_the_job_or_warned_about(state: Path, child: Path) -> None:
    requested = 57
    write_profile(state, {"launcher": {"cpu_dma_latency_us": requested}})
    held = os.path.exists(DEV) and os.access(DEV, os.W_OK)
    before = _aggregate_latency() if held else None
    proc = run_exec(state, ["--", sys.executable, str(child)])
    got = report(proc)
    if not held:
        assert got["latency"] is None
        assert f"nodeagent exec: warning: {DEV}" in proc.stderr, proc.stderr
        assert f"limit of {requested} us is not held" in proc.stderr
        return
    fd = got["env"][binding.DMA_LATENCY_ENV]
    assert got["fds"][fd] == DEV, got["fds"]  # the job itself holds the request open
    assert proc.stderr == ""
    # The kernel's aggregate is the smallest request (pm_qos_interface.rst): at most ours while
    # the job ran; when nothing else asked for less, exactly ours, and gone with the job's process.
    assert got["latency"] <= requested
    after = _aggregate_latency()
    if before == after and after > requested:
        assert got["latency"] == requested


def test_cpu_dma_latency_warning_when_the_device_is_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binding, "DMA_LATENCY_DEV", "/nonexistent/cpu_dma_latency")
    fd, warning = binding.hold_dma_latency(10)
    assert fd is None and warning is not None
    assert "/nonexistent/cpu_dma_latency: absent" in warning and "10 us is not held" in warning


def test_cpu_dma_latency_write_is_a_binary_s32() -> None:
    """pm_qos_interface.rst: a 4-byte write is taken as a binary s32 (else parsed as hex text)."""
    assert struct.pack("=i", 57) == (57).to_bytes(4, sys.byteorder, signed=True)


# -- the cgroup forbids --------------------------------------------------------------------------


def _one_line_error(proc: subprocess.CompletedProcess[str], code: int = 64) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nodeagent: error: "), proc.stderr
    return lines[0]


def test_cpus_outside_the_machine_are_refused_naming_them(state: Path, child: Path) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    outside = max(allowed) + 1
    write_profile(state, {"ranks": [{"local_rank": 0, "cpus": f"0,{outside}-{outside + 3}", "numa_node": 0}]})
    line = _one_line_error(run_exec(state, ["--", sys.executable, str(child)]))
    assert f"CPUs {outside}-{outside + 3} are not allowed here" in line
    assert "cgroup cpuset" in line or "online CPUs" in line


V1_CPUSET = Path("/sys/fs/cgroup/cpuset")


@pytest.fixture
def narrow_cpuset() -> Iterator[Path]:
    """A real cgroup v1 cpuset holding CPU 0 only (root, with the v1 cpuset hierarchy mounted)."""
    if os.geteuid() != 0:
        pytest.skip("creating a cgroup cpuset needs root")
    if not (V1_CPUSET / "cpuset.cpus").exists():
        pytest.skip(f"no cgroup v1 cpuset hierarchy at {V1_CPUSET} (this test creates a v1 group)")
    group = V1_CPUSET / f"nodeagent-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        (group / "cpuset.cpus").write_text("0")
        (group / "cpuset.mems").write_text((V1_CPUSET / "cpuset.mems").read_text().strip())
        yield group
    finally:
        group.rmdir()  # the processes that joined it have exited


@needs_two_cpus
def test_cpus_the_cgroup_forbids_exit_64_naming_cpus_and_cgroup(
    state: Path, child: Path, narrow_cpuset: Path
) -> None:
    write_profile(state, {"ranks": [{"local_rank": 0, "cpus": [0, 1], "numa_node": 0}]})
    procs = narrow_cpuset / "cgroup.procs"

    def join() -> None:  # runs in the forked child before exec: nodeagent starts inside the group
        procs.write_text(str(os.getpid()))

    for numactl in (False, True):
        proc = subprocess.run(
            [*EXE, "--", sys.executable, str(child)],
            capture_output=True,
            text=True,
            env=_env(state, numactl, state.parent),
            preexec_fn=join,  # one write between fork and exec: nothing here can deadlock
            timeout=120,
            check=False,
        )
        line = _one_line_error(proc)
        assert "CPUs 1 are not allowed here" in line
        assert str(narrow_cpuset) in line, line


# -- bad input: one line, exit 64 ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("{not json", "default.json:1: not a readable profile: not JSON"),
        ("[1, 2]", "default.json:1: not a profile"),
        # The profile's model (nodeagent.tuning.profile.ProfileDocument): the line and the field.
        ({"ranks": {"0": {}}}, "default.json:1: ranks: must be a list (got an object)"),
        ({"ranks": [{"cpus": "0-x"}]}, "ranks[0].cpus: not a CPU list: '0-x'"),
        ({"ranks": [{"cpus": [0], "numa_node": "zero"}]}, "ranks[0].numa_node: must be a NUMA node number"),
        ({"ranks": [{"local_rank": 0}, {"local_rank": 0}]}, "local rank 0 is in ranks[0] and ranks[1]"),
        ({"ranks": [{"cpu": [0]}]}, "ranks[0].cpu: unknown field (did you mean 'cpus'?)"),
        ({"env": {"A=B": "1"}}, 'env.A=B: "A=B" is not an environment variable name'),
        ({"env": {"A": [1]}}, "env.A: must be a string, a number, true/false or null (got a list)"),
        (
            {"launcher": {"cpu_dma_latency_us": -5}},
            "launcher.cpu_dma_latency_us: must be a number of microseconds",
        ),
        (
            {"launcher": {"memlock_soft": "lots"}},
            'launcher.memlock_soft: must be "unlimited" or a number of bytes',
        ),
        ({"tf_data": [1]}, "tf_data: must be an object (got a list)"),
        ({"ranks": [{"cpus": [0], "numa_node": 63}]}, "NUMA node(s) 63 are not online here"),
        # Limits (nodeagent.core.limits): a profile is a few KiB of shallow JSON.
        ('{"env": {"PAD": "' + "x" * (2 << 20) + '"}}', "larger than 1 MiB (limit NODEAGENT_MAX_INPUT_MIB)"),
        ("[" * 5000 + "]" * 5000, "nested deeper than 64 levels (limit NODEAGENT_MAX_DEPTH)"),
    ],
    # A short id: pytest puts it in PYTEST_CURRENT_TEST, which the job inherits (a 2 MiB id is E2BIG).
    ids=lambda v: v if not isinstance(v, str) or len(v) < 60 else f"{v[:20]}...({len(v)} chars)",
)
def test_corrupt_profiles_exit_64_with_one_line(state: Path, child: Path, doc: Any, message: str) -> None:
    write_profile(state, doc)
    line = _one_line_error(run_exec(state, ["--local-rank", "0", "--", sys.executable, str(child)]))
    assert message in line, line


def test_bad_invocations_exit_64_with_one_line(state: Path, child: Path) -> None:
    _two_ranks(state)
    line = _one_line_error(run_exec(state, ["--local-rank", "5", "--", sys.executable, str(child)]))
    assert "local rank 5 is not in profile" in line and "rank(s) 0-1" in line
    line = _one_line_error(run_exec(state, ["--", "true"], extra={"LOCAL_RANK": "two"}))
    assert "LOCAL_RANK='two' is not a local rank" in line
    assert "Missing argument" in _one_line_error(run_exec(state, []))
    assert "--local-rank" in _one_line_error(run_exec(state, ["--local-rank", "-1", "--", "true"]))
    assert "profile name" in _one_line_error(run_exec(state, ["--profile", "../x", "--", "true"]))


def test_a_missing_command_is_127_like_env(state: Path) -> None:
    write_profile(state, {})
    line = _one_line_error(run_exec(state, ["--", "no-such-command-here"]), code=127)
    assert "no-such-command-here: command not found" in line


# -- the pure part -------------------------------------------------------------------------------


def _machine(**kw: Any) -> launcher.Machine:
    base: dict[str, Any] = {
        "online_cpus": list(range(8)),
        "cpuset": list(range(8)),
        "cpuset_source": "/sys/fs/cgroup/cpuset.cpus.effective",
        "numa_nodes": [0, 1],
        "mems_allowed": [0, 1],
        "arch": "x86_64",
    }
    base.update(kw)
    return launcher.Machine(**base)


def _prepare(doc: dict[str, Any], machine: launcher.Machine, numactl: bool = True) -> launcher.Launch:
    def which(name: str, path: str | None) -> str | None:
        if name == "numactl":
            return "/usr/bin/numactl" if numactl else None
        return f"/usr/bin/{name}"

    return launcher.prepare(doc, "p.json", ["python", "train.py"], 0, {}, machine, which)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"env": [1]}, "p.json:2: env: must be an object (got a list)"),
        ({"env": {"": "1"}}, 'env.: "" is not an environment variable name'),
        ({"env": {"A": "a\x00b"}}, "env.A: holds a NUL byte"),
        ({"env": {"A": {}}}, "env.A: must be a string, a number, true/false or null (got an object)"),
        ({"rank_env": [1]}, "rank_env: must be an object (got a list)"),
        ({"rank_env": {"x": {}}}, 'rank_env.x: "x" is not a local rank'),
        ({"ranks": {"0": {}}}, "ranks: must be a list (got an object)"),
        ({"ranks": [1]}, "ranks[0]: must be an object (got 1)"),
        ({"ranks": [{"local_rank": None}]}, "ranks[0].local_rank: is null"),
        ({"ranks": [{"local_rank": True}]}, "ranks[0].local_rank: must be a local rank number (0 or more)"),
        ({"ranks": [{"cpus": [0]}, {"local_rank": 0}]}, "ranks: local rank 0 is in ranks[0] and ranks[1]"),
        ({"ranks": [{"cpus": "0-x"}]}, "ranks[0].cpus: not a CPU list: '0-x'"),
        ({"ranks": [{"cpus": [0, -1]}]}, "ranks[0].cpus: must be a CPU list"),
        ({"ranks": [{"cpus": []}]}, "ranks[0].cpus: is empty"),
        ({"ranks": [{"numa_node": "0"}]}, "ranks[0].numa_node: must be a NUMA node number"),
        ({"ranks": [{"mems": [0, -1]}]}, "ranks[0].mems[1]: must be a NUMA node number"),
        ({"launcher": [1]}, "launcher: must be an object (got a list)"),
        ({"launcher": {"cpu_dma_latency_us": -1}}, "launcher.cpu_dma_latency_us: must be a number of"),
        ({"launcher": {"cpu_dma_latency_us": 1 << 31}}, "to 2147483647 (the kernel's s32) (got 2147483648)"),
        ({"launcher": {"memlock_soft": True}}, 'launcher.memlock_soft: must be "unlimited" or a number'),
        ({"tf_data": [1]}, "tf_data: must be an object (got a list)"),
    ],
)
def test_a_document_given_directly_is_checked_against_the_profile_model(
    doc: dict[str, Any], message: str
) -> None:
    """prepare checks what it is given, not only what profile.load read: one line naming the file
    and the field, with what to do."""
    with pytest.raises(UsageError) as caught:
        _prepare(doc, _machine())
    line = str(caught.value)
    assert line.startswith("p.json:") and "\n" not in line, line
    assert message in line and line.endswith("; recreate the profile with `nodeagent tune --apply`"), line


def test_multi_node_ranks_bind_memory_to_all_their_nodes() -> None:
    doc = {"ranks": [{"local_rank": 0, "cpus": [0, 1, 4, 5], "numa_node": None, "mems": [1, 0]}]}
    plan = _prepare(doc, _machine())
    assert plan.argv[:3] == ["/usr/bin/numactl", "--physcpubind=0-1,4-5", "--membind=0-1"]
    assert _prepare(doc, _machine(), numactl=False).mems == [0, 1]


def test_a_kernel_without_numa_skips_memory_binding_for_node_0_only() -> None:
    doc = {"ranks": [{"local_rank": 0, "cpus": [0], "numa_node": 0}]}
    plan = _prepare(doc, _machine(numa_nodes=None))
    assert plan.mems is None and plan.argv[:2] == ["/usr/bin/numactl", "--physcpubind=0"]
    assert any("no NUMA in this kernel" in n for n in plan.notes)
    with pytest.raises(UsageError, match="NUMA node"):
        _prepare({"ranks": [{"local_rank": 0, "cpus": [0], "numa_node": 1}]}, _machine(numa_nodes=None))


def test_memory_the_cpuset_forbids_is_refused() -> None:
    doc = {"ranks": [{"local_rank": 0, "cpus": [0], "numa_node": 1}]}
    with pytest.raises(UsageError, match=r"memory of NUMA node\(s\) 1 is not allowed"):
        _prepare(doc, _machine(mems_allowed=[0]))


def test_unknown_architecture_without_numactl_binds_cpus_only() -> None:
    doc = {"ranks": [{"local_rank": 0, "cpus": [0], "numa_node": 0}]}
    plan = _prepare(doc, _machine(arch="riscv64"), numactl=False)
    assert plan.binding == "syscalls" and plan.mems is None and plan.cpus == [0]
    assert any("install numactl" in n for n in plan.notes)


def test_memlock_soft_limit_is_raised_for_the_job(state: Path, tmp_path: Path) -> None:
    """The pinned-memory tuner's launcher.memlock_soft: the job starts with the soft limit raised
    (up to the hard limit, which a process may not exceed)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 30
    write_profile(state, {"launcher": {"memlock_soft": want}})
    probe = tmp_path / "probe.py"
    probe.write_text("import resource; print(resource.getrlimit(resource.RLIMIT_MEMLOCK)[0])\n")
    # Start nodeagent with a lower soft limit, so that the raise is visible in the job.
    lower = min(soft, want) // 2 if soft != resource.RLIM_INFINITY else want // 2

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (lower, hard))

    env = _env(state, False, tmp_path)
    proc = subprocess.run(
        [*EXE, "--", sys.executable, str(probe)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
        preexec_fn=limit,
    )
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.strip()) == want
    assert dry_run(state, ["--", sys.executable, str(probe)])["memlock_soft"] == want
    write_profile(state, {"launcher": {"memlock_soft": "lots"}})
    bad = run_exec(state, ["--", sys.executable, str(probe)])
    assert bad.returncode == 64 and "memlock_soft" in bad.stderr
