"""Many glob patterns expanded over a Tree in one walk: what the recorder (nodeagent.host.recorder) reads.

The checks declare about 200 patterns that share deep prefixes: some 30 walk the same levels of
/sys/fs/cgroup, and three (`/proc/[0-9]*/{status,cmdline,environ}`) the same few hundred process
folders. Expanded one by one (Host.glob), each folder is listed once per pattern, and each
component on the way is asked whether it is a link. Here the patterns form a trie, so:
- a folder is listed at most once, with its entries' kinds from the listing itself (readdir's d_type:
  no stat per entry);
- a last component that is a plain name is opened straight away (Tree.fetch), one system call for
  "absent", "a link", "a folder" or the contents, instead of listing its folder or an lstat first.
On the 2-CPU development VM a recording took 20 ms of CPU this way, 52 ms pattern by pattern (30 and
80 ms as root, which reads every process's environ); every node of an agentless pull pays it.

The result matches the pattern-by-pattern walk: every file a pattern reaches (through links, which
are reported with their targets, their resolved places then walked on), every folder a pattern ends
at, every link on the way. tests/unit/test_globwalk.py holds the two walks equal on random trees.
With `every_folder`, the folders a pattern passes through are reported as well (the recorder's
choice: a cpuN folder holding none of the declared files is still a CPU).

Imports only the standard library and nodeagent.host.tree: it runs on nodes (nodeagent.cluster.pull),
on Python 3.8 too. The wildcards the checks use (`*`, `?`, `[0-9]`) are matched here without the re
module, whose import is start-up time every node pays; any other bracket expression is left to
fnmatch, imported then.
"""

from __future__ import annotations

from nodeagent.host.tree import DIR, FILE, LINK, Tree

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Mapping

    # What the walk yields: (FILE, path, contents), (DIR, path, None) or (LINK, path, target).
    Found = tuple[str, str, bytes | str | None]

_DIGITS = frozenset("0123456789")
_DIGIT_CLASS = "[0-9]"
_STAR, _ONE, _DIGIT = "*", "?", "0"  # the pattern units besides literal characters


def _units(part: str) -> list[tuple[str, str]] | None:
    """`part` as units (kind, literal character), or None when it holds a bracket expression other
    than [0-9], which fnmatch matches instead."""
    units: list[tuple[str, str]] = []
    i = 0
    while i < len(part):
        c = part[i]
        if c == "[":
            if not part.startswith(_DIGIT_CLASS, i):
                return None
            units.append((_DIGIT, ""))
            i += len(_DIGIT_CLASS)
            continue
        units.append((c, "") if c in (_STAR, _ONE) else ("", c))
        i += 1
    return units


def _fits(name: str, units: list[tuple[str, str]]) -> bool:
    """`name` matches `units` whole: the classic wildcard match, which on a mismatch lets the
    last star take one more character (linear for one star, as the patterns have)."""
    i = p = 0
    star, mark = -1, 0
    while i < len(name):
        kind, char = units[p] if p < len(units) else (None, "")
        if kind == _STAR:
            star, mark = p, i
            p += 1
        elif kind is not None and (
            (kind == "" and name[i] == char) or kind == _ONE or (kind == _DIGIT and name[i] in _DIGITS)
        ):
            i += 1
            p += 1
        elif star >= 0:
            p, mark = star + 1, mark + 1
            i = mark
        else:
            return False
    return all(kind == _STAR for kind, _ in units[p:])


def matcher(part: str) -> Callable[[str], object]:
    """A test of one name against the glob component `part`, as fnmatch.fnmatchcase decides it."""
    units = _units(part)
    if units is None:
        import fnmatch
        import re

        return re.compile(fnmatch.translate(part)).match
    if part == _STAR:
        return lambda name: True
    literal = part[:-1]
    if part.endswith(_STAR) and not _is_wildcard(literal):
        return lambda name: name.startswith(literal)
    return lambda name: _fits(name, units)


def _is_wildcard(part: str) -> bool:
    return any(c in part for c in "*?[")


class _Node:
    """The patterns' components below one place: plain names, and wildcards with their matchers."""

    __slots__ = ("end", "guard", "names", "wildcards")

    def __init__(self) -> None:
        self.end = False  # a pattern ends here
        self.names: dict[str, _Node] = {}
        self.wildcards: dict[str, tuple[Callable[[str], object], _Node]] = {}
        self.guard: str | None = None  # one of `names`, read first: empty or absent, the rest are not

    @property
    def deeper(self) -> bool:
        return bool(self.names or self.wildcards)


