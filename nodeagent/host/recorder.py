"""`nodeagent snapshot`: record exactly what the checks declare (paths and commands) as a tar.gz
that `--root` reads back, with the links of /sys kept as links so the tree resolves as on the node.

Privacy: a snapshot leaves the machine. Process environments keep only the variables nodeagent
reads (thread pools, ranks, CUDA/NCCL), and command-line arguments that look like credentials are
redacted.

This module imports only the standard library and nodeagent.host's base, tree and local modules:
the cluster runner ships exactly these sources to a node that has no nodeagent installed and runs
`remote_main` there with the node's own `python3` (nodeagent.cluster.pull), so a node is recorded
by the same code locally and over SSH. Keep it that way, and runnable on Python 3.8. On a node every
import is start-up time paid at every pull (nodeagent.cluster.pull): json, re, threading and
tarfile are imported only by what runs on this machine, never on the node's path.
"""

from __future__ import annotations

import io
import os
import struct
import sys
import time
import zlib

from nodeagent.host import globwalk
from nodeagent.host.base import COMMANDS_DIR, META_FILE, Host, command_name
from nodeagent.host.local import LocalHost, TreeHost
from nodeagent.host.tree import DIR, LINK

TYPE_CHECKING = False
if TYPE_CHECKING:
    import tarfile
    from collections.abc import Iterable, Mapping, Sequence
    from pathlib import Path
    from typing import IO, Any

COMMAND_TIMEOUT_S = 30.0

# A process whose command line is empty is a kernel thread or a zombie (proc(5), /proc/pid/cmdline),
# and the checks read a process's status and environment only when it has one (checks/threads.py).
# Most of a many-core node's /proc is per-CPU kernel threads: their folders hold the empty cmdline.
_GUARDS = {"/proc/[0-9]*": "cmdline"}

# /proc/<pid>/environ: only what the checks and tuners look at, the variables of these families and
# names. As root a node's processes hold thousands of variables: a file holding none of _ENV_MARKERS
# (most of them) is dropped after one substring search per marker, in C, before anything is split.
_ENV_FAMILIES = (
    b"OMP_", b"KMP_", b"GOMP_", b"TF_", b"MKL_", b"OPENBLAS_", b"CUDA_", b"NCCL_", b"NVIDIA_", b"HOROVOD_",
)  # fmt: skip
_ENV_NAMES = frozenset(
    (
        b"LOCAL_RANK", b"RANK", b"WORLD_SIZE", b"LOCAL_WORLD_SIZE", b"SLURM_NTASKS_PER_NODE",
        b"SLURM_LOCALID", b"SLURM_NTASKS", b"SLURM_CPUS_ON_NODE", b"SLURM_CPUS_PER_TASK",
        b"SLURM_JOB_CPUS_PER_NODE", b"OMPI_COMM_WORLD_LOCAL_RANK", b"OMPI_COMM_WORLD_LOCAL_SIZE",
        b"MPI_LOCALNRANKS", b"ONEDNN_MAX_CPU_ISA", b"DNNL_MAX_CPU_ISA",
    )
)  # fmt: skip
# Every kept item holds one of these (GOMP_ holds OMP_, each name one of the last four).
_ENV_MARKERS = (*(f for f in _ENV_FAMILIES if f != b"GOMP_"), b"RANK", b"SIZE", b"SLURM_", b"MAX_CPU_ISA")
# Command-line arguments whose name holds one of these (in any case) have their values redacted.
_SECRET_WORDS = ("pass", "secret", "token", "apikey", "api_key", "api-key", "credential", "auth")
# Kept environment variables whose name holds one of these have their value replaced by REDACTED,
# the name kept (a check may ask whether it is set): passwords (PASSWORD, PASSWD, PASSPHRASE), API
# keys and tokens (NVIDIA_API_KEY, NGC_API_KEY, HF_TOKEN, WANDB_API_KEY), the cloud providers'
# usual names (AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AZURE_CLIENT_SECRET,
# GOOGLE_APPLICATION_CREDENTIALS), Terraform's TF_VAR_*password, cookies and private keys.
_SECRET_ENV_WORDS = (
    b"KEY", b"TOKEN", b"SECRET", b"PASS", b"CRED", b"AUTH", b"COOKIE", b"SESSION", b"PRIVATE", b"SIGNATURE",
)  # fmt: skip
REDACTED = b"REDACTED"
# Programs whose short option takes a password, glued (`mysql -pSECRET`) or as the next argument
# (True: `sshpass -p SECRET`; mysql's lone -p prompts instead): mysql(1), sshpass(1), redis-cli -a,
# mongosh -p, zip/unzip -P, 7z -p.
_PASSWORD_OPTIONS = {
    b"mysql": (b"-p", False), b"mysqldump": (b"-p", False), b"mysqladmin": (b"-p", False),
    b"mariadb": (b"-p", False), b"mariadb-dump": (b"-p", False), b"sshpass": (b"-p", True),
    b"redis-cli": (b"-a", True), b"mongo": (b"-p", True), b"mongosh": (b"-p", True),
    b"zip": (b"-P", True), b"unzip": (b"-P", True), b"7z": (b"-p", False),
}  # fmt: skip
# Where a URL's authority ends (RFC 3986, 3.2): its user:password@ is in front of the host.
_AUTHORITY_ENDS = (b"/", b"?", b"#", b" ", b",", b";", b"\n", b"'", b'"')


class Recording:
    """What was recorded: files by path, links by path (their targets as stored), folders."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.links: dict[str, str] = {}
        self.dirs: set[str] = set()


def _filter_environ(data: bytes) -> bytes:
    if not any(marker in data for marker in _ENV_MARKERS):
        return b""
    kept = [
        _masked_variable(item)
        for item in data.split(b"\0")
        if item.startswith(_ENV_FAMILIES) or item.partition(b"=")[0] in _ENV_NAMES
    ]
    return b"\0".join(kept) + (b"\0" if kept else b"")


def _masked_variable(item: bytes) -> bytes:
    """NAME=VALUE with VALUE redacted when NAME looks like a secret's, else with the credentials of
    any URL in it redacted."""
    name, eq, value = item.partition(b"=")
    if not eq:
        return item
    if any(word in name.upper() for word in _SECRET_ENV_WORDS):
        return name + b"=" + REDACTED
    return name + b"=" + _without_userinfo(value)


def _without_userinfo(text: bytes) -> bytes:
    """`text` with the user:password@ of every URL replaced (scheme://REDACTED@host/...)."""
    out = b""
    rest = text
    while True:
        start = rest.find(b"://")
        if start < 0:
            return out + rest
        head, rest = rest[: start + 3], rest[start + 3 :]
        end = min((i for i in (rest.find(c) for c in _AUTHORITY_ENDS) if i >= 0), default=len(rest))
        at = rest.rfind(b"@", 0, end)
        out += head + (REDACTED + rest[at:end] if at >= 0 else rest[:end])
        rest = rest[end:]


def _secret(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_WORDS)


def _redact_cmdline(data: bytes) -> bytes:
    """A command line with the values of password-like options (`--password X`, `--api-key=X`,
    `mysql -pX`, `sshpass -p X`) and the credentials of URLs replaced by REDACTED."""
    args = data.split(b"\0")
    program = args[0].rsplit(b"/", 1)[-1]
    flag, flag_takes_next = _PASSWORD_OPTIONS.get(program, (None, False))
    out: list[bytes] = args[:1]
    redact_next = False
    for arg in args[1:]:
        if redact_next:
            out.append(REDACTED)
            redact_next = False
            continue
        if flag is not None and arg.startswith(flag) and (len(arg) > len(flag) or flag_takes_next):
            out.append(flag + REDACTED if len(arg) > len(flag) else arg)
            redact_next = len(arg) == len(flag)
            continue
        text = arg.decode(errors="replace")
        key, eq, _ = text.partition("=")
        if _secret(key):
            if eq:
                out.append(f"{key}=REDACTED".encode())
                continue
            redact_next = text.startswith("-")
        out.append(_without_userinfo(arg))
    return b"\0".join(out)


def _sanitize(path: str, data: bytes) -> bytes:
    if path.startswith("/proc/") and path.endswith("/environ"):
        return _filter_environ(data)
    if path.startswith("/proc/") and path.endswith("/cmdline"):
        return _redact_cmdline(data)
    return data


def record(
    host: TreeHost,
    patterns: Iterable[str],
    commands: Iterable[Sequence[str]],
    command_timeout: float = COMMAND_TIMEOUT_S,
) -> Recording:
    """Every file, folder and link `patterns` reach on `host` (with the folders on their way), and
    the `commands`' outputs."""
    rec = Recording()
    argvs = [tuple(a) for a in commands]
    # The commands run while the files are read, each bounded by its timeout (Host.start).
    started = [host.start(argv, command_timeout) for argv in argvs]
    # /proc/self is nodeagent itself while recording: kept as a folder, not a link to a pid.
    # Every folder a pattern passes through is kept, empty if need be: the facts count cpuN and nodeN
    # folders (hwloc does too), and a CPU or memoryless node holding no declared file is still there.
    try:
        found = globwalk.walk(
            host.tree, patterns, as_folders=("/proc/self",), every_folder=True, guards=_GUARDS
        )
    finally:  # every command is waited for (and reaped), whatever the walk met
        results = [running.result() for running in started]
    for kind, path, value in found:
        if kind == LINK:
            rec.links[path] = str(value)
        elif kind == DIR:
            if path != "/":  # a link to "/" on the way: the root is every tree's, and has no name
                rec.dirs.add(path)
        elif isinstance(value, bytes):  # None: unreadable, left out
            rec.files[path] = _sanitize(path, value)
    for argv, result in zip(argvs, results):  # noqa: B905 - zip(strict=) is Python 3.10, nodes run 3.8
        stem = f"/{COMMANDS_DIR}/{command_name(argv)}"
        rec.files[stem + ".txt"] = result.stdout.encode()
        if not result.ok:
            rec.files[stem + ".exit"] = f"{result.exited}\n".encode()
            rec.files[stem + ".err"] = result.stderr.encode()
    return rec


def _add(
    tf: tarfile.TarFile, name: str, kind: bytes, mtime: float, data: bytes = b"", link: str = ""
) -> None:
    import tarfile

    info = tarfile.TarInfo(name.lstrip("/"))
    info.type = kind
    info.mtime = int(mtime)
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    if kind == tarfile.SYMTYPE:
        info.linkname = link
        tf.addfile(info)
    elif kind == tarfile.DIRTYPE:
        tf.addfile(info)
    else:
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))


