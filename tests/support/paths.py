"""Where the suite's files are, for test modules and helpers at any depth below tests/."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
FIXTURES = TESTS / "fixtures"
DATA = TESTS / "data"
GOLDEN = TESTS / "golden"
# A 2-vCPU Firecracker VM recorded with `nodeagent snapshot` (tests/unit/test_recorded_here.py says how).
VM = DATA / "firecracker-vm-2cpu.tar.gz"
