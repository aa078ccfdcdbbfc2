"""Fuzz and fault suite: hostile recordings and malformed configuration files
through the real command line, in a subprocess each, bounded and seeded.

Every input runs `python -m nodeagent ...` in a child process with a 30 s limit; the child's own
resource usage (os.wait4) gives its peak memory. Each run must: exit in {0, 1, 2, 3, 64}; print no
traceback; take under 30 s and 500 MB; write nothing outside its intended output file (the tmp
folder is listed before and after).

Inputs tried (hypothesis, derandomized, so the same inputs every run):
- hostile trees: 10 random trees (links with `..`, absolute links, link loops, FIFOs, a 3 MB
  value, garbage bytes, markup and control characters in every value and in the host name), each
  run twice (`check --root T --format json --output json:OUT`, and `check --root T -v`): 20 runs;
- hostile archives: 3 fixed tar.gz (members `../escape`, `/abs`, a link to /etc/shadow, a link
  loop, a FIFO member, hard links out of the tree), `check --root A.tar.gz --format json`: 3 runs;
- malformed files: 6 mutations (truncated, wrong types, huge numbers, bad dates, deep nesting,
  alias bombs, garbage bytes) of each of five documents: a playbook (`playbooks show FILE`), an
  inventory (`check --cluster FILE --limit nosuchhost`, hosts on 127.0.0.1 port 1), a baseline
  (`check --baseline FILE --root TREE`), a profile (`exec --profile NAME --dry-run -- true`) and
  a journal (`revert --list` with NODEAGENT_STATE_DIR): 30 runs; malformed files must fail
  with one line on stderr;
- a Prometheus flooding `fleet --prometheus` with a 1 GiB and a 96 MiB answer: exit 69, one line
  naming the limit, under 500 MB: 2 runs.
53 subprocess runs in all, about 40-60 s on two CPUs. The summary line (inputs tried, wall time,
the worst input's peak memory and time) is printed (visible with -s) and written to
build/fuzz-hostile-summary.txt.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.fuzzing import GARBAGE
from tests.support.measured import run_measured
from tests.support.paths import REPO, VM

# Real sshd, TensorFlow or many subprocesses: left out of `make test-fast`.
pytestmark = pytest.mark.slow

EXITS = {0, 1, 2, 3, 64}
TIMEOUT_S = 30.0
MAX_RSS_MB = 500
HOSTILE_TEXT = [
    "x[/]y",
    "[bold red]x[/]",
    "[link=file:///etc/shadow]x[/link]",
    "\x1b[2J\x1b]0;title\x07",
    "\x9b31m\u202egnp.exe",
    ":thumbs_up: {0} %s $(id) `id`",
    "a\x00b",
    "|pipe|<b>&amp;</b>",
]
TREE_EXAMPLES = 10
CONFIG_EXAMPLES = 6


@dataclass
class Run:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    max_rss_mb: float


@dataclass
class Stats:
    runs: int = 0
    started: float = field(default_factory=time.monotonic)
    worst_rss: tuple[float, str] = (0.0, "")
    worst_time: tuple[float, str] = (0.0, "")
    failures: list[str] = field(default_factory=list)


STATS = Stats()


def run_limited(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> Run:
    """`python -m nodeagent ARGS` in a child with a time limit; its peak memory from wait4."""
    m = run_measured(
        [sys.executable, "-m", "nodeagent", *args],
        {**os.environ, "COLUMNS": "200", **(env or {})},
        TIMEOUT_S,
        signal.SIGKILL,
        group=True,
        cwd=cwd,
    )
    run = Run(args, m.code, m.stdout, m.stderr, m.seconds, m.peak_mb)
    label = " ".join(args)
    STATS.runs += 1
    STATS.worst_rss = max(STATS.worst_rss, (m.peak_mb, label))
    STATS.worst_time = max(STATS.worst_time, (m.seconds, label))
    return run


def assert_sane(run: Run, one_line_error: bool = False) -> None:
    label = " ".join(run.args)
    assert run.seconds < TIMEOUT_S, f"{label}: took {run.seconds:.1f}s (killed at the limit)"
    assert run.returncode in EXITS, f"{label}: exit {run.returncode}\n{run.stderr[-3000:]}"
    assert "Traceback" not in run.stderr, f"{label}:\n{run.stderr[-3000:]}"
    assert run.max_rss_mb < MAX_RSS_MB, f"{label}: {run.max_rss_mb:.0f} MB"
    if one_line_error and run.returncode == 64:
        # One line per mistake (a file with several reports each, by line), each a whole message.
        lines = [line for line in run.stderr.splitlines() if line.strip()]
        assert lines, f"{label}: exit 64 with nothing on stderr"
        assert all(line.startswith("nodeagent: error: ") for line in lines), f"{label}:\n{run.stderr[-3000:]}"
        assert len(set(lines)) == len(lines), f"{label}: a mistake reported twice:\n{run.stderr[-3000:]}"


def listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.fixture(scope="module", autouse=True)
def summary() -> Iterator[None]:
    # From this module's first test: pytest imports every module at collection, long before.
    STATS.started = time.monotonic()
    yield
    wall = time.monotonic() - STATS.started
    line = (
        f"fuzz-hostile: {STATS.runs} inputs in {wall:.1f}s; worst peak memory {STATS.worst_rss[0]:.0f} MB "
        f"({STATS.worst_rss[1][:120]}); slowest {STATS.worst_time[0]:.1f}s ({STATS.worst_time[1][:120]})"
    )
    print(f"\n{line}")
    out = REPO / "build"
    out.mkdir(exist_ok=True)
    (out / "fuzz-hostile-summary.txt").write_text(line + "\n")


# -- hostile trees --------------------------------------------------------------------------------

# Paths the checks and facts read, where a hostile value reaches a finding or a fact.
VALUE_PATHS = [
    "proc/sys/vm/swappiness",
    "proc/sys/kernel/osrelease",
    "proc/sys/kernel/hostname",
    "proc/sys/net/core/rmem_max",
    "proc/cpuinfo",
    "proc/meminfo",
    "proc/self/limits",
    "proc/cmdline",
    "etc/os-release",
    "sys/devices/system/cpu/online",
    "sys/devices/system/cpu/cpuidle/current_driver",
    "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
    "sys/devices/system/cpu/cpu0/topology/core_id",
    "sys/devices/system/cpu/cpu0/topology/thread_siblings_list",
    "sys/devices/system/node/node0/cpulist",
    "sys/devices/system/node/node0/meminfo",
    "sys/kernel/mm/transparent_hugepage/enabled",
    "sys/class/net/eth0/operstate",
    "sys/class/net/eth0/speed",
    "sys/class/net/eth0/mtu",
    "sys/bus/pci/devices/0000:00:01.0/class",
    "sys/bus/pci/devices/0000:00:01.0/current_link_speed",
    "sys/class/infiniband/mlx5_0/ports/1/state",
]
LINK_PATHS = [
    "sys/class/net/eth0/device",
    "sys/bus/pci/devices/0000:00:02.0",
    "sys/devices/system/cpu/cpu1",
    "sys/class/infiniband/mlx5_0/device",
    "proc/self",
    "sys/block/sda",
]
LINK_TARGETS = [
    "../../../../../../../../etc/shadow",
    "/etc/shadow",
    "/",
    "..",
    ".",
    "../../../../..",
    "loop",  # made a loop below
    "/proc/self/root",
    "../" * 40,
]


def hostile_value() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.sampled_from([t.encode("utf-8", "surrogatepass") for t in HOSTILE_TEXT]),
        st.sampled_from(GARBAGE),
        st.binary(max_size=64),
        st.lists(st.sampled_from(HOSTILE_TEXT), min_size=1, max_size=4).map(lambda xs: " ".join(xs).encode()),
        st.just(b"9" * 3_000_000),  # a huge value
        st.just(b"[bold]" * 100_000 + b"\n"),
    )


def build_tree(root: Path, data: Any) -> None:
    root.mkdir(parents=True)
    for marker in ("sys", "proc"):
        (root / marker).mkdir()
    host = data.draw(st.sampled_from(HOSTILE_TEXT), label="hostname")
    (root / "nodeagent.json").write_text(json.dumps({"hostname": host, "nodeagent": "0.1.0", "paths": []}))
    for rel in data.draw(st.lists(st.sampled_from(VALUE_PATHS), min_size=3, max_size=12, unique=True)):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.draw(hostile_value()))
    for rel in data.draw(st.lists(st.sampled_from(LINK_PATHS), max_size=4, unique=True)):
        link = root / rel
        if link.exists() or link.is_symlink():
            continue
        link.parent.mkdir(parents=True, exist_ok=True)
        target = data.draw(st.sampled_from(LINK_TARGETS))
        link.symlink_to(link.name if target == "loop" else target)
    if data.draw(st.booleans(), label="fifo"):
        fifo = root / data.draw(st.sampled_from(VALUE_PATHS))
        fifo.parent.mkdir(parents=True, exist_ok=True)
        if not fifo.exists():
            os.mkfifo(fifo)
    if data.draw(st.booleans(), label="commands"):
        (root / "commands").mkdir()
        for name in ("nvidia-smi-topo-m", "ulimit-l", "uname-r"):
            (root / "commands" / f"{name}.txt").write_bytes(data.draw(hostile_value()))


_count = iter(range(1_000_000))


def fresh(tmp_path: Path) -> Path:
    """A new folder per hypothesis example (tmp_path is shared by a test's examples)."""
    path = tmp_path / f"e{next(_count)}"
    path.mkdir()
    return path


@settings(
    max_examples=TREE_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(data=st.data())
def test_hostile_tree(tmp_path: Path, data: Any) -> None:
    work = fresh(tmp_path)
    tree = work / "tree"
    build_tree(tree, data)
    out = work / "out.json"
    before = listing(work)
    run = run_limited(["check", "--root", str(tree), "--format", "json", "--output", f"json:{out}"], cwd=work)
    assert_sane(run)
    json.loads(run.stdout)
    assert listing(work) == before | {"out.json"}, sorted(listing(work) ^ before)
    json.loads(out.read_text())
    table = run_limited(["check", "--root", str(tree), "-v"], cwd=work)
    assert_sane(table)
    assert listing(work) == before | {"out.json"}


def _member(
    tar: tarfile.TarFile, name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = ""
) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


ARCHIVES: dict[str, list[tuple[str, bytes, bytes, str]]] = {
    "traversal": [
        ("sys/", b"", tarfile.DIRTYPE, ""),
        ("proc/", b"", tarfile.DIRTYPE, ""),
        ("../escape.txt", b"out", tarfile.REGTYPE, ""),
        ("/tmp/absolute-member.txt", b"abs", tarfile.REGTYPE, ""),
        ("proc/sys/vm/../../../../../etc/passwd", b"x", tarfile.REGTYPE, ""),
        ("proc/sys/vm/swappiness", b"[bold]x[/] \x1b[2J", tarfile.REGTYPE, ""),
    ],
    "links": [
        ("sys/", b"", tarfile.DIRTYPE, ""),
        ("proc/", b"", tarfile.DIRTYPE, ""),
        ("proc/cpuinfo", b"", tarfile.SYMTYPE, "/etc/shadow"),
        ("proc/meminfo", b"", tarfile.SYMTYPE, "../../../../etc/passwd"),
        ("sys/devices/system/cpu/online", b"", tarfile.LNKTYPE, "/etc/passwd"),
        ("sys/class/net/eth0", b"", tarfile.SYMTYPE, "eth0"),
        ("sys/a", b"", tarfile.SYMTYPE, "b"),
        ("sys/b", b"", tarfile.SYMTYPE, "a"),
        ("proc/sys/vm/swappiness", b"", tarfile.FIFOTYPE, ""),
        ("sys/dev", b"", tarfile.CHRTYPE, ""),
    ],
    "duplicates": [
        ("sys/", b"", tarfile.DIRTYPE, ""),
        ("proc/", b"", tarfile.DIRTYPE, ""),
        *[("proc/sys/vm/swappiness", str(i).encode(), tarfile.REGTYPE, "") for i in range(50)],
        ("proc/sys/vm", b"not a dir", tarfile.REGTYPE, ""),
        ("nodeagent.json", b'{"hostname": "[/]' + b"\\u001b" + b'"}', tarfile.REGTYPE, ""),
    ],
}


@pytest.mark.parametrize("name", sorted(ARCHIVES))
def test_hostile_archive(tmp_path: Path, name: str) -> None:
    archive = tmp_path / f"{name}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for member, data, kind, link in ARCHIVES[name]:
            _member(tar, member, data, kind, link)
    before = listing(tmp_path)
    absolute = Path("/tmp/absolute-member.txt").exists()
    run = run_limited(["check", "--root", str(archive), "--format", "json"], cwd=tmp_path)
    assert_sane(run)
    assert listing(tmp_path) == before
    assert not (tmp_path.parent / "escape.txt").exists()
    assert Path("/tmp/absolute-member.txt").exists() == absolute


# -- malformed configuration files ----------------------------------------------------------------

PLAYBOOK = """\
name: fuzz
description: a playbook to corrupt
checks: [kernel, cstates]
budget_s: 5
fail_on: fail
params:
  kernel:
    swappiness_max: 10
"""
INVENTORY = """\
defaults:
  user: nobody
  port: 1
  connect_timeout: 1
hosts:
  - name: a
    address: 127.0.0.1
  - name: b
    address: 127.0.0.1
groups:
  g: [a, b]
"""


def _nest(depth: int) -> str:
    return "[" * depth + "]" * depth


MUTATIONS: list[tuple[str, Any]] = [
    ("truncate", lambda text, n: text[: max(1, n % len(text))]),
    ("wrong types", lambda text, n: text.replace(": ", ": [1, {x: 2}]  # ", 1 + n % 3)),
    (
        "huge numbers",
        lambda text, n: text.replace("5", "9" * 4000).replace("10", "1e999").replace("1", "-1" * 50),
    ),
    ("bad dates", lambda text, n: text + "\ncreated: 2026-13-45T99:99:99Z\nrecorded_at: 0000-00-00\n"),
    ("deep nesting", lambda text, n: text + f"\nnested: {_nest(5000)}\n"),
    (
        "aliases",
        lambda text, n: (
            "a: &a [x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
                for p, c in zip("abcdefgh", "bcdefghi", strict=True)
            )
            + text
        ),
    ),
    (
        "garbage",
        lambda text, n: text[: n % len(text)] + '\x00\xff\ufeff{["\t:\n- - -: !!python/object:os.system ls\n',
    ),
    ("empty", lambda text, n: ""),
    ("json wrong shape", lambda text, n: json.dumps([[["x"]] * 3, None, 1e308, "\u202e"])),
]


def mutated(text: str, data: Any) -> str:
    _, fn = data.draw(st.sampled_from(MUTATIONS), label="mutation")
    out: str = fn(text, data.draw(st.integers(0, 10_000), label="n"))
    return out


@pytest.fixture(scope="module")
def vm_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("vm") / "vm"
    root.mkdir()
    with tarfile.open(VM) as tar:
        tar.extractall(root, filter="tar")
    return root


@pytest.fixture(scope="module")
def baseline_text(vm_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("baseline") / "baseline.json"
    run = run_limited(["baseline", "save", "--root", str(vm_tree), str(path)])
    assert run.returncode == 0, run.stderr
    return path.read_text()


JOURNAL = {
    "id": "20260101T000000Z-abcdef",
    "host": {"kind": "local", "name": "n"},
    "created": "2026-01-01T00:00:00Z",
    "created_ns": 1767225600000000000,
    "seq": 1,
    "state": "applied",
    "writes": [{"path": "/proc/sys/vm/swappiness", "before": "60", "after": "10", "tuner": "sysctl"}],
    "files": [],
    "profile": None,
}
PROFILE = {"name": "default", "host": "n", "env": {"OMP_NUM_THREADS": "4"}, "ranks": []}

CONFIG_SETTINGS = settings(
    max_examples=CONFIG_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@CONFIG_SETTINGS
@given(data=st.data())
def test_malformed_playbook(tmp_path: Path, data: Any) -> None:
    tmp_path = fresh(tmp_path)
    path = tmp_path / "pb.yml"
    path.write_text(mutated(PLAYBOOK, data), errors="surrogateescape")
    assert_sane(run_limited(["playbooks", "show", str(path)]), one_line_error=True)


@CONFIG_SETTINGS
@given(data=st.data())
def test_malformed_inventory_fails_before_connecting(tmp_path: Path, data: Any) -> None:
    tmp_path = fresh(tmp_path)
    path = tmp_path / "hosts.yml"
    path.write_text(mutated(INVENTORY, data), errors="surrogateescape")
    run = run_limited(["check", "--cluster", str(path), "--limit", "nosuchhost"])
    assert_sane(run, one_line_error=True)
    assert run.returncode == 64, f"--limit nosuchhost matched something?\n{run.stdout}{run.stderr}"


@CONFIG_SETTINGS
@given(data=st.data())
def test_malformed_baseline(tmp_path: Path, vm_tree: Path, baseline_text: str, data: Any) -> None:
    tmp_path = fresh(tmp_path)
    path = tmp_path / "baseline.json"
    path.write_text(mutated(baseline_text, data), errors="surrogateescape")
    run = run_limited(["check", "--baseline", str(path), "--root", str(vm_tree), "--format", "json"])
    assert_sane(run, one_line_error=True)


@CONFIG_SETTINGS
@given(data=st.data())
def test_malformed_profile(tmp_path: Path, data: Any) -> None:
    tmp_path = fresh(tmp_path)
    state = tmp_path / "state"
    (state / "profiles").mkdir(parents=True)
    (state / "profiles" / "default.json").write_text(
        mutated(json.dumps(PROFILE, indent=1), data), errors="surrogateescape"
    )
    run = run_limited(
        ["exec", "--profile", "default", "--dry-run", "--", "true"], env={"NODEAGENT_STATE_DIR": str(state)}
    )
    assert_sane(run, one_line_error=True)


@CONFIG_SETTINGS
@given(data=st.data())
def test_malformed_journal(tmp_path: Path, data: Any) -> None:
    tmp_path = fresh(tmp_path)
    state = tmp_path / "state"
    (state / "journal").mkdir(parents=True)
    (state / "journal" / f"{JOURNAL['id']}.json").write_text(
        mutated(json.dumps(JOURNAL, indent=1), data), errors="surrogateescape"
    )
    before = listing(state)
    run = run_limited(["revert", "--list"], env={"NODEAGENT_STATE_DIR": str(state)})
    assert_sane(run, one_line_error=True)
    assert listing(state) - {"lock"} <= before | {"lock"}


# -- files nodeagent reads back: the verify history, a recording's nodeagent.json ------------------


HOSTILE_HISTORIES = {
    "bad byte": b'{"time": "2026-01-01T00:00:00Z"}\n\xff\xfe\n',
    "deep JSON": ("[" * 100_000 + "]" * 100_000 + "\n").encode(),
    "json wrong shape": b"[1, 2, 3]\n",
}


@pytest.mark.parametrize("kind", list(HOSTILE_HISTORIES))
def test_a_hostile_history_is_one_line(tmp_path: Path, kind: str) -> None:
    """`nodeagent history` on a history that is not one nodeagent wrote: exit 64, one line naming
    the file and the line, never a traceback (a bad byte and deep JSON exited 70)."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "history.jsonl").write_bytes(HOSTILE_HISTORIES[kind])
    run = run_limited(["history"], env={"NODEAGENT_STATE_DIR": str(state)})
    assert_sane(run, one_line_error=True)
    assert run.returncode == 64 and f"{state / 'history.jsonl'}:" in run.stderr, (kind, run.stderr)


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_history_that_is_not_a_file_is_refused_before_reading(tmp_path: Path, kind: str) -> None:
    """A FIFO made `history` hang and /dev/zero grew it to 9.5 GB: only a regular file is read."""
    state = tmp_path / "state"
    state.mkdir()
    where = state / "history.jsonl"
    if kind == "fifo":
        os.mkfifo(where)
    else:
        where.symlink_to("/dev/zero")
    run = run_limited(["history"], env={"NODEAGENT_STATE_DIR": str(state)})
    assert_sane(run, one_line_error=True)
    assert run.returncode == 64 and "not a regular file" in run.stderr, run.stderr


def test_a_recording_with_a_deeply_nested_nodeagent_json_is_one_line(tmp_path: Path) -> None:
    """A recording's nodeagent.json nested 100,000 deep exited 70 (RecursionError)."""
    root = tmp_path / "node"
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "cpuinfo").write_text("processor\t: 0\n")
    (root / "nodeagent.json").write_text('{"paths": ' + _nest(100_000) + "}")
    run = run_limited(["check", "--root", str(root)])
    assert_sane(run, one_line_error=True)
    assert run.returncode == 64 and "nodeagent.json is not readable" in run.stderr, run.stderr


# -- a hostile Prometheus ---------------------------------------------------------------------------


@pytest.mark.parametrize("size_mib", [1024, 96], ids=["1 GiB", "96 MiB"])
def test_a_flood_from_prometheus_is_refused_in_bounded_memory(size_mib: int) -> None:
    """`fleet --prometheus` against a server answering 1 GiB (generated while sent): refused at
    NODEAGENT_MAX_PROMETHEUS_MIB while reading, before any parsing. An answer under the old cap
    (256 MiB) was parsed whole: 96 MiB took 766 MB for the first query alone."""
    from tests.support import promstack

    with promstack.flood(size_mib * 1024 * 1024) as url:
        run = run_limited(["fleet", "--prometheus", url])
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode == 69 and len(lines) == 1, run.stderr[-3000:]
    assert f"{url}/api/v1/query" in run.stderr and "(limit NODEAGENT_MAX_PROMETHEUS_MIB)" in run.stderr
    assert run.max_rss_mb < MAX_RSS_MB, f"{run.max_rss_mb:.0f} MB"
