"""The trials of `nodeagent verify` and of `nodeagent tune --apply --verify` on a fake root (a folder
holding the THP selector), under nodeagent's own signal handling and exit codes: what
tests/support/signal_trials.py interrupts. The CLI refuses --verify with --root (it measures a job on this
machine), so this runs the same engine functions the CLI does.

    python -m tests.support.verify_driver verify|tune ROOT --pairs N --metric REGEX -- CMD ...
"""

from __future__ import annotations

import sys

from nodeagent.bench import verify
from nodeagent.core import interrupt
from nodeagent.host import LocalHost
from nodeagent.tuning import journal


def _run(mode: str, root: str, pairs: int, metric: str, command: tuple[str, ...]) -> None:
    from tests.support.signal_trials import _thp_plan

    job = verify.Job(command, metric, pairs=pairs)
    if mode == "verify":  # `nodeagent verify --profile fast`: the profile's applied journals switched
        applied = [j for j in journal.all_journals() if j.state == journal.APPLIED and j.profile == "fast"]
        verify.trials(job, "fast", applied, None)
    else:
        host = LocalHost(root=root)
        verify.one_at_a_time(host, [_thp_plan(host)], "default", job)


def main(argv: list[str]) -> int:
    mode, root, _, pairs, _, metric, _, *command = argv
    with interrupt.handled():
        try:
            _run(mode, root, int(pairs), metric, tuple(command))
        except KeyboardInterrupt as e:
            print(f"nodeagent: {interrupt.message(e)}", file=sys.stderr)
            return interrupt.exit_code(e)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
