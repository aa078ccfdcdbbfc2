"""Fleet sources: one type for SSH, Slurm and the Prometheus view. Which source the options name,
what each refuses before anything starts (a matrix of source x option, as docs/fleets.md states
it), that the read-only view runs nothing on its nodes, and that the argv a fleet's nodes get for
`tune` asks for the same run as the request it came from."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.app import fleet as fleets
from nodeagent.app.check import CheckRequest
from nodeagent.app.tune import TuneRequest
from nodeagent.bench.verify import Job
from nodeagent.cli.main import _settings
from nodeagent.cluster.bandwidth.plan import Params as BandwidthParams
from nodeagent.cluster.inventory.schema import Connection, HostSpec, Inventory
from nodeagent.cluster.prometheus_view import PrometheusFleetRequest
from nodeagent.core.errors import UsageError
from nodeagent.gate.baseline import Baseline
from nodeagent.gate.playbook import load_playbook


def ssh_source(connection: Connection = "ssh") -> fleets.SshSource:
    hosts = tuple(HostSpec(f"n{i}", f"n{i}", connection=connection) for i in (1, 2))
    return fleets.SshSource(Inventory(hosts, "hosts.yml"), workers=4)


SOURCES: dict[str, fleets.FleetSource] = {
    "ssh": ssh_source(),
    "ssh-local": ssh_source("local"),
    "slurm": fleets.SlurmSource("gpu[01-04]"),
    "prometheus": fleets.PrometheusSource(PrometheusFleetRequest("http://127.0.0.1:9")),
}
PLAYBOOK = load_playbook("gpu-training")
BASELINE = Baseline(Path("baseline.json"), "n1", "2026-11-29T00:00:00Z", "0.1.0")
ASKS = {
    "checks": fleets.FleetCheck(CheckRequest()),
    "playbook": fleets.FleetCheck(CheckRequest(playbook=PLAYBOOK)),
    "baseline": fleets.FleetCheck(CheckRequest(baseline=BASELINE)),
    "remote-agent": fleets.FleetCheck(CheckRequest(), remote_agent=True),
    "remote-agent+playbook": fleets.FleetCheck(CheckRequest(playbook=PLAYBOOK), remote_agent=True),
    "bandwidth": fleets.FleetCheck(CheckRequest(), bandwidth=BandwidthParams()),
}
# What each source refuses, and a word its message must hold (docs/fleets.md): pulled recordings are
# judged here only over SSH; the nodes of Slurm and Prometheus judge themselves; bandwidth is
# between SSH hosts; Slurm's nodes always run their own nodeagent (remote-agent is implied).
REFUSED = {
    ("ssh", "remote-agent+playbook"): "--remote-agent",
    ("ssh-local", "remote-agent+playbook"): "--remote-agent",
    ("ssh-local", "bandwidth"): "connection: local",
    ("slurm", "playbook"): "--slurm",
    ("slurm", "baseline"): "--slurm",
    ("slurm", "remote-agent+playbook"): "--slurm",
    ("slurm", "bandwidth"): "over SSH",
    ("prometheus", "playbook"): "Prometheus",
    ("prometheus", "baseline"): "Prometheus",
    ("prometheus", "remote-agent"): "--cluster",
    ("prometheus", "remote-agent+playbook"): "Prometheus",
    ("prometheus", "bandwidth"): "--cluster",
}


@pytest.mark.parametrize("ask", ASKS)
@pytest.mark.parametrize("source", SOURCES)
def test_each_source_refuses_what_it_cannot_do_before_anything_starts(source: str, ask: str) -> None:
    refused = REFUSED.get((source, ask))
    if refused is None:
        SOURCES[source].validate(ASKS[ask])  # no host, no Slurm, no Prometheus is asked
        return
    with pytest.raises(UsageError) as e:
        SOURCES[source].validate(ASKS[ask])
    assert refused in str(e.value) and "\n" not in str(e.value)


# What each source's hosts say of a one-node option: None, they take it (Slurm's nodes read --root
# there); else the words after the option's name in the error.
ONE_NODE_OPTIONS: dict[tuple[str, fleets.NodeOption], str | None] = {
    ("ssh", "root"): "reads one node; it cannot be used with --cluster or --hosts",
    (
        "ssh",
        "hostname",
    ): "names the one node read here; with --cluster or --hosts the inventory names each host",
    ("slurm", "root"): None,
    (
        "slurm",
        "hostname",
    ): "names the one node read here; with --slurm each node is named by its Slurm node name",
    ("prometheus", "root"): "reads one node; Prometheus holds the runs of its nodes as they named themselves",
    (
        "prometheus",
        "hostname",
    ): "names the one node read here; Prometheus holds the runs of its nodes as they named themselves",
}


@pytest.mark.parametrize(("source", "option"), ONE_NODE_OPTIONS)
def test_each_source_says_whether_its_hosts_take_a_one_node_option(
    source: str, option: fleets.NodeOption
) -> None:
    assert SOURCES[source].refuses(option) == ONE_NODE_OPTIONS[(source, option)]


def test_the_request_names_one_source(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"hosts": [{"name": "a", "connection": "local"}, "b"]}))
    by_file = fleets.FleetRequest(cluster=str(inventory), parallel=3).source()
    assert isinstance(by_file, fleets.SshSource)
    assert [h.name for h in by_file.inventory.hosts] == ["a", "b"] and by_file.workers == 3
    by_list = fleets.FleetRequest(hostlist="node[01-03]").source()
    assert isinstance(by_list, fleets.SshSource) and by_list.size() == 3
    slurm = fleets.FleetRequest(slurm="gpu", agent="/opt/nodeagent.pyz").source()
    # Slurm is asked for its nodes only when the run starts (none runs here).
    assert isinstance(slurm, fleets.SlurmSource) and slurm.resolved is None
    assert (slurm.nodes, slurm.agent) == ("gpu", "/opt/nodeagent.pyz")
    assert fleets.FleetRequest().source() is None
    with pytest.raises(UsageError) as e:
        fleets.FleetRequest(cluster=str(inventory), slurm="gpu").source()
    assert str(e.value) == "give one of --cluster FILE, --hosts EXPR and --slurm PARTITION|NODELIST"


def test_the_prometheus_view_runs_nothing_on_its_nodes() -> None:
    with pytest.raises(UsageError) as e:
        SOURCES["prometheus"].on_agents(["tune", "--apply"])
    assert "`tune` needs --cluster, --hosts or --slurm" in str(e.value)
    assert SOURCES["prometheus"].size() is None  # its nodes are known from its answer only


# --set values as a user may give them: the YAML scalars `_settings` reads, and strings that look
# like other types ("true", "4", "2MB", "", " x") or hold quotes, colons and newlines.
SETTING_VALUES = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=20),
    st.sampled_from(["true", "no", "4", "0x10", "1e5", "2MB", "", " x", "a: b", "'q'", "~", "null"]),
)
TUNER = st.sampled_from(["numa-pinning", "tf-threads", "thp"])
NAME = st.from_regex(r"[a-z][a-z_]{0,11}", fullmatch=True).filter(lambda n: n != "ranks")


@given(st.dictionaries(TUNER, st.dictionaries(NAME, SETTING_VALUES, min_size=1, max_size=3), max_size=3))
def test_a_fleet_nodes_tune_arguments_ask_for_the_same_settings(
    overrides: dict[str, dict[str, object]],
) -> None:
    argv = TuneRequest(overrides=overrides).argv()
    sets = tuple(a.removeprefix("--set=") for a in argv if a.startswith("--set="))
    assert _settings(sets) == overrides


def test_a_fleet_nodes_tune_arguments_carry_the_whole_request() -> None:
    overrides = {"thp": {"mode": "never"}}
    request = TuneRequest("/srv/rec", ["thp", "numa-pinning"], ["tf-data"], overrides, 8, None, "perf")
    job = Job(("python", "train.py", "--epochs", "1"), r"step/s: ([0-9.]+)", True, 12, 30.0)
    assert request.argv(True, job, "training") == [
        "tune",
        "--profile",
        "perf",
        "--only=thp,numa-pinning",
        "--skip=tf-data",
        "--set=thp.mode=never",
        "--ranks=8",
        "--apply",
        "--verify",
        "--quick",
        "--pairs=12",
        r"--metric=step/s: ([0-9.]+)",
        "--trial-timeout=30.0",
        "--playbook=training",
        "--root=/srv/rec",
        "--",
        "python",
        "train.py",
        "--epochs",
        "1",
    ]
    assert TuneRequest().argv() == ["tune", "--profile", "default"]
