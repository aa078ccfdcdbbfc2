# The start of build/nodeagent.pyz: `pex --preamble-file` (Makefile target pyz) puts this file before
# pex's own bootstrap in the pyz's __main__.py, so it runs first, on whatever python started the file.
#
# A start that fails must say why in one line and exit with a code of the table in
# docs/deployment.md ("When it cannot start"), never 1:
# that is the WARN exit code of `check`, which a Slurm prolog or a health check reads as "WARN, node
# fine". So PEX_ROOT is checked before pex unpacks into it (read-only, unwritable or noexec, where
# the compiled modules could not be loaded: a private temporary folder instead), and pex's bootstrap
# runs under a guard: 69 no interpreter or machine the file serves; 74 PEX_ROOT full, over quota or
# unusable with no temporary folder to use instead, or the file damaged; 70 anything else.
# A run under a time limit (a Slurm prolog's 9 s, NODEAGENT_NO_UNPACK=1) must not spend it unpacking
# a build (5-25 s): 75, "busy", with the unpack started in the background. And `nodeagent.pyz install
# DIR` unpacks once, at install time, into a venv whose DIR/bin/nodeagent has nothing to unpack.
#
# It must parse and run on every python that may start the file, down to 2.7 (pex's own bootstrap
# does, and it is what finds a newer interpreter on PATH for an older one): no f-strings, no
# annotations (type comments), nothing imported at module level, and no `from __future__`.
# Names start with _nodeagent_ to stay clear of those of pex's bootstrap, which shares the module.

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, NoReturn, Optional, Tuple

_NODEAGENT_EX_USAGE = 64
_NODEAGENT_EX_UNAVAILABLE = 69
_NODEAGENT_EX_SOFTWARE = 70
_NODEAGENT_EX_IOERR = 74
_NODEAGENT_EX_TEMPFAIL = 75
# Set by the shipped Slurm scripts: a run whose build is not unpacked yet must not unpack in the
# foreground, where the time would be charged to the health check (a prolog has 9 s; a first run
# takes 5-25 s): it starts the unpack in the background and exits 75 ("busy; try again").
_NODEAGENT_NO_UNPACK_VAR = "NODEAGENT_NO_UNPACK"
# What the Makefile's pyz target builds for, and what a first run unpacks (docs/deployment.md,
# "Where it unpacks").
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
    if os.environ.get(_NODEAGENT_NO_UNPACK_VAR) == "1":
        raise _NodeagentNoRoot(
            "nodeagent: error: PEX_ROOT "
            + root
            + " is "
            + why
            + ", and "
            + _NODEAGENT_NO_UNPACK_VAR
            + "=1 (the Slurm scripts) forbids unpacking into a temporary folder at each run: install"
            " it once (python3 nodeagent.pyz install DIR), or " + _NODEAGENT_WHAT_TO_DO
        )
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


def _nodeagent_archive(main_globals):
    # type: (Dict[str, Any]) -> Optional[str]
    """The pyz this process started from; None in the copy that pex unpacked and re-executes."""
    import os

    path = main_globals.get("__file__")
    if path and os.path.isfile(path):
        return None
    return getattr(main_globals.get("__loader__"), "archive", None)


def _nodeagent_pex_info(pyz):
    # type: (str) -> Dict[str, Any]
    import json
    import zipfile

    with zipfile.ZipFile(pyz) as archive:
        text = archive.read("PEX-INFO").decode("utf-8")
    return dict(json.loads(text))


def _nodeagent_served():
    # type: () -> bool
    import sys

    return sys.version_info[:2] >= (3, 10)


def _nodeagent_unpacked(pyz, info):
    # type: (str, Dict[str, Any]) -> bool
    """Whether pex will run this file from a venv it made before (a start of 0.2 s), by pex's own
    code from the file, as its bootstrap decides it (__maybe_run_venv__): the venv of this build
    for this interpreter. An interpreter the file does not serve has pex pick another on PATH, so
    there a venv of this build for any interpreter counts."""
    import glob
    import os
    import sys

    bootstrap = os.path.join(pyz, ".bootstrap")
    sys.path.insert(0, bootstrap)
    try:
        from pex.variables import ENV, Variables, venv_dir  # type: ignore[import-not-found]

        venv = str(
            venv_dir(
                pex_root=Variables.PEX_ROOT.value_or(ENV, info.get("pex_root") or "~/.cache/pex"),
                pex_hash=info["pex_hash"],
                has_interpreter_constraints=bool(info.get("interpreter_constraints")),
                pex_file=pyz,
                pex_path=ENV.PEX_PATH or tuple(info.get("pex_paths") or ()),
            )
        )
    finally:
        sys.path.remove(bootstrap)
    pattern = venv if _nodeagent_served() else os.path.join(os.path.dirname(venv), "*")
    return any(os.access(path, os.X_OK) for path in glob.glob(os.path.join(pattern, "pex")))


