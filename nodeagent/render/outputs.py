"""`--output FORMAT:PATH`: one run written in several formats, each file replaced atomically.

PATH is `-` (standard output) or a file, written by nodeagent.core.safe_write as every path a user
names for nodeagent to write: a regular file, replaced whole, or a new one; anything else found
there (a symbolic link, a FIFO, a device, a socket, a folder) is refused, never followed or replaced.

Every renderer takes the run's JSON document (nodeagent/render/report.schema.json), never the
engine's objects, so a document read back from a file, pulled from a remote agent or gathered
over a fleet renders the same way. A fleet document (`{hosts: {NAME: ...}, drift, outliers}`)
renders as one section (JUnit suite, Prometheus `host` label, Slurm line) per host.

The renderers are imported when used; what they share is nodeagent.render.runs (the document as one
view per host) and nodeagent.render.escape (characters a renderer must not emit).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from nodeagent.core import safe_write
from nodeagent.core.errors import UsageError

# Each format's renderer, "module:function" taking the run's document and returning its text
# (ending with a newline), imported when used. --output's choices and help are built from this.
RENDERERS = {
    "json": "nodeagent.render.jsonout:document_text",
    "junit": "nodeagent.render.junit:junit",
    "prometheus": "nodeagent.render.prometheus:prometheus",
    "markdown": "nodeagent.render.markdown:markdown",
    "html": "nodeagent.render.markdown:html",
    "slurm": "nodeagent.render.slurm:slurm_lines",
    "text": "nodeagent.render.text:problems",
}
FORMATS = tuple(RENDERERS)
STDOUT = "-"  # FORMAT:- writes to standard output
SCHEMA_FILE = "report.schema.json"
# Statuses someone has to act on, worst first (the order of nodeagent.core.finding.Status's ranks).


@dataclass(frozen=True)
class OutputSpec:
    format: str
    path: Path | None  # None: standard output (FORMAT:-)

    @property
    def where(self) -> str:
        """The option as the user wrote it, for messages."""
        return f"--output {self.format}:{STDOUT if self.path is None else self.path}"

    @property
    def stdout_hint(self) -> str:
        """What to give instead of a path that is refused."""
        return f"{self.format}:{STDOUT} for standard output"


def parse_output(spec: str) -> OutputSpec:
    """`FORMAT:PATH` (the first colon splits, so PATH may hold colons) or `FORMAT:-`; a PATH that
    is there already must be a regular file (module docstring)."""
    fmt, sep, path = spec.partition(":")
    choices = ", ".join(FORMATS)
    if not sep:
        raise UsageError(
            f"--output {spec}: expected FORMAT:PATH, e.g. junit:/var/log/nodeagent.xml ({choices})"
        )
    if fmt not in FORMATS:
        raise UsageError(f"--output {spec}: unknown format {fmt!r}; use one of {choices}")
    if not path:
        raise UsageError(f"--output {spec}: no path after '{fmt}:'; give the file to write, or {fmt}:-")
    if path == STDOUT:
        return OutputSpec(fmt, None)
    target = Path(path).expanduser()
    out = OutputSpec(fmt, target)
    # Refused now, before anything is written (and checked again when writing).
    safe_write.check_target(target, out.where, stdout_hint=out.stdout_hint)
    if not target.parent.is_dir():
        raise UsageError(f"{out.where}: the folder {target.parent} does not exist; create it first")
    return out


def parse_outputs(specs: Sequence[str]) -> list[OutputSpec]:
    """Every `--output`, parsed; at most one of them may take standard output."""
    parsed = [parse_output(s) for s in specs]
    to_stdout = [s.where for s in parsed if s.path is None]
    if len(to_stdout) > 1:
        raise UsageError(f"{' and '.join(to_stdout)}: only one output can go to standard output")
    return parsed


def renderer(fmt: str) -> Callable[[Any], str]:
    """The function that renders a document in `fmt` (one of FORMATS): its dict, or its model
    (nodeagent.api.report)."""
    if fmt not in RENDERERS:
        raise ValueError(f"unknown output format {fmt!r}; one of {', '.join(FORMATS)}")
    module, _, name = RENDERERS[fmt].partition(":")
    function: Callable[[Any], str] = getattr(importlib.import_module(module), name)
    return function


def render(fmt: str, doc: Mapping[str, Any]) -> str:
    """`doc` as text in `fmt` (one of FORMATS), ending with a newline."""
    return renderer(fmt)(doc)


def choices_text() -> str:
    """The formats as a sentence: "a, b or c"."""
    return f"{', '.join(FORMATS[:-1])} or {FORMATS[-1]}"


def write_outputs(specs: Sequence[OutputSpec], doc: Mapping[str, Any]) -> bool:
    """Render and write each output; True when one went to standard output (the command then
    prints nothing else there, so `junit:-` gives a document a parser reads).

    A file is rendered whole before anything is written, then written to a temporary file beside
    it and renamed over it (os.replace, atomic on POSIX): a reader such as node_exporter's textfile
    collector sees the old file or the new one, never half of one, and a failure leaves no partial
    file behind."""
    for spec in specs:
        text = render(spec.format, doc)
        if spec.path is None:
            import click

            click.echo(text, nl=False)
        else:
            _write_atomically(spec, text)
    return any(spec.path is None for spec in specs)


def _write_atomically(spec: OutputSpec, text: str) -> None:
    """`text` replaces the file through the one safe writer (nodeagent.core.safe_write), with the
    mode of the file it replaces (else what open() would give: node_exporter, another user, reads it)."""
    assert spec.path is not None
    data = text.encode("utf-8", errors="backslashreplace")
    safe_write.write_file(spec.path, data, spec.where, stdout_hint=spec.stdout_hint)


def schema() -> dict[str, Any]:
    """The published JSON Schema (draft 2020-12) of the run document."""
    text = resources.files("nodeagent.render").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded
