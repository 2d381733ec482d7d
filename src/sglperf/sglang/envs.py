"""Managed SGLang environments: one virtualenv per release, for CPU-side resolution.

Each release pins its own transformers and friends, so preflight of two releases needs two
environments. An environment holds the release's wheel (installed ``--no-deps``), its light
Python requirements at that release's own pins, and none of the GPU-only packages (kernels,
flashinfer, ...), which resolution never imports once ``sgl_kernel`` is stubbed. torch is the
heaviest part and the same for every release we can install here, so it lives in one shared
environment that each release environment sees through a ``.pth`` file placed after its own
site-packages (its own packages win).

The environments that serve on this CPU build on these (cpu_envs), never the other way round.
"""

from __future__ import annotations

import contextlib
import email.parser
import fnmatch
import hashlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from filelock import FileLock
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from sglperf.errors import SglperfError
from sglperf.model.files import os_problem
from sglperf.model.progress import Progress, silent
from sglperf.sglang.processes import run_bounded

T = TypeVar("T")

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
# Written last, holding the recipe's digest: a folder without it (or with another recipe's) is rebuilt.
READY_MARKER = ".sglperf-ready"
ENV_PREFIX = "sglang-"  # an environment's folder: sglang-VERSION, and for a CPU one a suffix after it


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
        return self.problem is None

    @property
    def problem(self) -> str | None:
        """Why this environment cannot be used as it is (it is then rebuilt), or None: it is ready."""
        if _marker(self.path) != recipe_digest(self.version):
            return "not built, or built by another recipe"
        return broken(self.path)


TORCH_PTH = "zz_sglperf_torch.pth"  # in a release environment's site-packages: where the shared torch is


def _marker(path: Path) -> str | None:
    """What a ready marker in ``path`` holds; None without one (or one that cannot be read)."""
    try:
        return (path / READY_MARKER).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def broken(path: Path) -> str | None:
    """What of a built environment is gone, or None. A venv's interpreter links to the one it was made from,
    and a release environment sees the shared torch through its .pth: delete either (a Python upgrade, a
    cleaned cache) and the marker alone would still say ready."""
    python = path / "bin" / "python"
    if not python.exists():  # follows the link: a dangling one is gone
        return f"its interpreter {python} is gone (the Python it was made from was removed or moved)"
    for pth in path.glob(f"lib/python*/site-packages/{TORCH_PTH}"):
        try:
            shared = [Path(line.strip()) for line in pth.read_text().splitlines() if line.strip()]
        except (OSError, UnicodeDecodeError):
            return f"{pth} cannot be read"
        gone = [str(folder) for folder in shared if not (folder / "torch").is_dir()]
        if gone:
            return f"the shared torch it uses is gone ({', '.join(gone)})"
    return None


def home() -> Path:
    """Root of the suite's machine-wide cache (environments, preflight results)."""
    return Path(os.environ.get("SGLPERF_HOME", Path.home() / ".cache" / "sglperf"))


def envs_root() -> Path:
    return home() / "envs"


def env_for(version: str) -> SGLangEnv:
    return SGLangEnv(version, envs_root() / f"{ENV_PREFIX}{check_version(version)}")


def release_named_by(folder: Path) -> str | None:
    """The release a release environment's folder is named for (sglang-0.5.23), or None: any other name,
    a CPU environment's (sglang-0.5.23-cpu) too, is no release version."""
    if not folder.name.startswith(ENV_PREFIX):
        return None
    try:
        return check_version(folder.name.removeprefix(ENV_PREFIX))
    except BadVersionError:
        return None


def list_envs() -> list[SGLangEnv]:
    """Every environment folder under the cache (lock files and foreign names skipped)."""
    found = []
    for path in sorted(envs_root().glob(f"{ENV_PREFIX}*")) if envs_root().is_dir() else []:
        version = release_named_by(path)
        if version is not None and path.is_dir():
            found.append(env_for(version))
    return found


def remove_env_folder(path: Path) -> None:
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


def recipe_hash(*parts: str) -> str:
    """What a ready marker holds: 16 hex digits of the SHA-256 of ``parts``, one a line."""
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def recipe_digest(version: str) -> str:
    """What a release environment's ready marker holds: everything that goes into it, the release too."""
    return recipe_hash(RECIPE_VERSION, version, *TORCH_SPEC, *GPU_ONLY_PATTERNS, sys.version)


