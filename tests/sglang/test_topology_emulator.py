"""A [topology] on a GPU runner, through the real sglang-router in front of emulator servers (issue 56).

Llama-3.1-8B on a simulated 2 x L40S runner: SGLang 0.5.23 captures the decode graph up to batch 32 on one
L40S, and the workload keeps 64 requests in flight. One server would decode eager; two replicas behind a round
robin router each run 32, covered. Preflight says so per worker; the live tier starts both replicas (each on a
GPU of its own), checks each worker's /server_info, measures through the router, and flushes every worker's
cache before each round (the emulator counts flushes).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from sglperf.results import folder as results_folder
from sglperf.runtime import gpus

from ..support.emulator_runs import FAST
from ..support.project import ROOT, SGLPERF, SglangPython
from ..support.quiet_host import QUIET_WAIT

LLAMA = ROOT / "tests" / "data" / "hf-configs" / "Llama-3.1-8B-Instruct" / "config.json"
BODY = f"""\
[model]
key = "llama-3.1-8b-instruct"
served_path = "/models/llama-3.1-8b-instruct"
config = "{LLAMA}"

[runner]
name = "l40s-x2"
gpu_count = 2
gpu_name = "NVIDIA L40S"
compute_capability = "8.9"
memory_gib = 48

[launch]
tp_size = 1

[expect]
decode_cuda_graph = true

[[variants]]
id = "defaults"

[[workloads]]
id = "decode-chat"
prompts = "{ROOT / "data" / "prompts" / "chat.jsonl"}"
output_len = 16
concurrency = [64]
warmup = 1
repeats = 4
"""
REPLICAS = '\n[topology]\nroles = [{ name = "replica", instances = 2 }]\n'


def _deployment(folder: Path, name: str, topology: str) -> Path:
    path = folder / "deployments" / f"{name}.toml"  # where the plugin collects deployment files
    path.parent.mkdir(exist_ok=True)
    path.write_text(BODY.replace("\n[expect]", topology + "\n[expect]"))
    return path


def _emulated(deployment: Path, python: str, results: Path) -> str:
    """`pytest DEPLOYMENT --emulator --update-baselines` beside the file, as a user runs it; its output, after
    checking it passed."""
    folder = deployment.parent.parent
    proc = subprocess.run(
        [
            str(Path(SGLPERF).with_name("pytest")),
            str(deployment),
            f"--sglang-python={python}",
            "--emulator",
            f"--emulator-config={json.dumps(FAST)}",
            f"--baselines-dir={folder / 'baselines'}",
            f"--results-dir={results}",
            "--update-baselines",
            "-p",
            "no:cacheprovider",
            "-rA",
            QUIET_WAIT,
        ],
        capture_output=True,
        text=True,
        cwd=folder,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    return out


def test_preflight_holds_each_replica_to_its_share_of_the_batch(sglang_python: SglangPython, tmp_path: Path) -> None:
    python = sglang_python("0.5.23")
    one = _deployment(tmp_path, "one", "")
    two = _deployment(tmp_path, "two", REPLICAS)
    verdicts = {}
    for path in (one, two):
        proc = subprocess.run(
            [SGLPERF, "preflight", str(path), "--sglang-python", python, "--json"],
            capture_output=True,
            text=True,
            timeout=900,
        )
        verdicts[path.stem] = next(r for r in json.loads(proc.stdout) if r["intent"] == "decode_cuda_graph")
    one = verdicts["one"]
    assert one["status"] == "fail" and "below the workload's 64" in one["detail"], one
    assert verdicts["two"]["variant"] == "defaults.replica"
    assert verdicts["two"]["status"] == "pass", verdicts["two"]
    assert "covers decode-chat at concurrency 64 (batch 32: 64 in flight over 2 workers)" in verdicts["two"]["detail"]


@pytest.mark.quiet_host
def test_two_emulated_replicas_behind_the_router_are_checked_and_measured(
    sglang_python: SglangPython, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The run simulates its runner's GPUs itself; another test of this xdist worker may have left its own.
    monkeypatch.delenv(gpus.SIMULATED_ENV, raising=False)
    path = _deployment(tmp_path, "two", REPLICAS)
    results = tmp_path / "results"
    out = _emulated(path, sglang_python("0.5.23"), results)
    assert "2 of 2 workers healthy behind the router" in out
    assert "PASSED" in out and "two-defaults.replica-decode_cuda_graph-live" in out
    (record,) = results_folder.collect(results).measurements
    assert record.key == "two-defaults.replica-decode-chat-c64"
    # Each replica decoded its share: batches up to 32, never the 64 in flight through the router.
    logs = sorted((results / "servers").glob("two-defaults-replica-*.log"))
    assert len(logs) == 2
    for log in logs:
        running = [int(n) for n in re.findall(r"#running-req: (\d+)", log.read_text())]
        assert running and 0 < max(running) <= 32, (log.name, max(running, default=None))


PD = """
[topology]
roles = [
  { name = "prefill", kind = "prefill", expect = { decode_cuda_graph = false } },
  { name = "decode", kind = "decode", expect = { decode_cuda_graph = true } },
]
"""


@pytest.mark.quiet_host
def test_prefill_and_decode_emulated_behind_the_router_in_pd_mode(
    sglang_python: SglangPython, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The router in PD mode, each prefill server with the bootstrap port sglperf chose, each role judged on its
    own server: SGLang's role rule turns the prefill server's decode graph off. The emulator's numbers say
    nothing of PD (it transfers no KV cache): only that the path runs is asserted."""
    monkeypatch.delenv(gpus.SIMULATED_ENV, raising=False)
    deployment = _deployment(tmp_path, "pd", PD)
    # The roles say which graph each has; one decode server runs the whole batch: 16, within the 32 an L40S
    # captures (64 would decode eager).
    text = deployment.read_text().replace("[expect]\ndecode_cuda_graph = true\n", "", 1)
    deployment.write_text(text.replace("concurrency = [64]", "concurrency = [16]"))
    results = tmp_path / "results"
    out = _emulated(deployment, sglang_python("0.5.23"), results)
    # Both roles' items on one start of the topology (it stops after the last role's item only).
    (router,) = [ln for ln in out.splitlines() if "sglang_router.launch_router" in ln]
    prefill_port = re.search(r"--prefill (\S+) (\d+)", router)
    assert prefill_port is not None and "--pd-disaggregation" in router and "--decode " in router, router
    prefill_log = (results / "servers" / "pd-defaults-prefill-0.log").read_text()
    head = prefill_log.splitlines()[0]
    assert f"--disaggregation-bootstrap-port {prefill_port.group(2)} " in head, (router, head)  # the router was told
    for item in ("pd-defaults.prefill-decode_cuda_graph-live", "pd-defaults.decode-decode_cuda_graph-live"):
        assert f"PASSED {item}" in out or f"PASSED deployments/pd.toml::defaults::{item}" in out, item
    (record,) = results_folder.collect(results).measurements
    assert record.key == "pd-defaults.decode-decode-chat-c16"
