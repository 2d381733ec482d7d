"""Sampling NVML around a round: clocks, power, temperature, throttle reasons and foreign processes
on the server's GPUs (`model.gpu_telemetry` says what counts as disturbed).

Readings are cheap (microseconds each), so a background thread takes them every ``interval_s``;
listing processes is slower and a process rarely comes and goes within a second, so processes are
listed at the start of a round, about every second, and at its end.

Ours is this process and every descendant, as in `host_probe`: the server sglperf launched and its
TP workers. A pid NVML lists is foreign only when it names a live process in our pid namespace that
is not ours. NVML inside a container reports the host's pids: when none of the listed pids is
visible here, nothing is counted as foreign and the round carries a note saying so, since a wrong
guess either way (a foreign job ignored, our own server's workers blamed) would mislead.

A reading the card does not support is NaN for the round and said so in its description; one that
fails otherwise, or a check NVML cannot do (no throttle reasons, no process list), becomes a note
on the round. Nothing raised in the thread is lost: it ends the thread's sampling and becomes a note.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType

import psutil

from sglperf.errors import SglperfError
from sglperf.model.gpu_telemetry import (
    COUNTED_MASK,
    COUNTED_REASONS,
    GpuLimits,
    GpuProcess,
    GpuRound,
    GpuSampleSummary,
)

DEFAULT_INTERVAL_S = 0.1
PROCESS_EVERY_S = 1.0
MIB = 1024**2
NAMESPACE_NOTE = "NVML's pids are not in this pid namespace (a container?): foreign GPU processes not checked"


class NvmlUnusable(SglperfError):
    """NVML cannot watch the GPUs here; the message is one line."""


def _text(value: str | bytes) -> str:
    # Older nvidia-ml-py releases return bytes.
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _errors(nvml: ModuleType) -> tuple[type[BaseException], ...]:
    # The binding raises NVMLLibraryMismatchError, not an NVMLError, from the unversioned process
    # listings when the driver lacks their _v3.
    found: list[type[BaseException]] = [nvml.NVMLError]
    mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
    if isinstance(mismatch, type) and issubclass(mismatch, BaseException):
        found.append(mismatch)
    return tuple(found)


def _ours() -> set[int]:
    me = psutil.Process(os.getpid())
    try:
        return {me.pid, *(child.pid for child in me.children(recursive=True))}
    except psutil.Error:
        return {me.pid}


def _process_name(pid: int) -> str:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return ""


@dataclass
class _Gpu:
    """What is known of one GPU, and what this round sampled of it."""

    index: int
    handle: object
    name: str
    sm_clock_max_mhz: float
    power_limit_w: float
    samples: int = 0
    sm: list[float] = field(default_factory=list)
    mem: list[float] = field(default_factory=list)
    power: list[float] = field(default_factory=list)
    temperature: list[float] = field(default_factory=list)
    reasons: list[int] = field(default_factory=list)  # samples whose reasons could be read
    foreign: dict[int, GpuProcess] = field(default_factory=dict)

    def reset(self) -> None:
        self.samples = 0
        for readings in (self.sm, self.mem, self.power, self.temperature, self.reasons):
            readings.clear()
        self.foreign.clear()

    def summary(self) -> GpuSampleSummary:
        read = len(self.reasons)
        active: Counter[str] = Counter()
        for bits in self.reasons:
            active.update(name for bit, name in COUNTED_REASONS.items() if bits & bit)
        return GpuSampleSummary(
            index=self.index,
            name=self.name,
            samples=self.samples,
            sm_clock_mhz=_median(self.sm),
            sm_clock_max_mhz=self.sm_clock_max_mhz,
            mem_clock_mhz=_median(self.mem),
            power_w=_max(self.power),
            power_limit_w=self.power_limit_w,
            temperature_c=_max(self.temperature),
            throttled={name: count / read for name, count in active.items() if count},
            foreign=tuple(self.foreign[pid] for pid in sorted(self.foreign)),
            throttle_share_value=sum(1 for bits in self.reasons if bits & COUNTED_MASK) / read if read else 0.0,
        )


def _median(values: list[float]) -> float:
    known = sorted(v for v in values if not math.isnan(v))
    if not known:
        return math.nan
    middle = len(known) // 2
    return known[middle] if len(known) % 2 else (known[middle - 1] + known[middle]) / 2


def _max(values: list[float]) -> float:
    return max((v for v in values if not math.isnan(v)), default=math.nan)


class NvmlRoundProbe:
    """Samples NVML on the given GPUs in a background thread between start() and stop()."""

    def __init__(
        self, nvml: ModuleType, handles: list[tuple[int, object]], interval_s: float = DEFAULT_INTERVAL_S
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self._nvml = nvml
        self._nvml_errors = _errors(nvml)
        # AttributeError: a binding with neither name for the clock-event reasons.
        self._reason_errors: tuple[type[BaseException], ...] = (*self._nvml_errors, AttributeError)
        self.interval_s = interval_s
        self._reasons_of: Callable[[object], int] = self._event_reasons
        self._problems: dict[str, str] = {}  # what went wrong this round, by where: kept once each
        self._namespace_blind = False
        self._gpus = [
            _Gpu(
                index=index,
                handle=handle,
                name=self._name(index, handle),
                sm_clock_max_mhz=self._static(
                    index, "max SM clock", lambda h: nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_SM), handle
                ),
                power_limit_w=self._static(
                    index, "power limit", lambda h: nvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0, handle
                ),
            )
            for index, handle in handles
        ]
        # Problems met while opening are said once, on the first round, not on every round.
        self._opening_problems = dict(self._problems)
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def indices(self) -> tuple[int, ...]:
        return tuple(gpu.index for gpu in self._gpus)

    # --- readings ---------------------------------------------------------------------------------

    def _problem(self, index: int, what: str, exc: BaseException) -> None:
        self._problems.setdefault(f"{index}:{what}", f"GPU {index}: {what} not read ({_one_line(exc)})")

    def _unsupported(self, exc: BaseException) -> bool:
        return isinstance(exc, getattr(self._nvml, "NVMLError_NotSupported", ()))

    def _static(self, index: int, what: str, read: Callable[[object], float], handle: object) -> float:
        try:
            return float(read(handle))
        except self._nvml_errors as exc:
            if not self._unsupported(exc):
                self._problem(index, what, exc)
            return math.nan

    def _name(self, index: int, handle: object) -> str:
        try:
            return _text(self._nvml.nvmlDeviceGetName(handle))
        except self._nvml_errors as exc:
            self._problem(index, "name", exc)
            return ""

    def _reading(self, gpu: _Gpu, what: str, read: Callable[[object], float]) -> float:
        try:
            return float(read(gpu.handle))
        except self._nvml_errors as exc:
            # Unsupported on this card: NaN, said by the summary's description. Anything else: a note.
            if not self._unsupported(exc):
                self._problem(gpu.index, what, exc)
            return math.nan

    def _event_reasons(self, handle: object) -> int:
        try:
            return int(self._nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
        except (AttributeError, self._nvml.NVMLError_FunctionNotFound):
            # An older binding or driver knows the same bits under their former name.
            self._reasons_of = self._throttle_reasons
            return self._throttle_reasons(handle)

    def _throttle_reasons(self, handle: object) -> int:
        return int(self._nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))

    def _read_reasons(self, gpu: _Gpu) -> int | None:
        try:
            return self._reasons_of(gpu.handle)
        except self._reason_errors as exc:
            self._problems.setdefault(
                f"{gpu.index}:reasons",
                f"GPU {gpu.index}: clock-event reasons not read ({_one_line(exc)}): throttling not checked",
            )
            return None

    def _sample(self) -> None:
        nvml = self._nvml
        for gpu in self._gpus:
            gpu.samples += 1
            gpu.sm.append(self._reading(gpu, "SM clock", lambda h: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)))
            gpu.mem.append(
                self._reading(gpu, "memory clock", lambda h: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM))
            )
            gpu.power.append(self._reading(gpu, "power", lambda h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0))
            gpu.temperature.append(
                self._reading(gpu, "temperature", lambda h: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU))
            )
            reasons = self._read_reasons(gpu)
            if reasons is not None:
                gpu.reasons.append(reasons)

    def _listed(self, gpu: _Gpu, problems: dict[str, str]) -> list[tuple[int, float | None]] | None:
        """(pid, MiB) of every compute and graphics process on the GPU; None when NVML cannot list them."""
        found: list[tuple[int, float | None]] = []
        for kind, listing in (
            ("compute", self._nvml.nvmlDeviceGetComputeRunningProcesses),
            ("graphics", self._nvml.nvmlDeviceGetGraphicsRunningProcesses),
        ):
            try:
                processes = listing(gpu.handle)
            except self._nvml_errors as exc:
                key = f"{gpu.index}:{kind} processes"
                problems.setdefault(
                    key,
                    f"GPU {gpu.index}: {kind} processes not listed ({_one_line(exc)}): foreign processes not checked",
                )
                return None
            for p in processes:
                used = p.usedGpuMemory
                found.append((int(p.pid), used / MIB if used is not None else None))
        return found

    def _foreign_now(self, problems: dict[str, str]) -> tuple[dict[int, list[GpuProcess]], bool]:
        """GPU index -> foreign processes on it now, and whether NVML's pids are all invisible here
        (then nothing is foreign: they cannot be told apart)."""
        listed = {gpu.index: self._listed(gpu, problems) for gpu in self._gpus}
        pids = {pid for processes in listed.values() if processes for pid, _ in processes}
        visible = {pid for pid in pids if psutil.pid_exists(pid)}
        if pids and not visible:
            return {}, True
        foreign = visible - _ours()
        return {
            index: [GpuProcess(pid, _process_name(pid), mib) for pid, mib in processes if pid in foreign]
            for index, processes in listed.items()
            if processes
        }, False

    def _list_processes(self) -> None:
        foreign, blind = self._foreign_now(self._problems)
        self._namespace_blind |= blind
        for gpu in self._gpus:
            for process in foreign.get(gpu.index, ()):
                seen = gpu.foreign.get(process.pid)
                if seen is None or (process.used_mib or 0.0) > (seen.used_mib or 0.0):
                    gpu.foreign[process.pid] = process

    # --- the round --------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            next_listing = time.monotonic()
            while True:
                self._sample()
                if time.monotonic() >= next_listing:
                    self._list_processes()
                    next_listing = time.monotonic() + PROCESS_EVERY_S
                if self._stop_event.wait(self.interval_s):
                    return
        except Exception as exc:  # a bug or an unexpected failure: said on the round, never lost
            self._problems.setdefault("thread", f"GPU sampling stopped early: {type(exc).__name__}: {_one_line(exc)}")

    def start(self) -> None:
        """Begin sampling a round."""
        if self._closed:
            raise RuntimeError("NvmlRoundProbe.start() after close()")
        if self._thread is not None:
            raise RuntimeError("NvmlRoundProbe.start() while a round is being sampled")
        for gpu in self._gpus:
            gpu.reset()
        self._problems = self._opening_problems
        self._opening_problems = {}
        self._namespace_blind = False
        self._stop_event.clear()
        self._thread = threading.Thread(target=self._run, name="sglperf-gpu-telemetry", daemon=True)
        self._thread.start()

    def _join(self) -> None:
        if self._thread is not None:
            self._stop_event.set()
            self._thread.join()
            self._thread = None

    def stop(self) -> GpuRound:
        """End the round: one last sample and process listing, then the round's summary."""
        if self._thread is None:
            raise RuntimeError("NvmlRoundProbe.stop() without start()")
        self._join()
        try:
            self._sample()
            self._list_processes()
        except Exception as exc:
            self._problems.setdefault(
                "stop", f"GPU sampling at the end of the round failed: {type(exc).__name__}: {_one_line(exc)}"
            )
        notes = list(self._problems.values())
        if self._namespace_blind:
            notes.insert(0, NAMESPACE_NOTE)
        self._problems = {}
        return GpuRound(tuple(gpu.summary() for gpu in self._gpus), "; ".join(notes) or None)

    def quiet(self, limits: GpuLimits | None = None) -> bool:
        """One immediate look: no counted throttle reason active and no foreign process, as far as
        ``limits`` checks them (for waiting after a dropped round)."""
        limits = limits if limits is not None else GpuLimits()
        # Read-only: safe while a round is sampled, and leaves the round's readings alone.
        if limits.max_throttle < 1.0:
            for gpu in self._gpus:
                try:
                    reasons = self._reasons_of(gpu.handle)
                except self._reason_errors:
                    continue  # not readable: the round's note says so, waiting would not help
                if reasons & COUNTED_MASK:
                    return False
        if limits.foreign_processes:
            foreign, _ = self._foreign_now({})  # problems are the round's to report, not this look's
            if any(limits.counts_as_foreign(p) for processes in foreign.values() for p in processes):
                return False
        return True

    def close(self) -> None:
        """Stop sampling and shut NVML down; later calls do nothing."""
        if self._closed:
            return
        self._closed = True
        self._join()
        try:
            self._nvml.nvmlShutdown()
        except self._nvml_errors:
            pass  # nothing left to release


