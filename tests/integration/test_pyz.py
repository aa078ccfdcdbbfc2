"""build/nodeagent.pyz (`make pyz`) on a node where nodeagent is not installed.

The file is copied to a test host (tests/support/sshcluster.py) and run over SSH by the system's python3 in a
clean environment (`env -i`: no PYTHONPATH, no venv), in the same command line that first shows that
python3 imports neither nodeagent nor pydantic. Its documents must equal those of the installed
nodeagent (this venv's) on the same recordings and on the host itself, and its exit code must be the
worst status, as nodeagent's is. Then: the other CPython versions found here, a read-only and an
unset HOME, and the wheels the file holds for the interpreters and machines it claims. And a start
that fails (older pythons only, PEX_ROOT full or noexec, a damaged copy): one line and docs/deployment.md's
exit code for it, never 1, check's WARN. Last, the start inside a Slurm prolog's budget: the shipped
prolog against an empty cache never drains the node (the first run unpacks in the background and
exits 75), an unpack killed midway leaves no stale lock, and `nodeagent.pyz install DIR` makes an
entry point with nothing to unpack.

`make pyz` rebuilds the file only when a source is newer than it, so the build costs a minute or
two once per change of the tree; it skips here only when PyPI cannot be reached for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shlex
import shutil
import struct
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import parse_wheel_filename

from nodeagent import checks
from nodeagent.facts.topo_matrix import COMMAND as TOPO_COMMAND
from nodeagent.host.base import command_name
from tests.support import fakefleet, pyzbuild
from tests.support.golden_docs import stable
from tests.support.paths import REPO
from tests.support.sshcluster import SSHCluster, cluster_available

# The build can take minutes on a cold cache; the timeout covers the module fixtures of the first test.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("pyz"), pytest.mark.timeout(1200)]

VENV_PYTHON = sys.executable
SYSTEM_PYTHON = "/usr/bin/python3"
CLEAN_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
RUN_TIMEOUT_S = 180
EXIT_CODES = {"OK": 0, "SKIPPED": 0, "WARN": 1, "FAIL": 2, "UNKNOWN": 3}
USAGE_EXIT = 64
# docs/deployment.md's exit codes for a start that fails: no interpreter the file serves; PEX_ROOT unusable.
EX_UNAVAILABLE = 69
EX_IOERR = 74
# Runs the pyz's python with its packages instead of nodeagent: https://docs.pex-tool.org/api/vars.html
INTERPRETER = {"PEX_INTERPRETER": "1"}

# What the Makefile's pyz target claims the file serves.
CLAIMED_MINORS = (10, 11, 12, 13, 14)
CLAIMED_MACHINES = ("x86_64", "aarch64")
CLAIMED_GLIBC_MINOR = 17  # manylinux2014: https://peps.python.org/pep-0599/
# The compiled projects nodeagent needs (directly or through pydantic, PyYAML and Fabric/Paramiko).
COMPILED = {"pydantic-core", "pyyaml", "psutil", "cryptography", "bcrypt", "pynacl", "cffi"}


# Recordings and the exit code each gives: every worst status once.
HWLOC_WARN = "40intel64-2g2n4c+pcilocality"
UNPARSABLE = "unparsable-topo-matrix"  # made here: HWLOC_WARN with a `nvidia-smi topo -m` that is no matrix
FAIL_RECORDING = "smi-openpai-v100-sxm3-dbe-retired-pages"
RECORDINGS = {
    "sysfs-ghw-xeon-l5640-2socket": 0,
    HWLOC_WARN: 1,
    FAIL_RECORDING: 2,
    UNPARSABLE: 3,
}
# The checks that judge the processes running on the host (they read /proc/<pid>): the suite's
# other tests start and stop processes between two live runs compared here (seen: the thread pools
# of a TensorFlow test's job made `threads` WARN in one run and OK in the next).
PROCESS_CHECKS = frozenset(
    c.id for c in checks.select() if any(path.startswith("/proc/[0-9]*/") for path in c.paths)
)
# A file system far smaller than the about 200 MB a first run unpacks.
FULL_FS_MB = 16
# Interpreters older than the file serves that a node may have: RHEL 7's python, RHEL 8's and 9's python3.
OLD_PYTHONS = ((2, 7), (3, 6), (3, 9))


@dataclass(frozen=True)
class Node:
    """The test host and the folder on it that holds the copied pyz and the session's HOME."""

    cluster: SSHCluster
    name: str
    folder: Path

    @property
    def pyz(self) -> Path:
        return self.folder / "nodeagent.pyz"

    @property
    def home(self) -> Path:
        return self.folder / "home"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHCluster]:
    reason = cluster_available(loopback=True)
    if reason is not None:
        pytest.skip(f"no SSH test cluster: {reason}")
    workdir = tmp_path_factory.mktemp("pyz-cluster")
    # What runs in the host's plain SSH session (the fleet's remote agent) caches its pex here, not
    # under the user's real home.
    cache = {"PEX_ROOT": str(workdir / "session-pex-cache")}
    with SSHCluster(1, workdir, lambda i: cache) as built:
        yield built


