"""Managed SGLang environments: one virtualenv per release, for CPU-side resolution.

Each release pins its own transformers and friends, so preflight of two releases needs two
environments. An environment holds the release's wheel (installed ``--no-deps``), its light
Python requirements at that release's own pins, and none of the GPU-only packages (kernels,
flashinfer, ...), which resolution never imports once ``sgl_kernel`` is stubbed. torch is the
heaviest part and the same for every release we can install here, so it lives in one shared
environment that each release environment sees through a ``.pth`` file placed after its own
site-packages (its own packages win).
"""

from __future__ import annotations

import email.parser
import fnmatch
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from sglperf.model.progress import Progress, silent

TORCH_SPEC = ("torch==2.14.1", "torchvision==0.29.1")

# Packages resolution does not need and that cannot work (or even install) without a GPU.
# torch and its siblings come from the shared torch environment instead.
GPU_ONLY_PATTERNS = (
    "torch",
    "torchvision",
    "torchaudio",
    "torchcodec",
    "torchao",
    "torch-memory-saver",
    "flashinfer*",
    "sglang-kernel",
    "sgl-*",
    "flash-attn*",
    "nvidia-*",
    "nvshmem*",
    "cuda-python",
    "cuda-*",
    "deep-*",
    "deepseek-recipe",
    "humming-kernels",
    "quack-kernels",
    "tilelang",
    "tokenspeed-mla",
    "apache-tvm-ffi",
    "kernels",
    "triton",
    "decord*",
    "av",
    "tml-renderers",
    "py-spy",
)

# Bump when the recipe below changes, so that cached environments are rebuilt.
RECIPE_VERSION = "1"


class EnvBuildError(RuntimeError):
    """An SGLang environment could not be built; the message says which step failed."""


class BadVersionError(ValueError):
    """A release given by the user is not a version: it is never used in a path."""


def check_version(version: str) -> str:
    """``version`` if it is a plain PEP 440 release such as 0.5.23; it becomes part of a folder name."""
    try:
        parsed = Version(version)
    except InvalidVersion:
        parsed = None
    # str(Version) is its normal form: anything else (spaces, slashes, "v0.5") could escape the cache.
    if parsed is None or str(parsed) != version or parsed.local:
        raise BadVersionError(f"SGLang version {version!r}: not a release version (PEP 440, e.g. 0.5.23)")
    return version


@dataclass(frozen=True)
class SGLangEnv:
    version: str
    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def ready(self) -> bool:
        marker = self.path / ".sglperf-ready"
        return marker.is_file() and marker.read_text().strip() == _recipe_digest(self.version)


def home() -> Path:
    """Root of the suite's machine-wide cache (environments, preflight results)."""
    return Path(os.environ.get("SGLPERF_HOME", Path.home() / ".cache" / "sglperf"))


def envs_root() -> Path:
    return home() / "envs"


def env_for(version: str) -> SGLangEnv:
    return SGLangEnv(version, envs_root() / f"sglang-{check_version(version)}")


def list_envs() -> list[SGLangEnv]:
    """Every environment folder under the cache (lock files and foreign names skipped)."""
    found = []
    for path in sorted(envs_root().glob("sglang-*")) if envs_root().is_dir() else []:
        try:
            env = env_for(path.name.removeprefix("sglang-"))
        except BadVersionError:
            continue
        if path.is_dir():
            found.append(env)
    return found


def _remove_ours(path: Path) -> None:
    """Delete an environment folder: only ever one inside sglperf's own cache."""
    root = envs_root().resolve()
    if path.resolve().parent != root:
        raise EnvBuildError(f"refusing to delete {path}: not an environment folder under {root}")
    shutil.rmtree(path, ignore_errors=True)


def _normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def is_gpu_only(name: str) -> bool:
    norm = _normalise(name)
    return any(fnmatch.fnmatchcase(norm, pattern) for pattern in GPU_ONLY_PATTERNS)


def light_requirements(metadata_text: str) -> list[str]:
    """The release's own requirement lines, minus extras, foreign platforms and GPU-only packages."""
    message = email.parser.Parser().parsestr(metadata_text)
    marker_env: dict[str, str] = dict(default_environment())  # type: ignore[arg-type]
    kept = []
    for line in message.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({**marker_env, "extra": ""}):
            continue
        if is_gpu_only(req.name):
            continue
        req.extras = set()  # extras such as [cu13] only pull GPU packages
        req.marker = None
        kept.append(str(req))
    return kept


