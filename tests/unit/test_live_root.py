"""`--root PATH` where a machine's /proc and /sys are mounted live (a pod's /host) reads that machine
as itself: its files there, its tools and NVML run here. Told from the mount table; a recording
keeps reading as a recording. `--hostname` (NODEAGENT_HOSTNAME) names the node in reports.

The live-mount tests mount real procfs and sysfs in a private mount namespace (tests/support/livemount.py):
root only, skipped with the reason elsewhere."""

from __future__ import annotations

import json
import re
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.core.errors import UsageError
from nodeagent.host import LocalHost, SnapshotHost, hostname_problem, open_host
from nodeagent.host.mounts import LiveRoot, Mount, parse_mountinfo, visible
from tests.support.cli import RunCli
from tests.support.livemount import BIND, FRESH, PROC_ONLY, Namespace, live_namespace
from tests.support.paths import VM

# -- the mount table ------------------------------------------------------------------------------


def test_mountinfo_is_read_by_its_fields() -> None:
    text = (
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        # Optional fields before the "-", and a mount point with a space (octal escape).
        "65 22 0:39 / /tmp/a\\040b/proc rw,relatime shared:5 master:2 - proc proc rw\n"
        "66 22 0:22 / /tmp/a\\040b/sys rw - sysfs sysfs rw\n"
        "not a mountinfo line\n"
    )
    assert parse_mountinfo(text) == [
        Mount(22, 1, "8:1", "/", "ext4"),
        Mount(65, 22, "0:39", "/tmp/a b/proc", "proc"),
        Mount(66, 22, "0:22", "/tmp/a b/sys", "sysfs"),
    ]


def test_a_path_shows_the_top_of_its_mount_stack() -> None:
    # A tmpfs mounted over a procfs at the same point (mount 71 sits on 65): the tmpfs is seen.
    stack = [Mount(71, 65, "0:50", "/h/proc", "tmpfs"), Mount(65, 22, "0:39", "/h/proc", "proc")]
    assert visible(stack, "/h/proc") == stack[0]
    assert visible(stack, "/h/sys") is None


def test_a_folder_is_live_only_with_procfs_and_sysfs_both() -> None:
    assert LiveRoot("/h", {"proc": "proc", "sys": "sysfs"}).live
    recorded = LiveRoot("/h", {"proc": None, "sys": "tmpfs"})
    assert recorded.recorded and not recorded.live and recorded.problem() is None
    half = LiveRoot("/h", {"proc": "proc", "sys": None})
    assert not half.live and not half.recorded
    assert half.problem() == (
        "/h/sys is not a sysfs mount (nothing is mounted there), although the other is a live mount: "
        "mount the machine's /proc and /sys both (read-only is enough), or give a recording made by "
        "`nodeagent snapshot`"
    )


@pytest.mark.parametrize("name", ["node-a", "gpu07", "n1.cluster.example.com", "GPU-Node-01", "a" * 63])
def test_host_names_that_name_a_node(name: str) -> None:
    assert hostname_problem(name) is None


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "empty"),
        ("node_a", "'node_a' is not a host name label"),
        ("-node", "'-node' is not a host name label"),
        ("node-", "'node-' is not a host name label"),
        ("a" * 64, "is not a host name label"),
        ("node..a", "an empty label"),
        ("node.", "an empty label"),
        ("node a", "is not a host name label"),
        ("nöde", "is not a host name label"),
        (".".join(["a" * 50] * 6), "more than the 253"),
    ],
)
def test_names_that_cannot_name_a_node(name: str, why: str) -> None:
    problem = hostname_problem(name)
    assert problem is not None and why in problem


