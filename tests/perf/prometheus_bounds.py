"""What a hostile Prometheus costs `nodeagent fleet --prometheus`: the controller's peak memory
and time against an answer of --size-mib (1 GiB by default, generated while sent by a server on
127.0.0.1, never stored), and against one just within NODEAGENT_MAX_PROMETHEUS_MIB (parsed whole:
the cost of an answer the limit lets through); then how long a server dripping its answer one
byte a second holds the view (cut at --timeout, the whole request's deadline).

Run: `.venv/bin/python tests/perf/prometheus_bounds.py [--size-mib 1024] [--timeout 3]`.
Each run is `python -m nodeagent fleet --prometheus URL` in a child; its peak RSS is the child's
own (os.wait4). Prints one line per run; nothing is asserted (tests/integration/test_fuzz_hostile.py asserts
the memory bound).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nodeagent.core import limits
from tests.support import promstack
from tests.support.measured import run_measured


def fleet(url: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, float, float, str]:
    """`nodeagent fleet --prometheus URL ARGS` in a child: exit code, seconds, peak RSS in MB and
    the last line of its stderr."""
    argv = [sys.executable, "-m", "nodeagent", "fleet", "--prometheus", url, *args]
    m = run_measured(argv, {**os.environ, **(env or {})})
    lines = m.stderr.strip().splitlines()
    return m.code, m.seconds, m.peak_mb, lines[-1] if lines else ""


@contextlib.contextmanager
def dripping(sent: list[int]) -> Iterator[str]:
    """A server sending its answer's body one byte a second (a 10,000-byte answer); `sent` gets how
    many bytes it sent before the client hung up."""

    def handle(h: Any) -> None:
        n = 0
        h.send_response(200)
        h.send_header("Content-Length", "10000")
        h.end_headers()
        with contextlib.suppress(OSError):
            for _ in range(10000):
                h.wfile.write(b" ")
                n += 1
                time.sleep(1.0)
        sent.append(n)

    with promstack.serving(handle) as url:
        yield url


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024, help="the flooding answer's size")
    ap.add_argument("--timeout", type=float, default=3.0, help="--timeout against the dripping server")
    args = ap.parse_args()
    cap_mib = limits.limit("NODEAGENT_MAX_PROMETHEUS_MIB")

    with promstack.flood(args.size_mib << 20) as url:
        code, seconds, rss, line = fleet(url)
    head = f"{args.size_mib} MiB answers (limit {cap_mib} MiB)"
    print(f"{head}: exit {code} in {seconds:.1f}s, peak RSS {rss:.0f} MB")
    print(f"  {line}")

    within = cap_mib - 1
    with promstack.flood(within << 20) as url:
        code, seconds, rss, line = fleet(url)
    print(
        f"{within} MiB answers, within the limit, parsed (4 queries of the view): exit {code} in "
        f"{seconds:.1f}s, peak RSS {rss:.0f} MB"
    )
    print(f"  {line}")

    sent: list[int] = []
    with dripping(sent) as url:
        code, seconds, rss, line = fleet(url, "--timeout", f"{args.timeout:g}")
        deadline = time.monotonic() + 5
        while not sent and time.monotonic() < deadline:  # the server's next write sees the cut
            time.sleep(0.1)
    print(
        f"body dripping 1 byte/s, --timeout {args.timeout:g}: exit {code} after {seconds:.1f}s, "
        f"peak RSS {rss:.0f} MB; the server's writes failed after {sent[0] if sent else '?'} bytes"
    )
    print(f"  {line}")


if __name__ == "__main__":
    main()