def _recipe_digest(version: str) -> str:
    text = "\n".join([RECIPE_VERSION, version, *TORCH_SPEC, *GPU_ONLY_PATTERNS, sys.version])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _run(cmd: list[str], step: str, progress: Progress) -> None:
    progress(f"  {step}: {' '.join(cmd[:4])} ...")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        # pip's own last error lines, without its warnings about this machine's index settings.
        lines = [
            ln for ln in (proc.stdout + proc.stderr).strip().splitlines() if not ln.startswith("WARNING: Location")
        ]
        tail = "\n".join(lines[-8:])
        raise EnvBuildError(f"{step} failed (exit {proc.returncode}):\n{tail}")


def _site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python*/site-packages"))
    if not found:
        raise EnvBuildError(f"no site-packages under {venv}")
    return found[0]


def ensure_torch_env(progress: Progress) -> Path:
    """The shared torch environment; returns its site-packages."""
    venv = home() / "envs" / f"torch-{TORCH_SPEC[0].split('==')[1]}"
    marker = venv / ".sglperf-ready"
    with FileLock(str(venv) + ".lock"):
        if not marker.is_file():
            progress(f"building shared torch environment {venv} (about a minute)")
            _remove_ours(venv)
            _run([sys.executable, "-m", "venv", str(venv)], "create venv", progress)
            _run([str(venv / "bin" / "pip"), "install", "-q", *TORCH_SPEC], "install torch", progress)
            marker.write_text("ok\n")
    return _site_packages(venv)


def ensure_env(version: str, progress: Progress = silent) -> SGLangEnv:
    """Build (once) and return the environment for SGLang ``version``."""
    env = env_for(version)  # validates the version before it names any folder
    env.path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(env.path) + ".lock"):
        if env.ready:
            return env
        with tempfile.TemporaryDirectory() as tmp:
            # The wheel first: a release that does not exist fails before anything is created.
            wheel = _download_wheel(version, Path(tmp), progress)
            torch_site = ensure_torch_env(progress)
            progress(f"building SGLang {version} environment in {env.path} (a few minutes the first time)")
            _remove_ours(env.path)
            try:
                _build(env, wheel, torch_site, progress)
            except BaseException:
                _remove_ours(env.path)  # half an environment is worse than none; this call made it
                raise
        progress(f"SGLang {version} environment ready")
    return env


def _download_wheel(version: str, folder: Path, progress: Progress) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"sglang=={version}", "-d", str(folder)]
    try:
        _run(cmd, f"download sglang=={version}", progress)
    except EnvBuildError as exc:
        if "No matching distribution" in str(exc) or "Could not find a version" in str(exc):
            raise EnvBuildError(
                f"SGLang {version} is not on the package index (`pip index versions sglang` lists the releases)"
            ) from None
        raise
    wheels = list(folder.glob("sglang-*.whl"))
    if not wheels:
        raise EnvBuildError(f"pip found no wheel for sglang=={version}")
    return wheels[0]


def _build(env: SGLangEnv, wheel: Path, torch_site: Path, progress: Progress) -> None:
    _run([sys.executable, "-m", "venv", str(env.path)], "create venv", progress)
    (_site_packages(env.path) / "zz_sglperf_torch.pth").write_text(f"{torch_site}\n")
    pip = [str(env.python), "-m", "pip"]
    with zipfile.ZipFile(wheel) as zf:
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        requirements = light_requirements(zf.read(meta_name).decode())
    _run([*pip, "install", "-q", "--no-deps", str(wheel)], "install sglang wheel", progress)
    progress(f"  installing {len(requirements)} light requirements at SGLang {env.version}'s pins")
    _run([*pip, "install", "-q", *requirements], "install light requirements", progress)
    (env.path / ".sglperf-ready").write_text(_recipe_digest(env.version) + "\n")


def choose_python(python: str | None = None, sglang_version: str | None = None, progress: Progress = silent) -> str:
    """The interpreter whose SGLang to ask: a managed release, an explicit one, or this one."""
    if python and sglang_version:
        raise ValueError("give either an interpreter or an SGLang version, not both")
    if sglang_version:
        return str(ensure_env(sglang_version, progress).python)
    if python:
        return python
    if importlib.util.find_spec("sglang") is not None:
        return sys.executable
    # The harness's own venv has no SGLang: use the newest managed release rather than fail.
    ready = sorted((env for env in list_envs() if env.ready), key=lambda env: Version(env.version))
    if not ready:
        raise EnvBuildError(
            f"no SGLang in this interpreter ({sys.executable}) and no managed SGLang environment: build one with "
            "`sglperf env build 0.5.23` (or pass --sglang VERSION, or --python of your SGLang environment)"
        )
    progress(f"no SGLang in {sys.executable}: using the managed SGLang {ready[-1].version} ({ready[-1].python})")
    return str(ready[-1].python)
