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

from sglperf.errors import SglperfError
from sglperf.model.progress import Progress, say_once, silent
from sglperf.model.runner_profile import CpuKernel, RunnerProfile
from sglperf.sglang.processes import run_bounded
from sglperf.sglang.server_api import BENCH_SERVING_MODULES

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
RECIPE_VERSION = "2"  # 2: bytecode compiled at build time


class EnvBuildError(SglperfError, RuntimeError):
    """An SGLang environment could not be built; the message says which step failed."""


class BadVersionError(SglperfError, ValueError):
    """A release given by the user is not a version: it is never used in a path."""


# The newest release sglperf's own tests resolve against (ci/selftest.sh): what `sglperf init` suggests.
NEWEST_CHECKED = "0.5.23"


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
            _create_venv(venv, uv_executable(), progress)
            # pip, not uv: pip reads this machine's configuration (a cap on torch, its wheels on local disk);
            # uv reads none of it and downloads a CUDA build of about 3 GB (docs/benchmarks.md, first run).
            _pip_install(venv / "bin" / "python", [*TORCH_SPEC], "install torch", progress)
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
            progress(f"building SGLang {version} environment in {env.path} (about 20 s with uv, minutes with pip)")
            _remove_ours(env.path)
            try:
                _build(env, wheel, torch_site, progress)
            except BaseException:
                _remove_ours(env.path)  # half an environment is worse than none; this call made it
                raise
        progress(f"SGLang {version} environment ready")
    return env


