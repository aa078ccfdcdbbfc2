"""Every command that prints a table, with its standard output a pipe (a log, a CI job, `| grep`):
plain lines, never wrapped, padded or cut, whatever COLUMNS says (nodeagent.render.sheet).

Each command and option that prints a table runs here as a process of its own on recorded
machines (tests/fixtures), with COLUMNS=80 and without COLUMNS, and its output is held to the rule:
no line ends in white space, none holds "…" or a table's rules, no two runs differ in their number
of lines, and every value its JSON document names (a finding's summary, a host, a row's cells)
stands whole on one line. The list of runs is held to click's tree of commands: a command that is
neither run here nor listed in NO_TABLE fails test_every_command_is_run_piped_or_prints_no_table.

Lists of findings keep their own form: only the problems (one line each, the fix on the next),
then the counts; `-v` every finding; a terminal still gets the table.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import click
import pytest

from nodeagent.cli.main import cli
from tests.support import corpus, fakefleet, promstack, slurm_replay
from tests.support.cli import run_cli
from tests.support.helpers import SYSFS_FIXTURES
from tests.support.paths import FIXTURES, REPO, VM

# A recorded V100 with uncorrectable ECC errors: FAIL and WARN findings whose fixes carry URLs.
V100 = "smi-openpai-v100-sxm3-dbe-retired-pages"
# hwloc's recordings: a Dell R910 with Ethernet and InfiniBand NICs, an RDMA port and PCIe links;
# a POWER9 with GPUs and their memory as NUMA nodes.
NICS = SYSFS_FIXTURES / "40intel64-2g2n4c+pcilocality.tar.bz2"
GPUS = SYSFS_FIXTURES / "nvidiagpunumanodes.tar.bz2"
# Four hosts, three machines (two alike, so the fleet comparison has a majority to hold to).
FLEET = {
    "node01": "40intel64-2g2n4c+pcilocality",
    "node02": "40intel64-2g2n4c+pcilocality",
    "node03": "16em64t-4s2c2t-offlines",
    "node04": "sysfs-ghw-xeon-l5640-2socket",
}
# The bandwidth of the ring's links node01 -> node02 -> ... -> node01: one at a third of the others.
GBITS = [9.4, 9.3, 3.1, 9.5]
PROMETHEUS = json.loads((FIXTURES / "prometheus" / "fleet.json").read_text())
ATTENTION = ("FAIL", "UNKNOWN", "WARN")
URL = re.compile(r"https?://[^\s)]+")
RULES = re.compile("[│┃━─┏┓┗┛┡┩╇╈┼]")  # what a rich table draws its grid with
METRIC = r"rate: ([0-9.]+)"
# The job `verify` runs: 100 items/s, 130 with the profile's HELPFUL=1.
JOB = "import os\nprint(f\"rate: {130.0 if os.environ.get('HELPFUL') == '1' else 100.0} items/s\")\n"

# Commands that print no table, and what they print instead.
NO_TABLE = {
    "snapshot": "a line naming the archive written and what it holds",
    "exec": "the job's own output (--dry-run: JSON; --measure: lines on stderr)",
    "tui": "the TUI, on the terminal",
    "playbooks show": "the playbook as YAML or JSON",
    "baseline save": "a line naming the file written",
    "integrations": "the names of the files, one a line",
    "integrations show": "the file as it is",
}


# -- the recorded machines and fleets the runs read ----------------------------------------------------


class World:
    """What the runs read, each built when a run first needs it: recorded trees, a fleet behind a
    fake SSH transport, per-node reports, recorded Prometheus answers, Slurm's recorded tools, and a
    state folder with a tune --verify and a verify in its history."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.empty_state = base / "empty-state"  # no journals, no history: never this user's own

    def folder(self, name: str) -> Path:
        (self.base / name).mkdir(exist_ok=True)
        return self.base / name

    def tree(self, name: str) -> Path:
        dest = self.base / "trees" / name
        if not dest.exists():
            corpus.build_tree(corpus.load(name), dest)
        return dest

    @cached_property
    def v100(self) -> Path:
        return self.tree(V100)

    def fleet(self, **extra: Any) -> dict[str, Any]:
        """tests.support.piped_driver's configuration of the fleet of FLEET."""
        trees = self.base / "fleet-trees"
        trees.mkdir(exist_ok=True)
        return {"fleet": {"machines": FLEET, "trees": str(trees), "inventory": str(self.inventory), **extra}}

    @property
    def inventory(self) -> Path:
        return self.base / "hosts.yml"  # written by each driver run (tests/support/fakefleet.py)

    @cached_property
    def reports(self) -> Path:
        """What each node of FLEET leaves behind: `check --root ... --format json --facts`."""
        folder = self.base / "reports"
        folder.mkdir()
        for host, machine in FLEET.items():
            root = fakefleet.recorded_root(machine, self.base / "fleet-trees")
            out = folder / f"{host}.json"
            proc = run_cli(
                "check", "--root", root, "--hostname", host, "--format", "json", "--facts", process=True
            )
            assert proc.returncode in (0, 1, 2, 3), proc.stderr
            out.write_text(proc.stdout)
        return folder

    @cached_property
    def prometheus(self) -> str:
        """The URL of a server answering as the recorded Prometheus did."""
        self._replay = promstack.replay(PROMETHEUS["views"][0]["exchanges"])
        return self._replay.__enter__()

    def close(self) -> None:
        if "prometheus" in self.__dict__:
            self._replay.__exit__(None, None, None)

    @cached_property
    def slurm_path(self) -> str:
        bin_dir = slurm_replay.install(self.base / "slurm-bin")
        return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"

    @cached_property
    def job(self) -> Path:
        script = self.base / "job.py"
        script.write_text(JOB)
        return script

    def verify_state(self, state: Path) -> Path:
        """`state` with the profile verify's B side runs with."""
        profiles = state / "profiles"
        profiles.mkdir(parents=True, exist_ok=True)
        (profiles / "fast.json").write_text(json.dumps({"env": {"HELPFUL": "1"}}))
        return state

    @cached_property
    def state(self) -> Path:
        """A state folder holding a journal and the history of a tune --verify and a verify."""
        work = self.base / "tuned"
        state = self.verify_state(work / "state")  # where the fake worker keeps its state
        self.tuned_doc = run_json(self, RUN["tune --verify"], {"fake_worker": str(work)})
        self.verified_doc = run_json(self, RUN["verify"], env={"NODEAGENT_STATE_DIR": str(state)})
        return state


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    w = World(tmp_path_factory.mktemp("piped"))
    try:
        yield w
    finally:
        w.close()


