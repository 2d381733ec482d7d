"""Preflight: SGLang's own argument resolution, run on the CPU with the runner's GPUs simulated.

A worker process under the chosen interpreter imports the installed SGLang once (seconds), then
resolves each variant's argv in milliseconds. Results are cached on disk per (interpreter, SGLang
version, argv, environment, runner profile, model config), so a warm deployment check does not
start the worker at all.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from filelock import FileLock

from sglperf.errors import SglperfError
from sglperf.model.files import os_problem, read_input, writable_folder_problem, write_text_atomic
from sglperf.model.process_exit import describe_exit
from sglperf.model.progress import Progress, say_once, silent
from sglperf.model.resolution import LogLine, ModelFacts, Resolution, SGLangError, Write
from sglperf.model.runner_profile import RunnerProfile
from sglperf.sglang import cpu_features, envs
from sglperf.sglang.argv import Option, ParserInfo, Release
from sglperf.sglang.processes import kill_group, run_bounded

T = TypeVar("T")
PROBE = Path(__file__).with_name("probe.py")
# Log lines caused by the simulation itself, not by the deployment: no NVML library in the
# resolution environment, and a model folder holding only config.json.
SIMULATION_ARTEFACTS = ("Failed to import pynvml", "generation_config.json")
STARTUP_TIMEOUT_S = 300.0
INTERPRETER_TIMEOUT_S = 60.0
JOB_TIMEOUT_S = 120.0


class PreflightError(SglperfError, RuntimeError):
    """The preflight could not ask SGLang at all (no interpreter, no SGLang, worker crashed)."""


_REQUIRED = object()


def _typed(record: dict[str, Any], key: str, kinds: tuple[type, ...], default: Any = _REQUIRED) -> Any:
    """``record[key]`` checked against ``kinds`` (a bool is not an int here), or ``default`` when the key
    is absent (entries written before the key existed). KeyError/TypeError when it is not that."""
    if key not in record:
        if default is _REQUIRED:
            raise KeyError(key)
        return default
    value = record[key]
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        raise TypeError(f"{key}: {value!r} is not {' or '.join(k.__name__ for k in kinds)}")
    return value


def model_facts_from_probe(raw: Any) -> ModelFacts | None:
    """The worker's ``model`` record (what SGLang's model class builds), or None when absent.

    KeyError/TypeError when it is not such a record (a damaged cache entry)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise TypeError(f"model: {type(raw).__name__}")
    optional_str = (str, type(None))
    return ModelFacts(
        architecture=_typed(raw, "architecture", (str,)),
        vision_tower=_typed(raw, "vision_tower", optional_str),
        moe_layers=_typed(raw, "moe_layers", (int,)),
        param_bytes_per_rank=_typed(raw, "param_bytes_per_rank", (int,)),
        vision_param_bytes_per_rank=_typed(raw, "vision_param_bytes_per_rank", (int,)),
        draft_architecture=_typed(raw, "draft_architecture", optional_str, None),
        draft_param_bytes_per_rank=_typed(raw, "draft_param_bytes_per_rank", (int,), 0),
        seconds=float(_typed(raw, "seconds", (int, float), 0.0)),
        draft_error=_typed(raw, "draft_error", optional_str, None),
    )


def _write(raw: dict[str, Any]) -> Write:
    fields: dict[str, Any] = {k: raw[k] for k in Write.__dataclass_fields__ if k in raw}
    if "conditions" in fields:
        fields["conditions"] = tuple(fields["conditions"])
    return Write(**fields)


def resolution_from_probe(argv: Sequence[str], env: dict[str, str], raw: dict[str, Any], cached: bool) -> Resolution:
    """The worker's JSON answer for one variant, as a record; simulation artefacts dropped.

    KeyError/TypeError when ``raw`` is not such an answer (a damaged cache entry)."""
    error = raw.get("error")
    effective = raw.get("effective")
    if not isinstance(error, dict) and not isinstance(effective, dict):
        raise TypeError("neither effective args nor SGLang's error")
    model_error = raw.get("model_error")
    if model_error is not None and not isinstance(model_error, str):
        raise TypeError(f"model_error: {type(model_error).__name__}")
    return Resolution(
        argv=tuple(argv),
        env=dict(env),
        effective=effective,
        logs=tuple(
            LogLine(**line) for line in raw["logs"] if not any(a in line["message"] for a in SIMULATION_ARTEFACTS)
        ),
        writes=tuple(_write(w) for w in raw.get("writes", [])),
        error=SGLangError(error["type"], error["message"]) if error else None,
        seconds=raw.get("seconds", 0.0),
        cached=cached,
        model=model_facts_from_probe(raw.get("model")),
        model_error=model_error,
    )


