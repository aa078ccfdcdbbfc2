"""Verifying a profile on the user's job (`nodeagent verify`) and the history of decisions
(`nodeagent history`): requests in, results out, no printing."""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodeagent.app.bench import need_tensorflow
from nodeagent.bench import verify
from nodeagent.bench.verify import Job
from nodeagent.tuning import history as recorded

if TYPE_CHECKING:
    from nodeagent.bench.ab import Block, TrialFn
    from nodeagent.bench.paired import Estimate
    from nodeagent.bench.verify import ProfileVerdict
    from nodeagent.tuning.history import Record

BlockFn = Callable[["Block", "Estimate | None"], None]


@dataclass(frozen=True)
class VerifyRequest:
    profile: str = "default"
    command: Sequence[str] = ()  # empty: the built-in workload
    quick: bool = False
    pairs: int | None = None
    metric: str | None = None
    trial_timeout: float | None = None

    def job(self) -> Job:
        return Job(tuple(self.command) or None, self.metric, self.quick, self.pairs, self.trial_timeout)


def validate(request: VerifyRequest) -> None:
    """The usage errors, found before anything starts (a progress display, a trial)."""
    job = request.job()
    job.validate()
    verify.check_profile(request.profile)
    if job.builtin:
        need_tensorflow()


def run(
    request: VerifyRequest, on_trial: TrialFn | None = None, on_block: BlockFn | None = None
) -> ProfileVerdict:
    """A/B trials of the job without and with the profile; the record is added to the history."""
    validate(request)
    return verify.verify_profile(request.job(), request.profile, socket.gethostname(), on_trial, on_block)


def history() -> list[Record]:
    """Every verify decision recorded on this machine, oldest first."""
    return recorded.read()
