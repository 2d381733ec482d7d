"""Runs inside the *target* interpreter (the one with SGLang installed), never imported by sglperf.

It simulates the runner's GPUs, stubs GPU-only modules that cannot load here, then asks the
installed SGLang itself: what does your argument parser accept, and what do you resolve these
argv lists to? Standard library only, because it runs in SGLang's environment, not ours.

Protocol (JSON lines): the first stdin line is ``{"profile": {...}}``, answered by a description
of the release (version, parser options) or an error; every further line is a job
``{"id", "argv", "env"}``, answered by its resolution. EOF ends the worker.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.abc
import importlib.machinery
import importlib.metadata
import io
import json
import linecache
import logging
import math
import os
import stat
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

# GPU kernel packages, each stubbed only if importing it fails (as SGLang's own CPU tests do with
# sgl_kernel). flashinfer is stubbed because SGLang picks its default attention backend by whether
# flashinfer is importable, as it is on every GPU runner. Stub nothing else: transformers probes
# optional packages such as flash_attn by spec and breaks on a stub.
GPU_ONLY_MODULES = ("sgl_kernel", "flashinfer")


def _stub_gpu_only_modules() -> list[str]:
    stubbed = []
    for name in GPU_ONLY_MODULES:
        try:
            __import__(name)
        except Exception:  # ImportError, OSError (missing libcuda), RuntimeError...
            for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
                del sys.modules[key]
            stubbed.append(name)
    if not stubbed:
        return stubbed

    class _Loader(importlib.abc.Loader):
        def create_module(self, spec: Any) -> None:
            return None

        def exec_module(self, module: Any) -> None:
            from unittest.mock import MagicMock

            module.__getattr__ = lambda attr: MagicMock(name=f"{module.__name__}.{attr}")

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
            if fullname.split(".", maxsplit=1)[0] in stubbed:
                return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)
            return None

    sys.meta_path.insert(0, _Finder())
    return stubbed


def _fake_nvidia_smi(profile: dict[str, Any]) -> str:
    """A stand-in `nvidia-smi` answering the --query-gpu forms SGLang uses."""
    folder = tempfile.mkdtemp(prefix="sglperf-smi-")
    mib = int(profile["memory_gib"] * 1024)
    values = {
        "name": profile["gpu_name"],
        "memory.total": f"{mib}",
        "memory.free": f"{mib}",
        "memory.used": "0",
        "compute_cap": profile["compute_capability"],
        "driver_version": "simulated",
    }
    script = f"""#!{sys.executable}
import sys
values = {values!r}
count = {profile["gpu_count"]}
args = sys.argv[1:]
query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
if query is None:
    print("sglperf simulated nvidia-smi: " + str(count) + " x " + values["name"])
    sys.exit(0)
units = not any("nounits" in a for a in args)
for i in range(count):
    row = []
    for field in query.split(","):
        field = field.strip()
        value = str(i) if field == "index" else values.get(field, "N/A")
        if units and field.startswith("memory."):
            value += " MiB"
        row.append(value)
    print(", ".join(row))
"""
    path = os.path.join(folder, "nvidia-smi")
    with open(path, "w") as fh:
        fh.write(script)
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
    return folder


def _simulate_gpus(profile: dict[str, Any]) -> None:
    """Make torch report the runner's GPUs; resolution only reads these properties."""
    import torch

    count = profile["gpu_count"]
    major, minor = (int(p) for p in profile["compute_capability"].split("."))
    total = int(profile["memory_gib"] * 1024**3)
    props = SimpleNamespace(
        name=profile["gpu_name"],
        total_memory=total,
        major=major,
        minor=minor,
        multi_processor_count=profile.get("sm_count", 84),
        is_integrated=False,
        L2_cache_size=6 * 1024**2,
        uuid="simulated",
        gcnArchName="",
    )
    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: count
    cuda.current_device = lambda: 0
    cuda.get_device_name = lambda device=None: profile["gpu_name"]
    cuda.get_device_capability = lambda device=None: (major, minor)
    cuda.get_device_properties = lambda device=None: props
    cuda.mem_get_info = lambda device=None: (total, total)
    cuda.set_device = lambda device: None
    cuda.synchronize = lambda device=None: None
    cuda.empty_cache = lambda: None
    cuda.is_bf16_supported = lambda *a, **k: major >= 8
    if torch.version.cuda is None:
        torch.version.cuda = "12.8"
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(count))
    os.environ["PATH"] = _fake_nvidia_smi(profile) + os.pathsep + os.environ.get("PATH", "")


