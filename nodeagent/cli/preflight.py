"""The gate's commands: `preflight`, `playbooks`, `baseline`, `report merge`, `integrations`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from nodeagent.cli.options import (
    baseline_option,
    format_option,
    load_baseline,
    load_playbook,
    open_root,
    output_option,
    root_option,
    verbose_option,
    write_outputs,
)
from nodeagent.core.errors import UsageError

# Exit code of a refused node whose worst status has no code of its own (WARN under --fail-on warn
# uses WARN's 1): the others are the worst status's code, 2 FAIL and 3 UNKNOWN, as for `check`.
EX_REFUSED = 1


@click.command()
@root_option
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
    from nodeagent.gate import judge
    from nodeagent.render import jsonout

    pb = load_playbook(playbook_name)
    assert pb is not None
    base = load_baseline(baseline_path)
    budget_s = budget if budget is not None else (pb.budget_s or judge.DEFAULT_BUDGET_S)
    decide_on = fail_on or pb.fail_on
    selected = judge.selected_checks(pb, [], [])
    with open_root(root) as host:
        report = judge.run(host, pb, selected, timeout_s=budget_s, budget_s=budget_s, baseline=base)
    v = judge.verdict(report, decide_on)
    doc = jsonout.document(judge.document(report, pb, budget_s, v))
    if write_outputs(outputs, doc):
        pass  # an --output FORMAT:- is what standard output carries
    elif fmt == "json":
        click.echo(jsonout.dumps(doc))
    elif fmt == "slurm":
        from nodeagent.render.slurm import slurm_reason

        click.echo(slurm_reason(doc))
    else:
        from rich.text import Text

        from nodeagent.render import table, text

        if verbose or table.stdout_is_terminal():
            table.print_report(report, durations=True, after=[Text(text.verdict_line(doc, v.to_dict()))])
        else:  # piped: the problems with their fixes, the counts and the verdict
            click.echo(text.problems(doc), nl=False)
    if not v.allowed:
        sys.exit(report.status.exit_code or EX_REFUSED)


@click.group(invoke_without_command=True)
@click.pass_context
def playbooks(ctx: click.Context) -> None:
    """The shipped playbooks, with their descriptions (`playbooks show NAME` resolves one)."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.table import Table

    from nodeagent.gate import playbook
    from nodeagent.render.table import console

    t = Table(show_header=True)
    for col in ("name", "description", "checks", "tuners", "budget"):
        t.add_column(col)
    for pb in playbook.list_playbooks():
        budget = f"{pb.budget_s:g}s" if pb.budget_s else "-"
        t.add_row(pb.name, pb.description, ", ".join(pb.checks) or "all", ", ".join(pb.tuners) or "-", budget)
    console().print(t)


@playbooks.command("show")
@click.argument("name", metavar="NAME|PATH")
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
def playbooks_show(name: str, fmt: str) -> None:
    """Print a playbook with its includes resolved."""
    import json

    import yaml

    pb = load_playbook(name)
    assert pb is not None
    doc = pb.to_dict()
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
@click.option("--accept-new-host-keys", is_flag=True, help="With --cluster: as for `check --cluster`.")
def baseline_save(path: Path, root: str | None, cluster: str | None, accept_new_host_keys: bool) -> None:
    """Save this node's (or the fleet's) facts and check values as the baseline in PATH."""
    from nodeagent import checks, engine
    from nodeagent.cluster import fleet as fleet_values
    from nodeagent.gate import baseline as baselines

    if cluster is not None:
        if root is not None:
            raise UsageError("--root reads one recorded node; it cannot be used with --cluster")
        from nodeagent.cluster import DEFAULT_PARALLEL, command
        from nodeagent.cluster.runner import CheckJob

        inv = command.load(cluster, None, None)
        assert inv is not None
        report = command.run(
            inv, CheckJob(checks.select()), DEFAULT_PARALLEL, accept_new_host_keys, "baseline"
        )
        failed = [o.name for o in report.outcomes.values() if not o.ok]
        if failed:
            raise UsageError(
                f"no result from {', '.join(failed)}: a baseline needs every host; fix or --limit them"
            )
        values = {
            name: fleet_values.host_values(o.facts, (o.doc or {}).get("findings", []))
            for name, o in report.outcomes.items()
        }
        source = cluster
    else:
        from nodeagent.gate import judge

        with open_root(root) as host:
            rep = engine.run_report(host, checks.select())
            values = {host.name: judge.values_of(host, rep)}
        source = root or "this machine"
    baselines.save(values, path, source)
    click.echo(
        f"wrote {path}: {len(values)} host(s), {sum(len(v) for v in values.values())} values from {source}"
    )


@click.group()
def report() -> None:
    """Work with saved results (JSON written by `check`/`preflight --output json:...`)."""


@report.command("merge")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@format_option
@output_option
def report_merge(paths: tuple[Path, ...], fmt: str, outputs: tuple[str, ...]) -> None:
    """Combine per-node results (files, or folders of *.json) into the fleet view: every node's
    status, drift and outliers. Exit code: the worst over the nodes."""
    from nodeagent.cluster import command
    from nodeagent.cluster.merge import merge_reports

    merged = merge_reports(list(paths))
    notes = (merged.extra or {}).get("notes") or []
    to_stdout = False
    if outputs:
        from nodeagent.render import jsonout

        to_stdout = write_outputs(outputs, jsonout.document(merged.to_dict()))
    if not to_stdout:  # an --output FORMAT:- is what standard output carries
        command.emit(merged, fmt, [f"note: {n}" for n in notes])
    sys.exit(merged.exit_code)


@click.group(invoke_without_command=True)
@click.pass_context
def integrations(ctx: click.Context) -> None:
    """The scheduler and launcher files (Slurm prolog and health check, Kubernetes, launchers);
    `integrations show NAME` prints one."""
    if ctx.invoked_subcommand is not None:
        return
    from nodeagent import integrations as files

    for n in files.names():
        click.echo(n)


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
