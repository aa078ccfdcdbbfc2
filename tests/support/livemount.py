"""Live mounts of this machine's /proc and /sys under test folders, as a pod mounts its node's at
/host/proc and /host/sys: a private mount namespace (`unshare --mount --propagation private`)
that holds them, and commands run inside it (`nsenter --mount`). Root only; the namespace, and every
mount in it, goes away when its one long-lived process ends (teardown closes its stdin; a test
process that dies closes it too)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

NODEAGENT = str(Path(sys.executable).with_name("nodeagent"))
# What the environment may set that would change which node a command reads: never inherited.
NODE_ENV = ("NODEAGENT_ROOT", "NODEAGENT_HOSTNAME")

# How each test folder is mounted: the same mounts as / (recursive binds, as a container runtime
# binds a hostPath), new procfs and sysfs instances, or a procfs alone (half a live mount).
BIND, FRESH, PROC_ONLY = "bind", "fresh", "proc-only"
_MOUNTS = {
    BIND: ("mount --rbind /proc {d}/proc", "mount --rbind /sys {d}/sys"),
    FRESH: ("mount -t proc proc {d}/proc", "mount -t sysfs sysfs {d}/sys"),
    PROC_ONLY: ("mount -t proc proc {d}/proc",),
}


def unavailable() -> str | None:
    """Why no live mount can be made here, or None."""
    if os.geteuid() != 0:
        return "needs root: mounts procfs and sysfs in a private mount namespace (make test runs as root)"
    for tool in ("unshare", "nsenter", "mount"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (Debian packages util-linux and mount)"
    return None


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in NODE_ENV}
    return {**env, **(extra or {})}


class Namespace:
    """The namespace's holder process and the folders mounted in it."""

    def __init__(self, holder: subprocess.Popen[str], folders: dict[str, Path]) -> None:
        self.holder = holder
        self.folders = folders

    def argv(self, *argv: str) -> list[str]:
        return ["nsenter", f"--target={self.holder.pid}", "--mount", "--", *argv]

    def run(
        self, *argv: str, env: Mapping[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*argv), capture_output=True, text=True, env=clean_env(env), timeout=timeout, check=False
        )

    def nodeagent(self, *args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return self.run(NODEAGENT, *args, env=env)

    def close(self) -> None:
        if self.holder.stdin is not None:
            self.holder.stdin.close()
        try:
            self.holder.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.holder.kill()
            self.holder.wait()


@contextmanager
def live_namespace(base: Path, layout: Mapping[str, str], setup: str = "") -> Iterator[Namespace]:
    """A namespace where each folder `base/NAME` of `layout` holds the mounts its kind names
    (BIND, FRESH, PROC_ONLY); `setup` is more shell run in it first. Skips the test with the reason
    where the namespace cannot be made."""
    why = unavailable()
    if why:
        pytest.skip(why)
    folders = {name: base / name for name in layout}
    lines = ["set -e"]
    for name, how in layout.items():
        for sub in ("proc", "sys"):
            (folders[name] / sub).mkdir(parents=True)
        lines += [m.format(d=shlex.quote(str(folders[name]))) for m in _MOUNTS[how]]
    # The holder waits on its stdin: closed by close(), or by the kernel when pytest dies.
    lines += [setup, "echo ready", "exec cat >/dev/null"]
    holder = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(lines)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stderr is not None
    if holder.stdout.readline().strip() != "ready":
        holder.wait(timeout=30)
        pytest.skip(f"no private mount namespace here: {holder.stderr.read().strip() or 'unshare failed'}")
    ns = Namespace(holder, folders)
    try:
        yield ns
    finally:
        ns.close()
