"""The shipped Slurm HealthCheckProgram and Prolog (nodeagent/integrations) against a real Slurm.

A real cluster (tests/support/slurmcluster.py: slurmctld, munged and a slurmd per node, each node a network
and UTS namespace named nK) and the real `nodeagent preflight`, reading recorded machines
(tests/fixtures/corpus) with --root: one with an uncorrectable ECC error, which it refuses (exit 2,
FAIL), and one it passes (exit 0). Node states and drain reasons are read back from the real
`scontrol show node`.

- The health check runs on a node as slurmd runs it (root, in the node's namespaces, with
  SLURMD_NODENAME and slurmd's small environment), and slurmd itself runs it every
  HealthCheckInterval.
- The prolog is slurm.conf's Prolog= with the flags its header recommends (PrologFlags=Alloc,
  SchedulerParameters=nohold_on_prolog_fail), run by slurmd for real jobs.

slurmd runs both with a minimal environment, so slurm.conf names small generated wrappers that set
what a site puts in /etc/default/nodeagent and exec the shipped scripts; the nodeagent each node runs
is chosen per test through a control file per node (none: the wrapper does nothing).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from nodeagent import integrations
from tests.support import corpus, pyzbuild
from tests.support.slurmcluster import SlurmCluster, SlurmClusterFactory, slurm_available
from tests.support.sshcluster import NETNS_DIR

# Real daemons and many subprocesses: left out of `make test-fast`. One cluster per module, on one
# xdist worker.
SLURM_REASON = slurm_available()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group(name="slurm_real"),
    pytest.mark.skipif(SLURM_REASON is not None, reason=f"no Slurm test cluster: {SLURM_REASON}"),
]

NODEAGENT = Path(sys.executable).with_name("nodeagent")
# Recorded machines: a V100 whose `nvidia-smi -q -x` shows an uncorrectable ECC error (preflight
# FAILs it), and an RTX 3060 with nothing to report (preflight passes it).
REFUSED_MACHINE = "smi-openpai-v100-sxm3-dbe-retired-pages"
PASSING_MACHINE = "smi-telegraf-rtx-3060"
SOMEONE_ELSES = "DIMM replacement, ticket 1234"
# Seconds between slurmd's own health-check runs: short, so the test of it is quick; the wrapper
# does nothing on a node without a control file, so the runs cost little between tests.
HEALTH_CHECK_INTERVAL_S = 2
# The checks of a recorded machine take well under a second; the budget and timeout leave room for a
# machine busy with the rest of the suite (a cut check is UNKNOWN, which refuses), and slurmd waits
# for a prolog within MessageTimeout.
BUDGET_S = 20
TIMEOUT_S = 25
MESSAGE_TIMEOUT_S = 30
# How long a test job may take to run, fail or be requeued.
JOB_TIMEOUT_S = 60


@dataclass
class Site:
    """The files a test cluster's nodes share: nodeagent wrappers, control files, logs, reports."""

    root: Path
    refused_reason: str

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def control(self) -> Path:
        return self.root / "control"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def reports(self) -> Path:
        return self.root / "reports"

    def nodeagent(self, kind: str) -> Path:
        return self.bin / f"nodeagent-{kind}"

    def choose(self, program: str, node: str, kind: str | None) -> None:
        """Which nodeagent the node's `program` (prolog, healthcheck) runs from now on; None: the
        program does nothing there."""
        control = self.control / f"{program}-{node}"
        if kind is None:
            control.unlink(missing_ok=True)
        else:
            tmp = control.with_suffix(".tmp")
            tmp.write_text(str(self.nodeagent(kind)))
            tmp.rename(control)  # the wrapper reads it whole, or not at all

    def log(self, program: str, node: str) -> str:
        path = self.logs / f"{program}-{node}.log"
        return path.read_text() if path.exists() else ""