def _digest(payload: Any) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:24]


def installed_sglang(python: str) -> tuple[str, float]:
    """(version, install time) of SGLang under ``python``, without importing SGLang."""
    if not Path(python).exists():
        raise PreflightError(
            f"interpreter {python} does not exist; pass the Python of your SGLang environment "
            "(--sglang-python / --python) or a release to use (--sglang-version / --sglang)"
        )
    code = (
        "import importlib.metadata as m, json, os\n"
        "try:\n d = m.distribution('sglang'); print(json.dumps([d.version, os.path.getmtime(d._path)]))\n"
        "except m.PackageNotFoundError: print('null')"
    )
    what = f"interpreter {python}"
    try:
        proc = run_bounded([python, "-c", code], INTERPRETER_TIMEOUT_S)
    except OSError as exc:  # not executable, not a program at all
        raise PreflightError(f"{what} cannot be run ({exc.strerror or exc}); pass a Python interpreter") from None
    except subprocess.TimeoutExpired:
        raise PreflightError(
            f"{what} did not answer within {INTERPRETER_TIMEOUT_S:.0f} s; is it a Python interpreter?"
        ) from None
    try:
        found = (
            json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 and proc.stdout.strip() else None
        )
    except json.JSONDecodeError:
        raise PreflightError(f"{what} is not a Python interpreter (it printed {proc.stdout.strip()[:80]!r})") from None
    if proc.returncode != 0 and "import" not in proc.stderr:
        raise PreflightError(
            f"{what} is not a Python interpreter (exit {proc.returncode}: "
            f"{(proc.stderr or proc.stdout).strip()[:120]!r})"
        )
    if not isinstance(found, list) or len(found) != 2:
        raise PreflightError(
            f"no SGLang installed for {python}. Either let sglperf build an environment for a release "
            "(`sglperf env build 0.5.23`, then `--sglang-version 0.5.23`), or install it "
            f"there: `{python} -m pip install --no-deps sglang==VERSION` plus its light requirements "
            "(see docs/environments.md)."
        )
    return found[0], found[1]


