"""The deprecation ledger against real releases: what it ships is what the releases' own parsers declare
(ci/refresh-deprecations.py --check, the documented command), and a flag 0.5.20 deleted is answered on
0.5.23 with the replacement 0.5.14-0.5.19 named, in one line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from sglperf.sglang.deprecations import DeprecationLedger

from ..support.project import ROOT, SglangPython, one_24gb_gpu_deployment

SGLPERF = str(Path(sys.executable).with_name("sglperf"))


def test_the_shipped_ledger_holds_what_a_release_declares(sglang_python: SglangPython) -> None:
    python = sglang_python("0.5.19")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "ci" / "refresh-deprecations.py"), "--check", "0.5.19"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = re.search(r"(\d+) deprecations in SGLang 0.5.19: 0 not in the ledger", proc.stdout)
    assert found and int(found.group(1)) >= 20, proc.stdout
    # Truth from the release's source, not from the parser the check itself read.
    source = next(Path(python).parent.parent.glob("lib/python3*/site-packages/sglang/srt/server_args.py")).read_text()
    declared = re.search(r'"--mamba-scheduler-strategy",.*?new_flag="([^"]+)"', source, re.DOTALL)
    assert declared is not None
    entry = DeprecationLedger.shipped().get("--mamba-scheduler-strategy")
    assert entry is not None and entry.replacement == declared.group(1) == "--mamba-radix-cache-strategy"


def test_a_flag_the_release_deleted_is_answered_with_the_replacement_older_releases_named(
    sglang_python: SglangPython, tmp_path: Path
) -> None:
    sglang_python("0.5.23")
    path = tmp_path / "old-flags.toml"
    path.write_text(
        one_24gb_gpu_deployment(
            str(ROOT / "models" / "tiny-qwen3" / "config.json"),
            f"""\
[[variants]]
id = "old-spelling"
flags = ["--piecewise-cuda-graph-max-tokens", "4096"]

[[workloads]]
id = "chat"
prompts = "{ROOT / "data" / "prompts" / "chat.jsonl"}"
output_len = 16
concurrency = [1]
""",
        )
    )
    proc = subprocess.run(
        [SGLPERF, "preflight", str(path), "--sglang-version", "0.5.23"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=900,
    )
    assert proc.returncode != 0
    line = next((x for x in proc.stdout.splitlines() if "--piecewise-cuda-graph-max-tokens is" in x), "")
    assert "is not accepted by SGLang 0.5.23" in line and "replacement: --cuda-graph-max-bs-prefill" in line, (
        proc.stdout
    )
    assert "(SGLang 0.5.14-0.5.19 said \"'--piecewise-cuda-graph-max-tokens' is deprecated" in line
    assert "Traceback" not in proc.stdout + proc.stderr
