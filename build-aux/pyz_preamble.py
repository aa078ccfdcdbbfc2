# The start of build/nodeagent.pyz: `pex --preamble-file` (Makefile target pyz) puts this file before
# pex's own bootstrap in the pyz's __main__.py, so it runs first, on whatever python started the file.
#
# A start that fails must say why in one line and exit with a code of the README's table, never 1:
# that is the WARN exit code of `check`, which a Slurm prolog or a health check reads as "WARN, node
# fine". So PEX_ROOT is checked before pex unpacks into it (read-only, unwritable or noexec, where
# the compiled modules could not be loaded: a private temporary folder instead), and pex's bootstrap
# runs under a guard: 69 no interpreter or machine the file serves; 74 PEX_ROOT full, over quota or
# unusable with no temporary folder to use instead, or the file damaged; 70 anything else.
#
# It must parse and run on every python that may start the file, down to 2.7 (pex's own bootstrap
# does, and it is what finds a newer interpreter on PATH for an older one): no f-strings, no
# annotations (type comments), nothing imported at module level, and no `from __future__`.
# Names start with _nodeagent_ to stay clear of those of pex's bootstrap, which shares the module.

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, NoReturn, Optional, Tuple

_NODEAGENT_EX_UNAVAILABLE = 69
_NODEAGENT_EX_SOFTWARE = 70
_NODEAGENT_EX_IOERR = 74
# What the Makefile's pyz target builds for, and what a first run unpacks (README, "Where it unpacks").
_NODEAGENT_SERVES = "CPython 3.10 to 3.14 on Linux x86_64 or aarch64 with glibc 2.17 or newer"
_NODEAGENT_UNPACKED_MB = 200
_NODEAGENT_WHAT_TO_DO = (
    "set PEX_ROOT to a folder of your own on a local file system that is writable, mounted"
    " without noexec, and has " + str(_NODEAGENT_UNPACKED_MB) + " MB free"
)
# statvfs flags (Linux <sys/statvfs.h>; os.ST_* from Python 3.2 on).
_NODEAGENT_ST_RDONLY = 1
_NODEAGENT_ST_NOEXEC = 8
# Set by pex for the processes it re-executes when PEX_ROOT is a temporary folder: they unpack into
# that folder, and the last of them removes it at exit.
_NODEAGENT_FALLBACK_VAR = "_PEX_ROOT_FALLBACK"
# pex's debugging modes run nodeagent (or pex's tools) in this very process, so their exit codes
# are not start-up failures: pex's bootstrap then runs unguarded.
_NODEAGENT_IN_PROCESS_VARS = ("PEX_TOOLS", "PEX_UNZIP")


