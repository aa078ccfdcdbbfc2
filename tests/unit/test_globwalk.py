"""The recorder's one-walk expansion of many patterns (nodeagent.host.globwalk) reaches exactly what
expanding them one by one does: the same files, folders and links, on random trees with links of
every kind (relative, absolute, dangling, looping), held in memory and written to disk."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeagent.host.globwalk import matcher, walk
from nodeagent.host.local import LocalHost
from nodeagent.host.tree import DIR, FILE, LINK, LiveTree, Tree
from tests.support.random_trees import (
    NAMES,
    Reached,
    TreeOnly,
    disk_tree,
    entries_st,
    memory_tree,
    one_by_one,
    patterns_st,
)


def walked(tree: Tree, patterns: Iterable[str], as_folders: Collection[str] = ()) -> Reached:
    files: dict[str, bytes] = {}
    links: dict[str, str] = {}
    dirs: set[str] = set()
    for kind, path, value in walk(tree, patterns, as_folders):
        if kind == LINK:
            links[path] = str(value)
        elif kind == DIR:
            dirs.add(path)
        elif value is not None:  # None: unreadable
            assert kind == FILE and isinstance(value, bytes)
            files[path] = value
    return files, links, dirs


@settings(max_examples=300, deadline=None)
@given(entries=entries_st(3), patterns=patterns_st)
def test_one_walk_reaches_what_each_pattern_does_in_memory(
    entries: dict[str, Any], patterns: list[str]
) -> None:
    tree = memory_tree(entries)
    assert walked(tree, patterns) == one_by_one(TreeOnly(tree), patterns)


@settings(max_examples=300, deadline=None)
@given(
    entries=entries_st(3),
    paths=st.lists(
        st.lists(st.sampled_from((*NAMES, ".", "..", "zz")), max_size=5).map(lambda ps: "/" + "/".join(ps)),
        min_size=1,
        max_size=6,
    ),
)
def test_memory_trees_remember_resolutions_exactly(entries: dict[str, Any], paths: list[str]) -> None:
    """MemoryTree.resolve goes folder by folder and remembers; Tree.resolve walks every time."""
    tree = memory_tree(entries)
    for path in [*paths, *reversed(paths)]:  # the second pass answers from what was remembered
        assert tree.resolve(path) == Tree.resolve(tree, path), path


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=entries_st(3), patterns=patterns_st)
def test_one_walk_reaches_what_each_pattern_does_on_disk(
    tmp_path_factory: pytest.TempPathFactory, entries: dict[str, Any], patterns: list[str]
) -> None:
    # A folder holding a copy of a tree: absolute and escaping links resolve inside it, as on a node
    # recorded through NODEAGENT_ROOT (/host in a container).
    root = tmp_path_factory.mktemp("tree")
    disk_tree(entries, root)
    assert walked(LiveTree(str(root)), patterns) == one_by_one(LocalHost(str(root)), patterns)


# -- this machine ---------------------------------------------------------------------------------

STABLE = [  # what does not change between two reads (no running processes, no counters)
    "/sys/class/net/*/mtu",
    "/sys/class/net/*/device/numa_node",
    "/sys/bus/pci/devices/*/class",
    "/sys/bus/pci/devices/*/driver",
    "/sys/devices/system/cpu/cpu*/topology/core_id",
    "/sys/devices/system/node/node*/cpulist",
    "/sys/fs/cgroup/*/cpu.max",
    "/sys/fs/cgroup/cpu*/cpu.cfs_quota_us",
    "/proc/self/limits",
    "/proc/sys/kernel/osrelease",
    "/proc/self",
    "/sys/block/*/queue",
]


def test_on_this_machine_the_kernel_shortcuts_agree_with_the_walk() -> None:
    """On "/", scan, fetch and resolve are the kernel's (d_type, O_NOFOLLOW, /proc/self/fd)."""
    files, links, dirs = walked(LiveTree("/"), STABLE, as_folders=("/proc/self",))
    ref_files, ref_links, ref_dirs = one_by_one(LocalHost(), STABLE, as_folders=("/proc/self",))
    assert (links, dirs) == (ref_links, ref_dirs)
    own = ("/proc/self/limits",)  # the process reading it: limits are the same, the same file
    assert {p: d for p, d in files.items() if p not in own} == {
        p: d for p, d in ref_files.items() if p not in own
    }
    assert set(files) == set(ref_files)
    assert "/proc/self/limits" in files and "/proc/self" in dirs


