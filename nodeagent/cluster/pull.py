"""The agentless pull: one SSH command that records a node with its own python3 and streams the
snapshot back, so the checks run centrally on exactly what they declare.

The node needs no nodeagent: the command carries the recorder's own sources (nodeagent.host.recorder
and the host modules it stands on, all standard library only) on its standard input, and a tiny
bootstrap that loads them as modules and calls `nodeagent.host.recorder.remote_main`. The same code
records a node locally (`nodeagent snapshot`) and over SSH, so both give the same tree.

What the node pays for is what a fleet of hundreds pays for, so the bootstrap does no more than it
must. Its path imports no json, re, typing, fnmatch, shlex, shutil, threading or subprocess: on the
2-CPU development VM those cost 17-20 ms of CPU per pull, against 7.5 ms for `python3 -I -S -c pass`
(tests/unit/test_pull.py holds the list). Beside the sources travel the same modules compiled here
(marshal), which a node whose python3 has this interpreter's bytecode (the same implementation and
magic number) runs without compiling them; any other python3 compiles the sources. And the node's
garbage collector is off: the recorder lives for a fraction of a second and frees what it drops by
reference counting, while the collector's passes over its thousands of small objects were a tenth
of its CPU time.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import marshal
import shlex
import sys
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nodeagent import __version__
from nodeagent.core import limits
from nodeagent.host import recorder

if TYPE_CHECKING:
    from nodeagent.host.recorder import Recording

# Loaded in this order on the node: each imports only the standard library and those before it.
_PACKAGES = ("nodeagent", "nodeagent.host")
_MODULES = (
    "nodeagent.host.base",
    "nodeagent.host.tree",
    "nodeagent.host.globwalk",
    "nodeagent.host.spawn",
    "nodeagent.host.local",
    "nodeagent.host.recorder",
)

# Runs on the node as `python3 -I -S -c BOOTSTRAP`, the payload on its standard input (not in argv:
# the node's process list and every snapshot of it stay small). The payload is marshal's format 4 of
# plain values (dicts, lists, str, bytes, floats), which every Python 3.4 and later reads with a
# module built into the interpreter (json would import re: milliseconds on every node). Modules are
# registered in sys.modules before their code runs, as the import system does. The compiled modules
# are used where the node's bytecode is this interpreter's: same implementation (cache_tag) and magic
# number, read from the import system's frozen module, always loaded.
BOOTSTRAP = (
    "import gc,marshal,sys,zlib\n"
    "gc.disable()\n"
    "d=marshal.loads(zlib.decompress(sys.stdin.buffer.read()))\n"
    "c=d['compiled'];b=getattr(sys.modules.get('_frozen_importlib_external'),'MAGIC_NUMBER',b'')\n"
    "k=c['tag']==sys.implementation.cache_tag and c['magic']==b\n"
    "M=type(sys)\n"
    "for n in d['packages']:\n"
    " m=M(n);m.__path__=[];sys.modules[n]=m\n"
    "for (n,s),x in zip(d['modules'],c['modules']):\n"
    " m=M(n);sys.modules[n]=m\n"
    " exec(marshal.loads(x) if k else compile(s,'<nodeagent:'+n+'>','exec'),m.__dict__)\n"
    "sys.modules['nodeagent.host.recorder'].remote_main(d['spec'])\n"
)
# Plain values in marshal's version 4 read the same on every Python 3 since 3.4 (the code objects
# inside are bytes, unmarshalled only by a node whose bytecode matches).
_MARSHAL_VERSION = 4


@functools.cache
def _sources() -> tuple[tuple[str, str], ...]:
    return tuple((name, inspect.getsource(importlib.import_module(name))) for name in _MODULES)


@functools.cache
def _compiled() -> dict[str, object]:
    """The modules compiled as the bootstrap would compile them (no flags inherited from this
    module, no -O), for nodes whose interpreter reads this one's bytecode."""
    modules = [
        marshal.dumps(compile(source, f"<nodeagent:{name}>", "exec", dont_inherit=True, optimize=0))
        for name, source in _sources()
    ]
    return {"tag": sys.implementation.cache_tag, "magic": importlib.util.MAGIC_NUMBER, "modules": modules}


def payload(patterns: Sequence[str], commands: Sequence[Sequence[str]], command_timeout: float) -> bytes:
    doc = {
        "packages": list(_PACKAGES),
        "modules": [list(m) for m in _sources()],
        "compiled": _compiled(),
        "spec": {
            "patterns": list(patterns),
            "commands": [list(c) for c in commands],
            "command_timeout": command_timeout,
            "version": __version__,
        },
    }
    return zlib.compress(marshal.dumps(doc, _MARSHAL_VERSION), 9)


def command(python: str) -> str:
    """The remote shell command line: every word quoted, the interpreter included (it comes from
    the inventory). `-I`: no user site-packages or PYTHON* variables can change what runs; `-S`: no
    `site` either (the recorder needs the standard library only, and every node pays the import)."""
    return shlex.join([python, "-I", "-S", "-c", BOOTSTRAP])


def read(stream: bytes, cap: int | None = None) -> Recording:
    """The recording in the pull stream `stream`, inflated in one pass that stops as soon as it
    passes `cap` bytes (default NODEAGENT_MAX_RECORDING_MIB): a zlib bomb costs at most the cap, as
    the largest recording allowed does. ValueError naming what is wrong otherwise (not a recording,
    truncated, corrupt, too large)."""
    if not stream.startswith(recorder.PULL_MAGIC):
        return recorder.decode(stream)  # names what it is instead
    body = _inflate(stream[len(recorder.PULL_MAGIC) :], _cap(cap))
    return recorder.decode_body(body)


def _cap(cap: int | None) -> int:
    return limits.limit_bytes("NODEAGENT_MAX_RECORDING_MIB") if cap is None else cap


_PIECE = 1 << 20  # what one step of inflating may produce


def _inflate(data: bytes, cap: int) -> bytes:
    """`data` inflated in pieces of _PIECE, stopping with ValueError as soon as the output passes
    `cap`, or when the stream is corrupt or ends before its end."""
    inflate = zlib.decompressobj()
    pieces: list[bytes] = []
    size = 0
    try:
        while not inflate.eof:
            chunk = inflate.decompress(data, _PIECE)
            data = inflate.unconsumed_tail
            size += len(chunk)
            if size > cap:
                raise ValueError(
                    f"it decompresses to more than {cap / limits.MiB:g} MiB "
                    "(limit NODEAGENT_MAX_RECORDING_MIB)"
                )
            pieces.append(chunk)
            if not chunk and not data:
                break  # all of the input read
    except zlib.error as e:
        raise ValueError(f"a truncated or corrupt recording ({e})") from None
    if not inflate.eof:
        raise ValueError("a truncated or corrupt recording (the stream ends before its end)")
    return b"".join(pieces)
