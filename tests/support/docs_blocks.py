"""The command blocks of nodeagent's documentation (README.md and docs/*.md), read by structure and run
as a reader following a page would.

The convention (CONTRIBUTING.md's "Documentation"; tests/unit/test_docs_commands.py holds the pages to it):

- A command block is a fenced block whose info string is `sh`, `bash`, `shell` or `console`; a
  synopsis (placeholders such as `NAME`, `[--quick]`, `...`) is fenced as `text` and never run.
- A command block runs unless the line right before its opening fence is a marker saying why not,
  `<!-- docs: not run: CATEGORY: free text -->`, CATEGORY one of NOT_RUN. The same line may carry
  `<!-- docs: exits 1,2 -->`: exit codes the block's last command may end with besides 0 (a check's
  WARN or FAIL); the same code from an earlier command fails the block.
- The blocks of one page run in order, in one scratch folder per page (the current directory of
  every block), so an earlier block may write a file a later one reads. Each block is one script for
  `bash -e -o pipefail`, with `nodeagent` (this repository's venv) first on PATH and
  NODEAGENT_STATE_DIR a folder inside the scratch folder. A `console` block runs its `$ ` lines (and
  their continuation and here-document lines); the other lines are output shown to the reader.
- A block passes when it exits 0 or a declared code within TIME_LIMIT_S, and its output holds no
  Python traceback. It runs in a session of its own: at the limit, and when it ends, whatever is
  left of its process group is killed.

Markdown is parsed with markdown-it-py (CommonMark, which rich already depends on): fences, their
info strings and the HTML comments before them are read as the parser sees them, so a fence inside
a list item or a marker quoted in a code span is read as a renderer would read it.

`python -m tests.support.docs_blocks PAGE...` runs pages and prints what failed, for writing them.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.token import Token

COMMAND_LANGS = frozenset({"sh", "bash", "shell", "console"})
# Why a command block may stay unrun: each needs something a test machine cannot be asked for.
NOT_RUN = {
    "root": "changes a machine-wide value, needs root",
    "gpu": "needs an NVIDIA GPU",
    "hardware": "needs other real hardware (RDMA NICs, NVLink...)",
    "fleet": "needs other nodes over SSH",
    "slurm": "needs a Slurm cluster",
    "kubernetes": "needs a Kubernetes cluster",
    "long": "takes more than two minutes",
    "suite": "is the test suite itself",
}
TIME_LIMIT_S = 120.0
TRACEBACK = "Traceback (most recent call last)"
# What of a block's output a failure shows, and how much of it is read at most (a runaway block).
TAIL_LINES = 30
MAX_OUTPUT_BYTES = 4 << 20

_MARKER = re.compile(r"<!--\s*docs:(.*?)-->", re.DOTALL)
_NOT_RUN = re.compile(r"not run:\s*([^:\s]*)\s*(?::(.*))?", re.DOTALL)
_EXITS = re.compile(r"exits\s+(\d+(?:\s*,\s*\d+)*)")
_HEREDOC = re.compile(r"(?<!<)<<(?!<)-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")  # not a <<< here-string


@dataclass(frozen=True)
class Marker:
    """One `<!-- docs: ... -->` comment; `line` (1-based) is the line it ends on."""

    path: Path
    line: int
    text: str
    not_run: str | None = None  # its category, as written
    reason: str = ""
    exits: frozenset[int] = frozenset()
    problem: str = ""  # why it is not a valid marker; "" when it is

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def written(self) -> str:
        return f"<!-- docs:{self.text}-->"


def parse_marker(path: Path, line: int, text: str) -> Marker:
    body = " ".join(text.split())
    if m := _NOT_RUN.fullmatch(body):
        category, reason = m.group(1), (m.group(2) or "").strip()
        problem = ""
        if category not in NOT_RUN:
            problem = f"unknown category {category!r} (known: {', '.join(NOT_RUN)})"
        elif not reason:
            problem = f"no reason after the category: write <!-- docs: not run: {category}: why -->"
        return Marker(path, line, text, not_run=category, reason=reason, problem=problem)
    if m := _EXITS.fullmatch(body):
        codes = frozenset(int(c) for c in m.group(1).split(","))
        bad = sorted(c for c in codes if c > 255)
        problem = f"an exit code is 0-255, not {bad[0]}" if bad else ""
        return Marker(path, line, text, exits=codes, problem=problem)
    return Marker(
        path,
        line,
        text,
        problem="neither `not run: CATEGORY: why` nor `exits N[,N...]`",
    )


@dataclass(frozen=True)
class Block:
    """A fenced block: `line` (1-based) is its opening fence's, `source` its content as the parser
    gives it (a list item's indentation removed), `markers` those on the line before the fence."""

    path: Path
    line: int
    lang: str
    source: str
    markers: tuple[Marker, ...] = ()

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def is_command(self) -> bool:
        return self.lang in COMMAND_LANGS

    @property
    def not_run(self) -> Marker | None:
        return next((m for m in self.markers if m.not_run is not None), None)

    @property
    def runs(self) -> bool:
        return self.is_command and self.not_run is None

    @property
    def exits(self) -> frozenset[int]:
        """The exit codes the block may end with."""
        return frozenset({0}).union(*(m.exits for m in self.markers))

    def last_command_line(self) -> int | None:
        """The page's line where the block's last command starts (where bash's LINENO puts it)."""
        starts = _command_starts(self.script())
        return starts[-1] if starts else None

    def script(self) -> list[tuple[int, str]]:
        """The lines bash runs, each with its line in the page."""
        numbered = [(self.line + 1 + i, text) for i, text in enumerate(self.source.splitlines())]
        return _console_commands(numbered) if self.lang == "console" else numbered


def _console_commands(numbered: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """A console block's commands: `$ ` lines, the lines a trailing backslash continues onto, and a
    here-document's lines up to its delimiter; everything else is the output shown to the reader."""
    out: list[tuple[int, str]] = []
    continued = False
    heredoc: list[str] = []
    for line, text in numbered:
        if heredoc:
            out.append((line, text))
            if text.strip() == heredoc[0]:
                heredoc.pop(0)
            continue
        if continued or text.startswith("$ ") or text == "$":
            command = text if continued else text[2:]
            out.append((line, command))
            continued = command.endswith("\\")
            heredoc = [m.group(2) for m in _HEREDOC.finditer(command)]
    return out


# Lines that only close a compound command: the command that fails is one inside it.
_CLOSING = re.compile(r"(done|fi|esac|\}|\))\s*([|&;<>].*)?")


def _command_starts(numbered: list[tuple[int, str]]) -> list[int]:
    """The lines a command starts on: not blank, a comment, a line a backslash continues onto, a
    here-document's body or delimiter, or the end of a loop or an if."""
    starts: list[int] = []
    continued = False
    heredoc: list[str] = []
    for line, text in numbered:
        if heredoc:
            if text.strip() == heredoc[0]:
                heredoc.pop(0)
            continue
        stripped = text.strip()
        if not continued and stripped and not stripped.startswith("#") and not _CLOSING.fullmatch(stripped):
            starts.append(line)
        continued = stripped.endswith("\\")
        heredoc = [m.group(2) for m in _HEREDOC.finditer(text)]
    return starts


@dataclass(frozen=True)
class Page:
    path: Path
    blocks: tuple[Block, ...]
    stray: tuple[Marker, ...]  # markers not on the line right before a fence

    @property
    def commands(self) -> tuple[Block, ...]:
        return tuple(b for b in self.blocks if b.is_command)

    def problems(self) -> list[str]:
        """What breaks the convention, one line each naming the page's line and what to do."""
        found = [
            (
                m.line,
                f"{m.where}: a marker on no fence: {m.written} must stand alone on the line right "
                "before the block's opening fence",
            )
            for m in self.stray
        ]
        for b in self.blocks:
            for m in b.markers:
                if m.problem:
                    found.append((m.line, f"{m.where}: {m.written}: {m.problem}"))
                elif not b.is_command:
                    kind = f"a {b.lang} block" if b.lang else "a block without an info string"
                    found.append((m.line, f"{m.where}: a marker before {kind}, which is not run anyway"))
            if b.runs and not [text for _, text in b.script() if text.strip()]:
                found.append((b.line, f"{b.where}: a {b.lang} block with no command ('$ ' starts one)"))
        return [message for _, message in sorted(found)]


def _markers_in(path: Path, token: Token) -> Iterator[Marker]:
    """The markers of an HTML block, each with the line its comment ends on."""
    first = token.map[0] if token.map else 0
    for m in _MARKER.finditer(token.content):
        end_line = first + token.content.count("\n", 0, m.end()) + 1
        yield parse_marker(path, end_line, m.group(1))


def read_page(path: Path, shown_as: Path | None = None) -> Page:
    """The page's fenced blocks with their markers, and its stray markers. `shown_as` is the path
    messages name (relative to the repository)."""
    name = shown_as or path
    tokens = MarkdownIt("commonmark").parse(path.read_text(encoding="utf-8"))
    pending: dict[int, list[Marker]] = {}  # by the line a fence must open on to take them
    stray: list[Marker] = []
    blocks: list[Block] = []
    for token, line in _walk(tokens):
        if token.type == "html_block":
            for marker in _markers_in(name, token):
                pending.setdefault(marker.line + 1, []).append(marker)
        elif token.type == "html_inline":
            stray += [parse_marker(name, line, m.group(1)) for m in _MARKER.finditer(token.content)]
        elif token.type == "fence":
            lang = token.info.split(maxsplit=1)[0] if token.info.strip() else ""
            blocks.append(Block(name, line, lang, token.content, tuple(pending.pop(line, ()))))
    stray += [m for markers in pending.values() for m in markers]
    return Page(name, tuple(blocks), tuple(stray))


def _walk(tokens: Sequence[Token]) -> Iterator[tuple[Token, int]]:
    """Block tokens with their first line (1-based), and the inline tokens inside them with their
    block's (the parser gives inline tokens none)."""
    for token in tokens:
        line = token.map[0] + 1 if token.map else 0
        yield token, line
        for child in token.children or ():
            yield child, line


# -- running ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    block: Block
    exit_code: int | None  # None: killed at the time limit
    output: str
    failed_line: int | None = None  # the page's line of the command bash stopped at
    failed_command: str = ""

    @property
    def passed(self) -> bool:
        return self.exit_code in self.block.exits and TRACEBACK not in self.output and not self.masked

    @property
    def masked(self) -> bool:
        """Whether a declared non-zero code came from a command before the last: the marker allows
        it of the last command only, so a failure earlier in the block is not taken for it."""
        last = self.block.last_command_line()
        if not self.exit_code or self.exit_code not in self.block.exits:
            return False
        if self.failed_line is None or last is None:
            return False
        return self.failed_line < last

    def report(self, time_limit: float = TIME_LIMIT_S) -> str:
        """The block's page and first line, the command, its exit code and the tail of its output."""
        b = self.block
        if self.exit_code is None:
            how = f"was killed at the time limit of {time_limit:g} s"
        else:
            allowed = ",".join(str(c) for c in sorted(b.exits))
            how = f"exited {self.exit_code} (allowed: {allowed})"
            if self.masked:
                how += " at a command before its last, which alone may end with a declared code"
            elif self.exit_code in b.exits:
                how += " but printed a Python traceback"
        lines = [f"{b.where}: the {b.lang} block {how}"]
        if self.failed_line is not None and (self.exit_code not in b.exits or self.masked):
            lines.append(f"  stopped at {b.path}:{self.failed_line}: {self.failed_command}")
        lines.append("  the block:")
        lines += [f"    {text}" for _, text in b.script()]
        tail = self.output.splitlines()[-TAIL_LINES:]
        lines.append(f"  its output (last {len(tail)} lines):" if tail else "  its output: none")
        lines += [f"    {text}" for text in tail]
        return "\n".join(lines)


def environment(scratch: Path, bin_dir: Path) -> dict[str, str]:
    """A reader's environment, with this repository's nodeagent first on PATH and its state in the
    scratch folder; nodeagent's other variables (a --root from NODEAGENT_ROOT...) are not the page's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEAGENT_")}
    env.pop("COLUMNS", None)
    state = scratch / ".nodeagent-state"
    state.mkdir(exist_ok=True)
    env["NODEAGENT_STATE_DIR"] = str(state)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', os.defpath)}"
    return env


def run_block(
    block: Block, scratch: Path, work: Path, env: dict[str, str], time_limit: float = TIME_LIMIT_S
) -> Outcome:
    """One block as one `bash -e -o pipefail` script in `scratch`; `work` (outside it) holds the
    script, its output and what bash stopped at, so the page's folder holds only what it made."""
    numbered = block.script()
    stopped = work / "stopped"
    stopped.unlink(missing_ok=True)
    # An ERR trap names the command `-e` stops at: its line in the script, one below the page's.
    trap = f'trap \'printf "%s\\t%s\\n" "$LINENO" "$BASH_COMMAND" >{shlex.quote(str(stopped))}\' ERR'
    script = work / "block.sh"
    script.write_text("\n".join([trap, *(text for _, text in numbered)]) + "\n", encoding="utf-8")
    log = work / "output"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["bash", "-e", "-o", "pipefail", str(script)],
            cwd=scratch,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code: int | None = proc.wait(timeout=time_limit)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            _kill_group(proc)
    with log.open("rb") as f:
        output = f.read(MAX_OUTPUT_BYTES).decode("utf-8", "replace")
    failed_line, failed_command = _stopped_at(stopped, numbered)
    return Outcome(block, code, output, failed_line, failed_command)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """The block's session, killed whole: bash at the time limit, and anything it left running."""
    with contextlib.suppress(ProcessLookupError):  # the whole group had ended
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _stopped_at(stopped: Path, numbered: list[tuple[int, str]]) -> tuple[int | None, str]:
    try:
        line, _, command = stopped.read_text(encoding="utf-8").partition("\t")
    except FileNotFoundError:
        return None, ""
    index = int(line) - 2  # the script's line 1 is the trap
    page_line = numbered[index][0] if 0 <= index < len(numbered) else None
    return page_line, command.strip()


def run_page(
    page: Page, scratch: Path, work: Path, bin_dir: Path, time_limit: float = TIME_LIMIT_S
) -> list[Outcome]:
    """The page's blocks that run, in order, until the first that fails (later ones may need what it
    should have made)."""
    env = environment(scratch, bin_dir)
    outcomes: list[Outcome] = []
    for block in page.blocks:
        if not block.runs:
            continue
        outcomes.append(run_block(block, scratch, work, env, time_limit))
        if not outcomes[-1].passed:
            break
    return outcomes


def failure(page: Page, outcomes: Sequence[Outcome]) -> str | None:
    """What failed on the page, or None."""
    failed = [o for o in outcomes if not o.passed]
    if not failed:
        return None
    left = sum(1 for b in page.blocks if b.runs) - len(outcomes)
    after = f"\n({left} later blocks of {page.path} not run)" if left else ""
    return failed[0].report() + after


def venv_bin() -> Path:
    """The folder of this interpreter, whose `nodeagent` is the repository's entry point."""
    return Path(sys.executable).parent


def main(argv: Sequence[str]) -> int:
    """Run each page as the test does; print its problems and its first failing block."""
    status = 0
    for name in argv:
        page = read_page(Path(name))
        for problem in page.problems():
            print(problem)
            status = 1
        with tempfile.TemporaryDirectory(prefix="docs-") as tmp:
            scratch, work = Path(tmp, "scratch"), Path(tmp, "work")
            scratch.mkdir()
            work.mkdir()
            outcomes = run_page(page, scratch, work, venv_bin())
        message = failure(page, outcomes)
        if message:
            print(message)
            status = 1
        else:
            print(f"{page.path}: {len(outcomes)} blocks ran and passed")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
