"""Persistent tuning (`nodeagent tune --apply --persist`): the runtime values of an apply, also
written where the system applies them again at every boot.

- /proc/sys keys go to one sysctl.d file, /etc/sysctl.d/90-nodeagent.conf, which systemd-sysctl
  applies at boot (sysctl.d(5), https://man7.org/linux/man-pages/man5/sysctl.d.5.html). Keys are
  written with dots ("kernel.numa_balancing"), or with slashes where a component holds a dot
  ("net/ipv4/conf/eth0.100/forwarding"): sysctl.d(5), "if the first separator is a slash,
  remaining slashes and dots are left intact".
- sysfs knobs (THP, the cpufreq governor, EPP, turbo, huge page pools) have no such file. Where
  TuneD runs (`tuned-adm active` answers) they go to a TuneD profile, `nodeagent`, that includes
  the active profile and adds [cpu] (governor, energy_performance_preference, no_turbo), [vm]
  (transparent_hugepages) and [sysfs] (any other /sys path) sections (tuned.conf(5);
  https://github.com/redhat-performance/tuned: tuned/plugins/plugin_cpu.py, plugin_vm.py,
  plugin_sysfs.py). It becomes TuneD's startup profile through the two files `tuned-adm profile`
  writes, /etc/tuned/active_profile and /etc/tuned/profile_mode (tuned/consts.py,
  tuned/utils/commands.py: save_active_profile), so it takes effect at TuneD's next start; the
  values themselves are already applied at runtime. /proc/sys keys are not put in the TuneD
  profile: TuneD re-applies /etc/sysctl.d after its own sysctls (reapply_sysctl = 1 in
  tuned-main.conf), so the sysctl.d file is the one place for them, with or without TuneD.
- Without TuneD, sysfs knobs go to one tmpfiles.d file, /etc/tmpfiles.d/90-nodeagent.conf: a
  `w PATH - - - - VALUE` line per file, which systemd-tmpfiles-setup.service writes at every boot
  ("w: write the argument parameter to a file, if the file exists", tmpfiles.d(5),
  https://man7.org/linux/man-pages/man5/tmpfiles.d.5.html). Lines already there (by hand, or a
  previous --persist) stay, ours set over a `w` line of the same path. `%` is doubled (tmpfiles.d
  expands specifiers in both fields); a path or value that the format cannot hold as it is (white
  space, quotes, backslashes, control characters, an empty value) is not persisted, and the story
  says why.

Every file is journaled like every write (its previous content, or its absence) before the first
write, and written through the Host, so a --root tree receives them, and `nodeagent revert`
restores or removes them. `collect(host)` reads (I/O); `plan(facts, changes)` decides (pure).
"""

from __future__ import annotations

import configparser
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field, computed_field
from pydantic.dataclasses import dataclass as pydantic_dataclass

from nodeagent.api.tune import Change, Scope
from nodeagent.core import document
from nodeagent.host import Host

SYSCTL_FILE = "/etc/sysctl.d/90-nodeagent.conf"
TMPFILES_FILE = "/etc/tmpfiles.d/90-nodeagent.conf"
PROC_SYS = "/proc/sys/"
TUNED_PROFILE = "nodeagent"
TUNED_ACTIVE = "/etc/tuned/active_profile"
TUNED_MODE = "/etc/tuned/profile_mode"
TUNED_MAIN = "/etc/tuned/tuned-main.conf"
# TuneD 2.24 moved profiles to /usr/lib/tuned/profiles and /etc/tuned/profiles (tuned/consts.py,
# USER_PROFILES_DIR); earlier releases keep them in /usr/lib/tuned and /etc/tuned.
TUNED_NEW_SYSTEM_DIR = "/usr/lib/tuned/profiles"
TUNED_NEW_USER_DIR = "/etc/tuned/profiles"
TUNED_OLD_USER_DIR = "/etc/tuned"
ACTIVE_LINE = re.compile(r"^Current active profile:\s*(.+?)\s*$", re.MULTILINE)
NO_ACTIVE = "No current active profile"

