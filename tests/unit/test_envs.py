"""`sglperf.sglang.envs`: the pure parts (requirement filtering, paths); nothing is built or downloaded.
The CPU environments built on them: test_cpu_envs.py; this CPU's flags and kind: test_cpu_features.py."""

from __future__ import annotations

import errno
import importlib.util
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from sglperf.model import progress
from sglperf.sglang import envs

METADATA = """\
Metadata-Version: 2.4
Name: sglang
Version: 0.5.23
Requires-Python: >=3.10
Requires-Dist: aiohttp
Requires-Dist: transformers==4.57.1
Requires-Dist: outlines[serve]==0.1.11
Requires-Dist: Pillow>=10; python_version >= "3.8"
Requires-Dist: uvloop; sys_platform != "win32"
Requires-Dist: pywin32; sys_platform == "win32"
Requires-Dist: legacy-backport; python_version < "3"
Requires-Dist: torch==2.9.1
Requires-Dist: torchvision
Requires-Dist: torchao==0.9.0
Requires-Dist: torch_memory_saver==0.0.9
Requires-Dist: flashinfer_python==0.5.3
Requires-Dist: flashinfer-cubin==0.5.3
Requires-Dist: sgl-kernel==0.3.16
Requires-Dist: sglang-kernel==0.1.0
Requires-Dist: nvidia-cutlass-dsl>=4.2.1
Requires-Dist: nvidia_nccl_cu12==2.27.3
Requires-Dist: cuda-python
Requires-Dist: cuda-bindings>=12
Requires-Dist: flash_attn>=2
Requires-Dist: deep_gemm
Requires-Dist: triton==3.4.0
Requires-Dist: decord2
Requires-Dist: xgrammar==0.1.25
Requires-Dist: torchdata
Requires-Dist: pytest; extra == "test"
Requires-Dist: sglang[srt]; extra == "all"
Provides-Extra: test
Provides-Extra: all

A long description that mentions Requires-Dist: should-not-count in its body.
"""


def test_light_requirements_keep_pins_and_drop_gpu_only_extras_and_foreign_platforms() -> None:
    assert envs.light_requirements(METADATA) == [
        "aiohttp",
        "transformers==4.57.1",
        "outlines==0.1.11",  # the extra only pulls GPU packages
        "Pillow>=10",  # marker true here, then dropped
        "uvloop",
        "xgrammar==0.1.25",
        "torchdata",  # "torch" is an exact name, not a prefix
    ]


def test_light_requirements_of_metadata_without_requirements() -> None:
    assert envs.light_requirements("Metadata-Version: 2.1\nName: x\nVersion: 1\n") == []


@pytest.mark.parametrize(
    "name",
    [
        "torch",
        "Torch",
        "flashinfer_python",
        "flashinfer-jit-cache",
        "sgl-kernel",
        "sgl_kernel",
        "sglang-kernel",
        "nvidia-cudnn-cu12",
        "nvidia_nccl_cu12",
        "cuda-python",
        "cuda-bindings",
        "flash-attn",
        "flash_attn_3",
        "deep-ep",
        "deep_gemm",
        "triton",
        "torch.memory.saver",
        "av",
        "decord",
    ],
)
def test_gpu_only_packages(name: str) -> None:
    assert envs.is_gpu_only(name)


@pytest.mark.parametrize(
    "name", ["sglang", "transformers", "torchdata", "nvidia", "cudapy", "avro", "tritonclient", "numpy", "kernels-x"]
)
def test_packages_resolution_needs_are_not_gpu_only(name: str) -> None:
    assert not envs.is_gpu_only(name)


def test_home_honours_sglperf_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path / "cache"))
    assert envs.home() == tmp_path / "cache"


def test_home_defaults_to_the_user_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SGLPERF_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert envs.home() == tmp_path / ".cache" / "sglperf"


def test_env_for_places_each_release_under_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path))
    assert envs.envs_root() == tmp_path / "envs"
    env = envs.env_for("0.5.23")
    assert env == envs.SGLangEnv("0.5.23", tmp_path / "envs" / "sglang-0.5.23")
    assert env.python == tmp_path / "envs" / "sglang-0.5.23" / "bin" / "python"
    assert envs.env_for("0.5.13").path != env.path


