"""The scheduler and launcher integration files (nodeagent/integrations): every shell script parses
and passes shellcheck; the YAML parses into the expected Kubernetes objects; the Slurm prolog and
health check are RUN with fake `nodeagent` and `scontrol` executables on PATH (scripts recording
their argv, and a node state the fake scontrol keeps), and so are the launchers with fake
torchrun, mpirun, horovodrun and ssh."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeagent import integrations
from nodeagent.core.errors import UsageError
from tests.support.cli import RunCli
from tests.support.paths import REPO, VM

SCRIPTS = [n for n in integrations.names() if n.endswith(".sh")]
REASON = "nodeagent: gpu/0000:34:00.0 FAIL: 1 uncorrectable ECC error(s) (playbook preflight)"
# What the fake writes to --output text:PATH: the problems and their fixes, for the node's log.
PROBLEMS = (
    "FAIL    gpu/0000:34:00.0: GPU0 (0000:34:00.0): 1 uncorrectable ECC error(s) since the driver loaded",
    "        fix: Drain the node; reset the GPU (https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/)",
)

# --- Fakes -----------------------------------------------------------------------------------------

# Every fake appends its argv (a JSON list) to $FAKE_LOG/NAME.argv.
_RECORD = """
import json, os, sys, time
def record(name):
    with open(os.path.join(os.environ["FAKE_LOG"], name + ".argv"), "a") as f:
        f.write(json.dumps(sys.argv[1:]) + "\\n")
"""

# nodeagent: FAKE_MODE says what `preflight` does; it writes --output json:PATH (and text:PATH when
# it fails) like the real one.
FAKE_NODEAGENT = (
    _RECORD
    + """
record("nodeagent")
args = sys.argv[1:]
mode = os.environ.get("FAKE_MODE", "pass")
if args[:1] == ["exec"] and os.environ.get("REAL_NODEAGENT"):  # the real launcher runs the rank
    os.execv(os.environ["REAL_NODEAGENT"], [os.environ["REAL_NODEAGENT"], *args])
if args[:1] == ["preflight"]:
    for i, a in enumerate(args):
        if a == "--output" and args[i + 1].startswith("json:"):
            with open(args[i + 1][5:], "w") as f:
                json.dump({"schema": 1, "host": "node07", "status": mode, "findings": []}, f)
        if a == "--output" and args[i + 1].startswith("text:") and mode == "fail":
            with open(args[i + 1][5:], "w") as f:
                f.write(os.environ["FAKE_PROBLEMS"])
    if mode == "pass":
        print("nodeagent preflight OK")
        sys.exit(0)
    if mode == "fail":
        print(os.environ["FAKE_REASON"])
        sys.exit(2)
    if mode == "crash":
        print("internal error: KeyError: 'x' (set NODEAGENT_DEBUG=1 for the traceback)", file=sys.stderr)
        sys.exit(70)
    if mode == "broken":  # Python failing before nodeagent runs: exit 1, a traceback, no reason
        print("ModuleNotFoundError: No module named 'nodeagent'", file=sys.stderr)
        sys.exit(1)
    if mode == "hang":
        time.sleep(60)
    if mode == "cold":  # nodeagent.pyz before its build is unpacked: minutes in the foreground
        if os.environ.get("NODEAGENT_NO_UNPACK") == "1":
            print("nodeagent: busy: this build of nodeagent.pyz is not unpacked yet", file=sys.stderr)
            sys.exit(75)
        time.sleep(60)
sys.exit(0)
"""
)

# scontrol: a node whose state and reason live in $FAKE_LOG/node.json, printed as `scontrol show
# node` prints them (src/api/node_info.c: "   State=..." and "   Reason=TEXT [user@time]" lines).
FAKE_SCONTROL = (
    _RECORD
    + """
record("scontrol")
args = sys.argv[1:]
if os.environ.get("FAKE_SCONTROL_FAIL"):
    print("slurm_update error: Unable to contact slurm controller (connect failure)", file=sys.stderr)
    sys.exit(1)
path = os.path.join(os.environ["FAKE_LOG"], "node.json")
node = json.load(open(path)) if os.path.exists(path) else {"state": "IDLE", "reason": ""}
if args[:2] == ["show", "hostnames"]:
    print("node01\\nnode02")
