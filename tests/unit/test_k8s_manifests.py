"""The Kubernetes manifests (nodeagent/integrations/k8s-*.yaml) are objects the API server accepts,
by its OpenAPI schema (kubernetes-validate's bundled schemas: no cluster and no network), and are
fit for GPU nodes: the node's /proc and /sys read-only at /host, NVML's devices without taking a
GPU from the jobs, GPU nodes only, the node named by the downward API. Their nodeagent command
lines parse, and run against a live mount (root only: tests/support/livemount.py)."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeagent import integrations
from tests.support.livemount import BIND, NODEAGENT, Namespace, clean_env, live_namespace
from tests.support.wheel_contents import version

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate is not installed (pip install -e '.[test]')"
)

# The oldest Kubernetes the manifests are written for (every field they use is GA there), and the
# newest schema kubernetes-validate bundles.
KUBERNETES = "1.30"
MANIFESTS = ("k8s-daemonset.yaml", "k8s-initcontainer.yaml")
NODE = "gpu-node-07"  # what the downward API's spec.nodeName gives in these tests
TEXTFILE = "/var/lib/node-exporter/textfile"


def manifest(name: str) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all(integrations.path(name).read_text()) if d is not None]
    assert isinstance(doc, dict)
    return doc


def pod_spec(doc: Mapping[str, Any]) -> dict[str, Any]:
    spec = doc["spec"]["template"]["spec"]
    assert isinstance(spec, dict)
    return spec


def env_of(container: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def mounts_of(container: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["mountPath"]: m for m in container.get("volumeMounts", [])}


def host_paths(pod: Mapping[str, Any]) -> dict[str, str]:
    return {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}


def expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's $(VAR) expansion in command, args and env values (a reference to a variable
    not defined stays as written)."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), text)


def container_env(container: Mapping[str, Any]) -> dict[str, str]:
    """The container's environment as the kubelet sets it, spec.nodeName being NODE."""
    out: dict[str, str] = {}
    for e in container.get("env", []):
        if "valueFrom" in e:
            assert e["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}, e
            out[e["name"]] = NODE
        else:
            out[e["name"]] = expand(e["value"], out)
    return out


def daemonset_agent() -> dict[str, Any]:
    (agent,) = pod_spec(manifest("k8s-daemonset.yaml"))["containers"]
    assert isinstance(agent, dict)
    return agent


def preflight_container() -> dict[str, Any]:
    (init,) = pod_spec(manifest("k8s-initcontainer.yaml"))["initContainers"]
    assert isinstance(init, dict)
    return init


def daemonset_command(script: str) -> list[str]:
    """The `nodeagent check ...` command line of the DaemonSet's loop, as the shell splits it (its
    continuation lines joined, up to the redirection)."""
    joined = script.replace("\\\n", " ")
    (line,) = [ln.strip() for ln in joined.splitlines() if ln.strip().startswith("nodeagent ")]
    words = shlex.split(line.replace('"$NODE_NAME"', NODE))
    return words[: next(i for i, w in enumerate(words) if w.startswith((">", "||")))]


# -- the API schema ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MANIFESTS)
@pytest.mark.parametrize("version", [KUBERNETES, kubernetes_validate.latest_version()])
def test_the_api_server_schema_accepts_the_manifest(name: str, version: str) -> None:
    # strict: a field the API does not have (a typo the API server would drop or refuse) fails too.
    kubernetes_validate.validate(manifest(name), version, strict=True)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("spec", "template", "spec", "nodeSelectr"), {}, "'nodeSelectr' was unexpected"),
        (("spec", "template", "spec", "priorityClassName"), 5, "5 is not of type 'string'"),
        (("spec", "template", "spec", "tolerations"), {"operator": "Exists"}, "is not of type 'array'"),
    ],
)
def test_the_schema_check_refuses_a_broken_manifest(path: tuple[str, ...], value: Any, message: str) -> None:
    doc = manifest("k8s-daemonset.yaml")
    where = doc
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    with pytest.raises(kubernetes_validate.ValidationError) as caught:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    assert message in caught.value.message


@pytest.mark.parametrize("container", [daemonset_agent, preflight_container])
def test_the_manifests_name_the_built_image_by_its_version(container: Any) -> None:
    """The image `make image` builds is nodeagent:VERSION, VERSION pyproject.toml's: a manifest names
    it in a registry (a bare `nodeagent` would be pulled from Docker Hub's library, not ours), by
    that tag (`latest` or another version would run what was not tested with these manifests)."""
    repository, _, tag = container()["image"].rpartition(":")
    assert tag == version()
    assert repository.endswith("/nodeagent") and "." in repository.split("/")[0]  # a registry host