SYSCTL_DOC = "https://man7.org/linux/man-pages/man5/sysctl.d.5.html"
TUNED_DOC = "https://github.com/redhat-performance/tuned (man tuned.conf)"
TMPFILES_DOC = "https://man7.org/linux/man-pages/man5/tmpfiles.d.5.html"

CPU = "/sys/devices/system/cpu"
# sysfs files that a TuneD plugin option sets: the option is what TuneD documents and keeps working
# across kernels (it finds the files itself); anything else goes to [sysfs] by path.
_POLICY_FILE = re.compile(rf"^{CPU}/cpufreq/policy\d+/(scaling_governor|energy_performance_preference)$")
_CPU_OPTION = {
    "scaling_governor": "governor",
    "energy_performance_preference": "energy_performance_preference",
}
_FIXED_OPTIONS = {
    f"{CPU}/intel_pstate/no_turbo": ("cpu", "no_turbo"),
    "/sys/kernel/mm/transparent_hugepage/enabled": ("vm", "transparent_hugepages"),
}
SECTIONS = ("main", "cpu", "vm", "sysfs")


@dataclass(frozen=True)
class FileState:
    path: str
    text: str | None  # None: absent
    unreadable: bool = False  # there, but could not be read: it cannot be journaled
    missing_dirs: tuple[str, ...] = ()  # folders on its way that do not exist, outermost first


@dataclass(frozen=True)
class Facts:
    sysctl: FileState
    tmpfiles: FileState
    tuned_active: list[str] | None  # the active TuneD profile(s); None: no TuneD answered
    tuned_answer: str  # what `tuned-adm active` said (for the story)
    tuned_conf: FileState | None
    active_profile: FileState | None
    profile_mode: FileState | None


@pydantic_dataclass(frozen=True, config=document.LATE)
class FileWrite:
    """A whole file --persist writes: its content before (None: absent) and after. The tune
    report names it, says what it is and whether it is new; the contents are the journal's."""

    path: str
    before: Annotated[str | None, Field(exclude=True)]
    after: Annotated[str, Field(exclude=True)]
    what: str

    @computed_field  # type: ignore[prop-decorator]
    @property
    def created(self) -> bool:
        return self.before is None


@pydantic_dataclass(frozen=True, config=document.LATE)
class Kept(document.InKeyOrder):
    """Where one runtime change is persisted (`where`), or why not (`where` None, `why`); in the
    report, the change's tuner and target, then the one that applies."""

    document_keys = ("tuner", "target", "where", "why")

    change: Annotated[Change, Field(exclude=True)]
    where: Annotated[str | None, Field(exclude_if=document.is_none)]
    why: Annotated[str | None, Field(exclude_if=document.is_none)] = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tuner(self) -> str:
        return self.change.tuner

    @computed_field  # type: ignore[prop-decorator]
    @property
    def target(self) -> str:
        return self.change.target


@pydantic_dataclass(config=document.LATE)
class PersistPlan(document.InKeyOrder):
    """What --persist writes; the tune report's `persist`."""

    document_keys = ("files", "persisted", "not_persisted", "notes")

    files: list[FileWrite] = Field(default_factory=list)
    # Folders to create, outermost first.
    dirs: Annotated[list[str], Field(exclude=True)] = Field(default_factory=list)
    kept: Annotated[list[Kept], Field(exclude=True)] = Field(
        default_factory=list
    )  # as persisted, not_persisted
    # Files that exist but cannot be read (apply refuses the plan).
    refused: Annotated[list[str], Field(exclude=True)] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def persisted(self) -> list[Kept]:
        return [k for k in self.kept if k.where is not None]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def not_persisted(self) -> list[Kept]:
        return [k for k in self.kept if k.where is None]


# -- reading -------------------------------------------------------------------------------------


def _file(host: Host, path: str) -> FileState:
    text = host.read(path)
    unreadable = text is None and host.lexists(path)
    missing: list[str] = []
    folder = posixpath.dirname(path)
    while folder != "/" and not host.is_dir(folder):
        missing.insert(0, folder)
        folder = posixpath.dirname(folder)
    return FileState(path, text, unreadable, tuple(missing))


