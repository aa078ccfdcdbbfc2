"""CPU instruction sets for oneDNN: what TensorFlow's oneDNN kernels can use on this CPU, and whether
the job's environment turns them off or caps them.

Since TensorFlow 2.9 the Linux x86 packages run oneDNN's kernels, on by default on CPUs with
AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX (https://github.com/tensorflow/tensorflow/releases/tag/v2.9.0;
tensorflow/core/util/port.cc, DefaultOneDnnPolicy), and oneDNN dispatches to the best instruction set
the CPU has: AVX-512, VNNI, BF16, AMX. `TF_ENABLE_ONEDNN_OPTS=0` (or "false") turns them off; any value
but 0, false, 1 and true is ignored with a warning. `ONEDNN_MAX_CPU_ISA` (`DNNL_MAX_CPU_ISA`, read when
the first is unset) caps the instruction set oneDNN dispatches to
(https://oneapi-src.github.io/oneDNN/dev_guide_cpu_dispatcher_control.html).

A job inherits these from the shell or scheduler that starts it, or has its own: nodeagent's own
environment (/proc/self/environ, what the shell hands the jobs it starts) and those of the running
training processes (found as the threads check finds them) are judged.

The installed TensorFlow version is not read: which interpreter and site-packages a job runs is not
visible through the Host, and a check never imports TensorFlow. The variables are judged as
TensorFlow 2.9 and later read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from nodeagent.api.check import Area, Check, NoParams
from nodeagent.checks import threads
from nodeagent.checks.threads import Proc
from nodeagent.core.finding import Finding, Status
from nodeagent.facts import cpu_isa, limits
from nodeagent.facts.cpu_isa import CpuIsa
from nodeagent.host import Host

ID = "cpu-isa"
TF_OPTS = "TF_ENABLE_ONEDNN_OPTS"
MAX_ISA = "ONEDNN_MAX_CPU_ISA"
MAX_ISA_OLD = "DNNL_MAX_CPU_ISA"
ONEDNN_VARS = (TF_OPTS, MAX_ISA, MAX_ISA_OLD)
_TF_DOC = "https://github.com/tensorflow/tensorflow/releases/tag/v2.9.0"
_ONEDNN_DOC = "https://oneapi-src.github.io/oneDNN/dev_guide_cpu_dispatcher_control.html"

# oneDNN's x64 instruction sets, each as the /proc/cpuinfo flags it needs, including those of the sets
# below it. The order is partial (dispatcher control page): SSE41 < AVX < AVX2 < AVX2_VNNI <
# AVX2_VNNI_2; AVX2 < AVX512_CORE < AVX512_CORE_VNNI < AVX512_CORE_BF16 < AVX512_CORE_FP16 <
# AVX512_CORE_AMX < AVX512_CORE_AMX_FP16; AVX2_VNNI < AVX512_CORE_FP16; and in older releases
# AVX2 < AVX512_MIC < AVX512_MIC_4OPS. So one set is at most another when its flags are a subset of
# the other's.
_SSE41 = frozenset({"sse4_1"})
_AVX = _SSE41 | {"avx"}
_AVX2 = _AVX | {"avx2"}
_AVX2_VNNI = _AVX2 | {"avx_vnni"}
_AVX512_MIC = _AVX2 | {"avx512f", "avx512cd", "avx512er", "avx512pf"}
_AVX512_CORE = _AVX2 | {"avx512f", "avx512bw", "avx512vl", "avx512dq"}
_AVX512_CORE_VNNI = _AVX512_CORE | {"avx512_vnni"}
_AVX512_CORE_BF16 = _AVX512_CORE_VNNI | {"avx512_bf16"}
_AVX512_CORE_FP16 = _AVX512_CORE_BF16 | _AVX2_VNNI | {"avx512_fp16"}
_AVX512_CORE_AMX = _AVX512_CORE_FP16 | {"amx_tile", "amx_int8", "amx_bf16"}
ISAS: dict[str, frozenset[str]] = {
    "SSE41": _SSE41,
    "AVX": _AVX,
    "AVX2": _AVX2,
    "AVX2_VNNI": _AVX2_VNNI,
    "AVX2_VNNI_2": _AVX2_VNNI | {"avx_vnni_int8", "avx_ne_convert"},
    # Xeon Phi (Knights Landing, Knights Mill): AVX-512 without BW/VL/DQ; older oneDNN releases name them.
    "AVX512_MIC": _AVX512_MIC,
    "AVX512_MIC_4OPS": _AVX512_MIC | {"avx512_4vnniw", "avx512_4fmaps"},
    "AVX512_CORE": _AVX512_CORE,
    "AVX512_CORE_VNNI": _AVX512_CORE_VNNI,
    "AVX512_CORE_BF16": _AVX512_CORE_BF16,
    "AVX512_CORE_FP16": _AVX512_CORE_FP16,
    "AVX512_CORE_AMX": _AVX512_CORE_AMX,
    "AVX512_CORE_AMX_FP16": _AVX512_CORE_AMX | {"amx_fp16"},
}
# The AVX10.1 names of the last three, which oneDNN accepts as well.
_ALIASES = {
    "AVX10_1_512": "AVX512_CORE_FP16",
    "AVX10_1_512_AMX": "AVX512_CORE_AMX",
    "AVX10_1_512_AMX_FP16": "AVX512_CORE_AMX_FP16",
}
# Values that set no cap: every instruction set oneDNN supports.
_NO_CAP = ("ALL", "DEFAULT")
# The sets that carry deep-learning instructions (AVX-512, VNNI, BF16, FP16, AMX): losing one of them
# costs a job; losing only AVX2 on a CPU without them is oneDNN's own default choice there.
_DL_ISAS = frozenset(ISAS) - {"SSE41", "AVX", "AVX2"}
# The flags on which TensorFlow turns oneDNN on by default on Linux (DefaultOneDnnPolicy).
_TF_DEFAULT_ON = frozenset({"avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16"})


def _first_isa_with(flag: str) -> frozenset[str]:
    return min((flags for flags in ISAS.values() if flag in flags), key=len)


# Every flag oneDNN's sets need, the lower sets' first: the order evidence lists them in.
_ISA_FLAGS = tuple(sorted(frozenset().union(*ISAS.values()), key=lambda f: (len(_first_isa_with(f)), f)))


@dataclass(frozen=True)
class Facts:
    isa: CpuIsa
    environ: dict[str, str] | None  # ONEDNN_VARS of /proc/self/environ; None when unreadable
    processes: list[Proc] = field(default_factory=list)  # training processes, env: ONEDNN_VARS set


def collect(host: Host) -> Facts:
    env = limits.collect_environ(host)
    procs, _, _ = threads.training_processes(host, (*threads.KEPT_VARS, *ONEDNN_VARS))
    return Facts(
        isa=cpu_isa.collect(host),
        environ=None if env is None else {k: v for k, v in env.items() if k in ONEDNN_VARS},
        processes=[p for p in procs if any(k in p.env for k in ONEDNN_VARS)],
    )


# -- evaluation (pure) ---------------------------------------------------------------------------


def isas_of(flags: frozenset[str]) -> set[str]:
    """The oneDNN instruction sets a CPU with these flags has."""
    return {name for name, needs in ISAS.items() if needs <= flags}


def best_isa(isas: set[str]) -> str | None:
    """The highest of `isas` (the one needing most flags; later in ISAS on a tie); None if empty."""
    order = list(ISAS)
    return max(isas, key=lambda name: (len(ISAS[name]), order.index(name)), default=None)


def cap_of(value: str) -> str | None:
    """The instruction set a ONEDNN_MAX_CPU_ISA value names, as oneDNN 2.5 and later read it (in any
    case, untrimmed); "" for no cap (ALL, DEFAULT); None when oneDNN does not know it: it then
    ignores it and sets no cap (cpu_isa_traits.cpp, init_max_cpu_isa)."""
    name = value.upper()
    if name in _NO_CAP:
        return ""
    name = _ALIASES.get(name, name)
    return name if name in ISAS else None


def tf_opts(value: str) -> bool | None:
    """TF_ENABLE_ONEDNN_OPTS as TensorFlow reads it (ReadBoolFromEnvVar); None: not a boolean, ignored."""
    return {"0": False, "false": False, "1": True, "true": True}.get(value.lower())


@dataclass(frozen=True)
class _Environment:
    path: str  # the environ file
    who: str  # "nodeagent's environment", "pid 1234 (python3)"
    subject: str
    values: Mapping[str, str]


@dataclass(frozen=True)
class _Judged:
    lost: list[str]  # what turns oneDNN's deep-learning instruction sets off or caps them
    fixes: list[str]
    notes: list[str]  # settings that change nothing here, and why


def _cap(values: Mapping[str, str]) -> tuple[str, str] | None:
    """(variable, value) of the cap oneDNN reads: ONEDNN_MAX_CPU_ISA, else DNNL_MAX_CPU_ISA. An empty
    value is unset to oneDNN (its getenv wants at least one character)."""
    for var in (MAX_ISA, MAX_ISA_OLD):
        if values.get(var):
            return var, values[var]
    return None


def _judge(values: Mapping[str, str], cpu: set[str]) -> _Judged:
    best = best_isa(cpu)
    dl = sorted(cpu & _DL_ISAS, key=list(ISAS).index)
    lost: list[str] = []
    fixes: list[str] = []
    notes: list[str] = []
    raw = values.get(TF_OPTS)
    if raw is not None:
        on = tf_opts(raw)
        if on is None:
            notes.append(f"{TF_OPTS}={raw!r} is not 0, false, 1 or true: TensorFlow ignores it")
        elif not on and dl:
            lost.append(f"{TF_OPTS}={raw} turns TensorFlow's oneDNN kernels off ({', '.join(dl)} unused)")
            default_on = _TF_DEFAULT_ON & _flags_of(cpu)
            fixes.append(
                f"unset {TF_OPTS}: TensorFlow 2.9+ turns oneDNN on by default on a CPU with "
                f"{', '.join(sorted(default_on))} ({_TF_DOC})"
                if default_on
                else f"set {TF_OPTS}=1: TensorFlow turns oneDNN on by default only on CPUs with VNNI, BF16 "
                f"or AMX, and this one has {best} ({_TF_DOC})"
            )
        elif not on:
            notes.append(
                f"{TF_OPTS}={raw} turns oneDNN off, but this CPU has no AVX-512, VNNI, BF16 or AMX for it"
            )
    cap = _cap(values)
    if cap is not None:
        var, value = cap
        name = cap_of(value)
        if name is None:
            notes.append(f"{var}={value!r} is not an instruction set oneDNN knows: it ignores it")
            return _Judged(lost, fixes, notes)
        allowed = set(ISAS) if name == "" else isas_of(ISAS[name])
        denied = sorted((cpu - allowed) & _DL_ISAS, key=list(ISAS).index)
        if denied:
            lost.append(f"{var}={value} caps oneDNN below the CPU's {best} ({', '.join(denied)} unused)")
            fixes.append(
                f"unset {var} (or set it to {best}): oneDNN then dispatches to the best set ({_ONEDNN_DOC})"
            )
        else:
            notes.append(f"{var}={value} leaves oneDNN every deep-learning set this CPU has")
    return _Judged(lost, fixes, notes)


def _flags_of(isas: set[str]) -> frozenset[str]:
    return frozenset().union(*(ISAS[name] for name in isas))


def _cpu_evidence(isa: CpuIsa) -> dict[str, str]:
    flags = isa.flags or frozenset()
    return {
        f"{isa.source} {isa.model_field}": isa.model or "(none)",
        f"{isa.source} flags": " ".join(f for f in _ISA_FLAGS if f in flags) or "(none of oneDNN's)",
    }


def _cpu_finding(isa: CpuIsa, cpu: set[str]) -> Finding:
    best = best_isa(cpu)
    dl_flags = [f for f in _ISA_FLAGS if f in _flags_of(cpu & _DL_ISAS) - _AVX2]
    model = isa.model or "CPU"
    if best is None:
        summary = f"{model}: no SSE4.1, below what oneDNN's x64 kernels need"
    elif dl_flags:
        summary = f"{model}: oneDNN can dispatch to {best} ({' '.join(dl_flags)})"
    else:
        summary = f"{model}: oneDNN's best set here is {best} (no AVX-512, VNNI, BF16 or AMX)"
    return Finding(
        ID, Status.OK, summary, {**_cpu_evidence(isa), "oneDNN ISA": best or "(none)"}, subject="cpu"
    )


def _environments(f: Facts) -> list[_Environment]:
    out: list[_Environment] = []
    if f.environ is not None:
        out.append(_Environment(limits.ENVIRON_PATH, "nodeagent's environment", "environment", f.environ))
    for pr in f.processes:
        path = f"{threads.PROC}/{pr.pid}/environ"
        out.append(_Environment(path, f"pid {pr.pid} ({pr.name})", f"pid {pr.pid}", pr.env))
    return out


def _env_finding(env: _Environment, isa: CpuIsa, cpu: set[str]) -> Finding:
    judged = _judge(env.values, cpu)
    ev = {f"{env.path} {var}": env.values.get(var, "(unset)") for var in ONEDNN_VARS}
    if judged.lost:
        return Finding(
            ID,
            Status.WARN,
            f"{env.who}: {'; '.join(judged.lost)}",
            {**ev, **_cpu_evidence(isa)},
            expected=f"oneDNN on, up to {best_isa(cpu)}",
            remediation="In the job's environment (its launcher, batch script or container spec): "
            + "; ".join(judged.fixes),
            subject=env.subject,
        )
    detail = "; ".join(judged.notes) or f"{TF_OPTS}, {MAX_ISA} and {MAX_ISA_OLD} unset"
    return Finding(ID, Status.OK, f"{env.who} keeps nothing from oneDNN: {detail}", ev, subject=env.subject)


def evaluate(f: Facts, p: NoParams) -> list[Finding]:
    isa = f.isa
    if isa.flags is None:
        why = isa.why or "absent"
        summary = (
            f"oneDNN's x86 instruction sets not judged: not an x86 CPU ({isa.model or 'model not listed'})"
            if isa.x86 is False
            else f"CPU instruction sets not judged: {isa.source} {why}"
        )
        return [Finding(ID, Status.SKIPPED, summary, {isa.source: why}, subject="cpu")]
    cpu = isas_of(isa.flags)
    findings = [_cpu_finding(isa, cpu)]
    if f.environ is None:
        findings.append(
            Finding(
                ID,
                Status.SKIPPED,
                f"oneDNN variables of nodeagent's environment not judged: {limits.ENVIRON_PATH} unreadable",
                {limits.ENVIRON_PATH: "absent"},
                subject="environment",
            )
        )
    findings += [_env_finding(env, isa, cpu) for env in _environments(f)]
    return findings


CHECK = Check(
    id=ID,
    title="CPU instruction sets for oneDNN",
    area=Area.CPU,
    tags=("cpu",),
    collect=collect,
    evaluate=evaluate,
    params=NoParams,
    paths=(
        *cpu_isa.PATHS,
        *limits.PATHS,
        f"{threads.PROC}/self",
        f"{threads.PROC}/[0-9]*/status",
        f"{threads.PROC}/[0-9]*/cmdline",
        f"{threads.PROC}/[0-9]*/environ",
    ),
)