def open_probe(uuids: Sequence[str] | None, interval_s: float = DEFAULT_INTERVAL_S) -> NvmlRoundProbe:
    """nvmlInit, and a probe on the GPUs with these UUIDs (None: every GPU). NvmlUnusable, with one line,
    when NVML cannot watch them: the binding not installed, no driver, a UUID not found, any NVML error."""
    from sglperf.runtime.gpus import import_pynvml

    nvml = import_pynvml()
    if nvml is None:
        raise NvmlUnusable("GPU telemetry unavailable: nvidia-ml-py (pynvml) is not installed")
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError subclasses, and whatever a broken driver install raises
        hint = " (no NVIDIA driver on this machine?)" if isinstance(exc, nvml.NVMLError_LibraryNotFound) else ""
        raise NvmlUnusable(f"GPU telemetry unavailable: NVML did not initialise: {_one_line(exc)}{hint}") from None
    try:
        handles = _handles(nvml, uuids)
        return NvmlRoundProbe(nvml, handles, interval_s)
    except BaseException:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
        raise


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _handles(nvml: ModuleType, uuids: Sequence[str] | None) -> list[tuple[int, object]]:
    errors = _errors(nvml)
    try:
        found: dict[str, tuple[int, object]] = {}
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            found[_text(nvml.nvmlDeviceGetUUID(handle))] = (index, handle)
    except errors as exc:
        raise NvmlUnusable(f"GPU telemetry unavailable: NVML could not list the GPUs: {_one_line(exc)}") from None
    if uuids is None:
        if not found:
            raise NvmlUnusable("GPU telemetry unavailable: NVML sees no GPU")
        return sorted(found.values(), key=lambda item: item[0])
    if not uuids:
        raise NvmlUnusable("GPU telemetry unavailable: no GPU given to watch")
    missing = [uuid for uuid in uuids if uuid not in found]
    if missing:
        raise NvmlUnusable(
            f"GPU telemetry unavailable: NVML has no GPU {', '.join(missing)} (it has {', '.join(found) or 'none'})"
        )
    return [found[uuid] for uuid in dict.fromkeys(uuids)]
