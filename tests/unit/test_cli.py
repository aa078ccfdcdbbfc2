"""The `nodeagent` command as a user runs it: exit codes, JSON shape, bad input, snapshots."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path
from typing import Any

import click
import pytest

from nodeagent.cli.main import cli
from nodeagent.host.recorder import _filter_environ, _redact_cmdline
from tests.support.cli import RunCli
from tests.support.helpers import SYSFS_FIXTURES, make_tree, modules_loaded_by
from tests.support.paths import VM
from tests.support.sysfs_node import build_node


def run_json(run_cli: RunCli, *args: str) -> tuple[int, dict[str, Any]]:
    proc = run_cli(*args, "--format", "json")
    assert proc.stderr == "", proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_check_json_shape_and_exit_code_is_worst_status(run_cli: RunCli) -> None:
    code, doc = run_json(run_cli, "check")
    assert doc["schema"] == 1
    assert set(doc) >= {"host", "status", "checks", "findings", "duration_s"}
    assert {c["id"] for c in doc["checks"]} >= {"numa"}
    assert all(c["duration_s"] >= 0 for c in doc["checks"])
    for f in doc["findings"]:
        assert set(f) == {
            "check_id",
            "host",
            "status",
            "subject",
            "summary",
            "evidence",
            "expected",
            "remediation",
            "fix",
        }
    want = {"OK": 0, "SKIPPED": 0, "WARN": 1, "FAIL": 2, "UNKNOWN": 3}[doc["status"]]
    assert code == want


def test_check_on_a_recorded_tree_only_one_check(run_cli: RunCli) -> None:
    tree = SYSFS_FIXTURES / "64amd64-4s2n4ca2co.tar.bz2"
    code, doc = run_json(run_cli, "check", "--root", str(tree), "--only", "numa")
    assert {f["check_id"] for f in doc["findings"]} == {"numa"}
    assert doc["host"] == "64amd64-4s2n4ca2co"
    assert code == 1  # node 5 has half the memory of the others: WARN


def test_table_output_shows_remediation(run_cli: RunCli) -> None:
    tree = SYSFS_FIXTURES / "64amd64-4s2n4ca2co.tar.bz2"
    proc = run_cli("check", "--root", str(tree), "--only", "numa")
    assert "memory unbalanced" in proc.stdout
    assert "fix" in proc.stdout and "DIMM" in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["check", "--only", "nosuchcheck"], "unknown check id 'nosuchcheck'"),
        (["check", "--skip", "nosuchcheck"], "unknown check id 'nosuchcheck'"),
        (["check", "--root", "/nonexistent/tree"], "/nonexistent/tree: no such file"),
        (["check", "--format", "yaml"], "'yaml' is not one of"),
        (["check", "--bogus"], "No such option"),
        (["facts", "--root", "/etc/hostname"], "/etc/hostname: not a readable tar archive"),
        (["nosuchcommand"], "No such command"),
    ],
)
def test_bad_input_is_one_line_and_exit_64(run_cli: RunCli, args: list[str], message: str) -> None:
    proc = run_cli(*args)
    assert proc.returncode == 64, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def _command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and subcommand, as the words that name it (the registry of the click group)."""
    paths = []
    for name, command in sorted(group.commands.items()):
        paths.append((*prefix, name))
        if isinstance(command, click.Group):
            paths += _command_paths(command, (*prefix, name))
    return paths


def _usage_mistake(path: tuple[str, ...]) -> list[str]:
    """A usage error of the command at `path`: an unknown option, or, where the command takes
    unknown options as the job's command line (exec, verify), a word for one of its numbers."""
    command: click.Command = cli
    for word in path:
        assert isinstance(command, click.Group)
        command = command.commands[word]
    if not command.context_settings.get("ignore_unknown_options"):
        return [*path, "--no-such-option"]
    numbers = (click.types.IntParamType, click.types.FloatParamType)
    option = next(p for p in command.params if isinstance(p, click.Option) and isinstance(p.type, numbers))
    return [*path, option.opts[0], "not-a-number"]


@pytest.mark.parametrize("path", [(), *_command_paths(cli)], ids=lambda p: " ".join(p) or "nodeagent")
def test_a_usage_error_points_at_the_commands_own_help(path: tuple[str, ...], run_cli: RunCli) -> None:
    code, out, err = run_cli(*_usage_mistake(path))
    assert code == 64, out + err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("nodeagent: error: "), err
    assert lines[0].endswith(f" Try '{' '.join(('nodeagent', *path))} --help' for help."), err