def test_an_environment_is_ready_only_with_this_recipes_marker(tmp_path: Path) -> None:
    env = envs.SGLangEnv("0.5.23", tmp_path / "sglang-0.5.23")
    assert not env.ready
    env.path.mkdir()
    whole(env.path, tmp_path / "torch-site")  # its interpreter and the shared torch, as a build leaves them
    marker = env.path / ".sglperf-ready"
    marker.write_text("stale\n")
    assert not env.ready
    marker.write_text(envs.recipe_digest("0.5.23") + "\n")
    assert env.ready
    assert not envs.SGLangEnv("0.5.13", env.path).ready  # another release's recipe


def whole(path: Path, torch_site: Path) -> None:
    """What a build leaves besides its marker: the venv's interpreter (a link to this one) and the .pth naming
    the shared torch's site-packages, with torch in it."""
    (path / "bin").mkdir(parents=True, exist_ok=True)
    (path / "bin" / "python").symlink_to(sys.executable)
    (torch_site / "torch").mkdir(parents=True, exist_ok=True)
    site = path / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True, exist_ok=True)
    (site / envs.TORCH_PTH).write_text(f"{torch_site}\n")


def test_an_environment_whose_interpreter_or_torch_is_gone_is_not_ready(tmp_path: Path) -> None:
    """Issue 53's audit: an environment whose shared torch (or interpreter) was gone stayed "ready" on its
    marker alone, and nothing repaired it: every preflight failed importing SGLang."""
    env = envs.SGLangEnv("0.5.23", tmp_path / "sglang-0.5.23")
    env.path.mkdir()
    whole(env.path, tmp_path / "torch-site")
    (env.path / ".sglperf-ready").write_text(envs.recipe_digest("0.5.23") + "\n")
    assert env.ready and env.problem is None
    (tmp_path / "torch-site" / "torch").rmdir()
    assert not env.ready and f"the shared torch it uses is gone ({tmp_path / 'torch-site'})" in str(env.problem)
    (tmp_path / "torch-site" / "torch").mkdir()
    assert env.ready
    (env.path / "bin" / "python").unlink()
    (env.path / "bin" / "python").symlink_to(tmp_path / "removed-python3.11")
    assert not env.ready and "its interpreter" in str(env.problem)


def test_a_broken_environment_is_rebuilt_saying_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path))
    env = ready_env("0.5.23")
    shutil.rmtree(tmp_path / "torch-site")
    built: list[str] = []

    def download(version: str, folder: Path, progress: object) -> Path:
        built.append(version)
        raise envs.EnvBuildError("stop here: the rebuild began")

    monkeypatch.setattr(envs, "_download_wheel", download)
    said: list[str] = []
    with pytest.raises(envs.EnvBuildError, match="the rebuild began"):
        envs.ensure_env("0.5.23", said.append)
    assert built == ["0.5.23"]
    gone = f"the shared torch it uses is gone ({tmp_path / 'torch-site'})"
    assert said == [f"SGLang 0.5.23 environment in {env.path}: {gone}; rebuilding it"]


