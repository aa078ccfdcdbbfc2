"""build/nodeagent.pyz for the tests that run it (tests/integration/test_pyz.py and
tests/integration/test_slurm_real.py).

`make pyz` rebuilds the file only when a source is newer than it and builds one at a time (a lock),
so the modules that need it each call `make_pyz()`: the first builds, the others wait or find it
up to date. It skips only when PyPI cannot be reached for the build.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import REPO

PYZ = REPO / "build" / "nodeagent.pyz"
BUILD_TIMEOUT_S = 1100
# What pip says when PyPI cannot be reached (the only reason the build may skip).
NO_INDEX = (
    "NewConnectionError",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "ConnectTimeoutError",
    "ProxyError",
    "Max retries exceeded",
    "(from versions: none)",
)


def tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:]) + "\n"


def make_pyz() -> Path:
    """`make pyz` (a no-op when the file is newer than every source); the file it leaves."""
    if shutil.which("make") is None:
        pytest.skip("no make (Debian package make): cannot build build/nodeagent.pyz")
    # A session of its own, so that a build cut at the time limit takes pex and pip down with it.
    make = subprocess.Popen(
        ["make", "--no-print-directory", "pyz"],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = make.communicate(timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(make.pid, signal.SIGKILL)
        output, _ = make.communicate()
        pytest.fail(f"make pyz did not finish within {BUILD_TIMEOUT_S} s:\n{tail(output)}")
    if make.returncode != 0:
        offline = [line for line in output.splitlines() if any(sign in line for sign in NO_INDEX)]
        if offline:
            pytest.skip(f"make pyz could not reach PyPI: {offline[0].strip()}")
        pytest.fail(f"make pyz failed (exit {make.returncode}):\n{tail(output)}")
    assert PYZ.is_file(), f"make pyz succeeded but left no {PYZ}:\n{tail(output)}"
    return PYZ
