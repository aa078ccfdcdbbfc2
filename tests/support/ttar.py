"""Unpack a "ttar" text archive: the format prometheus/procfs and node_exporter keep their recorded
/sys and /proc trees in (https://github.com/ideaship/ttar).

Records are separated by "# ttar - - -" lines. A record is `Directory: PATH`, `Path: PATH` followed by
`Lines: N` and N lines of content, or `Path: PATH` followed by `SymlinkTo: TARGET`; `Mode: NNN` may
follow any. In content, "NULLBYTE" stands for a NUL byte, and a last line ending in "EOF" has no
newline after it.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath


class TtarError(ValueError):
    pass


def _safe(dest: Path, name: str, line_no: int) -> Path:
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts:
        raise TtarError(f"line {line_no}: path {name!r} leaves the archive")
    return dest.joinpath(*rel.parts)


def extract(text: str, dest: Path) -> None:
    """Write the archive's folders, files and links below `dest`."""
    lines = text.split("\n")
    i = 0
    path: Path | None = None
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line or line.startswith(("#", "Mode:")):
            continue
        key, _, value = line.partition(": ")
        if key == "Directory":
            _safe(dest, value, i).mkdir(parents=True, exist_ok=True)
        elif key == "Path":
            path = _safe(dest, value, i)
            path.parent.mkdir(parents=True, exist_ok=True)
        elif key == "SymlinkTo" and path is not None:
            path.symlink_to(value)
        elif key == "Lines" and path is not None and value.isdigit():
            count = int(value)
            body = lines[i : i + count]
            if len(body) < count:
                raise TtarError(f"line {i}: {count} lines announced, {len(body)} left")
            i += count
            content = "".join(f"{b}\n" for b in body)
            if body and body[-1].endswith("EOF"):
                content = content[: -len("EOF\n")]
            path.write_bytes(content.replace("NULLBYTE", "\0").encode("utf-8", "surrogateescape"))
        else:
            raise TtarError(f"line {i}: unexpected {line[:60]!r}")


def regular_files(archive: Path, dest: Path, top: str = "fixtures") -> dict[str, bytes]:
    """Extract `archive` under `dest`; its regular files (links left out) by their path from the
    tree's top folder `top`, as a recording's root holds them ("/sys/...")."""
    extract(archive.read_bytes().decode("utf-8", "surrogateescape"), dest)
    tree = dest / top
    return {
        "/" + str(p.relative_to(tree)): p.read_bytes()
        for p in tree.rglob("*")
        if p.is_file() and not p.is_symlink()
    }
