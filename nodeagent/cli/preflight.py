"""The gate's commands: `preflight`, `playbooks`, `baseline`, `report merge`, `integrations`."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from nodeagent.cli.options import (
    baseline_option,
    emit_fleet,
    format_option,
    hostname_option,
    limit_option,
    load_baseline,
    load_playbook,
    output_option,
    quiet_option,
    root_option,
    verbose_option,
    write_outputs,
)
from nodeagent.core import document
from nodeagent.core.errors import UsageError


@click.command()
@root_option
@hostname_option
@click.option(
    "--playbook",
    "playbook_name",
    default="preflight",
    show_default=True,
    metavar="NAME|PATH",
    help="Which checks and thresholds decide (`nodeagent playbooks`).",
)
@click.option(
    "--budget",
    type=click.FloatRange(min=0.05),
    help="Seconds the whole gate may take; checks not done by then are reported by name and count "
    "as UNKNOWN (default: the playbook's budget).",
)
@click.option(
    "--fail-on",
    type=click.Choice(["warn", "fail"]),
    help="Refuse the node at WARN, or only at FAIL (UNKNOWN always refuses; default: the playbook's).",
)
@baseline_option
@output_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "slurm"]),
    default="table",
    show_default=True,
    help="slurm: one line, the reason for `scontrol update ... state=drain reason=...`.",
)
@verbose_option
def preflight(
    root: str | None,
    hostname: str | None,
    playbook_name: str,
    budget: float | None,
    fail_on: str | None,
    baseline_path: Path | None,
    outputs: tuple[str, ...],
    fmt: str,
    verbose: bool,
) -> None:
    """Gate a training job: exit 0 when this node may run it, non-zero when it may not.

    Runs the playbook's checks within the time budget, then its thresholds (and the baseline);
    every output says how long each check took. Exit codes: 0 allowed; refused: 1 WARN (with
    --fail-on warn), 2 FAIL, 3 UNKNOWN (a check crashed or was cut at the budget); 64 bad input.
    """
    from nodeagent.app import preflight as gate
    from nodeagent.app.check import CheckRequest
    from nodeagent.render import jsonout

    request = CheckRequest(
        root, playbook=load_playbook(playbook_name), baseline=load_baseline(baseline_path), hostname=hostname
    )
    gated = gate.run(replace(request, budget_s=budget), fail_on)
    report, v = gated.report, gated.verdict
    doc = jsonout.document(gated.document)
    if write_outputs(outputs, doc):
        pass  # an --output FORMAT:- is what standard output carries
    elif fmt == "json":
        click.echo(jsonout.dumps(doc))
    elif fmt == "slurm":
        from nodeagent.render.slurm import slurm_reason

        reason = slurm_reason(doc)
        if reason:  # a node that may run the job prints nothing: a script drains when there is a line
            click.echo(reason)
    else:
        from rich.text import Text

        from nodeagent.render import table, text
        from nodeagent.render.sheet import show

        verdict = Text(text.verdict_line(doc, v))
        # Piped: the problems with their fixes, the counts and the verdict (-v: every finding).
        show([table.report_part(report, doc, every=verbose, durations=True, after=[verdict])])
    sys.exit(gated.exit_code)


@click.group(invoke_without_command=True)
@format_option
@click.pass_context
def playbooks(ctx: click.Context, fmt: str) -> None:
    """The shipped playbooks, with their descriptions (`playbooks show NAME` resolves one).

    --format json: each playbook resolved, as `playbooks show NAME --format json` prints it."""
    if ctx.invoked_subcommand is not None:
        return
    from nodeagent.gate import playbook
    from nodeagent.render import listings
    from nodeagent.render.sheet import show

    found = playbook.list_playbooks()
    if fmt == "json":
        from nodeagent.render import jsonout

        click.echo(jsonout.dumps(listings.playbooks_document(found)))
        return
    show([listings.playbooks_sheet(found)])


@playbooks.command("show")
@click.argument("name", metavar="NAME|PATH")
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
def playbooks_show(name: str, fmt: str) -> None:
    """Print a playbook with its includes resolved."""
    import json

    import yaml

    pb = load_playbook(name)
    assert pb is not None
    doc = document.dump(pb)
    click.echo(json.dumps(doc, indent=2) if fmt == "json" else yaml.safe_dump(doc, sort_keys=False))


@click.group()
def baseline() -> None:
    """Record a known-good node (or fleet) to compare others against (`check --baseline FILE`)."""


@baseline.command("save")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@root_option
@click.option(
    "--cluster", metavar="HOSTS.YML", help="Record every host of this inventory (agentless, over SSH)."
)
@limit_option
@click.option("--accept-new-host-keys", is_flag=True, help="With --cluster: as for `check --cluster`.")
@quiet_option
def baseline_save(
    path: Path,
    root: str | None,
    cluster: str | None,
    limit: str | None,
    accept_new_host_keys: bool,
    quiet: bool,
) -> None:
    """Save this node's (or the fleet's) facts and check values as the baseline in PATH."""
    from nodeagent.app import baseline as baselines
    from nodeagent.app.fleet import FleetRequest

    given = cluster or limit  # --limit alone: the request says it needs --cluster (exit 64)
    fleet = FleetRequest(cluster, limit=limit, accept_new_host_keys=accept_new_host_keys) if given else None
    if cluster and root is not None:
        raise UsageError("--root reads one recorded node; it cannot be used with --cluster")
    inv = fleet.inventory() if fleet is not None else None
    if inv is not None:
        from nodeagent.app.progress import HostsDone
        from nodeagent.core.safe_write import check_target
        from nodeagent.render.progress import shown

        check_target(path)  # a link or a device at PATH refused before the fleet's progress starts
        with shown(quiet) as emit:
            saved = baselines.save(path, root, fleet, HostsDone(emit, len(inv.hosts)))
    else:
        saved = baselines.save(path, root)
    click.echo(f"wrote {path}: {saved.hosts} host(s), {saved.values} values from {saved.source}")


@click.group()
def report() -> None:
    """Work with saved results (JSON written by `check`/`preflight --output json:...`)."""


@report.command("merge")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@format_option
@output_option
@verbose_option
def report_merge(paths: tuple[Path, ...], fmt: str, outputs: tuple[str, ...], verbose: bool) -> None:
    """Combine per-node results (files, or folders of *.json) into the fleet view: every node's
    status, drift and outliers. Exit code: the worst over the nodes."""
    from nodeagent.cluster.merge import merge_reports

    merged = merge_reports(list(paths))
    notes = (merged.extra or {}).get("notes") or []
    to_stdout = False
    if outputs:
        from nodeagent.render import jsonout

        to_stdout = write_outputs(outputs, jsonout.document(merged.to_dict()))
    if not to_stdout:  # an --output FORMAT:- is what standard output carries
        emit_fleet(merged, fmt, [f"note: {n}" for n in notes], verbose)
    sys.exit(merged.exit_code)


@click.group(invoke_without_command=True)
@click.pass_context
def integrations(ctx: click.Context) -> None:
    """The scheduler and launcher files (Slurm prolog and health check, Kubernetes, launchers),
    each with what it is and where it goes; `integrations show NAME` prints one."""
    if ctx.invoked_subcommand is not None:
        return
    from nodeagent import integrations as files

    names = files.names()
    width = max(map(len, names), default=0) + 2
    for name in names:
        about = files.FILES[name]
        click.echo(f"{name:{width}}{about.what}")
        click.echo(f"{'':{width}}install: {about.where}")


@integrations.command("show")
@click.argument("name")
def integrations_show(name: str) -> None:
    """Print one integration file (redirect it where it goes)."""
    from nodeagent import integrations as files

    click.echo(files.path(name).read_text(), nl=False)


COMMANDS: list[Any] = [preflight, playbooks, baseline, report, integrations]


def register(group: click.Group) -> None:
    for command in COMMANDS:
        group.add_command(command)