# -- recordings stay recordings -------------------------------------------------------------------


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded VM as a folder (sys/, proc/, commands/): files, not mounts."""
    root = tmp_path_factory.mktemp("recording")
    with tarfile.open(VM) as tf:
        tf.extractall(root, filter="tar")
    return root


def test_a_recorded_folder_is_still_a_snapshot(recording: Path) -> None:
    with open_host(str(recording)) as host:
        assert isinstance(host, SnapshotHost) and not host.is_live and host.name == "vm"
    with open_host(str(recording), name="node-a") as host:
        assert isinstance(host, SnapshotHost) and host.name == "node-a"
    with open_host("/") as host:
        assert isinstance(host, LocalHost) and host.is_live and not host.live_mount


def test_links_to_this_machines_proc_and_sys_are_not_a_live_mount(tmp_path: Path) -> None:
    # A recording (or a hostile folder) whose proc and sys lead to this machine's: files and links,
    # resolved inside the folder, never a reason to read this machine or run its tools.
    (tmp_path / "proc").symlink_to("/proc")
    (tmp_path / "sys").symlink_to("/sys")
    with pytest.raises(UsageError, match="holds no sys/ or proc/ folder"):
        open_host(str(tmp_path))


def test_a_link_to_a_folder_is_that_folder(recording: Path, tmp_path: Path) -> None:
    (tmp_path / "node-a").symlink_to(recording)
    with open_host(str(tmp_path / "node-a")) as host:
        assert isinstance(host, SnapshotHost)


def check_json(run_cli: RunCli, *args: str) -> tuple[int, dict[str, Any]]:
    code, out, err = run_cli("check", *args, "--format", "json")
    assert err == "", err
    doc = json.loads(out)
    assert isinstance(doc, dict)
    return code, doc


def findings(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """Each finding by check and subject, without what differs from one run to the next: the host
    name, and numbers (process counts, free pages, kernel log times)."""
    out = {}
    for f in doc["findings"]:
        kept = {k: v for k, v in f.items() if k != "host"}
        out[(f["check_id"], f["subject"])] = json.loads(re.sub(r"\d+", "N", json.dumps(kept)))
    return out


# The machine's network interfaces change while the suite runs: other tests' clusters add and remove
# veths and bridges in the root network namespace, minutes apart from the module's `--root /` run.
NETWORK = re.compile(r"/sys/class/net|/proc/sys/net|\bNIC")
# So do the processes: other tests' TensorFlow jobs are what the threads check reads as training
# processes, present in one run and gone in the next.
PROCESSES = re.compile(r"/proc/N/|training process")


def steady(found: dict[tuple[str, str], dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The findings that read neither the network interfaces and their sysctls nor the processes."""
    return {
        key: f
        for key, f in found.items()
        if not NETWORK.search(text := json.dumps(f)) and not PROCESSES.search(text)
    }