elif args[:2] == ["show", "node"]:
    print(f"NodeName={args[2]} Arch=x86_64 CoresPerSocket=32")
    print(f"   State={node['state']} ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A")
    print("   Partitions=gpu")
    if node["reason"]:
        print(f"   Reason={node['reason']} [root@2025-01-01T00:00:00]")
elif args[:1] == ["update"]:
    fields = dict(a.split("=", 1) for a in args[1:])
    base = node["state"].split("+")[0]
    if fields["state"] == "drain":
        node = {"state": base + "+DRAIN", "reason": fields["reason"]}
    elif fields["state"] == "resume":
        node = {"state": base, "reason": ""}
    json.dump(node, open(path, "w"))
"""
)

# A launcher: records its argv; runs nothing unless told (FAKE_MODE=fail fails a preflight it runs).
FAKE_LAUNCHER = (
    _RECORD
    + """
name = os.path.basename(sys.argv[0])
record(name)
args = sys.argv[1:]
if "preflight" in args:
    sys.exit(2 if os.environ.get("FAKE_MODE") == "fail" else 0)
import subprocess
if name == "horovodrun":  # run the command of one slot, as Gloo does, with the slot's local rank
    command = args[args.index("-H") + 2:]
    sys.exit(subprocess.run(command, env={**os.environ, "HOROVOD_LOCAL_RANK": "3"}).returncode)
if os.environ.get("FAKE_RUN_RANK"):  # run one rank's command, with the rank variable each one sets
    if name == "torchrun":
        command, var = args[args.index("--no-python") + 1:], "LOCAL_RANK"
    else:
        command, var = args[args.index("nodeagent"):], "OMPI_COMM_WORLD_LOCAL_RANK"
    sys.exit(subprocess.run(command, env={**os.environ, var: "1"}).returncode)