@pytest.fixture(scope="module")
def node(cluster: SSHCluster, tmp_path_factory: pytest.TempPathFactory) -> Node:
    """The pyz, built, copied to a folder of the host, as one would copy it to a node."""
    if not Path(SYSTEM_PYTHON).is_file():
        pytest.skip(f"no {SYSTEM_PYTHON} (Debian package python3) to run the pyz with")
    pyz = pyzbuild.make_pyz()
    folder = tmp_path_factory.mktemp("pyz-node")
    shutil.copy2(pyz, folder / "nodeagent.pyz")
    (folder / "home").mkdir()
    return Node(cluster, cluster.hosts[0].name, folder)


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Recording name -> --root: real recordings, and one whose `nvidia-smi topo -m` is not a matrix."""
    trees = tmp_path_factory.mktemp("pyz-trees")
    roots = {name: fakefleet.recorded_root(name, trees) for name in RECORDINGS if name != UNPARSABLE}
    roots[UNPARSABLE] = str(_unparsable_topology(trees / UNPARSABLE))
    return roots


def _unparsable_topology(dest: Path) -> Path:
    """The WARN recording with a `nvidia-smi topo -m` output that is not a matrix: topology is UNKNOWN."""
    with tarfile.open(fakefleet.recorded_root(HWLOC_WARN, dest.parent)) as archive:
        archive.extractall(dest, filter="data")
    (top,) = [p for p in dest.iterdir() if p.is_dir()]
    commands = top / "commands"
    commands.mkdir()
    (commands / f"{command_name(TOPO_COMMAND)}.txt").write_text("GPU0\tgarbage\nnot a matrix\n")
    return dest


def _ssh(node: Node, command: str, timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    argv = node.cluster.ssh_argv(node.name, command)
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL
    )


def _clean_env(node: Node, extra: Mapping[str, str] | None = None, *, home: bool = True) -> list[str]:
    """`env -i` with a PATH of the system's folders only, and HOME in the node's folder (its pex cache)."""
    env = {
        "PATH": CLEAN_PATH,
        "LANG": "C.UTF-8",
        **({"HOME": str(node.home)} if home else {}),
        **(extra or {}),
    }
    return ["env", "-i", *(f"{k}={v}" for k, v in env.items())]


# Runs first in the pyz's own command line: the system python3 must not import nodeagent or pydantic,
# and no nodeagent may be on PATH; each outcome goes to stderr, then the command itself replaces the shell.
PROOF = (
    'for m in nodeagent pydantic; do "$0" -c "import $m" 2>/dev/null; echo "import $m: exit $?" >&2; done; '
    'command -v nodeagent >/dev/null && echo "nodeagent on PATH: $(command -v nodeagent)" >&2; '
    'exec "$0" "$@"'
)


def run_pyz(
    node: Node,
    args: Sequence[str],
    *,
    python: str = SYSTEM_PYTHON,
    extra_env: Mapping[str, str] | None = None,
    prove: bool = True,
) -> subprocess.CompletedProcess[str]:
    """`python nodeagent.pyz ARGS` on the host, in a clean environment, after the proof that python
    has no nodeagent of its own (asserted here unless `prove` is False)."""
    command = [*_clean_env(node, extra_env), "sh", "-c", PROOF, python, "nodeagent.pyz", *args]
    done = _ssh(node, f"cd {shlex.quote(str(node.folder))} && {shlex.join(command)}")
    if not prove:
        return done
    assert "import nodeagent: exit 1" in done.stderr, f"{python} imports nodeagent by itself:\n{done.stderr}"
    assert "import pydantic: exit 1" in done.stderr, f"{python} imports pydantic by itself:\n{done.stderr}"
    assert "nodeagent on PATH" not in done.stderr, done.stderr
    return done


def run_installed(node: Node, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """The installed nodeagent (this venv's) on the host, in the same clean environment."""
    command = [*_clean_env(node), VENV_PYTHON, "-m", "nodeagent", *args]
    return _ssh(node, shlex.join(command))


def _document(done: subprocess.CompletedProcess[str], who: str) -> dict[str, Any]:
    assert done.returncode in EXIT_CODES.values(), (
        f"{who} exited {done.returncode}:\n{pyzbuild.tail(done.stderr)}"
    )
    assert "Traceback" not in done.stderr, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def _statuses(doc: Mapping[str, Any], live: bool = False) -> dict[str, str]:
    """Each check's status; of a live run, but for the checks that judge the running processes."""
    return {c["id"]: c["status"] for c in doc["checks"] if not (live and c["id"] in PROCESS_CHECKS)}


@pytest.mark.parametrize("recording", list(RECORDINGS))
def test_a_recording_gives_the_installed_nodeagents_document_and_exit_code(
    node: Node, recordings: dict[str, str], recording: str
) -> None:
    args = ["check", "--root", recordings[recording], "--format", "json"]
    installed = run_installed(node, args)
    pyz = run_pyz(node, args)
    want, got = _document(installed, "installed nodeagent"), _document(pyz, "nodeagent.pyz")
    assert _statuses(got) == _statuses(want)
    assert stable(got) == stable(want)
    assert pyz.returncode == installed.returncode == RECORDINGS[recording] == EXIT_CODES[got["status"]]


def test_a_live_check_of_the_host_gives_the_installed_nodeagents_statuses(node: Node) -> None:
    installed = run_installed(node, ["check", "--format", "json"])
    pyz = run_pyz(node, ["check", "--format", "json"])
    want, got = _document(installed, "installed nodeagent"), _document(pyz, "nodeagent.pyz")
    assert {"threads", "cpu-isa"} <= PROCESS_CHECKS  # what reads /proc/<pid> is left out, no more
    assert _statuses(got, live=True) == _statuses(want, live=True)
    assert pyz.returncode == EXIT_CODES[got["status"]]
    assert installed.returncode == EXIT_CODES[want["status"]]


def test_it_runs_by_its_shebang_and_says_the_installed_version(node: Node) -> None:
    command = [*_clean_env(node), "./nodeagent.pyz", "--version"]
    pyz = _ssh(node, f"cd {shlex.quote(str(node.folder))} && {shlex.join(command)}")
    installed = run_installed(node, ["--version"])
    assert pyz.returncode == 0, pyz.stderr
    assert pyz.stdout == installed.stdout and "version" in pyz.stdout


def test_a_usage_error_is_one_line_and_exit_64(node: Node) -> None:
    missing = node.folder / "no-such-recording"
    done = run_pyz(node, ["check", "--root", str(missing)])
    assert done.returncode == USAGE_EXIT
    assert "Traceback" not in done.stderr
    said = [line for line in done.stderr.splitlines() if not line.startswith("import ")]
    assert len(said) == 1 and str(missing) in said[0], done.stderr


def test_the_benchmark_says_in_one_line_that_it_needs_tensorflow(node: Node) -> None:
    """TensorFlow is not in the pyz, and the pyz does not see the system's site-packages."""
    done = run_pyz(node, ["bench", "--quick"])
    said = [line for line in done.stderr.splitlines() if not line.startswith("import ")]
    assert done.returncode == USAGE_EXIT, done.stderr
    assert len(said) == 1 and "needs TensorFlow" in said[0], done.stderr


def test_child_processes_find_nodeagent_through_sys_executable(node: Node) -> None:
    """The bench and A/B trials start `sys.executable -m nodeagent ...`: the pyz's venv python has it."""
    probe = (
        "import subprocess, sys; subprocess.run([sys.executable, '-m', 'nodeagent', '--version'], check=True)"
    )
    done = run_pyz(node, ["-c", probe], extra_env=INTERPRETER)
    assert done.returncode == 0, done.stderr
    assert "version" in done.stdout


def test_the_fleets_remote_agent_can_be_the_pyz(node: Node, tmp_path: Path) -> None:
    """`check --cluster --remote-agent` with the inventory's `nodeagent:` naming the pyz: the host
    runs it by its shebang, and its report is the installed nodeagent's."""
    inventory = node.cluster.write_inventory(tmp_path / "hosts.yml", nodeagent=str(node.pyz))
    argv = [VENV_PYTHON, "-m", "nodeagent", "check", "--cluster", str(inventory), "--remote-agent"]
    fleet = subprocess.run(
        [*argv, "--format", "json"], capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    host = _document(fleet, "check --cluster --remote-agent")["hosts"][node.name]
    assert "error" not in host, host
    live = _document(run_installed(node, ["check", "--format", "json"]), "installed nodeagent")
    assert _statuses(host, live=True) == _statuses(live, live=True)


def _interpreter(minor: int, major: int = 3) -> str | None:
    """A CPython <major>.<minor> of this machine: on PATH, or one of pyenv's versions."""
    name = f"python{major}.{minor}"
    candidates = [shutil.which(name)]
    pyenv = shutil.which("pyenv")
    if pyenv is not None:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True, timeout=30, check=False)
        found = sorted(Path(root.stdout.strip()).glob(f"versions/{major}.{minor}.*/bin/{name}"), reverse=True)
        candidates += [str(p) for p in found]
    for candidate in filter(None, candidates):
        probe = [candidate, "-c", f"import sys; sys.exit(sys.version_info[:2] != ({major}, {minor}))"]
        if subprocess.run(probe, capture_output=True, timeout=30, check=False).returncode == 0:
            return candidate
    return None


# The compiled modules the pyz must load on each interpreter (pydantic-core, PyYAML's C loader, psutil,
# and Paramiko's cryptography, bcrypt and PyNaCl); printed: the interpreter's version, then where the
# venv's python and each module are.
COMPILED_PROBE = (
    "import sys, pydantic_core, yaml, psutil, bcrypt, nacl.bindings, cryptography.hazmat.bindings._rust as c;"
    "assert yaml.__with_libyaml__, 'PyYAML without its C extension';"
    "print('%d.%d' % sys.version_info[:2], sys.executable);"
    "print(*(m.__file__ for m in (pydantic_core, yaml, psutil, bcrypt, nacl.bindings, c)))"
)


@pytest.mark.parametrize("minor", CLAIMED_MINORS)
def test_every_claimed_interpreter_found_here_loads_its_wheels_and_checks_alike(
    node: Node, recordings: dict[str, str], minor: int
) -> None:
    python = _interpreter(minor)
    if python is None:
        pytest.skip(f"no CPython 3.{minor} on this machine (PATH or pyenv) to run the pyz with")
    # Not the proof of run_pyz: an interpreter of pyenv may have its own pydantic. The modules must
    # come from the pyz's venv all the same.
    loaded = run_pyz(node, ["-c", COMPILED_PROBE], python=python, extra_env=INTERPRETER, prove=False)
    assert loaded.returncode == 0, loaded.stderr
    (version, executable), modules = (line.split() for line in loaded.stdout.splitlines())
    assert version == f"3.{minor}"
    outside = [path for path in [executable, *modules] if not path.startswith(f"{node.home}/")]
    assert outside == [], "everything comes from the pyz's venv in its cache under HOME"
    args = ["check", "--root", recordings[HWLOC_WARN], "--format", "json"]
    got = _document(run_pyz(node, args, python=python, prove=False), f"nodeagent.pyz on {python}")
    want = _document(run_installed(node, args), "installed nodeagent")
    assert stable(got) == stable(want)


def _root_only() -> None:
    if os.geteuid() != 0:
        pytest.skip(f"mounting a tmpfs over a home needs root (running as uid {os.geteuid()})")
    if shutil.which("unshare") is None:
        pytest.skip("no unshare (Debian package util-linux)")


def _in_mount_namespace(node: Node, script: str) -> subprocess.CompletedProcess[str]:
    """`sh -c script` on the host in a mount namespace of its own: what it mounts goes with it."""
    return _ssh(node, shlex.join(["unshare", "--mount", "sh", "-c", script]))


def _pex_root_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if "PEX_ROOT" in line]


def _holds(lines: Sequence[str], *parts: str) -> bool:
    """`lines` is one line, holding each of `parts` in that order."""
    if len(lines) != 1:
        return False
    at = 0
    for part in parts:
        at = lines[0].find(part, at)
        if at < 0:
            return False
        at += len(part)
    return True


def _fallback_note(done: subprocess.CompletedProcess[str], home: Path, why: str, scratch: Path) -> bool:
    """One line about PEX_ROOT, naming the unusable one, why, and the temporary folder used instead."""
    return _holds(
        _pex_root_lines(done),
        f"PEX_ROOT {home}/.cache/pex ",
        why,
        f"unpacking into {scratch}/",
        "removed at exit",
    )


@pytest.mark.parametrize(
    ("option", "recording", "why"),
    [("ro", HWLOC_WARN, "read-only"), ("noexec", FAIL_RECORDING, "noexec")],
    ids=["read-only", "noexec"],
)
def test_a_home_it_cannot_unpack_into_falls_back_to_a_private_temporary_cache(
    node: Node, recordings: dict[str, str], tmp_path: Path, option: str, recording: str, why: str
) -> None:
    """HOME (so the default PEX_ROOT) on a read-only file system, or on one mounted noexec where the
    compiled modules it would unpack cannot be loaded: the pyz unpacks into a fresh folder under
    TMPDIR, says so in one line naming both and why, removes it at exit, and gives the check's own
    document and exit code."""
    _root_only()
    home, scratch = tmp_path / f"{option}-home", tmp_path / "tmp"
    home.mkdir()
    scratch.mkdir()
    args = ["check", "--root", recordings[recording], "--format", "json"]
    inner = shlex.join(
        [*_clean_env(node, {"HOME": str(home), "TMPDIR": str(scratch)}), SYSTEM_PYTHON, str(node.pyz), *args]
    )
    mount = f"mount -t tmpfs -o {option} nodeagent-{option}-home {shlex.quote(str(home))} && {inner}"
    done = _in_mount_namespace(node, mount)
    doc = _document(done, f"nodeagent.pyz with HOME on a {why} mount")
    assert done.returncode == EXIT_CODES[doc["status"]] == RECORDINGS[recording]
    assert _fallback_note(done, home, why, scratch), done.stderr
    assert list(scratch.iterdir()) == [], "the temporary cache is removed at exit"


