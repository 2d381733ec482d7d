"""A fake NVML for tests on machines without a GPU, at the import boundary.

It replaces the functions of the real ``pynvml`` module (nvidia-ml-py) and restores them afterwards,
so the code under test imports and calls the binding exactly as it would on a GPU machine. The
fakes take the binding's arguments and return what the binding returns: ints for clocks (MHz),
power (mW), temperatures (°C) and reason bitmasks, ``str`` for names and UUIDs, ``c_nvmlMemory_t``
for memory, the binding's friendly objects for process lists, and real ``NVMLError`` subclasses
for failures (device calls before ``nvmlInit`` raise ``NVMLError_Uninitialized``, as NVML does).

A test changes a ``FakeGpu``'s fields while code runs; every call reads the live values.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

MIB = 1024**2
_MISSING = object()


@dataclass
class FakeGpu:
    """One GPU as NVML would report it now."""

    name: str = "NVIDIA RTX A6000"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"  # FakeNvml numbers the default per GPU
    memory_total_mib: int = 49140
    compute_capability: tuple[int, int] = (8, 6)
    sm_clock_mhz: int = 1800
    sm_clock_max_mhz: int = 2100
    mem_clock_mhz: int = 8001
    power_mw: int = 250_000
    power_limit_mw: int = 300_000
    temperature_c: int = 70
    reasons: int = 0  # clock-event bitmask now
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # compute: (pid, used bytes or None)
    graphics_processes: list[tuple[int, int | None]] = field(default_factory=list)


class _Handle:
    """Opaque, as the binding's device pointers are to callers."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<fake nvmlDevice {self.index}>"


def _pynvml() -> ModuleType:
    import pynvml

    module: ModuleType = pynvml
    return module