class _Worker:
    """One probe process: import once, resolve many."""

    def __init__(self, python: str, profile: RunnerProfile, never_import: Sequence[str]):
        # The probe's own temporary folder, its TMPDIR: what it and SGLang make there (the simulated
        # nvidia-smi, say) goes when close() removes it, even when the probe had to be killed.
        self._scratch = tempfile.mkdtemp(prefix="sglperf-probe-")
        # Kept open for the worker's lifetime and read on failure; close() removes it with the folder.
        self._stderr = open(os.path.join(self._scratch, "stderr.log"), "w+b")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [python, str(PROBE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
            start_new_session=True,
            env={**os.environ, "TMPDIR": self._scratch},
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._asked = False  # a question is out: the probe is busy, and will not read stdin for a while
        threading.Thread(target=self._pump, daemon=True).start()
        atexit.register(self.close)
        self.hello = self.ask(
            {"profile": profile.as_probe_profile(), "never_import": list(never_import)},
            STARTUP_TIMEOUT_S,
            "importing SGLang",
        )

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def ask(self, payload: dict[str, Any], timeout: float, doing: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self._asked = True
        try:
            self.proc.stdin.write(json.dumps(payload) + "\n")
            self.proc.stdin.flush()
            line = self._lines.get(timeout=timeout)
            self._asked = False
        except BrokenPipeError:
            line = None
        except queue.Empty:
            tail = self.stderr_tail()
            self.close()
            raise PreflightError(
                f"the SGLang probe did not answer within {timeout:.0f} s while {doing}; its output ends with:\n{tail}"
            ) from None
        if line is None:  # its stdout closed: it ended
            try:
                code: int | None = self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                code = None
            ended = "closed its output" if code is None else describe_exit(code)
            if code == -signal.SIGILL:  # the instruction sets are what the reader needs next
                ended += f"; this CPU: {cpu_features.cpu_kind()}"
            tail = self.stderr_tail()
            self.close()
            raise PreflightError(f"the SGLang probe ended while {doing}: {ended}; its output ends with:\n{tail}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def stderr_tail(self, lines: int = 25) -> str:
        try:
            text = Path(self._stderr.name).read_text(errors="replace")
        except OSError:
            text = ""
        return "\n".join(text.splitlines()[-lines:]) or "(no output)"

    def close(self) -> None:
        """End the probe: an idle one by closing its input; a busy one (an import or a question still
        running: Ctrl-C, a timeout) is killed at once rather than waited for."""
        if self.proc.poll() is None and self._asked:
            self.proc.kill()
            self.proc.wait()
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        kill_group(self.proc.pid)  # anything it started (it leads its own session)
        self._stderr.close()
        shutil.rmtree(self._scratch, ignore_errors=True)


class WorkerPool:
    """Probe workers shared by the resolvers of one command: one SGLang import per interpreter and GPU model,
    however many deployments ask it (each job carries its runner's profile, and the worker simulates that).

    Runners of another GPU model (name, compute capability) or another device get a worker of their own:
    SGLang computes some settings from the GPU while it is imported (whether DeepGEMM's JIT is on, from the
    compute capability), and those would carry over from the first runner to the next."""

    def __init__(self) -> None:
        self._workers: dict[tuple[Any, ...], _Worker] = {}

    @staticmethod
    def _key(python: str, profile: RunnerProfile, never_import: Sequence[str]) -> tuple[Any, ...]:
        return (
            os.path.realpath(python),
            profile.device,
            profile.gpu_name,
            profile.compute_capability,
            tuple(never_import),
        )

    def worker(self, python: str, profile: RunnerProfile, never_import: Sequence[str]) -> tuple[_Worker, bool]:
        """The worker for this interpreter and runner, and whether it was started now."""
        key = self._key(python, profile, never_import)
        known = self._workers.get(key)
        if known is not None and known.proc.poll() is None:
            return known, False
        self._workers[key] = _Worker(python, profile, never_import)
        return self._workers[key], True

    def close(self) -> None:
        for worker in self._workers.values():
            worker.close()
        self._workers.clear()


class Resolver:
    """Resolves argv lists with one SGLang installation under one simulated runner profile."""

    def __init__(
        self,
        python: str,
        profile: RunnerProfile,
        cache_dir: Path | None = None,
        progress: Progress = silent,
        pool: WorkerPool | None = None,
    ):
        self.python = python
        self._pool = pool
        self.profile = profile
        self.version, installed_at = installed_sglang(python)
        self.cache_dir = (
            cache_dir
            if cache_dir is not None
            else Path(os.environ.get("SGLPERF_PREFLIGHT_CACHE", envs.home() / "preflight"))
        )
        # Never imported on a CPU that cannot run SGLang's CPU kernel: the import would kill the probe.
        self._never_import = [cpu_features.KERNEL_MODULE] if cpu_features.cpu_kernel_problem() else []
        self._key_base = {
            "never_import": self._never_import,
            "python": os.path.realpath(python),
            "sglang": self.version,
            "installed_at": installed_at,
            "probe": hashlib.sha256(PROBE.read_bytes()).hexdigest(),
            "profile": profile.as_probe_profile(),
        }
        self._worker: _Worker | None = None
        self._release: Release | None = None
        self._progress = progress
        self._said_discarded = False
        self._cache_problem = writable_folder_problem(self.cache_dir)
        if self._cache_problem:
            say_once(progress, f"preflight cache not used ({self._cache_problem}): every variant is resolved afresh")

    def _cached(self, key: str, parse: Callable[[dict[str, Any]], T]) -> T | None:
        """A cache entry parsed into its record, or None. An entry that is not what this code wrote
        (damaged, truncated, edited by hand) is discarded and recomputed, and said once per run."""
        if self._cache_problem:
            return None
        path = self.cache_dir / f"{key}.json"
        try:
            raw = json.loads(read_input(path).decode("utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            self._discard(path, f"unreadable ({type(exc).__name__})")
            return None
        try:
            if not isinstance(raw, dict):
                raise TypeError(type(raw).__name__)
            return parse(raw)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            self._discard(path, f"not a preflight record ({type(exc).__name__}: {exc})")
            return None

    def _cached_resolution(self, key: str, argv: Sequence[str], env: dict[str, str]) -> Resolution | None:
        return self._cached(key, lambda raw: resolution_from_probe(argv, env, raw, cached=True))

    def _discard(self, path: Path, why: str) -> None:
        """Recompute a damaged entry; a file this code wrote is replaced, anything else (a folder, a
        device) is left where it is and that entry is simply not cached."""
        if not self._said_discarded:
            self._progress(f"preflight cache entry {path} is {why}: recomputing it (and any other damaged entry)")
            self._said_discarded = True
        with contextlib.suppress(OSError):
            if path.is_file() and not path.is_symlink():
                path.unlink()

    def _store(self, key: str, payload: dict[str, Any]) -> None:
        if self._cache_problem:
            return
        path = self.cache_dir / f"{key}.json"
        try:
            write_text_atomic(path, json.dumps(payload), fsync=False)
        except OSError as exc:
            say_once(self._progress, f"preflight cache entry {path} not written ({os_problem(exc)}): not cached")

    def _ensure_worker(self) -> _Worker:
        if self._worker is None:
            runner = self.profile.gpu_name if self.profile.device == "cuda" else "a CPU runner"
            if self._pool is not None:
                worker, started = self._pool.worker(self.python, self.profile, self._never_import)
                if not started:
                    self._worker = worker
                    return worker
                self._progress(f"importing SGLang {self.version} for {runner} (shared by its deployments)")
            else:
                self._progress(f"importing SGLang {self.version} for {runner}")
                worker = _Worker(self.python, self.profile, self._never_import)
            kept_out = worker.hello.get("kept_from_import") or []
            if kept_out:
                say_once(
                    self._progress,
                    f"preflight: {', '.join(kept_out)} stubbed, not imported: {cpu_features.cpu_kernel_problem()}",
                )
            error = worker.hello.get("error")
            if error:
                tail = worker.stderr_tail()
                worker.close()
                if error["type"] == "SGLangNotInstalled":
                    raise PreflightError(error["message"])
                raise PreflightError(
                    f"SGLang {self.version} under {self.python} could not be imported for "
                    f"preflight: {error['type']}: {error['message']}\n{error.get('traceback', '')}\n{tail}"
                )
            self._worker = worker
        return self._worker

    def release(self) -> Release:
        if self._release is None:
            key = _digest({**self._key_base, "what": "release"})
            release = self._cached(key, self._release_from)
            if release is not None and release.version != self.version:
                # Well formed, but another release's: never trusted (the key should have prevented it).
                self._discard(self.cache_dir / f"{key}.json", f"for SGLang {release.version}, not {self.version}")
                release = None
            if release is None:
                hello = self._ensure_worker().hello
                release = self._release_from(hello)
                self._store(key, {k: v for k, v in hello.items() if k != "import_logs"})
            self._release = release
        return self._release

    def _release_from(self, hello: dict[str, Any]) -> Release:
        """The worker's first answer (or its cached copy) as a record; KeyError/TypeError if malformed."""
        options = {
            flag: Option(
                dest=o["dest"],
                choices=tuple(o["choices"]) if o["choices"] else None,
                default=o["default"],
                takes_value=o["takes_value"],
                deprecated=o["deprecated"],
                help=o["help"],
                replacement=_typed(o, "replacement", (str, type(None)), None),
                deprecation_message=_typed(o, "deprecation_message", (str, type(None)), None),
            )
            for flag, o in hello["parser"].items()
        }
        lmo = hello.get("language_model_only_architectures")
        return Release(
            self.python,
            str(hello["sglang_version"]),
            ParserInfo(str(hello["sglang_version"]), options, tuple(lmo) if lmo else None),
            tuple(hello.get("stubbed_modules", ())),
        )

    def resolve(self, jobs: Sequence[tuple[Sequence[str], dict[str, str]]], salt: str = "") -> list[Resolution]:
        """Resolve each (argv, env); ``salt`` adds what argv does not show (e.g. the config digest)."""
        keys = [_digest({**self._key_base, "argv": list(argv), "env": env, "salt": salt}) for argv, env in jobs]
        results: list[Resolution | None] = []
        for key, (argv, env) in zip(keys, jobs):
            results.append(self._cached_resolution(key, argv, env))
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:
            # One lock per cache folder: parallel pytest workers wait instead of importing SGLang twice.
            with self._cache_lock(keys[missing[0]]):
                for i in missing:
                    argv, env = jobs[i]
                    found = self._cached_resolution(keys[i], argv, env)
                    if found is None:
                        raw = self._ensure_worker().ask(
                            {
                                "id": i,
                                "argv": list(argv),
                                "env": env,
                                "build_model": True,
                                "profile": self.profile.as_probe_profile(),
                            },
                            JOB_TIMEOUT_S,
                            f"resolving {' '.join(argv)}",
                        )
                        self._store(keys[i], raw)
                        found = resolution_from_probe(argv, env, raw, cached=False)
                    results[i] = found
        return [r for r in results if r is not None]

    def _cache_lock(self, key: str) -> contextlib.AbstractContextManager[object]:
        if self._cache_problem:
            return contextlib.nullcontext()
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.cache_dir / f"{key}.lock"))

    def close(self) -> None:
        """End this resolver's worker; a pooled one is the pool's to end."""
        if self._worker is not None and self._pool is None:
            self._worker.close()
        self._worker = None
