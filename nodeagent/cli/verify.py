"""`nodeagent verify` (A/B trials of a profile on the user's job) and `nodeagent history`."""

from __future__ import annotations

import sys

import click

from nodeagent.cli.options import STATE_HELP, format_option, quiet_option
from nodeagent.core import document

pairs_option = click.option(
    "--pairs",
    type=click.IntRange(min=1),
    metavar="N",
    help="At most N pairs of trials (pairs of worker processes for the built-in workload); the "
    "trials stop earlier once the interval decides.",
)
metric_option = click.option(
    "--metric",
    metavar="REGEX",
    help="Read the job's rate from its output: the first group of the lines matching REGEX, a "
    "number where higher is better; a job printing it repeatedly gives one figure per window, read as "
    "their median after the warm-up (default: steps/s measured by nodeagent's hook in TensorFlow "
    "jobs, else 1 / wall time).",
)

trial_timeout_option = click.option(
    "--trial-timeout",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="Stop a trial of CMD still running after SECONDS (the trial fails). Default: 5 x the first A "
    "trial's wall time, at least 60 s (the first trial: an hour).",
)


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}, epilog=STATE_HELP
)
@click.option(
    "--profile", "profile_name", default="default", show_default=True, help="The profile B runs with."
)
@click.option(
    "--quick",
    is_flag=True,
    help="At most about 3 minutes, start-up included (the verdict of the pairs done then), stop at "
    "+-3%; the built-in workload on small data.",
)
@pairs_option
@metric_option
@trial_timeout_option
@format_option
@quiet_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def verify(
    profile_name: str,
    quick: bool,
    pairs: int | None,
    metric: str | None,
    trial_timeout: float | None,
    fmt: str,
    quiet: bool,
    command: tuple[str, ...],
) -> None:
    """Is the job faster with the profile? Interleaved A/B trials, paired, until the answer is clear.

    nodeagent verify [--profile NAME] [--quick] [--pairs N] [--metric REGEX] [--trial-timeout S] [-- CMD ...]

    A runs CMD as it is, B through `nodeagent exec --profile NAME`, in the order A B B A A B ...;
    the profile's runtime values (applied journals) are switched for each side. Without CMD, the
    built-in tf.data + XLA workload. Every run adds a record to `nodeagent history`.

    Each trial runs in a session of its own: what it leaves running is stopped when it ends, and
    SIGINT, SIGTERM or SIGHUP stop the trial, put the runtime values back as the journals say and
    remove the temporary profile.

    Exit codes: 0 B is significantly faster; 1 it is not (no significant difference, slower, or
    could not decide within the --quick budget);
    2 a trial failed (the job exited non-zero or ran past its limit, or its figure could not be
    read); 64 bad input; 130, 143, 129 interrupted by SIGINT, SIGTERM, SIGHUP.
    """
    from nodeagent.app import verify as verifying
    from nodeagent.app.progress import Trials
    from nodeagent.render.progress import shown

    request = verifying.VerifyRequest(profile_name, command, quick, pairs, metric, trial_timeout)
    verifying.validate(request)
    with shown(quiet) as emit:
        trials = Trials(emit, request.job())
        trials.start()
        ran = verifying.run(request, on_block=trials.block)
    if fmt == "json":
        from nodeagent.render import jsonout

        click.echo(jsonout.dumps(document.dump(ran)))
    else:
        from nodeagent.render import table
        from nodeagent.render.sheet import show
        from nodeagent.render.verify import trials_table, verdict_lines

        show([trials_table(ran.result), *table.story_lines(verdict_lines(ran.result))])
    sys.exit(ran.exit_code)


@click.command(epilog=STATE_HELP)
@format_option
def history(fmt: str) -> None:
    """The verify decisions recorded on this machine (each `verify`, each change `tune --verify` judged)."""
    from nodeagent.app import verify as verifying

    records = verifying.history()
    if fmt == "json":
        from nodeagent.render import jsonout

        click.echo(jsonout.dumps({"records": [r.model_dump(mode="json") for r in records]}))
        return
    from nodeagent.render.sheet import show
    from nodeagent.render.verify import history_table

    if not records:
        show(
            ["no verify decisions recorded yet: run `nodeagent verify` or `nodeagent tune --apply --verify`"]
        )
        return
    show([history_table(records)])


def register(cli: click.Group) -> None:
    cli.add_command(verify)
    cli.add_command(history)
