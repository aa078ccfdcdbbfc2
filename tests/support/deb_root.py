"""The Debian package's life on a scratch copy of this machine: install, run, verify, purge.

Run in a mount namespace of its own (`unshare --mount --propagation private python
tests/support/deb_root.py DEB OUT`): this machine's root file system is the lower layer of an overlayfs
whose upper layer is a tmpfs, with /proc, /sys and /dev bound in and fresh tmpfs on /run and /tmp,
and every step runs chrooted there. So dpkg's scripts, the installed `nodeagent` and the unit's
command see a whole Debian system (this one), while everything they write lands in the tmpfs, gone
with the namespace; the machine itself is never changed. The upper layer is the record of what
changed: after the purge, every file in it that is not dpkg's own bookkeeping is one the package
left behind (or, as an overlayfs whiteout, one it removed from the system).

Writes OUT/result.json (each step's command, exit code and output, the file lists) and OUT/
nodeagent.prom (the textfile the unit's command wrote), for tests/integration/test_deb.py to judge.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
PACKAGE = "nodeagent"
UNIT_DIR = "/lib/systemd/system"
TEXTFILE = "/var/lib/prometheus/node-exporter/nodeagent.prom"
TIMER_LINK = "/etc/systemd/system/timers.target.wants/nodeagent.timer"
STEP_TIMEOUT_S = 600
# dpkg's and apt's own records of what was installed and removed: expected to change.
# man's page cache is written by `systemd-analyze verify` looking up the units' man: links.
BOOKKEEPING = (
    "var/lib/dpkg/",
    "var/log/",
    "var/cache/debconf/",
    "var/cache/ldconfig/",
    "var/cache/man/",
    "etc/ld.so.cache",
)


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def overlay(base: Path) -> tuple[Path, Path]:
    """(merged root, upper layer) of this machine's root under `base`."""
    mount("-t", "tmpfs", "tmpfs", str(base))
    upper, work, merged = base / "upper", base / "work", base / "merged"
    for d in (upper, work, merged):
        d.mkdir()
    mount("-t", "overlay", "overlay", "-o", f"lowerdir=/,upperdir={upper},workdir={work}", str(merged))
    mount("--bind", "/proc", str(merged / "proc"))
    mount("--rbind", "/sys", str(merged / "sys"))
    mount("--rbind", "/dev", str(merged / "dev"))
    mount("-t", "tmpfs", "tmpfs", str(merged / "run"))
    mount("-t", "tmpfs", "tmpfs", str(merged / "tmp"))
    return merged, upper


def chrooted(root: Path, argv: list[str]) -> dict[str, Any]:
    """One step: its command, exit code, output and wall time (a figure, not judged)."""
    start = time.monotonic()
    done = subprocess.run(
        ["chroot", str(root), *argv],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
        check=False,
    )
    seconds = round(time.monotonic() - start, 2)
    return {
        "argv": argv,
        "rc": done.returncode,
        "stdout": done.stdout,
        "stderr": done.stderr,
        "seconds": seconds,
    }


def layer(upper: Path) -> dict[str, str]:
    """Every path in the upper layer, relative, with its kind: file, link, dir, whiteout."""
    found: dict[str, str] = {}
    for folder, dirs, files in os.walk(upper):
        for name in dirs + files:
            path = Path(folder) / name
            rel = str(path.relative_to(upper))
            mode = path.lstat().st_mode
            if stat.S_ISCHR(mode) and path.lstat().st_rdev == 0:
                found[rel] = "whiteout"
            elif stat.S_ISDIR(mode):
                found[rel] = "dir"
            elif stat.S_ISLNK(mode):
                found[rel] = "link"
            else:
                found[rel] = "file"
    return found


def leftovers(upper: Path) -> list[str]:
    """What the upper layer holds that the system did not have and is not dpkg's bookkeeping: files
    and links, folders that do not exist below (a folder merely copied up is no change), and
    whiteouts (something of the system removed)."""
    out = []
    for rel, kind in sorted(layer(upper).items()):
        if rel.startswith(BOOKKEEPING) or rel in ("run", "tmp"):
            continue
        if kind == "dir" and os.path.lexists("/" + rel):
            continue
        out.append(f"{kind} /{rel}")
    return out


def unit_command(root: Path) -> list[str]:
    """The service's ExecStart, as systemd would run it (no prefix characters are used)."""
    for line in (root / UNIT_DIR.lstrip("/") / "nodeagent.service").read_text().splitlines():
        if line.startswith("ExecStart="):
            return shlex.split(line.removeprefix("ExecStart="))
    raise SystemExit("nodeagent.service has no ExecStart")


def scenario(deb: Path, out: Path) -> dict[str, Any]:
    base = out / "root"  # an empty folder left behind: the tmpfs on it goes with the namespace
    base.mkdir()
    merged, upper = overlay(base)
    steps: dict[str, Any] = {"before": sorted(leftovers(upper))}
    shutil.copy(deb, merged / "tmp" / deb.name)
    steps["install"] = chrooted(merged, ["dpkg", "--install", f"/tmp/{deb.name}"])
    steps["installed"] = sorted(leftovers(upper))
    steps["owned"] = chrooted(merged, ["dpkg-query", "--listfiles", PACKAGE])["stdout"].splitlines()
    steps["timer_enabled"] = os.path.lexists(merged / TIMER_LINK.lstrip("/"))
    steps["version"] = chrooted(merged, ["nodeagent", "--version"])
    steps["check"] = chrooted(merged, ["nodeagent", "check", "--format", "json"])
    units = [f"{UNIT_DIR}/nodeagent.service", f"{UNIT_DIR}/nodeagent.timer"]
    steps["verify"] = chrooted(merged, ["systemd-analyze", "verify", *units])
    steps["service"] = chrooted(merged, unit_command(merged))
    prom = merged / TEXTFILE.lstrip("/")
    if prom.exists():
        shutil.copy(prom, out / "nodeagent.prom")
        steps["textfile_mode"] = prom.stat().st_mode & 0o777
    steps["textfile_folder"] = sorted(p.name for p in prom.parent.iterdir()) if prom.parent.exists() else []
    steps["after_runs"] = sorted(leftovers(upper))
    steps["purge"] = chrooted(merged, ["dpkg", "--purge", PACKAGE])
    steps["after_purge"] = sorted(leftovers(upper))
    return steps


def main() -> None:
    deb, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    steps = scenario(deb, out)
    (out / "result.json").write_text(json.dumps(steps, indent=1))
    for name, step in steps.items():
        if isinstance(step, dict):
            print(f"{name}: exit {step['rc']} in {step['seconds']} s: {shlex.join(step['argv'])}")


if __name__ == "__main__":
    main()