def write_tar(rec: Recording, raw: IO[bytes], meta: Mapping[str, object]) -> None:
    """The recording as a tar.gz stream (folders, then links, then files, each sorted)."""
    import json
    import tarfile

    now = time.time()
    rec.files["/" + META_FILE] = json.dumps(meta, indent=2).encode()
    with tarfile.open(fileobj=raw, mode="w:gz") as tf:
        for d in sorted(rec.dirs):
            _add(tf, d, tarfile.DIRTYPE, now)
        for name, target in sorted(rec.links.items()):
            _add(tf, name, tarfile.SYMTYPE, now, link=target)
        for name, data in sorted(rec.files.items()):
            _add(tf, name, tarfile.REGTYPE, now, data=data)


def write(rec: Recording, output: Path, meta: Mapping[str, object]) -> None:
    """Write the archive through the one safe writer (nodeagent.core.safe_write): replaced whole,
    so a reader never sees half a snapshot; a link, device or FIFO at `output` refused (UsageError),
    never followed or replaced. 0600: a recording holds what the node's files and commands showed."""
    # Imported here: this module also runs on nodes (nodeagent.cluster.pull), where only the host
    # modules are; archives are written on this machine only.
    from nodeagent.core.safe_write import write_file

    write_file(output, lambda raw: write_tar(rec, raw, meta), mode=0o600, make_folders=True)


def metadata(
    host: Host,
    patterns: Sequence[str],
    commands: Sequence[Sequence[str]],
    version: str,
    hostname: str | None = None,
) -> dict[str, object]:
    """The recording's nodeagent.json. `hostname` names the machine where the kernel's name is not
    its own: in a pod, /proc/sys/kernel/hostname is the pod's UTS namespace, not the node."""
    return {
        "hostname": hostname or host.read_value("/proc/sys/kernel/hostname") or os.uname().nodename,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "nodeagent": version,
        "paths": list(patterns),
        "commands": [list(c) for c in commands],
    }


def redacted(rec: Recording, meta: Mapping[str, object]) -> tuple[Recording, dict[str, object]]:
    """`rec` and its metadata with host names, addresses, UUIDs, GUIDs and serials replaced by placeholders
    (nodeagent.host.redact); the metadata's `redacted` says how many of each kind, never which."""
    import json

    from nodeagent.host import redact  # not among the sources the pull ships: it runs here, never on nodes

    meta_path = "/" + META_FILE
    # The metadata holds the host name too: redacted with the files, so it gets the same placeholder.
    out = redact.redact({**rec.files, meta_path: json.dumps(meta).encode()}, rec.links, rec.dirs)
    clean = Recording()
    clean.files, clean.links, clean.dirs = out.files, out.links, out.dirs
    clean_meta: dict[str, object] = json.loads(clean.files.pop(meta_path))
    clean_meta["redacted"] = out.counts
    return clean, clean_meta


def snapshot(
    host: TreeHost,
    patterns: Sequence[str],
    commands: Sequence[Sequence[str]],
    output: Path,
    redact: bool = False,
    hostname: str | None = None,
) -> Recording:
    """Record `patterns` and `commands` on `host` into the archive `output` (identifiers replaced
    with `redact`, for a recording that goes public), named `hostname` when given; the recording as
    written."""
    from nodeagent import __version__

    rec = record(host, patterns, commands)
    meta = metadata(host, patterns, commands, __version__, hostname)
    if redact:
        rec, meta = redacted(rec, meta)
    write(rec, output, meta)
    return rec