def test_a_usage_error_of_python_m_nodeagent_names_the_program_once(run_cli: RunCli) -> None:
    proc = run_cli("nosuchcommand", process=True)
    assert proc.returncode == 64
    hint = "Try 'nodeagent --help' for help."
    assert proc.stderr == f"nodeagent: error: No such command 'nosuchcommand'. {hint}\n"


@pytest.mark.parametrize("command", ["tune", "revert", "exec", "verify", "history"])
def test_the_state_folder_is_named_in_help(command: str, run_cli: RunCli) -> None:
    """Where journals and profiles live, and how to move them (nodeagent.tuning.state.state_dir)."""
    code, out, _ = run_cli(command, "--help")
    assert code == 0
    text = " ".join(out.split())  # click wraps the help to the terminal
    for part in (
        "NODEAGENT_STATE_DIR",
        "/var/lib/nodeagent",
        "$XDG_STATE_HOME/nodeagent",
        "profiles/NAME.json",
    ):
        assert part in text, (command, part)


def test_the_state_help_says_what_the_state_folder_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """STATE_HELP is written out for a fast --help; it must say what state.state_dir() does."""
    from nodeagent.cli.options import STATE_HELP
    from nodeagent.tuning import history, journal, profile, state

    monkeypatch.setenv(state.STATE_ENV, "/site/state")
    assert state.state_dir() == Path("/site/state") and f"${state.STATE_ENV} when set" in STATE_HELP
    monkeypatch.delenv(state.STATE_ENV)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert f"else {state.state_dir()} as root" in STATE_HELP
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_STATE_HOME", "/xdg")
    assert state.state_dir() == Path("/xdg/nodeagent") and "else $XDG_STATE_HOME/nodeagent" in STATE_HELP
    base = Path("/s")
    assert f"{journal.journal_dir(base).name}/" in STATE_HELP
    assert str(profile.profile_path("NAME", base).relative_to(base)) in STATE_HELP
    assert history.FILE in STATE_HELP


def test_corrupt_archive_exits_64(run_cli: RunCli, tmp_path: Path) -> None:
    bad = tmp_path / "node.tar.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 40)
    proc = run_cli("check", "--root", str(bad))
    assert proc.returncode == 64 and "node.tar.gz" in proc.stderr and "Traceback" not in proc.stderr


def test_facts_json_keys(run_cli: RunCli) -> None:
    tree = SYSFS_FIXTURES / "40intel64-2g2n4c+pcilocality.tar.bz2"
    code, doc = run_json(run_cli, "facts", "--root", str(tree))
    assert code == 0
    topo = doc["topology"]
    assert [n["id"] for n in topo["numa_nodes"]] == [0, 1, 2, 3]
    assert set(topo["numa_nodes"][0]) >= {"id", "cpus", "memory_mib"}
    assert topo["cpus_online"] == list(range(40))
    assert (topo["packages"], topo["cores"]) == (4, 40)
    assert {"pci", "gpus", "nics", "rdma"} <= set(doc)
    assert any(p["device"] == "qib0" and p["rate_gbps"] == 40.0 for p in doc["rdma"])
    assert any(n["name"] == "ib0" and n["numa_node"] == 2 for n in doc["nics"])


def facts_table(run_cli: RunCli, root: Path) -> str:
    """`nodeagent facts --root ROOT` as a table, wide enough that no row wraps."""
    proc = run_cli("facts", "--root", str(root), env={"COLUMNS": "200"})
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return proc.stdout


def row(table: str, first: str) -> list[str]:
    """The cells of the row whose first cell is `first`, from the piped form of a table: a line per
    row, the first cell then each other non-empty cell as `column: value`, two spaces apart; in a
    table without headers, `name: value`."""
    for line in table.splitlines():
        if line.startswith(f"{first}: "):
            return [first, line[len(first) + 2 :]]
        cells = line.split("  ")
        if cells[0] == first:
            return [first, *(cell.split(": ", 1)[1] for cell in cells[1:])]
    raise AssertionError(f"no row {first!r} in:\n{table}")


def test_facts_table_shows_missing_values_as_a_dash_and_page_sizes_by_unit(run_cli: RunCli) -> None:
    """The recorded VM: eth0's speed and its PCI device's numa_node read -1 (unknown, no NUMA
    affinity), and two empty huge page pools, hugepages-2048kB (2 MiB) and hugepages-1048576kB
    (1 GiB); the folder names are the kernel's size in KiB."""
    table = facts_table(run_cli, VM)
    assert "None" not in table
    assert row(table, "eth0") == ["eth0", "0000:00:03.0", "up", "-", "1400", "virtio_net", "-"]
    assert row(table, "0000:00:03.0")[3] == "-"  # the PCIe table's NUMA column
    assert (
        row(table, "huge pages")[1]
        == "2 MiB: 0 pages (0 free), 1 GiB: 0 pages (0 free); THP madvise, defrag madvise"
    )


