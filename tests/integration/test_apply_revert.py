"""Apply, verify and revert end to end, as a user runs them, on writable copies of a sysfs tree.

Two kinds of copies of one node (tests/support/sysfs_node.py: 4 CPUs on 2 NUMA nodes):
- a plain folder (build_node), driven through `python -m nodeagent tune --root DIR --apply` and
  `nodeagent revert` in subprocesses: every runtime tuner, a SIGKILL after each single write, a
  write that fails half-way;
- a folder whose writes behave as the kernel's do (`SysfsHost`: one bare word per write, a
  newline on show, selector files re-rendered with the choice in brackets, EINVAL for anything
  else, and hugetlb pools that may come up short), driven in-process, where revert must restore
  every file byte for byte and the checks must turn OK for what each tuner fixes.

A plain file is not sysfs: whole-tree comparisons of plain copies go through `shown_by_kernel`
(the newline and the brackets sysfs `show` adds, nothing else).

Also here: `--apply` as an unprivileged user against this machine, and bad input (exit 64).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.api.tune import Plan, Tuner
from nodeagent.checks import cstates as cstates_check
from nodeagent.checks import hugepages as hugepages_check
from nodeagent.checks import numa as numa_check
from nodeagent.core.finding import Finding, Status
from nodeagent.tuners import c_states, cpu_governor, hugepages, numa_balancing, thp
from nodeagent.tuning import apply, journal, profile
from tests.support.helpers import one_finding
from tests.support.sysfs_node import CPU, HUGE, NODE, THP, SysfsHost, build_node, contents, shown_by_kernel

EXE = [sys.executable, "-m", "nodeagent"]
RUNTIME = ("cpu-governor", "hugepages", "thp", "numa-balancing")
PAGES = 512  # per node: 1 GiB of each 16 GiB node, well under max_fraction
# cpu-governor: 4 EPP + 4 governor + 1 turbo; hugepages: 2 nodes; thp: enabled + defrag; numa: 1.
ALL_WRITES = 14


def read(root: Path, path: str) -> str:
    return (root / path.lstrip("/")).read_text().strip()


# -- the command line ----------------------------------------------------------------------------


def run(
    *args: str, state: Path, env: dict[str, str] | None = None, prefix: tuple[str, ...] = (), **kw: Any
) -> subprocess.CompletedProcess[str]:
    """`python -m nodeagent ARGS` with its state in `state`; `prefix` runs it through another
    command (setpriv), `kw` go to subprocess.run (user=...)."""
    full = {k: v for k, v in os.environ.items() if k != apply.FAULT_KILL_ENV}
    full.update({"NODEAGENT_STATE_DIR": str(state), **(env or {})})
    try:
        return subprocess.run(
            [*prefix, *EXE, *args], capture_output=True, text=True, timeout=120, check=False, env=full, **kw
        )
    except PermissionError as e:  # switched to another user, who cannot execute the interpreter
        return subprocess.CompletedProcess([*EXE, *args], 126, "", str(e))


def apply_args(root: Path, only: tuple[str, ...]) -> list[str]:
    args = ["tune", "--root", str(root), "--apply", "--only", ",".join(only), "--format", "json"]
    if "hugepages" in only:
        args += ["--set", f"hugepages.pages_per_node={PAGES}"]
    return args


def the_journal(state: Path) -> journal.Journal:
    (j,) = journal.all_journals(state)
    return j


def test_the_node_plans_every_runtime_tuner(tmp_path: Path) -> None:
    root = build_node(tmp_path / "node")
    proc = run(
        "tune",
        "--root",
        str(root),
        "--only",
        ",".join(RUNTIME),
        "--set",
        f"hugepages.pages_per_node={PAGES}",
        "--format",
        "json",
        state=tmp_path / "state",
    )
    assert proc.returncode == 0, proc.stderr
    plans = {p["tuner"]: p for p in json.loads(proc.stdout)["plans"]}
    writes = [w for t in RUNTIME for c in plans[t]["changes"] for w in c.get("writes", [])]
    assert len(writes) == ALL_WRITES
    assert all(w["before"] != w["after"] for w in writes)
    assert [c["target"] for c in plans["cpu-governor"]["changes"]] == [
        "energy_performance_preference of CPUs 0-3",
        "scaling_governor of CPUs 0-3",
        "turbo (intel_pstate/no_turbo)",
    ]
    assert not (tmp_path / "state").exists()  # a dry run writes nothing, not even state


EXPECTED_AFTER = {
    "cpu-governor": {
        **{f"{CPU}/cpufreq/policy{c}/scaling_governor": "performance" for c in range(4)},
        **{f"{CPU}/cpufreq/policy{c}/energy_performance_preference": "performance" for c in range(4)},
        f"{CPU}/intel_pstate/no_turbo": "0",
    },
    "hugepages": {f"{NODE}/node{n}/hugepages/hugepages-2048kB/nr_hugepages": str(PAGES) for n in range(2)},
    "thp": {f"{THP}/enabled": "madvise", f"{THP}/defrag": "defer+madvise"},
    "numa-balancing": {"/proc/sys/kernel/numa_balancing": "0"},
}


@pytest.mark.parametrize("only", [*[(t,) for t in RUNTIME], (*RUNTIME, "c-states")], ids="+".join)
def test_apply_verify_revert(tmp_path: Path, only: tuple[str, ...]) -> None:
    root = build_node(tmp_path / "node")
    state = tmp_path / "state"
    original = contents(root)

    proc = run(*apply_args(root, only), state=state)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["applied"] is True and doc["journal"]
    runtime = [c for p in doc["plans"] for c in p["changes"] if c["scope"] == "runtime"]
    assert [f["status"] for f in doc["verify"]] == ["OK"] * len(runtime)
    expected = {path: value for t in only for path, value in EXPECTED_AFTER.get(t, {}).items()}
    assert {path: read(root, path) for path in expected} == expected
    changed = {p for p, data in contents(root).items() if data != original[p]}
    assert changed == set(expected)  # and nothing else
    j = the_journal(state)
    assert j.state == journal.APPLIED and len(j.writes) == len(expected)
    if "c-states" in only:
        saved = profile.load("default", state)
        assert saved["launcher"]["cpu_dma_latency_us"] == c_states.Params().limit_us
        assert doc["profile"] == str(state / "profiles" / "default.json")
    else:
        assert doc["profile"] is None

    back = run("revert", "--all", state=state)
    assert back.returncode == 0, back.stdout + back.stderr
    assert f"reverted: journal {j.id}: {len(expected)} runtime value(s) restored" in back.stdout
    assert shown_by_kernel(contents(root), original) == original
    assert the_journal(state).state == journal.REVERTED
    assert not (state / "profiles" / "default.json").exists()  # the profile did not exist before

    again = run("revert", "--all", state=state)
    assert again.returncode == 0 and "nothing to revert" in again.stdout
    assert shown_by_kernel(contents(root), original) == original


@pytest.mark.parametrize("k", range(1, ALL_WRITES + 1))
def test_sigkill_after_each_write_then_revert(tmp_path: Path, k: int) -> None:
    root = build_node(tmp_path / "node")
    state = tmp_path / "state"
    original = contents(root)

    proc = run(*apply_args(root, RUNTIME), state=state, env={"NODEAGENT_FAULT_KILL_AFTER_WRITES": str(k)})
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr)
    j = the_journal(state)
    assert j.state == journal.APPLYING and len(j.writes) == ALL_WRITES  # every old value, before any write
    changed = {p for p, data in contents(root).items() if data != original[p]}
    assert len(changed) == k  # the process died right after its k-th write

    back = run("revert", "--all", state=state)
    assert back.returncode == 0, back.stdout + back.stderr
    assert shown_by_kernel(contents(root), original) == original
    assert the_journal(state).state == journal.REVERTED


@pytest.fixture
def immutable() -> Iterator[list[Path]]:
    """Files made unwritable for the test, even for root (chattr +i), and writable again after."""
    paths: list[Path] = []
    yield paths
    for p in paths:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(p)], check=False, capture_output=True)
        else:
            p.chmod(0o644)


def make_unwritable(path: Path, registry: list[Path]) -> None:
    if os.geteuid() != 0:
        path.chmod(0o444)
        registry.append(path)
        return
    # Root ignores file modes (CAP_DAC_OVERRIDE); the immutable flag stops it.
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed: cannot make a file unwritable for root")
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(
            f"chattr +i failed on {path} ({done.stderr.strip()}): this file system has no immutable flag"
        )
    registry.append(path)


def test_a_failing_write_undoes_the_earlier_ones(tmp_path: Path, immutable: list[Path]) -> None:
    root = build_node(tmp_path / "node")
    state = tmp_path / "state"
    original = contents(root)
    make_unwritable(root / "proc/sys/kernel/numa_balancing", immutable)  # the last of the 14 writes

    proc = run(*apply_args(root, RUNTIME), state=state)
    assert proc.returncode == 64
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert re.fullmatch(
        r"nodeagent: error: /proc/sys/kernel/numa_balancing: writing '0' failed \((Operation not permitted|"
        r"Permission denied)\); the 13 earlier write\(s\) were undone \(journal \S+\)",
        lines[0],
    ), lines[0]
    assert shown_by_kernel(contents(root), original) == original
    j = the_journal(state)
    assert j.state == journal.ROLLED_BACK and j.id in lines[0]


# -- an unprivileged user on this machine ------------------------------------------------------------


@pytest.fixture
def shared_state() -> Iterator[Path]:
    """A state folder any user can write (pytest's own tmp folders are private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="nodeagent-state-", dir="/tmp"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def unprivileged() -> dict[str, Any]:
    """Options for `run` that start nodeagent as nobody (uid 65534) when the tests run as root:
    through setpriv, else with subprocess's own user switch (on this VM only setpriv manages to
    exec the venv's interpreter, a link into /root)."""
    if os.geteuid() != 0:
        return {}
    tries: list[dict[str, Any]] = []
    if shutil.which("setpriv"):
        tries.append({"prefix": ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"), "cwd": "/"})
    tries.append({"user": 65534, "group": 65534, "extra_groups": [], "cwd": "/"})
    errors = []
    for opts in tries:
        probe = run("--version", state=Path("/nonexistent"), **opts)
        if probe.returncode == 0:
            return opts
        errors.append(probe.stderr.strip()[:160])
    pytest.skip(f"uid 65534 cannot run {sys.executable} ({'; '.join(errors)}): make the venv readable by all")


def test_non_root_apply_of_a_system_tuner_changes_nothing(shared_state: Path) -> None:
    path = Path(THP) / "enabled"
    if not path.exists():
        pytest.skip(f"{path} is absent on this machine: no live system tuner to refuse")
    before = path.read_text()
    current = re.search(r"\[(\w+)\]", before)
    want = "never" if current and current.group(1) == "always" else "always"  # a real change here
    opts = unprivileged()
    proc = run("tune", "--apply", "--only", "thp", "--set", f"thp.enabled={want}", state=shared_state, **opts)
    assert proc.returncode == 64, proc.stdout + proc.stderr
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("nodeagent: error: applying thp writes /sys and /proc/sys and needs root")
    assert "nothing was changed" in line
    assert path.read_text() == before
    assert list(shared_state.iterdir()) == []  # no journal, no profile


def test_non_root_cpu_governor_on_this_machine(shared_state: Path) -> None:
    opts = unprivileged()
    dry = run("tune", "--only", "cpu-governor", "--format", "json", state=shared_state, **opts)
    assert dry.returncode == 0, dry.stderr
    (plan,) = json.loads(dry.stdout)["plans"]
    proc = run("tune", "--apply", "--only", "cpu-governor", state=shared_state, **opts)
    if any(c["scope"] == "runtime" for c in plan["changes"]):
        assert proc.returncode == 64 and len(proc.stderr.splitlines()) == 1
        assert "needs root" in proc.stderr
    else:
        # This VM has no cpufreq: nothing to write, so nothing needs root.
        assert proc.returncode == 0, proc.stderr
        assert "applied: nothing" in proc.stdout
        assert any("nothing to plan" in n for n in plan["notes"])
    assert list(shared_state.iterdir()) == []


# -- bad input ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--only", "nope"], "unknown tuner id 'nope'"),
        (["--set", "hugepages.pages_per_node=lots"], "tuner hugepages: parameter 'pages_per_node' wants int"),
        (["--set", "nope.x=1"], "--set names tuner 'nope'"),
        (["--set", "thp.bogus=1"], "tuner thp: unknown parameter 'bogus'"),
        (["--set", "thp.enabled=sometimes"], "tuner thp: enabled must be one of always, madvise, never"),
        (["--set", "hugepages.size=3XB"], "tuner hugepages: size '3XB' is not a page size"),
        (["--set", "hugepages.max_fraction=2"], "tuner hugepages: max_fraction must be in (0, 1]"),
        (["--set", "c-states.max_latency_us=-5"], "tuner c-states: max_latency_us must be between"),
        (["--set", "cpu-governor.turbo=maybe"], "tuner cpu-governor: parameter 'turbo' wants bool"),
        (["--set", "thp"], "write it as ID.PARAMETER=VALUE"),
    ],
)
def test_bad_input_exits_64_with_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    proc = run("tune", *args, state=tmp_path / "state")
    assert proc.returncode == 64, proc.stdout + proc.stderr
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("nodeagent: error: ") and message in line, line


PARAMS: dict[str, dict[str, Any]] = {"hugepages": {"pages_per_node": PAGES}}


def plans_for(host: SysfsHost, ids: tuple[str, ...]) -> list[Plan]:
    tuners: list[Tuner[Any, Any]] = [
        cpu_governor.TUNER,
        c_states.TUNER,
        hugepages.TUNER,
        thp.TUNER,
        numa_balancing.TUNER,
    ]
    return [t.run_plan(host, t.make_params(PARAMS.get(t.id))) for t in tuners if t.id in ids]


@pytest.fixture
def kernel_like_revert(monkeypatch: pytest.MonkeyPatch) -> None:
    """revert reopens the host from the journal: reopen it with the kernel's write rules too."""
    monkeypatch.setattr(apply, "reopen", lambda ref: SysfsHost(Path(ref["source"])))


def test_kernel_like_copy_restores_byte_for_byte(tmp_path: Path, kernel_like_revert: None) -> None:
    root = build_node(tmp_path / "node")
    state = tmp_path / "state"
    original = contents(root)
    host = SysfsHost(root)
    result = apply.apply(host, plans_for(host, (*RUNTIME, "c-states")), "default", state=state)
    assert [f.status for f in result.findings] == [Status.OK] * 7  # one per runtime change
    assert read(root, f"{THP}/enabled") == "always [madvise] never"
    assert read(root, f"{THP}/defrag") == "always defer [defer+madvise] madvise never"
    assert read(root, f"{HUGE}/hugepages-2048kB/nr_hugepages") == str(2 * PAGES)
    assert result.journal is not None and len(result.journal.writes) == ALL_WRITES

    findings = apply.revert(journal.load(result.journal.path))
    assert [f.status for f in findings] == [Status.OK]
    assert contents(root) == original  # byte for byte: newlines, brackets, pool counters


def test_the_kernel_refuses_a_selector_line_so_thp_records_the_choice(tmp_path: Path) -> None:
    host = SysfsHost(build_node(tmp_path / "node"))
    with pytest.raises(OSError, match="Invalid argument"):
        host.write(f"{THP}/enabled", "always madvise [never]")
    (plan,) = plans_for(host, ("thp",))
    assert [w.before for c in plan.changes for w in c.writes] == ["never", "always"]
    for c in plan.changes:
        for w in c.writes:
            host.write(w.path, w.before or "")  # what revert writes is accepted


def test_hugepages_shortfall_is_reported_and_reverted(tmp_path: Path, kernel_like_revert: None) -> None:
    root = build_node(tmp_path / "node")
    original = contents(root)
    host = SysfsHost(root, limits={1: 300})  # node 1 finds room for 300 pages only
    plans = plans_for(host, ("hugepages",))
    result = apply.apply(host, plans, "default", state=tmp_path / "state")
    (generic,) = result.findings
    assert generic.status is Status.FAIL  # verify_writes compares exactly: it cannot tell a shortfall
    (finding,) = hugepages.verify(host, plans[0].changes)
    assert finding.status is Status.WARN
    assert finding.summary == "hugepages: 2 MiB huge pages on nodes 0-1: node 1 got 300 of 512 (212 short)"
    assert "hugepagesz=2M hugepages=0:512,1:512" in finding.remediation
    assert read(root, f"{HUGE}/hugepages-2048kB/nr_hugepages") == "812"
    assert result.journal is not None
    assert [f.status for f in apply.revert(journal.load(result.journal.path))] == [Status.OK]
    assert contents(root) == original


# -- each tuner fixes what its check reports ---------------------------------------------------------------


def statuses(findings: list[Finding]) -> dict[str, tuple[Status, str | None]]:
    return {f.subject: (f.status, f.fix) for f in findings}


def fixed_by(findings: list[Finding], tuner_ids: tuple[str, ...]) -> set[str]:
    return {f.subject for f in findings if f.fix in tuner_ids and f.status is not Status.OK}


def test_cpu_governor_and_c_states_fix_the_cstates_check(tmp_path: Path) -> None:
    root = build_node(tmp_path / "node")
    check, params = cstates_check.CHECK, cstates_check.Params()
    before = check.run(SysfsHost(root), params)
    assert fixed_by(before, ("cpu-governor",)) == {"governor", "epp", "turbo"}
    assert fixed_by(before, ("c-states",)) == {"idle-states"}
    assert one_finding(before, "turbo").status is Status.WARN

    host = SysfsHost(root)
    apply.apply(host, plans_for(host, ("cpu-governor", "c-states")), "default", state=tmp_path / "state")
    after = statuses(check.run(SysfsHost(root), params))
    assert after["governor"][0] is after["epp"][0] is after["turbo"][0] is Status.OK

    # c-states changes no file: the launcher holds the PM QoS limit while a job runs, at the
    # check's own threshold...
    saved = profile.load("default", tmp_path / "state")
    assert saved["launcher"]["cpu_dma_latency_us"] == params.max_exit_latency_us
    assert after["idle-states"][0] is Status.WARN  # sysfs still lists the deep states
    # ...and its boot advice, once booted, leaves only POLL and C1 registered (intel_idle does not
    # register states above max_cstate; kernel commit 4e0ba5577dba shows the resulting list).
    (advice,) = [
        c for p in plans_for(SysfsHost(root), ("c-states",)) for c in p.changes if c.scope.value == "boot"
    ]
    for cpu in range(4):
        for index in range(c_states.BOOT_LIMIT + 1, 4):
            shutil.rmtree(root / f"sys/devices/system/cpu/cpu{cpu}/cpuidle/state{index}")
    cmdline = root / "proc/cmdline"
    cmdline.write_text(cmdline.read_text().strip() + f" {advice.after}\n")
    booted = statuses(check.run(SysfsHost(root), params))
    assert booted["idle-states"][0] is Status.OK
    assert booted["boot"][0] is Status.OK


@pytest.mark.parametrize(
    ("enabled", "flagged"),
    [
        # With THP off the check does not judge defrag; with it on, defrag=always is flagged.
        ("always madvise [never]\n", {"thp"}),
        ("[always] madvise never\n", {"thp-defrag"}),
    ],
)
def test_thp_and_hugepages_fix_the_hugepages_check(tmp_path: Path, enabled: str, flagged: set[str]) -> None:
    root = build_node(tmp_path / "node")
    (root / THP.lstrip("/") / "enabled").write_text(enabled)
    check = hugepages_check.CHECK
    # The job maps 2 x PAGES pages: the reason to reserve them at all.
    params = check.make_params({"expected_pages": {"2048kB": 2 * PAGES}})
    before = check.run(SysfsHost(root), params)
    assert fixed_by(before, ("thp",)) == flagged
    assert fixed_by(before, ("hugepages",)) == {"hugepages-2048kB", "hugepages-2048kB-nodes"}
    assert one_finding(before, "hugepages-2048kB").status is Status.FAIL

    host = SysfsHost(root)
    apply.apply(host, plans_for(host, ("thp", "hugepages")), "default", state=tmp_path / "state")
    after = check.run(SysfsHost(root), params)
    for subject in ("thp", "thp-defrag", "hugepages-2048kB", "hugepages-2048kB-nodes"):
        assert one_finding(after, subject).status is Status.OK, one_finding(after, subject)
    assert fixed_by(after, ("thp", "hugepages")) == set()


def test_numa_balancing_fixes_the_numa_check(tmp_path: Path) -> None:
    root = build_node(tmp_path / "node")
    before = numa_check.CHECK.run(SysfsHost(root), numa_check.Params())
    assert fixed_by(before, ("numa-balancing",)) == {"kernel.numa_balancing"}
    host = SysfsHost(root)
    apply.apply(host, plans_for(host, ("numa-balancing",)), "default", state=tmp_path / "state")
    after = numa_check.CHECK.run(SysfsHost(root), numa_check.Params())
    assert one_finding(after, "kernel.numa_balancing").status is Status.OK
