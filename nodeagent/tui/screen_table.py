"""The TUI's screens, listed once: the app's modes and their keys, the footer's names, the help,
the command palette's entries and the CLI's `--screen` choice are all built from SCREENS.

Imports nothing but the standard library: the CLI reads it for `--screen` without loading Textual.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScreenEntry:
    mode: str  # the app's mode, and the value of `nodeagent tui --screen`
    key: str  # the key that shows it, on every screen
    short: str  # its name in the footer, where six must fit 80 columns beside a screen's own keys
    title: str  # its name in the command palette and the help
    what: str  # what it shows, one line
    where: str  # "module:Class" under nodeagent.tui.screens, imported when the mode is first shown


SCREENS: tuple[ScreenEntry, ...] = (
    ScreenEntry(
        mode="overview",
        key="1",
        short="Node",
        title="Overview",
        what="the node at a glance, the worst status per area",
        where="overview:OverviewScreen",
    ),
    ScreenEntry(
        mode="checks",
        key="2",
        short="Checks",
        title="Checks",
        what="findings with their evidence and remediation",
        where="checks:ChecksScreen",
    ),
    ScreenEntry(
        mode="topology",
        key="3",
        short="Topo",
        title="Topology",
        what="the GPU/NIC/NUMA matrix",
        where="topology:TopologyScreen",
    ),
    ScreenEntry(
        mode="tune",
        key="4",
        short="Tune",
        title="Tune",
        what="the tuners' plan, apply and revert",
        where="tune:TuneScreen",
    ),
    ScreenEntry(
        mode="bench",
        key="5",
        short="Bench",
        title="Bench",
        what="the input-pipeline benchmark and the verify of the profile",
        where="bench:BenchScreen",
    ),
    ScreenEntry(
        mode="cluster",
        key="6",
        short="Fleet",
        title="Cluster",
        what="the fleet's hosts, drift and outliers",
        where="cluster:ClusterScreen",
    ),
)


def described(s: ScreenEntry) -> str:
    """What the help says of a screen's key, after its footer name: its title where that differs."""
    return s.what if s.title == s.short else f"{s.title}: {s.what}"


MODES: tuple[str, ...] = tuple(s.mode for s in SCREENS)
FIRST = SCREENS[0].mode  # shown when no other is asked for
