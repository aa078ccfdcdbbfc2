"""Options and helpers the command modules share (nodeagent.cli.main and nodeagent.cli.preflight)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from nodeagent.cluster import DEFAULT_PARALLEL
from nodeagent.core.errors import UsageError
from nodeagent.render import outputs as output_files

if TYPE_CHECKING:
    from nodeagent.app.fleet import FleetRequest, FleetSource
    from nodeagent.app.fleet_sources import NodeOption
    from nodeagent.cluster.report import FleetReport
    from nodeagent.gate.baseline import Baseline
    from nodeagent.gate.playbook import Playbook
    from nodeagent.host import Host
    from nodeagent.render.sheet import Part


def ids(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def open_root(root: str | None) -> Host:
    from nodeagent.host import open_host

    return open_host(root)


ROOT_ENV = "NODEAGENT_ROOT"
# Where tune, revert, exec, verify and history keep and read their state (nodeagent.tuning.state,
# repeated here so that --help imports nothing more; a test holds the two equal).
STATE_HELP = (
    "State folder: $NODEAGENT_STATE_DIR when set, else /var/lib/nodeagent as root, else "
    "$XDG_STATE_HOME/nodeagent (~/.local/state/nodeagent). It holds journal/ (what each apply "
    "changed, for revert), profiles/NAME.json (what exec applies), history.jsonl (verify's "
    "decisions) and the lock."
)
HOSTNAME_ENV = "NODEAGENT_HOSTNAME"

root_option = click.option(
    "--root",
    metavar="PATH",
    envvar=ROOT_ENV,
    show_envvar=True,
    help="Read another node instead of this machine: a recording (snapshot .tar.gz or folder "
    "holding sys/ and proc/), or a folder where a machine's /proc and /sys are mounted (a pod's "
    "/host), read live: its files there, its tools and NVML run here.",
)


def _valid_hostname(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    from nodeagent.host import hostname_problem

    problem = hostname_problem(value)
    if problem:
        source = ctx.get_parameter_source(param.name or "")
        where = HOSTNAME_ENV if source == click.core.ParameterSource.ENVIRONMENT else "--hostname"
        raise UsageError(f"{where} {value!r}: {problem}")
    return value


hostname_option = click.option(
    "--hostname",
    metavar="NAME",
    envvar=HOSTNAME_ENV,
    show_envvar=True,
    callback=_valid_hostname,
    help="The node's name in the report and the Prometheus `host` label (default: its own; in a "
    "pod, give the node's name from the downward API: the kernel's host name there is the pod's).",
)
format_option = click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)


# Also on `baseline save --cluster`: the same selection from the inventory, like ansible --limit.
limit_option = click.option(
    "--limit", metavar="NAMES", help="With --cluster: only these hosts or groups (comma list)."
)


def cluster_options(f: Any) -> Any:
    """--cluster/--hosts and how the fleet is reached (nodeagent.cluster)."""
    options = [
        click.option(
            "--cluster",
            metavar="HOSTS.YML",
            help="Run on every host of this inventory over SSH (native or Ansible YAML).",
        ),
        click.option(
            "--hosts", "hostlist", metavar="EXPR", help="Hosts as a Slurm hostlist, e.g. 'node[01-04]'."
        ),
        click.option(
            "--slurm",
            metavar="PARTITION|NODELIST",
            help="Run on Slurm's nodes instead, as one job step (no SSH): a partition, or nodes like "
            "'gpu[01-16]'. Nodes Slurm has DOWN fail; drained, reserved or busy ones are UNKNOWN, not "
            "run. Exit 69 when Slurm does not serve it (controller down, nodes not allocated in 30 s).",
        ),
        click.option(
            "--agent",
            metavar="PATH",
            help="With --slurm: nodeagent on the nodes (default: `nodeagent` on their PATH), e.g. a "
            "shared /opt/tools/nodeagent.pyz.",
        ),
        limit_option,
        click.option(
            "--parallel",
            type=click.IntRange(min=1),
            default=DEFAULT_PARALLEL,
            show_default=True,
            help="Hosts handled at once.",
        ),
        click.option(
            "--accept-new-host-keys",
            is_flag=True,
            help="Record the key of a host not yet in known_hosts (a changed key is still refused).",
        ),
    ]

    @functools.wraps(f)
    def gathered(
        *args: Any,
        cluster: str | None,
        hostlist: str | None,
        slurm: str | None,
        agent: str | None,
        limit: str | None,
        parallel: int,
        accept_new_host_keys: bool,
        **kwargs: Any,
    ) -> Any:
        from nodeagent.app.fleet import FleetRequest

        fleet = FleetRequest(cluster, hostlist, limit, parallel, accept_new_host_keys, slurm, agent)
        return f(*args, fleet=fleet, **kwargs)

    wrapped: Any = gathered
    for option in reversed(options):
        wrapped = option(wrapped)
    return wrapped


def fleet_source(
    fleet: FleetRequest, root: str | None = None, hostname: str | None = None
) -> FleetSource | None:
    """Where the hosts of cluster_options come from (--cluster, --hosts, --slurm), or None: this
    node; refused with --root or --hostname where its hosts cannot take them. Slurm's nodes are
    asked of Slurm only when the run starts."""
    source = fleet.source()
    if source is None:
        return None
    given: tuple[tuple[NodeOption, str | None, str], ...] = (
        ("root", root, ROOT_ENV),
        ("hostname", hostname, HOSTNAME_ENV),
    )
    for option, value, env in given:
        why = source.refuses(option) if value is not None else None
        if why is not None:
            raise UsageError(f"--{option} ({env}) {why}")
    return source


playbook_option = click.option(
    "--playbook",
    "playbook_name",
    metavar="NAME|PATH",
    help="A shipped playbook (`nodeagent playbooks`) or a YAML file: which checks, thresholds, tuners.",
)
baseline_option = click.option(
    "--baseline",
    "baseline_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Flag what differs from this baseline (`nodeagent baseline save`).",
)
output_option = click.option(
    "--output",
    "outputs",
    multiple=True,
    metavar="FORMAT:PATH",
    help=f"Also write the result as {output_files.choices_text()} "
    "(repeatable). PATH is a regular file (replaced whole) or a new one, never a link, pipe or "
    "device; '-' is standard output, which then carries only that.",
)
verbose_option = click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Piped, every finding with what was seen (without it, piped output holds only the findings "
    "that need attention, with their fixes; a terminal gets the table of every finding).",
)

quiet_option = click.option(
    "-q",
    "--quiet",
    is_flag=True,
    help="No progress on stderr (on a terminal a bar; piped, one line per step, e.g. a benchmark "
    "config, an A/B pair, hosts done). Standard output is the same either way.",
)


def load_playbook(name: str | None) -> Playbook | None:
    if name is None:
        return None
    from nodeagent.gate import playbook

    return playbook.load_playbook(name)


def load_baseline(path: Path | None) -> Baseline | None:
    if path is None:
        return None
    from nodeagent.gate import baseline

    return baseline.load(path)


def write_outputs(outputs: Sequence[str], doc: dict[str, Any]) -> bool:
    """--output FORMAT:PATH, each parsed before any is written (a typo fails the run, not half of it).
    True when one went to standard output (FORMAT:-): the command prints nothing else there."""
    if not outputs:
        return False
    return output_files.write_outputs(output_files.parse_outputs(outputs), doc)


def emit_fleet(report: FleetReport, fmt: str, sections: Sequence[Part] = (), verbose: bool = False) -> None:
    """The fleet's JSON document, or its tables with `sections` (bandwidth, tune changes) after them:
    piped, each host's problems a line each (`verbose`: all its findings)."""
    if fmt == "json":
        from nodeagent.render import jsonout

        click.echo(jsonout.dumps(report.to_dict(), compact=True))
    else:
        from nodeagent.render.fleet import fleet_parts
        from nodeagent.render.sheet import show

        show(fleet_parts(report, sections, every=verbose))
