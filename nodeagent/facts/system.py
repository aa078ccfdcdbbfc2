"""Kernel, boot command line and firmware (DMI) strings.

Sources: Documentation/admin-guide/kernel-parameters.rst (/proc/cmdline) and
Documentation/ABI/testing/sysfs-firmware-dmi-entries (/sys/class/dmi/id).
"""

from __future__ import annotations

import functools
import re
import shlex
from dataclasses import dataclass

from nodeagent.host import Host

DMI_DIR = "/sys/class/dmi/id"
DMI_FIELDS = (
    "sys_vendor",
    "product_name",
    "board_vendor",
    "board_name",
    "bios_vendor",
    "bios_version",
    "bios_date",
)
CPUINFO = "/proc/cpuinfo"
PATHS = (
    CPUINFO,
    "/proc/cmdline",
    "/proc/sys/kernel/osrelease",
    "/proc/sys/kernel/hostname",
    *(f"{DMI_DIR}/{f}" for f in DMI_FIELDS),
)


# DMI strings that only virtual machines carry (sys_vendor or product_name), as systemd-detect-virt
# reads them (src/basic/virt.c, detect_vm_dmi_vendor). "Amazon EC2" is not among them: it names
# the bare-metal instances too, which the hypervisor CPU flag tells apart.
_VM_DMI = (
    "QEMU",
    "KVM",
    "VMware",
    "VMW",
    "innotek GmbH",
    "VirtualBox",
    "Oracle Corporation",
    "Xen",
    "Bochs",
    "Parallels",
    "BHYVE",
    "Google Compute Engine",
    "OpenStack",
    "Alibaba Cloud ECS",
    "Virtual Machine",  # Hyper-V: sys_vendor "Microsoft Corporation", product_name "Virtual Machine"
    "Standard PC (",  # QEMU's machine types: "Standard PC (Q35 + ICH9, 2009)"
)


@dataclass(frozen=True)
class System:
    hostname: str | None
    kernel: str | None
    cmdline: str | None
    dmi: dict[str, str]
    # Why this looks like a virtual machine ("DMI product_name: KVM", "CPU flag hypervisor"), None
    # when nothing read says so (bare metal, or not recorded).
    virtual: str | None = None


def parse_cmdline(cmdline: str) -> dict[str, str]:
    """ "quiet intel_idle.max_cstate=1 idle=poll" -> {"quiet": "", "intel_idle.max_cstate": "1", ...}.

    Words after a lone "--" go to init, not the kernel, and are left out.
    """
    words = _words(cmdline)
    out: dict[str, str] = {}
    for w in words:
        if w == "--":
            break
        key, _, value = w.partition("=")
        # The kernel treats "-" and "_" in parameter names alike (kernel/params.c, parameq).
        out[key.replace("-", "_")] = value
    return out


_UNQUOTED_WORD = re.compile(r"[^ \t\r\n]+")  # shlex.shlex.whitespace


@functools.lru_cache(maxsize=64)
def _words(cmdline: str) -> tuple[str, ...]:
    """The command line's words, quotes honoured. shlex costs about 1 ms for a 500-character line,
    paid by every check reading it on every host of a fleet (which mostly share one line): a line
    without quotes or backslashes splits the same at shlex's white space, and lines are cached."""
    if not any(c in cmdline for c in "\"'\\"):
        return tuple(_UNQUOTED_WORD.findall(cmdline))
    try:
        return tuple(shlex.split(cmdline))
    except ValueError:  # an unbalanced quote: fall back to plain white-space splitting
        return tuple(cmdline.split())


def collect(host: Host) -> System:
    return host.memo("facts.system", lambda: _collect(host))


def _collect(host: Host) -> System:
    dmi = {}
    for f in DMI_FIELDS:
        value = host.read_value(f"{DMI_DIR}/{f}")
        if value:
            dmi[f] = value
    return System(
        hostname=host.read_value("/proc/sys/kernel/hostname"),
        kernel=host.read_value("/proc/sys/kernel/osrelease"),
        cmdline=host.read_value("/proc/cmdline"),
        dmi=dmi,
        virtual=virtual_machine(dmi, host.read(CPUINFO)),
    )


def virtual_machine(dmi: dict[str, str], cpuinfo: str | None) -> str | None:
    """Why this is a virtual machine, or None. x86 hypervisors set CPUID leaf 1 ECX bit 31, which
    Linux shows as the "hypervisor" flag (arch/x86/include/asm/cpufeatures.h, X86_FEATURE_HYPERVISOR)."""
    for line in (cpuinfo or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags" and "hypervisor" in value.split():
            return "/proc/cpuinfo flags: hypervisor"
    for field in ("sys_vendor", "product_name", "board_vendor"):
        value = dmi.get(field, "")
        if any(value.startswith(mark) for mark in _VM_DMI):
            return f"{DMI_DIR}/{field}: {value}"
    return None


def sysctl_path(name: str) -> str:
    """A sysctl's file: "vm.swappiness" -> /proc/sys/vm/swappiness (sysctl(8))."""
    return "/proc/sys/" + name.replace(".", "/")


def sysctl(host: Host, name: str) -> str | None:
    """A sysctl by its dotted name ("vm.swappiness"), read from /proc/sys; None when absent."""
    return host.read_value(sysctl_path(name))