def test_nodeagent_root_and_hostname_come_from_the_environment(
    recording: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    code, given = check_json(
        run_cli, "--root", str(recording), "--hostname", "node-a", "--only", "kernel,gpu"
    )
    monkeypatch.setenv("NODEAGENT_ROOT", str(recording))
    monkeypatch.setenv("NODEAGENT_HOSTNAME", "node-a")
    prom = tmp_path / "nodeagent.prom"
    code_env, from_env = check_json(run_cli, "--only", "kernel,gpu", "--output", f"prometheus:{prom}")
    assert (code_env, findings(from_env)) == (code, findings(given))
    assert given["host"] == from_env["host"] == "node-a"
    assert {f["host"] for f in from_env["findings"]} == {"node-a"}
    # Recorded: the GPU facts are the recording's `nvidia-smi` output, never this machine's.
    (gpu,) = [f for f in given["findings"] if f["check_id"] == "gpu"]
    assert "nvidia-smi -q -x" in gpu["summary"]
    hosts = set(re.findall(r'host="([^"]*)"', prom.read_text()))
    assert hosts == {"node-a"}


def test_an_option_overrides_the_environment(
    recording: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODEAGENT_ROOT", "/nonexistent")
    monkeypatch.setenv("NODEAGENT_HOSTNAME", "from-env")
    _, doc = check_json(run_cli, "--root", str(recording), "--hostname", "given", "--only", "kernel")
    assert doc["host"] == "given"


@pytest.mark.parametrize("command", [["check"], ["preflight"], ["facts"], ["snapshot", "-o", "x.tar.gz"]])
def test_a_bad_hostname_is_one_line_and_exit_64(
    command: list[str], run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = run_cli(*command, "--hostname", "node_a")
    assert (code, out) == (64, "")
    assert err == (
        "nodeagent: error: --hostname 'node_a': 'node_a' is not a host name label: use letters, digits "
        "and inner hyphens, 1 to 63 characters between dots (RFC 1123)\n"
    )
    monkeypatch.setenv("NODEAGENT_HOSTNAME", "a..b")
    code, out, err = run_cli(*command)
    assert (code, out) == (64, "")
    assert err.startswith("nodeagent: error: NODEAGENT_HOSTNAME 'a..b': an empty label")
    assert err.count("\n") == 1


def test_one_node_options_are_refused_with_a_fleet(run_cli: RunCli) -> None:
    code, _, err = run_cli("check", "--hosts", "node[1-2]", "--hostname", "node-a")
    assert code == 64 and "--hostname (NODEAGENT_HOSTNAME) names the one node read here" in err
    code, _, err = run_cli("check", "--hosts", "node[1-2]", "--root", "/")
    assert code == 64 and "--root (NODEAGENT_ROOT) reads one node" in err


def test_snapshot_records_live_machines_only(recording: Path, run_cli: RunCli, tmp_path: Path) -> None:
    code, _, err = run_cli("snapshot", "--root", str(recording), "-o", str(tmp_path / "x.tar.gz"))
    assert code == 64 and "a recording already" in err and not (tmp_path / "x.tar.gz").exists()


def test_snapshot_hostname_names_the_recording(run_cli: RunCli, tmp_path: Path) -> None:
    out = tmp_path / "node.tar.gz"
    code, _, err = run_cli("snapshot", "--only", "kernel", "--hostname", "node-a", "-o", str(out))
    assert code == 0, err
    assert SnapshotHost(out).name == "node-a"


def test_open_host_refuses_a_bad_name(recording: Path) -> None:
    with pytest.raises(UsageError, match="host name 'a_b'"):
        open_host(str(recording), name="a_b")


# -- live mounts, for real ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def namespace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Namespace]:
    """One namespace for the module: bind/ holds recursive binds of /proc and /sys (what a pod's
    hostPath volumes are), fresh/ new procfs and sysfs instances, half/ a procfs alone."""
    base = tmp_path_factory.mktemp("live")
    with live_namespace(base, {"bind": BIND, "fresh": FRESH, "half": PROC_ONLY}) as ns:
        yield ns


def ns_json(ns: Namespace, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = ns.nodeagent(*args, "--format", "json", env=env)
    assert proc.returncode in (0, 1, 2, 3), proc.stderr
    assert proc.stderr == "", proc.stderr
    doc = json.loads(proc.stdout)
    assert isinstance(doc, dict)
    return doc


@pytest.fixture(scope="module")
def as_root(namespace: Namespace) -> dict[str, Any]:
    """`check --root /` in the same namespace: what a live mount of this machine must equal."""
    return ns_json(namespace, "check", "--root", "/")


@pytest.mark.slow
def test_a_live_mount_reads_as_the_machine_itself(namespace: Namespace, as_root: dict[str, Any]) -> None:
    live = ns_json(namespace, "check", "--root", str(namespace.folders["bind"]), "--hostname", "node-a")
    assert live["host"] == "node-a" and {f["host"] for f in live["findings"]} == {"node-a"}
    statuses = [[(c["id"], c["status"]) for c in doc["checks"]] for doc in (live, as_root)]
    assert statuses[0] == statuses[1]
    # Every finding as on `--root /`: the file-based checks read the same files, and the GPU and Xid
    # checks ran NVML, nvidia-smi and dmesg here instead of looking for recorded output.
    assert steady(findings(live)) == steady(findings(as_root))
    assert "not recorded in snapshot" not in json.dumps(live)


@pytest.mark.slow
def test_the_environment_names_the_live_root(namespace: Namespace, as_root: dict[str, Any]) -> None:
    env = {"NODEAGENT_ROOT": str(namespace.folders["bind"]), "NODEAGENT_HOSTNAME": "node-a"}
    live = ns_json(namespace, "check", env=env)
    assert live["host"] == "node-a"
    assert steady(findings(live)) == steady(findings(as_root))


@pytest.mark.slow
def test_new_procfs_and_sysfs_instances_are_live_too(namespace: Namespace) -> None:
    fresh = str(namespace.folders["fresh"])
    facts = ns_json(namespace, "facts", "--root", fresh, "--hostname", "node-a")
    here = ns_json(namespace, "facts", "--root", "/")
    assert (facts["host"], facts["source"]) == ("node-a", "local")
    # What tools said comes from running them (`nvidia-smi topo -m`), as on `--root /`.
    assert facts["notes"] == here["notes"]
    assert "not recorded in snapshot" not in json.dumps(facts)
    assert facts["topology"] == here["topology"] and facts["pci"] == here["pci"]


@pytest.mark.slow
def test_a_link_to_a_live_mount_is_live(namespace: Namespace, tmp_path: Path) -> None:
    # What the old Kubernetes manifests did to name the node (ln -sfn /host /tmp/$NODE_NAME).
    link = tmp_path / "node-a"
    link.symlink_to(namespace.folders["bind"])
    facts = ns_json(namespace, "facts", "--root", str(link))
    assert facts["source"] == "local" and "not recorded in snapshot" not in json.dumps(facts)


@pytest.mark.slow
def test_half_a_live_mount_is_refused(namespace: Namespace) -> None:
    half = namespace.folders["half"]
    proc = namespace.nodeagent("check", "--root", str(half))
    assert proc.returncode == 64 and proc.stdout == ""
    assert proc.stderr == (
        f"nodeagent: error: {half}: {half}/sys is not a sysfs mount (nothing is mounted there), although "
        "the other is a live mount: mount the machine's /proc and /sys both (read-only is enough), or "
        "give a recording made by `nodeagent snapshot`\n"
    )


@pytest.mark.slow
def test_snapshot_records_the_live_mount(namespace: Namespace, tmp_path: Path) -> None:
    out = tmp_path / "node.tar.gz"
    root = str(namespace.folders["bind"])
    proc = namespace.nodeagent("snapshot", f"--root={root}", "--hostname=node-a", "--only=kernel", f"-o{out}")
    assert proc.returncode == 0, proc.stderr
    recorded = SnapshotHost(out)
    assert recorded.name == "node-a"
    assert recorded.read("/proc/sys/kernel/osrelease") == Path("/proc/sys/kernel/osrelease").read_text()


@pytest.mark.slow
def test_the_nvidia_driver_folder_is_read_where_nvml_runs(tmp_path: Path) -> None:
    """The NVIDIA runtime gives a container its own /proc/driver/nvidia (a tmpfs listing its GPUs);
    through a live mount that folder is read here, where NVML runs, not from the node's procfs."""
    if Path("/proc/driver/nvidia").exists():
        pytest.skip("this machine has an NVIDIA driver: the stand-in driver folder would hide it")
    if not Path("/proc/driver").is_dir():
        pytest.skip("no /proc/driver to mount the stand-in driver folder on")
    # After the binds (private: the node's view under bind/ keeps no NVIDIA folder), a tmpfs over
    # /proc/driver stands for the one the runtime mounts, with one GPU given to this container.
    setup = (
        "mount -t tmpfs tmpfs /proc/driver && mkdir -p /proc/driver/nvidia/gpus/0000:3b:00.0 && "
        "echo 'NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15' > /proc/driver/nvidia/version"
    )
    with live_namespace(tmp_path, {"bind": BIND}, setup) as ns:
        root = str(ns.folders["bind"])
        probe = (
            "import json; from nodeagent.host import open_host\n"
            f"h = open_host({root!r})\n"
            "print(json.dumps([h.listdir('/proc/driver/nvidia/gpus'), h.listdir('/proc/driver'), "
            "h.read_value('/proc/driver/nvidia/version')]))"
        )
        proc = ns.run(sys.executable, "-c", probe)
        assert proc.returncode == 0, proc.stderr
        gpus, node_driver, version = json.loads(proc.stdout)
        assert gpus == ["0000:3b:00.0"] and "nvidia" not in (node_driver or [])
        assert version.startswith("NVRM version")
        # The GPU check takes the live path: NVML is asked about the GPU the driver folder lists.
        doc = json.loads(ns.nodeagent("check", "--root", root, "--only", "gpu", "--format", "json").stdout)
        assert all("nvidia-smi -q -x" not in f["summary"] for f in doc["findings"]), doc["findings"]
        assert any("NVML" in f["summary"] or "nvmlInit()" in f["evidence"] for f in doc["findings"])