def test_an_unset_home_caches_under_the_users_home_from_passwd(node: Node) -> None:
    """No HOME (a Slurm prolog, cron): the cache goes to ~/.cache/pex of the passwd entry. A tmpfs
    over that home, in a mount namespace of its own, keeps the real one untouched."""
    _root_only()
    user = node.cluster.hosts[0].user
    passwd_home = pwd.getpwnam(user).pw_dir
    inner = shlex.join([*_clean_env(node, home=False), SYSTEM_PYTHON, str(node.pyz), "--version"])
    listing = shlex.join(["ls", f"{passwd_home}/.cache/pex"])
    script = f"mount -t tmpfs nodeagent-home {shlex.quote(passwd_home)} && {inner} && {listing}"
    done = _in_mount_namespace(node, script)
    assert done.returncode == 0, done.stderr
    assert "version" in done.stdout and "venvs" in done.stdout.split()


def test_noexec_everywhere_is_exit_74_and_one_line_naming_pex_root(node: Node) -> None:
    """HOME, /tmp and /var/tmp all on noexec mounts (TMPDIR unset): nowhere to unpack and run."""
    _root_only()
    copy = "/var/tmp/nodeagent.pyz"  # python only reads the file: a noexec mount can hold it
    inner = shlex.join([*_clean_env(node, {"HOME": "/tmp/home"}), SYSTEM_PYTHON, copy, "--version"])
    script = (
        f"mount -t tmpfs nodeagent-var-tmp /var/tmp && cp {shlex.quote(str(node.pyz))} {copy}"
        " && mount -o remount,noexec /var/tmp && mount -t tmpfs -o noexec nodeagent-tmp /tmp"
        f" && mkdir /tmp/home && {inner}"
    )
    done = _in_mount_namespace(node, script)
    assert done.returncode == EX_IOERR, done.stderr
    said = done.stderr.splitlines()
    assert _holds(said, "PEX_ROOT /tmp/home/.cache/pex is", "noexec", "/tmp, /var/tmp", "set PEX_ROOT to"), (
        said
    )