def _tuned_dir(host: Host) -> str:
    """The folder user profiles go to: tuned-main.conf's profile_dirs (the last one wins a name
    clash, so a profile there is the one TuneD loads), else by the layout of the installed TuneD."""
    main = host.read(TUNED_MAIN) or ""
    for line in main.splitlines():
        key, eq, value = line.partition("=")
        if eq and key.strip() == "profile_dirs" and not line.lstrip().startswith("#"):
            dirs = [d for d in re.split(r"\s*[,;]\s*", value.strip()) if d]
            if dirs:
                return dirs[-1].rstrip("/")
    if host.is_dir(TUNED_NEW_SYSTEM_DIR) or host.is_dir(TUNED_NEW_USER_DIR):
        return TUNED_NEW_USER_DIR
    return TUNED_OLD_USER_DIR


def tuned_conf_path(folder: str) -> str:
    return f"{folder}/{TUNED_PROFILE}/tuned.conf"


def owned_files(host: Host | None = None) -> set[str]:
    """The host files --persist may write, so the only ones `nodeagent revert` restores: the
    sysctl.d and tmpfiles.d files, TuneD's two startup files, and the nodeagent TuneD profile in
    the default folders or the one this host's tuned-main.conf names."""
    folders = {TUNED_NEW_USER_DIR, TUNED_OLD_USER_DIR}
    if host is not None:
        folders.add(_tuned_dir(host))
    return {SYSCTL_FILE, TMPFILES_FILE, TUNED_ACTIVE, TUNED_MODE, *(tuned_conf_path(d) for d in folders)}


def _active(host: Host) -> tuple[list[str] | None, str]:
    out = host.run(["tuned-adm", "active"])
    text = (out.stdout or "").strip()
    if not out.ok and not text:
        return None, (out.stderr or "").strip() or f"exit code {out.exited}"
    found = ACTIVE_LINE.search(text)
    if found:
        return found.group(1).split(), text
    if NO_ACTIVE in text:
        return [], text
    return None, text or "no answer"


def collect(host: Host) -> Facts:
    active, answer = _active(host)
    sysctl = _file(host, SYSCTL_FILE)
    tmpfiles = _file(host, TMPFILES_FILE)
    if active is None:
        return Facts(sysctl, tmpfiles, None, answer, None, None, None)
    conf = _file(host, tuned_conf_path(_tuned_dir(host)))
    return Facts(sysctl, tmpfiles, active, answer, conf, _file(host, TUNED_ACTIVE), _file(host, TUNED_MODE))


# -- deciding (pure) -----------------------------------------------------------------------------


def sysctl_key(path: str) -> str:
    """/proc/sys/kernel/numa_balancing -> kernel.numa_balancing; a component holding a dot keeps the
    slash form (sysctl.d(5))."""
    parts = path[len(PROC_SYS) :].strip("/").split("/")
    return "/".join(parts) if any("." in p for p in parts) else ".".join(parts)


def _canonical(key: str) -> str:
    """A sysctl.d key as its /proc/sys path below /proc/sys (sysctl.d(5)'s separator rule)."""
    first = min((i for i in (key.find("."), key.find("/")) if i >= 0), default=-1)
    if first < 0 or key[first] == "/":
        return key
    return key.translate(str.maketrans("./", "/."))


def sysctl_text(before: str | None, values: dict[str, str]) -> str:
    """The sysctl.d file: the assignments already there (a previous --persist), ours set over them."""
    assigned: dict[str, tuple[str, str]] = {}
    for line in (before or "").splitlines():
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        key, eq, value = stripped.partition("=")
        if eq:
            assigned[_canonical(key.strip().lstrip("-"))] = (key.strip(), value.strip())
    for key, value in values.items():
        assigned[_canonical(key)] = (key, value)
    lines = [
        "# Written by `nodeagent tune --apply --persist`: kernel settings systemd-sysctl applies at",
        f"# every boot ({SYSCTL_DOC}). `nodeagent revert` restores this file as it was.",
        *(f"{key} = {value}" for key, value in assigned.values()),
    ]
    return "\n".join(lines) + "\n"


# What a tmpfiles.d field holds as written: no white space (the field separator), no quotes or
# backslashes (quoting and C escapes), no control characters. `%` is escaped, not refused.
_TMPFILES_FIELD = re.compile(r"^[^\s\"'\\\x00-\x1f\x7f]+$")