# -- the runs -----------------------------------------------------------------------------------


Wholes = list[tuple[str, ...]]


@dataclass(frozen=True)
class Run:
    """One command line that prints a table. `wholes(doc)`: from the run's JSON document, the
    values that must each stand on one line (the parts of a tuple on the same one)."""

    name: str
    command: str  # its path in click's tree
    argv: Callable[[World], list[str]]
    wholes: Callable[[dict[str, Any]], Wholes]
    driver: Callable[[World], dict[str, Any]] | None = None  # tests.support.piped_driver's configuration
    env: Callable[[World], dict[str, str]] | None = None
    json_args: tuple[str, ...] = ("--format", "json")
    slow: bool = False


def first_line(text: str) -> str:
    return next((line for line in text.splitlines() if line.strip()), "")


def finding_wholes(findings: list[dict[str, Any]], every: bool = False, host: str = "") -> Wholes:
    """Each finding's status, check and summary on one line (with its host, in a fleet), and the
    first line of the fix of each that needs attention."""
    out: Wholes = []
    for f in findings:
        if f["status"] not in ATTENTION and not every:
            continue
        out.append((host, f["status"], f["check_id"], f["summary"]))
        if f["status"] in ATTENTION and f["remediation"].strip():
            out.append((host, first_line(f["remediation"])))
    return out


def check_wholes(every: bool = False) -> Callable[[dict[str, Any]], Wholes]:
    def wholes(doc: dict[str, Any]) -> Wholes:
        out = finding_wholes(doc["findings"], every)
        if every:
            out += [
                (f"{where} = {value}",)
                for f in doc["findings"]
                if f["status"] in ATTENTION
                for where, value in list(f["evidence"].items())[:6]
            ]
            out.append((doc["host"],))
        if "verdict" in doc:
            out.append((doc["verdict"]["reason"],))
        return out

    return wholes