@pytest.mark.parametrize("where", ["HOME", "PEX_ROOT"])
def test_a_full_file_system_under_pex_root_is_exit_74_and_one_line(
    node: Node, tmp_path: Path, where: str
) -> None:
    """PEX_ROOT (by default under HOME, or set) on a file system far smaller than what a first run
    unpacks: no traceback and no exit 1 (check's WARN), but one line naming PEX_ROOT and exit 74."""
    _root_only()
    small = tmp_path / "small"
    small.mkdir()
    pex_root = small / ".cache" / "pex" if where == "HOME" else small / "pex"
    env = {where: str(small if where == "HOME" else pex_root)}
    inner = shlex.join([*_clean_env(node, env), SYSTEM_PYTHON, str(node.pyz), "--version"])
    done = _in_mount_namespace(
        node, f"mount -t tmpfs -o size={FULL_FS_MB}m nodeagent-full {shlex.quote(str(small))} && {inner}"
    )
    assert done.returncode == EX_IOERR, done.stderr
    said = done.stderr.splitlines()
    assert _holds(said, f"no space left in PEX_ROOT {pex_root},", "set PEX_ROOT"), done.stderr


@pytest.mark.parametrize("version", OLD_PYTHONS, ids=[f"{v[0]}.{v[1]}" for v in OLD_PYTHONS])
def test_an_older_python_with_no_newer_one_on_path_is_exit_69(
    node: Node, tmp_path: Path, version: tuple[int, int]
) -> None:
    """pex looks for a python the file serves on PATH; with none it says which it tried, and the
    last line says what the file needs: exit 69 (unavailable), not pex's 1 (check's WARN)."""
    python = _interpreter(version[1], version[0])
    if python is None:
        pytest.skip(f"no CPython {version[0]}.{version[1]} on this machine (PATH or pyenv)")
    only = tmp_path / "bin"  # a PATH whose only python is that one
    only.mkdir()
    (only / "python3").symlink_to(python)
    command = [*_clean_env(node, {"PATH": str(only)}), python, str(node.pyz), "--version"]
    done = _ssh(node, shlex.join(command))
    assert done.returncode == EX_UNAVAILABLE, done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.splitlines()[-1:]
    assert _holds(last, "CPython 3.10 to 3.14", f"this python is {version[0]}.{version[1]}."), done.stderr