def tmpfiles_line(path: str, value: str) -> str | None:
    """`w PATH - - - - VALUE` (tmpfiles.d(5)); None when the path or value cannot be written as is."""
    if not path.startswith("/sys/") or not _TMPFILES_FIELD.match(path) or not _TMPFILES_FIELD.match(value):
        return None
    return f"w {path.replace('%', '%%')} - - - - {value.replace('%', '%%')}"


def _tmpfiles_path(line: str) -> str | None:
    """The path of a `w` line (unescaped), None for any other line."""
    fields = line.split()
    if len(fields) < 2 or fields[0] != "w":
        return None
    return fields[1].replace("%%", "%")


def tmpfiles_text(before: str | None, values: dict[str, str]) -> str:
    """The tmpfiles.d file: the lines already there, ours set over a `w` line of the same path and
    the others added in order."""
    lines = [
        line for line in (before or "").splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]
    ours = {path: tmpfiles_line(path, value) for path, value in values.items()}
    body: list[str] = []
    for line in lines:
        path = _tmpfiles_path(line)
        if path is not None and path in ours:
            body.append(ours.pop(path) or line)  # None: not ours to write, the line stays
        else:
            body.append(line)
    body += [line for line in ours.values() if line is not None]
    header = [
        "# Written by `nodeagent tune --apply --persist`: sysfs values systemd-tmpfiles writes at every",
        f"# boot ({TMPFILES_DOC}). `nodeagent revert` restores this file as it was.",
    ]
    return "\n".join(header + body) + "\n"


def _read_conf(text: str | None) -> dict[str, dict[str, str]]:
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # /sys paths are case-sensitive
    try:
        parser.read_string(text or "")
    except configparser.Error:
        return {}
    return {s: dict(parser[s]) for s in parser.sections()}


def tuned_text(before: str | None, include: list[str], options: dict[tuple[str, str], str]) -> str:
    """The TuneD profile: [main] include= the profile(s) active before, our options set over those
    of a previous --persist."""
    sections = _read_conf(before)
    main = sections.setdefault("main", {})
    main["summary"] = "nodeagent: the runtime tuning of `nodeagent tune --apply --persist`"
    if include:
        main["include"] = ",".join(include)
    for (section, key), value in options.items():
        sections.setdefault(section, {})[key] = value
    order = [s for s in SECTIONS if s in sections] + sorted(set(sections) - set(SECTIONS))
    lines = [
        "# Written by `nodeagent tune --apply --persist` (tuned.conf(5), " + TUNED_DOC + ").",
        "# `nodeagent revert` restores this file as it was.",
    ]
    for name in order:
        lines += ["", f"[{name}]", *(f"{k}={v}" for k, v in sections[name].items())]
    return "\n".join(lines) + "\n"


def tuned_option(path: str) -> tuple[str, str] | None:
    """The TuneD section and option that persist a sysfs file; None outside /sys."""
    if path in _FIXED_OPTIONS:
        return _FIXED_OPTIONS[path]
    m = _POLICY_FILE.match(path)
    if m:
        return "cpu", _CPU_OPTION[m.group(1)]
    if path.startswith("/sys/"):
        return "sysfs", path
    return None


def _tuned_options(changes: list[Change]) -> dict[tuple[str, str], str]:
    """TuneD options for the sysfs writes; a write falls back to its own [sysfs] line when one
    [cpu] option would get two values (TuneD applies an option to every CPU)."""
    wanted: dict[tuple[str, str], set[str]] = {}
    for c in changes:
        for w in c.writes:
            opt = tuned_option(w.path)
            if opt is not None:
                wanted.setdefault(opt, set()).add(w.after)
    options: dict[tuple[str, str], str] = {}
    for c in changes:
        for w in c.writes:
            opt = tuned_option(w.path)
            if opt is None:
                continue
            if len(wanted[opt]) == 1:
                options[opt] = w.after
            else:
                options[("sysfs", w.path)] = w.after
    return options


