"""A fake `pynvml` for tests: the subset nodeagent.facts.nvml calls, configurable per GPU.

Constant values and exception classes are copied by name from pynvml (nvidia-ml-py 13.615.71,
.venv/lib/python3.11/site-packages/pynvml.py); tests/unit/test_check_gpu.py compares them with the real
module so a drift shows up. The exceptions behave as pynvml's: `NVMLError(code)` builds the
subclass for that code (NVMLError_NotSupported for 3...), every subclass has `.value`.

Use: `monkeypatch.setitem(sys.modules, "pynvml", fake_nvml.module([FakeGpu(...), ...]))`.
Any FakeGpu field may be an error code wrapped in `Fail(code)`: that query raises it.
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# -- constants, as in pynvml -------------------------------------------------------------------
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_UNKNOWN = 999

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_NVLINK_MAX_LINKS = 36
NVML_NVLINK_ERROR_DL_REPLAY = 0
NVML_NVLINK_ERROR_DL_RECOVERY = 1
NVML_NVLINK_ERROR_DL_CRC_FLIT = 2
NVML_NVLINK_ERROR_DL_CRC_DATA = 3
NVML_NVLINK_ERROR_DL_ECC_DATA = 4
NVML_NVLINK_STATE_INACTIVE = 0x0
NVML_NVLINK_STATE_ACTIVE = 0x1
NVML_NVLINK_STATE_SLEEP = 0x2
NVML_DEVICE_MIG_DISABLE = 0x0
NVML_DEVICE_MIG_ENABLE = 0x1
NVML_PSTATE_0 = 0
NVML_PSTATE_8 = 8
NVML_PSTATE_UNKNOWN = 32

nvmlClocksEventReasonGpuIdle = 0x0000000000000001
nvmlClocksEventReasonApplicationsClocksSetting = 0x0000000000000002
nvmlClocksEventReasonSwPowerCap = 0x0000000000000004
nvmlClocksEventReasonHwSlowdown = 0x0000000000000008
nvmlClocksEventReasonSyncBoost = 0x0000000000000010
nvmlClocksEventReasonSwThermalSlowdown = 0x0000000000000020
nvmlClocksEventReasonHwThermalSlowdown = 0x0000000000000040
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x0000000000000080
nvmlClocksEventReasonDisplayClockSetting = 0x0000000000000100
nvmlClocksEventReasonNone = 0x0000000000000000
nvmlClocksThrottleReasonBoardLimit = 0x0000000000000200
nvmlClocksThrottleReasonReliability = 0x0000000000000400

CONSTANTS = {k: v for k, v in dict(globals()).items() if k.startswith(("NVML_", "nvmlClocks"))}

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
    NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_MEMORY: "Insufficient Memory",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


# -- exceptions, as in pynvml ------------------------------------------------------------------
class NVMLError(Exception):
    """pynvml.NVMLError: `NVMLError(code)` returns an instance of the subclass for `code`."""

    _valClassMapping: dict[int, type[NVMLError]] = {}  # noqa: RUF012 (pynvml's own name and shape)
    value: int

    def __new__(cls, value: int = NVML_ERROR_UNKNOWN) -> NVMLError:
        kind = NVMLError._valClassMapping.get(value, cls) if cls is NVMLError else cls
        obj = Exception.__new__(kind)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")


def _error_class(name: str, code: int) -> type[NVMLError]:
    def new(cls: type[NVMLError], *args: object) -> NVMLError:
        return NVMLError.__new__(cls, code)

    klass = type(name, (NVMLError,), {"__new__": new})
    NVMLError._valClassMapping[code] = klass
    return klass


NVMLError_Uninitialized = _error_class("NVMLError_Uninitialized", NVML_ERROR_UNINITIALIZED)
NVMLError_InvalidArgument = _error_class("NVMLError_InvalidArgument", NVML_ERROR_INVALID_ARGUMENT)
NVMLError_NotSupported = _error_class("NVMLError_NotSupported", NVML_ERROR_NOT_SUPPORTED)
NVMLError_NoPermission = _error_class("NVMLError_NoPermission", NVML_ERROR_NO_PERMISSION)
NVMLError_DriverNotLoaded = _error_class("NVMLError_DriverNotLoaded", NVML_ERROR_DRIVER_NOT_LOADED)
NVMLError_LibraryNotFound = _error_class("NVMLError_LibraryNotFound", NVML_ERROR_LIBRARY_NOT_FOUND)
NVMLError_FunctionNotFound = _error_class("NVMLError_FunctionNotFound", NVML_ERROR_FUNCTION_NOT_FOUND)
NVMLError_GpuIsLost = _error_class("NVMLError_GpuIsLost", NVML_ERROR_GPU_IS_LOST)
NVMLError_LibRmVersionMismatch = _error_class(
    "NVMLError_LibRmVersionMismatch", NVML_ERROR_LIB_RM_VERSION_MISMATCH
)
NVMLError_Unknown = _error_class("NVMLError_Unknown", NVML_ERROR_UNKNOWN)

EXCEPTIONS = {k: v for k, v in dict(globals()).items() if k.startswith("NVMLError")}


# -- configurable devices ---------------------------------------------------------------------
@dataclass(frozen=True)
class Fail:
    """A query that raises NVMLError(code) instead of answering."""

    code: int


NOT_SUPPORTED = Fail(NVML_ERROR_NOT_SUPPORTED)


@dataclass
class FakeLink:
    state: Any = NVML_FEATURE_ENABLED
    version: Any = 4  # NVML_NVLINK_VERSION_3_0, as an A100 reports it
    remote: Any = "00000000:C7:00.0"  # an NVSwitch on HGX A100
    errors: Any = (0, 0, 0, 0, 0)  # replay, recovery, crc_flit, crc_data, ecc_data; or Fail per counter


@dataclass
class FakeMig:
    """A MIG device: a 1g.10gb instance of an A100-SXM4-80GB unless told otherwise."""

    gpu_instance_id: Any = 7
    compute_instance_id: Any = 0
    name: Any = "NVIDIA A100-SXM4-80GB MIG 1g.10gb"
    multiprocessors: int = 14
    memory_mb: int = 9856
    volatile_uncorrectable: Any = 0


@dataclass
class FakeGpu:
    """An A100-SXM4-80GB on an HGX board, healthy, unless told otherwise."""

    bus_id: str = "00000000:07:00.0"
    name: Any = "NVIDIA A100-SXM4-80GB"
    uuid: Any = "GPU-00000000-0000-0000-0000-000000000000"
    persistence: Any = NVML_FEATURE_ENABLED
    ecc_mode: Any = (NVML_FEATURE_ENABLED, NVML_FEATURE_ENABLED)
    volatile_uncorrectable: Any = 0
    aggregate_uncorrectable: Any = 0
    retired_sbe: Any = NOT_SUPPORTED  # Ampere replaced page retirement with row remapping
    retired_dbe: Any = NOT_SUPPORTED
    retired_pending: Any = NOT_SUPPORTED
    remapped_rows: Any = (0, 0, 0, 0)  # correctable, uncorrectable, pending, failure
    clock_reasons: Any = nvmlClocksEventReasonGpuIdle
    throttle_reasons: Any = None  # the pre-R535 name; None: same as clock_reasons
    has_event_reasons: bool = True  # False: a driver without nvmlDeviceGetCurrentClocksEventReasons
    power_limit_mw: Any = 400_000
    enforced_power_limit_mw: Any = 400_000
    default_power_limit_mw: Any = 400_000
    power_constraints_mw: Any = (100_000, 400_000)
    temperature: Any = 34
    slowdown_threshold: Any = 92
    nvlinks: Sequence[FakeLink] | Fail = field(default_factory=lambda: [FakeLink() for _ in range(12)])
    handle: Any = None  # Fail(...): the GPU cannot even be opened
    mig_mode: Any = (NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_DISABLE)  # (current, pending)
    mig_slots: Any = 7  # nvmlDeviceGetMaxMigDeviceCount: 7 on an A100
    migs: Sequence[FakeMig | None] = ()  # MIG devices by slot; None (or past the end): an empty slot
    pcie_gen: Any = 4
    pcie_gen_max: Any = 4  # possible with this GPU and this host
    pcie_gen_gpu_max: Any = 4  # the GPU's own
    pcie_width: Any = 16
    pcie_width_max: Any = 16
    utilization: Any = 0  # percent
    pstate: Any = NVML_PSTATE_0

    @classmethod
    def consumer(cls, bus_id: str = "00000000:01:00.0") -> FakeGpu:
        """A GPU that answers nothing but its identity: every other query is NotSupported."""
        return cls(
            bus_id=bus_id,
            name="NVIDIA GeForce RTX 4090",
            uuid="GPU-11111111-1111-1111-1111-111111111111",
            persistence=NOT_SUPPORTED,
            ecc_mode=NOT_SUPPORTED,
            volatile_uncorrectable=NOT_SUPPORTED,
            aggregate_uncorrectable=NOT_SUPPORTED,
            remapped_rows=NOT_SUPPORTED,
            clock_reasons=NOT_SUPPORTED,
            power_limit_mw=NOT_SUPPORTED,
            enforced_power_limit_mw=NOT_SUPPORTED,
            default_power_limit_mw=NOT_SUPPORTED,
            power_constraints_mw=NOT_SUPPORTED,
            temperature=NOT_SUPPORTED,
            slowdown_threshold=NOT_SUPPORTED,
            nvlinks=NOT_SUPPORTED,
            mig_mode=NOT_SUPPORTED,
            utilization=NOT_SUPPORTED,
            pstate=NOT_SUPPORTED,
        )


def hgx(count: int = 8, **changes: Any) -> list[FakeGpu]:
    """`count` healthy A100s on distinct buses (as an HGX A100 8-GPU board), each with `changes`."""
    buses = ["07", "0F", "47", "4E", "87", "90", "B7", "BD"]
    return [
        FakeGpu(
            bus_id=f"00000000:{buses[i % len(buses)]}:00.0",
            uuid=f"GPU-{i:08d}-0000-0000-0000-000000000000",
            **changes,
        )
        for i in range(count)
    ]


@dataclass
class _Handle:
    index: int


@dataclass
class _MigHandle:
    index: int  # the parent GPU
    slot: int


@dataclass
class Attributes:
    """As nvmlDeviceAttributes_t (pynvml's c_nvmlDeviceAttributes), the fields nodeagent reads."""

    multiprocessorCount: int  # pynvml's field names
    memorySizeMB: int


@dataclass
class Utilization:
    """As nvmlUtilization_t (pynvml's c_nvmlUtilization_t)."""

    gpu: int
    memory: int


@dataclass
class PciInfo:
    """As nvmlPciInfo_t reads in Python 3: busId is already decoded to str by pynvml."""

    busId: str  # pynvml's field names
    busIdLegacy: str


def _answer(value: Any) -> Any:
    if isinstance(value, Fail):
        raise NVMLError(value.code)
    return value


class FakeNvml:
    """The state behind one fake module: its GPUs and how often init/shutdown ran."""

    def __init__(
        self,
        gpus: Sequence[FakeGpu],
        init_error: int | None = None,
        count_error: int | None = None,
        driver: str = "535.104.05",
        cuda: int = 12020,
    ) -> None:
        self.gpus = list(gpus)
        self.init_error = init_error
        self.count_error = count_error
        self.driver = driver
        self.cuda = cuda
        self.inits = 0
        self.shutdowns = 0
        self.calls: list[str] = []

    def _gpu(self, handle: _Handle) -> FakeGpu:
        return self.gpus[handle.index]

    def _mig(self, handle: _MigHandle) -> FakeMig:
        mig = self.gpus[handle.index].migs[handle.slot]
        assert mig is not None
        return mig

    def _link(self, handle: _Handle, link: int) -> Any:
        links = _answer(self._gpu(handle).nvlinks)
        if link >= len(links):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return links[link]

    # -- the API ------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> Any:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> Any:
        return self.cuda

    def nvmlDeviceGetCount(self) -> Any:
        if self.count_error is not None:
            raise NVMLError(self.count_error)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        if index >= len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        _answer(self.gpus[index].handle)
        return _Handle(index)

    def nvmlDeviceGetName(self, h: _Handle | _MigHandle) -> Any:
        return _answer(self._mig(h).name if isinstance(h, _MigHandle) else self._gpu(h).name)

    def nvmlDeviceGetPciInfo(self, h: _Handle) -> PciInfo:
        bus = self._gpu(h).bus_id
        return PciInfo(busId=bus, busIdLegacy=bus[4:])

    def nvmlDeviceGetUUID(self, h: _Handle) -> Any:
        return _answer(self._gpu(h).uuid)

    def nvmlDeviceGetPersistenceMode(self, h: _Handle) -> Any:
        return _answer(self._gpu(h).persistence)

    def nvmlDeviceGetEccMode(self, h: _Handle) -> list[int]:
        return list(_answer(self._gpu(h).ecc_mode))

    def nvmlDeviceGetTotalEccErrors(self, h: _Handle | _MigHandle, error_type: int, counter_type: int) -> Any:
        assert error_type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        if isinstance(h, _MigHandle):
            assert counter_type == NVML_VOLATILE_ECC
            return _answer(self._mig(h).volatile_uncorrectable)
        g = self._gpu(h)
        value = g.volatile_uncorrectable if counter_type == NVML_VOLATILE_ECC else g.aggregate_uncorrectable
        return _answer(value)

    def nvmlDeviceGetRetiredPages(self, h: _Handle, cause: int) -> list[int]:
        g = self._gpu(h)
        count = _answer(
            g.retired_dbe if cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR else g.retired_sbe
        )
        return [0x1000 * (i + 1) for i in range(count)]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: _Handle) -> Any:
        return _answer(self._gpu(h).retired_pending)

    def nvmlDeviceGetRemappedRows(self, h: _Handle) -> tuple[int, int, int, int]:
        return tuple(_answer(self._gpu(h).remapped_rows))

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: _Handle) -> Any:
        if not self._gpu(h).has_event_reasons:
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        return _answer(self._gpu(h).clock_reasons)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: _Handle) -> Any:
        g = self._gpu(h)
        return _answer(g.clock_reasons if g.throttle_reasons is None else g.throttle_reasons)

    def nvmlDeviceGetPowerManagementLimit(self, h: _Handle) -> Any:
        return _answer(self._gpu(h).power_limit_mw)

    def nvmlDeviceGetEnforcedPowerLimit(self, h: _Handle) -> Any:
        return _answer(self._gpu(h).enforced_power_limit_mw)

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: _Handle) -> Any:
        return _answer(self._gpu(h).default_power_limit_mw)

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h: _Handle) -> list[int]:
        return list(_answer(self._gpu(h).power_constraints_mw))

    def nvmlDeviceGetTemperature(self, h: _Handle, sensor: int) -> Any:
        assert sensor == NVML_TEMPERATURE_GPU
        return _answer(self._gpu(h).temperature)

    def nvmlDeviceGetTemperatureThreshold(self, h: _Handle, threshold: int) -> Any:
        assert threshold == NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        return _answer(self._gpu(h).slowdown_threshold)

    def nvmlDeviceGetNvLinkState(self, h: _Handle, link: int) -> Any:
        return _answer(self._link(h, link).state)

    def nvmlDeviceGetNvLinkVersion(self, h: _Handle, link: int) -> Any:
        return _answer(self._link(h, link).version)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: _Handle, link: int) -> PciInfo:
        bus = _answer(self._link(h, link).remote)
        return PciInfo(busId=bus, busIdLegacy=bus[4:])

    def nvmlDeviceGetNvLinkErrorCounter(self, h: _Handle, link: int, counter: int) -> Any:
        errors = _answer(self._link(h, link).errors)
        return _answer(errors[counter])

    def nvmlDeviceGetMigMode(self, h: _Handle) -> list[int]:
        return list(_answer(self._gpu(h).mig_mode))

    def nvmlDeviceGetMaxMigDeviceCount(self, h: _Handle) -> Any:
        return _answer(self._gpu(h).mig_slots)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: _Handle, slot: int) -> _MigHandle:
        g = self._gpu(h)
        if slot >= _answer(g.mig_slots):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if slot >= len(g.migs) or g.migs[slot] is None:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return _MigHandle(h.index, slot)

    def nvmlDeviceGetGpuInstanceId(self, h: _MigHandle) -> Any:
        return _answer(self._mig(h).gpu_instance_id)

    def nvmlDeviceGetComputeInstanceId(self, h: _MigHandle) -> Any:
        return _answer(self._mig(h).compute_instance_id)

    def nvmlDeviceGetAttributes(self, h: _MigHandle) -> Attributes:
        mig = self._mig(h)
        return Attributes(multiprocessorCount=mig.multiprocessors, memorySizeMB=mig.memory_mb)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: _Handle) -> Any:
        return _answer(self._gpu(h).pcie_gen)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: _Handle) -> Any:
        return _answer(self._gpu(h).pcie_gen_max)

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h: _Handle) -> Any:
        return _answer(self._gpu(h).pcie_gen_gpu_max)

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: _Handle) -> Any:
        return _answer(self._gpu(h).pcie_width)

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: _Handle) -> Any:
        return _answer(self._gpu(h).pcie_width_max)

    def nvmlDeviceGetUtilizationRates(self, h: _Handle) -> Utilization:
        return Utilization(gpu=_answer(self._gpu(h).utilization), memory=0)

    def nvmlDeviceGetPerformanceState(self, h: _Handle) -> Any:
        return _answer(self._gpu(h).pstate)


API = [name for name in vars(FakeNvml) if name.startswith("nvml")]


def module(
    gpus: Sequence[FakeGpu] = (),
    *,
    init_error: int | None = None,
    count_error: int | None = None,
    driver: str = "535.104.05",
    cuda: int = 12020,
    without: Sequence[str] = (),
) -> types.ModuleType:
    """A module standing in for `pynvml`; its `state` attribute is the FakeNvml behind it.

    `without` leaves functions out, as an older pynvml or driver would.
    """
    state = FakeNvml(gpus, init_error=init_error, count_error=count_error, driver=driver, cuda=cuda)
    mod = types.ModuleType("pynvml")
    for name, value in {**CONSTANTS, **EXCEPTIONS}.items():
        setattr(mod, name, value)
    for name in API:
        if name not in without:
            setattr(mod, name, getattr(state, name))
    mod.state = state  # type: ignore[attr-defined]
    return mod