def releases_between(older: str, newer: str, progress: Progress = silent) -> list[str]:
    """The final releases of SGLang on the package index strictly between two versions, oldest first
    (post releases left out: a walk is release by release)."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", "sglang"]
    progress("  listing SGLang's releases: pip index versions sglang ...")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvBuildError(f"could not list SGLang's releases (`{' '.join(cmd[2:])}`): {exc}") from None
    listed = next(
        (ln.split(":", 1)[1] for ln in proc.stdout.splitlines() if ln.startswith("Available versions:")), None
    )
    if proc.returncode != 0 or listed is None:
        raise EnvBuildError(f"could not list SGLang's releases (`{' '.join(cmd[2:])}`): {proc.stderr.strip()[-300:]}")
    low, high = Version(older), Version(newer)
    found = []
    for text in listed.split(","):
        try:
            version = Version(text.strip())
        except InvalidVersion:
            continue
        if low < version < high and not version.is_postrelease and not version.is_prerelease:
            found.append(version)
    return [str(v) for v in sorted(found)]


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


def uv_executable() -> str | None:
    """uv beside this interpreter (ci/setup.sh installs it into the harness's venv), else on PATH."""
    beside = Path(sys.executable).parent / "uv"
    return str(beside) if beside.is_file() else shutil.which("uv")


def torch_env_gpu_only(torch_site: Path) -> list[str]:
    """The GPU-only distributions the shared torch environment provides (torch, triton, nvidia-*, ...)."""
    names = (path.name.split("-")[0] for path in torch_site.glob("*.dist-info"))
    return sorted(name for name in set(names) if is_gpu_only(name))


def _pip_install(python: Path, args: list[str], step: str, progress: Progress) -> None:
    # pip from outside the venv: one that uv made has no pip of its own.
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", *args], step, progress)


def _uv_failed(exc: EnvBuildError, what: str, progress: Progress) -> None:
    """The one line saying why the rest of this build goes through pip."""
    progress(f"  uv could not {what} ({str(exc).splitlines()[-1]}); building the rest with pip")


def _create_venv(path: Path, uv: str | None, progress: Progress) -> str | None:
    """A venv at ``path`` for this Python: ``uv venv`` (no pip inside: the build installs from outside), else
    ``python -m venv``, which spends 3-4 s installing pip. Returns uv, or None once uv has failed."""
    if uv is not None:
        try:
            _run([uv, "venv", "-q", "--python", sys.executable, str(path)], "create venv (uv)", progress)
            return uv
        except EnvBuildError as exc:
            _uv_failed(exc, "create the venv", progress)
            _remove_ours(path)
    _run([sys.executable, "-m", "venv", str(path)], "create venv", progress)
    return None


def install_light(
    env: SGLangEnv, requirements: list[str], torch_site: Path, uv: str | None, progress: Progress
) -> str | None:
    """The release's light requirements, with uv where it runs (about 6 s where pip took 60-75 s per release,
    bench/env_build.py), else pip. Returns uv, or None once uv has failed.

    pip sees the shared torch through the environment's .pth and leaves it be; uv reads only the
    environment's own site-packages, so the torch environment's GPU-only distributions are excluded from
    its resolution (else a requirement on torch would download a CUDA build of several GB). uv reads no
    pip configuration either: where it fails (a private index in pip.conf, say) pip installs instead."""
    if uv is not None:
        excludes = env.path / "uv-excludes.txt"
        excludes.write_text("".join(f"{name}\n" for name in torch_env_gpu_only(torch_site)))
        uv_cmd = [uv, "pip", "install", "-q", "--python", str(env.python), "--excludes", str(excludes)]
        try:
            _run([*uv_cmd, *requirements], "install light requirements (uv)", progress)
            return uv
        except EnvBuildError as exc:
            _uv_failed(exc, "install them", progress)
    _pip_install(env.python, requirements, "install light requirements", progress)
    return None


def install_wheel(env: SGLangEnv, wheel: Path, uv: str | None, progress: Progress) -> str | None:
    """The release's own wheel, ``--no-deps``: uv takes about 1 s where pip took 10 s (it compiles every
    module; docs/benchmarks.md, first run). Returns uv, or None once uv has failed."""
    if uv is not None:
        try:
            cmd = [uv, "pip", "install", "-q", "--no-deps", "--python", str(env.python), str(wheel)]
            _run(cmd, "install sglang wheel (uv)", progress)
            return uv
        except EnvBuildError as exc:
            _uv_failed(exc, "install the wheel", progress)
    _pip_install(env.python, ["--no-deps", str(wheel)], "install sglang wheel", progress)
    return None


def compile_bytecode(site: Path, progress: Progress) -> None:
    """Every module of an environment compiled once, when it is built.

    uv installs no bytecode (pip does), and where PYTHONDONTWRITEBYTECODE is set (this project's machines,
    many container images) no import writes any: each preflight worker and each server process compiled
    SGLang, transformers and the rest from source again (a cold preflight of the shipped deployments took
    1.75x as long; compiling takes about 20 s, once: bench/bytecode.py). The environment's interpreter is
    this one (its venv was made from it), so this one's bytecode is its. A file that does not compile (a
    package's Python 2 or broken test file) stays source, as it was; one line says how many."""
    cmd = [sys.executable, "-m", "compileall", "-q", "-j", "0", str(site)]
    progress(f"  compile bytecode: {' '.join(cmd[:4])} ...")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        failed = sum(line.startswith("*** Error compiling") for line in proc.stdout.splitlines())
        if failed:
            files = "file" if failed == 1 else "files"
            progress(f"  compile bytecode: {failed} {files} did not compile and stay source (exit {proc.returncode})")
        else:  # compileall itself failed: the environment works, as it did before, from source
            why = (proc.stderr.strip().splitlines() or ["no message"])[-1]
            progress(f"  compile bytecode: compileall failed (exit {proc.returncode}: {why}); modules stay source")


def _build(env: SGLangEnv, wheel: Path, torch_site: Path, progress: Progress) -> None:
    uv = _create_venv(env.path, uv_executable(), progress)
    (_site_packages(env.path) / "zz_sglperf_torch.pth").write_text(f"{torch_site}\n")
    with zipfile.ZipFile(wheel) as zf:
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        requirements = light_requirements(zf.read(meta_name).decode())
    uv = install_wheel(env, wheel, uv, progress)
    progress(f"  installing {len(requirements)} light requirements at SGLang {env.version}'s pins")
    install_light(env, requirements, torch_site, uv, progress)
    compile_bytecode(_site_packages(env.path), progress)
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


# --- SGLang on the CPU ---------------------------------------------------------------------------
# A real `sglang.launch_server --device cpu` needs the release's CPU-side install (the environment
# above) plus something importable as `sgl_kernel`, which SGLang imports on every path. Two kinds
# (RunnerProfile.cpu_kernel):
# - "sgl-kernel": SGLang's CPU kernel package, built for AVX-512, on no package index. It comes from a
#   folder laid out like ../shared/sglang-cpu (wheels/*.whl, else build.sh to build one):
#   SGLPERF_SGLANG_CPU_DIR, else <repository>/../shared/sglang-cpu. Loading it on a CPU without
#   AVX-512 kills the process with SIGILL, so nothing here lets a process of such a CPU import it.
# - "torch-native": no native kernel. A stand-in package (cpu_kernel_standin.py) lets SGLang's imports
#   succeed; SGLang's own rules then fall back to torch_native attention and torch code for its ops.

CPU_DIR_ENV = "SGLPERF_SGLANG_CPU_DIR"
# The flags of another CPU kind, instead of /proc/cpuinfo's: what a runner of that kind would do here.
CPU_FLAGS_ENV = "SGLPERF_CPU_FLAGS"
CPU_RECIPE_VERSION = "2"
# /proc/cpuinfo flags the CPU kernel needs: it is compiled for x86-64-v4 (AVX-512). Built with -mamx-*
# too, it holds no AMX instruction (oneDNN picks AVX-512 code at run time): it served on an AMD EPYC
# with AVX-512 and no AMX, 2026-12-01, with the CPU shim keeping SGLang on that path (cpu_shim.py).
CPU_KERNEL_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd")
CPU_SHIM = Path(__file__).with_name("cpu_shim.py")
CPU_KERNEL_STANDIN = Path(__file__).with_name("cpu_kernel_standin.py")
KERNEL_MODULE = "sgl_kernel"
# SGLang's CPU backend binds its OpenMP threads to these CPUs ("0-3", "|" between ranks); unset or
# "all": every CPU of the rank's NUMA node (sglang/srt/utils/numa_utils.py, init_threads_binding).
CPU_OMP_BIND_ENV = "SGLANG_CPU_OMP_THREADS_BIND"
CPU_SUFFIXES: dict[CpuKernel, str] = {"sgl-kernel": "-cpu", "torch-native": "-cpu-native"}


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU feature flags of this machine (the first processor's ``flags`` line; SGLPERF_CPU_FLAGS wins)."""
    if cpuinfo is None:
        simulated = os.environ.get(CPU_FLAGS_ENV)
        if simulated is not None:
            return set(simulated.split())
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags") and ":" in line:
            return set(line.split(":", 1)[1].split())
    return set()


def cpu_kind(flags: set[str] | None = None) -> str:
    """Which of the project's CPU kinds this is, in the words of docs/cpu-tier.md ("Which CPU runs what")."""
    flags = cpu_flags() if flags is None else flags
    if not flags:
        return "a CPU of unknown kind (no /proc/cpuinfo flags)"
    if all(f in flags for f in CPU_KERNEL_FLAGS):
        return "AVX-512 with AMX" if "amx_tile" in flags else "AVX-512 without AMX"
    return "AVX2 without AVX-512" if "avx2" in flags else "no AVX2"


def kernel_flags_missing(cpuinfo: str | None = None) -> str | None:
    """What this CPU lacks of what SGLang's CPU kernel needs ("lacks avx512f, ..."), or None."""
    flags = cpu_flags(cpuinfo)
    missing = [f for f in CPU_KERNEL_FLAGS if f not in flags]
    if not missing:
        return None
    return "no /proc/cpuinfo flags" if not flags else f"lacks {', '.join(missing)}"


def cpu_kernel_problem(cpuinfo: str | None = None) -> str | None:
    """Why SGLang's CPU kernel cannot run on this CPU, or None."""
    missing = kernel_flags_missing(cpuinfo)
    if missing is None:
        return None
    return (
        f"this CPU {missing}: SGLang's CPU kernel (sgl_kernel for --device cpu) is built for AVX-512, so a real "
        'SGLang server with it cannot run here (a runner with cpu_kernel = "torch-native" can)'
    )


def runner_cpu_problem(kernel: CpuKernel) -> str | None:
    """Why a CPU runner with ``kernel`` cannot serve on this CPU, or None."""
    return cpu_kernel_problem() if kernel == "sgl-kernel" else None


def cpu_kernel_dir() -> Path:
    configured = os.environ.get(CPU_DIR_ENV)
    if configured:
        return Path(configured)
    repository = Path(__file__).resolve().parents[3]  # src/sglperf/sglang/envs.py in a checkout
    return repository.parent / "shared" / "sglang-cpu"


def cpu_env_for(version: str, kernel: CpuKernel = "sgl-kernel") -> SGLangEnv:
    return SGLangEnv(version, envs_root() / f"sglang-{check_version(version)}{CPU_SUFFIXES[kernel]}")


def _cpu_recipe(version: str, kernel_source: str) -> str:
    """``kernel_source``: the kernel wheel's path, or the stand-in's name; the files copied in count too."""
    copied = CPU_SHIM.read_text() if kernel_source != KERNEL_STANDIN_SOURCE else CPU_KERNEL_STANDIN.read_text()
    text = "\n".join([CPU_RECIPE_VERSION, _recipe_digest(version), Path(kernel_source).name, copied])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


KERNEL_STANDIN_SOURCE = "torch-native stand-in"


def _kernel_wheel(folder: Path, python: Path, progress: Progress) -> Path:
    """The CPU kernel wheel for this Python: shipped in ``folder/wheels``, else built once with its build.sh."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    shipped = sorted((folder / "wheels").glob(f"sglang_kernel_cpu-*-{tag}-*.whl"))
    if shipped:
        return shipped[-1]
    built_dir = envs_root() / "cpu-kernel-wheels"
    built = sorted(built_dir.glob(f"sglang_kernel_cpu-*-{tag}-*.whl"))
    if built:
        return built[-1]
    script = folder / "build.sh"
    if not script.is_file():
        raise EnvBuildError(
            f"no SGLang CPU kernel wheel for {tag} in {folder / 'wheels'} and no build.sh beside it: set "
            f"{CPU_DIR_ENV} to a folder laid out like shared/sglang-cpu (wheels/, or src/ and build.sh)"
        )
    progress(f"  building the SGLang CPU kernel wheel with {script} (10-15 min on 2 cores, once)")
    built_dir.mkdir(parents=True, exist_ok=True)
    _run(["bash", str(script), str(python), str(built_dir)], "build the CPU kernel wheel", progress)
    built = sorted(built_dir.glob(f"sglang_kernel_cpu-*-{tag}-*.whl"))
    if not built:
        raise EnvBuildError(f"{script} produced no wheel in {built_dir}")
    return built[-1]


def ensure_cpu_env(
    version: str, progress: Progress = silent, require_cpu: bool = True, kernel: CpuKernel = "sgl-kernel"
) -> SGLangEnv:
    """Build (once) the SGLang-on-CPU environment for ``version``: the release's CPU-side environment seen
    through a ``.pth`` (with the shared torch), plus ``kernel``: SGLang's CPU kernel wheel and sglperf's CPU
    shim, or the torch-native stand-in.

    ``require_cpu``: fail at once, saying why, when this CPU cannot run the kernel (resolution alone works
    without it: the preflight stubs a kernel that does not load)."""
    if require_cpu and (problem := runner_cpu_problem(kernel)):
        raise EnvBuildError(problem)
    env = cpu_env_for(version, kernel)
    base = ensure_env(version, progress)
    with FileLock(str(env.path) + ".lock"):
        if cpu_env_ready(env):
            return env
        source = str(cpu_kernel_dir()) if kernel == "sgl-kernel" else KERNEL_STANDIN_SOURCE
        progress(f"building SGLang {version} CPU environment in {env.path} (kernel: {source})")
        _remove_ours(env.path)
        try:
            _run([sys.executable, "-m", "venv", str(env.path)], "create venv", progress)
            site = _site_packages(env.path)
            torch_site = ensure_torch_env(progress)
            # A .pth inside a folder that a .pth added is not processed: name both folders here.
            (site / "zz_sglperf_base.pth").write_text(f"{_site_packages(base.path)}\n{torch_site}\n")
            if kernel == "sgl-kernel":
                wheel = _kernel_wheel(cpu_kernel_dir(), env.python, progress)
                _run(
                    [str(env.python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                    "install CPU kernel",
                    progress,
                )
                shutil.copyfile(CPU_SHIM, site / "sglperf_cpu_shim.py")
                (site / "zz_sglperf_cpu_shim.pth").write_text("import sglperf_cpu_shim\n")
                source = str(wheel)
            else:
                (site / KERNEL_MODULE).mkdir()
                shutil.copyfile(CPU_KERNEL_STANDIN, site / KERNEL_MODULE / "__init__.py")
            (env.path / ".sglperf-kernel").write_text(f"{source}\n")
            (env.path / ".sglperf-ready").write_text(_cpu_recipe(version, source) + "\n")
        except BaseException:
            _remove_ours(env.path)
            raise
        progress(f"SGLang {version} CPU environment ready ({Path(source).name})")
    return env


def python_for_runner(python: str, runner: RunnerProfile, progress: Progress = silent) -> str:
    """The interpreter for a runner profile. A managed release's CPU runner uses that release's CPU
    environment for its kernel, where this CPU can load it; any other interpreter is used as given."""
    if not runner.is_cpu:
        return python
    path = Path(python)
    root = envs_root()
    if path.parent.parent.parent != root or not path.parent.parent.name.startswith("sglang-"):
        return python
    name = path.parent.parent.name.removeprefix("sglang-")
    if any(name.endswith(suffix) for suffix in CPU_SUFFIXES.values()):
        return python
    try:
        version = check_version(name)
    except BadVersionError:
        return python
    kernel = runner.kernel
    if kernel == "sgl-kernel":
        missing = kernel_flags_missing()
        if missing:
            # Importing the kernel here would kill the probe (SIGILL): resolve with it stubbed instead.
            say_once(
                progress,
                f"CPU runner {runner.name!r}: resolved with SGLang's CPU kernel stubbed, not loaded (this CPU "
                f"{missing}; the kernel is built for AVX-512): its attention backend is this CPU's, not the runner's",
            )
            return python
        if not cpu_kernel_dir().is_dir():
            progress(
                f"no SGLang CPU kernel folder at {cpu_kernel_dir()} ({CPU_DIR_ENV}): CPU runner {runner.name!r} is "
                f"resolved with {python} (kernel stubbed), and a real CPU server cannot be started"
            )
            return python
    return str(ensure_cpu_env(version, progress, require_cpu=False, kernel=kernel).python)


def cpu_env_ready(env: SGLangEnv) -> bool:
    """Whether a CPU environment is complete and was built by this recipe (its kernel source is recorded)."""
    marker = env.path / ".sglperf-ready"
    try:
        source = (env.path / ".sglperf-kernel").read_text().strip()
        return marker.read_text().strip() == _cpu_recipe(env.version, source)
    except OSError:
        return False


def bench_serving_module(python: str) -> str:
    """The module SGLang's benchmark client lives in for the release under ``python``, asked of that
    interpreter (`server_api.BENCH_SERVING_MODULES`, newest first); EnvBuildError when it has none."""
    probe = (
        "import importlib.util, sys\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        if importlib.util.find_spec(name):\n"
        "            print(name); break\n"
        "    except ImportError:\n"
        "        pass\n"
    )
    out = run_bounded([python, "-c", probe, *BENCH_SERVING_MODULES], 300)
    found = out.stdout.strip().splitlines()
    if out.returncode != 0 or not found:
        raise EnvBuildError(
            f"{python}: none of {', '.join(BENCH_SERVING_MODULES)} can be found (SGLang's benchmark client moved "
            f"again?): {out.stderr.strip()[-300:]}"
        )
    return found[-1]
