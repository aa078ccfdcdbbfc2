"""The story `nodeagent tune` and `nodeagent revert` print: one per path, in order (planned,
applied, read back, measured, kept or reverted, what remains), never a line that a later one
contradicts. Each path runs the real command line, in-process, on a writable copy of a sysfs tree
(tests/support/sysfs_node.py's node: 4 CPUs, 2 NUMA nodes) or, for --verify, on the fake benchmark
worker of tests/support/fake_bench.py. Also here: `tune --persist` (sysctl.d and TuneD files, journaled
and reverted through the Host), `tune --cluster`'s per-host changes, the shared rank count and
`nodeagent tuners --params`.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import re
import typing
from pathlib import Path
from typing import Any

import pytest

from nodeagent.bench import verify as bench_verify
from nodeagent.host import LocalHost
from nodeagent.host.tree import LiveTree
from nodeagent.tuning import journal, profile
from nodeagent.tuning import story as tune_story
from tests.support.cli import RunCli
from tests.support.paths import VM
from tests.support.sysfs_node import THP, build_node, contents, shown_by_kernel

# The parts of the story, in the order they may appear.
ORDER = (
    "planned:",
    "dry run:",
    "applied:",
    "read back:",
    "measured:",
    "kept:",
    "reverted:",
    "use:",
    "persisted:",
    "not persisted:",
    "remains:",
    "undo:",
    "advice",
)
RUNTIME_AND_PROCESS = "numa-balancing,thp,c-states"
SYSCTL = "/etc/sysctl.d/90-nodeagent.conf"
TMPFILES = "/etc/tmpfiles.d/90-nodeagent.conf"


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "state"
    monkeypatch.setenv("NODEAGENT_STATE_DIR", str(folder))
    return folder


@pytest.fixture
def node(tmp_path: Path) -> Path:
    return build_node(tmp_path / "node")


def story_of(out: str) -> list[str]:
    """The story: from its first line ("planned:", or a revert's first) to the end."""
    lines = out.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("planned:")), 0)
    return [line for line in lines[start:] if line.strip()]


def part(line: str) -> str | None:
    return next((p for p in ORDER if line.startswith(p)), None)


def assert_consistent(lines: list[str]) -> None:
    """What every story must hold, whatever the path."""
    parts = [p for p in map(part, lines) if p]
    # In order: each part's first line after those of the parts before it.
    firsts = [ORDER.index(p) for i, p in enumerate(parts) if p not in parts[:i]]
    assert firsts == sorted(firsts), lines
    text = "\n".join(lines)
    applied = [line for line in lines if line.startswith("applied: journal ")]
    if applied:
        assert "dry run" not in text and "nothing was changed" not in text, lines
    if any(line.startswith("reverted:") for line in lines) and lines[0].startswith("planned:"):
        # A reverted run: nothing tells to use the profile the revert removed, or claims a value kept.
        assert not any(p in ("use:", "persisted:", "undo:") for p in parts), lines
        assert "exec --profile" not in text, lines
    for line in applied:
        jid = line.split()[2]
        assert journal.find(jid).id == jid  # the journal printed exists


def the_only(lines: list[str], prefix: str) -> str:
    found = [line for line in lines if line.startswith(prefix)]
    assert len(found) == 1, (prefix, lines)
    return found[0]


# -- tune, path by path ----------------------------------------------------------------------------


def test_dry_run(run_cli: RunCli, node: Path, state: Path) -> None:
    code, out, _ = run_cli("tune", "--root", str(node), "--only", RUNTIME_AND_PROCESS)
    lines = story_of(out)
    assert_consistent(lines)
    assert code == 0
    assert (
        lines[0]
        == "planned: 5 change(s) from 3 tuner(s): 3 runtime, 1 process, 1 boot (advice, never applied)"
    )
    assert lines[1] == "dry run: nothing was changed; add --apply to apply the plan"
    assert not any(line.startswith(("applied", "use:", "undo:", "kept:")) for line in lines)
    assert the_only(lines, "advice (never applied): c-states: kernel command line:")
    assert not state.exists()  # a dry run writes nothing, not even state