def test_a_build_that_runs_out_of_disk_is_one_error_and_leaves_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Issue 53's audit: a full disk during a build was a traceback, and ended a walk (which goes on past a
    release that cannot be built: an EnvBuildError)."""
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path / "home"))
    wheel = tmp_path / "sglang-0.5.23-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sglang-0.5.23.dist-info/METADATA", METADATA)
    torch_site = tmp_path / "torch-site"
    (torch_site / "torch").mkdir(parents=True)
    monkeypatch.setattr(envs, "_download_wheel", lambda version, folder, progress: wheel)
    monkeypatch.setattr(envs, "ensure_torch_env", lambda progress: torch_site)
    monkeypatch.setattr(envs, "uv_executable", lambda: None)

    def run(cmd: list[str], step: str, progress: object) -> None:
        if "venv" in cmd:
            (Path(cmd[-1]) / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
        if step == "install sglang wheel":
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(envs, "run_step", run)
    with pytest.raises(envs.EnvBuildError) as raised:
        envs.ensure_env("0.5.23")
    assert str(raised.value) == (
        f"building the SGLang 0.5.23 environment in {envs.env_for('0.5.23').path} failed: "
        "No space left on device (ENOSPC)"
    )
    assert not envs.env_for("0.5.23").path.exists()  # half an environment is worse than none


def test_recipe_digest_changes_with_what_goes_into_an_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    digest = envs.recipe_digest("0.5.23")
    assert digest == envs.recipe_digest("0.5.23") and len(digest) == 16
    assert envs.recipe_digest("0.5.13") != digest
    monkeypatch.setattr(envs, "RECIPE_VERSION", envs.RECIPE_VERSION + "x")
    assert envs.recipe_digest("0.5.23") != digest
    monkeypatch.undo()
    monkeypatch.setattr(envs, "GPU_ONLY_PATTERNS", (*envs.GPU_ONLY_PATTERNS, "newkernel"))
    assert envs.recipe_digest("0.5.23") != digest


def ready_env(version: str) -> envs.SGLangEnv:
    """A managed environment folder marked ready for this recipe (nothing installed in it but its
    interpreter and the shared torch's .pth, with torch beside it under SGLPERF_HOME/torch-site)."""
    env = envs.env_for(version)
    env.path.mkdir(parents=True)
    whole(env.path, envs.home() / "torch-site")
    (env.path / ".sglperf-ready").write_text(envs.recipe_digest(version) + "\n")
    return env


def forbid_building(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("nothing may be downloaded, built or run")

    for name in ("ensure_torch_env", "run_step", "_download_wheel", "_build"):
        monkeypatch.setattr(envs, name, no_build)


@pytest.mark.parametrize("version", ["0.5.23", "0.5.13", "1.0.0rc1", "0.5.23.post1"])
def test_release_versions_are_accepted(version: str) -> None:
    assert envs.check_version(version) == version


@pytest.mark.parametrize(
    "version", ["v0.5.23", "0.5.023", " 0.5.23", "0.5.23+cu12", "../0.5.23", "0.5/23", "latest", ""]
)
def test_anything_but_a_plain_release_is_refused_before_naming_a_folder(
    version: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path))
    forbid_building(monkeypatch)
    with pytest.raises(envs.BadVersionError, match="not a release version"):
        envs.env_for(version)
    with pytest.raises(envs.BadVersionError):
        envs.ensure_env(version)
    assert list(tmp_path.iterdir()) == []


def test_a_ready_environment_is_reused_without_building(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path))
    forbid_building(monkeypatch)
    env = ready_env("0.5.23")
    assert envs.ensure_env("0.5.23") == env


def test_list_envs_skips_lock_files_foreign_names_and_plain_files(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path))
    assert envs.list_envs() == []  # no envs folder at all
    ready_env("0.5.13")
    (tmp_path / "envs" / "sglang-0.5.23").mkdir()  # half built: listed, not ready
    (tmp_path / "envs" / "sglang-0.5.13.lock").write_text("")
    (tmp_path / "envs" / "sglang-mine").mkdir()
    (tmp_path / "envs" / "sglang-0.5.9").write_text("a file, not an environment")
    (tmp_path / "envs" / "torch-2.14.1").mkdir()
    listed = envs.list_envs()
    assert [e.version for e in listed] == ["0.5.13", "0.5.23"]
    assert [e.ready for e in listed] == [True, False]


def test_only_folders_directly_under_the_cache_are_ever_deleted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path / "home"))
    outside = tmp_path / "precious"
    outside.mkdir()
    with pytest.raises(envs.EnvBuildError, match="refusing to delete"):
        envs.remove_env_folder(outside)
    nested = tmp_path / "home" / "envs" / "sglang-0.5.23" / "lib"
    nested.mkdir(parents=True)
    with pytest.raises(envs.EnvBuildError, match="refusing to delete"):
        envs.remove_env_folder(nested)
    with pytest.raises(envs.EnvBuildError, match="refusing to delete"):
        envs.remove_env_folder(tmp_path / "home" / "envs" / "sglang-0.5.23" / ".." / ".." / ".." / "precious")
    assert outside.is_dir() and nested.is_dir()
    envs.remove_env_folder(tmp_path / "home" / "envs" / "sglang-0.5.23")
    assert not (tmp_path / "home" / "envs" / "sglang-0.5.23").exists()