# The pull's stream (remote_main -> nodeagent.cluster): a recording framed as
# kind (d|l|f), u32 path length, u32 data length, path, data; zlib-compressed after the magic line.
# Not tar: Python's tarfile parses about 40 us per member header, so the 800 members of a busy
# node cost 60 ms of the control node's CPU per host, 4x the checks themselves; this reads in 2 ms.
PULL_MAGIC = b"nodeagent-recording 1\n"
_FRAME = struct.Struct("<cII")


def encode(rec: Recording, meta: Mapping[str, object]) -> bytes:
    body = bytearray()

    def frame(kind: bytes, path: str, data: bytes) -> None:
        raw = path.encode("utf-8", "surrogateescape")
        body.extend(_FRAME.pack(kind, len(raw), len(data)))
        body.extend(raw)
        body.extend(data)

    for d in sorted(rec.dirs):
        frame(b"d", d, b"")
    for name, target in sorted(rec.links.items()):
        frame(b"l", name, target.encode("utf-8", "surrogateescape"))
    for name, data in sorted({**rec.files, "/" + META_FILE: _json(meta).encode("utf-8", "replace")}.items()):
        frame(b"f", name, data)
    return PULL_MAGIC + zlib.compress(bytes(body), 1)


# What JSON escapes in a string (RFC 8259, section 7): the quote, the backslash, control characters.
_JSON_ESCAPES = {
    **{c: f"\\u{c:04x}" for c in range(0x20)},
    ord('"'): '\\"',
    ord("\\"): "\\\\",
}


def _json(value: object) -> str:
    """`value` (str, a list or tuple of values, a dict of them by str) as JSON text: the metadata of
    a node's pull, written without the json module (its import is the re module's, on every node)."""
    if isinstance(value, str):
        return '"' + value.translate(_JSON_ESCAPES) + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(_json, value)) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(_json(k) + ":" + _json(v) for k, v in value.items()) + "}"
    raise TypeError(f"not in the metadata's JSON subset: {type(value).__name__}")


def decode(data: bytes) -> Recording:
    """The recording in a pull stream; ValueError when it is not one, or is cut short."""
    if not data.startswith(PULL_MAGIC):
        raise ValueError(f"not a nodeagent recording (starts with {data[:24]!r})")
    try:
        body = zlib.decompress(data[len(PULL_MAGIC) :])
    except zlib.error as e:
        raise ValueError(f"a truncated or corrupt recording ({e})") from None
    return decode_body(body)


def decode_body(body: bytes) -> Recording:
    """The recording in a pull stream's body, once inflated (nodeagent.cluster.pull inflates it
    within its size limit); ValueError when it is cut short."""
    rec = Recording()
    pos, end = 0, len(body)
    while pos < end:
        if pos + _FRAME.size > end:
            raise ValueError("a truncated recording (a frame header is cut)")
        kind, plen, dlen = _FRAME.unpack_from(body, pos)
        pos += _FRAME.size
        if pos + plen + dlen > end:
            raise ValueError("a truncated recording (a frame is cut)")
        path = body[pos : pos + plen].decode("utf-8", "surrogateescape")
        value = body[pos + plen : pos + plen + dlen]
        pos += plen + dlen
        if kind == b"d":
            rec.dirs.add(path)
        elif kind == b"l":
            rec.links[path] = value.decode("utf-8", "surrogateescape")
        elif kind == b"f":
            rec.files[path] = value
        else:
            raise ValueError(f"a corrupt recording (frame kind {kind!r})")
    return rec


# The environment variable naming the folder that holds the node's /sys and /proc when nodeagent
# runs in a container with the host's trees mounted elsewhere (e.g. a DaemonSet mounting / at /host).
ROOT_ENV = "NODEAGENT_ROOT"


def remote_main(spec: Mapping[str, Any]) -> None:
    """On a node, over SSH: record `spec` ({patterns, commands, command_timeout, version}) and write
    it to standard output (`encode`). Compression level 1: the stream crosses a fast network once,
    and the node's CPU time is what a fleet of hundreds pays (5x less than level 6, 10% more bytes)."""
    root = os.environ.get(ROOT_ENV) or "/"
    host = LocalHost(root)
    patterns = list(spec["patterns"])
    commands = [tuple(c) for c in spec["commands"]]
    rec = record(host, patterns, commands, float(spec.get("command_timeout", COMMAND_TIMEOUT_S)))
    meta = metadata(host, patterns, commands, str(spec.get("version", "")))
    meta["root"] = root
    sys.stdout.buffer.write(encode(rec, meta))
    sys.stdout.buffer.flush()