def facts_wholes(doc: dict[str, Any]) -> Wholes:
    out: Wholes = [(str(doc["topology"]["cpu_model"]),)]
    out += [(n["name"], n["pci_address"], str(n["driver"])) for n in doc["nics"] if n["pci_address"]]
    out += [(p["device"], str(p["port"]), p["rate"], p["link_layer"]) for p in doc["rdma"]]
    out += [(g["pci_address"], g["vendor"], g["source"]) for g in doc["gpus"]]
    out += [
        (d["address"], d["kind"], f"{d['vendor']}:{d['device']}")
        for d in doc["pci"]
        if d["kind"] in ("gpu", "nic")
    ]
    return out


def plan_wholes(doc: dict[str, Any]) -> Wholes:
    changes = [c for p in doc["plans"] for c in p["changes"]]
    out: Wholes = [(c["tuner"], c["scope"], c["target"]) for c in changes]
    out += [(c["after"],) for c in changes] + [(c["why"],) for c in changes]
    out += [(p["tuner"], note) for p in doc["plans"] for note in p["notes"]]
    return out


def fleet_wholes(every: bool = False) -> Callable[[dict[str, Any]], Wholes]:
    def wholes(doc: dict[str, Any]) -> Wholes:
        out: Wholes = []
        for host, h in doc["hosts"].items():
            out.append((host, h["status"]))
            if "error" in h:
                out.append((host, h["error"]["message"]))
            out += finding_wholes(h.get("findings", []), every, host)
        for d in doc["drift"]:
            out.append((d["key"],))
            out += [(d["key"], v) for v in d["hosts"].values() if isinstance(v, str) and v]
        out += [(o["key"], o["host"]) for o in doc["outliers"]]
        out += [(note,) for note in doc.get("notes", [])]
        bandwidth = doc.get("bandwidth", {})
        out += [(link["src"], link["dst"], link["tool"]) for link in bandwidth.get("links", [])]
        out += [(f["summary"],) for f in bandwidth.get("findings", [])]
        return out

    return wholes


