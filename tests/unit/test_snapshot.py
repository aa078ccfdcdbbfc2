"""A snapshot holds everything the checks read: checks give the same verdicts on it as on the machine."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent import checks, engine
from nodeagent.api.check import declared_commands, declared_paths
from nodeagent.facts import node, topology
from nodeagent.host import Host, LocalHost, SnapshotHost, globwalk, recorder
from nodeagent.host.tree import DIR, FILE, LINK
from tests.support import random_trees
from tests.support.helpers import make_tree


def _verdicts(report: engine.Report) -> set[tuple[str, str, str]]:
    # Running processes come and go between two runs; everything else must be the same.
    return {
        (f.check_id, f.subject, f.status.value)
        for f in report.findings
        if not (
            f.check_id == "threads"
            and (f.subject.startswith("pid ") or f.subject in ("processes", "pinning"))
        )
    }


def test_checks_agree_on_this_machine_and_its_snapshot(tmp_path: Path) -> None:
    selected = checks.all_checks()
    out = tmp_path / "here.tar.gz"
    recorder.snapshot(
        LocalHost(),
        sorted({*declared_paths(selected), *node.PATHS}),
        sorted({*declared_commands(selected), *node.COMMANDS}),
        out,
    )
    live = engine.run_report(LocalHost(), selected)
    recorded = engine.run_report(SnapshotHost(out), selected)
    assert _verdicts(recorded) == _verdicts(live)
    # The GPU checks name their source (NVML here, recorded nvidia-smi there) in the summary.
    same_words = {c.id for c in selected} - {"threads", "gpu", "nvlink"}

    def summaries(report: engine.Report) -> dict[tuple[str, str], str]:
        return {(f.check_id, f.subject): f.summary for f in report.findings if f.check_id in same_words}

    assert summaries(recorded) == summaries(live)


def test_links_are_kept_as_links(tmp_path: Path) -> None:
    out = tmp_path / "net.tar.gz"
    rec = recorder.snapshot(LocalHost(), ["/sys/class/net/*/mtu"], [], out)
    assert rec.links, "class/net entries are links into /sys/devices"
    host = SnapshotHost(out)
    live = LocalHost()
    for name in live.listdir("/sys/class/net") or []:
        assert host.readlink(f"/sys/class/net/{name}") == live.readlink(f"/sys/class/net/{name}")
        assert host.read(f"/sys/class/net/{name}/mtu") == live.read(f"/sys/class/net/{name}/mtu")


def test_commands_are_recorded_with_their_failures(tmp_path: Path) -> None:
    out = tmp_path / "cmd.tar.gz"
    recorder.snapshot(LocalHost(), [], [("uname", "-r"), ("no-such-tool-xyz", "--version")], out)
    host = SnapshotHost(out)
    ok = host.run(["uname", "-r"])
    assert ok.ok and ok.stdout == LocalHost().run(["uname", "-r"]).stdout
    missing = host.run(["no-such-tool-xyz", "--version"])
    assert missing.exited == 127


# -- what leaves the node: process environments and command lines ------------------------------------

# The recorder's filter before it matched raw bytes: variable by variable, on the decoded name.
_KEEP_BY_NAME = re.compile(
    r"^(OMP_|KMP_|GOMP_|TF_|MKL_|OPENBLAS_|CUDA_|NCCL_|NVIDIA_|HOROVOD_|LOCAL_RANK$|RANK$|WORLD_SIZE$"
    r"|LOCAL_WORLD_SIZE$|SLURM_(LOCALID|NTASKS|CPUS_ON_NODE|CPUS_PER_TASK|JOB_CPUS_PER_NODE)$"
    r"|OMPI_COMM_WORLD_LOCAL_(RANK|SIZE)$|MPI_LOCALNRANKS$|SLURM_NTASKS_PER_NODE$)"
)


def _kept_by_name(data: bytes) -> bytes:
    kept = [item for item in data.split(b"\0") if _KEEP_BY_NAME.match(item.split(b"=", 1)[0].decode())]
    return b"\0".join(kept) + (b"\0" if kept else b"")


_NAMES = st.sampled_from(
    [
        "OMP_NUM_THREADS",
        "RANK",
        "RANKS",
        "XRANK",
        "LOCAL_RANK",
        "TF_",
        "AWS_SECRET_ACCESS_KEY",
        "PATH",
        "SLURM_NTASKS",
        "SLURM_NTASKS_PER_NODE",
        "SLURM_JOB_ID",
        "NCCL_DEBUG",
        "MPI_LOCALNRANKS",
        "",
        "=",
        "A",
    ]
)
_VALUES = st.text(alphabet="ab=1 _", max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_NAMES, st.booleans(), _VALUES), max_size=8), st.booleans())
def test_only_the_variables_the_checks_read_leave_the_node(
    items: list[tuple[str, bool, str]], trailing_nul: bool
) -> None:
    data = b"\0".join(f"{n}={v}".encode() if eq else n.encode() for n, eq, v in items)
    data += b"\0" if trailing_nul and items else b""
    assert recorder._filter_environ(data) == _kept_by_name(data)


def test_secrets_are_left_out_of_environments_and_command_lines() -> None:
    env = b"PATH=/usr/bin\0AWS_SECRET_ACCESS_KEY=xyz\0OMP_NUM_THREADS=8\0RANK=3\0RANKS=9\0"
    assert recorder._filter_environ(env) == b"OMP_NUM_THREADS=8\0RANK=3\0"
    cmdline = b"python\0train.py\0--password\0hunter2\0--api-key=abc\0--epochs\0003"
    assert recorder._redact_cmdline(cmdline) == (
        b"python\0train.py\0--password\0REDACTED\0--api-key=REDACTED\0--epochs\0003"
    )


def test_kept_variables_that_hold_secrets_are_masked_and_still_seen() -> None:
    """Variables of the kept families can hold secrets: their names stay (a check may ask whether
    one is set), their values do not leave the node."""
    env = (
        b"NVIDIA_API_KEY=nvapi-s3cr3t\0TF_VAR_db_password=hunter2\0NCCL_TOKEN=t0k\0"
        b"CUDA_CACHE_URL=https://bob:pa55@cache.example:8443/x?y=1\0TF_DATA_SOURCE=s3://AKIA0:sk@b/p\0"
        b"OMP_NUM_THREADS=8\0HOROVOD_GLOO_RENDEZVOUS_ADDR=10.0.0.1\0"
    )
    assert recorder._filter_environ(env) == (
        b"NVIDIA_API_KEY=REDACTED\0TF_VAR_db_password=REDACTED\0NCCL_TOKEN=REDACTED\0"
        b"CUDA_CACHE_URL=https://REDACTED@cache.example:8443/x?y=1\0TF_DATA_SOURCE=s3://REDACTED@b/p\0"
        b"OMP_NUM_THREADS=8\0HOROVOD_GLOO_RENDEZVOUS_ADDR=10.0.0.1\0"
    )


@pytest.mark.parametrize(
    ("cmdline", "masked"),
    [
        (b"/usr/bin/mysql\0-uroot\0-ps3cr3t\0db", b"/usr/bin/mysql\0-uroot\0-pREDACTED\0db"),
        (b"mysql\0-p\0db", b"mysql\0-p\0db"),  # a lone -p prompts; the next word is the database
        (b"sshpass\0-p\0s3cr3t\0ssh\0n1", b"sshpass\0-p\0REDACTED\0ssh\0n1"),
        (b"redis-cli\0-a\0s3cr3t\0ping", b"redis-cli\0-a\0REDACTED\0ping"),
        (
            b"python\0-m\0pip\0install\0-i\0https://u:s3cr3t@pypi.example/simple",
            b"python\0-m\0pip\0install\0-i\0https://REDACTED@pypi.example/simple",
        ),
        (b"ssh\0-p2222\0n1", b"ssh\0-p2222\0n1"),  # -p is a port for ssh: kept
    ],
)
def test_password_options_and_url_credentials_are_masked_in_command_lines(
    cmdline: bytes, masked: bytes
) -> None:
    assert recorder._redact_cmdline(cmdline) == masked


SECRETS = ("nvapi-s3cr3t-1", "hunter2-tfvar", "pa55-in-url", "mysql-s3cr3t", "flag-s3cr3t")


@pytest.mark.skipif(os.geteuid() != 0, reason="reading another process's environ takes root")
@pytest.mark.parametrize("redact", [False, True])
def test_a_snapshot_of_a_process_holding_secrets_contains_none_of_them(tmp_path: Path, redact: bool) -> None:
    """A real process with the secret forms in its environment and command line, recorded by
    `nodeagent snapshot` (the same recorder the fleet's pull runs on each node)."""
    env = {
        **os.environ,
        "NVIDIA_API_KEY": SECRETS[0],
        "TF_VAR_db_password": SECRETS[1],
        "NCCL_DEBUG_FILE": f"https://user:{SECRETS[2]}@logs.example/n",
        "OMP_NUM_THREADS": "3",
    }
    # argv[0] "mysql": its -p option is a password; --password=... is one for any program.
    code = "import sys, time; sys.stdout.write('up\\n'); sys.stdout.flush(); time.sleep(60)"
    argv = ["mysql", "-c", code, f"-p{SECRETS[3]}", f"--password={SECRETS[4]}"]
    holder = subprocess.Popen(argv, executable=sys.executable, env=env, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"up\n"
        out = tmp_path / "node.tar.gz"
        cmd = [sys.executable, "-m", "nodeagent", "snapshot", "--only", "threads", "-o", str(out)]
        done = subprocess.run(
            [*cmd, *(["--redact"] if redact else [])], check=False, capture_output=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
    finally:
        holder.kill()
        holder.wait()
    with tarfile.open(out) as tar:
        contents = b"".join(
            f.read() for m in tar.getmembers() if m.isfile() and (f := tar.extractfile(m)) is not None
        )
    environ = f"/proc/{holder.pid}/environ".lstrip("/")
    with tarfile.open(out) as tar:
        names = tar.getnames()
    assert environ in names  # the process was recorded
    assert [s for s in SECRETS if s.encode() in contents] == []
    assert b"NVIDIA_API_KEY=REDACTED" in contents and b"OMP_NUM_THREADS=3" in contents


# -- structure: folders a pattern passes through are kept, even without a declared file inside ---------


def _sparse_tree(root: Path) -> None:
    """Four CPUs and two NUMA nodes, with neither cpu/online nor node/online: the facts count the
    cpuN and nodeN folders themselves. cpu3 and node1 hold no file that a check declares."""
    cpu = "/sys/devices/system/cpu"
    files = {f"{cpu}/cpu{c}/topology/core_id": f"{c}\n" for c in range(3)}
    files[f"{cpu}/cpu3/uevent"] = "not declared\n"
    files["/sys/devices/system/node/node0/cpulist"] = "0-3\n"
    files["/sys/devices/system/node/node0/distance"] = "10 20\n"
    files["/sys/devices/system/node/node1/vmstat"] = "not declared\n"  # memoryless: no meminfo
    make_tree(root, files)


def test_cpu_and_node_folders_without_declared_files_survive_a_recording(tmp_path: Path) -> None:
    original = tmp_path / "tree"
    _sparse_tree(original)
    out = tmp_path / "sparse.tar.gz"
    patterns = sorted({*declared_paths(checks.all_checks()), *node.PATHS})
    recorder.snapshot(LocalHost(str(original)), patterns, [], out)

    def facts(host: Host) -> tuple[list[int], list[int], dict[int, dict[int, int]]]:
        t = topology.collect(host)
        return t.cpus_online, [n.id for n in t.numa_nodes], {n.id: n.distances for n in t.numa_nodes}

    before = facts(SnapshotHost(original))
    assert before == ([0, 1, 2, 3], [0, 1], {0: {0: 10, 1: 20}, 1: {}})
    assert facts(SnapshotHost(out)) == before
    assert SnapshotHost(out).listdir("/sys/devices/system/cpu/cpu3") == []


def _folders_on_the_way(host: Host, patterns: list[str]) -> list[str]:
    """The folders each proper prefix of each pattern matches, one glob at a time."""
    prefixes = {"/" + "/".join(p.strip("/").split("/")[:k]) for p in patterns for k in range(1, p.count("/"))}
    return sorted(path for prefix in prefixes for path in host.glob(prefix) if host.is_dir(path))


@settings(max_examples=300, deadline=None)
@given(entries=random_trees.entries_st(3), patterns=random_trees.patterns_st)
def test_every_folder_adds_exactly_the_folders_the_patterns_pass_through(
    entries: dict[str, Any], patterns: list[str]
) -> None:
    """The recorder's walk is the reference walk of the patterns and of the folders on their way."""
    tree = random_trees.memory_tree(entries)
    host = random_trees.TreeOnly(tree)
    files, links, dirs = random_trees.one_by_one(host, patterns)
    _, more_links, more_dirs = random_trees.one_by_one(host, _folders_on_the_way(host, patterns))
    found = globwalk.walk(tree, patterns, every_folder=True)
    assert {p: v for k, p, v in found if k == FILE and v is not None} == files
    assert {p: v for k, p, v in found if k == LINK} == {**links, **more_links}
    assert {p for k, p, _ in found if k == DIR} == dirs | more_dirs
