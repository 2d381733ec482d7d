"""`sglperf.sglang.cpu_envs`: which interpreter a CPU runner gets, where its environment lives, which kernel
wheel it takes, and a build with every step recorded instead of run; nothing is built or downloaded."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sglperf.model import progress
from sglperf.model.runner_profile import RunnerProfile
from sglperf.sglang import cpu_envs, cpu_features, envs

TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"


def _managed_python(root: Path, name: str) -> Path:
    python = root / "envs" / name / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.touch()
    return python


def test_a_cpu_runner_of_the_kernel_on_a_cpu_without_avx512_resolves_with_the_release_env_and_says_so_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Never the environment holding SGLang's CPU kernel: importing it there would kill the probe."""
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path))
    monkeypatch.setenv(cpu_features.CPU_FLAGS_ENV, "fpu sse avx2 fma")
    monkeypatch.setattr(progress, "_SAID", set())
    monkeypatch.setattr(cpu_envs, "ensure_cpu_env", lambda *a, **k: pytest.fail("no CPU environment may be built"))
    python = str(_managed_python(tmp_path, "sglang-0.5.23"))
    runner = RunnerProfile(name="cpu-avx512", device="cpu")
    said: list[str] = []
    assert cpu_envs.python_for_runner(python, runner, said.append) == python
    assert cpu_envs.python_for_runner(python, runner, said.append) == python
    assert said == [
        "CPU runner 'cpu-avx512': resolved with SGLang's CPU kernel stubbed, not loaded (this CPU lacks avx512f, "
        "avx512bw, avx512vl, avx512dq, avx512cd; the kernel is built for AVX-512): its attention backend is this "
        "CPU's, not the runner's"
    ]


def test_a_torch_native_cpu_runner_of_a_managed_release_gets_that_releases_cpu_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path))
    asked: list[tuple[str, str]] = []

    def ensure(version: str, progress: progress.Progress, require_cpu: bool, kernel: str) -> envs.SGLangEnv:
        asked.append((version, kernel))
        assert not require_cpu  # resolution only: the CPU need not run it
        return cpu_envs.cpu_env_for(version, "torch-native")

    monkeypatch.setattr(cpu_envs, "ensure_cpu_env", ensure)
    python = str(_managed_python(tmp_path, "sglang-0.5.23"))
    runner = RunnerProfile(name="cpu", device="cpu", cpu_kernel="torch-native")
    assert cpu_envs.python_for_runner(python, runner) == str(
        tmp_path / "envs" / "sglang-0.5.23-cpu-native" / "bin" / "python"
    )
    assert asked == [("0.5.23", "torch-native")]


def test_gpu_runners_and_foreign_interpreters_are_used_as_given(tmp_path: Path) -> None:
    gpu = RunnerProfile(
        name="a6000", gpu_count=2, gpu_name="NVIDIA RTX A6000", compute_capability="8.6", memory_gib=48.0
    )
    assert cpu_envs.python_for_runner("/opt/sglang/bin/python", gpu) == "/opt/sglang/bin/python"
    cpu = RunnerProfile(name="cpu", device="cpu", cpu_kernel="torch-native")
    assert cpu_envs.python_for_runner("/opt/sglang/bin/python", cpu) == "/opt/sglang/bin/python"


def test_each_kernel_has_its_own_cpu_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path))
    assert cpu_envs.cpu_env_for("0.5.23").path.name == "sglang-0.5.23-cpu"
    assert cpu_envs.cpu_env_for("0.5.23", "torch-native").path.name == "sglang-0.5.23-cpu-native"
    # Neither is taken for a release environment, nor built by python_for_runner when given as the python.
    for name in ("sglang-0.5.23-cpu", "sglang-0.5.23-cpu-native"):
        python = str(_managed_python(tmp_path, name))
        assert cpu_envs.python_for_runner(python, RunnerProfile(name="c", device="cpu")) == python
    assert [e.version for e in envs.list_envs()] == []


def _wheel(folder: Path, version: str, tag: str = TAG) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"sglang_kernel_cpu-{version}-{tag}-{tag}-linux_x86_64.whl"
    path.touch()
    return path


def test_the_kernel_wheel_is_the_newest_shipped_one_else_the_newest_built_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(envs, "run_step", lambda *a: pytest.fail("nothing may be built"))
    folder, built = tmp_path / "sglang-cpu", tmp_path / "home" / "envs" / "cpu-kernel-wheels"
    _wheel(built, "0.4.6")
    newest_built = _wheel(built, "0.4.7")
    _wheel(built, "0.4.9", tag="cp39")  # another Python's
    assert cpu_envs._kernel_wheel(folder, Path("python"), progress.silent) == newest_built
    shipped = _wheel(folder / "wheels", "0.4.6.post1")
    assert cpu_envs._kernel_wheel(folder, Path("python"), progress.silent) == shipped  # shipped wins