def write_executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def make_site(root: Path) -> Site:
    for sub in ("bin", "control", "logs", "reports", "trees", "tmp"):
        (root / sub).mkdir(parents=True)
    for kind, machine in (("refuses", REFUSED_MACHINE), ("passes", PASSING_MACHINE)):
        tree = corpus.build_tree(corpus.load(machine), root / "trees" / machine)
        # `$NODEAGENT preflight ARGS`: the real nodeagent, reading the recorded machine.
        write_executable(
            root / "bin" / f"nodeagent-{kind}",
            f'#!/bin/bash\ncommand=$1; shift\nexec {NODEAGENT} "$command" --root {tree} "$@"\n',
        )
    # nodeagent failing before it can judge: an internal error, and a crash by signal.
    write_executable(
        root / "bin" / "nodeagent-crashes",
        "#!/bin/bash\necho 'internal error: KeyError' >&2\nexit 70\n",
    )
    write_executable(root / "bin" / "nodeagent-segfaults", "#!/bin/bash\nulimit -c 0\nkill -SEGV $$\n")
    reason = subprocess.run(
        [str(root / "bin" / "nodeagent-refuses"), "preflight", "--format", "slurm"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert reason.returncode == 2, reason  # FAIL: refused on positive evidence
    site = Site(root, reason.stdout.splitlines()[0])
    passes = subprocess.run(
        [str(site.nodeagent("passes")), "preflight", "--format", "slurm"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert passes.returncode == 0, passes
    for program in ("prolog", "healthcheck"):
        install(site, program)
    return site


def install(site: Site, program: str) -> Path:
    """The shipped script, installed as its header says (a copy, mode 755)."""
    name = f"slurm-{program}.sh"
    return write_executable(site.bin / name, integrations.path(name).read_text())


def write_config(site: Site, conf: Path, path: Path, reports: Path) -> Path:
    """The site's /etc/default/nodeagent, which both scripts source: nothing outside the test's
    folders. slurmd gives a HealthCheckProgram no SLURM_CONF (its only variable is SLURMD_NODENAME)
    and this cluster's slurm.conf is not at the default path, so the file exports it for scontrol."""
    settings = {
        "NODEAGENT_REPORT_DIR": reports,
        "NODEAGENT_BUDGET": BUDGET_S,
        "NODEAGENT_TIMEOUT": TIMEOUT_S,
        "TMPDIR": site.root / "tmp",
    }
    exported = {"SLURM_CONF": conf, "NODEAGENT_STATE_DIR": site.root / "state"}
    lines = [f"{name}={value}" for name, value in settings.items()]
    lines += [f"export {name}={value}" for name, value in exported.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_wrapper(site: Site, program: str, config: Path) -> Path:
    """What slurmd runs as Prolog or HealthCheckProgram: the shipped script, with the site's settings
    and the nodeagent the control file names for this node (by hostname, as the node knows itself)."""
    script = site.bin / f"slurm-{program}.sh"
    return write_executable(
        site.bin / program,
        "#!/bin/bash\n"
        "node=$(hostname -s)\n"
        f"control={site.control}/{program}-$node\n"
        "[[ -r $control ]] || exit 0\n"
        'NODEAGENT=$(<"$control")\n'
        f"export NODEAGENT NODEAGENT_CONFIG={config}\n"
        f'exec {script} 2>>"{site.logs}/{program}-$node.log"\n',
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    return make_site(tmp_path_factory.mktemp("site"))


@pytest.fixture(scope="module")
def cluster(site: Site, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    cluster = SlurmCluster(
        3,
        tmp_path_factory.mktemp("cluster"),
        prolog=site.bin / "prolog",
        health_check=site.bin / "healthcheck",
        health_check_interval=HEALTH_CHECK_INTERVAL_S,
        extra_conf=[
            "PrologFlags=Alloc",
            "SchedulerParameters=nohold_on_prolog_fail",
            f"MessageTimeout={MESSAGE_TIMEOUT_S}",
        ],
    )
    config = write_config(site, cluster.conf, site.root / "nodeagent.conf", site.reports)
    for program in ("prolog", "healthcheck"):
        write_wrapper(site, program, config)
    with cluster:
        yield cluster


@pytest.fixture(autouse=True)
def in_service(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test ends with every node in service, nothing chosen, no job, log or report left."""
    if "cluster" not in request.fixturenames:
        yield
        return
    cluster: SlurmCluster = request.getfixturevalue("cluster")
    site: Site = request.getfixturevalue("site")
    yield
    for folder in (site.control, site.logs, site.reports):
        for path in folder.iterdir():
            path.unlink()
    subprocess.run(["scancel", "--partition", cluster.partition], env=cluster.env, timeout=60, check=True)
    for node in cluster.nodes:
        cluster.start_slurmd(node)
    cluster.resume_all()
    for node in cluster.nodes:
        cluster.wait_for(node, lambda state, _: state == "IDLE")


def healthcheck(
    cluster: SlurmCluster, site: Site, node: str, nodeagent: str | Path, **extra: str
) -> subprocess.CompletedProcess[str]:
    """The shipped health check on the node as slurmd runs it: root, in the node's namespaces, with
    SLURMD_NODENAME and no other variable (no PATH either), and the site's settings file."""
    env = {
        "SLURMD_NODENAME": node,
        "NODEAGENT": str(nodeagent),
        "NODEAGENT_CONFIG": str(site.root / "nodeagent.conf"),
        **extra,
    }
    script = site.bin / "slurm-healthcheck.sh"
    return cluster.run_on(node, [str(script)], env=env, timeout=TIMEOUT_S + 30)


def settled(cluster: SlurmCluster, node: str) -> tuple[str, str | None]:
    """The node's (State, Reason) without the passing flags: COMPLETING until slurmd reports the last
    job's epilog done, and NOT_RESPONDING on a resumed node until its next ping answers (slurmctld's
    update_node sets it, node_mgr.c): a second or so."""
    transient = {"COMPLETING", "NOT_RESPONDING"}
    return cluster.wait_for(node, lambda state, _: not transient.intersection(state.split("+")))


def drained_by(reason: str) -> tuple[str, str]:
    return ("IDLE+DRAIN", reason)


# --- The cluster itself ---------------------------------------------------------------------------


def test_nodes_are_namespaces_known_by_their_hostname(cluster: SlurmCluster) -> None:
    assert cluster.nodes == ["n1", "n2", "n3"]
    assert [settled(cluster, node) for node in cluster.nodes] == [("IDLE", None)] * 3
    for node in cluster.nodes:
        inside = cluster.run_on(node, ["sh", "-c", "hostname; cat /proc/self/net/dev"])
        assert inside.returncode == 0, inside.stderr
        hostname, *devices = inside.stdout.splitlines()
        assert hostname == node
        assert {line.split(":")[0].strip() for line in devices if ":" in line} == {"lo", "eth0"}
    # A job lands on the node asked for and sees the node's hostname, as on a real cluster.
    job = subprocess.run(
        ["srun", "-w", "n2", "-p", cluster.partition, "hostname"],
        capture_output=True,
        text=True,
        env=cluster.env,
        timeout=JOB_TIMEOUT_S,
        check=False,
    )
    assert (job.returncode, job.stdout) == (0, "n2\n"), job.stderr
    settled(cluster, "n2")
    sinfo = subprocess.run(
        ["sinfo", "-h", "-o", "%P %D %t"],
        capture_output=True,
        text=True,
        env=cluster.env,
        timeout=60,
        check=False,
    )
    assert sinfo.stdout.split() == [f"{cluster.partition}*", "3", "idle"], sinfo.stderr


def test_a_restarted_slurmd_serves_jobs_again(cluster: SlurmCluster) -> None:
    cluster.stop_slurmd("n3")
    stopped = cluster.run_on("n3", ["scontrol", "show", "slurmd"])
    assert stopped.returncode != 0 and "Connection refused" in stopped.stderr
    assert cluster.run_on("n3", ["scontrol", "ping"]).returncode == 0  # the controller, from the node
    cluster.start_slurmd("n3")
    assert "Hostname                 = n3" in cluster.run_on("n3", ["scontrol", "show", "slurmd"]).stdout
    job = srun(cluster, "n3", "hostname")
    assert (job.returncode, job.stdout) == (0, "n3\n"), job.stderr
    assert settled(cluster, "n3") == ("IDLE", None)


def processes_in(namespaces: list[str]) -> list[psutil.Process]:
    """The processes whose network namespace is one of these."""
    inodes = {(NETNS_DIR / name).stat().st_ino for name in namespaces}
    found = []
    for proc in psutil.process_iter():
        try:
            if os.stat(f"/proc/{proc.pid}/ns/net").st_ino in inodes:
                found.append(proc)
        except OSError:
            continue
    return found


def test_closing_the_cluster_leaves_nothing_behind(slurm_cluster_factory: SlurmClusterFactory) -> None:
    """Daemons, a running job with its slurmstepd, the namespaces, the bridge: all gone."""
    small = slurm_cluster_factory(1)
    argv = ["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 300"]
    job_id = subprocess.run(
        argv, capture_output=True, text=True, env=small.env, timeout=60, check=True
    ).stdout
    small.wait_for("n1", lambda state, _: state.startswith(("ALLOCATED", "MIXED")))
    namespaces = small.namespaces
    assert len(namespaces) == 2  # the controller's and n1's
    # ALLOCATED comes before the batch step's slurmstepd has started the job: wait for it.
    wanted = {"munged", "slurmctld", "slurmd", "slurmstepd", "sleep"}
    deadline = time.monotonic() + 30
    while True:
        inside = processes_in(namespaces)
        names = {proc.name() for proc in inside}
        if wanted <= names or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert wanted <= names, (names, job_id)
    bridge = Path("/sys/class/net", small.bridge)
    assert bridge.exists()

    small.close()
    assert not [proc for proc in inside if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE]
    assert not [name for name in namespaces if (NETNS_DIR / name).exists()]
    assert not bridge.exists()


# --- The health check, run as slurmd runs it --------------------------------------------------------


def test_healthcheck_drains_a_refused_node_with_nodeagents_reason_and_resumes_it(
    cluster: SlurmCluster, site: Site
) -> None:
    refused = healthcheck(cluster, site, "n1", site.nodeagent("refuses"))
    assert refused.returncode == 1, refused.stderr
    assert settled(cluster, "n1") == drained_by(site.refused_reason)
    assert site.refused_reason.startswith("nodeagent: gpu/") and " FAIL: " in site.refused_reason
    # The log has each problem with its fix; the report went to the shared folder under the node's name.
    assert "nodeagent-healthcheck: node n1: drained: " in refused.stderr
    assert "uncorrectable ECC" in refused.stderr and "fix: " in refused.stderr
    report = json.loads((site.reports / "n1.json").read_text())
    assert report["verdict"]["allowed"] is False
    # Refused again for the same reason: the drain stands as it is.
    again = healthcheck(cluster, site, "n1", site.nodeagent("refuses"))
    assert again.returncode == 1 and "drained: " not in again.stderr, again.stderr
    assert settled(cluster, "n1") == drained_by(site.refused_reason)

    passes = healthcheck(cluster, site, "n1", site.nodeagent("passes"))
    assert passes.returncode == 0, passes.stderr
    assert settled(cluster, "n1") == ("IDLE", None)
    assert "passes again: resumed" in passes.stderr


def test_healthcheck_leaves_a_passing_node_alone(cluster: SlurmCluster, site: Site) -> None:
    proc = healthcheck(cluster, site, "n2", site.nodeagent("passes"))
    assert (proc.returncode, proc.stderr) == (0, "")
    assert settled(cluster, "n2") == ("IDLE", None)


def test_healthcheck_never_touches_someone_elses_drain(cluster: SlurmCluster, site: Site) -> None:
    cluster.scontrol("update", "nodename=n1", "state=drain", f"reason={SOMEONE_ELSES}")
    passes = healthcheck(cluster, site, "n1", site.nodeagent("passes"))
    assert passes.returncode == 0, passes.stderr
    assert settled(cluster, "n1") == drained_by(SOMEONE_ELSES)
    refused = healthcheck(cluster, site, "n1", site.nodeagent("refuses"))
    assert refused.returncode == 1
    assert settled(cluster, "n1") == drained_by(SOMEONE_ELSES)
    assert f"drained already by someone else ({SOMEONE_ELSES}): left as is" in refused.stderr


@pytest.mark.parametrize(
    ("nodeagent", "exit_code"),
    [("/nonexistent/nodeagent", 127), ("crashes", 70), ("segfaults", 128 + signal.SIGSEGV)],
    ids=["missing", "internal-error", "sigsegv"],
)
def test_healthcheck_leaves_the_node_as_it_is_when_nodeagent_cannot_judge(
    cluster: SlurmCluster, site: Site, nodeagent: str, exit_code: int
) -> None:
    """A broken install is the same on every node: it must not drain the cluster, nor resume a node
    that nothing vouches for. NODEAGENT_STRICT=1 drains instead."""
    program = nodeagent if nodeagent.startswith("/") else site.nodeagent(nodeagent)
    idle = healthcheck(cluster, site, "n1", program)
    assert idle.returncode == 0
    assert f"could not judge the node (exit {exit_code};" in idle.stderr
    assert settled(cluster, "n1") == ("IDLE", None)

    cluster.scontrol("update", "nodename=n1", "state=drain", f"reason={site.refused_reason}")
    drained = healthcheck(cluster, site, "n1", program)
    assert drained.returncode == 0
    assert settled(cluster, "n1") == drained_by(site.refused_reason)  # not resumed
    cluster.scontrol("update", "nodename=n1", "state=resume")

    strict = healthcheck(cluster, site, "n1", program, NODEAGENT_STRICT="1")
    assert strict.returncode == 1
    expected = f"nodeagent: preflight could not run (exit {exit_code}), NODEAGENT_STRICT=1"
    assert settled(cluster, "n1") == drained_by(expected)


def test_slurmd_runs_the_healthcheck_every_interval(cluster: SlurmCluster, site: Site) -> None:
    """slurm.conf's HealthCheckProgram, run by slurmd itself every HealthCheckInterval."""
    site.choose("healthcheck", "n3", "refuses")
    cluster.wait_for("n3", lambda state, reason: reason is not None, timeout=HEALTH_CHECK_INTERVAL_S * 10)
    assert settled(cluster, "n3") == drained_by(site.refused_reason)
    assert "nodeagent-healthcheck: node n3: drained: " in site.log("healthcheck", "n3")
    site.choose("healthcheck", "n3", "passes")
    cluster.wait_for("n3", lambda state, reason: state == "IDLE", timeout=HEALTH_CHECK_INTERVAL_S * 10)
    assert settled(cluster, "n3") == ("IDLE", None)
    assert "passes again: resumed" in site.log("healthcheck", "n3")
    assert [settled(cluster, node) for node in ("n1", "n2")] == [("IDLE", None)] * 2


def test_slurmd_runs_the_healthcheck_when_it_starts(site: Site, tmp_path: Path) -> None:
    """slurmd runs the program before it registers, so a node that fails comes up drained. A cluster
    of its own, whose interval is an hour: the run at slurmd's start is the only one in the test."""
    reports = tmp_path / "reports"
    log = tmp_path / "healthcheck.log"
    small = SlurmCluster(1, tmp_path, health_check=tmp_path / "healthcheck", health_check_interval=3600)
    config = write_config(site, small.conf, tmp_path / "nodeagent.conf", reports)
    write_executable(
        tmp_path / "healthcheck",
        f"#!/bin/bash\nexport NODEAGENT={site.nodeagent('refuses')} NODEAGENT_CONFIG={config}\n"
        f"exec {site.bin / 'slurm-healthcheck.sh'} 2>>{log}\n",
    )
    with small:
        assert settled(small, "n1") == drained_by(site.refused_reason)
        assert "nodeagent-healthcheck: node n1: drained: " in log.read_text()
        assert json.loads((reports / "n1.json").read_text())["verdict"]["allowed"] is False


# --- The prolog, run by slurmd for real jobs -----------------------------------------------------


def srun(
    cluster: SlurmCluster, node: str, *command: str, name: str = "test"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["srun", "-J", name, "-w", node, "-p", cluster.partition, "-t", "1", *command],
        capture_output=True,
        text=True,
        env=cluster.env,
        timeout=JOB_TIMEOUT_S,
        check=False,
    )


def job_fields(line: str) -> dict[str, str]:
    """A line of `scontrol show job -o`: Key=Value fields (the values read here hold no spaces)."""
    return dict(word.split("=", 1) for word in line.strip().split(" ") if "=" in word)


def show_job(cluster: SlurmCluster, job_id: str) -> dict[str, str]:
    return job_fields(cluster.scontrol("show", "job", "-o", job_id))


def test_prolog_refuses_a_node_before_an_interactive_job_runs_there(
    cluster: SlurmCluster, site: Site, tmp_path: Path
) -> None:
    """Slurm: "If the Prolog fails ... the node being set to a DRAIN state and the job requeued ...
    Only batch jobs can be requeued": an srun job is cancelled, and its command never runs."""
    site.choose("prolog", "n1", "refuses")
    marker = tmp_path / "ran"
    job = srun(cluster, "n1", "touch", str(marker), name="refused-interactive")
    assert job.returncode != 0
    assert "Prolog failure on node n1" in job.stderr, job.stderr
    assert not marker.exists()
    # nodeagent's reason, not Slurm's "Prolog error": the prolog drained the node first.
    assert settled(cluster, "n1") == drained_by(site.refused_reason)
    log = site.log("prolog", "n1")
    assert "nodeagent-prolog: node n1 job " in log and "drained: " in log and "fix: " in log
    assert json.loads((site.reports / "n1.json").read_text())["verdict"]["allowed"] is False
    jobs = [job_fields(line) for line in cluster.scontrol("show", "job", "-o").splitlines()]
    (ours,) = [fields for fields in jobs if fields.get("JobName") == "refused-interactive"]
    assert (ours["JobState"], ours["NodeList"], ours["BatchFlag"]) == ("CANCELLED", "n1", "0"), ours


def test_prolog_refusal_requeues_a_batch_job(cluster: SlurmCluster, site: Site, tmp_path: Path) -> None:
    """A batch job goes back to the queue, not held (nohold_on_prolog_fail), and did not run. Slurm
    makes a requeued job eligible again only minutes later (its EligibleTime), so it stays PENDING
    here; the test's cleanup cancels it."""
    site.choose("prolog", "n1", "refuses")
    marker = tmp_path / "ran"
    argv = ["sbatch", "--parsable", "-w", "n1", "-p", cluster.partition, "-t", "1", "-o", "/dev/null"]
    submitted = subprocess.run(
        [*argv, "--wrap", f"touch {marker}"],
        capture_output=True,
        text=True,
        env=cluster.env,
        timeout=60,
        check=True,
    )
    job_id = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + JOB_TIMEOUT_S
    # Requeued, the job passes through COMPLETING (its node ending the allocation) before PENDING.
    while (fields := show_job(cluster, job_id))["Restarts"] == "0" or fields["JobState"] == "COMPLETING":
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert fields["Restarts"] == "1" and fields["JobState"] == "PENDING", fields
    assert fields["Priority"] != "0" and "held" not in fields["Reason"].lower(), fields  # not held
    assert settled(cluster, "n1") == drained_by(site.refused_reason)
    assert not marker.exists()


def test_prolog_lets_a_job_run_on_a_passing_node(cluster: SlurmCluster, site: Site) -> None:
    site.choose("prolog", "n2", "passes")
    job = srun(cluster, "n2", "hostname")
    assert (job.returncode, job.stdout) == (0, "n2\n"), job.stderr
    assert settled(cluster, "n2") == ("IDLE", None)
    assert site.log("prolog", "n2") == ""  # a passing node: nothing to log
    assert json.loads((site.reports / "n2.json").read_text())["verdict"]["allowed"] is True


def test_prolog_lets_jobs_run_when_nodeagent_cannot_judge(cluster: SlurmCluster, site: Site) -> None:
    site.choose("prolog", "n2", "crashes")
    job = srun(cluster, "n2", "hostname")
    assert (job.returncode, job.stdout) == (0, "n2\n"), job.stderr
    assert settled(cluster, "n2") == ("IDLE", None)
    assert "could not judge the node (exit 70;" in site.log("prolog", "n2")


# --- The prolog running a new nodeagent.pyz: nothing unpacked yet ---------------------------------


def _wait_for_the_background_unpack(pex_root: Path) -> None:
    """Until the unpack the prolog started ends: it holds flock(2) on its lock file from before the
    prolog's run exits (the test's time limit bounds the wait)."""
    for path in pex_root.glob("nodeagent-unpack.*.lock"):
        with path.open("rb") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)


@pytest.mark.timeout(pyzbuild.BUILD_TIMEOUT_S + 300)  # `make pyz` first, when no other test built it
def test_prolog_with_a_new_pyz_lets_jobs_run_and_judges_the_node_once_unpacked(
    cluster: SlurmCluster, site: Site, tmp_path: Path
) -> None:
    """The file on a shared file system, new (a first install or an upgrade), and a node whose cache
    is empty: the first job's prolog does not unpack in slurmd's wait but in the background, says so
    (exit 75, logged) and lets the job run with the node in service; the next job's prolog judges
    the node (its report)."""
    pyz = tmp_path / "nodeagent.pyz"
    shutil.copy2(pyzbuild.make_pyz(), pyz)
    pex_root = tmp_path / "pex-root"
    tree = site.root / "trees" / PASSING_MACHINE
    write_executable(
        site.nodeagent("pyz"),
        f"#!/bin/bash\nexport PEX_ROOT={pex_root}\ncommand=$1; shift\n"
        f'exec /usr/bin/python3 {pyz} "$command" --root {tree} "$@"\n',
    )
    site.choose("prolog", "n2", "pyz")
    try:
        first = srun(cluster, "n2", "hostname")
        assert (first.returncode, first.stdout) == (0, "n2\n"), first.stderr
        assert settled(cluster, "n2") == ("IDLE", None)
        logged = site.log("prolog", "n2")
        assert "could not judge the node yet (exit 75" in logged, logged
        assert not (site.reports / "n2.json").exists()
    finally:
        _wait_for_the_background_unpack(pex_root)
    second = srun(cluster, "n2", "hostname")
    assert (second.returncode, second.stdout) == (0, "n2\n"), second.stderr
    assert settled(cluster, "n2") == ("IDLE", None)
    assert site.log("prolog", "n2") == logged  # judged, and a passing node logs nothing
    assert json.loads((site.reports / "n2.json").read_text())["verdict"]["allowed"] is True