def _jsonable(value: Any, depth: int = 0) -> Any:
    if depth > 12:
        return repr(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v, depth + 1) for v in value]
    if hasattr(value, "value") and type(value).__module__ != "builtins" and hasattr(type(value), "__members__"):
        return _jsonable(value.value, depth + 1)  # Enum
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}
    fields = getattr(type(value), "__struct_fields__", None)  # msgspec.Struct
    if fields is not None:
        return {name: _jsonable(getattr(value, name), depth + 1) for name in fields}
    return repr(value)


def _describe_parser(server_args_cls: Any) -> dict[str, Any]:
    parser = argparse.ArgumentParser(add_help=False)
    server_args_cls.add_cli_args(parser)
    options = {}
    for action in parser._actions:
        kind = type(action).__name__
        help_text = action.help if isinstance(action.help, str) else ""
        record = {
            "dest": action.dest,
            "action": kind,
            "choices": _jsonable(list(action.choices)) if action.choices else None,
            "default": _jsonable(action.default),
            "takes_value": action.nargs != 0,
            "deprecated": "Deprecated" in kind or "deprecated" in help_text.lower()[:200],
            "help": help_text[:400],
        }
        for opt in action.option_strings:
            options[opt] = record
    return options


def _comment_above(filename: str, lineno: int) -> str:
    """The nearest `# ...` comment just above a line: SGLang labels its auto-disable rules so."""
    for ln in range(lineno - 1, max(lineno - 8, 0), -1):
        text = linecache.getline(filename, ln).strip()
        if text.startswith("#"):
            return text.lstrip("# ").strip()
    return ""


class _WriteTracer:
    """Records which function and line changed a field during resolution (dataclass releases).

    Releases that resolve with declared overrides (0.5.19+) keep that record themselves.
    """

    def __init__(self, cls: Any) -> None:
        self.active = False
        self.writes: list[dict[str, Any]] = []
        names = {f.name for f in dataclasses.fields(cls)}
        original = cls.__setattr__
        tracer = self

        def traced(obj: Any, name: str, value: Any) -> None:
            if tracer.active and name in names and name in obj.__dict__:
                old = obj.__dict__[name]
                frame = sys._getframe(1)
                code = frame.f_code
                if code.co_name != "__init__":
                    try:
                        changed = not (old is value or bool(old == value))
                    except Exception:
                        changed = True
                    tracer.writes.append(
                        {
                            "field": name,
                            "changed": changed,
                            "old": _jsonable(old),
                            "new": _jsonable(value),
                            "rule": code.co_name,
                            "where": f"{os.path.basename(code.co_filename)}:{frame.f_lineno}",
                            "code": linecache.getline(code.co_filename, frame.f_lineno).strip(),
                            "comment": _comment_above(code.co_filename, frame.f_lineno),
                        }
                    )
            original(obj, name, value)

        cls.__setattr__ = traced


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:
            message = str(record.msg)
        self.lines.append({"level": record.levelname, "logger": record.name, "message": message})


