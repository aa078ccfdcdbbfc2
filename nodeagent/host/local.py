"""The machine nodeagent runs on."""

from __future__ import annotations

import os

from nodeagent.host import spawn
from nodeagent.host.base import Host
from nodeagent.host.tree import LiveTree, Tree

TYPE_CHECKING = False
if TYPE_CHECKING:  # this module runs on nodes too: no import that is only for the type checker
    from collections.abc import Sequence

    from nodeagent.host.base import CmdResult, Started

# The NVIDIA driver's procfs folder is the environment's own: the NVIDIA container runtime mounts a
# tmpfs there holding the driver's version and parameters and only the GPUs given to the container
# (libnvidia-container, src/nvc_mount.c: mount_procfs and mount_procfs_gpu), the GPUs that NVML and
# nvidia-smi running here report. Through a live mount the node's folder lists every GPU of the node,
# and a GPU given to another pod would read as one the driver attached but NVML lost.
THIS_ENVIRONMENT = ("/proc/driver/nvidia",)


class MountedTree(Tree):
    """The files of a machine mounted live at `root` (a pod's /host), except the folders
    THIS_ENVIRONMENT names, read from this process's own file system (where its commands run)."""

    def __init__(self, root: str) -> None:
        self.node = LiveTree(root)
        self.here = LiveTree("/")

    def _tree(self, path: str) -> LiveTree:
        here = any(path == p or path.startswith(p + "/") for p in THIS_ENVIRONMENT)
        return self.here if here else self.node

    def kind(self, path: str) -> str | None:
        return self._tree(path).kind(path)

    def link_target(self, path: str) -> str | None:
        return self._tree(path).link_target(path)

    def file_bytes(self, path: str) -> bytes | None:
        return self._tree(path).file_bytes(path)

    def entries(self, path: str) -> list[str] | None:
        return self._tree(path).entries(path)

    def scan(self, folder: str) -> dict[str, str] | None:
        return self._tree(folder).scan(folder)

    def fetch(self, path: str) -> tuple[str, bytes | str | None] | None:
        return self._tree(path).fetch(path)

    def unreadable(self, path: str) -> str | None:
        real = self.resolve(path) or path
        return self._tree(real).unreadable(real)

    def write(self, path: str, value: str) -> None:
        self.node.write(path, value)

    def put_file(self, path: str, text: str) -> None:
        self.node.put_file(path, text)

    def remove_file(self, path: str) -> None:
        self.node.remove_file(path)

    def remove_dir(self, path: str) -> None:
        self.node.remove_dir(path)


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
    """This machine. `root` other than "/" reads and writes files below it: with `live_mount`, a
    folder where this machine's procfs and sysfs are mounted (a pod's /host: nodeagent.host.mounts
    tells it from the mount table), else a copy of a tree (tests). Commands run here either way."""

    kind = "local"

    def __init__(self, root: str = "/", name: str | None = None, live_mount: bool = False) -> None:
        super().__init__(MountedTree(root) if live_mount else LiveTree(root))
        self.root = root
        self.live_mount = live_mount
        self.name = name or os.uname().nodename  # gethostname(2) is uname's nodename

    @property
    def is_live(self) -> bool:
        # A live mount shows the machine this process runs on (a pod runs on its node): what
        # py-cpuinfo reads of this CPU is that machine's.
        return self.live_mount or os.path.abspath(self.root) == "/"

    def run(self, argv: Sequence[str], timeout: float = 10.0) -> CmdResult:
        return self.start(argv, timeout).result()

    def start(self, argv: Sequence[str], timeout: float = 10.0) -> Started:
        # A fixed locale keeps tool output parseable (decimal points, English field names).
        return spawn.start(argv, timeout, {**os.environ, "LC_ALL": "C", "LANG": "C"})
