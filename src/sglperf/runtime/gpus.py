"""GPUs: what this machine has (or simulates), whether it fits a runner profile, and who may use which.

Nothing here needs a GPU: ``SGLPERF_SIMULATED_GPUS`` describes an inventory, and without NVML or
``nvidia-smi`` the inventory is simply empty.

Indices are NVML's (PCI bus order). CUDA numbers devices the same way only with
``CUDA_DEVICE_ORDER=PCI_BUS_ID``, or on runners whose GPUs are all the same model.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Literal

from filelock import FileLock, Timeout

from sglperf.errors import SglperfError
from sglperf.model.files import GIB, write_text_atomic
from sglperf.model.progress import Progress

if TYPE_CHECKING:
    from sglperf.model.runner_profile import RunnerProfile

SIMULATED_ENV = "SGLPERF_SIMULATED_GPUS"
LOCK_DIR_ENV = "SGLPERF_GPU_LOCK_DIR"
SIMULATED_FORMS = (
    'a JSON list such as [{"name": "NVIDIA RTX A6000", "memory_gib": 48}, ...] '
    'or the short form COUNTxNAME:GIB such as "8xNVIDIA RTX A6000:48"'
)
MEMORY_TOLERANCE = 0.05
NVIDIA_SMI_TIMEOUT_S = 15.0

# "declared": an attached server's GPUs as its operator states them; "unknown": not stated.
Source = Literal["nvml", "nvidia-smi", "simulated", "none", "declared", "unknown"]


@dataclass(frozen=True)
class GPU:
    index: int
    name: str
    memory_gib: float
    uuid: str = ""
    compute_capability: str = ""  # "8.9"; empty where the source does not say (nvidia-smi, a simulation)


@dataclass(frozen=True)
class Inventory:
    gpus: tuple[GPU, ...]
    source: Source

    def __len__(self) -> int:
        return len(self.gpus)

    @property
    def indices(self) -> tuple[int, ...]:
        return tuple(g.index for g in self.gpus)


# --- inventory ---------------------------------------------------------------------------------


def simulation_active() -> bool:
    # An empty value counts as unset, so `SGLPERF_SIMULATED_GPUS= pytest` turns simulation off.
    return bool(os.environ.get(SIMULATED_ENV, "").strip())


def parse_simulated(text: str) -> Inventory:
    """Parse ``SGLPERF_SIMULATED_GPUS``; ValueError names the variable and the accepted forms."""
    text = text.strip()

    def bad(why: str) -> ValueError:
        return ValueError(f"{SIMULATED_ENV}={text!r}: {why}; expected {SIMULATED_FORMS}")

    if text.startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise bad(f"not valid JSON ({exc.msg})") from None
        gpus = []
        for i, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"].strip():
                raise bad(f"item {i} needs a non-empty string 'name'")
            memory = item.get("memory_gib")
            if isinstance(memory, bool) or not isinstance(memory, int | float) or memory <= 0:
                raise bad(f"item {i} needs a positive number 'memory_gib'")
            gpus.append(GPU(i, item["name"].strip(), float(memory), str(item.get("uuid", ""))))
        return Inventory(tuple(gpus), "simulated")

    match = re.fullmatch(r"(\d+)\s*[xX]\s*(.+?)\s*:\s*(\d+(?:\.\d+)?)", text)
    if not match:
        raise bad("not understood")
    count, name, memory = int(match[1]), match[2], float(match[3])
    if memory <= 0:
        raise bad("memory must be positive")
    return Inventory(tuple(GPU(i, name, memory) for i in range(count)), "simulated")


def _cuda_visible(gpus: Sequence[GPU]) -> list[GPU]:
    """Filter by CUDA_VISIBLE_DEVICES (indices or GPU-uuid prefixes), as CUDA would.

    CUDA stops at the first entry it cannot resolve (``-1``, ``MIG-...``, an unknown index), so do we.
    """
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return list(gpus)
    by_index = {g.index: g for g in gpus}
    visible: list[GPU] = []
    for entry in (e.strip() for e in value.split(",")):
        if entry.isdigit() and int(entry) in by_index:
            gpu = by_index[int(entry)]
        elif entry.startswith("GPU-") and (hits := [g for g in gpus if g.uuid.startswith(entry)]):
            gpu = hits[0]
        else:
            break
        if gpu not in visible:
            visible.append(gpu)
    return visible


def import_pynvml() -> ModuleType | None:
    """The NVML binding (nvidia-ml-py), or None when it is not installed; the driver library loads later."""
    try:
        import pynvml  # from the nvidia-ml-py package
    except ImportError:
        return None
    module: ModuleType = pynvml
    return module


def _text(value: str | bytes) -> str:
    # Older nvidia-ml-py releases return bytes.
    return value.decode() if isinstance(value, bytes) else value


def _from_nvml() -> list[GPU] | None:
    nvml = import_pynvml()
    if nvml is None:
        return None
    try:
        nvml.nvmlInit()
    except Exception:  # no driver, or a driver/library mismatch: NVMLError subclasses
        return None
    try:
        gpus = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle).total / GIB
            name, uuid = _text(nvml.nvmlDeviceGetName(handle)), _text(nvml.nvmlDeviceGetUUID(handle))
            gpus.append(GPU(i, name, memory, uuid, _capability(nvml, handle)))
        return gpus
    except Exception:
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _capability(nvml: ModuleType, handle: object) -> str:
    try:
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
    except Exception:  # an old driver or binding: the inventory stands without it
        return ""
    return f"{major}.{minor}"


def _from_nvidia_smi() -> list[GPU] | None:
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name,memory.total,uuid", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    gpus = []
    for line in done.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4:
            continue
        # A name could contain a comma; index, memory and uuid cannot.
        index, name, memory, uuid = parts[0], ", ".join(parts[1:-2]), parts[-2], parts[-1]
        try:
            gpus.append(GPU(int(index), name, float(memory) / 1024, uuid))  # MiB
        except ValueError:
            continue
    return gpus


def visible_gpus() -> Inventory:
    """The GPUs this process may use: simulated, else NVML, else nvidia-smi, else none. Never raises
    on a machine without GPUs (only on a malformed ``SGLPERF_SIMULATED_GPUS``)."""
    if simulation_active():
        # The simulation describes what this process sees; CUDA_VISIBLE_DEVICES is not applied again.
        return parse_simulated(os.environ[SIMULATED_ENV])
    gpus = _from_nvml()
    if gpus is not None:
        return Inventory(tuple(_cuda_visible(gpus)), "nvml")
    gpus = _from_nvidia_smi()
    if gpus is not None:
        return Inventory(tuple(_cuda_visible(gpus)), "nvidia-smi")
    return Inventory((), "none")


# --- runner profile ------------------------------------------------------------------------------


def _normalise_name(name: str) -> str:
    name = " ".join(name.split()).casefold()
    return name.removeprefix("nvidia ")


def match_profile(inv: Inventory, profile: RunnerProfile, tp_size: int) -> list[str]:
    """Why this inventory does not fit the runner profile; an empty list means it fits."""
    problems: list[str] = []
    found = len(inv)
    where = {
        "none": " (no NVML or nvidia-smi here)",
        "simulated": f" (simulated by {SIMULATED_ENV})",
    }.get(inv.source, "")
    if found < tp_size:
        problems.append(f"tp_size {tp_size}: expected at least {tp_size} GPUs, found {found}{where}")
    if found != profile.gpu_count:
        problems.append(f"GPU count: expected {profile.gpu_count} (runner {profile.name}), found {found}{where}")

    names: dict[str, list[int]] = {}
    for gpu in inv.gpus:
        if _normalise_name(gpu.name) != _normalise_name(profile.gpu_name):
            names.setdefault(gpu.name, []).append(gpu.index)
    for name, indices in names.items():
        problems.append(f"GPU name: expected {profile.gpu_name!r}, found {name!r} on GPU {_join(indices)}")

    memory: dict[float, list[int]] = {}
    for gpu in inv.gpus:
        if abs(gpu.memory_gib - profile.memory_gib) > MEMORY_TOLERANCE * profile.memory_gib:
            memory.setdefault(round(gpu.memory_gib, 1), []).append(gpu.index)
    for gib, indices in memory.items():
        problems.append(
            f"GPU memory: expected {profile.memory_gib:g} GiB (±{MEMORY_TOLERANCE:.0%}), "
            f"found {gib:g} GiB on GPU {_join(indices)}"
        )
    return problems


def _join(indices: Iterable[int]) -> str:
    return ",".join(map(str, indices))


# --- allocation across processes -----------------------------------------------------------------


def default_lock_dir() -> Path:
    configured = os.environ.get(LOCK_DIR_ENV)
    if configured:
        return Path(configured)
    # Per user: another user's lock files would not be writable.
    return Path(tempfile.gettempdir()) / f"sglperf-gpu-locks-{os.getuid()}"


@dataclass(frozen=True)
class Holder:
    """What a lease holder wrote beside its lock file."""

    gpu: int
    pid: int | None
    since: float | None

    def describe(self, now: float) -> str:
        if self.pid is None:
            return f"GPU {self.gpu} by an unknown holder"
        held = f" for {now - self.since:.0f} s" if self.since is not None else ""
        return f"GPU {self.gpu} by pid {self.pid}{held}"


@dataclass(eq=False)
class Lease:
    """GPUs held by this process until ``release()`` (idempotent) or the end of a ``with`` block."""

    indices: tuple[int, ...]
    _locks: list[FileLock] = field(repr=False)
    _holder_files: list[Path] = field(repr=False)
    acquired_at: float = field(default_factory=time.time)

    @property
    def cuda_visible_devices(self) -> str:
        return _join(self.indices)

    @property
    def released(self) -> bool:
        return not self._locks

    def release(self) -> None:
        # Holder files go first: a holder file must never name a process that no longer holds the GPU.
        for path in self._holder_files:
            path.unlink(missing_ok=True)
        for lock in self._locks:
            lock.release()
        self._locks.clear()
        self._holder_files.clear()

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class GpuAllocator:
    """Leases sets of GPUs to processes (pytest-xdist workers) through one flock'ed file per GPU.

    The kernel drops a flock when its holder dies, so a crashed worker cannot leak GPUs. A server
    the holder started with subprocess does not inherit the lock (Python descriptors are not
    inheritable): if the holder dies first, its orphaned server may still occupy the GPUs, which
    ``wait_gpu_memory_released`` is there to notice.
    """

    def __init__(
        self,
        gpus: Iterable[int] | Inventory | None = None,
        lock_dir: str | Path | None = None,
        *,
        poll_s: float = 0.2,
        progress_every_s: float = 30.0,
    ) -> None:
        if gpus is None:
            gpus = visible_gpus()
        self.indices: tuple[int, ...] = tuple(sorted(gpus.indices if isinstance(gpus, Inventory) else set(gpus)))
        self.lock_dir = Path(lock_dir) if lock_dir is not None else default_lock_dir()
        self.poll_s = poll_s
        self.progress_every_s = progress_every_s

    def _lock_path(self, gpu: int) -> Path:
        return self.lock_dir / f"gpu-{gpu}.lock"

    def _holder_path(self, gpu: int) -> Path:
        return self.lock_dir / f"gpu-{gpu}.holder"

    def candidate_sets(self, count: int) -> list[tuple[int, ...]]:
        """Sets to try, best first: aligned blocks ({0,1},{2,3}...), then other contiguous runs."""
        present = set(self.indices)
        aligned: list[tuple[int, ...]] = []
        for start in range(0, max(present, default=-1) + 1, count):
            block = tuple(range(start, start + count))
            if present.issuperset(block):
                aligned.append(block)
        others: list[tuple[int, ...]] = []
        for i in range(len(self.indices) - count + 1):
            window = self.indices[i : i + count]
            if window[-1] - window[0] == count - 1 and window not in aligned:
                others.append(window)
        return aligned + others

    def _try_set(self, gpus: Sequence[int]) -> list[FileLock] | None:
        """All of ``gpus`` or none of them."""
        taken: list[FileLock] = []
        for gpu in gpus:
            lock = FileLock(self._lock_path(gpu), thread_local=False)
            try:
                lock.acquire(blocking=False)
            except Timeout:
                for held in taken:
                    held.release()
                return None
            taken.append(lock)
        return taken

    def _try_any(self, count: int) -> tuple[tuple[int, ...], list[FileLock]] | None:
        """Any ``count`` free GPUs, when no contiguous set is free."""
        chosen: list[int] = []
        taken: list[FileLock] = []
        for gpu in self.indices:
            lock = FileLock(self._lock_path(gpu), thread_local=False)
            try:
                lock.acquire(blocking=False)
            except Timeout:
                continue
            chosen.append(gpu)
            taken.append(lock)
            if len(taken) == count:
                return tuple(chosen), taken
        for held in taken:
            held.release()
        return None

    def _attempt(self, count: int) -> Lease | None:
        for gpus in self.candidate_sets(count):
            locks = self._try_set(gpus)
            if locks is not None:
                return self._lease(gpus, locks)
        found = self._try_any(count)
        return self._lease(*found) if found else None

    def _lease(self, gpus: tuple[int, ...], locks: list[FileLock]) -> Lease:
        now = time.time()
        record = json.dumps({"pid": os.getpid(), "since": now, "gpus": list(gpus)})
        files = []
        for gpu in gpus:
            path = self._holder_path(gpu)
            write_text_atomic(path, record, fsync=False)
            files.append(path)
        return Lease(gpus, locks, files, now)

    def holders(self) -> list[Holder]:
        """Who holds which GPU now (GPUs whose lock is free are left out)."""
        busy = []
        for gpu in self.indices:
            locks = self._try_set([gpu])
            if locks is not None:
                locks[0].release()
                continue
            try:
                record = json.loads(self._holder_path(gpu).read_text())
                busy.append(Holder(gpu, int(record["pid"]), float(record["since"])))
            except (OSError, ValueError, KeyError, TypeError):
                # Taken a moment ago, before its holder wrote the record.
                busy.append(Holder(gpu, None, None))
        return busy

    def _describe_holders(self) -> str:
        now = time.time()
        holders = self.holders()
        if not holders:
            return "none held right now"
        return "held: " + "; ".join(h.describe(now) for h in holders)

    def acquire(self, count: int, timeout_s: float, progress: Progress | None = None) -> Lease:
        """Lease ``count`` GPUs, waiting up to ``timeout_s``; TimeoutError names who holds them."""
        if count < 1:
            raise ValueError(f"cannot lease {count} GPUs: count must be >= 1")
        if count > len(self.indices):
            raise ValueError(
                f"cannot lease {count} GPUs: only {len(self.indices)} exist here ({_join(self.indices) or 'none'})"
            )
        self.lock_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        start = time.monotonic()
        next_progress = start
        while True:
            lease = self._attempt(count)
            if lease is not None:
                return lease
            now = time.monotonic()
            waited = now - start
            if waited >= timeout_s:
                raise TimeoutError(
                    f"no {count} free GPUs among {_join(self.indices)} after {waited:.1f} s; "
                    f"{self._describe_holders()} (locks in {self.lock_dir})"
                )
            if progress is not None and now >= next_progress:
                progress(
                    f"waiting {waited:.0f} s (at most {timeout_s:.0f} s) for {count} GPU(s); "
                    f"{self._describe_holders()} (locks in {self.lock_dir})"
                )
                next_progress = now + self.progress_every_s
            time.sleep(min(self.poll_s, max(0.0, timeout_s - waited)))


# --- memory held by processes --------------------------------------------------------------------


class NvmlUnavailable(SglperfError, RuntimeError):
    """NVML cannot be asked (nvidia-ml-py missing, or no driver)."""


def gpu_memory_used_by(pids: Iterable[int], indices: Iterable[int]) -> dict[int, float]:
    """GiB that ``pids`` hold on each GPU in ``indices`` (compute processes, per NVML; NaN: held,
    amount unknown).

    Pass every process of a server (``psutil.Process.children(recursive=True)``, collected while it
    ran): SGLang's TP workers, not its launcher, hold the memory.
    """
    nvml = import_pynvml()
    if nvml is None:
        raise NvmlUnavailable("nvidia-ml-py (pynvml) is not installed")
    wanted = set(pids)
    try:
        nvml.nvmlInit()
    except Exception as exc:
        raise NvmlUnavailable(f"NVML did not initialise: {exc}") from None
    try:
        used: dict[int, float] = {}
        for index in indices:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            mine = [p for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid in wanted]
            # usedGpuMemory is None where the driver cannot tell (some vGPU setups): held, amount unknown.
            if any(p.usedGpuMemory is None for p in mine):
                used[index] = math.nan
            else:
                used[index] = sum(p.usedGpuMemory for p in mine) / GIB
        return used
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


@dataclass(frozen=True)
class ReleaseCheck:
    """Whether GPU memory was released; ``checked`` is False where nothing could be checked."""

    released: bool
    checked: bool
    detail: str


def wait_gpu_memory_released(
    pids: Iterable[int], indices: Iterable[int], deadline_s: float, *, poll_s: float = 0.5
) -> ReleaseCheck:
    """Poll until none of ``pids`` holds memory on ``indices``, for at most ``deadline_s`` seconds.

    With simulated GPUs or without NVML this returns at once with ``released=True, checked=False``.
    """
    pids, indices = list(pids), list(indices)
    if simulation_active():
        return ReleaseCheck(True, False, f"simulated GPUs ({SIMULATED_ENV}): memory release not checked")
    start = time.monotonic()
    while True:
        try:
            used = gpu_memory_used_by(pids, indices)
        except NvmlUnavailable as exc:
            return ReleaseCheck(True, False, f"{exc}: memory release not checked")
        waited = time.monotonic() - start
        held = {i: gib for i, gib in used.items() if gib > 0 or math.isnan(gib)}
        if not held:
            detail = f"pids {_join(pids)} hold no memory on GPU {_join(indices)} after {waited:.1f} s"
            return ReleaseCheck(True, True, detail)
        if waited >= deadline_s:
            where = ", ".join(f"{gib:.2f} GiB on GPU {i}" for i, gib in held.items())
            return ReleaseCheck(False, True, f"after {waited:.1f} s pids {_join(pids)} still hold {where}")
        time.sleep(min(poll_s, max(0.0, deadline_s - waited)))