def _damage(pyz: Path) -> None:
    """Flips the middle byte of the packed data of nodeagent's own __init__.py in `pyz` (its local
    header: 30 bytes, then the name and the extra field)."""
    with zipfile.ZipFile(pyz) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith(".whl/nodeagent/__init__.py"))
    with pyz.open("r+b") as f:
        f.seek(info.header_offset + 26)
        name_length, extra_length = struct.unpack("<HH", f.read(4))
        at = info.header_offset + 30 + name_length + extra_length + info.compress_size // 2
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0xFF]))


def test_a_damaged_copy_is_exit_74_and_one_line_naming_it(node: Node, tmp_path: Path) -> None:
    """One byte of a packed file changed (a failing disk, a broken transfer): it does not unpack."""
    damaged, home = tmp_path / "nodeagent.pyz", tmp_path / "home"
    shutil.copy2(node.pyz, damaged)
    home.mkdir()
    _damage(damaged)
    command = [*_clean_env(node, {"HOME": str(home)}), SYSTEM_PYTHON, str(damaged), "--version"]
    done = _ssh(node, shlex.join(command))
    assert done.returncode == EX_IOERR, done.stderr
    assert _holds(done.stderr.splitlines(), f"{damaged} is damaged", "copy it again"), done.stderr


def _targets(minor: int, machine: str) -> set[Tag]:
    """The wheel tags pip accepts for CPython 3.<minor> on `machine` with glibc 2.17 (manylinux2014)."""
    legacy = {"x86_64": ["manylinux2014", "manylinux2010", "manylinux1"], "aarch64": ["manylinux2014"]}
    platforms = [f"manylinux_2_{n}_{machine}" for n in range(CLAIMED_GLIBC_MINOR, 4, -1)]
    platforms += [f"{name}_{machine}" for name in legacy[machine]]
    version = (3, minor)
    return set(cpython_tags(version, platforms=platforms)) | set(
        compatible_tags(version, platforms=platforms)
    )


def test_the_file_holds_compiled_wheels_for_every_claimed_interpreter_and_machine(node: Node) -> None:
    with zipfile.ZipFile(node.pyz) as pyz:
        info = json.loads(pyz.read("PEX-INFO"))
    wheels = [parse_wheel_filename(name) for name in info["distributions"]]
    compiled = {str(name) for name, _, _, tags in wheels if any(t.platform != "any" for t in tags)}
    assert compiled >= COMPILED, f"compiled projects in the pyz: {sorted(compiled)}"
    missing = [
        f"{project} for cp3{minor} {machine}"
        for project in sorted(compiled)
        for minor in CLAIMED_MINORS
        for machine in CLAIMED_MACHINES
        if not any(str(name) == project and tags & _targets(minor, machine) for name, _, _, tags in wheels)
    ]
    assert missing == []


