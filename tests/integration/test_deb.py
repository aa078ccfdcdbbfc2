"""The Debian package (`make deb`): built from this tree, installed with dpkg, run, purged.

`make deb` builds build/deb/nodeagent_VERSION_ARCH.deb once for the module; tests/support/deb_root.py then
installs it with `dpkg --install` on a scratch copy of this machine (an overlayfs over its root in
a mount namespace: the machine itself is never changed), runs the installed `nodeagent`, the
timer's service command as its unit file states it and `systemd-analyze verify` on the units, and
purges it. The layout is read from the .deb itself (`dpkg-deb`), the textfile with
prometheus_client's parser.

Skips where the machine cannot: not root (dpkg, mounts), no debhelper (`make system-packages`), no
mount namespaces or overlayfs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.paths import REPO
from tests.support.wheel_contents import version

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("deb"), pytest.mark.timeout(1200)]

DRIVER = REPO / "tests" / "support" / "deb_root.py"
VERSION = version()
BUILD_TIMEOUT_S = 900
SCENARIO_TIMEOUT_S = 900
TEXTFILE = "/var/lib/prometheus/node-exporter/nodeagent.prom"
STATUS_EXIT = {"OK": 0, "SKIPPED": 0, "WARN": 1, "FAIL": 2, "UNKNOWN": 3}


@dataclass(frozen=True)
class Built:
    deb: Path
    files: dict[str, str]  # path in the package -> `dpkg-deb --contents` line
    control: dict[str, str]


@dataclass(frozen=True)
class Lived:
    steps: dict[str, Any]
    textfile: str | None
    started: float
    ended: float


def _skip_unless_able() -> None:
    if os.geteuid() != 0:
        pytest.skip("dpkg and mounts need root")
    missing = [
        tool for tool in ("dpkg-buildpackage", "dh", "unshare", "chroot") if shutil.which(tool) is None
    ]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (make system-packages)")
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "mount", "-t", "tmpfs", "tmpfs", "/mnt"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(f"no mount namespace here: {probe.stderr.strip()}")


@pytest.fixture(scope="module")
def built() -> Built:
    _skip_unless_able()
    done = subprocess.run(
        ["make", "deb"], cwd=REPO, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (deb,) = (REPO / "build" / "deb").glob("nodeagent_*.deb")
    listing = subprocess.run(["dpkg-deb", "--contents", str(deb)], capture_output=True, text=True, check=True)
    files = {}
    for line in listing.stdout.splitlines():
        name = line.split(None, 5)[5].split(" -> ")[0]
        files[name.removeprefix(".").rstrip("/") or "/"] = line
    fields = subprocess.run(["dpkg-deb", "--field", str(deb)], capture_output=True, text=True, check=True)
    control = {}
    for line in fields.stdout.splitlines():
        key, sep, value = line.partition(": ")
        if sep and not line.startswith(" "):
            control[key] = value
    return Built(deb, files, control)


@pytest.fixture(scope="module")
def lived(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lived]:
    out = tmp_path_factory.mktemp("deb-root")
    started = time.time()
    done = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            sys.executable,
            str(DRIVER),
            str(built.deb),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=SCENARIO_TIMEOUT_S,
        check=False,
    )
    ended = time.time()
    assert done.returncode == 0, done.stderr[-3000:]
    prom = out / "nodeagent.prom"
    steps = json.loads((out / "result.json").read_text())
    yield Lived(steps, prom.read_text() if prom.exists() else None, started, ended)


def test_make_deb_builds_the_layout(built: Built) -> None:
    files = built.files
    assert built.control["Package"] == "nodeagent" and built.control["Version"] == VERSION
    # The venv links to one Python by its versioned name, so the package depends on that one.
    python = files["/opt/nodeagent/bin/python3"].split(" -> ")[1]
    assert python.startswith("python3.")
    assert built.control["Depends"].startswith(python + ",")
    assert files["/usr/bin/nodeagent"].endswith("-> /opt/nodeagent/bin/nodeagent")
    for script in ("slurm-prolog.sh", "slurm-healthcheck.sh"):
        assert files[f"/usr/lib/nodeagent/{script}"].startswith("-rwxr-xr-x")
    assert files["/usr/share/nodeagent/prometheus-alerts.yaml"].startswith("-rw-r--r--")
    assert "/lib/systemd/system/nodeagent.service" in files and "/lib/systemd/system/nodeagent.timer" in files
    assert not [f for f in files if "/tensorflow" in f]  # the tf extra is not in it
    assert not [f for f in files if "__pycache__" in f]  # compiled at install, in place
    assert not [f for f in files if "/site-packages/pip/" in f]  # the venv is dpkg's to change


def test_shipped_files_are_the_repository_s(built: Built, tmp_path: Path) -> None:
    subprocess.run(["dpkg-deb", "--extract", str(built.deb), str(tmp_path)], check=True)
    integrations = REPO / "nodeagent" / "integrations"
    for shipped, source in (
        ("usr/lib/nodeagent/slurm-prolog.sh", "slurm-prolog.sh"),
        ("usr/lib/nodeagent/slurm-healthcheck.sh", "slurm-healthcheck.sh"),
        ("usr/share/nodeagent/prometheus-alerts.yaml", "prometheus-alerts.yaml"),
    ):
        assert (tmp_path / shipped).read_bytes() == (integrations / source).read_bytes()
    # The venv was made in the build tree: no file may still name it.
    build_tree = str(REPO / "build" / "deb").encode()
    named = [
        p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink() and build_tree in p.read_bytes()
    ]
    assert named == []
    assert "home = /usr/bin" in (tmp_path / "opt/nodeagent/pyvenv.cfg").read_text()


def test_dpkg_installs_it_and_enables_the_timer(lived: Lived) -> None:
    install = lived.steps["install"]
    assert install["rc"] == 0, install["stderr"]
    assert lived.steps["timer_enabled"]
    version = lived.steps["version"]
    assert (version["rc"], version["stdout"].strip()) == (0, f"nodeagent, version {VERSION}")


def test_installed_nodeagent_checks_this_machine(lived: Lived) -> None:
    check = lived.steps["check"]
    assert check["rc"] in (0, 1, 2, 3), check["stderr"]
    doc = json.loads(check["stdout"])
    worst = max((STATUS_EXIT[f["status"]] for f in doc["findings"]), default=0)
    assert check["rc"] == worst


def test_units_pass_systemd_analyze_verify(lived: Lived) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (make system-packages)")
    verify = lived.steps["verify"]
    assert (verify["rc"], verify["stdout"], verify["stderr"]) == (0, "", "")


def test_timer_service_writes_a_textfile_prometheus_client_parses(lived: Lived) -> None:
    service = lived.steps["service"]
    assert service["argv"][:2] == ["/opt/nodeagent/bin/nodeagent", "check"]
    assert service["rc"] in (0, 1, 2, 3), service["stderr"]  # SuccessExitStatus=1 2 3
    assert lived.textfile is not None, f"{TEXTFILE} not written"
    families = {f.name: f for f in text_string_to_metric_families(lived.textfile)}
    (status,) = families["nodeagent_run_status"].samples
    assert status.value == service["rc"]
    assert status.labels["host"] == os.uname().nodename
    # The staleness metric: when the run started, in Unix time, within this test's run.
    (started,) = families["nodeagent_run_timestamp_seconds"].samples
    assert lived.started <= started.value <= lived.ended
    assert families["nodeagent_check_status"].samples
    # node_exporter (user prometheus) reads it; a rename left no temporary file beside it.
    assert lived.steps["textfile_mode"] == 0o644
    assert lived.steps["textfile_folder"] == ["nodeagent.prom"]


def test_purge_leaves_no_file_behind(lived: Lived) -> None:
    purge = lived.steps["purge"]
    assert purge["rc"] == 0, purge["stderr"]
    assert lived.steps["before"] == []
    installed = set(lived.steps["installed"])
    assert "link /usr/bin/nodeagent" in installed and f"file {TEXTFILE}" not in installed
    assert f"file {TEXTFILE}" in lived.steps["after_runs"]  # what the runs wrote goes too
    assert lived.steps["after_purge"] == []


def test_maintainer_scripts_pass_shellcheck() -> None:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (Debian package shellcheck)")
    # dpkg runs them with /bin/sh (their #!), debhelper adding its snippets in place of #DEBHELPER#.
    scripts = [str(REPO / "packaging" / "debian" / f"nodeagent.{s}") for s in ("postinst", "prerm", "postrm")]
    done = subprocess.run(["shellcheck", "--shell=sh", *scripts], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout) == (0, "")