def run_step(cmd: list[str], step: str, progress: Progress) -> None:
    """One build step, said in one line; EnvBuildError naming it, with the tail of its output, when it fails."""
    progress(f"  {step}: {' '.join(cmd[:4])} ...")
    proc = run_bounded(cmd, None)  # its own process group: pip's and uv's children end with it, or with us
    if proc.returncode != 0:
        # pip's own last error lines, without its warnings about this machine's index settings.
        lines = [
            ln for ln in (proc.stdout + proc.stderr).strip().splitlines() if not ln.startswith("WARNING: Location")
        ]
        tail = "\n".join(lines[-8:])
        raise EnvBuildError(f"{step} failed (exit {proc.returncode}):\n{tail}")


def site_packages(venv: Path) -> Path:
    """The site-packages folder of ``venv``; EnvBuildError when it has none."""
    found = sorted(venv.glob("lib/python*/site-packages"))
    if not found:
        raise EnvBuildError(f"no site-packages under {venv}")
    return found[0]


def _torch_ready(venv: Path) -> bool:
    """The shared torch environment, built and whole: its marker, its interpreter and torch itself."""
    return (
        (venv / READY_MARKER).is_file()
        and broken(venv) is None
        and bool(list(venv.glob("lib/python*/site-packages/torch")))
    )


def ensure_torch_env(progress: Progress) -> Path:
    """The shared torch environment; returns its site-packages."""
    venv = envs_root() / f"torch-{TORCH_SPEC[0].split('==')[1]}"
    with _build_lock(venv, lambda: _torch_ready(venv), "the shared torch environment") as usable:
        if not usable:
            progress(f"building shared torch environment {venv} (about a minute)")
            remove_env_folder(venv)
            create_venv(venv, uv_executable(), progress)
            # pip, not uv: pip reads this machine's configuration (a cap on torch, its wheels on local disk);
            # uv reads none of it and downloads a CUDA build of about 3 GB (docs/benchmarks.md, first run).
            _pip_install(venv / "bin" / "python", [*TORCH_SPEC], "install torch", progress)
            (venv / READY_MARKER).write_text("ok\n")
    return site_packages(venv)


@contextlib.contextmanager
def _build_lock(path: Path, ready: Callable[[], bool], what: str) -> Iterator[bool]:
    """Held while ``path`` is checked and (re)built; yields whether it is ready as it is.

    A cache that cannot be written (a read-only SGLPERF_HOME prepared for a team, a full disk) takes no
    lock: a ready environment there is used as it is, since nobody can rebuild it either, and one that is
    not ready is one EnvBuildError saying what to do. A build's own OSError (the disk filling up) is an
    EnvBuildError too: the folder is removed (`build_afresh`), and a walk goes on with the next release."""
    lock: FileLock | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(path) + ".lock")
        lock.acquire()
    except OSError as exc:
        lock = None
        if not ready():
            raise EnvBuildError(
                f"{what} in {path} is not ready and cannot be built there ({os_problem(exc)}): set SGLPERF_HOME "
                "to a writable folder, or pass --sglang-python of an SGLang environment"
            ) from None
    try:
        with _signals_unwind():
            yield ready()
    except OSError as exc:
        raise EnvBuildError(f"building {what} in {path} failed: {os_problem(exc)}") from None
    finally:
        if lock is not None:
            lock.release()