def _include(f: Facts) -> list[str]:
    """What the nodeagent profile includes: the profile(s) active now; when nodeagent's is already
    active (an earlier --persist), what that one included."""
    active = f.tuned_active or []
    if TUNED_PROFILE not in active:
        return active
    before = _read_conf(f.tuned_conf.text if f.tuned_conf else None).get("main", {}).get("include", "")
    others = [p for p in active if p != TUNED_PROFILE]
    return [p for p in re.split(r"\s*[,;]\s*", before) if p] + others


def _write(out: PersistPlan, state: FileState | None, after: str, what: str) -> None:
    """Plan one file; only a file whose content changes is written (and journaled)."""
    if state is None:
        return
    if state.unreadable:
        out.refused.append(state.path)
        return
    if state.text == after:
        return
    out.files.append(FileWrite(state.path, state.text, after, what))
    out.dirs += [d for d in state.missing_dirs if d not in out.dirs]


def _plan_tmpfiles(out: PersistPlan, f: Facts, changes: list[Change]) -> None:
    """Without TuneD: the sysfs writes as tmpfiles.d `w` lines; a change with a write the format
    cannot hold is not persisted (whole: half a change at boot would be a setting never tested)."""
    kept = [c for c in changes if all(tmpfiles_line(w.path, w.after) for w in c.writes)]
    for c in changes:
        if c in kept:
            continue
        bad = next(w for w in c.writes if tmpfiles_line(w.path, w.after) is None)
        why = (
            f"{bad.path} = {bad.after!r} cannot be written as a tmpfiles.d line (white space, quotes, "
            f"backslashes or an empty value; {TMPFILES_DOC}): lost at reboot; install TuneD and run "
            "again with --persist"
            if bad.path.startswith("/sys/")
            else "not a /proc/sys or /sys file: nothing to persist it with"
        )
        out.kept.append(Kept(c, None, why))
    if not kept:
        return
    values = {w.path: w.after for c in kept for w in c.writes}
    _write(out, f.tmpfiles, tmpfiles_text(f.tmpfiles.text, values), "tmpfiles.d")
    out.kept += [Kept(c, TMPFILES_FILE) for c in kept]


def plan(f: Facts, changes: Iterable[Change]) -> PersistPlan:
    """What --persist writes for the runtime changes of an apply."""
    runtime = [c for c in changes if c.scope is Scope.RUNTIME and not c.is_noop]
    out = PersistPlan()
    sysctl_changes = [c for c in runtime if all(w.path.startswith(PROC_SYS) for w in c.writes)]
    sysfs_changes = [c for c in runtime if c not in sysctl_changes]
    if sysctl_changes:
        values = {sysctl_key(w.path): w.after for c in sysctl_changes for w in c.writes}
        _write(out, f.sysctl, sysctl_text(f.sysctl.text, values), "sysctl.d")
        out.kept += [Kept(c, SYSCTL_FILE) for c in sysctl_changes]
    if not sysfs_changes:
        return out
    if f.tuned_active is None:
        _plan_tmpfiles(out, f, sysfs_changes)
        return out
    persistable = [c for c in sysfs_changes if all(tuned_option(w.path) for w in c.writes)]
    for c in sysfs_changes:
        if c not in persistable:
            out.kept.append(Kept(c, None, "not a /proc/sys or /sys file: nothing to persist it with"))
    if not persistable:
        return out
    options = _tuned_options(persistable)
    assert f.tuned_conf is not None
    include = _include(f)
    _write(out, f.tuned_conf, tuned_text(f.tuned_conf.text, include, options), "TuneD profile")
    _write(out, f.active_profile, TUNED_PROFILE + "\n", "TuneD startup profile")
    _write(out, f.profile_mode, "manual\n", "TuneD profile mode")
    where = f"TuneD profile {TUNED_PROFILE} ({f.tuned_conf.path})"
    out.kept += [Kept(c, where) for c in persistable]
    shown = ", ".join(include) or "no other profile"
    out.notes.append(
        f"TuneD profile {TUNED_PROFILE} includes {shown} and is TuneD's startup profile from now on "
        f"({TUNED_ACTIVE}); TuneD loads it at its next start (the values are applied already)"
    )
    return out
