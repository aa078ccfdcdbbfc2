"""The real-machine corpus (tests/fixtures/corpus): recordings of machines nobody here made.

Each folder holds the raw files as published and a `recording.yml` (format: FORMAT.md beside the
recordings) naming the source, the licence and the values the source data shows. This module reads
those files and turns each recording into a snapshot tree that `SnapshotHost` opens, the same way
for the truth test and for `make fixtures` (which writes the trees out for `nodeagent check --root`):

- command outputs (`nvidia-smi -q -x`, `topo -m`, `nvlink -s/-e`) go to `commands/<name>.txt`, the
  file a `nodeagent snapshot` would have recorded them in;
- `ibstat` and `ibv_devinfo` outputs become the `/sys/class/infiniband/<dev>/ports/<n>/` files the
  kernel shows for the same port (see ib_sysfs.py: each value converted as the kernel prints it);
- whole trees (`tree.ttar` from prometheus/procfs and node_exporter, tar archives, folders) are
  unpacked as they are;
- a recorded `dmidecode` output (virt-what's test roots keep it as sbin/dmidecode) becomes the
  /sys/class/dmi/id files the kernel shows for the same SMBIOS fields (see dmi.py).

Run `python -m tests.support.corpus OUT` to write every recording's tree below OUT.
"""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from nodeagent.host.base import META_FILE, command_name
from tests.support import dmi, ib_sysfs, ttar
from tests.support.paths import FIXTURES

CORPUS = FIXTURES / "corpus"

COMMANDS: dict[str, tuple[str, ...]] = {
    "nvidia-smi -q -x": ("nvidia-smi", "-q", "-x"),
    "nvidia-smi topo -m": ("nvidia-smi", "topo", "-m"),
    "nvidia-smi nvlink -s": ("nvidia-smi", "nvlink", "-s"),
    "nvidia-smi nvlink -e": ("nvidia-smi", "nvlink", "-e"),
}
FileKind = Literal[
    "nvidia-smi -q -x",
    "nvidia-smi topo -m",
    "nvidia-smi nvlink -s",
    "nvidia-smi nvlink -e",
    "ibstat",
    "ibv_devinfo",
    "ibv_devinfo -v",
    "tree",
]


class Source(BaseModel):
    model_config = ConfigDict(extra="forbid")
    repository: str | None = None
    path: str | None = None
    commit: str | None = Field(default=None, pattern=r"^[0-9a-f]{40}$")
    url: str | None = None
    licence: str


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    check: str
    subject: str | None = None
    why: str
    no_warn: bool = False  # by_design: the source contradicts a WARN too, not only a FAIL


class Verdicts(BaseModel):
    model_config = ConfigDict(extra="forbid")
    faults: list[Verdict] = []
    by_design: list[Verdict] = []