@contextlib.contextmanager
def _signals_unwind() -> Iterator[None]:
    """SIGTERM (a CI cancel) unwinds like Ctrl-C while a build runs, so its steps' process groups are ended
    and its half-built folder removed, rather than the interpreter dying with compileall's workers left
    running. In the main thread only (where Python delivers signals); the previous handler comes back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous not in (signal.SIG_DFL, None):  # someone's own handler (pytest's plugin): theirs decides
        yield
        return
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def ensure_env(version: str, progress: Progress = silent) -> SGLangEnv:
    """Build (once) and return the environment for SGLang ``version``; one that is no longer whole (its
    interpreter or the shared torch gone) is rebuilt."""
    env = env_for(version)  # validates the version before it names any folder
    with _build_lock(env.path, lambda: env.ready, f"the SGLang {version} environment") as usable:
        if usable:
            return env
        if env.path.is_dir() and _marker(env.path) == recipe_digest(version):
            progress(f"SGLang {version} environment in {env.path}: {env.problem}; rebuilding it")
        with tempfile.TemporaryDirectory() as tmp:
            # The wheel first: a release that does not exist fails before anything is created.
            wheel = _download_wheel(version, Path(tmp), progress)
            torch_site = ensure_torch_env(progress)
            progress(f"building SGLang {version} environment in {env.path} (about 20 s with uv, minutes with pip)")
            build_afresh(env.path, lambda: _build(env, wheel, torch_site, progress))
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
        run_step(cmd, f"download sglang=={version}", progress)
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
    """The uv installed with sglperf (a dependency: its package knows where its binary went, in a venv's
    bin/, the user's ~/.local/bin or a --target folder), else uv on PATH, else None: pip builds."""
    try:
        from uv import find_uv_bin
    except ImportError:  # sglperf installed with --no-deps
        return shutil.which("uv")
    try:
        return find_uv_bin()
    except FileNotFoundError:  # the package without its binary
        return shutil.which("uv")


def torch_env_gpu_only(torch_site: Path) -> list[str]:
    """The GPU-only distributions the shared torch environment provides (torch, triton, nvidia-*, ...)."""
    names = (path.name.split("-")[0] for path in torch_site.glob("*.dist-info"))
    return sorted(name for name in set(names) if is_gpu_only(name))


def _pip_install(python: Path, args: list[str], step: str, progress: Progress) -> None:
    # pip from outside the venv: one that uv made has no pip of its own.
    run_step([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", *args], step, progress)


def _uv_failed(exc: EnvBuildError, what: str, progress: Progress) -> None:
    """The one line saying why the rest of this build goes through pip."""
    progress(f"  uv could not {what} ({str(exc).splitlines()[-1]}); building the rest with pip")


def build_afresh(path: Path, build: Callable[[], T]) -> T:
    """``build()`` into ``path`` after removing whatever is there; on any failure the folder is removed
    again: half an environment is worse than none, and this call made it."""
    remove_env_folder(path)
    try:
        return build()
    except BaseException:
        remove_env_folder(path)
        raise


def create_venv(path: Path, uv: str | None, progress: Progress) -> str | None:
    """A venv at ``path`` for this Python: ``uv venv`` (no pip inside: the build installs from outside), else
    ``python -m venv``, which spends 3-4 s installing pip. Returns uv, or None once uv has failed."""
    if uv is not None:
        try:
            run_step([uv, "venv", "-q", "--python", sys.executable, str(path)], "create venv (uv)", progress)
            return uv
        except EnvBuildError as exc:
            _uv_failed(exc, "create the venv", progress)
            remove_env_folder(path)
    run_step([sys.executable, "-m", "venv", str(path)], "create venv", progress)
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
            run_step([*uv_cmd, *requirements], "install light requirements (uv)", progress)
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
            run_step(cmd, "install sglang wheel (uv)", progress)
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
    proc = run_bounded(cmd, None)  # its workers are its process group's: a cancelled build ends them too
    if proc.returncode != 0:
        failed = sum(line.startswith("*** Error compiling") for line in proc.stdout.splitlines())
        if failed:
            files = "file" if failed == 1 else "files"
            progress(f"  compile bytecode: {failed} {files} did not compile and stay source (exit {proc.returncode})")
        else:  # compileall itself failed: the environment works, as it did before, from source
            why = (proc.stderr.strip().splitlines() or ["no message"])[-1]
            progress(f"  compile bytecode: compileall failed (exit {proc.returncode}: {why}); modules stay source")


def _build(env: SGLangEnv, wheel: Path, torch_site: Path, progress: Progress) -> None:
    uv = create_venv(env.path, uv_executable(), progress)
    (site_packages(env.path) / TORCH_PTH).write_text(f"{torch_site}\n")
    with zipfile.ZipFile(wheel) as zf:
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        requirements = light_requirements(zf.read(meta_name).decode())
    uv = install_wheel(env, wheel, uv, progress)
    progress(f"  installing {len(requirements)} light requirements at SGLang {env.version}'s pins")
    install_light(env, requirements, torch_site, uv, progress)
    compile_bytecode(site_packages(env.path), progress)
    (env.path / READY_MARKER).write_text(recipe_digest(env.version) + "\n")


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
    newest = newest_ready()
    if newest is None:
        raise EnvBuildError(
            f"no SGLang in this interpreter ({sys.executable}) and no managed SGLang environment: build one with "
            "`sglperf env build 0.5.23` (or pass --sglang-version VERSION, or --sglang-python of your SGLang "
            "environment)"
        )
    progress(f"no SGLang in {sys.executable}: using the managed SGLang {newest.version} ({newest.python})")
    return str(newest.python)


def newest_ready() -> SGLangEnv | None:
    """The newest managed release environment that is built, or None."""
    ready = sorted((env for env in list_envs() if env.ready), key=lambda env: Version(env.version))
    return ready[-1] if ready else None
