"""The `nodeagent` command line. Heavy modules are imported inside commands, so --help stays fast."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click
from click.core import ParameterSource

from nodeagent.cli.fleet import fleet as fleet_command
from nodeagent.cli.options import (
    ROOT_ENV,
    STATE_HELP,
    baseline_option,
    cluster_options,
    emit_fleet,
    fleet_source,
    format_option,
    hostname_option,
    ids,
    load_baseline,
    load_playbook,
    open_root,
    output_option,
    playbook_option,
    quiet_option,
    root_option,
    verbose_option,
    write_outputs,
)
from nodeagent.cli.preflight import register as register_gate_commands
from nodeagent.cli.verify import metric_option, pairs_option, trial_timeout_option
from nodeagent.cli.verify import register as register_verify_commands
from nodeagent.core import document, interrupt, limits
from nodeagent.core.errors import UsageError
from nodeagent.tui import screen_table

if TYPE_CHECKING:
    from nodeagent.app.fleet import FleetRequest, FleetSource
    from nodeagent.app.progress import HostsDone
    from nodeagent.bench.verify import Job as VerifyJob
    from nodeagent.cluster.bandwidth.plan import Params as BandwidthParams
    from nodeagent.render.sheet import Part

EX_USAGE = 64
EX_SOFTWARE = 70


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="nodeagent", prog_name="nodeagent")
def cli() -> None:
    """Health checks and tuning for deep-learning training nodes.

    Exit codes of `check`: 0 all OK (or skipped), 1 WARN, 2 FAIL, 3 UNKNOWN (a check could not
    decide); 64 bad input.
    """


@cli.command()
@root_option
@hostname_option
@click.option("--only", metavar="ID,...", help="Run only these checks (see `nodeagent checks`).")
@click.option("--skip", metavar="ID,...", help="Leave these checks out.")
@format_option
@click.option("--timeout", type=float, default=20.0, show_default=True, help="Seconds one check may take.")
@click.option(
    "--facts",
    "with_facts",
    is_flag=True,
    help="Add the node's facts: the facts tables after the findings, or a facts key with --format json.",
)
@cluster_options
@click.option(
    "--remote-agent",
    is_flag=True,
    help="With --cluster: run nodeagent installed on each host instead of pulling a snapshot.",
)
@click.option(
    "--bandwidth",
    is_flag=True,
    help="With --cluster: also measure TCP (iperf3) or RDMA (ib_write_bw) bandwidth and latency "
    "between the hosts, in a ring, and flag the slow ones.",
)
@click.option(
    "--bandwidth-mode",
    type=click.Choice(["ring", "pairs"]),
    default="ring",
    show_default=True,
    help="ring: each host to the next, all at once; pairs: every ordered pair.",
)
@click.option("--min-gbits", type=float, help="With --bandwidth: a link below this many Gbit/s fails.")
# The defaults of nodeagent.cluster.bandwidth.plan.Params, repeated so that `--help` imports nothing
# more; a test holds the two equal.
@click.option(
    "--warn-below-median",
    type=float,
    default=0.5,
    show_default=True,
    metavar="FRACTION",
    help="With --bandwidth: a link below this fraction of the median of its tool's links warns (0: off).",
)
@click.option(
    "--fail-below-median",
    type=float,
    default=0.1,
    show_default=True,
    metavar="FRACTION",
    help="With --bandwidth: a link below this fraction of the median of its tool's links fails (0: off).",
)
@playbook_option
@baseline_option
@output_option
@verbose_option
@quiet_option
def check(
    root: str | None,
    hostname: str | None,
    only: str | None,
    skip: str | None,
    fmt: str,
    timeout: float,
    with_facts: bool,
    fleet: FleetRequest,
    remote_agent: bool,
    bandwidth: bool,
    bandwidth_mode: str,
    min_gbits: float | None,
    warn_below_median: float,
    fail_below_median: float,
    playbook_name: str | None,
    baseline_path: Path | None,
    outputs: tuple[str, ...],
    verbose: bool,
    quiet: bool,
) -> None:
    """Run the checks on this machine (or a snapshot, or every host of a cluster) and report findings.

    With --playbook, its checks with its parameters, then its thresholds; with --baseline, what
    differs from the baseline is flagged too. On a terminal, a table of every finding; piped, only
    the findings that need attention, with their fixes (-v: the table).
    """
    from nodeagent.app import check as checking
    from nodeagent.render import jsonout

    request = checking.CheckRequest(
        root,
        ids(only),
        ids(skip),
        timeout,
        playbook=load_playbook(playbook_name),
        baseline=load_baseline(baseline_path),
        hostname=hostname,
    )
    source = fleet_source(fleet, root, hostname)
    if source is not None:
        bw_params = None
        if bandwidth:
            from nodeagent.cluster.bandwidth import measure

            bw_params = measure.Params(
                mode=bandwidth_mode,
                min_gbits_per_s=min_gbits,
                warn_below_median=warn_below_median,
                fail_below_median=fail_below_median,
            )
        _check_fleet(source, request, remote_agent, bw_params, fmt, outputs, verbose, quiet)
    if remote_agent or bandwidth:
        raise UsageError("--remote-agent and --bandwidth work on the hosts of --cluster or --hosts: give one")
    ran = checking.run(request, with_facts)
    doc = jsonout.document(ran.document)
    if ran.facts is not None:
        doc["facts"] = ran.facts
    if write_outputs(outputs, doc):
        pass  # an --output FORMAT:- is what standard output carries
    elif fmt == "json":
        click.echo(jsonout.dumps(doc))
    else:
        from nodeagent.render import table
        from nodeagent.render.sheet import show

        parts: list[Part] = [table.report_part(ran.report, doc, every=verbose)]
        if ran.facts is not None:
            parts += table.facts_tables(ran.facts)
        show(parts)
    sys.exit(ran.exit_code)


def _check_fleet(
    source: FleetSource,
    request: Any,
    remote_agent: bool,
    bw_params: BandwidthParams | None,
    fmt: str,
    outputs: tuple[str, ...],
    verbose: bool,
    quiet: bool,
) -> NoReturn:
    """check --cluster/--hosts/--slurm; `bw_params` (bandwidth Params) when --bandwidth measures
    the links. With --slurm nodeagent on each node runs the checks there (--remote-agent is
    implied), as one Slurm job step; `request.root`, when given, is read on each node."""
    from nodeagent.app import fleet as fleets
    from nodeagent.render import jsonout

    job = fleets.FleetCheck(request, remote_agent, bw_params)
    source.validate(job)
    with _hosts_progress(source, quiet) as on_done:
        ran = fleets.check(source, job, on_done)
    sections: list[Part] = [*source.source_lines(ran.report)]
    if ran.bandwidth is not None:
        from nodeagent.render.bandwidth import render_bandwidth

        sections += render_bandwidth(ran.bandwidth)
    if not write_outputs(outputs, jsonout.document(ran.report.to_dict())):
        emit_fleet(ran.report, fmt, sections, verbose)
    sys.exit(ran.report.exit_code)


@contextlib.contextmanager
def _hosts_progress(source: FleetSource, quiet: bool) -> Iterator[HostsDone | None]:
    """A line as each host ends, counted against the source's hosts (asked of it first, before the
    progress display starts); none when the source knows its hosts only from its answer."""
    from nodeagent.app.progress import HostsDone
    from nodeagent.render.progress import shown

    size = source.size()
    with shown(quiet) as emit:
        yield HostsDone(emit, size) if size is not None else None


@cli.command()
@root_option
@hostname_option
@format_option
@click.option(
    "--timeout", type=float, default=60.0, show_default=True, help="Seconds collecting the facts may take."
)
def facts(root: str | None, hostname: str | None, fmt: str, timeout: float) -> None:
    """Print what this node is: CPUs, NUMA, PCIe, GPUs, NICs, RDMA, huge pages, kernel, BIOS.

    Exit 0; 3 when the facts could not be collected within --timeout (one line on stderr)."""
    from nodeagent.app.check import facts as collect_facts

    result = collect_facts(root, timeout, hostname)
    if result.doc is None:
        click.echo(f"facts: {result.reason}", err=True)
        sys.exit(3)
    doc = result.doc
    if fmt == "json":
        from nodeagent.render import jsonout

        click.echo(jsonout.dumps(doc))
    else:
        from nodeagent.render import table
        from nodeagent.render.sheet import show

        show(table.facts_tables(doc))


@cli.command("checks")
@click.argument("check_ids", nargs=-1, metavar="[ID]...")
@click.option("--params", "show_params", is_flag=True, help="Also list each check's parameters and defaults.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "markdown"]),
    default="table",
    show_default=True,
    help="markdown: one table of the checks with their parameters' defaults, for the documentation.",
)
def list_checks(check_ids: tuple[str, ...], show_params: bool, fmt: str) -> None:
    """List the available checks (or the checks ID...) with their areas and tags, and with --params
    each threshold: its default, why, and the documents it comes from.

    --format json: every check with its parameters (name, type, default, why, source).
    --format markdown: a table of id, description, parameters with defaults, and whether a plain
    `check` runs it or only --only does (docs/checks.md's table; `make docs` writes it there)."""
    from nodeagent import checks
    from nodeagent.render import listings
    from nodeagent.render.sheet import show

    # Ids as --only takes them, a comma list in one word too; unknown ones are one line, exit 64.
    chosen = checks.select(ids(",".join(check_ids))) if check_ids else list(checks.all_checks())
    if fmt == "json":
        from nodeagent.render import jsonout

        click.echo(jsonout.dumps(listings.checks_document(chosen)))
        return
    if fmt == "markdown":
        click.echo(listings.checks_markdown(chosen, checks.on_demand_ids()), nl=False)
        return
    show(listings.checks_params(chosen) if show_params else [listings.checks_sheet(chosen)])


@cli.command()
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Archive to write (.tar.gz).",
)
@click.option("--only", metavar="ID,...", help="Record only what these checks read.")
@click.option(
    "--redact",
    is_flag=True,
    help="Replace host names, MAC/IP addresses, UUIDs, GUIDs and serial numbers with placeholders "
    "(for a public bug report).",
)
@click.option(
    "--root",
    metavar="PATH",
    envvar=ROOT_ENV,
    show_envvar=True,
    help="Record the machine whose /proc and /sys are mounted there (a pod's /host) instead of this one.",
)
@hostname_option
def snapshot(output: Path, only: str | None, redact: bool, root: str | None, hostname: str | None) -> None:
    """Record what the checks read on this machine into a .tar.gz that --root reads back."""
    from nodeagent import checks
    from nodeagent.api.check import declared_commands, declared_paths
    from nodeagent.core.safe_write import check_target
    from nodeagent.facts import node
    from nodeagent.host import LocalHost, open_host
    from nodeagent.host.recorder import snapshot as take

    check_target(output)  # a link or a device at -o refused before recording, and again when writing
    host = open_host(root)
    if not isinstance(host, LocalHost):
        raise UsageError(
            f"{root}: a recording already (no procfs and sysfs mounted there); `snapshot` records a "
            "live machine: this one, or one whose /proc and /sys are mounted at --root"
        )
    selected = checks.select(ids(only))
    patterns = sorted({*declared_paths(selected), *node.PATHS})
    commands = sorted({*declared_commands(selected), *node.COMMANDS})
    try:
        rec = take(host, patterns, commands, output, redact=redact, hostname=hostname)
    except OSError as e:
        raise UsageError(f"{output}: cannot write the snapshot ({e.strerror or e})") from None
    size = output.stat().st_size
    click.echo(
        f"wrote {output}: {len(rec.files)} files, {len(rec.links)} links, {len(commands)} commands, "
        f"{size / 1024:.0f} KiB; read it back with --root {output}"
    )
    if redact:
        from nodeagent.host import SnapshotHost

        # Read back from the archive: what the metadata says is what a bug report's reader sees.
        counts = SnapshotHost(output).meta.get("redacted")
        kinds = counts.items() if isinstance(counts, dict) else []
        replaced = [f"{c['values']} {k}" for k, c in kinds if c["values"]]
        click.echo(f"replaced with placeholders: {', '.join(replaced) or 'nothing'} (see nodeagent.json)")


