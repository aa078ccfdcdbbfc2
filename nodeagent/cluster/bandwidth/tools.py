"""The tools that measure, as nodeagent runs them on the nodes: iperf3 (TCP bandwidth), perftest's
ib_write_bw (RDMA bandwidth) and ping (latency); their command lines, and their output read back.

Apart from the measuring over SSH (nodeagent.cluster.bandwidth.measure) because this part is pure: the
parsers are tested on the tools' recorded output, without a network.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import TypeAlias

__all__ = [
    "IB_WRITE_BW",
    "IPERF3",
    "PING_DEADLINE_S",
    "Parsed",
    "bandwidth_commands",
    "last_line",
    "one_line",
    "parse_ib_write_bw",
    "parse_iperf3",
    "parse_ping",
    "ping_argv",
]

IPERF3 = "iperf3"
IB_WRITE_BW = "ib_write_bw"
PING_COUNT = 5
PING_INTERVAL_S = 0.2  # the smallest interval iputils allows an unprivileged user
PING_DEADLINE_S = 5  # ping -w: a silent destination costs this, not forever

Parsed: TypeAlias = tuple[float | None, str | None]  # a value, an error


def ping_argv(address: str) -> list[str]:
    """ping (iputils) to `address`: PING_COUNT packets PING_INTERVAL_S apart, within PING_DEADLINE_S,
    the summary only (-q); its rtt average is the latency."""
    argv = ["ping", "-c", str(PING_COUNT), "-i", f"{PING_INTERVAL_S:g}", "-q"]
    return [*argv, "-w", str(PING_DEADLINE_S), address]


def bandwidth_commands(
    tool: str, address: str, port: int, seconds: int
) -> tuple[list[str], list[str], Callable[[str], Parsed]]:
    """The server's argv, the client's argv (measuring towards `address` for `seconds`) and the
    parser of the client's output, for IPERF3 (on `port`) or IB_WRITE_BW (on perftest's port)."""
    if tool == IB_WRITE_BW:
        common = [IB_WRITE_BW, "--report_gbits", "-D", str(seconds)]
        return common, [*common, address], parse_ib_write_bw
    server_argv = [IPERF3, "-s", "-1", "-p", str(port)]
    client_argv = [IPERF3, "-c", address, "-p", str(port), "-t", str(seconds), "-J"]
    return server_argv, client_argv, parse_iperf3


def parse_iperf3(stdout: str) -> Parsed:
    """Gbit/s received (end.sum_received.bits_per_second of `iperf3 -J`), or the error."""
    try:
        doc = json.loads(stdout)
    except ValueError:
        first = stdout.strip().splitlines()[0] if stdout.strip() else "no output"
        return None, f"iperf3 printed no JSON ({first[:200]})"
    if not isinstance(doc, dict):
        return None, "iperf3 printed JSON that is not an object"
    if doc.get("error"):
        return None, f"iperf3: {one_line(str(doc['error']))}"
    received = (doc.get("end") or {}).get("sum_received") or {}
    bps = received.get("bits_per_second")
    if isinstance(bps, bool) or not isinstance(bps, int | float) or not math.isfinite(bps):
        return None, "iperf3's JSON has no end.sum_received.bits_per_second"
    return float(bps) / 1e9, None


_COLUMNS = re.compile(r"\s{2,}")


def parse_ib_write_bw(stdout: str) -> Parsed:
    """Gbit/s from ib_write_bw's table: the "BW average[Gb/sec]" column of the first data row after
    its header (other lines, such as perftest's CPU frequency warning, may come between)."""
    lines = stdout.splitlines()
    for i, line in enumerate(lines):
        if "BW average" not in line:
            continue
        columns = _COLUMNS.split(line.strip())
        index = next(j for j, c in enumerate(columns) if c.startswith("BW average"))
        unit = columns[index][len("BW average") :]
        if unit != "[Gb/sec]":
            return None, f"ib_write_bw reported {columns[index]!r}, not Gb/sec (is --report_gbits ignored?)"
        for row in lines[i + 1 :]:
            fields = row.split()
            if len(fields) == len(columns) and fields[0].isdigit():
                try:
                    return float(fields[index]), None
                except ValueError:
                    break
        return None, "ib_write_bw printed its header but no result row"
    return None, "ib_write_bw printed no 'BW average' table"


_RTT = re.compile(r"(?:rtt|round-trip) min/avg/max(?:/mdev)? = ([\d.]+)/([\d.]+)/([\d.]+)")
_LOSS = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")


def parse_ping(stdout: str) -> Parsed:
    """The rtt average in ms of `ping -q` (iputils' "rtt min/avg/max/mdev" line, busybox's
    "round-trip min/avg/max"), and an error when packets were lost (the average is kept)."""
    rtt = _RTT.search(stdout)
    loss = _LOSS.search(stdout)
    error = None
    if loss is not None and int(loss[2]) < int(loss[1]):
        error = f"ping lost {int(loss[1]) - int(loss[2])} of {loss[1]} packets"
    if rtt is None:
        return None, error or "ping printed no rtt line"
    return float(rtt[2]), error


def one_line(text: str) -> str:
    return " ".join(text.split())


def last_line(data: bytes) -> str:
    lines = [line.strip() for line in data.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else ""
