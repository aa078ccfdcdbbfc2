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
is set in the document. ProfileDocument is its model: `load` checks a file against it (a bad one is
one UsageError line naming the file, the line and the field) and returns the document as read.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from nodeagent.core import jsondoc, parse
from nodeagent.core.errors import UsageError
from nodeagent.tuning.state import state_dir, write_atomic

DEFAULT = "default"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_AGAIN = "recreate the profile with `nodeagent tune --apply`"
# The largest CPU wake-up latency request: the kernel reads it as an s32
# (https://docs.kernel.org/power/pm_qos_interface.html, /dev/cpu_dma_latency).
MAX_DMA_LATENCY_US = 0x7FFFFFFF


# --- The document ----------------------------------------------------------------------------------
#
# Strict (a quoted number is not a number, true is not 1) wherever `nodeagent exec` acts on a value:
# the environment, the binding of each rank, what the launcher holds. Unknown keys are refused in
# the blocks it acts on (a misspelt "cpu" would run the job unpinned in silence) and kept at the top
# level, where a third-party tuner's `profile_key` may add its own.


def _variable_name(name: str) -> str:
    if not name or "=" in name or "\x00" in name:
        raise ValueError(f"{json.dumps(name)} is not an environment variable name (not empty, no '=' or NUL)")
    return name


def _no_nul(value: object) -> object:
    if isinstance(value, str) and "\x00" in value:
        raise ValueError("holds a NUL byte, which no environment variable can")
    return value


def _rank_key(key: str) -> str:
    if not key.isdigit():
        raise ValueError(f"{json.dumps(key)} is not a local rank (a number from 0)")
    return key


def _cpus(value: str | list[int]) -> str | list[int]:
    """A CPU list as text ("0-3,8") or numbers; never empty (null means not pinned)."""
    cpus = parse.cpulist(value) if isinstance(value, str) else value
    if not cpus:
        raise ValueError("is empty (null leaves the rank unpinned)")
    return value


NonNegative = Annotated[int, Field(ge=0)]
VariableName = Annotated[str, AfterValidator(_variable_name)]
# null unsets the variable; true/false are "1"/"0" (nodeagent.tuning.launcher).
VariableValue = Annotated[
    str | int | float | bool | None,
    jsondoc.expect("a string, a number, true/false or null"),
    AfterValidator(_no_nul),
]
Environment = dict[VariableName, VariableValue]
CpuList = Annotated[
    str | list[NonNegative],
    jsondoc.expect('a CPU list: text such as "0-3,8" or a list of CPU numbers'),
    AfterValidator(_cpus),
]
NodeNumber = Annotated[NonNegative, jsondoc.expect("a NUMA node number (0 or more)")]


class _Block(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class RankEntry(_Block):
    """One local rank's binding (numa-pinning; facts/ranks.py RankSlot.to_dict)."""

    # Absent: the entry's place in `ranks`; never null (see _given).
    local_rank: Annotated[NonNegative, jsondoc.expect("a local rank number (0 or more)")] | None = None
    gpu: str | None = None
    gpu_pci: str | None = None
    cpus: CpuList | None = None  # null: not pinned
    cpulist: str | None = None  # `cpus` as text, for people
    numa_node: NodeNumber | None = None  # the node memory is bound to; else `mems`
    mems: list[NodeNumber] | None = None
    nic: list[str] | None = None
    nic_level: str | None = None
    physical_cores: NonNegative | None = None
    shares_with: list[NonNegative] | None = None
    env: Environment | None = None

    @field_validator("local_rank", mode="before")
    @classmethod
    def _given(cls, value: object) -> object:
        # Runs only on a value the file gives: null is not "absent".
        if value is None:
            raise ValueError("is null (give the rank's number, or leave the field out for the entry's place)")
        return value


class LauncherSettings(_Block):
    cpu_dma_latency_us: (
        Annotated[
            int,
            Field(ge=0, le=MAX_DMA_LATENCY_US),
            jsondoc.expect(f"a number of microseconds from 0 to {MAX_DMA_LATENCY_US} (the kernel's s32)"),
        ]
        | None
    ) = None  # c-states: held open while the job runs
    memlock_soft: (
        Annotated[
            Literal["unlimited"] | NonNegative,
            jsondoc.expect('"unlimited" or a number of bytes'),
        ]
        | None
    ) = None  # pinned-memory


class ProfileDocument(BaseModel):
    """A profile file (see the module docstring). `load` checks a file with it and returns the
    document as read, so a profile round-trips through `merged` and `text` unchanged."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)

    name: str | None = None
    host: str | None = None
    updated: str | None = None
    env: Environment | None = None
    rank_env: dict[Annotated[str, AfterValidator(_rank_key)], Environment] | None = None
    ranks: list[RankEntry] | None = None
    launcher: LauncherSettings | None = None
    tf_data: dict[str, str | int | float | bool | None] | None = None
    snippets: dict[str, str] | None = None

    @field_validator("ranks")
    @classmethod
    def _distinct_ranks(cls, ranks: list[RankEntry] | None) -> list[RankEntry] | None:
        seen: dict[int, int] = {}
        for i, entry in enumerate(ranks or ()):
            number = i if entry.local_rank is None else entry.local_rank
            if number in seen:
                raise ValueError(
                    f"local rank {number} is in ranks[{seen[number]}] and ranks[{i}]; each rank once"
                )
            seen[number] = i
        return ranks


_WORDING = jsondoc.Wording("profile", _AGAIN)


def valid_name(name: str) -> bool:
    return bool(_NAME.match(name))


def profile_path(name: str, base: Path | None = None) -> Path:
    if not _NAME.match(name):
        raise UsageError(f"profile name {name!r}: use letters, digits, '.', '_' and '-' (at most 64)")
    return (base or state_dir()) / "profiles" / f"{name}.json"


def load(name: str, base: Path | None = None) -> dict[str, Any]:
    """The profile `name` as its file holds it, checked against ProfileDocument; every problem is
    one UsageError line naming the file, the line and the field."""
    path = profile_path(name, base)
    try:
        # A regular file under the input cap, its nesting bounded: a profile is a few KiB.
        doc = jsondoc.read_json(path, _WORDING)
    except FileNotFoundError:
        raise UsageError(
            f"no profile {name!r} ({path}); create it with `nodeagent tune --apply --profile {name}`"
        ) from None
    doc.validate(ProfileDocument)
    data: dict[str, Any] = doc.data
    return data


def names(base: Path | None = None) -> list[str]:
    """The profiles in the state folder, by name (sorted); none when the folder is not there. A
    killed save's temporary file (".NAME...tmp") is not a profile."""
    folder = (base or state_dir()) / "profiles"
    try:
        entries = os.listdir(folder)
    except OSError:
        return []
    found = (entry[: -len(".json")] for entry in entries if entry.endswith(".json"))
    return sorted(n for n in found if valid_name(n))


def missing(name: str, base: Path | None = None) -> str:
    """The line for a profile that was named but is not there: where profiles live, which are."""
    folder = profile_path(name, base).parent
    there = ", ".join(names(base)) or "none"
    return (
        f"no profile {name!r} in {folder} (there: {there}); name one of those, or create it with "
        f"`nodeagent tune --apply --profile {name}`"
    )


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