def _settings(values: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """--set ID.NAME=VALUE, the value read as a YAML scalar (4 -> int, true -> bool, 2MB -> str);
    .nan/.inf and counts beyond nodeagent.core.limits' bounds (ranks above MAX_RANKS) are refused."""
    import yaml

    from nodeagent.core import yamldoc

    out: dict[str, dict[str, Any]] = {}
    for item in values:
        key, eq, raw = item.partition("=")
        tid, dot, name = key.partition(".")
        if not (eq and dot and tid and name):
            raise UsageError(f"--set {item!r}: write it as ID.PARAMETER=VALUE, e.g. numa-pinning.ranks=4")
        try:
            # yamldoc's loader: nesting capped, a 5000-digit integer or 2024-13-45 a YAMLError.
            value = yaml.load(raw, Loader=yamldoc.SettingLoader) if raw.strip() else ""
        except yaml.constructor.ConstructorError as e:
            raise UsageError(f"--set {key}: {e.problem}") from None
        except yaml.YAMLError:
            value = raw
        problem = limits.setting_problem(name, value)
        if problem:
            raise UsageError(f"--set {key}: {problem}")
        out.setdefault(tid, {})[name] = value
    return out


@cli.command(epilog=STATE_HELP)
@root_option
@click.option("--only", metavar="ID,...", help="Plan only these tuners (see `nodeagent tuners`).")
@click.option("--skip", metavar="ID,...", help="Leave these tuners out.")
@click.option(
    "--set", "sets", multiple=True, metavar="ID.PARAM=VALUE", help="A tuner parameter (repeatable)."
)
@click.option(
    "--apply",
    "do_apply",
    is_flag=True,
    help="Apply: runtime changes now (root), process changes to the profile.",
)
@click.option(
    "--profile",
    "profile_name",
    default="default",
    show_default=True,
    help="Profile that receives process changes.",
)
@click.option(
    "--verify",
    is_flag=True,
    help="With --apply: judge each planned change alone by A/B trials of CMD (after `--`; without it "
    "the built-in workload), keep it only when significantly faster, else revert it "
    "(`nodeagent verify --help` for the trials).",
)
@click.option(
    "--quick", is_flag=True, help="With --verify: the trials' quick mode (see `nodeagent verify --help`)."
)
@pairs_option
@metric_option
@trial_timeout_option
@click.option(
    "--ranks",
    type=click.IntRange(min=1, max=limits.MAX_RANKS),
    help="Local ranks on this node, for every tuner that plans per rank (numa-pinning, tf-threads, "
    "pinned-memory, tf-data); default: numa-pinning.ranks when set, else one per GPU (per NUMA node "
    "without GPUs).",
)
@click.option(
    "--persist",
    is_flag=True,
    help="With --apply: also keep runtime values across reboots (/proc/sys keys in "
    "/etc/sysctl.d/90-nodeagent.conf; sysfs knobs in a TuneD profile where TuneD runs), journaled.",
)
@format_option
@cluster_options
@playbook_option
@quiet_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def tune(
    root: str | None,
    only: str | None,
    skip: str | None,
    sets: tuple[str, ...],
    do_apply: bool,
    profile_name: str,
    verify: bool,
    quick: bool,
    pairs: int | None,
    metric: str | None,
    trial_timeout: float | None,
    ranks: int | None,
    persist: bool,
    fmt: str,
    fleet: FleetRequest,
    playbook_name: str | None,
    quiet: bool,
    command: tuple[str, ...],
) -> None:
    """Plan the changes that fix what the checks find (a dry run unless --apply).

    With --playbook, its tuners with its parameters (--only, --skip and --set still apply on top).
    With --cluster or --hosts, nodeagent installed on each host plans (and applies) there; with
    --slurm, on each node as a Slurm job step (--root, when given, is read there).
    With --verify each change is applied alone and kept only when A/B trials of CMD show it
    faster: nodeagent tune [...] --apply --verify [--quick] [--pairs N] [--metric REGEX]
    [--trial-timeout S] [-- CMD ...]

    Exit codes: 0 planned, applied (--verify: at least one change kept); 1 --verify kept none, or
    a change took only in part (a WARN read back); 2 a change did not take, or a trial failed; 64
    bad input; 74 the state disk is full or failing (before the first write: nothing changed;
    later: every value restored); 75 another apply/revert holds the state lock
    (nodeagent/tuning/state.py); 130, 143, 129 interrupted by SIGINT, SIGTERM, SIGHUP (the change
    being judged is reverted, the trial's processes stopped).
    """
    from nodeagent.app import tune as tuning

    request = tuning.TuneRequest(
        root, ids(only), ids(skip), _settings(sets), ranks, None, profile_name, persist
    )
    job = _verify_job(verify, command, metric, quick, pairs, trial_timeout)
    source = fleet_source(fleet, root)
    if source is not None:  # each node loads the playbook and checks the request itself
        argv = request.argv(do_apply, job, playbook_name)
        _agent_on_nodes(source, argv, fmt, quiet, section=_fleet_tune_section)
    request = dataclasses.replace(request, playbook=load_playbook(playbook_name))
    if job is not None and request.playbook is not None and request.playbook.bench.quick:
        job = dataclasses.replace(job, quick=True)
    tuning.validate(request, do_apply, job, quick)
    if job is not None and do_apply:
        from nodeagent.app.progress import Trials
        from nodeagent.render.progress import shown

        with shown(quiet) as emit:
            trials = Trials(emit, job, "tune --verify")
            ran = tuning.run(request, do_apply, job, on_change=trials.change, on_block=trials.block)
    else:
        ran = tuning.run(request, do_apply)
    _print_tune(ran, fmt)
    if ran.applied is not None or ran.checked is not None:
        sys.exit(ran.exit_code)


def _verify_job(
    verify: bool,
    command: tuple[str, ...],
    metric: str | None,
    quick: bool,
    pairs: int | None,
    trial_timeout: float | None,
) -> VerifyJob | None:
    """What `tune --verify` measures (None without --verify, whose options are refused then)."""
    if verify:
        from nodeagent.bench.verify import Job

        return Job(command or None, metric, quick, pairs, trial_timeout)
    if command or pairs or metric or trial_timeout:
        raise UsageError(
            "a command, --pairs, --metric and --trial-timeout are for --verify: give --apply --verify too"
        )
    return None


def _print_tune(ran: Any, fmt: str) -> None:
    if fmt == "json":
        from nodeagent.render import jsonout

        click.echo(jsonout.dumps(ran.document()))
        return
    from nodeagent.render import table
    from nodeagent.render.sheet import show

    parts: list[Part] = [*table.plan_table(ran.host, ran.plans)]
    if ran.checked is not None:
        from nodeagent.render.verify import changes_table

        parts.append(changes_table(ran.checked))
    show([*parts, "", *table.story_lines(ran.story)])


@cli.command(epilog=STATE_HELP)
@click.argument("journal_id", required=False)
@click.option(
    "--all", "revert_all", is_flag=True, help="Revert every journal not yet reverted, newest first."
)
@click.option("--list", "list_only", is_flag=True, help="List the journals and their states.")
@format_option
def revert(journal_id: str | None, revert_all: bool, list_only: bool, fmt: str) -> None:
    """Restore the values an apply changed, from its journal (also after a crash).

    Newest first by the journals' sequence. A value changed since the apply (by someone else) is a
    conflict: left as it is, shown, exit 2. Exit codes: 0 every value back; 2 a conflict or a value
    not restored; 64 bad input or a journal naming a path nodeagent does not write; 74 the state
    disk is full; 75 another apply/revert holds the state lock. --format json: the journals (with
    --list), or the story with each journal's read-back findings.
    """
    from nodeagent.render import jsonout, listings, table
    from nodeagent.render.sheet import show
    from nodeagent.tuning import journal
    from nodeagent.tuning.story import revert_story

    if list_only:
        journals = journal.all_journals()
        if fmt == "json":
            click.echo(jsonout.dumps(listings.journals_document(journals)))
        else:
            show([listings.journals_sheet(journals)])
        return
    from nodeagent.app import tune as tuning
    from nodeagent.core.finding import documents

    reverted = tuning.revert(journal_id, revert_all)
    story = revert_story(reverted.done, reverted.left)
    if fmt == "json":
        done = [
            {"journal": j.id, "state_before": before, "findings": documents(found)}
            for j, before, found in reverted.done
        ]
        click.echo(jsonout.dumps({"reverted": done, "left": reverted.left, "story": story}))
    else:
        show(table.story_lines(story))
    sys.exit(reverted.exit_code)


def _agent_on_nodes(
    source: FleetSource,
    argv: list[str],
    fmt: str,
    quiet: bool,
    statuses: dict[int, str] | None = None,
    section: Any = None,
) -> NoReturn:
    """`nodeagent ARGV --format json` on every host of `source`; their documents gathered side by
    side, under them where they came from. `section(report)`, when given, renders what the hosts
    returned (tune: each host's changes)."""
    from nodeagent.app import fleet as fleets

    with _hosts_progress(source, quiet) as on_done:
        report = fleets.on_agents(source, argv, statuses, on_done)
    sections: list[Part] = [*source.source_lines(report)]
    sections += section(report) if section is not None else []
    emit_fleet(report, fmt, sections if fmt != "json" else ())
    sys.exit(report.exit_code)


def _fleet_tune_section(report: Any) -> list[Part]:
    """Each host's planned changes (target, before -> after, scope) and what its run did, like
    Ansible's --diff: the plans are in the tune documents the hosts returned."""
    from rich.text import Text

    from nodeagent.render.literal import lit
    from nodeagent.tuning.story import fleet_changes

    docs = {name: o.doc or {} for name, o in report.outcomes.items() if o.ok}
    # Slurm's nodes that were not run (drained, busy ...) have no plan: the hosts table says why.
    docs = {name: doc for name, doc in docs.items() if doc.get("slurm", {}).get("ran", True)}
    lines = fleet_changes(docs)
    parts: list[Part] = ["", Text("planned changes per host", style="bold underline")]
    for line in lines:
        style = "" if line.startswith(" ") else "bold"
        parts.append(lit(line, style=style))
    return parts


@cli.command()
@click.option("--quick", is_flag=True, help="Small data set and few steps (a smoke test of about a minute).")
@click.option(
    "--profile",
    "profile_name",
    default="default",
    show_default=True,
    help="Profile the tuned config runs under, through `nodeagent exec` (absent: tuned is skipped).",
)
@click.option("--repeats", type=click.IntRange(min=1), help="Timed repeats in each worker process.")
@click.option("--processes", type=click.IntRange(min=1), help="Fresh worker processes per config.")
@format_option
@cluster_options
@playbook_option
@output_option
@quiet_option
def bench(
    quick: bool,
    profile_name: str,
    repeats: int | None,
    processes: int | None,
    fmt: str,
    fleet: FleetRequest,
    playbook_name: str | None,
    outputs: tuple[str, ...],
    quiet: bool,
) -> None:
    """Benchmark a TensorFlow tf.data + XLA training step: naive, autotune and tuned pipelines
    against the input and compute bounds, with medians, 95% intervals and verdicts.

    With --cluster or --hosts, nodeagent (with its tf extra) installed on each host runs it there;
    with --slurm, on each node as a Slurm job step.
    Exit codes: 0 every config ran (tuned may be skipped without a profile), 1 a config failed,
    64 bad input or TensorFlow missing.
    """
    from nodeagent.app import bench as benching
    from nodeagent.app.progress import BenchSteps
    from nodeagent.render import jsonout
    from nodeagent.render.bench import print_table
    from nodeagent.render.progress import shown

    request = benching.BenchRequest(quick, profile_name, repeats, processes)
    request = request.with_playbook(load_playbook(playbook_name))
    source = fleet_source(fleet)
    # bench exits 1 when a configuration failed: that host's result is a failure.
    if source is not None:
        _agent_on_nodes(source, request.argv(), fmt, quiet, {0: "OK", 1: "FAIL"})
    benching.need_tensorflow()
    with shown(quiet) as emit:
        result = benching.run(request, on_event=BenchSteps(emit))
    if write_outputs(outputs, jsonout.document(benching.document(result))):
        pass  # an --output FORMAT:- is what standard output carries
    elif fmt == "json":
        click.echo(jsonout.dumps(document.dump(result)))
    else:
        print_table(result)
    sys.exit(1 if result.failed else 0)


@cli.command(
    "exec",
    # Everything after the options is the job's own command line, its options included.
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    epilog=STATE_HELP,
)
@click.option(
    "--profile",
    "profile_name",
    default="default",
    show_default=True,
    help="Profile whose process settings apply (see `nodeagent tune --apply`), from "
    "<state>/profiles/NAME.json. A profile named here must exist (exit 64); without --profile and "
    "without the default profile the job runs unchanged, after a warning.",
)
@click.option(
    "--local-rank",
    type=click.IntRange(min=0),
    help="This process's rank on the node (default: LOCAL_RANK, SLURM_LOCALID, "
    "OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, HOROVOD_LOCAL_RANK, else 0).",
)
@click.option(
    "--dry-run", is_flag=True, help="Print the command, environment and binding as JSON; run nothing."
)
@click.option(
    "--measure",
    is_flag=True,
    help="Run CMD as a child and, when it ends, print its TensorFlow training steps/s and the share of "
    "step time spent waiting for input (or its wall time and CPU use) on stderr.",
)
@click.option(
    "--every",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="With --measure: also print the steps/s and input wait every SECONDS while the job runs.",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_(
    profile_name: str,
    local_rank: int | None,
    dry_run: bool,
    measure: bool,
    every: float | None,
    command: tuple[str, ...],
) -> None:
    """Run CMD with the profile's CPU/memory binding, environment and tf.data defaults.

    nodeagent exec [--profile NAME] [--local-rank N] -- CMD ...  (CMD replaces nodeagent: its PID,
    signals and exit code are the job's.)

    nodeagent exec --measure [--every SECONDS] [--profile NAME] -- CMD ...  (CMD runs as a child of
    nodeagent, which forwards SIGINT, SIGTERM and SIGHUP to it and exits with its exit code.)
    """
    from nodeagent.tuning import launcher

    # A name the user gave must exist; only the default may be missing (a node never tuned).
    named = click.get_current_context().get_parameter_source("profile_name") is not ParameterSource.DEFAULT
    if every is not None and not measure:
        raise UsageError("--every sets how often --measure reports: add --measure, or drop --every")
    if measure and dry_run:
        raise UsageError("--dry-run runs nothing, so there is nothing to --measure: drop one of them")

    def warn(warning: str) -> None:
        click.echo(f"nodeagent exec: warning: {warning}", err=True)

    launch, machine = launcher.plan(profile_name, local_rank, list(command), warn, dry_run, named)
    if dry_run:
        click.echo(json.dumps(document.dump(launch), indent=2))
        return
    for note in launch.notes:
        click.echo(f"nodeagent exec: note: {note}", err=True)
    env = launcher.enter(launch, machine, warn)
    if not measure:
        launcher.execute(launch, env)  # returns only by raising: the job replaces this process

    from nodeagent.bench import measure as measuring
    from nodeagent.render import measure as measure_text

    outcome = measuring.run_measured(launch.argv, every, env, len(launch.cpus) if launch.cpus else None)
    for line in measure_text.lines(outcome):
        click.echo(line, err=True)
    sys.exit(outcome.exit_code)


@cli.command()
@root_option
@click.option("--cluster", metavar="HOSTS.YML", help="The inventory the Cluster screen checks over SSH.")
@click.option(
    "--screen",
    type=click.Choice(screen_table.MODES),
    default=None,
    help="The screen to start on (default: overview, or cluster with --cluster).",
)
@playbook_option
def tui(root: str | None, cluster: str | None, screen: str | None, playbook_name: str | None) -> None:
    """The interactive TUI: overview, checks, topology, tune, benchmark and cluster screens.

    With --playbook, its checks, parameters and thresholds, its tuners, and its benchmark settings."""
    if root is not None:
        open_root(root).close()  # a bad --root is a usage error here, not a broken screen
    if cluster is not None:
        from nodeagent.cluster.inventory import load

        load.load_inventory(Path(cluster))  # a bad inventory: one line, exit 64, before the app
    pb = load_playbook(playbook_name)  # a bad playbook: the same
    import asyncio  # the app's loop, which a signal is handed to

    from nodeagent.tui.app import make_app
    from nodeagent.tui.backend import LocalBackend

    start = screen or ("cluster" if cluster else "overview")
    app = make_app(LocalBackend(root=root, inventory_path=cluster, playbook=pb), start)

    def quit_app(_signum: int) -> bool:
        """SIGTERM or SIGHUP (a scheduler, a closed terminal): the app quits as by its own key, so
        the terminal is given back; the command then ends as interrupted."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # before the app's loop starts or after it ends: raise as anywhere
            return False
        loop.call_soon_threadsafe(app.exit)
        return True

    with interrupt.delivered_to(quit_app):
        app.run()
    if (signum := interrupt.received()) is not None:
        raise interrupt.Interrupted(signum)


@cli.command("tuners")
@click.option(
    "--params", "show_params", is_flag=True, help="Also list each tuner's parameters: type, default, why."
)
@format_option
def list_tuners(show_params: bool, fmt: str) -> None:
    """List the available tuners (and their parameters with --params: set them with `tune --set`).

    --format json: every tuner with its parameters (name, type, default, why, shared)."""
    from nodeagent import tuners
    from nodeagent.render import listings
    from nodeagent.render.sheet import show

    found = tuners.all_tuners()
    if fmt == "json":
        from nodeagent.render import jsonout

        click.echo(jsonout.dumps(listings.tuners_document(found)))
        return
    show(listings.tuners_params(found) if show_params else [listings.tuners_sheet(found)])


def _interrupted(e: KeyboardInterrupt) -> NoReturn:
    """Exit 128 + the signal's number (130 SIGINT, 143 SIGTERM, 129 SIGHUP), once the clean-up of
    every `finally` on the way here is done."""
    _fail(interrupt.message(e), interrupt.exit_code(e))


def _fail(message: str, code: int) -> NoReturn:
    for line in message.splitlines() or [""]:
        click.echo(f"nodeagent: {line}", err=True)
    sys.exit(code)


def _quiet_libraries() -> None:
    """Keep library logs and thread tracebacks off stderr (NODEAGENT_DEBUG=1 lets them through).

    paramiko logs every failed SSH handshake at ERROR with a 20-line traceback from its transport
    thread (logger "paramiko.transport"), and with no logging configured Python's last-resort
    handler prints it under the fleet table, which already says in one line per host what failed.
    A handler of its own (that drops everything) and no propagation keep it there. An exception
    that escapes a thread is one line too, not "Exception in thread ..." and a traceback.
    """
    if os.environ.get("NODEAGENT_DEBUG"):
        return
    import logging
    import threading

    paramiko_log = logging.getLogger("paramiko")
    if not any(isinstance(h, logging.NullHandler) for h in paramiko_log.handlers):
        paramiko_log.addHandler(logging.NullHandler())
    paramiko_log.propagate = False
    threading.excepthook = _thread_error


def _thread_error(args: Any) -> None:
    """threading.excepthook: one line naming the thread and the error (args: ExceptHookArgs)."""
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "?"
    try:
        click.echo(
            f"nodeagent: internal error in thread {name}: {args.exc_type.__name__}: {args.exc_value} "
            "(set NODEAGENT_DEBUG=1 for the traceback)",
            err=True,
        )
    except Exception:  # at interpreter exit stderr may be gone: nothing left to tell
        return


register_gate_commands(cli)
register_verify_commands(cli)
cli.add_command(fleet_command)


def main(argv: list[str] | None = None) -> Any:
    """Entry point: bad input is one line on stderr and exit 64, never a traceback (nor a library's:
    see _quiet_libraries)."""
    _quiet_libraries()
    try:
        with interrupt.handled():  # SIGTERM and SIGHUP stop a command as Ctrl-C does, cleaning up
            return cli.main(args=argv, prog_name="nodeagent", standalone_mode=False)
    except UsageError as e:
        # Several problems of one file (a playbook) are a line each, each one a whole error line.
        _fail("\n".join(f"error: {line}" for line in str(e).splitlines() or [""]), e.exit_code)
    except click.exceptions.NoArgsIsHelpError as e:
        click.echo(e.format_message())  # bare `nodeagent`: the help text, as --help prints it
        sys.exit(0)
    except click.UsageError as e:
        # command_path starts with the program's name ("nodeagent check"; "nodeagent" for the
        # group itself), as click's own hint writes it.
        hint = f" Try '{e.ctx.command_path} --help' for help." if e.ctx else ""
        _fail(f"error: {e.format_message()}{hint}", EX_USAGE)
    except click.ClickException as e:
        _fail(f"error: {e.format_message()}", EX_USAGE)
    except click.exceptions.Abort as e:  # click's name for an interrupt (its __cause__) or EOF at a prompt
        _interrupted(e.__cause__ if isinstance(e.__cause__, KeyboardInterrupt) else KeyboardInterrupt())
    except KeyboardInterrupt as e:
        _interrupted(e)
    except BrokenPipeError:
        # The reader went away (`nodeagent check | head`): not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except Exception as e:
        if os.environ.get("NODEAGENT_DEBUG"):
            raise
        _fail(
            f"internal error: {type(e).__name__}: {e} (set NODEAGENT_DEBUG=1 for the traceback)", EX_SOFTWARE
        )
