"""Emulator servers the meter is measured against, with a timing whose truth is exact (noise_cv=0),
and the prompt sets and workloads the meter tests send them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from sglperf.model.prompts import Message, Prompt, PromptSet
from sglperf.model.workload import Workload
from sglperf.runtime.server import free_port
from sglperf.testing.emulator.config import CONFIG_ENV

from .project import ROOT

SPEC_STEPS, ACCEPT_PROB = 3, 0.7
SPEC_ARGV = (
    "--speculative-algorithm",
    "NEXTN",
    "--speculative-num-steps",
    str(SPEC_STEPS),
    "--speculative-num-draft-tokens",
    str(SPEC_STEPS + 1),
    "--speculative-eagle-topk",
    "1",
)
STEP_S = 0.003
PREFILL_S_PER_TOKEN = 0.0001
OUTPUT_LEN = 128


class Emulators:
    """Emulator subprocesses; every one is killed at teardown."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, spec: bool = False, log: Path | None = None, **config: Any) -> str:
        """An emulator's URL once it is healthy; ``log``: where its stdout (SGLang-like batch lines) goes."""
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SGLPERF_EMULATOR")}
        env[CONFIG_ENV] = json.dumps(
            {
                "startup_s": 0.05,
                "noise_cv": 0.0,
                "decode_step_s": STEP_S,
                "prefill_s_per_token": PREFILL_S_PER_TOKEN,
                "accept_prob": ACCEPT_PROB,
                **config,
            }
        )
        with (self.tmp / f"emu{len(self.procs)}.err").open("wb") as err, open(log or os.devnull, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "sglperf.testing.emulator", "--port", str(port), *(SPEC_ARGV if spec else ())],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=err,
            )
        self.procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    return url
            except httpx.TransportError:
                pass
            assert proc.poll() is None, "emulator exited during startup"
            time.sleep(0.02)
        raise AssertionError("emulator did not become healthy")

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


def prompt_set(n: int) -> PromptSet:
    # 400-1000 bytes: 100-250 emulator prompt tokens, 10-25 ms of prefill
    prompts = tuple(
        Prompt(f"p{i}", (Message("user", f"Question {i}: " + "why is the sky blue? " * (19 + 5 * i)),))
        for i in range(n)
    )
    return PromptSet("test", Path("<test>"), prompts, "test")


def workload(api: str, **kw: Any) -> Workload:
    return Workload(
        **{"id": "w", "prompts": Path("<test>"), "output_len": OUTPUT_LEN, "warmup": 1, "repeats": 1, "api": api, **kw}
    )
