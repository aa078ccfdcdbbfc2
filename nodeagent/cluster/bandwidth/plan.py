"""Which links a bandwidth measurement measures, and in which rounds, with its parameters.

Plans (`plan_links`): "ring" measures i -> i+1 for all hosts at once, as a ring all-reduce loads the
network; "pairs" measures every ordered pair, in rounds where each host is in at most one
measurement, so a server port is never shared and no host's NIC is split between two tests. In each
round the pings run first, on an idle network, then the bandwidth tests.

Apart from the measuring (nodeagent.cluster.bandwidth.measure) because the plan is pure, tested on host
names alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from nodeagent.core.errors import UsageError

__all__ = ["MODES", "Params", "plan_links", "schedule"]

MODES = ("ring", "pairs")


@dataclass(frozen=True)
class Params:
    # iperf3 -t and ib_write_bw -D take whole seconds (rounded up here); 2 s passes TCP slow start on
    # a LAN, and a ring measures every link at once, so the whole fleet takes about this long.
    seconds: float = 2.0
    # Playbook thresholds: a link below / above fails, whatever the rest of the fleet does.
    min_gbits_per_s: float | None = None
    max_latency_ms: float | None = None
    # The fleet's own reference, beside the median/MAD rule (which cannot see one slow link among
    # four noisy ones): a link below these fractions of the median of the measured links of its tool
    # is flagged, whatever its modified z-score. NCCL's ring and tree all-reduce pass every chunk
    # over every link in turn, so a collective runs at the pace of its slowest link ("the bus
    # bandwidth should reflect the speed of the hardware bottleneck",
    # https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md): one link at half the
    # median halves the job's inter-node bandwidth. Below it: WARN.
    warn_below_median: float = 0.5
    # A tenth of its peers is a broken link, not noise: single-stream iperf3 varies by a few percent
    # from run to run (https://fasterdata.es.net/performance-testing/network-troubleshooting-tools/
    # iperf/), while a port negotiated a rate step down (Ethernet's 100 -> 10 Gbit/s), a lane or
    # cable fault, a rate limit or steady packet loss costs factors of 10 and more. Below it: FAIL.
    # 0 turns either rule off.
    fail_below_median: float = 0.1
    mode: str = "ring"  # "ring" or "pairs" (see the module docstring)
    port: int = 5201  # iperf3's default port (ib_write_bw keeps perftest's default, 18515)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.seconds) and self.seconds > 0):
            raise UsageError(f"bandwidth: seconds {self.seconds!r} must be a positive number (default 2)")
        for name in ("min_gbits_per_s", "max_latency_ms"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise UsageError(f"bandwidth: {name} {value!r} must be a positive number, or left unset")
        self._check_fractions()
        if self.mode not in MODES:
            raise UsageError(f"bandwidth: mode {self.mode!r} is not one of {', '.join(MODES)}")
        if not 1 <= self.port <= 65535:
            raise UsageError(f"bandwidth: port {self.port!r} must be between 1 and 65535 (default 5201)")

    def _check_fractions(self) -> None:
        for name, default in (("warn_below_median", 0.5), ("fail_below_median", 0.1)):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0 <= value < 1):
                raise UsageError(
                    f"bandwidth: {name} {value!r} must be a fraction of the fleet's median from 0 "
                    f"(off) to below 1 (default {default})"
                )
        if self.fail_below_median > self.warn_below_median > 0:
            raise UsageError(
                f"bandwidth: fail_below_median {self.fail_below_median!r} is above warn_below_median "
                f"{self.warn_below_median!r}: a link that fails must also be one that warns"
            )

    @property
    def whole_seconds(self) -> int:
        return max(1, math.ceil(self.seconds))


def plan_links(names: Sequence[str], mode: str) -> list[tuple[str, str]]:
    """The links to measure, (src, dst), in the order they run: see `schedule`."""
    return [link for links in schedule(names, mode) for link in links]


def schedule(names: Sequence[str], mode: str) -> list[list[tuple[str, str]]]:
    """Rounds of links measured together.

    ring: one round, i -> i+1 (the last to the first); a host is the source of one link and the
    destination of another, as in a ring all-reduce. pairs: every ordered pair, in 2(n-1) rounds
    (n rounded up to even) of the circle method (round-robin tournament scheduling), so that each
    host is in at most one link per round: a -> b in one half of the rounds, b -> a in the other.
    """
    if mode not in MODES:
        raise UsageError(f"bandwidth: mode {mode!r} is not one of {', '.join(MODES)}")
    hosts = list(dict.fromkeys(names))
    if len(hosts) < 2:
        return []
    if mode == "ring":
        return [[(hosts[i], hosts[(i + 1) % len(hosts)]) for i in range(len(hosts))]]
    players: list[str | None] = [*hosts, None] if len(hosts) % 2 else list(hosts)
    m = len(players)
    forward: list[list[tuple[str, str]]] = []
    for _ in range(m - 1):
        pairs = [(players[i], players[m - 1 - i]) for i in range(m // 2)]
        forward.append([(a, b) for a, b in pairs if a is not None and b is not None])
        players = [players[0], players[-1], *players[1:-1]]  # keep the first, rotate the rest
    backward = [[(b, a) for a, b in links] for links in forward]
    return forward + backward