"""
)


@dataclass
class Node:
    """A tmp folder with the fakes on PATH, a log of their calls and the fake node's state."""

    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def reports(self) -> Path:
        return self.root / "reports"

    def fake(self, name: str, source: str) -> None:
        path = self.bin / name
        path.write_text(f"#!{sys.executable}\n{source}")
        path.chmod(0o755)

    def calls(self, name: str) -> list[list[str]]:
        path = self.log / f"{name}.argv"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def set_state(self, state: str, reason: str = "") -> None:
        (self.log / "node.json").write_text(json.dumps({"state": state, "reason": reason}))

    def state(self) -> dict[str, str]:
        path = self.log / "node.json"
        return json.loads(path.read_text()) if path.exists() else {"state": "IDLE", "reason": ""}

    def run(self, script: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        base = {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "FAKE_LOG": str(self.log),
            "FAKE_REASON": REASON,
            "FAKE_PROBLEMS": "".join(f"{line}\n" for line in PROBLEMS),
            "SLURMD_NODENAME": "node07",
            "SLURM_JOB_ID": "4242",
            "NODEAGENT_CONFIG": str(self.root / "no-such-config"),
            "NODEAGENT_INSTALLED": str(self.root / "opt" / "bin" / "nodeagent"),
            "NODEAGENT_REPORT_DIR": str(self.reports),
            "TMPDIR": str(self.root),
            "HOME": str(self.root),
        }
        return subprocess.run(
            ["bash", str(integrations.path(script)), *args],
            env=base | env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


@pytest.fixture
def node(tmp_path: Path) -> Node:
    n = Node(tmp_path)
    for folder in (n.bin, n.log):
        folder.mkdir()
    n.fake("nodeagent", FAKE_NODEAGENT)
    n.fake("scontrol", FAKE_SCONTROL)
    for launcher in ("torchrun", "mpirun", "horovodrun", "ssh"):
        n.fake(launcher, FAKE_LAUNCHER)
    return n


def drains(node: Node) -> list[list[str]]:
    return [c for c in node.calls("scontrol") if c[:1] == ["update"] and "state=drain" in c]


# --- Static checks ---------------------------------------------------------------------------------


def test_the_files_are_listed_and_found() -> None:
    assert set(integrations.names()) == {
        "slurm-prolog.sh",
        "slurm-healthcheck.sh",
        "k8s-initcontainer.yaml",
        "k8s-daemonset.yaml",
        "prometheus-alerts.yaml",
        "launch-torchrun.sh",
        "launch-mpirun.sh",
        "launch-horovodrun.sh",
    }
    for name in integrations.names():
        assert integrations.path(name).is_file()
    with pytest.raises(UsageError, match=r"slurm-prolog\.sh"):
        integrations.path("nope.sh")


def test_nodeagent_integrations_lists_each_file_with_what_it_is_and_where_it_goes(
    run_cli: RunCli,
) -> None:
    code, out, err = run_cli("integrations")
    assert code == 0 and err == ""
    lines = out.splitlines()
    names = integrations.names()
    assert len(lines) == 2 * len(names)
    for name, (first, second) in zip(names, zip(lines[::2], lines[1::2], strict=True), strict=True):
        about = integrations.FILES[name]
        assert first.split(maxsplit=1) == [name, about.what]
        assert second.split(maxsplit=1) == ["install:", about.where]
        assert about.what and about.where and "\n" not in about.what + about.where


# Where the file's own header says it goes: `integrations show NAME > PATH`, a command line that
# runs it, or the file Prometheus or kubectl is given.
HEADER_PLACE = re.compile(
    r"^#\s+(?:nodeagent integrations show \S+ > (\S+)"
    r"|.*?(\S*launch-\S+\.sh train\.py)|.*?(rule_files)|.*?(kubectl apply))",
    re.MULTILINE,
)


@pytest.mark.parametrize("name", integrations.names())
def test_where_a_file_goes_is_what_its_header_says(name: str) -> None:
    """The listing is a table in the package; each file's header is the long form, which holds it
    to the table (the daemonset's header sends the reader to docs/deployment.md)."""
    where = integrations.FILES[name].where
    lines = integrations.path(name).read_text().splitlines()
    header = "\n".join(itertools.takewhile(lambda line: line.startswith("#"), lines))
    places = [next(g for g in m.groups() if g) for m in HEADER_PLACE.finditer(header)]
    if name == "k8s-daemonset.yaml":
        assert places == [] and "kubectl apply" in where
        return
    assert places, header
    assert places[0] in where


@pytest.mark.parametrize("name", SCRIPTS)
def test_each_script_parses(name: str) -> None:
    proc = subprocess.run(
        ["bash", "-n", str(integrations.path(name))], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    text = integrations.path(name).read_text()
    assert text.startswith("#!/bin/bash\n") and "set -euo pipefail" in text


def shellcheck(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (Debian package shellcheck)")
    return subprocess.run(["shellcheck", *args], capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("name", SCRIPTS)
def test_each_script_passes_shellcheck(name: str) -> None:
    proc = shellcheck(str(integrations.path(name)))
    assert proc.returncode == 0, proc.stdout


def test_the_image_build_script_passes_shellcheck() -> None:
    # `make image`'s script (tests/integration/test_image.py builds with it, as root only).
    proc = shellcheck(str(REPO / "build-aux" / "image.sh"))
    assert proc.returncode == 0, proc.stdout


def manifests(name: str) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(integrations.path(name).read_text()) if d is not None]
    assert docs and all(isinstance(d, dict) for d in docs)
    return docs


def mounts(container: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["mountPath"]: m for m in container.get("volumeMounts", [])}


def host_paths(pod: Mapping[str, Any]) -> dict[str, str]:
    return {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}


def check_node_view(container: Mapping[str, Any], pod: Mapping[str, Any]) -> None:
    """/sys and /proc of the node, read-only at /host, and a locked-down container."""
    m = mounts(container)
    paths = host_paths(pod)
    for where, source in (("/host/sys", "/sys"), ("/host/proc", "/proc")):
        assert m[where]["readOnly"] is True
        assert paths[m[where]["name"]] == source
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert "privileged" not in security
    assert {"requests", "limits"} <= set(container["resources"])
    assert not pod.get("hostPID") and not pod.get("hostNetwork")


def command_of(container: Mapping[str, Any]) -> str:
    return " ".join([*container.get("command", []), *container.get("args", [])])


def test_the_init_container_gates_the_training_container() -> None:
    (job,) = manifests("k8s-initcontainer.yaml")
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (init,) = pod["initContainers"]
    command = command_of(init)
    assert "nodeagent preflight" in command and "--playbook gpu-training" in command
    assert "--root /host --hostname $(NODE_NAME)" in command  # more in tests/unit/test_k8s_manifests.py
    env = {e["name"]: e for e in init["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    check_node_view(init, pod)
    (trainer,) = pod["containers"]
    assert trainer["resources"]["limits"]["nvidia.com/gpu"] == 8


def test_the_daemonset_feeds_the_textfile_collector() -> None:
    (ds,) = manifests("k8s-daemonset.yaml")
    assert ds["apiVersion"] == "apps/v1" and ds["kind"] == "DaemonSet"
    pod = ds["spec"]["template"]["spec"]
    assert ds["spec"]["selector"]["matchLabels"] == ds["spec"]["template"]["metadata"]["labels"]
    (agent,) = pod["containers"]
    command = command_of(agent)
    assert "nodeagent check" in command and "--format json" in command
    assert "--output prometheus:/var/lib/node-exporter/textfile/nodeagent.prom" in command
    assert "while true" in command and 'sleep "$NODEAGENT_INTERVAL_S"' in command
    textfile = mounts(agent)["/var/lib/node-exporter/textfile"]
    assert not textfile.get("readOnly")
    assert host_paths(pod)[textfile["name"]] == "/var/lib/node-exporter/textfile"
    check_node_view(agent, pod)


@pytest.mark.parametrize("name", ["k8s-initcontainer.yaml", "k8s-daemonset.yaml"])
def test_the_embedded_shell_scripts_parse(name: str, tmp_path: Path) -> None:
    (doc,) = manifests(name)
    pod = doc["spec"]["template"]["spec"]
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        if container.get("command", [])[:2] != ["/bin/sh", "-c"]:
            continue
        script = tmp_path / f"{container['name']}.sh"
        script.write_text("#!/bin/sh\n" + container["args"][0])
        proc = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
        if shutil.which("shellcheck"):
            checked = shellcheck("--shell=sh", "--exclude=SC2154", str(script))  # env comes from the Pod
            assert checked.returncode == 0, checked.stdout


# --- The Slurm prolog, run ------------------------------------------------------------------------


def test_prolog_allows_a_good_node(node: Node) -> None:
    proc = node.run("slurm-prolog.sh", FAKE_MODE="pass")
    assert proc.returncode == 0, proc.stderr
    assert node.calls("scontrol") == []
    (call,) = node.calls("nodeagent")
    assert call[:7] == ["preflight", "--playbook", "preflight", "--budget", "5", "--format", "slurm"]
    assert call[7] == "--output" and call[8].startswith("json:")
    assert call[9] == "--output" and call[10].startswith("text:")  # the problems, for the log
    # The JSON went to the shared folder under the node's name, renamed into place whole.
    assert json.loads((node.reports / "node07.json").read_text())["host"] == "node07"
    assert [p.name for p in node.reports.iterdir()] == ["node07.json"]
    assert not [p for p in node.root.iterdir() if p.name.startswith("nodeagent-prolog.")]  # cleaned up


def test_prolog_drains_a_refused_node_with_nodeagents_reason(node: Node) -> None:
    proc = node.run("slurm-prolog.sh", FAKE_MODE="fail")
    assert proc.returncode != 0
    assert drains(node) == [["update", "nodename=node07", "state=drain", f"reason={REASON}"]]
    assert node.state() == {"state": "IDLE+DRAIN", "reason": REASON}
    assert "drained" in proc.stderr and "job 4242" in proc.stderr
    assert (node.reports / "node07.json").exists()  # the evidence is kept for `report merge`
    # The reason is cut for sinfo; the log has every problem and its fix, a line each.
    for line in PROBLEMS:
        assert f"nodeagent-prolog: node node07 job 4242:   {line}\n" in proc.stderr


def test_prolog_with_the_real_nodeagent(node: Node) -> None:
    """The real `nodeagent preflight` (on the recorded VM, which has warnings) behind the prolog: its
    one-line reason becomes the drain reason, and its JSON report is one `report merge` reads."""
    from nodeagent.cluster.merge import merge_reports

    (node.bin / "nodeagent").write_text(
        f'#!/bin/bash\ncommand=$1; shift\nexec {sys.executable} -m nodeagent "$command" --root {VM} "$@"\n'
    )
    proc = node.run("slurm-prolog.sh", NODEAGENT_FAIL_ON="warn", NODEAGENT_TIMEOUT="60")
    assert proc.returncode != 0, proc.stderr
    (drain,) = drains(node)
    reason = drain[-1].removeprefix("reason=")
    assert reason.startswith("nodeagent: kernel/memlock WARN: memlock limited") and "\n" not in reason
    assert reason.endswith(" more") and len(reason) <= 120
    assert node.state()["reason"] == reason
    # The log: each problem as the piped command prints it, with its fix.
    assert "job 4242:   WARN    kernel/memlock: memlock limited" in proc.stderr
    assert "job 4242:           fix: Set '* soft memlock unlimited'" in proc.stderr
    merged = merge_reports([node.reports])
    assert list(merged.outcomes) == ["vm"] and merged.outcomes["vm"].ok
    assert (merged.outcomes["vm"].doc or {})["verdict"]["allowed"] is False


def test_prolog_settings_reach_nodeagent(node: Node) -> None:
    proc = node.run(
        "slurm-prolog.sh",
        NODEAGENT_PLAYBOOK="gpu-training",
        NODEAGENT_BUDGET="3",
        NODEAGENT_FAIL_ON="warn",
        NODEAGENT_REPORT_DIR="",
    )
    assert proc.returncode == 0, proc.stderr
    (call,) = node.calls("nodeagent")
    assert call[1:5] == ["--playbook", "gpu-training", "--budget", "3"]
    assert call[-2:] == ["--fail-on", "warn"]
    assert not node.reports.exists()  # an empty NODEAGENT_REPORT_DIR writes no report


def test_prolog_settings_come_from_the_config_file(node: Node) -> None:
    config = node.root / "nodeagent.conf"
    config.write_text("NODEAGENT_PLAYBOOK=cpu-training\n")
    assert node.run("slurm-prolog.sh", NODEAGENT_CONFIG=str(config)).returncode == 0
    assert node.calls("nodeagent")[0][1:3] == ["--playbook", "cpu-training"]


@pytest.mark.parametrize(
    ("env", "exit_code"),
    [
        ({"NODEAGENT": "/nonexistent/nodeagent"}, 127),
        ({"FAKE_MODE": "crash"}, 70),
        ({"FAKE_MODE": "broken"}, 1),
    ],
)
def test_prolog_lets_jobs_run_when_nodeagent_cannot_judge(
    node: Node, env: dict[str, str], exit_code: int
) -> None:
    """Documented: a missing or crashing nodeagent is logged, never drains (it would drain every node)."""
    proc = node.run("slurm-prolog.sh", **env)
    assert proc.returncode == 0, proc.stderr
    assert drains(node) == []
    assert f"could not judge the node (exit {exit_code}" in proc.stderr
    strict = node.run("slurm-prolog.sh", NODEAGENT_STRICT="1", **env)
    assert strict.returncode != 0
    (drain,) = drains(node)
    assert drain[-1] == f"reason=nodeagent: preflight could not run (exit {exit_code}), NODEAGENT_STRICT=1"


def test_prolog_drains_a_hung_node_when_the_timeout_fires(node: Node) -> None:
    proc = node.run("slurm-prolog.sh", FAKE_MODE="hang", NODEAGENT_TIMEOUT="1")
    assert proc.returncode != 0
    (drain,) = drains(node)
    assert drain[-1].startswith("reason=nodeagent: preflight hung, no answer in 1s")


@pytest.mark.parametrize("strict", ["0", "1"])
def test_prolog_lets_the_job_run_while_a_first_run_of_the_pyz_unpacks(node: Node, strict: str) -> None:
    """The pyz's first run of a build unpacks for longer than the prolog's timeout: told not to
    (NODEAGENT_NO_UNPACK=1), it exits 75 at once, and that is no hung check, strict or not."""
    proc = node.run("slurm-prolog.sh", FAKE_MODE="cold", NODEAGENT_TIMEOUT="5", NODEAGENT_STRICT=strict)
    assert proc.returncode == 0, proc.stderr
    assert drains(node) == []
    assert "could not judge the node yet (exit 75" in proc.stderr
    assert "busy: this build of nodeagent.pyz is not unpacked yet" in proc.stderr  # the pyz's own line


def test_prolog_prefers_the_installed_entry_point(node: Node) -> None:
    """`nodeagent.pyz install DIR` makes DIR/bin/nodeagent, which starts with nothing to unpack."""
    installed = node.root / "opt" / "bin" / "nodeagent"
    installed.parent.mkdir(parents=True)
    source = FAKE_NODEAGENT.replace('record("nodeagent")', 'record("installed")')
    installed.write_text(f"#!{sys.executable}\n{source}")
    installed.chmod(0o755)
    assert node.run("slurm-prolog.sh", FAKE_MODE="pass").returncode == 0
    assert len(node.calls("installed")) == 1
    assert node.calls("nodeagent") == []


def test_prolog_refuses_even_when_scontrol_fails(node: Node) -> None:
    """Slurm drains the node itself on the prolog's failure ("Prolog error"): the job must not run."""
    proc = node.run("slurm-prolog.sh", FAKE_MODE="fail", FAKE_SCONTROL_FAIL="1")
    assert proc.returncode != 0
    assert "scontrol could not drain" in proc.stderr


def test_prolog_verdict_survives_an_unwritable_report_folder(node: Node) -> None:
    blocked = node.root / "file-not-folder"
    blocked.write_text("")
    proc = node.run("slurm-prolog.sh", FAKE_MODE="fail", NODEAGENT_REPORT_DIR=str(blocked))
    assert proc.returncode != 0 and len(drains(node)) == 1
    assert "could not write the report" in proc.stderr


# --- The Slurm health check, run ------------------------------------------------------------------


def test_healthcheck_drains_a_failing_node(node: Node) -> None:
    proc = node.run("slurm-healthcheck.sh", FAKE_MODE="fail")
    assert proc.returncode != 0
    assert node.state() == {"state": "IDLE+DRAIN", "reason": REASON}
    (call,) = node.calls("nodeagent")
    assert call[1:5] == ["--playbook", "preflight", "--budget", "30"]
    assert all(f"node node07:   {line}\n" in proc.stderr for line in PROBLEMS), proc.stderr
    # Failing again with the same reason changes nothing (and logs nothing again).
    again = node.run("slurm-healthcheck.sh", FAKE_MODE="fail")
    assert len(drains(node)) == 1
    assert PROBLEMS[0] not in again.stderr


def test_healthcheck_resumes_its_own_drain(node: Node) -> None:
    node.set_state("IDLE+DRAIN", REASON)
    proc = node.run("slurm-healthcheck.sh", FAKE_MODE="pass")
    assert proc.returncode == 0, proc.stderr
    assert ["update", "nodename=node07", "state=resume"] in node.calls("scontrol")
    assert node.state() == {"state": "IDLE", "reason": ""}
    assert "resumed" in proc.stderr


def test_healthcheck_never_resumes_someone_elses_drain(node: Node) -> None:
    node.set_state("IDLE+DRAIN", "DIMM replacement, ticket 1234")
    assert node.run("slurm-healthcheck.sh", FAKE_MODE="pass").returncode == 0
    assert node.state() == {"state": "IDLE+DRAIN", "reason": "DIMM replacement, ticket 1234"}
    # ... nor overwrites its reason when the node also fails.
    proc = node.run("slurm-healthcheck.sh", FAKE_MODE="fail")
    assert node.state()["reason"] == "DIMM replacement, ticket 1234"
    assert [c for c in node.calls("scontrol") if c[0] == "update"] == []
    assert "drained already by someone else" in proc.stderr


def test_healthcheck_leaves_a_healthy_node_alone(node: Node) -> None:
    assert node.run("slurm-healthcheck.sh", FAKE_MODE="pass").returncode == 0
    assert [c for c in node.calls("scontrol") if c[0] == "update"] == []


def test_healthcheck_does_nothing_when_nodeagent_cannot_judge(node: Node) -> None:
    node.set_state("IDLE+DRAIN", REASON)
    proc = node.run("slurm-healthcheck.sh", FAKE_MODE="crash")
    assert proc.returncode == 0
    assert node.state() == {"state": "IDLE+DRAIN", "reason": REASON}  # neither resumed nor drained
    assert "could not judge" in proc.stderr


def test_healthcheck_leaves_the_node_while_a_first_run_of_the_pyz_unpacks(node: Node) -> None:
    node.set_state("IDLE+DRAIN", REASON)
    proc = node.run("slurm-healthcheck.sh", FAKE_MODE="cold", NODEAGENT_TIMEOUT="5", NODEAGENT_STRICT="1")
    assert proc.returncode == 0, proc.stderr
    assert node.state() == {"state": "IDLE+DRAIN", "reason": REASON}  # neither resumed nor drained again
    assert [c for c in node.calls("scontrol") if c[0] == "update"] == []
    assert "could not judge the node yet (exit 75" in proc.stderr


def test_healthcheck_drains_a_hung_node(node: Node) -> None:
    proc = node.run("slurm-healthcheck.sh", FAKE_MODE="hang", NODEAGENT_TIMEOUT="1")
    assert proc.returncode != 0
    assert node.state()["reason"].startswith("nodeagent: preflight hung")


# --- The launchers, run ---------------------------------------------------------------------------


def test_torchrun_runs_each_worker_through_nodeagent_exec(node: Node) -> None:
    proc = node.run(
        "launch-torchrun.sh",
        "train.py",
        "--epochs",
        "3",
        SLURM_NNODES="2",
        SLURM_GPUS_ON_NODE="8",
        SLURM_JOB_NODELIST="node[01-02]",
        NODEAGENT_PROFILE="tuned",
    )
    assert proc.returncode == 0, proc.stderr
    assert node.calls("nodeagent") == [["preflight", "--playbook", "gpu-training"]]
    (argv,) = node.calls("torchrun")
    assert argv[argv.index("--nnodes") + 1] == "2"
    assert argv[argv.index("--nproc-per-node") + 1] == "8"
    assert argv[argv.index("--rdzv-endpoint") + 1] == "node01:29500"
    tail = ["--no-python", "nodeagent", "exec", "--profile", "tuned", "--", "python", "train.py"]
    assert argv[-len(tail) - 2 :] == [*tail, "--epochs", "3"]


def test_mpirun_gates_every_node_then_binds_nothing_itself(node: Node) -> None:
    proc = node.run("launch-mpirun.sh", "train.py", NP="16", CUDA_VISIBLE_DEVICES="0,1")
    assert proc.returncode == 0, proc.stderr
    gate, ranks = node.calls("mpirun")
    assert gate == ["--map-by", "ppr:1:node", "nodeagent", "preflight", "--playbook", "gpu-training"]
    assert ranks[:2] == ["-np", "16"]
    assert ranks[ranks.index("--bind-to") + 1] == "none"
    exported = [ranks[i + 1] for i, a in enumerate(ranks) if a == "-x"]
    assert "CUDA_VISIBLE_DEVICES" in exported
    # No profile named: the default one, which a node never tuned may lack (the job then runs as is).
    assert ranks[-5:] == ["nodeagent", "exec", "--", "python", "train.py"]


def test_mpirun_passes_a_named_profile_to_every_rank(node: Node) -> None:
    proc = node.run("launch-mpirun.sh", "train.py", NP="2", NODEAGENT_PROFILE="tuned")
    assert proc.returncode == 0, proc.stderr
    _, ranks = node.calls("mpirun")
    assert "NODEAGENT_PROFILE" in [ranks[i + 1] for i, a in enumerate(ranks) if a == "-x"]
    assert ranks[-7:] == ["nodeagent", "exec", "--profile", "tuned", "--", "python", "train.py"]


@pytest.mark.parametrize(
    ("named", "profile"), [({}, []), ({"NODEAGENT_PROFILE": "tuned"}, ["--profile", "tuned"])]
)
def test_horovodrun_passes_gloos_local_rank(node: Node, named: dict[str, str], profile: list[str]) -> None:
    proc = node.run(
        "launch-horovodrun.sh", "train.py", "--lr", "0.1", NP="4", HOSTS="localhost:2,gpu2:2", **named
    )
    assert proc.returncode == 0, proc.stderr
    gate = ["preflight", "--playbook", "gpu-training"]
    assert node.calls("ssh") == [["-o", "BatchMode=yes", "gpu2", "nodeagent", *gate]]
    local_gate, rank = node.calls("nodeagent")
    assert local_gate == gate
    # The fake horovodrun ran one slot's command with HOROVOD_LOCAL_RANK=3, as Gloo sets it.
    job = ["python", "train.py", "--lr", "0.1"]
    assert rank == ["exec", *profile, "--local-rank", "3", "--", *job]


# Each launcher script, the launcher it starts the ranks with, and what it needs on a node of two
# ranks.
LAUNCHERS = [
    ("launch-torchrun.sh", "torchrun", {}),
    ("launch-mpirun.sh", "mpirun", {"NP": "2"}),
    ("launch-horovodrun.sh", "horovodrun", {"NP": "2"}),
]


@pytest.mark.parametrize(("script", "launcher", "env"), LAUNCHERS)
def test_a_refused_node_stops_the_launch(node: Node, script: str, launcher: str, env: dict[str, str]) -> None:
    proc = node.run(script, "train.py", FAKE_MODE="fail", **env)
    assert proc.returncode != 0
    assert "refused" in proc.stderr
    assert [c for c in node.calls(launcher) if "preflight" not in c] == []  # no rank started
    skipped = node.run(script, "train.py", NODEAGENT_PREFLIGHT="0", FAKE_MODE="fail", **env)
    assert skipped.returncode == 0, skipped.stderr


# A training script: says it ran, with what environment, and exits 3 (so the exit code is the job's).
TRAIN = """
import json, os, sys
with open(os.environ["RAN_MARKER"], "w") as f:
    json.dump({"argv": sys.argv[1:], "tf_data_hook": os.environ.get("NODEAGENT_TF_DATA_OPTIONS"),
               "threads": os.environ.get("TF_NUM_INTRAOP_THREADS")}, f)
sys.exit(3)
"""


@pytest.mark.parametrize(("script", "env"), [(script, env) for script, _, env in LAUNCHERS])
def test_a_node_without_a_profile_runs_the_job_unchanged(
    node: Node, tmp_path: Path, script: str, env: dict[str, str]
) -> None:
    """Nobody ran `nodeagent tune --apply` on this node: the real `nodeagent exec` each launcher
    starts the ranks with warns once and runs the job as it is, with its exit code."""
    real = Path(sys.executable).with_name("nodeagent")
    train = tmp_path / "train.py"
    train.write_text(TRAIN)
    marker = tmp_path / "ran.json"
    state = tmp_path / "state"
    proc = node.run(
        script,
        str(train),
        "--epochs",
        "1",
        PATH=f"{node.bin}:{real.parent}:/usr/bin:/bin",
        REAL_NODEAGENT=str(real),
        FAKE_RUN_RANK="1",
        NODEAGENT_STATE_DIR=str(state),
        RAN_MARKER=str(marker),
        **env,
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr  # the job's own exit code
    ran = json.loads(marker.read_text())
    assert ran == {"argv": ["--epochs", "1"], "tf_data_hook": None, "threads": None}
    warning = f"nodeagent exec: warning: no profile default at {state / 'profiles' / 'default.json'}"
    assert [line for line in proc.stderr.splitlines() if "warning" in line] == [
        f"{warning}: running the job unchanged; create one with `nodeagent tune --apply --profile default`"
    ]


@pytest.mark.parametrize(("script", "env"), [(script, env) for script, _, env in LAUNCHERS])
def test_a_named_profile_missing_on_a_node_starts_no_rank(
    node: Node, tmp_path: Path, script: str, env: dict[str, str]
) -> None:
    """NODEAGENT_PROFILE names a profile this node does not have (a typo, a node left out of the
    tuning): the real `nodeagent exec` refuses the rank rather than run it unpinned."""
    real = Path(sys.executable).with_name("nodeagent")
    train = tmp_path / "train.py"
    train.write_text(TRAIN)
    marker = tmp_path / "ran.json"
    state = tmp_path / "state"
    proc = node.run(
        script,
        str(train),
        PATH=f"{node.bin}:{real.parent}:/usr/bin:/bin",
        REAL_NODEAGENT=str(real),
        FAKE_RUN_RANK="1",
        NODEAGENT_STATE_DIR=str(state),
        NODEAGENT_PROFILE="fsat",
        RAN_MARKER=str(marker),
        **env,
    )
    assert proc.returncode == 64, proc.stdout + proc.stderr
    assert not marker.exists()
    assert f"nodeagent: error: no profile 'fsat' in {state / 'profiles'} (there: none)" in proc.stderr
