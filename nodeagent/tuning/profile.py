"""Profiles: the process- and code-scope settings of a tuned node, applied to each training job by
`nodeagent exec`. A profile is a JSON document under <state>/profiles/<name>.json:

    {"name", "host", "updated",
     "env": {VAR: value},                        # every rank (tf-threads, pinned-memory)
     "rank_env": {"<local rank>": {VAR: value}}, # where ranks differ (tf-threads)
     "ranks": [{"local_rank", "gpu", "gpu_pci", "cpus", "cpulist", "numa_node", "mems", "nic",
                "nic_level", "physical_cores", "shares_with", "env"}],      # numa-pinning
     "launcher": {"cpu_dma_latency_us": int,     # c-states: held while the job runs
                  "memlock_soft": "unlimited" | bytes},                     # pinned-memory
     "tf_data": {tf.data option: value},         # tf-data: applied by the sitecustomize hook
     "snippets": {tuner: code}}                  # code-scope changes, to paste

Tuners' process changes name a dotted `profile_key` ("env.OMP_NUM_THREADS", "ranks") whose value
is set in the document.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from nodeagent.core import limits
from nodeagent.core.errors import UsageError
from nodeagent.tuning.state import state_dir, write_atomic

DEFAULT = "default"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def valid_name(name: str) -> bool:
    return bool(_NAME.match(name))


def profile_path(name: str, base: Path | None = None) -> Path:
    if not _NAME.match(name):
        raise UsageError(f"profile name {name!r}: use letters, digits, '.', '_' and '-' (at most 64)")
    return (base or state_dir()) / "profiles" / f"{name}.json"


def load(name: str, base: Path | None = None) -> dict[str, Any]:
    path = profile_path(name, base)
    try:
        # A regular file under the input cap, its nesting bounded: a profile is a few KiB.
        doc = limits.loads_json(limits.read_input_file(path, "profile"))
    except FileNotFoundError:
        raise UsageError(
            f"no profile {name!r} ({path}); create it with `nodeagent tune --apply --profile {name}`"
        ) from None
    except (OSError, ValueError) as e:
        raise UsageError(
            f"{path}: not a readable profile ({e}); recreate it with `nodeagent tune --apply`"
        ) from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: not a profile (a JSON object is expected)")
    return doc


def load_if_present(name: str, base: Path | None = None) -> dict[str, Any] | None:
    """The profile, or None when there is no such file; a file that is there but unreadable or
    not a profile is still a UsageError."""
    try:
        return load(name, base)
    except UsageError:
        if profile_path(name, base).exists():
            raise
        return None


def merged(doc: dict[str, Any], settings: list[tuple[str, Any]], name: str, host: str) -> dict[str, Any]:
    """`doc` with each (dotted key, value) set; the tuners of this apply overwrite what they own."""
    out: dict[str, Any] = json.loads(json.dumps(doc))  # a deep copy of plain JSON data
    for key, value in settings:
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    out.update(name=name, host=host, updated=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    return out


def text(doc: dict[str, Any]) -> str:
    """The profile file's content."""
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def save(path: Path, doc: dict[str, Any]) -> None:
    write_atomic(path, text(doc))