def _nodeagent_unpack_in_background(pyz, info):
    # type: (str, Dict[str, Any]) -> str
    """Starts `PYZ --version` in a session of its own (so that neither timeout(1) nor slurmd ending
    the prolog's process group stops it) to unpack this build, unless one is under way; returns the
    line that says so. The lock is flock(2)'s, held by that process and its exec'd successors
    through the descriptor they inherit: the kernel releases it when they end, however they end,
    so a killed unpack leaves no stale lock (pex's own locks, for its folders, are fcntl's)."""
    import errno
    import fcntl
    import os
    import subprocess
    import sys

    root = os.environ.get("PEX_ROOT") or _nodeagent_pex_root()
    if not os.path.isdir(root):
        os.makedirs(root)
    stem = os.path.join(root, "nodeagent-unpack." + info["pex_hash"][:16])
    log = stem + ".log"
    then = "try again in a minute, or install it once (python3 nodeagent.pyz install DIR)"
    lock = os.open(stem + ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            return (
                "nodeagent: busy: unpacking this build of "
                + pyz
                + " into PEX_ROOT "
                + root
                + ", under way (log "
                + log
                + "): "
                + then
            )
        output = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        env = dict(os.environ)
        env.pop(_NODEAGENT_NO_UNPACK_VAR, None)
        try:
            with open(os.devnull, "rb") as nothing:
                subprocess.Popen(
                    [sys.executable, pyz, "--version"],
                    stdin=nothing,
                    stdout=output,
                    stderr=output,
                    env=env,
                    cwd="/",
                    pass_fds=(lock,),
                    start_new_session=True,
                )
        finally:
            os.close(output)
    finally:
        os.close(lock)
    return (
        "nodeagent: busy: this build of "
        + pyz
        + " is not unpacked in PEX_ROOT "
        + root
        + " yet; unpacking it in the background (about "
        + str(_NODEAGENT_UNPACKED_MB)
        + " MB, log "
        + log
        + "): "
        + then
    )


def _nodeagent_install(pyz, info, args):
    # type: (str, Dict[str, Any], List[str]) -> Tuple[int, str]
    """`nodeagent.pyz install DIR`: unpacks once, now, into a venv for this python, so that
    DIR/bin/nodeagent starts in 0.1 s with nothing to unpack (pex's own `venv` tool, run with
    PEX_TOOLS=1, into DIR/versions/BUILD-cpXY). DIR/bin is a symbolic link to that venv's bin,
    replaced in one rename, so a Slurm prolog running during an upgrade starts the old build or
    the new one, never half of one. Installs into one DIR wait for each other (flock: a killed
    install leaves no lock, and the next removes its half-made folders)."""
    import fcntl
    import os
    import subprocess
    import sys
    import time

    if len(args) != 1 or args[0].startswith("-"):
        return _NODEAGENT_EX_USAGE, "nodeagent: error: usage: python3 nodeagent.pyz install DIR"
    if not _nodeagent_served():
        return _nodeagent_failure(SystemExit(1), "")
    started = time.time()
    home = os.path.abspath(args[0])
    bin_link = os.path.join(home, "bin")
    if os.path.lexists(bin_link) and not os.path.islink(bin_link):
        return (
            _NODEAGENT_EX_USAGE,
            "nodeagent: error: {} is not a link made by install: give a new or empty folder".format(bin_link),
        )
    name = "{}-cp{}{}".format(info["pex_hash"][:12], *sys.version_info[:2])
    venv = os.path.join(home, "versions", name)
    if not os.path.isdir(os.path.dirname(venv)):
        os.makedirs(os.path.dirname(venv))
    lock = os.open(os.path.join(home, ".install.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        made = _nodeagent_make_venv(pyz, home, venv, lock)
        if made != 0:
            return _NODEAGENT_EX_IOERR, (
                "nodeagent: error: pex could not make the venv in {} (exit {}, its messages above):"
                " check the space and permissions there".format(venv, made)
            )
        entry = os.path.join(venv, "bin", "nodeagent")
        said = subprocess.Popen([entry, "--version"], stdout=subprocess.PIPE).communicate()[0]
        _nodeagent_switch(home, name)
    finally:
        os.close(lock)
    return 0, "installed {} for {} in {} in {:.0f} s: run {}".format(
        said.decode("utf-8", "replace").strip() or "nodeagent",
        sys.executable,
        venv,
        time.time() - started,
        os.path.join(bin_link, "nodeagent"),
    )


def _nodeagent_make_venv(pyz, home, venv, lock):
    # type: (str, str, str, int) -> int
    """pex's venv tool's exit code, making `venv` unless an earlier install finished it. pex
    unpacks into a temporary PEX_ROOT inside `home` (the venv's files are hard links to it),
    removed at the end, so nothing is left in the user's cache; so is that of an install that was
    killed. pex inherits the `lock`, so that an install killed while pex works waits for pex to
    end before the next removes its folders."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    for leftover in os.listdir(home):
        if leftover.startswith(".unpack."):
            shutil.rmtree(os.path.join(home, leftover), True)
    done = os.path.join(venv, ".nodeagent-installed")
    if os.path.isfile(done):
        return 0
    shutil.rmtree(venv, True)
    env = dict(os.environ)
    env.pop(_NODEAGENT_NO_UNPACK_VAR, None)
    env["PEX_TOOLS"] = "1"
    env["PEX_ROOT"] = tempfile.mkdtemp(prefix=".unpack.", dir=home)
    try:
        made = subprocess.call([sys.executable, pyz, "venv", "--compile", venv], env=env, pass_fds=(lock,))
    finally:
        shutil.rmtree(env["PEX_ROOT"], True)
    if made == 0:
        open(done, "w").close()
    else:
        shutil.rmtree(venv, True)
    return made


def _nodeagent_switch(home, name):
    # type: (str, str) -> None
    """Points home/bin at versions/name/bin in one rename; keeps the build it pointed at before
    (for the runs still using it) and removes the others."""
    import os
    import shutil

    bin_link = os.path.join(home, "bin")
    keep = {name}
    if os.path.islink(bin_link):
        keep.add(os.path.basename(os.path.dirname(os.path.realpath(bin_link))))
    link = os.path.join(home, ".bin.new")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(os.path.join("versions", name, "bin"), link)
    os.rename(link, bin_link)
    versions = os.path.join(home, "versions")
    for old in os.listdir(versions):
        if old not in keep:
            shutil.rmtree(os.path.join(versions, old), True)


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
        fallback, status = _nodeagent_run(main_globals)
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


def _nodeagent_run(main_globals):
    # type: (Dict[str, Any]) -> Tuple[Optional[str], int]
    """`install`; or a run that must not unpack, of a build not unpacked yet: the exit code, having
    said why (the temporary PEX_ROOT, None). Else pex's bootstrap, which exits or replaces this
    process, raising what stopped it."""
    import os
    import sys

    pyz = _nodeagent_archive(main_globals)
    if pyz and sys.argv[1:2] == ["install"]:
        status, line = _nodeagent_install(pyz, _nodeagent_pex_info(pyz), sys.argv[2:])
        (sys.stdout if status == 0 else sys.stderr).write(line + "\n")
        return None, status
    fallback, note = _nodeagent_choose_root()
    if note:
        sys.stderr.write(note + "\n")
    if pyz and os.environ.get(_NODEAGENT_NO_UNPACK_VAR) == "1":
        info = _nodeagent_pex_info(pyz)
        if not _nodeagent_unpacked(pyz, info):
            sys.stderr.write(_nodeagent_unpack_in_background(pyz, info) + "\n")
            return fallback, _NODEAGENT_EX_TEMPFAIL
    exec(_nodeagent_bootstrap(main_globals), main_globals)
    return fallback, 0


def _nodeagent_guarded():
    # type: () -> bool
    import os

    return not any(os.environ.get(name) for name in _NODEAGENT_IN_PROCESS_VARS)


if __name__ == "__main__" and _nodeagent_guarded():
    _nodeagent_start(globals())
# end of the nodeagent preamble
