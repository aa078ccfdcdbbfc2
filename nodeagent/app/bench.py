"""The TensorFlow benchmark on this machine: naive, autotune and tuned pipelines, with the settings
from the command line, else the playbook's."""

from __future__ import annotations

import importlib.util
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodeagent.bench import run as bench_run
from nodeagent.core.document import dump
from nodeagent.core.errors import UsageError

if TYPE_CHECKING:
    from nodeagent.bench.run import BenchResult, EventFn, ProgressFn
    from nodeagent.gate.playbook import Playbook


@dataclass(frozen=True)
class BenchRequest:
    quick: bool = False
    profile: str = "default"  # the profile the tuned config runs under (`nodeagent exec`)
    repeats: int | None = None
    processes: int | None = None

    def with_playbook(self, pb: Playbook | None) -> BenchRequest:
        """The playbook's benchmark settings where the request says nothing."""
        if pb is None:
            return self
        return BenchRequest(
            self.quick or pb.bench.quick,
            self.profile,
            self.repeats or pb.bench.repeats,
            self.processes or pb.bench.processes,
        )

    def argv(self) -> list[str]:
        """The same request as `nodeagent bench` arguments (for the nodes of a fleet)."""
        argv = ["bench", "--profile", self.profile]
        argv += ["--quick"] if self.quick else []
        argv += [f"--repeats={self.repeats}"] if self.repeats else []
        argv += [f"--processes={self.processes}"] if self.processes else []
        return argv


def need_tensorflow() -> None:
    """TensorFlow runs only in the benchmark's workers: look for it without importing it."""
    if importlib.util.find_spec("tensorflow") is None:
        raise UsageError("the benchmark needs TensorFlow: pip install 'nodeagent[tf]'")


def run(
    request: BenchRequest,
    root: str | None = None,
    on_progress: ProgressFn | None = None,
    on_event: EventFn | None = None,
) -> BenchResult:
    """The benchmark of this machine (a recording cannot be benchmarked). Each worker's steps go to
    `on_progress`; `on_event` also hears of the data set and of each worker's end
    (nodeagent.app.progress turns them into the faces' events)."""
    if root not in (None, "/"):
        raise UsageError(
            f"the benchmark measures the machine it runs on, not a recording ({root}): "
            "run it on the node itself, without --root"
        )
    need_tensorflow()
    return bench_run.run_bench(
        request.quick,
        request.profile,
        request.repeats,
        request.processes,
        on_progress=on_progress,
        on_event=on_event,
    )


def document(result: BenchResult) -> dict[str, Any]:
    """A benchmark as a run document (the report schema): no checks, the bench."""
    bench = dump(result)
    return {
        "host": socket.gethostname(),
        "status": "OK" if all(c["status"] != "failed" for c in bench["configs"].values()) else "FAIL",
        "started": time.time() - bench["duration_s"],
        "duration_s": bench["duration_s"],
        "checks": [],
        "findings": [],
        "bench": bench,
    }