RUNS = [
    Run("check", "check", lambda w: ["check", "--root", str(w.v100)], check_wholes()),
    Run("check -v", "check", lambda w: ["check", "--root", str(w.v100), "-v"], check_wholes(every=True)),
    Run(
        "preflight",
        "preflight",
        lambda w: ["preflight", "--root", str(VM), "--fail-on", "warn"],
        check_wholes(),
    ),
    Run(
        "preflight -v",
        "preflight",
        lambda w: ["preflight", "--root", str(VM), "--fail-on", "warn", "-v"],
        check_wholes(every=True),
    ),
    Run("facts: NICs, RDMA, PCIe", "facts", lambda w: ["facts", "--root", str(NICS)], facts_wholes),
    Run("facts: GPUs", "facts", lambda w: ["facts", "--root", str(GPUS)], facts_wholes),
    Run(
        "checks",
        "checks",
        lambda w: ["checks"],
        lambda doc: [(c["id"], c["title"], c["area"], ",".join(c["tags"])) for c in doc["checks"]],
    ),
    Run(
        "checks --params",
        "checks",
        lambda w: ["checks", "--params"],
        lambda doc: (
            [(c["id"], c["title"]) for c in doc["checks"]]
            + [(p["why"],) for c in doc["checks"] for p in c["params"]]
        ),
    ),
    Run(
        "checks --format markdown",
        "checks",
        lambda w: ["checks", "--format", "markdown"],
        # A check's row holds its id and every parameter's name.
        lambda doc: [(c["id"], *(p["name"] for p in c["params"])) for c in doc["checks"]],
    ),
    Run("tuners", "tuners", lambda w: ["tuners"], lambda doc: [(t["id"], t["title"]) for t in doc["tuners"]]),
    Run(
        "tuners --params",
        "tuners",
        lambda w: ["tuners", "--params"],
        lambda doc: (
            [(f"{t['id']}.{p['name']}", p["type"]) for t in doc["tuners"] for p in t["params"]]
            + [(p["why"],) for t in doc["tuners"] for p in t["params"]]
        ),
    ),
    Run(
        "playbooks",
        "playbooks",
        lambda w: ["playbooks"],
        lambda doc: [(pb["name"], pb["description"]) for pb in doc["playbooks"]],
    ),
    Run("tune", "tune", lambda w: ["tune", "--root", str(w.v100)], plan_wholes),
    Run(
        "tune --verify",
        "tune",
        lambda w: ["tune", "--apply", "--verify", "--quick", "--only", "tf-threads"],
        lambda doc: plan_wholes(doc) + [(c["tuner"], c["decision"]) for c in doc["verify"]["changes"]],
        driver=lambda w: {"fake_worker": str(fresh(w.base))},
        slow=True,
    ),
    Run(
        "revert --list",
        "revert",
        lambda w: ["revert", "--list"],
        lambda doc: [(j["id"], j["state"], j["file"]) for j in doc["journals"]],
        env=lambda w: {"NODEAGENT_STATE_DIR": str(w.state)},
        slow=True,
    ),
    Run(
        "history",
        "history",
        lambda w: ["history"],
        lambda doc: (
            [(r["time"], r["node"], r["change"], r["verdict"], r["decision"]) for r in doc["records"]]
            + [(" ".join(r["command"]),) for r in doc["records"] if r["command"]]
        ),
        env=lambda w: {"NODEAGENT_STATE_DIR": str(w.state)},
        slow=True,
    ),
    Run(
        "verify",
        "verify",
        lambda w: [
            "verify",
            "--profile",
            "fast",
            "--pairs",
            "6",
            "--metric",
            METRIC,
            "--",
            sys.executable,
            str(w.job),
        ],
        lambda doc: [(str(b["block"]), b["order"]) for b in doc["blocks"]] + [(doc["estimate"]["reason"],)],
        driver=lambda w: {"quiet": True},
        env=lambda w: {"NODEAGENT_STATE_DIR": str(w.verify_state(fresh(w.base)))},
        slow=True,
    ),
    Run(
        "bench",
        "bench",
        lambda w: ["bench", "--quick", "--profile", "absent"],
        lambda doc: (
            [(name, c["status"]) for name, c in doc["configs"].items()]
            # a verdict and its pair of configs (the figures vary from run to run: the fake worker's jitter)
            + [(*key.split("_vs_"), v["verdict"]) for key, v in doc["verdict"].items()]
        ),
        driver=lambda w: {"fake_worker": str(w.folder("bench"))},
    ),
    Run(
        "report merge",
        "report merge",
        lambda w: ["report", "merge", str(w.reports)],
        fleet_wholes(),
        slow=True,
    ),
    Run(
        "report merge -v",
        "report merge",
        lambda w: ["report", "merge", str(w.reports), "-v"],
        fleet_wholes(every=True),
        slow=True,
    ),
    Run(
        "check --cluster",
        "check",
        lambda w: ["check", "--cluster", str(w.inventory)],
        fleet_wholes(),
        driver=lambda w: w.fleet(),
        slow=True,
    ),
    Run(
        "check --cluster --bandwidth -v",
        "check",
        lambda w: ["check", "--cluster", str(w.inventory), "--bandwidth", "-v"],
        fleet_wholes(every=True),
        driver=lambda w: w.fleet(gbits=GBITS),
        slow=True,
    ),
    Run(
        "tune --cluster",
        "tune",
        lambda w: ["tune", "--cluster", str(w.inventory)],
        fleet_wholes(),
        driver=lambda w: w.fleet(agents=True),
        slow=True,
    ),
    Run(
        "check --slurm",
        "check",
        lambda w: ["check", "--slurm", "test"],
        fleet_wholes(),
        env=lambda w: {"PATH": w.slurm_path, "FAKE_SLURM_LOG": str(w.base / "slurm.log")},
    ),
    Run(
        "fleet --prometheus",
        "fleet",
        lambda w: ["fleet", "--prometheus", w.prometheus],
        lambda doc: [*fleet_wholes()(doc), (doc["prometheus"]["url"],)],
        env=lambda w: {"NO_PROXY": "127.0.0.1"},
    ),
]
RUN = {r.name: r for r in RUNS}


def fresh(base: Path) -> Path:
    """A folder of its own for one run (a state that no other run appends to)."""
    n = len(list(base.glob("run-*")))
    folder = base / f"run-{n}-{os.getpid()}"
    folder.mkdir()
    return folder