def test_apply_with_nothing_to_do(run_cli: RunCli, node: Path, state: Path) -> None:
    (node / "proc/sys/kernel/numa_balancing").write_text("0\n")  # already as planned
    code, out, _ = run_cli("tune", "--root", str(node), "--only", "numa-balancing", "--apply")
    lines = story_of(out)
    assert_consistent(lines)
    assert code == 0
    assert lines == [
        "planned: no change (the tuners' notes say why)",
        "applied: nothing: no change to apply was planned",
        "remains: the node is as it was; nothing was changed by this run",
    ]
    assert journal.all_journals() == []


def test_apply_runtime_and_process_changes(run_cli: RunCli, node: Path, state: Path) -> None:
    code, out, _ = run_cli("tune", "--root", str(node), "--only", RUNTIME_AND_PROCESS, "--apply")
    lines = story_of(out)
    assert_consistent(lines)
    assert code == 0
    (j,) = journal.all_journals()
    assert j.state == journal.APPLIED
    assert the_only(lines, "applied:") == (
        f"applied: journal {j.id} ({j.path}): 3 runtime value(s) written, 1 setting(s) saved in profile "
        f"default ({state / 'profiles' / 'default.json'})"
    )
    assert the_only(lines, "read back:") == "read back: 3 runtime change(s) hold their new values"
    assert the_only(lines, "kept:") == f"kept: journal {j.id}: every change stays applied"
    assert the_only(lines, "use:") == "use: run jobs with `nodeagent exec --profile default -- CMD`"
    assert the_only(lines, "remains:").startswith("remains: 3 runtime value(s) last until the next reboot")
    assert the_only(lines, "undo:") == f"undo: `nodeagent revert {j.id}`"
    assert lines[-1].startswith("advice (never applied): c-states")
    assert profile.load("default")["launcher"]["cpu_dma_latency_us"] >= 0


class FirmwareOwnedTree(LiveTree):
    """A sysfs copy where some files take a write and keep their value, as a governor the BIOS owns
    or a setting another daemon puts back does: the write succeeds, the read-back differs."""

    def __init__(self, root: str, ignored: set[str]) -> None:
        super().__init__(root)
        self.ignored = ignored

    def write(self, path: str, value: str) -> None:
        if path in self.ignored:
            if self.resolve(path) is None:
                raise FileNotFoundError(errno.ENOENT, "no such file", path)
            return
        super().write(path, value)