def test_without_a_kernel_wheel_its_build_sh_builds_one_once_or_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path / "home"))
    folder, built = tmp_path / "sglang-cpu", tmp_path / "home" / "envs" / "cpu-kernel-wheels"
    folder.mkdir()
    with pytest.raises(
        envs.EnvBuildError, match=rf"no SGLang CPU kernel wheel for {TAG} in .* set SGLPERF_SGLANG_CPU_DIR"
    ):
        cpu_envs._kernel_wheel(folder, Path("python"), progress.silent)
    (folder / "build.sh").write_text("")
    commands: list[list[str]] = []
    monkeypatch.setattr(envs, "run_step", lambda cmd, step, progress: commands.append(cmd))
    with pytest.raises(envs.EnvBuildError, match="produced no wheel in"):
        cpu_envs._kernel_wheel(folder, Path("python"), progress.silent)

    def build(cmd: list[str], step: str, progress: progress.Progress) -> None:
        commands.append(cmd)
        _wheel(Path(cmd[-1]), "0.4.6.post1")

    monkeypatch.setattr(envs, "run_step", build)
    said: list[str] = []
    assert (
        cpu_envs._kernel_wheel(folder, Path("python"), said.append)
        == built / f"sglang_kernel_cpu-0.4.6.post1-{TAG}-{TAG}-linux_x86_64.whl"
    )
    assert commands[-1] == ["bash", str(folder / "build.sh"), "python", str(built)]
    assert said == [f"  building the SGLang CPU kernel wheel with {folder / 'build.sh'} (10-15 min on 2 cores, once)"]


def _fake_base(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, failing: str | None = None) -> list[str]:
    """The release environment and the shared torch taken as built; each step recorded instead of run."""
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path / "home"))
    base = envs.env_for("0.5.23")
    monkeypatch.setattr(envs, "ensure_env", lambda version, progress: base)
    (base.path / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    monkeypatch.setattr(envs, "ensure_torch_env", lambda progress: tmp_path / "torch-site")
    commands: list[str] = []

    def run(cmd: list[str], step: str, progress: progress.Progress) -> None:
        commands.append(" ".join(cmd))
        if "venv" in cmd:
            (Path(cmd[-1]) / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
        if step == failing:  # after its work: what it left is removed
            raise envs.EnvBuildError(f"{step} failed (exit 1):\nno")

    monkeypatch.setattr(envs, "run_step", run)
    return commands


def test_a_torch_native_cpu_environment_sees_its_release_and_torch_and_holds_the_stand_in(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    commands = _fake_base(monkeypatch, tmp_path)
    said: list[str] = []
    env = cpu_envs.ensure_cpu_env("0.5.23", said.append, kernel="torch-native")
    site = env.path / "lib" / "python3.11" / "site-packages"
    assert commands == [f"{sys.executable} -m venv {env.path}"]  # pip inside: no uv
    base_site = envs.env_for("0.5.23").path / "lib" / "python3.11" / "site-packages"
    assert (site / "zz_sglperf_base.pth").read_text() == f"{base_site}\n{tmp_path / 'torch-site'}\n"
    assert (site / "sgl_kernel" / "__init__.py").read_text() == cpu_envs.CPU_KERNEL_STANDIN.read_text()
    assert not (site / "sglperf_cpu_shim.py").exists()
    assert (env.path / ".sglperf-kernel").read_text() == "torch-native stand-in\n"
    assert cpu_envs.cpu_env_ready(env)
    assert said == [
        f"building SGLang 0.5.23 CPU environment in {env.path} (kernel: torch-native stand-in)",
        "SGLang 0.5.23 CPU environment ready (torch-native stand-in)",
    ]
    (env.path / ".sglperf-kernel").write_text(f"{cpu_envs.CPU_SHIM}\n")  # another recipe's source
    assert not cpu_envs.cpu_env_ready(env)
    (env.path / ".sglperf-kernel").unlink()
    assert not cpu_envs.cpu_env_ready(env)


def test_a_cpu_environment_whose_build_fails_is_removed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_base(monkeypatch, tmp_path, failing="create venv")
    assert not cpu_envs.cpu_env_for("0.5.23", "torch-native").path.exists()
    with pytest.raises(envs.EnvBuildError, match="create venv failed"):
        cpu_envs.ensure_cpu_env("0.5.23", kernel="torch-native")
    assert not cpu_envs.cpu_env_for("0.5.23", "torch-native").path.exists()


def test_a_cpu_that_cannot_run_the_kernel_is_refused_before_anything_is_built(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    commands = _fake_base(monkeypatch, tmp_path)
    monkeypatch.setenv(cpu_features.CPU_FLAGS_ENV, "fpu sse avx2 fma")
    with pytest.raises(envs.EnvBuildError, match="this CPU lacks avx512f"):
        cpu_envs.ensure_cpu_env("0.5.23")
    assert commands == [] and not (tmp_path / "home" / "envs" / "sglang-0.5.23-cpu").exists()