class Recording(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = ""
    source: Source
    note: str
    files: dict[FileKind, str]
    expect: dict[str, Any] = {}
    verdicts: Verdicts = Verdicts()

    @property
    def folder(self) -> Path:
        return CORPUS / self.name

    def raw(self, kind: str) -> bytes | None:
        name = self.files.get(kind)  # type: ignore[call-overload]
        return None if name is None else (self.folder / name).read_bytes()


def load(name: str) -> Recording:
    data = yaml.safe_load((CORPUS / name / "recording.yml").read_text())
    return Recording.model_validate({**data, "name": name})


def names() -> list[str]:
    return sorted(p.parent.name for p in CORPUS.glob("*/recording.yml"))


def build_tree(rec: Recording, dest: Path) -> Path:
    """The recording as a snapshot folder at `dest` (created; must not exist).

    A tree built only from command outputs and `ibstat`/`ibv_devinfo` says what it recorded, as
    `nodeagent snapshot` does (nodeagent.json's `paths`: /sys/class/infiniband, or nothing), so that
    what the source never showed reads as not recorded, not as absent (Host.recorded). A tree
    unpacked from an archive is read as it is."""
    dest.mkdir(parents=True)
    (dest / "commands").mkdir()
    walked: set[str] | None = set()
    for kind, file in rec.files.items():
        source = rec.folder / file
        if kind in COMMANDS:
            (dest / "commands" / f"{command_name(COMMANDS[kind])}.txt").write_bytes(source.read_bytes())
        elif kind.startswith("ib"):
            ib_sysfs.write(ib_sysfs.parse(source.read_text(), kind), dest)
            walked = None if walked is None else walked | {"/sys/class/infiniband"}
        else:
            _unpack(source, dest)
            walked = None
    if walked is not None:
        (dest / META_FILE).write_text(json.dumps({"paths": sorted(walked)}))
    dmidecode = dest / "sbin" / "dmidecode"
    if dmidecode.is_file():
        dmi.write(dmi.parse(dmidecode.read_text()), dest)
    return dest


def _unpack(source: Path, dest: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True)
        return
    staging = dest / ".unpack"
    if source.name.endswith(".ttar"):
        # Bytes, not text mode: a recorded binary file may hold "\r", which text mode turns into "\n".
        ttar.extract(source.read_bytes().decode("utf-8", "surrogateescape"), staging)
    else:
        with tarfile.open(source) as tar:
            # "tar", not "data": recorded trees hold absolute links (etc/mtab -> /proc/self/mounts),
            # which SnapshotHost resolves inside the tree.
            tar.extractall(staging, filter="tar")
    # Archives often hold one top folder (fixtures/, hwloc's NAME/) with sys/ and proc/ inside.
    top = list(staging.iterdir())
    inner = (
        top[0]
        if len(top) == 1 and top[0].is_dir() and not {p.name for p in top} & {"sys", "proc"}
        else staging
    )
    for entry in inner.iterdir():
        entry.rename(dest / entry.name)
    shutil.rmtree(staging)


README = CORPUS.parent / "README.md"
README_HEAD = """# Recordings of real machines

The machines here were recorded by others, on machines nobody on this team made, and published.
Each source keeps its licence; nothing here is nodeagent's own output, except in three folders that
record what real tools answered to nodeagent in this repository's own tests (each README says how to
record them again):

- `slurm/`: Slurm 22.05's `sinfo` and `srun` outputs on a cluster built by `tests/support/slurmcluster.py`.
- `prometheus/`: Prometheus 2.42's HTTP API answers about nodeagent's metrics, from
  `tests/support/promstack.py`.
- `measure/`: TensorFlow 2.21's own serialisation (GraphDef) of small tf.data pipelines, from
  `measure/make_graphs.py`.

Recorded machines:

- `hwloc/`: /sys and /proc trees from hwloc's test suite, `tests/hwloc/linux/` in
  https://github.com/open-mpi/hwloc (BSD-3-Clause, `hwloc/COPYING`), with hwloc's expected topology
  for each (`NAME.console` or `NAME.xml`, and `NAME.test` saying how hwloc ran it).
- `nvidia-smi/`: `topo-m-dgx-a100.txt` (a DGX A100) and `topo-m-dgx1-pcie.txt` (a DGX-1, `topo -mp`),
  published outputs of `nvidia-smi topo -m` used by the parser tests by name.
- `corpus/`: one folder per machine, the raw files as published and a `recording.yml` with the
  source, licence, a note, and the values the raw data shows (format: `corpus/FORMAT.md`). How each
  kind of file becomes a snapshot tree: `tests/support/corpus.py` (`make fixtures` writes them out). This
  table is generated from the recording.yml files (`python -m tests.support.corpus --readme`); a test keeps
  it in step.

| recording | files | source | licence | note |
|---|---|---|---|---|
"""


def readme() -> str:
    rows = []
    for name in names():
        rec = load(name)
        where = rec.source.url or f"https://github.com/{rec.source.repository}"
        if rec.source.repository and rec.source.path and rec.source.commit:
            where = f"{rec.source.repository} `{rec.source.path}` @ {rec.source.commit[:12]}"
        note = " ".join(rec.note.split()).replace("|", "\\|")
        rows.append(f"| {name} | {', '.join(rec.files)} | {where} | {rec.source.licence} | {note} |")
    return README_HEAD + "\n".join(rows) + "\n"


def main(argv: list[str]) -> int:
    if argv == ["--readme"]:
        README.write_text(readme())
        return 0
    if len(argv) != 1:
        print("usage: python -m tests.support.corpus OUTPUT-FOLDER | --readme", file=sys.stderr)
        return 64
    out = Path(argv[0])
    shutil.rmtree(out, ignore_errors=True)
    for name in names():
        build_tree(load(name), out / name)
    print(f"{len(names())} recordings written below {out}: nodeagent check --root {out}/NAME")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