# --- Start-up within a Slurm prolog's budget ------------------------------------------------------

PROLOG = REPO / "nodeagent" / "integrations" / "slurm-prolog.sh"
# Exit code of a run told not to unpack (NODEAGENT_NO_UNPACK=1) whose build is not unpacked yet.
EX_TEMPFAIL = 75
# A recording `preflight` passes, so that every judged run lets the job run too.
PASSING = "sysfs-ghw-xeon-l5640-2socket"
# Records each call of scontrol: the prolog drains through it.
FAKE_SCONTROL = '#!/bin/sh\necho "$*" >>"$FAKE_LOG"\n'


@dataclass(frozen=True)
class Prolog:
    """The shipped prolog on the host, with a fake scontrol on PATH, a cache of its own (PEX_ROOT,
    empty until a run fills it) and `nodeagent` the pyz reading a recording."""

    node: Node
    folder: Path

    @property
    def pex_root(self) -> Path:
        return self.folder / "pex-root"

    @property
    def scontrol_calls(self) -> list[str]:
        log = self.folder / "scontrol.log"
        return log.read_text().splitlines() if log.exists() else []

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {
            "PATH": f"{self.folder / 'bin'}:{CLEAN_PATH}",
            "FAKE_LOG": str(self.folder / "scontrol.log"),
            "PEX_ROOT": str(self.pex_root),
            "NODEAGENT": str(self.folder / "bin" / "nodeagent"),
            "NODEAGENT_INSTALLED": str(self.folder / "not-installed"),
            "NODEAGENT_CONFIG": str(self.folder / "no-config"),
            "NODEAGENT_REPORT_DIR": str(self.folder / "reports"),
            "SLURMD_NODENAME": "node01",
            "SLURM_JOB_ID": "7",
            **(extra or {}),
        }

    def run(self, extra: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """The prolog as slurmd runs it, with its own timeout (NODEAGENT_TIMEOUT, 9 s)."""
        command = [*_clean_env(self.node, self.env(extra)), "bash", str(PROLOG)]
        return _ssh(self.node, shlex.join(command))

    def pyz(
        self, args: Sequence[str], extra: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        command = [*_clean_env(self.node, self.env(extra)), SYSTEM_PYTHON, str(self.node.pyz), *args]
        return _ssh(self.node, shlex.join(command))


@pytest.fixture
def prolog(node: Node, recordings: dict[str, str], tmp_path: Path) -> Iterator[Prolog]:
    folder = tmp_path / "prolog"
    (folder / "bin").mkdir(parents=True)
    scontrol = folder / "bin" / "scontrol"
    scontrol.write_text(FAKE_SCONTROL)
    wrapper = folder / "bin" / "nodeagent"  # the pyz, on the recording: `nodeagent CMD --root REC ARGS`
    wrapper.write_text(
        f'#!/bin/sh\ncommand=$1; shift\nexec {SYSTEM_PYTHON} {shlex.quote(str(node.pyz))} "$command"'
        f' --root {shlex.quote(recordings[PASSING])} "$@"\n'
    )
    for executable in (scontrol, wrapper):
        executable.chmod(0o755)
    made = Prolog(node, folder)
    yield made
    _stop_unpacks(made.pex_root)


def _holders(paths: set[str]) -> list[psutil.Process]:
    """The processes holding one of `paths` open (a lock held with flock lives as long as they do)."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if any(f.path in paths for f in process.open_files()):
                found.append(process)
    return found


def _unpack_locks(pex_root: Path) -> set[str]:
    return {str(p) for p in pex_root.glob("nodeagent-unpack.*.lock")}


def _wait_for_the_background_unpack(pex_root: Path) -> None:
    """Until no process holds the lock: the unpack ended (not a timing assert: the test's limit)."""
    while _holders(_unpack_locks(pex_root)):
        time.sleep(0.5)


def _kill_trees(processes: Sequence[psutil.Process]) -> None:
    """SIGKILL to each process and everything it started, as the OOM killer or timeout(1) would."""
    for process in processes:
        with contextlib.suppress(psutil.Error):
            for member in [process, *process.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    member.kill()


def _stop_unpacks(pex_root: Path) -> None:
    _kill_trees(_holders(_unpack_locks(pex_root)))


def test_the_shipped_prolog_never_drains_a_node_on_a_cold_cache(prolog: Prolog) -> None:
    """A first run of a build unpacks for longer than the prolog's 9 s: it must not count as a hung
    check (a drain), but start the unpack in the background and say so (exit 75, logged, the job
    runs). Once unpacked, the prolog judges the node: the recording passes, so no drain ever."""
    first = prolog.run()
    assert first.returncode == 0, first.stderr
    assert prolog.scontrol_calls == []
    assert "could not judge the node yet (exit 75" in first.stderr
    assert "unpacking it in the background" in first.stderr
    _wait_for_the_background_unpack(prolog.pex_root)
    later = prolog.run()
    assert later.returncode == 0, later.stderr
    assert prolog.scontrol_calls == []
    assert "could not judge" not in later.stderr
    report = json.loads((prolog.folder / "reports" / "node01.json").read_text())
    assert report["verdict"]["allowed"] is True


def test_an_unpack_killed_midway_leaves_no_lock_that_stops_the_next(prolog: Prolog) -> None:
    """SIGKILL to the background unpack while it writes the cache (as timeout(1) or an OOM kill
    would): the next run starts a new unpack rather than waiting on a stale lock, and that one
    finishes and runs."""
    started = prolog.pyz(["--version"], {"NODEAGENT_NO_UNPACK": "1"})
    assert started.returncode == EX_TEMPFAIL, started.stderr
    while not any(prolog.pex_root.glob("installed_wheels/*")) and _holders(_unpack_locks(prolog.pex_root)):
        time.sleep(0.1)
    _stop_unpacks(prolog.pex_root)
    again = prolog.pyz(["--version"], {"NODEAGENT_NO_UNPACK": "1"})
    assert again.returncode == EX_TEMPFAIL, "killed before it finished: still not unpacked"
    assert "unpacking it in the background" in again.stderr, again.stderr  # a new one, not "under way"
    _wait_for_the_background_unpack(prolog.pex_root)
    done = prolog.pyz(["--version"], {"NODEAGENT_NO_UNPACK": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout == run_installed(prolog.node, ["--version"]).stdout


def test_install_makes_an_entry_point_the_prolog_runs_with_nothing_to_unpack(
    prolog: Prolog, recordings: dict[str, str]
) -> None:
    """`nodeagent.pyz install DIR`: DIR/bin/nodeagent gives the installed nodeagent's document,
    leaves nothing in the user's cache, and the prolog runs it (its default location, here
    NODEAGENT_INSTALLED). An install killed midway is finished by the next."""
    home = prolog.folder / "opt"
    killed = subprocess.Popen(
        prolog.node.cluster.ssh_argv(
            prolog.node.name,
            shlex.join(
                [
                    *_clean_env(prolog.node, prolog.env()),
                    SYSTEM_PYTHON,
                    str(prolog.node.pyz),
                    "install",
                    str(home),
                ]
            ),
        ),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while not any(home.glob(".unpack.*/installed_wheels/*")) and killed.poll() is None:
        time.sleep(0.1)
    _kill_trees(_holders({str(home / ".install.lock")}))
    killed.wait(timeout=RUN_TIMEOUT_S)
    installed = prolog.pyz(["install", str(home)])
    assert installed.returncode == 0, installed.stderr
    entry = home / "bin" / "nodeagent"
    assert f"run {entry}" in installed.stdout
    assert [p.name for p in home.iterdir() if p.name.startswith(".unpack.")] == []
    assert not prolog.pex_root.exists(), "install unpacks into DIR, not the user's cache"
    args = ["check", "--root", recordings[HWLOC_WARN], "--format", "json"]
    got = _document(_ssh(prolog.node, shlex.join([*_clean_env(prolog.node), str(entry), *args])), str(entry))
    assert stable(got) == stable(_document(run_installed(prolog.node, args), "installed nodeagent"))
    # The prolog's default entry point, as a wrapper reading the recording the checks pass.
    wrapper = prolog.folder / "installed-on-a-recording"
    wrapper.write_text(
        f'#!/bin/sh\ncommand=$1; shift\nexec {shlex.quote(str(entry))} "$command"'
        f' --root {shlex.quote(recordings[PASSING])} "$@"\n'
    )
    wrapper.chmod(0o755)
    ran = prolog.run({"NODEAGENT": "", "NODEAGENT_INSTALLED": str(wrapper)})
    assert ran.returncode == 0, ran.stderr
    assert "could not judge" not in ran.stderr and prolog.scontrol_calls == []
    assert not prolog.pex_root.exists()
