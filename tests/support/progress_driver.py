"""`nodeagent ARGS` as a process of its own, with its real standard streams (a pipe, a pseudo-terminal),
for the tests of progress output (tests/integration/test_progress.py):

    python -m tests.support.progress_driver [--fake-worker FILE] ARGS ...

A neighbour's CPU use never makes a benchmark process or an A/B block run again here (that has its
own tests), so two runs of the same command give the same output. With --fake-worker, the
benchmark's workers are tests/support/fake_bench.py's FAKE_WORKER written to FILE (synthetic figures, no
TensorFlow), its data set an empty folder beside FILE and the machine 2 CPUs, as
tests.support.fake_bench.use_fake_worker sets them in a test's own process.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from nodeagent.bench import run


def _fake_worker(worker: Path) -> None:
    real = run.worker_argv

    def fake_argv(config: str, data: Path, sizes: run.Sizes) -> list[str]:
        return [sys.executable, str(worker), *real(config, data, sizes)[3:]]

    run.worker_argv = fake_argv
    run.ensure_data = lambda sizes: worker.parent / "data"
    run.usable_cpus = lambda: 2


def main(argv: list[str]) -> Any:
    run.BUSY_SHARE = 2.0
    if argv[:1] == ["--fake-worker"]:
        _fake_worker(Path(argv[1]))
        argv = argv[2:]
    from nodeagent.cli.main import main as nodeagent

    return nodeagent(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