def test_live_fetch_tells_kinds_with_one_open(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 200_000)  # longer than one read
    (tmp_path / "d").mkdir()
    (tmp_path / "l").symlink_to("f")
    (tmp_path / "dangling").symlink_to("nowhere")
    tree = LiveTree("/")
    base = str(tmp_path)
    assert tree.fetch(f"{base}/f") == (FILE, b"x" * 200_000)
    assert tree.fetch(f"{base}/d") == (DIR, None)
    assert tree.fetch(f"{base}/l") == (LINK, "f")
    assert tree.fetch(f"{base}/dangling") == (LINK, "nowhere")
    assert tree.fetch(f"{base}/absent") is None
    assert tree.fetch(f"{base}/f/under-a-file") is None
    assert tree.resolve(f"{base}/l") == f"{os.path.realpath(base)}/f"
    assert tree.resolve(f"{base}/dangling") is None


def test_an_attribute_without_read_is_left_out() -> None:
    """sysfs refuses to open a write-only attribute for reading (EACCES, even for root)."""
    rescan = "/sys/bus/pci/rescan"
    if not os.path.exists(rescan):
        pytest.skip(f"{rescan} is not on this machine")
    assert LiveTree("/").fetch(rescan) == (FILE, None)
    assert walk(LiveTree("/"), [rescan]) == [(FILE, rescan, None)]


# Components as the checks write them, and the bracket expressions left to fnmatch.
COMPONENT_PIECES = ["a", "b", "0", "9", "-", ".", "*", "?", "[0-9]", "[", "]", "!", "[!0-9]", "[a-b]", "cpu"]


@pytest.mark.slow
@settings(max_examples=3000)
@given(
    st.lists(st.sampled_from(COMPONENT_PIECES), max_size=6).map("".join),
    st.text(alphabet="ab09-.[]!cpu\n", max_size=10),
)
def test_a_component_matches_as_fnmatchcase_says(part: str, name: str) -> None:
    assert bool(matcher(part)(name)) == fnmatch.fnmatchcase(name, part)


def test_a_guard_file_that_is_empty_or_absent_leaves_the_rest_of_its_folder_unread(tmp_path: Path) -> None:
    procs = {
        "1": {"cmdline": b"python\0train.py\0", "status": b"Name:\tpython\n", "environ": b"RANK=0\0"},
        "2": {"cmdline": b"", "status": b"Name:\tkthreadd\n", "environ": b""},  # a kernel thread
        "3": {"status": b"Name:\tgone\n"},  # exited between listing and reading
    }
    for pid, contents in procs.items():
        (tmp_path / "proc" / pid).mkdir(parents=True)
        for name, data in contents.items():
            (tmp_path / "proc" / pid / name).write_bytes(data)
    patterns = ["/proc/[0-9]*/status", "/proc/[0-9]*/cmdline", "/proc/[0-9]*/environ"]
    tree = LiveTree(str(tmp_path))

    def reached(of_kind: str, guards: dict[str, str] | None) -> set[str]:
        return {p for kind, p, _ in walk(tree, patterns, every_folder=True, guards=guards) if kind == of_kind}

    guard = {"/proc/[0-9]*": "cmdline"}
    assert reached(FILE, None) == {f"/proc/{pid}/{name}" for pid, names in procs.items() for name in names}
    assert reached(FILE, guard) == {"/proc/1/cmdline", "/proc/1/status", "/proc/1/environ", "/proc/2/cmdline"}
    # The folders are there all the same: a process count reads them.
    assert reached(DIR, guard) >= {"/proc/1", "/proc/2", "/proc/3"}
