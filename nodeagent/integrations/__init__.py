"""Files that put nodeagent into schedulers and launchers, shipped as package data
(`nodeagent integrations` lists them with what each is and where it goes, from FILES below;
`nodeagent integrations show NAME` prints one to copy). Each file's header says how to install it
and why each setting is what it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from nodeagent.core.errors import UsageError

SUFFIXES = (".sh", ".yaml")


@dataclass(frozen=True)
class About:
    what: str  # one line: what the file is
    where: str  # one line: where it is installed (the header has the long form)


# Every file, in one place: a test holds these to the package's files and `where` to each header.
FILES = {
    "k8s-daemonset.yaml": About(
        "Kubernetes DaemonSet: `nodeagent check` metrics for node-exporter's textfile collector, "
        "every few minutes",
        "the cluster: `kubectl apply -f` it after naming your registry in its image "
        "(docs/deployment.md: Container image)",
    ),
    "k8s-initcontainer.yaml": About(
        "Kubernetes Job whose init container runs `nodeagent preflight` before the training container",
        "your training Job: set its images, then `kubectl apply -f k8s-initcontainer.yaml`",
    ),
    "launch-horovodrun.sh": About(
        "horovodrun launcher: preflight on every host, then each rank through `nodeagent exec`",
        "the launch node's PATH, run instead of horovodrun: "
        "NP=8 HOSTS=node1:4,node2:4 launch-horovodrun.sh train.py",
    ),
    "launch-mpirun.sh": About(
        "Open MPI mpirun launcher: preflight on every node, then each rank through `nodeagent exec`",
        "the launch node's PATH, run inside the allocation instead of mpirun: "
        "NP=16 launch-mpirun.sh train.py",
    ),
    "launch-torchrun.sh": About(
        "torchrun launcher: preflight on the node, then each worker through `nodeagent exec`",
        "every node's PATH, run once per node instead of torchrun: "
        "srun --ntasks-per-node=1 launch-torchrun.sh train.py",
    ),
    "prometheus-alerts.yaml": About(
        "Prometheus alerting rules on those metrics: a check FAIL, UNKNOWN or WARN, a stale or gone node",
        "Prometheus: list it under rule_files: in prometheus.yml (`promtool check rules` it)",
    ),
    "slurm-healthcheck.sh": About(
        "Slurm HealthCheckProgram: drains a failing node, resumes a node it drained once it passes",
        "every compute node: /usr/local/sbin/nodeagent-healthcheck, HealthCheckProgram= in slurm.conf",
    ),
    "slurm-prolog.sh": About(
        "Slurm Prolog: `nodeagent preflight` before every job; a refused node is drained, the job requeued",
        "every compute node: /etc/slurm/prolog.d/50-nodeagent.sh, Prolog= in slurm.conf",
    ),
}


def names() -> list[str]:
    """The integration files, sorted."""
    return sorted(
        entry.name
        for entry in resources.files(__name__).iterdir()
        if entry.is_file() and entry.name.endswith(SUFFIXES)
    )


def path(name: str) -> Path:
    """Where the installed file `name` is (a UsageError naming the choices for any other name)."""
    if name not in names():
        raise UsageError(f"no integration file {name!r}; choose one of: {', '.join(names())}")
    return Path(str(resources.files(__name__).joinpath(name)))