def test_apply_partly_failing_verification(
    run_cli: RunCli, node: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    enabled = f"{THP}/enabled"

    def host_of(root: str | None, writable: bool = False) -> LocalHost:
        host = LocalHost(root=str(root), name="test-node")
        host.tree = FirmwareOwnedTree(str(root), {enabled})
        return host

    monkeypatch.setattr("nodeagent.app.tune.open_host", host_of)
    code, out, _ = run_cli("tune", "--root", str(node), "--only", "thp,numa-balancing", "--apply")
    lines = story_of(out)
    assert_consistent(lines)
    assert code == 2  # FAIL: a value did not take
    (j,) = journal.all_journals()
    assert the_only(lines, "read back:") == "read back: 1 of 3 runtime change(s) did not take as planned:"
    assert f"      {enabled}: always madvise [never] (wanted madvise)" in lines
    assert the_only(lines, "kept:").startswith(
        f"kept: journal {j.id} stays applied, the changes that did not"
    )
    assert the_only(lines, "undo:") == f"undo: `nodeagent revert {j.id}`"
    assert "use:" not in "\n".join(lines)  # no profile was written: nothing to run jobs with


def verify(run_cli: RunCli, *args: str) -> tuple[int, list[str]]:
    code, out, _ = run_cli("tune", "--apply", "--verify", "--quick", *args)
    lines = story_of(out)
    assert_consistent_verify(lines)
    return code, lines


def assert_consistent_verify(lines: list[str]) -> None:
    """What every story of tune --apply --verify must hold: each change told in order (applied,
    measured, then kept or reverted), and the profile to run jobs with named only when it exists."""
    assert lines[0].startswith("planned:"), lines
    for i, line in enumerate(lines):
        if line.startswith("applied: ") and ": journal " in line:
            tuner = line.split(":")[1].strip()
            assert lines[i + 1].startswith(f"measured: {tuner}: "), lines
            assert lines[i + 2].startswith((f"kept: {tuner}: ", f"reverted: {tuner}: ")), lines
    uses = [line for line in lines if line.startswith("use:")]
    assert bool(uses) == profile.profile_path("default").exists(), lines
    kept = [line for line in lines if line.startswith("kept: ")]
    undo = [line for line in lines if line.startswith("undo: ")]
    assert len(kept) == len(undo), lines
    for line in undo:
        jid = line.split("`")[1].split()[-1]
        assert journal.find(jid).state == journal.APPLIED  # what the story says to undo is applied


def decisions(lines: list[str]) -> list[str]:
    return [
        line.split(":")[0] + ":" + line.split(":")[1]
        for line in lines
        if line.startswith(("kept:", "reverted:"))
    ]


def test_apply_verify_keeps_each_change_only_when_it_is_faster(run_cli: RunCli, fake_worker: Path) -> None:
    """The fake worker is 1.5x faster with more than one intra-op thread (tf-threads' plan here)
    and indifferent to tf.data options: tf-threads is kept, tf-data reverted on its own."""
    code, lines = verify(run_cli, "--only", "tf-threads,tf-data")
    assert code == bench_verify.EXIT_KEPT
    assert decisions(lines) == ["kept: tf-threads", "reverted: tf-data"]
    kept, reverted = journal.all_journals()
    assert (kept.state, reverted.state) == (journal.APPLIED, journal.REVERTED)
    assert re.fullmatch(
        r"measured: tf-threads: B is [\d.]+% faster than A: B/A = 1\.5\d\d, .*",
        the_only(lines, "measured: tf-threads"),
    )
    assert the_only(lines, "reverted:") == (
        f"reverted: tf-data: not significantly faster: journal {reverted.id} undone: profile default restored"
    )
    assert the_only(lines, "use:") == "use: run jobs with `nodeagent exec --profile default -- CMD`"
    saved = profile.load("default")
    assert "tf_data" not in saved and saved["env"]["TF_NUM_INTRAOP_THREADS"] != "1"


def test_apply_verify_reverted(run_cli: RunCli, fake_worker: Path) -> None:
    """Nothing faster: both reverted, and nothing tells to use a profile the reverts removed."""
    code, lines = verify(run_cli, "--only", "tf-threads,tf-data", "--set", "tf-threads.intra_op=1")
    assert code == bench_verify.EXIT_NONE_KEPT
    assert decisions(lines) == ["reverted: tf-threads", "reverted: tf-data"]
    assert all(j.state == journal.REVERTED for j in journal.all_journals())
    assert "slower than A" in the_only(lines, "measured: tf-threads")
    assert lines[-1] == "remains: nothing of this run: the node is as it was before it"
    assert not profile.profile_path("default").exists()


def test_apply_verify_trial_failed(
    run_cli: RunCli, fake_worker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_FAIL_WHEN_TUNED", "crashed under the profile")
    code, lines = verify(run_cli, "--only", "tf-threads,tf-data")
    assert code == bench_verify.EXIT_FAILED
    (j,) = journal.all_journals()
    assert j.state == journal.REVERTED
    measured = the_only(lines, "measured:")
    assert (
        measured.startswith("measured: tf-threads: the trials failed: ")
        and "crashed under the profile" in measured
    )
    assert the_only(lines, "reverted:").startswith(
        f"reverted: tf-threads: its trials failed, so no gain is shown: journal {j.id} undone"
    )
    assert the_only(lines, "applied: tf-data").startswith(
        "applied: tf-data: nothing: the trials of an earlier change failed"
    )


# -- revert ------------------------------------------------------------------------------------------


def test_revert_one_journal(run_cli: RunCli, node: Path, state: Path) -> None:
    original = contents(node)
    run_cli("tune", "--root", str(node), "--only", RUNTIME_AND_PROCESS, "--apply")
    (j,) = journal.all_journals()
    code, out, _ = run_cli("revert", j.id)
    lines = story_of(out)
    assert_consistent(lines)
    assert code == 0
    assert lines == [
        f"reverted: journal {j.id}: 3 runtime value(s) restored, profile default removed (there was none "
        "before)",
        f"remains: nothing of journal(s) {j.id}: the values they changed are back",
    ]
    assert shown_by_kernel(contents(node), original) == original
    # Again: idempotent, and said so.
    code, out, _ = run_cli("revert", j.id)
    assert code == 0 and "it was reverted already" in story_of(out)[0]


def test_revert_all(run_cli: RunCli, node: Path, state: Path) -> None:
    original = contents(node)
    run_cli("tune", "--root", str(node), "--only", "numa-balancing", "--apply")
    run_cli("tune", "--root", str(node), "--only", "thp", "--apply")
    older, newer = journal.all_journals()
    code, out, _ = run_cli("revert", "--all")
    lines = story_of(out)
    assert_consistent(lines)
    assert code == 0
    assert lines == [
        f"reverted: journal {newer.id}: 2 runtime value(s) restored",
        f"reverted: journal {older.id}: 1 runtime value(s) restored",
        f"remains: nothing of journal(s) {newer.id}, {older.id}: the values they changed are back",
    ]
    assert shown_by_kernel(contents(node), original) == original


def test_revert_one_of_two_says_what_is_left(run_cli: RunCli, node: Path, state: Path) -> None:
    run_cli("tune", "--root", str(node), "--only", "numa-balancing", "--apply")
    run_cli("tune", "--root", str(node), "--only", "thp", "--apply")
    _, newer = journal.all_journals()
    code, out, _ = run_cli("revert", newer.id)
    assert code == 0
    assert story_of(out)[-1] == "remains: 1 other journal(s) not reverted (see `nodeagent revert --list`)"


def test_revert_with_nothing_to_do(run_cli: RunCli, state: Path) -> None:
    code, out, _ = run_cli("revert", "--all")
    assert code == 0
    assert story_of(out) == ["nothing to revert: every journal is already reverted"]


# -- --persist -------------------------------------------------------------------------------------------


def test_persist_writes_sysctl_d_and_revert_removes_it(run_cli: RunCli, node: Path, state: Path) -> None:
    original = contents(node)
    code, out, _ = run_cli("tune", "--root", str(node), "--only", "numa-balancing", "--apply", "--persist")
    lines = story_of(out)
    assert_consistent(lines)
    assert code == 0
    text = (node / SYSCTL.lstrip("/")).read_text()
    assert [line for line in text.splitlines() if not line.startswith("#")] == ["kernel.numa_balancing = 0"]
    (j,) = journal.all_journals()
    assert [(f.path, f.before) for f in j.host_files] == [(SYSCTL, None)]
    assert j.host_dirs == ["/etc", "/etc/sysctl.d"]  # this tree had no /etc: created, and removed on revert
    assert (
        the_only(lines, "persisted:") == f"persisted: numa-balancing kernel.numa_balancing kept in {SYSCTL}"
    )
    assert "1 persistent file(s) written" in the_only(lines, "applied:")
    assert "read back: 1 persistent file(s) hold what was written" in lines
    code, out, _ = run_cli("revert", j.id)
    assert code == 0
    assert f"{SYSCTL} removed (it did not exist before)" in story_of(out)[0]
    assert shown_by_kernel(contents(node), original) == original  # /etc and the file gone again


def test_persist_without_tuned_writes_tmpfiles_d_lines_with_real_paths_and_values(
    run_cli: RunCli, node: Path, state: Path
) -> None:
    """No TuneD on this node: the sysfs knobs go to a tmpfiles.d file, one `w PATH - - - - VALUE`
    line per file with the path and the value the apply wrote (tmpfiles.d(5): systemd-tmpfiles
    writes them at every boot), journaled and reverted like the sysctl.d file."""
    original = contents(node)
    code, out, _ = run_cli(
        "tune", "--root", str(node), "--only", "numa-balancing,thp", "--apply", "--persist"
    )
    lines = story_of(out)
    assert_consistent(lines)
    assert code == 0, out
    text = (node / TMPFILES.lstrip("/")).read_text()
    assert [line for line in text.splitlines() if not line.startswith("#")] == [
        f"w {THP}/enabled - - - - madvise",
        f"w {THP}/defrag - - - - defer+madvise",
    ]
    assert (node / SYSCTL.lstrip("/")).exists()  # /proc/sys keys stay in sysctl.d
    (j,) = journal.all_journals()
    assert sorted((f.path, f.before) for f in j.host_files) == [(SYSCTL, None), (TMPFILES, None)]
    assert j.host_dirs == ["/etc", "/etc/sysctl.d", "/etc/tmpfiles.d"]
    kept = [line for line in lines if line.startswith("persisted:")]
    assert (
        f"persisted: thp transparent_hugepage/enabled, thp transparent_hugepage/defrag kept in {TMPFILES}"
        in kept
    )
    assert not any(line.startswith("not persisted:") for line in lines)
    assert "read back: 2 persistent file(s) hold what was written" in lines
    code, out, _ = run_cli("revert", j.id)
    assert code == 0
    assert shown_by_kernel(contents(node), original) == original  # both files and /etc gone again


def test_persist_without_tuned_merges_a_previous_tmpfiles_d_file(
    run_cli: RunCli, node: Path, state: Path
) -> None:
    earlier = f"# by hand\nw {THP}/enabled - - - - always\nd /run/site 0755 root root -\n"
    path = node / TMPFILES.lstrip("/")
    path.parent.mkdir(parents=True)
    path.write_text(earlier)
    code, out, _ = run_cli("tune", "--root", str(node), "--only", "thp", "--apply", "--persist")
    assert code == 0, out
    assert [line for line in path.read_text().splitlines() if not line.startswith("#")] == [
        f"w {THP}/enabled - - - - madvise",
        "d /run/site 0755 root root -",
        f"w {THP}/defrag - - - - defer+madvise",
    ]
    code, _, _ = run_cli("revert", "--all")
    assert code == 0 and path.read_text() == earlier


def test_persist_merges_with_and_restores_a_previous_file(run_cli: RunCli, node: Path, state: Path) -> None:
    earlier = "# by hand\nvm.swappiness = 10\nkernel.numa_balancing = 1\n"
    path = node / SYSCTL.lstrip("/")
    path.parent.mkdir(parents=True)
    path.write_text(earlier)
    code, _, _ = run_cli("tune", "--root", str(node), "--only", "numa-balancing", "--apply", "--persist")
    assert code == 0
    assigned = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    assert assigned == ["vm.swappiness = 10", "kernel.numa_balancing = 0"]
    (j,) = journal.all_journals()
    assert j.host_files[0].before == earlier and j.host_dirs == []
    code, _, _ = run_cli("revert", "--all")
    assert code == 0 and path.read_text() == earlier


def tuned_node(node: Path, new_layout: bool) -> None:
    """TuneD runs here, with throughput-performance active (as `tuned-adm profile` leaves it)."""
    (node / "commands").mkdir(exist_ok=True)
    (node / "commands/tuned-adm-active.txt").write_text("Current active profile: throughput-performance\n")
    (node / "etc/tuned").mkdir(parents=True)
    (node / "etc/tuned/active_profile").write_text("throughput-performance\n")
    (node / "etc/tuned/profile_mode").write_text("auto\n")
    if new_layout:  # TuneD >= 2.24: /usr/lib/tuned/profiles and /etc/tuned/profiles
        (node / "usr/lib/tuned/profiles").mkdir(parents=True)


@pytest.mark.parametrize(
    ("new_layout", "conf"),
    [(False, "/etc/tuned/nodeagent/tuned.conf"), (True, "/etc/tuned/profiles/nodeagent/tuned.conf")],
    ids=["tuned-2.23", "tuned-2.24"],
)
def test_persist_with_tuned_writes_a_profile_including_the_active_one(
    run_cli: RunCli, node: Path, state: Path, new_layout: bool, conf: str
) -> None:
    tuned_node(node, new_layout)
    original = contents(node)
    code, out, _ = run_cli(
        "tune",
        "--root",
        str(node),
        "--only",
        "cpu-governor,thp,numa-balancing",
        "--apply",
        "--persist",
    )
    lines = story_of(out)
    assert_consistent(lines)
    assert code == 0, out
    body = [line for line in (node / conf.lstrip("/")).read_text().splitlines() if not line.startswith("#")]
    assert body == [
        "",
        "[main]",
        "summary=nodeagent: the runtime tuning of `nodeagent tune --apply --persist`",
        "include=throughput-performance",
        "",
        "[cpu]",
        "energy_performance_preference=performance",
        "governor=performance",
        "no_turbo=0",
        "",
        "[vm]",
        "transparent_hugepages=madvise",
        "",
        "[sysfs]",
        f"{THP}/defrag=defer+madvise",
    ]
    assert (node / "etc/tuned/active_profile").read_text() == "nodeagent\n"
    assert (node / "etc/tuned/profile_mode").read_text() == "manual\n"
    # sysctl keys stay in sysctl.d, with or without TuneD (TuneD re-applies it: reapply_sysctl).
    assert "kernel.numa_balancing = 0" in (node / SYSCTL.lstrip("/")).read_text()
    persisted = [line for line in lines if line.startswith("persisted:")]
    assert f"TuneD profile nodeagent ({conf})" in persisted[1]
    assert "includes throughput-performance" in persisted[2]
    assert not any(line.startswith("not persisted:") for line in lines)
    (j,) = journal.all_journals()
    code, _, _ = run_cli("revert", j.id)
    assert code == 0
    assert shown_by_kernel(contents(node), original) == original  # files, startup profile, folders


def test_persist_in_a_dry_run_says_what_it_would_keep(run_cli: RunCli, node: Path, state: Path) -> None:
    code, out, _ = run_cli("tune", "--root", str(node), "--only", "numa-balancing", "--persist")
    lines = story_of(out)
    assert code == 0
    assert lines[1:] == [
        "dry run: nothing was changed; add --apply to apply the plan",
        f"with --persist: numa-balancing kernel.numa_balancing would be kept in {SYSCTL}",
    ]
    assert not (node / "etc").exists() and not state.exists()


def test_a_crash_before_the_persistent_files_is_reverted_too(
    run_cli: RunCli, node: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal holds the files before the first write: a kill right after the runtime write
    leaves no file, and revert (removing what is absent) restores the node."""
    import subprocess
    import sys

    original = contents(node)
    args = ["tune", "--root", str(node), "--only", "numa-balancing", "--apply", "--persist"]
    env = {
        "NODEAGENT_STATE_DIR": str(state),
        "NODEAGENT_FAULT_KILL_AFTER_WRITES": "1",
        "PATH": "/usr/bin:/bin",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "nodeagent", *args], capture_output=True, env=env, check=False
    )
    assert proc.returncode == -9
    (j,) = journal.all_journals()
    assert j.state == journal.APPLYING and [f.path for f in j.host_files] == [SYSCTL]
    code, _, _ = run_cli("revert", "--all")
    assert code == 0
    assert shown_by_kernel(contents(node), original) == original


def test_persist_with_nothing_to_persist_says_so(run_cli: RunCli, node: Path, state: Path) -> None:
    code, out, _ = run_cli("tune", "--root", str(node), "--only", "c-states", "--apply", "--persist")
    lines = story_of(out)
    assert_consistent(lines)
    assert code == 0
    assert the_only(lines, "persisted:").startswith(
        "persisted: nothing: no runtime value is written by this run"
    )
    assert not (node / "etc").exists()


def test_sysctl_keys_keep_dotted_components_with_slashes() -> None:
    from nodeagent.tuning import persist

    assert persist.sysctl_key("/proc/sys/kernel/numa_balancing") == "kernel.numa_balancing"
    assert (
        persist.sysctl_key("/proc/sys/net/ipv4/conf/eth0.100/forwarding")
        == "net/ipv4/conf/eth0.100/forwarding"
    )
    # A key written either way is the same key: a previous value is replaced, not repeated.
    text = persist.sysctl_text(
        "net.ipv4.conf.eth0/100.forwarding = 0\n", {"net/ipv4/conf/eth0.100/forwarding": "1"}
    )
    assert [line for line in text.splitlines() if not line.startswith("#")] == [
        "net/ipv4/conf/eth0.100/forwarding = 1"
    ]


# -- tune --cluster: each host's changes --------------------------------------------------------------


def tune_doc(run_cli: RunCli, root: Path) -> dict[str, Any]:
    code, out, _ = run_cli("tune", "--root", str(root), "--only", "thp,numa-balancing", "--format", "json")
    assert code == 0
    doc: dict[str, Any] = json.loads(out)
    return doc


def test_fleet_shows_each_hosts_changes_grouped(run_cli: RunCli, tmp_path: Path, state: Path) -> None:
    """Real tune documents, as `tune --cluster` gathers them: three hosts, one with THP as wanted."""
    docs = {}
    for name in ("h1", "h2", "h3"):
        root = build_node(tmp_path / name)
        if name == "h3":
            (root / THP.lstrip("/") / "enabled").write_text("always [madvise] never\n")
        docs[name] = tune_doc(run_cli, root)
    docs["h4"] = {"status": "FAIL", "exit_code": 64}  # answered, but with no plan
    lines = tune_story.fleet_changes(docs)
    assert lines == [
        "h1, h2 (2 hosts): 3 change(s)",
        "  thp [runtime] transparent_hugepage/enabled: never -> madvise",
        "  thp [runtime] transparent_hugepage/defrag: always -> defer+madvise",
        "  numa-balancing [runtime] kernel.numa_balancing: 1 -> 0",
        "  = dry run: nothing was changed; add --apply to apply the plan",
        "h3: 2 change(s)",
        "  thp [runtime] transparent_hugepage/defrag: always -> defer+madvise",
        "  numa-balancing [runtime] kernel.numa_balancing: 1 -> 0",
        "  = dry run: nothing was changed; add --apply to apply the plan",
        "h4: no plan returned (exit code 64)",
    ]


def test_fleet_table_output_renders_the_changes(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str], tmp_path: Path, state: Path
) -> None:
    from nodeagent.cli.main import _fleet_tune_section
    from nodeagent.cli.options import emit_fleet
    from nodeagent.cluster.report import FleetReport
    from nodeagent.cluster.runner import HostOutcome

    doc = {"status": "OK", "exit_code": 0, **tune_doc(run_cli, build_node(tmp_path / "n1"))}
    report = FleetReport.build({"n1": HostOutcome("n1", "10.0.0.1", doc)}, 1.0, compare=False)
    emit_fleet(report, "table", _fleet_tune_section(report))
    out = capsys.readouterr().out
    assert "planned changes per host" in out
    assert "n1: 3 change(s)" in out
    assert "thp [runtime] transparent_hugepage/enabled: never -> madvise" in out


# -- one rank count for every planner ---------------------------------------------------------------------


def test_ranks_are_shared_by_every_planner(run_cli: RunCli, state: Path) -> None:
    """docs/tuning.md's example on a recorded 2-CPU VM: four ranks share two cores, so each gets one
    intra-op thread, not the two a lone rank would (which made eight threads on two CPUs)."""
    plans = {}
    for args in (
        ("--set", "numa-pinning.ranks=4", "--only", "numa-pinning,tf-threads"),
        ("--ranks", "4", "--only", "tf-threads,tf-data"),
    ):
        code, out, _ = run_cli("tune", "--root", str(VM), *args, "--format", "json")
        assert code == 0
        plans.update({p["tuner"]: p for p in json.loads(out)["plans"]})
    threads = plans["tf-threads"]["threads"]
    assert [t["local_rank"] for t in threads] == [0, 1, 2, 3]
    assert all(t["TF_NUM_INTRAOP_THREADS"] == 1 and t["sharing"] == 4 for t in threads)  # 2 CPUs / 4 ranks
    assert plans["tf-data"]["tf_data"]["options"]["threading.private_threadpool_size"] == 1
    assert len(plans["tf-data"]["tf_data"]["ranks"]) == 4
    code, out, _ = run_cli("tune", "--root", str(VM), "--only", "tf-threads", "--format", "json")
    (alone,) = json.loads(out)["plans"]
    assert [t["TF_NUM_INTRAOP_THREADS"] for t in alone["threads"]] == [2]  # one rank: both cores


@pytest.mark.parametrize(
    "args",
    [
        ("--ranks", "4", "--set", "tf-threads.ranks=2"),
        ("--set", "numa-pinning.ranks=4", "--set", "tf-threads.ranks=2"),
    ],
)
def test_two_rank_counts_are_refused(run_cli: RunCli, args: tuple[str, ...]) -> None:
    code, _, err = run_cli("tune", "--root", str(VM), "--only", "numa-pinning,tf-threads", *args)
    (line,) = err.splitlines()
    assert code == 64 and "disagree" in line and "give" in line


def test_a_rank_count_beyond_the_cap_is_refused(run_cli: RunCli) -> None:
    code, _, err = run_cli("tune", "--root", str(VM), "--only", "numa-pinning", "--ranks", "1000000")
    (line,) = err.splitlines()
    assert code == 64 and "'--ranks': 1000000 is not in the range 1<=x<=4096" in line


def test_ranks_without_a_per_rank_tuner_is_refused(run_cli: RunCli) -> None:
    code, _, err = run_cli("tune", "--root", str(VM), "--only", "thp", "--ranks", "4")
    (line,) = err.splitlines()
    assert code == 64 and "none of the selected tuners (thp) plans per rank" in line


@pytest.mark.parametrize(
    "setting",
    [
        "tf-threads.intra_op=100000",
        "tf-threads.min_inter_op=9",
        "tf-data.private_threadpool_size=1000000",
        "tf-data.max_intra_op_parallelism=99",
        "pinned-memory.thread_count=4096",
    ],
)
def test_thread_counts_beyond_the_machine_are_refused(run_cli: RunCli, setting: str) -> None:
    """The recorded VM has 2 CPUs: at most 4 threads per CPU (nodeagent.api.tune.THREADS_PER_CPU_MAX)."""
    tuner = setting.split(".", 1)[0]
    code, _, err = run_cli("tune", "--root", str(VM), "--only", tuner, "--set", setting)
    (line,) = err.splitlines()
    assert code == 64
    assert "threads per CPU of the 2 this node has; give at most 8" in line


# -- nodeagent tuners --params -------------------------------------------------------------------------------


def test_tuners_params_lists_every_field_of_every_tuner(run_cli: RunCli) -> None:
    from nodeagent import tuners

    code, out, _ = run_cli("tuners", "--params")
    assert code == 0
    text = "".join(out.split())  # rich wraps long lines, URLs included: compare without blanks

    def squeezed(s: str) -> str:
        return "".join(s.split())

    for tuner in tuners.all_tuners():
        assert squeezed(f"{tuner.id}: {tuner.title}") in text
        hints = typing.get_type_hints(tuner.params)
        for f in dataclasses.fields(tuner.params):
            # A parameter unset by default (None: the check's value) shows its annotation, str | None.
            kind = type(f.default).__name__ if f.default is not None else str(hints[f.name])
            head = f"{tuner.id}.{f.name}: {kind} = {f.default!r}"
            assert squeezed(head) in text, f.name
            assert squeezed(f.metadata["why"]) in text, f.name


@pytest.mark.parametrize(
    ("path", "value", "line"),
    [
        (f"{THP}/enabled", "madvise", f"w {THP}/enabled - - - - madvise"),
        ("/sys/x/pct", "50%", "w /sys/x/pct - - - - 50%%"),  # tmpfiles.d expands specifiers: %% is %
        ("/sys/x/a b", "1", None),  # white space separates fields
        ("/sys/x/list", "0 1", None),
        ("/sys/x/q", 'a"b', None),
        ("/sys/x/e", "", None),
        ("/proc/x", "1", None),  # not sysfs: not this file's business
    ],
)
def test_tmpfiles_line_writes_only_what_the_format_holds(path: str, value: str, line: str | None) -> None:
    from nodeagent.tuning.persist import tmpfiles_line

    assert tmpfiles_line(path, value) == line