def test_site_packages_of_a_venv(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    assert envs.site_packages(tmp_path) == site
    with pytest.raises(envs.EnvBuildError, match="no site-packages under"):
        envs.site_packages(tmp_path / "empty")


def test_choose_python_explicit_choices(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert envs.choose_python("/opt/sglang/bin/python") == "/opt/sglang/bin/python"
    with pytest.raises(ValueError, match="not both"):
        envs.choose_python("/opt/sglang/bin/python", "0.5.23")
    monkeypatch.setattr(envs, "ensure_env", lambda version, progress: envs.SGLangEnv(version, tmp_path / version))
    assert envs.choose_python(sglang_version="0.5.23") == str(tmp_path / "0.5.23" / "bin" / "python")


def test_choose_python_is_this_interpreter_when_it_has_sglang(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path))
    ready_env("0.5.23")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if name == "sglang" else None)
    assert envs.choose_python() == sys.executable


def test_choose_python_falls_back_to_the_newest_ready_release(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(envs.EnvBuildError, match=r"no SGLang in this interpreter .* no managed SGLang environment"):
        envs.choose_python()
    ready_env("0.5.9")
    newest = ready_env("0.5.13")  # newer by version, older as a string
    (tmp_path / "envs" / "sglang-0.5.23").mkdir()  # not ready: never chosen
    said: list[str] = []
    assert envs.choose_python(progress=said.append) == str(newest.python)
    assert said == [f"no SGLang in {sys.executable}: using the managed SGLang 0.5.13 ({newest.python})"]


def test_uv_excludes_what_the_torch_environment_provides_for_the_gpu_only(tmp_path: Path) -> None:
    # Not numpy or jinja2: a release that pins its own gets them in its own environment, as with pip.
    for name in ("torch-2.14.1", "nvidia_cublas-13.4.1.3", "triton-3.6.0", "numpy-2.3.5", "jinja2-3.1.6"):
        (tmp_path / f"{name}.dist-info").mkdir()
    assert envs.torch_env_gpu_only(tmp_path) == ["nvidia_cublas", "torch", "triton"]


def _record_installs(monkeypatch: pytest.MonkeyPatch, uv_fails: bool) -> list[list[str]]:
    calls: list[list[str]] = []

    def run(cmd: list[str], step: str, progress: progress.Progress) -> None:
        calls.append(cmd)
        if uv_fails and "(uv)" in step:
            raise envs.EnvBuildError(f"{step} failed (exit 2):\nerror: no index could be reached")

    monkeypatch.setattr(envs, "run_step", run)
    return calls


@pytest.mark.parametrize("uv_fails", [False, True])
def test_light_requirements_go_through_uv_with_excludes_and_pip_when_uv_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, uv_fails: bool
) -> None:
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path))
    env = envs.env_for("0.5.23")
    env.path.mkdir(parents=True)
    torch_site = tmp_path / "torch-site"
    (torch_site / "torch-2.14.1.dist-info").mkdir(parents=True)
    calls = _record_installs(monkeypatch, uv_fails)
    said: list[str] = []
    envs.install_light(env, ["transformers==5.19.0"], torch_site, "/bin/uv", said.append)
    assert calls[0][:4] == ["/bin/uv", "pip", "install", "-q"]
    assert calls[0][-1] == "transformers==5.19.0"
    assert (env.path / "uv-excludes.txt").read_text() == "torch\n"
    if uv_fails:
        pip = [sys.executable, "-m", "pip", "--python", str(env.python), "install", "-q", "transformers==5.19.0"]
        assert calls[1] == pip
        assert said == ["  uv could not install them (error: no index could be reached); building the rest with pip"]
    else:
        assert len(calls) == 1


def _build_with_fake_installers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, uv: str | None, failing: str | None
) -> tuple[list[str], list[str], envs.SGLangEnv]:
    """``envs._build`` of a release, each command recorded instead of run; the step named ``failing`` fails."""
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(envs, "uv_executable", lambda: uv)
    env = envs.env_for("0.5.23")
    commands: list[str] = []

    def run(cmd: list[str], step: str, progress: progress.Progress) -> None:
        commands.append(" ".join(cmd))
        if step == failing:
            raise envs.EnvBuildError(f"{step} failed (exit 2):\nerror: uv refused")
        if "venv" in cmd:
            (Path(cmd[-1]) / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
            (Path(cmd[-1]) / "bin").mkdir(exist_ok=True)
            (Path(cmd[-1]) / "bin" / "python").symlink_to(sys.executable)  # what a venv's creation leaves

    monkeypatch.setattr(envs, "run_step", run)
    wheel = tmp_path / "sglang-0.5.23-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sglang-0.5.23.dist-info/METADATA", METADATA)
    torch_site = tmp_path / "torch-site"
    (torch_site / "torch").mkdir(parents=True)
    said: list[str] = []
    envs._build(env, wheel, torch_site, said.append)
    return commands, said, env


