"""The agentless pull's node side runs on whatever python3 a node has: the recorder's sources
(standard library only) travel on standard input and record the same tree as nodeagent itself."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

import pytest

from nodeagent.cluster import pull
from nodeagent.host import LocalHost, recorder

# What does not change between two reads, through links (class/net, bus/pci), cgroups and /proc/self.
STABLE = [
    "/sys/class/net/*/mtu",
    "/sys/bus/pci/devices/*/class",
    "/sys/devices/system/cpu/cpu*/topology/core_id",
    "/sys/devices/system/node/node*/cpulist",
    "/sys/fs/cgroup/*/cpu.max",
    "/proc/sys/kernel/osrelease",
    "/proc/self/limits",
]
OLDEST = (3, 8)  # nodeagent.host.recorder's promise: nodes with Python 3.8 can be recorded


def interpreters() -> dict[str, str]:
    """Pythons 3.8 and later on this machine: on PATH as python3.N, and pyenv's versions."""
    found: dict[str, str] = {}
    candidates = [shutil.which(f"python3.{minor}") for minor in range(OLDEST[1], 15)]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3")))
    for path in filter(None, candidates):
        probe = subprocess.run(
            [path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        version = probe.stdout.strip()
        if probe.returncode == 0 and tuple(int(p) for p in version.split(".")) >= OLDEST:
            found.setdefault(version, path)
    return found


FOUND = interpreters()


@pytest.mark.parametrize("version", sorted(FOUND) or ["none"])
def test_the_node_side_records_the_same_tree_on_every_python(version: str) -> None:
    if version == "none":
        pytest.skip("no python3.N (N >= 8) on this machine besides the test's own")
    proc = subprocess.run(
        ["/bin/sh", "-c", pull.command(FOUND[version])],
        input=pull.payload(STABLE, [("uname", "-r")], 10.0),
        capture_output=True,
        check=False,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    assert proc.returncode == 0, proc.stderr.decode()
    pulled = recorder.decode(proc.stdout)
    here = recorder.record(LocalHost(), STABLE, [("uname", "-r")])
    assert (pulled.dirs, pulled.links) == (here.dirs, here.links)
    assert {p: d for p, d in pulled.files.items() if p != "/nodeagent.json"} == here.files


# What a node's start-up would pay for at every pull, for nothing the recorder needs (a regression
# here costs every node milliseconds: nodeagent.cluster.pull).
NOT_ON_THE_NODE = {
    "json",
    "re",
    "typing",
    "threading",
    "subprocess",
    "shutil",
    "fnmatch",
    "shlex",
    "dataclasses",
}


def test_the_node_side_imports_nothing_heavy() -> None:
    listing = pull.BOOTSTRAP + "import sys;sys.stderr.write(' '.join(sys.modules))\n"
    proc = subprocess.run(
        ["/usr/bin/env", sys.executable, "-I", "-S", "-c", listing],
        input=pull.payload(STABLE, [("uname", "-r"), ("nodeagent-no-such-tool",)], 10.0),
        capture_output=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    loaded = set(proc.stderr.decode().split())
    assert "nodeagent.host.recorder" in loaded
    assert loaded & NOT_ON_THE_NODE == set()