class FakeNvml(AbstractContextManager["FakeNvml"]):
    """``install()``/``uninstall()``, a ``with`` block, or ``patch(monkeypatch)`` in a pytest test."""

    FUNCTIONS = (
        "nvmlInit",
        "nvmlInitWithFlags",
        "nvmlShutdown",
        "nvmlSystemGetDriverVersion",
        "nvmlDeviceGetCount",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetHandleByUUID",
        "nvmlDeviceGetIndex",
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetClockInfo",
        "nvmlDeviceGetMaxClockInfo",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetTemperature",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetGraphicsRunningProcesses",
        "nvmlDeviceGetCudaComputeCapability",
    )

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        for i, gpu in enumerate(gpus):
            if gpu.uuid == FakeGpu.uuid:
                gpu.uuid = f"GPU-{i:08x}-0000-0000-0000-000000000000"
        self.calls: Counter[str] = Counter()
        self.init_count = 0  # nvmlInit minus nvmlShutdown, as NVML counts them
        self.failures: dict[str, BaseException] = {}
        self._lock = threading.Lock()
        self._saved: dict[str, object] = {}

    # --- controls ---------------------------------------------------------------------------------

    def fail(self, function: str, error: BaseException | None = None) -> None:
        """Make ``function`` raise ``error`` (default NVMLError_NotSupported) until ``heal(function)``;
        for ``nvmlInit`` say, ``NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)``."""
        if function not in self.FUNCTIONS:
            raise ValueError(f"{function} is not faked (faked: {', '.join(self.FUNCTIONS)})")
        nvml = _pynvml()
        self.failures[function] = error if error is not None else nvml.NVMLError(nvml.NVML_ERROR_NOT_SUPPORTED)

    def heal(self, function: str) -> None:
        self.failures.pop(function, None)

    # --- installing -------------------------------------------------------------------------------

    def _bound(self) -> dict[str, Callable[..., Any]]:
        return {name: getattr(self, name) for name in self.FUNCTIONS}

    def install(self) -> None:
        if self._saved:
            raise RuntimeError("FakeNvml is installed already")
        nvml = _pynvml()
        for name, fake in self._bound().items():
            self._saved[name] = getattr(nvml, name, _MISSING)
            setattr(nvml, name, fake)

    def uninstall(self) -> None:
        nvml = _pynvml()
        for name, original in self._saved.items():
            if original is _MISSING:
                delattr(nvml, name)
            else:
                setattr(nvml, name, original)
        self._saved.clear()

    def __enter__(self) -> FakeNvml:
        self.install()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.uninstall()

    def patch(self, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
        """Install through ``monkeypatch``, which restores the real functions after the test."""
        nvml = _pynvml()
        for name, fake in self._bound().items():
            monkeypatch.setattr(nvml, name, fake, raising=False)
        return self

    # --- plumbing ---------------------------------------------------------------------------------

    def _enter(self, function: str, *, needs_init: bool = True) -> None:
        with self._lock:
            self.calls[function] += 1
        failure = self.failures.get(function)
        if failure is not None:
            raise failure
        if needs_init and self.init_count <= 0:
            nvml = _pynvml()
            raise nvml.NVMLError(nvml.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: object) -> FakeGpu:
        nvml = _pynvml()
        if not isinstance(handle, _Handle) or not 0 <= handle.index < len(self.gpus):
            raise nvml.NVMLError(nvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[handle.index]

    @staticmethod
    def _processes(listed: list[tuple[int, int | None]]) -> list[Any]:
        nvml = _pynvml()
        found = []
        for pid, used in listed:
            struct = nvml.c_nvmlProcessInfo_v3_t(
                pid=pid,
                usedGpuMemory=used if used is not None else nvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value,
                gpuInstanceId=nvml.NVML_VALUE_NOT_AVAILABLE_uint.value,  # not a MIG instance
                computeInstanceId=nvml.NVML_VALUE_NOT_AVAILABLE_uint.value,
            )
            obj = nvml.nvmlStructToFriendlyObject(struct)
            if obj.usedGpuMemory == nvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
                obj.usedGpuMemory = None  # as the binding does
            found.append(obj)
        return found

    # --- the faked functions (the binding's names and signatures) ---------------------------------

    def nvmlInitWithFlags(self, flags: int) -> None:
        self._enter("nvmlInitWithFlags", needs_init=False)
        with self._lock:
            self.init_count += 1

    def nvmlInit(self) -> None:
        self._enter("nvmlInit", needs_init=False)
        with self._lock:
            self.init_count += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        with self._lock:
            self.init_count -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return "550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            nvml = _pynvml()
            raise nvml.NVMLError(nvml.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> _Handle:
        self._enter("nvmlDeviceGetHandleByUUID")
        wanted = uuid.decode() if isinstance(uuid, bytes) else uuid
        for i, gpu in enumerate(self.gpus):
            if gpu.uuid == wanted:
                return _Handle(i)
        nvml = _pynvml()
        raise nvml.NVMLError(nvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetIndex(self, handle: object) -> int:
        self._enter("nvmlDeviceGetIndex")
        self._gpu(handle)
        assert isinstance(handle, _Handle)
        return handle.index

    def nvmlDeviceGetName(self, handle: object) -> str:
        self._enter("nvmlDeviceGetName")
        return self._gpu(handle).name

    def nvmlDeviceGetUUID(self, handle: object) -> str:
        self._enter("nvmlDeviceGetUUID")
        return self._gpu(handle).uuid

    def nvmlDeviceGetMemoryInfo(self, handle: object, version: int | None = None) -> Any:
        self._enter("nvmlDeviceGetMemoryInfo")
        gpu = self._gpu(handle)
        nvml = _pynvml()
        total = gpu.memory_total_mib * MIB
        used = min(total, sum(b or 0 for _, b in (*gpu.processes, *gpu.graphics_processes)))
        return nvml.c_nvmlMemory_t(total=total, free=total - used, used=used)

    def nvmlDeviceGetCudaComputeCapability(self, handle: object) -> tuple[int, int]:
        self._enter("nvmlDeviceGetCudaComputeCapability")
        return self._gpu(handle).compute_capability

    def nvmlDeviceGetClockInfo(self, handle: object, type: int) -> int:
        self._enter("nvmlDeviceGetClockInfo")
        return self._clock(self._gpu(handle), type, maximum=False)

    def nvmlDeviceGetMaxClockInfo(self, handle: object, type: int) -> int:
        self._enter("nvmlDeviceGetMaxClockInfo")
        return self._clock(self._gpu(handle), type, maximum=True)

    @staticmethod
    def _clock(gpu: FakeGpu, kind: int, *, maximum: bool) -> int:
        nvml = _pynvml()
        if kind in (nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_GRAPHICS):  # one clock domain on current GPUs
            return gpu.sm_clock_max_mhz if maximum else gpu.sm_clock_mhz
        if kind == nvml.NVML_CLOCK_MEM:
            return gpu.mem_clock_mhz
        raise nvml.NVMLError(
            nvml.NVML_ERROR_NOT_SUPPORTED if kind == nvml.NVML_CLOCK_VIDEO else nvml.NVML_ERROR_INVALID_ARGUMENT
        )

    def nvmlDeviceGetPowerUsage(self, handle: object) -> int:
        self._enter("nvmlDeviceGetPowerUsage")
        return self._gpu(handle).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: object) -> int:
        self._enter("nvmlDeviceGetEnforcedPowerLimit")
        return self._gpu(handle).power_limit_mw

    def nvmlDeviceGetTemperature(self, handle: object, sensor: int) -> int:
        self._enter("nvmlDeviceGetTemperature")
        gpu = self._gpu(handle)
        nvml = _pynvml()
        if sensor != nvml.NVML_TEMPERATURE_GPU:
            raise nvml.NVMLError(nvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature_c

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object) -> int:
        self._enter("nvmlDeviceGetCurrentClocksEventReasons")
        return self._gpu(handle).reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: object) -> int:
        self._enter("nvmlDeviceGetCurrentClocksThrottleReasons")
        return self._gpu(handle).reasons

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> list[Any]:
        self._enter("nvmlDeviceGetComputeRunningProcesses")
        return self._processes(list(self._gpu(handle).processes))

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: object) -> list[Any]:
        self._enter("nvmlDeviceGetGraphicsRunningProcesses")
        return self._processes(list(self._gpu(handle).graphics_processes))
