"""The agentless pull: one SSH command that records a node with its own python3 and streams the
snapshot back, so the checks run centrally on exactly what they declare.

The node needs no nodeagent: the command carries the recorder's own sources (nodeagent.host.recorder
and the host modules it stands on, all standard library only), compressed into one argument, and a
tiny bootstrap that loads them as modules and calls `nodeagent.host.recorder.remote_main`. The same code
records a node locally (`nodeagent snapshot`) and over SSH, so both give the same tree.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import shlex
import zlib
from collections.abc import Sequence

from nodeagent import __version__
from nodeagent.core import limits

# Loaded in this order on the node: each imports only the standard library and those before it.
_PACKAGES = ("nodeagent", "nodeagent.host")
_MODULES = (
    "nodeagent.host.base",
    "nodeagent.host.tree",
    "nodeagent.host.globwalk",
    "nodeagent.host.local",
    "nodeagent.host.recorder",
)

# Runs on the node as `python3 -I -S -c BOOTSTRAP`, the payload on its standard input (not in argv:
# the node's process list and every snapshot of it stay small). Modules are registered in
# sys.modules before their code runs, as the import system does (dataclasses look theirs up).
BOOTSTRAP = (
    "import json,sys,types,zlib\n"
    "d=json.loads(zlib.decompress(sys.stdin.buffer.read()))\n"
    "for n in d['packages']:\n"
    " m=types.ModuleType(n);m.__path__=[];sys.modules[n]=m\n"
    "for n,s in d['modules']:\n"
    " m=types.ModuleType(n);sys.modules[n]=m;exec(compile(s,'<nodeagent:'+n+'>','exec'),m.__dict__)\n"
    "sys.modules['nodeagent.host.recorder'].remote_main(d['spec'])\n"
)


@functools.cache
def _sources() -> tuple[tuple[str, str], ...]:
    return tuple((name, inspect.getsource(importlib.import_module(name))) for name in _MODULES)


def payload(patterns: Sequence[str], commands: Sequence[Sequence[str]], command_timeout: float) -> bytes:
    doc = {
        "packages": list(_PACKAGES),
        "modules": [list(m) for m in _sources()],
        "spec": {
            "patterns": list(patterns),
            "commands": [list(c) for c in commands],
            "command_timeout": command_timeout,
            "version": __version__,
        },
    }
    return zlib.compress(json.dumps(doc).encode(), 9)


def command(python: str) -> str:
    """The remote shell command line: every word quoted, the interpreter included (it comes from
    the inventory). `-I`: no user site-packages or PYTHON* variables can change what runs; `-S`: no
    `site` either (the recorder needs the standard library only, and every node pays the import)."""
    return shlex.join([python, "-I", "-S", "-c", BOOTSTRAP])


def check_size(stream: bytes, cap: int | None = None) -> None:
    """ValueError when the pull stream `stream` decompresses to more than `cap` bytes (default
    NODEAGENT_MAX_RECORDING_MIB), found while decompressing in bounded pieces, so a zlib bomb (2 MB
    that inflate to gigabytes) costs one piece of memory at a time; then nodeagent.host.recorder.decode
    can inflate it whole. A stream that is not a recording is left to decode to name."""
    from nodeagent.host.recorder import PULL_MAGIC

    if not stream.startswith(PULL_MAGIC):
        return
    limit = limits.limit_bytes("NODEAGENT_MAX_RECORDING_MIB") if cap is None else cap
    inflate = zlib.decompressobj()
    size = 0
    piece = 1 << 20
    data = stream[len(PULL_MAGIC) :]
    try:
        while not inflate.eof:
            chunk = inflate.decompress(data, piece)
            data = inflate.unconsumed_tail
            size += len(chunk)
            if not chunk and not data:
                break  # all of the input read (a truncated stream: decode names it)
            if size > limit:
                raise ValueError(
                    f"it decompresses to more than {limit / limits.MiB:g} MiB "
                    "(limit NODEAGENT_MAX_RECORDING_MIB)"
                )
    except zlib.error:
        return  # decode names the corruption