# -- what a GPU node needs -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "container"),
    [("k8s-daemonset.yaml", daemonset_agent), ("k8s-initcontainer.yaml", preflight_container)],
)
def test_the_node_is_mounted_read_only_at_host(name: str, container: Any) -> None:
    pod = pod_spec(manifest(name))
    mounts = mounts_of(container())
    for where, source in (("/host/sys", "/sys"), ("/host/proc", "/proc")):
        assert mounts[where]["readOnly"] is True
        assert host_paths(pod)[mounts[where]["name"]] == source
    assert not pod.get("hostPID") and not pod.get("hostNetwork")
    security = container()["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["SYSLOG"]}
    assert security["allowPrivilegeEscalation"] is False and security["readOnlyRootFilesystem"] is True
    assert "privileged" not in security
    assert container()["env"][0] == {
        "name": "NODE_NAME",
        "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
    }


def test_the_daemonset_runs_on_every_gpu_node_without_taking_a_gpu() -> None:
    pod = pod_spec(manifest("k8s-daemonset.yaml"))
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["runtimeClassName"] == "nvidia"
    assert {"operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]  # nvidia.com/gpu too
    agent = daemonset_agent()
    env = container_env(agent)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert not any("nvidia.com/gpu" in r for r in agent["resources"].values())
    # What `kubectl exec ds/nodeagent -- nodeagent ...` reads and how it names the node.
    assert (env["NODEAGENT_ROOT"], env["NODEAGENT_HOSTNAME"]) == ("/host", NODE)
    textfile = mounts_of(agent)[TEXTFILE]
    assert not textfile.get("readOnly") and host_paths(pod)[textfile["name"]] == TEXTFILE
    script = agent["args"][0]
    assert "ln -s" not in script and "/tmp/$NODE_NAME" not in script  # no more naming by a link
    assert daemonset_command(script) == [
        "nodeagent",
        "check",
        "--root",
        "/host",
        "--hostname",
        NODE,
        "--format",
        "json",
        "--output",
        f"prometheus:{TEXTFILE}/nodeagent.prom",
    ]


def test_the_init_container_checks_the_gpus_the_job_gets() -> None:
    pod = pod_spec(manifest("k8s-initcontainer.yaml"))
    init = preflight_container()
    (trainer,) = pod["containers"]
    gpus = trainer["resources"]["limits"]["nvidia.com/gpu"]
    assert init["resources"]["limits"]["nvidia.com/gpu"] == gpus  # the same GPUs, handed on
    assert "nvidia.com/gpu" not in init["resources"].get("requests", {})
    assert "priorityClassName" not in pod  # the job's own priority
    assert command_line("k8s-initcontainer.yaml") == [
        "nodeagent",
        "preflight",
        "--root",
        "/host",
        "--hostname",
        NODE,
        "--playbook",
        "gpu-training",
        "--verbose",
    ]


def command_line(name: str) -> list[str]:
    """The manifest's nodeagent command line as it runs in the pod, spec.nodeName being NODE."""
    if name == "k8s-daemonset.yaml":
        return daemonset_command(daemonset_agent()["args"][0])
    init = preflight_container()
    return [expand(w, container_env(init)) for w in [*init["command"], *init.get("args", [])]]


@pytest.mark.parametrize("name", MANIFESTS)
def test_the_command_lines_parse(name: str) -> None:
    """nodeagent's own parser accepts the command line as written (options, choices, --hostname's
    check), before anything runs."""
    from nodeagent.cli.main import cli

    words = command_line(name)
    assert words[0] == "nodeagent"
    command = cli.commands[words[1]]
    with command.make_context(words[1], words[2:]) as ctx:
        assert ctx.params["root"] == "/host" and ctx.params["hostname"] == NODE


# -- the command lines, run against a live mount --------------------------------------------------


@pytest.fixture(scope="module")
def host_mount(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Namespace]:
    """A namespace holding binds of this machine's /proc and /sys, standing for a pod's /host."""
    with live_namespace(tmp_path_factory.mktemp("k8s"), {"host": BIND}) as ns:
        yield ns


@pytest.mark.slow
def test_the_daemonset_loop_writes_metrics_and_ends_on_sigterm(host_mount: Namespace, tmp_path: Path) -> None:
    agent = daemonset_agent()
    script = agent["args"][0]
    host = str(host_mount.folders["host"])
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    # The pod's paths are the test's: /host is the live mount, the textfile folder a fresh one.
    assert script.count("--root /host ") == 1 and script.count(TEXTFILE) == 1
    script = script.replace("--root /host ", f"--root {shlex.quote(host)} ").replace(TEXTFILE, str(textfile))
    env = {**container_env(agent), "NODEAGENT_ROOT": host, "NODEAGENT_INTERVAL_S": "1", "PATH": _path()}
    loop = subprocess.Popen(
        host_mount.argv("/bin/sh", "-c", script),
        env=clean_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: the loop's `sleep` is ended with it
    )
    try:
        # The loop's first line comes after its first check, the metrics written.
        assert loop.stdout is not None
        first = loop.stdout.readline()
        loop.send_signal(signal.SIGTERM)
        _, err = loop.communicate(timeout=60)
    finally:
        _end_group(loop)
    assert re.search(rf"nodeagent check on {NODE}: exit [0-3]$", first), (first, err)
    assert loop.returncode == 0, err  # the trap: SIGTERM ends the loop at once, and cleanly
    metrics = (textfile / "nodeagent.prom").read_text()
    assert set(re.findall(r'host="([^"]*)"', metrics)) == {NODE}
    assert re.search(r'^nodeagent_check_status\{[^}]*check="gpu"', metrics, re.M), metrics


@pytest.mark.slow
def test_the_init_container_command_gates_on_the_live_mount(host_mount: Namespace) -> None:
    init = preflight_container()
    env = container_env(init)
    host = str(host_mount.folders["host"])
    argv = [host if w == "/host" else expand(w, env) for w in init["command"]]
    argv[0] = NODEAGENT
    proc = host_mount.run(*argv, env=env)
    assert proc.returncode in (0, 1, 2, 3), proc.stderr  # a verdict, not bad input (64)
    assert proc.stderr == "" and NODE in proc.stdout
    assert "not recorded in snapshot" not in proc.stdout  # its tools ran here


def _path() -> str:
    return os.environ.get("PATH", "/usr/bin:/bin") + os.pathsep + str(Path(NODEAGENT).parent)


def _end_group(proc: subprocess.Popen[str]) -> None:
    """End what is left of the process group the test started (the loop's `sleep`), by its id."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