def test_facts_table_counts_the_pages_of_each_pool(run_cli: RunCli, tmp_path: Path) -> None:
    # 2 pages of 2 MiB, both free (nr_hugepages, free_hugepages of hugepages-2048kB), none of 1 GiB.
    table = facts_table(run_cli, build_node(tmp_path / "node"))
    assert row(table, "huge pages")[1].startswith("2 MiB: 2 pages (2 free), 1 GiB: 0 pages (0 free); ")


def test_facts_table_tells_unrecorded_pools_from_none(run_cli: RunCli, tmp_path: Path) -> None:
    """A recording of the CPU folder alone holds nothing of huge pages: not "none", "not recorded"."""
    files = {"/sys/devices/system/cpu/online": "0\n", "/proc/meminfo": "MemTotal: 1024 kB\n"}
    make_tree(tmp_path / "cpu-only", files)
    line = row(facts_table(run_cli, tmp_path / "cpu-only"), "huge pages")[1]
    assert line == (
        "not recorded (/sys/kernel/mm/hugepages); THP not recorded (/sys/kernel/mm/transparent_hugepage)"
    )


@pytest.mark.parametrize("verbose", [["-v"], []], ids=["table", "problems"])
def test_check_facts_in_table_format_adds_the_facts_after_the_findings(
    run_cli: RunCli, verbose: list[str]
) -> None:
    """Piped (as here), -v prints the findings' table and without it the problems; with --facts the
    facts tables follow either, as `nodeagent facts` prints them."""
    proc = run_cli("check", "--root", str(VM), "--only", "kernel", *verbose, "--facts")
    assert proc.returncode == 1, proc.stderr  # kernel/memlock WARNs on the recorded VM
    findings, title, facts = proc.stdout.partition("nodeagent facts: vm")
    assert title, proc.stdout
    assert "kernel/memlock" in findings and "worst: WARN" in findings  # the findings first
    assert "kernel/memlock" not in facts
    assert row(facts, "huge pages")[1].startswith("2 MiB: 0 pages (0 free), 1 GiB: 0 pages (0 free)")
    assert row(facts, "eth0")[:3] == ["eth0", "0000:00:03.0", "up"]


def test_snapshot_round_trip(run_cli: RunCli, tmp_path: Path) -> None:
    out = tmp_path / "node.tar.gz"
    proc = run_cli("snapshot", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout
    with tarfile.open(out) as tf:
        names = tf.getnames()
    assert "nodeagent.json" in names and any(n.startswith("sys/devices/system/cpu") for n in names)
    _, live = run_json(run_cli, "facts")
    _, snap = run_json(run_cli, "facts", "--root", str(out))
    for key in ("topology", "pci", "nics", "rdma", "gpus", "kernel", "dmi"):
        assert snap[key] == live[key], key
    assert snap["source"] == "snapshot"
    code, doc = run_json(run_cli, "check", "--root", str(out), "--only", "numa")
    assert code in (0, 1) and doc["findings"]


def test_snapshot_to_unwritable_place_exits_64(run_cli: RunCli) -> None:
    proc = run_cli("snapshot", "-o", "/proc/nodeagent-cannot-write-here.tar.gz")
    assert proc.returncode == 64 and "cannot write" in proc.stderr


def test_check_imports_neither_tensorflow_nor_pynvml() -> None:
    code = (
        "import contextlib, io\nfrom nodeagent.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n        main(['check', '--format', 'json'])\n    except SystemExit:\n        pass"
    )
    assert modules_loaded_by(code, ("tensorflow", "pynvml", "textual", "fabric", "paramiko")) == []


def test_snapshot_privacy_filters() -> None:
    env = b"HOME=/root\x00AWS_SECRET_ACCESS_KEY=abc\x00OMP_NUM_THREADS=4\x00LOCAL_RANK=1\x00"
    assert _filter_environ(env) == b"OMP_NUM_THREADS=4\x00LOCAL_RANK=1\x00"
    cmd = b"python\x00train.py\x00--api-key=XYZ\x00--password\x00hunter2\x00--lr=0.1"
    assert (
        _redact_cmdline(cmd)
        == b"python\x00train.py\x00--api-key=REDACTED\x00--password\x00REDACTED\x00--lr=0.1"
    )
