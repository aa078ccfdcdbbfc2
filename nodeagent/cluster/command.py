"""What `nodeagent check|tune|bench --cluster` do: load the inventory, run the fleet with a progress
bar on stderr, compare the hosts, print, and exit with the fleet's worst status."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # paramiko loads only when a fleet really runs: `nodeagent check` stays light
    from nodeagent.cluster.inventory.load import Inventory
    from nodeagent.cluster.report import FleetReport
    from nodeagent.cluster.runner import HostOutcome, Job
    from nodeagent.core.finding import Status


def load(cluster: str | None, hosts: str | None, limit: str | None) -> Inventory | None:
    """The inventory of `--cluster FILE` or `--hosts EXPR` (None when neither was given)."""
    from nodeagent.cluster.inventory import load
    from nodeagent.core.errors import UsageError

    if cluster and hosts:
        raise UsageError("give --cluster FILE or --hosts EXPR, not both")
    if cluster:
        return load.load_inventory(Path(cluster), limit=limit)
    if hosts:
        if limit:
            raise UsageError("--limit selects from an inventory file: use it with --cluster")
        return load.from_hostlist(hosts)
    if limit:
        raise UsageError("--limit selects from an inventory file: give --cluster FILE too")
    return None


@contextmanager
def progress(total: int, label: str) -> Iterator[Callable[[HostOutcome], None]]:
    """A progress bar on stderr (only on a terminal: logs and pipes stay clean), counting hosts that
    answered and hosts that failed as they finish."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[failed]} failed"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )
    failed = 0
    with bar:
        task = bar.add_task(label, total=total, failed=0)

        def done(outcome: HostOutcome) -> None:
            nonlocal failed
            failed += 0 if outcome.ok else 1
            bar.update(task, advance=1, failed=failed)

        yield done


def run(
    inv: Inventory,
    job: Job,
    parallel: int,
    accept_new: bool,
    label: str,
    compare: bool = True,
    lost_hardware: Status | None = None,
) -> FleetReport:
    """The fleet's report; `lost_hardware` is the level of a host short of the fleet majority's
    hardware (WARN when not given)."""
    from nodeagent.cluster.report import FleetReport
    from nodeagent.cluster.runner import run_fleet
    from nodeagent.core.finding import Status

    start = time.monotonic()
    with progress(len(inv.hosts), label) as on_done:
        outcomes = run_fleet(inv, job, parallel, accept_new, on_done)
    return FleetReport.build(
        outcomes, time.monotonic() - start, compare=compare, lost_hardware=lost_hardware or Status.WARN
    )


def emit(report: FleetReport, fmt: str, sections: Sequence[Any] = ()) -> None:
    import click

    if fmt == "json":
        from nodeagent.render import jsonout

        click.echo(jsonout.dumps(report.to_dict()))
    else:
        from nodeagent.cluster.report import render
        from nodeagent.render.table import console

        console().print(render(report, list(sections)))