def _nodeagent_pex_root():
    # type: () -> str
    """The PEX_ROOT pex will use: $PEX_ROOT, else the user cache folder of appdirs (pex's default,
    $XDG_CACHE_HOME/pex or ~/.cache/pex; with HOME unset, ~ is the passwd entry's home)."""
    import os

    root = os.environ.get("PEX_ROOT")
    if not root:
        root = os.path.join(os.getenv("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "pex")
    return os.path.realpath(os.path.expanduser(root))


def _nodeagent_unusable(path):
    # type: (str) -> Optional[str]
    """Why pex cannot unpack into `path` and run from it (judged at its nearest existing folder, where
    it would be made), or None when it can."""
    import os

    existing = path
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return "not a folder (" + existing + ")"
    try:
        flags = os.statvfs(existing).f_flag
    except OSError as error:
        return "unreadable (" + str(error) + ")"
    if flags & _NODEAGENT_ST_RDONLY:
        return "on a read-only file system"
    if flags & _NODEAGENT_ST_NOEXEC:
        # The compiled modules unpacked there (pydantic-core, PyYAML, psutil, ...) cannot be mapped.
        return "on a file system mounted noexec"
    if not os.access(existing, os.R_OK | os.W_OK | os.X_OK):
        return "not writable by this user (" + existing + ")"
    return None


def _nodeagent_temporary_root():
    # type: () -> Optional[str]
    """A fresh private folder (mkdtemp: mode 0700, a name nobody can claim first) in the first of
    $TMPDIR, /tmp and /var/tmp where pex can unpack and run, or None where none can."""
    import os
    import tempfile

    for base in (os.environ.get("TMPDIR"), "/tmp", "/var/tmp"):
        if not base or not os.path.isabs(base) or not os.path.isdir(base):
            continue
        if _nodeagent_unusable(base) is not None:
            continue
        try:
            return os.path.realpath(tempfile.mkdtemp(prefix="nodeagent-pex-root.", dir=base))
        except OSError:
            continue
    return None


def _nodeagent_choose_root():
    # type: () -> Tuple[Optional[str], Optional[str]]
    """(the temporary folder made for pex, the line that says why) when PEX_ROOT is unusable, having
    exported the folder to pex as PEX_ROOT; (None, None) when it is usable. Raises _NodeagentNoRoot
    when no folder is usable at all."""
    import os

    fallback = os.environ.get(_NODEAGENT_FALLBACK_VAR)
    if fallback:
        return fallback, None  # an earlier process of this start chose it
    root = _nodeagent_pex_root()
    why = _nodeagent_unusable(root)
    if why is None:
        return None, None
    fallback = _nodeagent_temporary_root()
    if fallback is None:
        raise _NodeagentNoRoot(
            "nodeagent: error: PEX_ROOT " + root + " is " + why + ", and no temporary folder"
            " ($TMPDIR, /tmp, /var/tmp) is writable and mounted without noexec: " + _NODEAGENT_WHAT_TO_DO
        )
    os.environ["PEX_ROOT"] = os.environ[_NODEAGENT_FALLBACK_VAR] = fallback
    note = (
        "nodeagent: warning: PEX_ROOT "
        + root
        + " is "
        + why
        + "; unpacking into "
        + fallback
        + " for this run, removed at exit (each run then unpacks again: "
        + _NODEAGENT_WHAT_TO_DO
        + ")"
    )
    return fallback, note


class _NodeagentNoRoot(Exception):
    """No folder where pex can unpack and run: its message is the line to print."""


def _nodeagent_failure(error, pex_root):
    # type: (BaseException, str) -> Tuple[int, str]
    """The exit code and the one line for a start-up that ended in `error` (pex's own messages, if
    any, are already on stderr)."""
    import errno
    import platform
    import sys
    import zipfile
    import zlib

    if isinstance(error, _NodeagentNoRoot):
        return _NODEAGENT_EX_IOERR, str(error)
    if isinstance(error, SystemExit):
        # pex exits by itself only when it found no interpreter (or machine) that the file serves.
        here = platform.python_version() + " on " + platform.machine()
        return _NODEAGENT_EX_UNAVAILABLE, (
            "nodeagent: error: no interpreter here can run this file: it serves "
            + _NODEAGENT_SERVES
            + "; this python is "
            + here
            + ", and PATH has no other that fits"
        )
    if isinstance(error, EnvironmentError):
        code = getattr(error, "errno", None)
        if code in (errno.ENOSPC, errno.EDQUOT):
            said = "no space left" if code == errno.ENOSPC else "over the disk quota"
            return _NODEAGENT_EX_IOERR, (
                "nodeagent: error: " + said + " in PEX_ROOT " + pex_root + ", where a first run unpacks"
                " about " + str(_NODEAGENT_UNPACKED_MB) + " MB: free space there, or " + _NODEAGENT_WHAT_TO_DO
            )
        return _NODEAGENT_EX_IOERR, (
            "nodeagent: error: cannot unpack into PEX_ROOT "
            + pex_root
            + ": "
            + str(error)
            + ": "
            + _NODEAGENT_WHAT_TO_DO
        )
    if isinstance(error, (zipfile.BadZipfile, zlib.error, EOFError)):
        # A member of the file that does not unpack (a bad CRC, a broken or short deflate stream).
        return _NODEAGENT_EX_IOERR, (
            "nodeagent: error: " + sys.argv[0] + " is damaged (" + str(error) + "): copy it again"
        )
    return _NODEAGENT_EX_SOFTWARE, (
        "nodeagent: internal error: pex failed to start nodeagent: "
        + type(error).__name__
        + ": "
        + str(error)
        + " (set NODEAGENT_DEBUG=1 for the traceback)"
    )


def _nodeagent_bootstrap(main_globals):
    # type: (Dict[str, Any]) -> Any
    """pex's bootstrap: the rest of this __main__.py (in the pyz, or the copy pex unpacks and
    re-executes), compiled for running under the guard."""
    import os

    path = main_globals["__file__"]
    if os.path.isfile(path):
        with open(path, "rb") as source:
            text = source.read()
    else:
        text = main_globals["__loader__"].get_data(path)
    # The comment that ends this preamble, written in two pieces so that only that line matches.
    end = b"\n# end of the nodeagent" + b" preamble\n"
    return compile(text.split(end, 1)[1], path, "exec")


def _nodeagent_start(main_globals):
    # type: (Dict[str, Any]) -> NoReturn
    """Choose PEX_ROOT, run pex's bootstrap (which replaces this process with the venv's nodeagent),
    and turn a failure to get there into one line and an exit code."""
    import os
    import shutil
    import sys
    import traceback

    fallback = None  # type: Optional[str]
    status = 0
    try:
        fallback, note = _nodeagent_choose_root()
        if note:
            sys.stderr.write(note + "\n")
        exec(_nodeagent_bootstrap(main_globals), main_globals)
    except KeyboardInterrupt:
        raise
    except BaseException as error:
        if isinstance(error, SystemExit) and not error.code:
            status = 0
        else:
            if os.environ.get("NODEAGENT_DEBUG") == "1":
                traceback.print_exc()
            status, line = _nodeagent_failure(error, os.environ.get("PEX_ROOT") or _nodeagent_pex_root())
            sys.stderr.write(line + "\n")
    finally:
        # Reached only when pex did not hand over to the venv, so nothing runs from the folder.
        if fallback:
            shutil.rmtree(fallback, True)
    sys.exit(status)


def _nodeagent_guarded():
    # type: () -> bool
    import os

    return not any(os.environ.get(name) for name in _NODEAGENT_IN_PROCESS_VARS)


if __name__ == "__main__" and _nodeagent_guarded():
    _nodeagent_start(globals())
# end of the nodeagent preamble
