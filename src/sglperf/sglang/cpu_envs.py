"""SGLang on this CPU: the environments a real ``sglang.launch_server --device cpu`` runs in.

Such a server needs the release's CPU-side install (a release environment, envs) plus something
importable as ``sgl_kernel``, which SGLang imports on every path. One environment per release and kind
of kernel (RunnerProfile.cpu_kernel), a venv whose ``.pth`` names the release environment and the shared
torch:

- "sgl-kernel": SGLang's CPU kernel package, built for AVX-512, on no package index. It comes from a
  folder laid out like ../shared/sglang-cpu (wheels/*.whl, else build.sh to build one):
  SGLPERF_SGLANG_CPU_DIR, else <repository>/../shared/sglang-cpu. Loading it on a CPU without AVX-512
  kills the process with SIGILL, so nothing here lets a process of such a CPU import it (cpu_features
  says which CPU that is). sglperf's CPU shim (cpu_shim.py) is installed beside it.
- "torch-native": no native kernel. A stand-in package (cpu_kernel_standin.py) lets SGLang's imports
  succeed; SGLang's own rules then fall back to torch_native attention and torch code for its ops.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from filelock import FileLock

from sglperf.model.progress import Progress, say_once, silent
from sglperf.model.runner_profile import CpuKernel, RunnerProfile
from sglperf.sglang import envs
from sglperf.sglang.cpu_features import KERNEL_MODULE, kernel_flags_missing, runner_cpu_problem
from sglperf.sglang.envs import EnvBuildError, SGLangEnv

CPU_DIR_ENV = "SGLPERF_SGLANG_CPU_DIR"
CPU_RECIPE_VERSION = "2"
CPU_SHIM = Path(__file__).with_name("cpu_shim.py")
CPU_KERNEL_STANDIN = Path(__file__).with_name("cpu_kernel_standin.py")
# SGLang's CPU backend binds its OpenMP threads to these CPUs ("0-3", "|" between ranks); unset or
# "all": every CPU of the rank's NUMA node (sglang/srt/utils/numa_utils.py, init_threads_binding).
CPU_OMP_BIND_ENV = "SGLANG_CPU_OMP_THREADS_BIND"
CPU_SUFFIXES: dict[CpuKernel, str] = {"sgl-kernel": "-cpu", "torch-native": "-cpu-native"}
# The kernel source an environment was built from (a wheel's path, or the stand-in's name): part of its recipe.
KERNEL_SOURCE_MARKER = ".sglperf-kernel"
KERNEL_STANDIN_SOURCE = "torch-native stand-in"


def cpu_kernel_dir() -> Path:
    configured = os.environ.get(CPU_DIR_ENV)
    if configured:
        return Path(configured)
    repository = Path(__file__).resolve().parents[3]  # src/sglperf/sglang/cpu_envs.py in a checkout
    return repository.parent / "shared" / "sglang-cpu"


def cpu_env_for(version: str, kernel: CpuKernel = "sgl-kernel") -> SGLangEnv:
    name = f"{envs.ENV_PREFIX}{envs.check_version(version)}{CPU_SUFFIXES[kernel]}"
    return SGLangEnv(version, envs.envs_root() / name)


def _cpu_recipe(version: str, kernel_source: str) -> str:
    """``kernel_source``: the kernel wheel's path, or the stand-in's name; the files copied in count too."""
    copied = CPU_SHIM.read_text() if kernel_source != KERNEL_STANDIN_SOURCE else CPU_KERNEL_STANDIN.read_text()
    return envs.recipe_hash(CPU_RECIPE_VERSION, envs.recipe_digest(version), Path(kernel_source).name, copied)


def _newest_kernel_wheel(folder: Path, tag: str) -> Path | None:
    """The newest CPU kernel wheel for Python ``tag`` (cp311) in ``folder``, or None."""
    found = sorted(folder.glob(f"sglang_kernel_cpu-*-{tag}-*.whl"))
    return found[-1] if found else None


def _kernel_wheel(folder: Path, python: Path, progress: Progress) -> Path:
    """The CPU kernel wheel for this Python: shipped in ``folder/wheels``, else built once with its build.sh."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    built_dir = envs.envs_root() / "cpu-kernel-wheels"
    found = _newest_kernel_wheel(folder / "wheels", tag) or _newest_kernel_wheel(built_dir, tag)
    if found is not None:
        return found
    script = folder / "build.sh"
    if not script.is_file():
        raise EnvBuildError(
            f"no SGLang CPU kernel wheel for {tag} in {folder / 'wheels'} and no build.sh beside it: set "
            f"{CPU_DIR_ENV} to a folder laid out like shared/sglang-cpu (wheels/, or src/ and build.sh)"
        )
    progress(f"  building the SGLang CPU kernel wheel with {script} (10-15 min on 2 cores, once)")
    built_dir.mkdir(parents=True, exist_ok=True)
    envs.run_step(["bash", str(script), str(python), str(built_dir)], "build the CPU kernel wheel", progress)
    built = _newest_kernel_wheel(built_dir, tag)
    if built is None:
        raise EnvBuildError(f"{script} produced no wheel in {built_dir}")
    return built


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
    base = envs.ensure_env(version, progress)
    with FileLock(str(env.path) + ".lock"):
        if cpu_env_ready(env):
            return env
        source = str(cpu_kernel_dir()) if kernel == "sgl-kernel" else KERNEL_STANDIN_SOURCE
        progress(f"building SGLang {version} CPU environment in {env.path} (kernel: {source})")
        source = envs.build_afresh(env.path, lambda: _build_cpu(env, base, kernel, progress))
        progress(f"SGLang {version} CPU environment ready ({Path(source).name})")
    return env


