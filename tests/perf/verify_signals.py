"""SIGINT, SIGTERM and SIGHUP during an A trial and during a B trial of `nodeagent verify` and of
`nodeagent tune --apply --verify`, many times each: how often everything held (runtime values as
the journal says, no trial process alive, journal consistent, exit 128 + the signal). The cases and
what is checked are tests/support/signal_trials.py's.

Run as root from the repository: `.venv/bin/python tests/perf/verify_signals.py [--tries 20]
[--fake-only]`; prints one line per case ("held N of N") and every problem seen. This machine's THP
selector is put back as it was after each try.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support import signal_trials


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tries", type=int, default=20)
    ap.add_argument("--fake-only", action="store_true", help="leave this machine's THP alone")
    args = ap.parse_args()
    # Started in the background (`&`, nohup), this process ignores SIGINT or SIGHUP, and so would
    # the runs it starts (an ignored signal stays ignored across exec): they must see each signal.
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C still puts THP back
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    live = [False] if args.fake_only or not os.access(signal_trials.THP, os.W_OK) else [False, True]
    failures = 0
    for case in [c for flag in live for c in signal_trials.cases(flag)]:
        held, start, seen = 0, time.monotonic(), []
        for _ in range(args.tries):
            with tempfile.TemporaryDirectory(prefix="verify-signals-") as work:
                if case.live:
                    with signal_trials.live_thp():
                        problems = signal_trials.run_once(case, Path(work))
                else:
                    problems = signal_trials.run_once(case, Path(work))
            held += not problems
            seen += problems
        failures += args.tries - held
        print(f"{case.name:28} held {held} of {args.tries}  ({time.monotonic() - start:.0f} s)", flush=True)
        for p in seen:
            print(f"    {p}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