@contextlib.contextmanager
def _job_environment(env: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _resolve(module: Any, argv: list[str], tracer: _WriteTracer | None, capture: _Capture) -> dict[str, Any]:
    server_args = module.prepare_server_args(list(argv))
    if hasattr(server_args, "resolve_once"):
        server_args.resolve_once()
    if hasattr(server_args, "resolved_dict"):
        effective = server_args.resolved_dict()
    elif dataclasses.is_dataclass(server_args):
        effective = {f.name: getattr(server_args, f.name) for f in dataclasses.fields(server_args)}
    else:
        effective = dict(vars(server_args))
    writes = list(tracer.writes) if tracer else []
    for source, fields in getattr(server_args, "_resolved_overrides", None) or []:
        for name, value in fields.items():
            writes.append(
                {
                    "field": name,
                    "changed": True,
                    "old": None,
                    "new": _jsonable(value),
                    "rule": source,
                    "where": "",
                    "code": "",
                    "comment": "",
                }
            )
    return {"effective": _jsonable(effective), "writes": writes}


def _resolve_job(module: Any, job: dict[str, Any], tracer: _WriteTracer | None, capture: _Capture) -> dict[str, Any]:
    capture.lines = []
    if tracer:
        tracer.writes = []
    result = {"id": job.get("id"), "argv": job["argv"]}
    printed = io.StringIO()
    t0 = time.perf_counter()
    try:
        with (
            _job_environment(job.get("env", {})),
            contextlib.redirect_stdout(printed),
            contextlib.redirect_stderr(printed),
        ):
            if tracer:
                tracer.active = True
            result.update(_resolve(module, job["argv"], tracer, capture))
    except SystemExit as exc:  # argparse: unknown flag or bad choice; its last line says which
        lines = [ln for ln in printed.getvalue().splitlines() if "error:" in ln]
        result["error"] = {"type": "ArgumentError", "message": lines[-1] if lines else f"exit {exc}"}
    except BaseException as exc:
        result["error"] = {"type": type(exc).__name__, "message": str(exc), "traceback": traceback.format_exc()[-3000:]}
    finally:
        if tracer:
            tracer.active = False
    result["seconds"] = round(time.perf_counter() - t0, 4)
    result["logs"] = capture.lines
    result["printed"] = printed.getvalue()[-4000:]
    return result


def _start(profile: dict[str, Any], capture: _Capture) -> tuple[dict[str, Any], Any]:
    """Import SGLang under the simulated runner; the first answer describes the release."""
    ready: dict[str, Any] = {"python": sys.executable}
    try:
        ready["sglang_version"] = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        ready["error"] = {"type": "SGLangNotInstalled", "message": f"no 'sglang' package in {sys.executable}"}
        return ready, None
    started = time.perf_counter()
    try:
        ready["stubbed_modules"] = _stub_gpu_only_modules()
        _simulate_gpus(profile)
        module = importlib.import_module("sglang.srt.server_args")
        cls = module.ServerArgs
        ready["parser"] = _describe_parser(cls)
        ready["language_model_only_architectures"] = _jsonable(getattr(cls, "LANGUAGE_MODEL_ONLY_ARCHITECTURES", None))
    except Exception as exc:
        ready["error"] = {"type": type(exc).__name__, "message": str(exc), "traceback": traceback.format_exc()[-4000:]}
        return ready, None
    ready["import_seconds"] = round(time.perf_counter() - started, 3)
    ready["import_logs"] = capture.lines
    return ready, module


def main() -> int:
    # Answers go to the original stdout; anything SGLang prints (even from C) goes to stderr.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def answer(payload: dict[str, Any]) -> None:
        answers.write(json.dumps(payload) + "\n")
        answers.flush()

    capture = _Capture()
    original_basic_config = logging.basicConfig

    def basic_config_keeping_capture(*args: Any, **kwargs: Any) -> None:
        original_basic_config(*args, **kwargs)
        logging.getLogger().addHandler(capture)

    logging.basicConfig = basic_config_keeping_capture
    logging.getLogger().addHandler(capture)
    logging.getLogger().setLevel(logging.INFO)
    logging.captureWarnings(True)

    hello = json.loads(sys.stdin.readline())
    ready, module = _start(hello["profile"], capture)
    answer(ready)
    if module is None:
        return 0
    tracer = _WriteTracer(module.ServerArgs) if dataclasses.is_dataclass(module.ServerArgs) else None
    for line in sys.stdin:
        if line.strip():
            answer(_resolve_job(module, json.loads(line), tracer, capture))
    return 0


if __name__ == "__main__":
    sys.exit(main())