def _build_cpu(env: SGLangEnv, base: SGLangEnv, kernel: CpuKernel, progress: Progress) -> str:
    """The CPU environment ``env`` on top of release environment ``base``; returns the kernel's source."""
    # No uv: the kernel wheel is installed with the venv's own pip, which `python -m venv` puts there.
    envs.create_venv(env.path, None, progress)
    site = envs.site_packages(env.path)
    torch_site = envs.ensure_torch_env(progress)
    # A .pth inside a folder that a .pth added is not processed: name both folders here.
    (site / "zz_sglperf_base.pth").write_text(f"{envs.site_packages(base.path)}\n{torch_site}\n")
    if kernel == "sgl-kernel":
        wheel = _kernel_wheel(cpu_kernel_dir(), env.python, progress)
        envs.run_step(
            [str(env.python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], "install CPU kernel", progress
        )
        shutil.copyfile(CPU_SHIM, site / "sglperf_cpu_shim.py")
        (site / "zz_sglperf_cpu_shim.pth").write_text("import sglperf_cpu_shim\n")
        source = str(wheel)
    else:
        (site / KERNEL_MODULE).mkdir()
        shutil.copyfile(CPU_KERNEL_STANDIN, site / KERNEL_MODULE / "__init__.py")
        source = KERNEL_STANDIN_SOURCE
    (env.path / KERNEL_SOURCE_MARKER).write_text(f"{source}\n")
    (env.path / envs.READY_MARKER).write_text(_cpu_recipe(env.version, source) + "\n")
    return source


def python_for_runner(python: str, runner: RunnerProfile, progress: Progress = silent) -> str:
    """The interpreter for a runner profile. A managed release's CPU runner uses that release's CPU
    environment for its kernel, where this CPU can load it; any other interpreter is used as given."""
    if not runner.is_cpu:
        return python
    path = Path(python)
    if path.parent.parent.parent != envs.envs_root():
        return python
    version = envs.release_named_by(path.parent.parent)
    if version is None:  # a CPU environment's own interpreter (sglang-0.5.23-cpu), or no managed one
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
    marker = env.path / envs.READY_MARKER
    try:
        source = (env.path / KERNEL_SOURCE_MARKER).read_text().strip()
        return marker.read_text().strip() == _cpu_recipe(env.version, source)
    except OSError:
        return False
