"""Files that put nodeagent into schedulers and launchers, shipped as package data
(`nodeagent integrations` lists them, `nodeagent integrations show NAME` prints one to copy):

- `slurm-prolog.sh`: Slurm Prolog running `nodeagent preflight` before every job; a refused node is
  drained with nodeagent's reason and its job requeued; the JSON report goes to a shared folder
  for `nodeagent report merge`.
- `slurm-healthcheck.sh`: Slurm HealthCheckProgram; drains a failing node, resumes a node that
  nodeagent drained once it passes again, never touches other drains.
- `k8s-initcontainer.yaml`: a Kubernetes Job whose init container gates the training container.
- `k8s-daemonset.yaml`: a DaemonSet writing `nodeagent check` metrics for node-exporter's textfile
  collector every few minutes.
- `prometheus-alerts.yaml`: Prometheus alerting rules on those metrics: a check FAILing (critical),
  UNKNOWN or WARN (lower severities), a node whose last run is stale, a node whose metrics are gone.
- `launch-torchrun.sh`, `launch-mpirun.sh`, `launch-horovodrun.sh`: each launcher starting every
  rank through `nodeagent exec` (the tuned profile's binding and environment), after a preflight
  on every node.

Each file's header says how to install it and why each setting is what it is.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from nodeagent.core.errors import UsageError

SUFFIXES = (".sh", ".yaml")


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
