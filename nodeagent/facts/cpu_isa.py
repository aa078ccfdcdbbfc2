"""The CPU's model and instruction-set flags: what the vector and matrix kernels of a math library
(oneDNN, under TensorFlow) can use on it.

Every host answers from /proc/cpuinfo, read through the Host: the kernel's list is what the kernel
enabled, which is what a library can use (AMX needs the kernel's permission for its register state,
and a kernel booted with clearcpuid= lists less than CPUID shows). Where this machine's own
/proc/cpuinfo is hidden or empty (gVisor and other sandboxed container runtimes), py-cpuinfo answers
instead: it reads the CPUID bits itself, in a child interpreter (over a second, so only then).

/proc/cpuinfo (arch/x86/kernel/cpu/proc.c, show_cpuinfo): one block of "key<tabs>: value" lines per
processor, blocks separated by a blank line. x86 lists its features under "flags", named as in
arch/x86/include/asm/cpufeatures.h ("avx512f", "avx512_vnni", "amx_tile"). Other architectures
print other keys ("Features" on ARM, "cpu" on POWER) and no "flags": they are not x86.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from nodeagent.host import Host

CPUINFO = "/proc/cpuinfo"
PY_CPUINFO = "py-cpuinfo"
PATHS = (CPUINFO,)
# The model's field: x86 "model name", POWER "cpu", 32-bit ARM "Processor"; arm64 prints none.
_MODEL_KEYS = ("model name", "cpu", "Processor")
# py-cpuinfo names the CPUID bits it decodes itself after Intel's manual; where the kernel's name
# differs (cpufeatures.h), the kernel's is used, so that both sources name a feature alike.
_KERNEL_NAMES = {
    "avx512vnni": "avx512_vnni",
    "avx512vbmi2": "avx512_vbmi2",
    "avx512bitalg": "avx512_bitalg",
    "avx512vpopcntdq": "avx512_vpopcntdq",
}
_X86_ARCHES = ("X86_64", "X86_32")  # py-cpuinfo's "arch"


@dataclass(frozen=True)
class CpuIsa:
    """The CPU's model and x86 feature flags, and where they were read."""

    source: str  # CPUINFO or PY_CPUINFO
    model_field: str  # the field the model came from ("model name", "brand_raw")
    model: str | None
    x86: bool | None  # None when nothing was read
    # The flags every processor lists, in the kernel's names; None when not x86 or not read.
    flags: frozenset[str] | None
    why: str | None = None  # why flags is None ("absent", "no flags field", "arch ARM_8")


def collect(host: Host) -> CpuIsa:
    return host.memo("facts.cpu_isa", lambda: _collect(host))


def _collect(host: Host) -> CpuIsa:
    text = host.read(CPUINFO)
    kernel = (
        CpuIsa(CPUINFO, "model name", None, None, None, host.unreadable(CPUINFO) or "absent")
        if text is None
        else from_cpuinfo(text)
    )
    if kernel.x86 is None and host.is_live:  # nothing read: CPUID through py-cpuinfo, if it can
        return from_py_cpuinfo(_py_cpuinfo()) or kernel
    return kernel


@functools.lru_cache(maxsize=1)
def _py_cpuinfo() -> Mapping[str, object] | None:
    """py-cpuinfo's answer for this machine, once per process: it starts a Python interpreter (over a
    second), and a CPU's model and flags do not change while nodeagent runs."""
    try:
        import cpuinfo

        info = cpuinfo.get_cpu_info()
    except Exception:  # whatever the library hits (no CPUID, a failed child process): /proc/cpuinfo answers
        return None
    return info if isinstance(info, dict) else None


def from_py_cpuinfo(info: Mapping[str, object] | None) -> CpuIsa | None:
    """The CPU from py-cpuinfo's `get_cpu_info()`; None when it has no architecture or no flags (it
    answers {} when its child process fails), so that /proc/cpuinfo is read instead."""
    if info is None:
        return None
    arch, flags, brand = info.get("arch"), info.get("flags"), info.get("brand_raw")
    if not isinstance(arch, str) or not isinstance(flags, list) or not flags:
        return None
    model = (brand.strip() or None) if isinstance(brand, str) else None
    if arch not in _X86_ARCHES:
        return CpuIsa(PY_CPUINFO, "brand_raw", model, False, None, f"arch {arch}")
    names = frozenset(_KERNEL_NAMES.get(f, f) for f in flags if isinstance(f, str))
    return CpuIsa(PY_CPUINFO, "brand_raw", model, True, names)


def parse_blocks(text: str) -> list[dict[str, str]]:
    """/proc/cpuinfo as its blocks (one per processor, and the header of 32-bit ARM), each a mapping
    of key to value, split at the first ":" of a line and stripped of the tabs that align them."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
            current = {}
            continue
        key, colon, value = line.partition(":")
        if colon:
            current[key.strip()] = value.strip()
    if current:
        blocks.append(current)
    return blocks


def from_cpuinfo(text: str) -> CpuIsa:
    """The CPU from the text of /proc/cpuinfo: the model, and the flags that every processor lists
    (a job may run on any of them)."""
    blocks = parse_blocks(text)
    if not blocks:
        return CpuIsa(CPUINFO, "model name", None, None, None, "empty")
    field, model = next(
        ((key, block[key]) for key in _MODEL_KEYS for block in blocks if block.get(key)), ("model name", None)
    )
    per_cpu = [frozenset(block["flags"].split()) for block in blocks if "flags" in block]
    if not per_cpu:
        return CpuIsa(CPUINFO, field, model, False, None, "no flags field")
    return CpuIsa(CPUINFO, field, model, True, frozenset.intersection(*per_cpu))
