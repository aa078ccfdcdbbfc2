"""The machine nodeagent runs on."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

from nodeagent.host.base import CmdResult, Host
from nodeagent.host.tree import LiveTree, Tree


class TreeHost(Host):
    """A host whose files come from a Tree; subclasses say how commands run."""

    def __init__(self, tree: Tree) -> None:
        super().__init__()
        self.tree = tree

    def read(self, path: str) -> str | None:
        return self.tree.read(path)

    def read_bytes(self, path: str) -> bytes | None:
        return self.tree.read_bytes(path)

    def listdir(self, path: str) -> list[str] | None:
        return self.tree.listdir(path)

    def readlink(self, path: str) -> str | None:
        return self.tree.readlink(path)

    def realpath(self, path: str) -> str | None:
        return self.tree.resolve(path)

    def is_dir(self, path: str) -> bool:
        return self.tree.is_dir(path)

    def unreadable(self, path: str) -> str | None:
        return self.tree.unreadable(path)

    def lexists(self, path: str) -> bool:
        return self.tree.lexists(path)

    def write(self, path: str, value: str) -> None:
        self.tree.write(path, value)

    def put_file(self, path: str, text: str) -> None:
        self.tree.put_file(path, text)

    def remove_file(self, path: str) -> None:
        self.tree.remove_file(path)

    def remove_dir(self, path: str) -> None:
        self.tree.remove_dir(path)


class LocalHost(TreeHost):
    """This machine. `root` other than "/" confines reads and writes to a copy of a tree (tests)."""

    kind = "local"

    def __init__(self, root: str = "/", name: str | None = None) -> None:
        super().__init__(LiveTree(root))
        self.root = root
        self.name = name or os.uname().nodename  # gethostname(2) is uname's nodename

    @property
    def is_live(self) -> bool:
        return os.path.abspath(self.root) == "/"

    def run(self, argv: Sequence[str], timeout: float = 10.0) -> CmdResult:
        args = tuple(argv)
        # A missing tool (nvidia-smi on a CPU node) is answered without forking: the agentless pull
        # records every declared command on every node of a fleet.
        if "/" not in args[0] and shutil.which(args[0]) is None:
            return CmdResult(args, "", f"{args[0]}: command not found", 127)
        import subprocess  # here: a CPU node recorded by the agentless pull runs no tool at all

        # A fixed locale keeps tool output parseable (decimal points, English field names).
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        try:
            proc = subprocess.run(
                args, capture_output=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL, check=False
            )
        except FileNotFoundError:
            return CmdResult(args, "", f"{args[0]}: command not found", 127)
        except PermissionError as e:
            return CmdResult(args, "", f"{args[0]}: {e.strerror}", 126)
        except subprocess.TimeoutExpired:
            return CmdResult(args, "", f"{args[0]}: timed out after {timeout:g}s", 124)
        return CmdResult(
            args,
            proc.stdout.decode("utf-8", errors="replace"),
            proc.stderr.decode("utf-8", errors="replace"),
            proc.returncode,
        )
