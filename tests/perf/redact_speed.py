#!/usr/bin/env python3
"""Time of `nodeagent snapshot --redact`'s redaction over the real recordings in tests/fixtures.

The input: prometheus/procfs's recorded /sys and /proc tree (corpus/sysfs-procfs-fixtures-mixed-hca,
about 2,600 small files) plus every text fixture (kernel logs, nvidia-smi XML, ibstat) as a command
output. Prints the median and best wall time of `redact.redact` and, per kind, the time its pattern
takes to scan the same text once. Asserts nothing (performance is measured here, not in tests).
Usage: python tests/perf/redact_speed.py [-n 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from nodeagent.host import redact  # noqa: E402
from tests.support import ttar  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
PROCFS_TREE = FIXTURES / "corpus" / "sysfs-procfs-fixtures-mixed-hca" / "tree.ttar"


def recording(scratch: Path) -> dict[str, bytes]:
    files = ttar.regular_files(PROCFS_TREE, scratch)
    for n, path in enumerate(sorted(FIXTURES.rglob("*"))):
        if path.is_file() and path.suffix in (".txt", ".xml", ".log"):
            files[f"/commands/fixture-{n}.txt"] = path.read_bytes()
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", "--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        files = recording(Path(scratch))
    size = sum(len(d) for d in files.values())
    walls = []
    for _ in range(args.runs):
        start = time.perf_counter()
        redact.redact(files)
        walls.append(time.perf_counter() - start)
    print(f"{len(files)} files, {size / 1e6:.2f} MB, {args.runs} runs")
    print(f"redact: median {statistics.median(walls) * 1000:.0f} ms, best {min(walls) * 1000:.0f} ms")
    texts = [t for t in (redact.as_text(p, d) for p, d in files.items()) if t is not None]
    kinds = (*redact.field_kinds("/sys/x/serial"), *redact.PATTERN_KINDS)
    for kind in kinds:
        start = time.perf_counter()
        for text in texts:
            for _ in kind.pattern.finditer(text):
                pass
        print(f"  {kind.name:9} {(time.perf_counter() - start) * 1000:5.0f} ms  {kind.pattern.pattern[:60]}")


if __name__ == "__main__":
    main()