def test_the_uv_installed_with_sglperf_is_found_wherever_its_binary_went(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A `pip install --user` (or an interpreter symlinked from elsewhere) puts no uv beside sys.executable,
    # and ~/.local/bin is often not on PATH: the uv package itself knows where its binary is.
    from uv import find_uv_bin

    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python3"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert envs.uv_executable() == find_uv_bin()


def test_without_the_uv_package_uv_on_path_or_none(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "uv", None)  # sglperf installed with --no-deps: `import uv` fails
    monkeypatch.setenv("PATH", str(tmp_path))
    assert envs.uv_executable() is None
    (tmp_path / "uv").write_text("#!/bin/sh\n")
    (tmp_path / "uv").chmod(0o755)
    assert envs.uv_executable() == str(tmp_path / "uv")


def test_a_build_with_uv_makes_the_venv_and_installs_the_wheel_with_uv(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    commands, said, env = _build_with_fake_installers(monkeypatch, tmp_path, "/bin/uv", None)
    assert commands[0] == f"/bin/uv venv -q --python {sys.executable} {env.path}"
    assert commands[1].startswith("/bin/uv pip install -q --no-deps --python ")
    assert commands[2].startswith("/bin/uv pip install -q --python ") and "--excludes" in commands[2]
    assert len(commands) == 3 and not any("uv could not" in line for line in said)
    assert said[-1].startswith("  compile bytecode: ")  # uv wrote none
    assert env.ready


def test_an_environments_bytecode_is_compiled_and_a_file_that_does_not_compile_stays_source(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "fine.py").write_text("X = 1\n")
    (site / "pkg" / "py2.py").write_text('print "old"\n')
    said: list[str] = []
    envs.compile_bytecode(site, said.append)
    assert [p.name.split(".")[0] for p in (site / "pkg" / "__pycache__").iterdir()] == ["fine"]
    assert said[-1] == "  compile bytecode: 1 file did not compile and stay source (exit 1)"


def test_a_compileall_that_fails_itself_leaves_the_environment_as_source_and_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(sys, "executable", "/bin/false")
    said: list[str] = []
    envs.compile_bytecode(tmp_path, said.append)
    assert said[-1] == "  compile bytecode: compileall failed (exit 1: no message); modules stay source"


def test_a_build_without_uv_is_all_pip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    commands, said, env = _build_with_fake_installers(monkeypatch, tmp_path, None, None)
    pip = f"{sys.executable} -m pip --python {env.python} install -q"
    assert commands == [
        f"{sys.executable} -m venv {env.path}",
        f"{pip} --no-deps {tmp_path / 'sglang-0.5.23-py3-none-any.whl'}",
        f"{pip} {' '.join(envs.light_requirements(METADATA))}",
    ]
    assert not any("uv" in line for line in said)


@pytest.mark.parametrize("failing", ["create venv (uv)", "install sglang wheel (uv)"])
def test_once_uv_fails_the_rest_of_the_build_is_pip_with_one_line_saying_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, failing: str
) -> None:
    commands, said, env = _build_with_fake_installers(monkeypatch, tmp_path, "/bin/uv", failing)
    failed_at = max(i for i, cmd in enumerate(commands) if cmd.startswith("/bin/uv"))
    after = commands[failed_at + 1 :]
    assert after and not any(cmd.startswith("/bin/uv") for cmd in after), commands  # uv is tried once, not again
    assert after[-1].startswith(f"{sys.executable} -m pip --python {env.python} install -q ")
    fell_back = [line for line in said if "uv could not" in line]
    assert len(fell_back) == 1 and fell_back[0].endswith("(error: uv refused); building the rest with pip")
    assert env.ready