def _trie(patterns: Iterable[str], guards: Mapping[str, str]) -> _Node:
    root = _Node()
    for pattern in patterns:
        node = root
        for part in pattern.split("/"):
            if not part:
                continue
            if _is_wildcard(part):
                if part not in node.wildcards:
                    # As fnmatchcase: `*` matches names starting with "." too, as in Host.glob.
                    node.wildcards[part] = (matcher(part), _Node())
                node = node.wildcards[part][1]
            else:
                node = node.names.setdefault(part, _Node())
        node.end = True
    for folders, name in guards.items():
        guarded = _below(root, folders)
        if guarded is not None and name in guarded.names and not guarded.wildcards:
            guarded.guard = name
    return root


def _below(root: _Node, pattern: str) -> _Node | None:
    """The trie's node for `pattern`, component for component; None when no pattern goes there."""
    node = root
    for part in filter(None, pattern.split("/")):
        child = node.wildcards[part][1] if part in node.wildcards else node.names.get(part)
        if child is None:
            return None
        node = child
    return node


def walk(
    tree: Tree,
    patterns: Iterable[str],
    as_folders: Collection[str] = (),
    every_folder: bool = False,
    guards: Mapping[str, str] | None = None,
) -> list[Found]:
    """Everything `patterns` reach in `tree`: a file's contents are None when it cannot be read
    (EACCES, EIO), and a link is reported when a pattern ends at it or reaches past it. `as_folders`
    are links walked as if they were folders and not reported (the recorder keeps /proc/self, its
    own process, that way). A place reached twice (two links to one folder) is reported twice.
    `every_folder` also reports each folder that a component of a pattern matched, whether or not
    anything is found below it, and the links leading to it: no extra system call, as each such
    folder was listed or opened on the way anyway. `guards` maps a folder pattern to one file
    name the patterns read in it: read first, and when it is empty or absent, no other name below
    that folder is read (a folder the patterns enter only by plain names)."""
    root = _trie(patterns, guards or {})
    return _Walk(tree, root, as_folders, every_folder).place("/", DIR, root)


class _Walk:
    """One walk of a trie over a tree: `place` reports one path, `visit` the entries of a folder."""

    def __init__(self, tree: Tree, root: _Node, as_folders: Collection[str], every_folder: bool) -> None:
        self.tree = tree
        self.root = root
        self.as_folders = as_folders
        self.every_folder = every_folder
        self.visited: dict[tuple[str, int], list[Found]] = {}

    def visit(self, folder: str, node: _Node) -> list[Found]:
        # `folder` has its links resolved (or is one of as_folders): Tree.scan and fetch rely on it.
        # Each visit goes one component deeper in the trie, so a link loop cannot recurse forever.
        key = (folder, id(node))
        if key in self.visited:
            return self.visited[key]
        self.visited[key] = found = []
        prefix = folder.rstrip("/") + "/"
        if not node.wildcards:
            if node.guard is not None:
                found += self.place(prefix + node.guard, None, node.names[node.guard])
                if not any(kind == FILE and value for kind, _, value in found):
                    return found
            for name, child in node.names.items():
                if name != node.guard:
                    found += self.place(prefix + name, None, child)
            return found
        for name, kind in (self.tree.scan(folder) or {}).items():
            children = [child for match, child in node.wildcards.values() if match(name)]
            if name in node.names:
                children.append(node.names[name])
            for child in children:
                found += self.place(prefix + name, kind, child)
        return found

    def place(self, path: str, kind: str | None, node: _Node) -> list[Found]:
        tree = self.tree
        value: bytes | str | None = None
        if path in self.as_folders:
            kind = DIR
        elif kind is None or (kind == FILE and node.end):
            fetched = tree.fetch(path)
            if fetched is None:
                return []
            kind, value = fetched
        if kind == LINK:
            target = value if value is not None else tree.link_target(path)
            real = tree.resolve(path)  # None: dangling
            below = [] if real is None else self.place(real, None if node.end else tree.kind(real), node)
            return [(LINK, path, target), *below] if node.end or below else []
        if kind == DIR:
            # The trie's root is only ever placed at the walk's start, which no pattern matched.
            keep = node.end or (self.every_folder and node is not self.root)
            found: list[Found] = [(DIR, path, None)] if keep else []
            return found + self.visit(path, node) if node.deeper else found
        return [(FILE, path, value)] if node.end else []
