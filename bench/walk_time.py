"""Wall time of `sglperf upgrade-check DEPLOYMENT... --from A --to B --walk`: every final release between A
and B resolved in turn, and how many times SGLang was imported for it.

Cold: an empty preflight cache, so every release is imported and every variant resolved; with
``--cold-envs`` also an empty sglperf home, so the torch environment and every release's environment are
built first (downloads come from uv's and pip's caches as they are). Warm: the same command again. Several
deployments of one GPU model share one import per release (preflight.resolver.WorkerPool): bench/walk/ has
two more on qwen36's runner.

    .venv/bin/python bench/walk_time.py --from 0.5.13 --to 0.5.23 --cold-envs
    .venv/bin/python bench/walk_time.py --deployment deployments/qwen36.toml bench/walk/tiny-2xa6000.toml \
        bench/walk/mla-2xa6000.toml
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table

ROOT = Path(__file__).resolve().parent.parent


def _time(cmd: list[str], env: dict[str, str]) -> tuple[float, str, int]:
    """(wall seconds, the releases walked, how many times SGLang was imported)."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"upgrade-check failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    walked = next((ln for ln in proc.stdout.splitlines() if ln.startswith("Releases walked: ")), "")
    imports = sum(line.startswith("importing SGLang ") for line in proc.stderr.splitlines())
    return elapsed, walked.removeprefix("Releases walked: "), imports


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="from_version", default="0.5.13")
    parser.add_argument("--to", default="0.5.23")
    parser.add_argument("--deployment", nargs="+", default=["deployments/qwen36.toml"])
    parser.add_argument("--cold-envs", action="store_true", help="build every environment in an empty sglperf home")
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    sglperf = str(Path(sys.executable).with_name("sglperf"))
    cmd = [sglperf, "upgrade-check", *args.deployment, "--from", args.from_version, "--to", args.to, "--walk"]
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "SGLPERF_PREFLIGHT_CACHE": str(Path(tmp) / "cache")}
        if args.cold_envs:
            env["SGLPERF_HOME"] = str(Path(tmp) / "home")
        cold, walked, imports = _time(cmd, env)
        warm, _, warm_imports = _time(cmd, env)
    envs = "built in an empty sglperf home" if args.cold_envs else "already built"
    print(f"`sglperf {' '.join(cmd[1:])}`, {os.cpu_count()} cores, environments {envs}\n")
    print(f"Releases walked: {walked}\n")
    releases = len(walked.split(" -> "))
    print(f"{len(args.deployment)} deployment(s), {releases} releases\n")
    print("| run | wall s | SGLang imports |\n|---|---:|---:|")
    print(
        f"| cold ({'environments built, ' if args.cold_envs else ''}every release resolved) | {cold:.1f} | {imports} |"
    )
    print(f"| warm (served from the preflight cache) | {warm:.1f} | {warm_imports} |")
    return 0


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