def execute(
    world: World,
    run: Run,
    extra: list[str],
    columns: str | None,
    driver: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "NODEAGENT_STATE_DIR": str(world.empty_state)}
    environ.pop("COLUMNS", None)
    if columns is not None:
        environ["COLUMNS"] = columns
    environ |= run.env(world) if run.env is not None else {}
    environ |= env or {}
    argv = [*run.argv(world)]
    if "--" in argv:  # options go before the job's command line
        cut = argv.index("--")
        argv[cut:cut] = extra
    else:
        argv += extra
    config = driver if driver is not None else run.driver(world) if run.driver is not None else None
    head = (
        [sys.executable, "-m", "tests.support.piped_driver", json.dumps(config)]
        if config is not None
        else [sys.executable, "-m", "nodeagent"]
    )
    proc = subprocess.run(
        [*head, *argv], capture_output=True, text=True, timeout=300, env=environ, cwd=REPO, check=False
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def run_json(
    world: World, run: Run, driver: dict[str, Any] | None = None, env: dict[str, str] | None = None
) -> dict[str, Any]:
    proc = execute(world, run, [*run.json_args], None, driver, env)
    try:
        doc: dict[str, Any] = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(
            f"{run.name} --format json: exit {proc.returncode}, not JSON: {proc.stdout[:500]}{proc.stderr}"
        ) from None
    doc["exit_code"] = proc.returncode
    return doc


def document(world: World, run: Run) -> dict[str, Any]:
    """The run's JSON document: tune --verify's and verify's are those of the runs that made the
    state folder's history (the trials run once for JSON, not once more)."""
    if run.name == "tune --verify":
        _ = world.state
        return world.tuned_doc
    if run.name == "verify":
        _ = world.state
        return world.verified_doc
    return run_json(world, run)


def norm(text: str) -> str:
    """White space as one space: a value holding two spaces is still found, a value cut across two
    lines is not."""
    return " ".join(text.split())


def assert_plain(out: str, name: str) -> list[str]:
    lines = out.splitlines()
    assert lines, f"{name}: no output"
    assert out.endswith("\n")
    padded = [line for line in lines if line != line.rstrip()]
    assert not padded, f"{name}: lines end in white space: {padded[:3]}"
    assert not [line for line in lines if "…" in line], f"{name}: a value was cut"
    ruled = [line for line in lines if RULES.search(line)]
    assert not ruled, f"{name}: a table's rules in a pipe: {ruled[:3]}"
    assert not [line for line in lines if not line.strip()], f"{name}: blank lines"
    assert "\t" not in out
    if len(lines) > 2:  # a table pads its rows to one width
        assert len({len(line) for line in lines}) > 1, f"{name}: every line {len(lines[0])} characters wide"
    return lines


def assert_whole(lines: list[str], wholes: Wholes, name: str) -> None:
    normed = [norm(line) for line in lines]
    for whole in wholes:
        parts = [norm(p) for p in whole if p and norm(p)]
        if parts and not any(all(p in line for p in parts) for line in normed):
            raise AssertionError(f"{name}: not on one line: {parts}\n" + "\n".join(lines[:60]))


@pytest.mark.parametrize(
    "run", [pytest.param(r, id=r.name, marks=[pytest.mark.slow] if r.slow else []) for r in RUNS]
)
def test_piped_output_is_plain_whole_lines(world: World, run: Run) -> None:
    doc = document(world, run)
    wholes = run.wholes(doc)
    assert wholes, f"{run.name}: its document names nothing to look for"
    counts = set()
    for columns in ("80", None):
        proc = execute(world, run, [], columns)
        assert proc.returncode == doc["exit_code"], proc.stderr
        lines = assert_plain(proc.stdout, f"{run.name} (COLUMNS={columns})")
        assert_whole(lines, wholes, f"{run.name} (COLUMNS={columns})")
        counts.add(len(lines))
    assert len(counts) == 1, f"{run.name}: the number of lines depends on COLUMNS: {counts}"


def tree_commands(group: click.Group = cli, prefix: tuple[str, ...] = ()) -> dict[str, click.Command]:
    """Every command of click's tree by its path ("report merge"); a group that runs without a
    subcommand ("playbooks") is one too."""
    out: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        path = (*prefix, name)
        if isinstance(command, click.Group):
            if command.invoke_without_command:
                out[" ".join(path)] = command
            out |= tree_commands(command, path)
        else:
            out[" ".join(path)] = command
    return out


def uncovered(commands: set[str]) -> set[str]:
    """The commands of `commands` neither run piped here nor listed as printing no table."""
    return commands - {r.command for r in RUNS} - set(NO_TABLE)


def test_every_command_is_run_piped_or_prints_no_table(monkeypatch: pytest.MonkeyPatch) -> None:
    tree = set(tree_commands())
    missing = uncovered(tree)
    assert not missing, (
        f"commands neither run piped here nor listed as printing no table: {sorted(missing)}; add a Run "
        "to RUNS (or, when it prints no table, an entry to NO_TABLE)"
    )
    report = cli.commands["report"]
    assert isinstance(report, click.Group)
    monkeypatch.setitem(report.commands, "diff", click.Command("diff"))
    assert uncovered(set(tree_commands())) == {"report diff"}  # a new command is noticed
    ran = {r.command for r in RUNS}
    assert not ran & set(NO_TABLE)
    assert (ran | set(NO_TABLE)) <= tree, f"no such command: {(ran | set(NO_TABLE)) - tree}"


def test_every_command_with_a_table_has_json() -> None:
    tree = tree_commands()
    for name in {r.command for r in RUNS}:
        formats = [p for p in tree[name].params if p.name == "fmt"]
        assert formats and "json" in getattr(formats[0].type, "choices", ()), f"{name} has no --format json"


def param_line(command: str, item: dict[str, Any], p: dict[str, Any]) -> str:
    """How a parameter's line starts under its check or tuner."""
    if command == "checks":
        return f"  {p['name']} = "
    return f"  {item['id']}.{p['name']}: {p['type']} = "


def test_parameters_are_listed_under_their_check_or_tuner() -> None:
    """`--params` piped: a line per check or tuner, each parameter indented under it, its reason
    indented under that."""
    for command in ("checks", "tuners"):
        doc = json.loads(run_cli(command, "--format", "json", process=True).stdout)
        lines = run_cli(command, "--params", process=True).stdout.splitlines()
        for item in doc[command]:
            head = lines.index(next(line for line in lines if line.startswith(f"{item['id']}: ")))
            for i, p in enumerate(item["params"]):
                assert lines[head + 1 + 2 * i].startswith(param_line(command, item, p)), (command, p)
                assert lines[head + 2 + 2 * i] == f"      {p['why']}"


# -- lists of findings: the problems with their fixes, then the counts ------------------------------


@pytest.fixture(scope="module")
def v100(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return corpus.build_tree(corpus.load(V100), tmp_path_factory.mktemp("v100") / "tree")


@pytest.fixture(scope="module")
def v100_doc(v100: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(
        run_cli("check", "--root", str(v100), "--format", "json", process=True).stdout
    )
    return doc


def problems_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in doc["findings"] if f["status"] in ATTENTION]


def urls_of(findings: list[dict[str, Any]]) -> set[str]:
    return {u for f in findings for u in URL.findall(f"{f['summary']} {f['remediation']}")}


def test_piped_check_prints_only_the_problems(v100: Path, v100_doc: dict[str, Any]) -> None:
    proc = run_cli("check", "--root", str(v100), process=True)
    assert proc.returncode == 2 and proc.stderr == "", proc.stderr
    lines = proc.stdout.splitlines()
    problems = problems_of(v100_doc)
    assert {f["status"] for f in problems} == {"FAIL", "WARN"}  # the case this test is about
    findings = [line for line in lines if line.split(" ", 1)[0] in ATTENTION]
    fixes = [line for line in lines if line.lstrip().startswith("fix: ")]
    assert len(findings) == len(problems)
    assert len(fixes) == sum(1 for f in problems if f["remediation"])
    assert len(lines) == len(findings) + len(fixes) + 1  # and one line of counts
    # Worst first; each line status, check/subject and summary; the fix indented below it.
    order = ["FAIL", "UNKNOWN", "WARN"]
    assert [line.split()[0] for line in findings] == sorted((f["status"] for f in problems), key=order.index)
    first = problems[0]
    assert lines[0] == f"{first['status']:<7} {first['check_id']}/{first['subject']}: {first['summary']}"
    assert lines[1] == f"        fix: {first['remediation']}"
    counts = Counter(f["status"] for f in v100_doc["findings"])
    assert lines[-1].startswith(f"{counts['FAIL']} FAIL, {counts['WARN']} WARN, {counts['OK']} OK")
    assert lines[-1].endswith("worst: FAIL")
    assert "OK " not in proc.stdout.split("\n", 1)[0]


def test_piped_urls_are_never_split(v100: Path, v100_doc: dict[str, Any]) -> None:
    want = urls_of(problems_of(v100_doc))
    assert want and max(len(u) for u in want) > 60  # long enough to be wrapped at 80 columns
    for args in ([], ["-v"]):
        out = run_cli("check", "--root", str(v100), *args, process=True).stdout
        assert set(URL.findall(out)) == want, args  # every URL whole, none cut into a shorter one
        assert not [
            line for line in out.splitlines() if line.strip().startswith(("docs.nvidia", "index.html"))
        ]


def test_verbose_prints_every_finding_with_what_was_seen(v100: Path, v100_doc: dict[str, Any]) -> None:
    proc = run_cli("check", "--root", str(v100), "-v", process=True)
    assert proc.returncode == 2
    lines = proc.stdout.splitlines()
    assert lines[0] == f"nodeagent check: {v100_doc['host']}"
    rows = [line for line in lines if line.split(" ", 1)[0] in {f["status"] for f in v100_doc["findings"]}]
    assert len(rows) == len(v100_doc["findings"])  # OK and SKIPPED too: a line each
    for f in problems_of(v100_doc):  # what the table shows under it, indented
        for where, value in list(f["evidence"].items())[:6]:
            assert f"        seen: {where} = {value}" in lines
        assert f"        expected: {f['expected']}" in lines
    assert lines[-1].endswith("worst: FAIL")


def test_piped_preflight_prints_the_problems_and_the_verdict() -> None:
    proc = run_cli("preflight", "--root", str(VM), "--fail-on", "warn", process=True)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(
        run_cli("preflight", "--root", str(VM), "--fail-on", "warn", "--format", "json", process=True).stdout
    )
    lines = proc.stdout.splitlines()
    findings = [line for line in lines if line.split(" ", 1)[0] in ATTENTION]
    assert len(findings) == len(problems_of(doc)) > 0
    assert lines[-2].endswith("worst: WARN")
    assert lines[-1].startswith("preflight REFUSED (preflight, fail on warn, budget 1s): ")
    assert "check durations" not in proc.stdout
    verbose = run_cli(
        "preflight", "--root", str(VM), "--fail-on", "warn", "-v", process=True
    ).stdout.splitlines()
    durations = [line for line in verbose if line.startswith("check durations: ")]
    assert len(durations) == 1 and all(c["id"] in durations[0] for c in doc["checks"])
    assert verbose[-1].startswith("preflight REFUSED") and len(verbose) > len(lines)


def read_terminal(argv: list[str]) -> tuple[int, str]:
    """`nodeagent ARGV` with standard output a pseudo-terminal: its exit code and what it showed."""
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "nodeagent", *argv],
            stdout=terminal,
            stderr=subprocess.PIPE,
            timeout=120,
            check=False,
        )
        os.close(terminal)
        terminal = -1
        out = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the terminal's other end is closed and everything was read
                break
            if not chunk:
                break
            out += chunk
    finally:
        if terminal >= 0:
            os.close(terminal)
        os.close(controller)
    return proc.returncode, re.sub(r"\x1b\[[0-9;]*m", "", out.decode())


def test_a_terminal_gets_the_table() -> None:
    """Standard output a pseudo-terminal: the table, without -v."""
    code, text = read_terminal(["check", "--root", str(VM), "--only", "kernel"])
    assert code == 1
    assert "nodeagent check: vm" in text and "┃ status" in text
    assert " OK " in text  # the OK findings too: the whole table


def test_a_terminal_gets_every_table_as_a_table() -> None:
    code, text = read_terminal(["checks"])
    assert code == 0 and "┃ id" in text and "┃ area" in text
    code, text = read_terminal(["facts", "--root", str(NICS)])
    assert code == 0 and "┃ name" in text and "RDMA ports" in text
