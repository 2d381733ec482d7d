"""How long a managed SGLang environment's light requirements take to install: with uv, and with pip.

A fresh machine (every new CI runner, a user's first `ci/preflight.sh`) builds one environment per
release before anything resolves. Most of a build is the release's light requirements (about fifty
packages at its own pins); the wheel itself and the shared torch environment are the same whichever
installer is used. Per release and installer: a fresh venv that sees the shared torch environment
through a .pth (as `sglperf.sglang.envs` lays it out), then `envs.install_light` as the build runs
it, timed. The first install of each installer uses an empty download cache of its own (the cold
case a new runner has); the second a warm one. Needs the shared torch environment already built
(`sglperf env build` of any release builds it). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from sglperf.sglang import envs

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table


def _requirements(version: str, folder: Path) -> list[str]:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"sglang=={version}", "-d", str(folder)],
        check=True,
        capture_output=True,
    )
    with zipfile.ZipFile(next(folder.glob("sglang-*.whl"))) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return envs.light_requirements(zf.read(meta).decode())


def _install(installer: str, version: str, requirements: list[str], torch_site: Path, tmp: Path) -> float:
    env = envs.SGLangEnv(version, tmp / f"{installer}-{version}-{time.monotonic_ns()}")
    subprocess.run([sys.executable, "-m", "venv", str(env.path)], check=True)
    (next(env.path.glob("lib/python*/site-packages")) / "zz_sglperf_torch.pth").write_text(f"{torch_site}\n")
    uv = envs.uv_executable() if installer == "uv" else None  # None: the build's own pip path
    started = time.monotonic()
    envs.install_light(env, requirements, torch_site, uv, lambda line: None)
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", nargs="+", default=["0.5.23", "0.5.13"], help="SGLang releases")
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    torch_site = envs.ensure_torch_env(lambda line: print(line, file=sys.stderr))
    if envs.uv_executable() is None:
        parser.error("uv is not installed beside this interpreter nor on PATH (ci/setup.sh installs it)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for version in args.versions:
            requirements = _requirements(version, tmp / f"wheel-{version}")
            times: dict[str, list[float]] = {}
            for installer in ("uv", "pip"):
                # Cold: download caches of their own, empty; warm: the same caches again.
                os.environ["UV_CACHE_DIR"] = str(tmp / f"uv-cache-{version}")
                os.environ["PIP_CACHE_DIR"] = str(tmp / f"pip-cache-{version}")
                times[installer] = [_install(installer, version, requirements, torch_site, tmp) for _ in range(2)]
                print(f"  {version} {installer}: {times[installer]}", file=sys.stderr)
            rows.append((version, len(requirements), times))
    command = _docs_table.command(__file__, argv)
    print(f"`{command}` ({os.cpu_count()} CPUs; a release's light requirements into a fresh venv)\n")
    print("| release | requirements | uv, cold cache | uv, warm | pip, cold cache | pip, warm |")
    print("|---|---:|---:|---:|---:|---:|")
    for version, count, times in rows:
        (uv_cold, uv_warm), (pip_cold, pip_warm) = times["uv"], times["pip"]
        print(f"| {version} | {count} | {uv_cold:.1f} s | {uv_warm:.1f} s | {pip_cold:.1f} s | {pip_warm:.1f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
