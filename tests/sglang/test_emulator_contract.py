"""The emulator's contract with real SGLang: the same probes against a real SGLang CPU server and the
emulator standing in for it, for a plain and a speculative (NEXTN) variant.

Each probe's answer is reduced to its shape (every key path with its JSON type) plus the invariants
the suite relies on (cumulative text, ids and completion_tokens; finish_reason only at the end;
speculative totals only in the final chunk; per-chunk logprobs adding up to usage). Any difference
fails unless ALLOWED lists it with its reason. sglperf's own meter and SGLang's bench_serving must
work against both sides without workarounds.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from sglperf.measure import meter
from sglperf.model.deployment_file import load
from sglperf.model.prompts import load_prompts
from sglperf.session import LiveOptions, LiveSession, PreflightSession
from sglperf.sglang import bench_client, cpu_features, metrics_catalogue
from sglperf.sglang.batch_log import parse_batch_lines
from sglperf.sglang.server_api import BENCH_SERVING_MODULES
from sglperf.testing.emulator.metrics import FAMILIES

from ..support.cpu_tier import (
    MARKER_ENV,
    ROOT,
    TINY_CPU,
    TINY_CPU_MTP,
    TINY_MODELS_ENV,
    cpu_setup,
    new_marker,
    restore_env,
)

pytestmark = [pytest.mark.needs_sglang, pytest.mark.quiet_host]

# (probe, key path prefix) -> why the emulator may differ there. Keep it short: each is a known gap.
ALLOWED = {
    ("server_info", "internal_states[]."): "a real server repeats every server arg inside internal_states[0]; "
    "the suite reads only its memory, graph and acceptance fields, which are compared below",
    ("server_info", "emulated"): "the emulator says it is one",
    ("server_info", "effective_source"): "the emulator names where its effective args came from",
    ("server_info", "flush_count"): "the emulator counts flushes for the suite's own tests",
    ("server_info", "emulator_config"): "the emulator's timing model",
    ("model_info", "embedding"): "SGLang's embedding-capability block; the suite reads architectures and "
    "has_image_understanding only",
    ("server_info", "args."): "the emulator serves the preflight's resolution (with --skip-tokenizer-init, on a "
    "folder holding config.json only), and a live server fills in fields at start-up; the live-vs-preflight "
    "drift item checks the fields intents read",
}
# /metrics label -> why the emulator's values may differ from the real server's.
METRICS_VALUES_DIFFER = {
    "model_name": "each side's served model name",
    "pid": "the process id of the scheduler (a gauge in prometheus multiprocess mode 'all')",
}
# The internal_states fields the suite reads, compared whatever ALLOWED says about the rest.
READ_STATE_FIELDS = ("memory_usage", "decode_cuda_graph_bs", "decode_cuda_graph_memory_gb", "last_gen_throughput")
# The plain case on whatever serves on this CPU (cpu_setup); NEXTN only with SGLang's CPU kernel.
CASES: dict[str, tuple[Path | None, str]] = {"plain": (None, "plain"), "nextn": (TINY_CPU_MTP, "nextn")}
NO_SPECULATIVE_WITHOUT_KERNEL = (
    "NEXTN needs SGLang's CPU kernel: without it SGLang 0.5.23 refuses speculative decoding on the CPU "
    '("EAGLE is not supported in decode attention backend torch_native")'
)


def shape(value: Any, path: str = "") -> set[str]:
    """Every key path of a JSON value with its type; lists as `path[]` (their elements' shapes merged)."""
    if isinstance(value, dict):
        out = {f"{path}: object"} if path else set()
        for key, item in value.items():
            out |= shape(item, f"{path}.{key}" if path else str(key))
        return out
    if isinstance(value, list):
        out = {f"{path}: list"}
        for item in value:
            out |= shape(item, f"{path}[]")
        return out
    kind = (
        "null"
        if value is None
        else "bool"
        if isinstance(value, bool)
        else "number"
        if isinstance(value, (int, float))
        else "str"
    )
    return {f"{path}: {kind}"}


def sse(response: httpx.Response) -> list[Any]:
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def probe_native(client: httpx.Client) -> dict[str, Any]:
    body = {
        "text": "the quick brown fox jumps over the lazy dog",
        "sampling_params": {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True},
        "stream": True,
    }
    with client.stream("POST", "/generate", json=body) as response:
        assert response.status_code == 200
        events = sse(response)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    metas = [c["meta_info"] for c in chunks]
    spec_keys = {k for m in metas for k in m if k.startswith("spec_")}
    invariants = {
        "text and output_ids cumulative": all(
            b["text"].startswith(a["text"]) and b["output_ids"][: len(a["output_ids"])] == a["output_ids"]
            for a, b in itertools.pairwise(chunks)
        ),
        "completion_tokens == len(output_ids)": all(
            c["meta_info"]["completion_tokens"] == len(c["output_ids"]) for c in chunks
        ),
        "16 tokens": metas[-1]["completion_tokens"] == 16,
        "finish_reason only at the end": all(m["finish_reason"] is None for m in metas[:-1])
        and metas[-1]["finish_reason"] == {"type": "length", "length": 16},
        "spec totals only in the final chunk": all(not k.startswith("spec_") for m in metas[:-1] for k in m),
        "spec_accept_length = completion_tokens / spec_verify_ct": "spec_verify_ct" not in metas[-1]
        or abs(metas[-1]["spec_accept_length"] - 16 / metas[-1]["spec_verify_ct"]) < 1e-6,
    }
    return {
        "first": shape(chunks[0]),
        "middle": set().union(*(shape(c) for c in chunks[1:-1])) if len(chunks) > 2 else set(),
        "final": shape(chunks[-1]),
        "spec keys": {f"{k}: present" for k in spec_keys},
        "invariants": {f"{k}: {v}" for k, v in invariants.items()},
    }


def probe_chat(client: httpx.Client, logprobs: bool) -> dict[str, Any]:
    body = {
        "model": "default",
        "messages": [{"role": "user", "content": "the quick brown fox jumps over the lazy dog"}],
        "max_tokens": 16,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "logprobs": logprobs,
    }
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        events = sse(response)
    assert events[-1] == "[DONE]"
    kinds: dict[str, set[str]] = {}
    sequence: list[str] = []
    counted = 0
    for event in events[:-1]:
        choices = event["choices"]
        if not choices:
            kind = "usage"
        elif "role" in choices[0]["delta"]:
            kind = "role"
        elif choices[0]["finish_reason"] is not None:
            kind = "finish"
        else:
            kind = "content"
        if not sequence or sequence[-1] != kind:
            sequence.append(kind)
        kinds.setdefault(kind, set()).update(shape(event))
        if logprobs and kind == "content":
            counted += len(event["choices"][0]["logprobs"]["content"])
    usage = events[-2].get("usage") or {}
    invariants = {"order": " ".join(sequence), "usage.completion_tokens": usage.get("completion_tokens")}
    if logprobs:
        invariants["per-chunk logprobs add up to usage"] = counted == usage.get("completion_tokens")
    return {**kinds, "invariants": {f"{k}: {v}" for k, v in invariants.items()}}


def probe_all(base_url: str) -> dict[str, dict[str, set[str]]]:
    with httpx.Client(base_url=base_url, timeout=60) as client:
        found: dict[str, dict[str, set[str]]] = {
            "health": {p: {f"status {client.get(p).status_code}"} for p in ("/health", "/health_generate")},
            "v1_models": {"body": shape(client.get("/v1/models").json())},
            "model_info": {"body": shape(client.get("/model_info").json())},
        }
        found["generate_stream"] = probe_native(client)
        found["chat_stream"] = probe_chat(client, logprobs=False)
        found["chat_stream_logprobs"] = probe_chat(client, logprobs=True)
        info = client.get("/server_info").json()
    state = info["internal_states"][0]
    found["server_info"] = {
        "top": {f"{k}: present" for k in info if k in ("version", "internal_states", *ALLOWED_TOP)},
        "args": {f"args.{k}: present" for k in info if k not in ("version", "internal_states", *ALLOWED_TOP)},
        "state": {f"internal_states[].{k}: present" for k in state if k not in READ_STATE_FIELDS},
        "state read": set().union(*(shape(state[k], f"state.{k}") for k in READ_STATE_FIELDS if k in state))
        | {f"state.{k}: missing" for k in READ_STATE_FIELDS if k not in state},
        "spec": {f"avg_spec_accept_length after traffic: {'avg_spec_accept_length' in state}"},
        "device": {f"device: {info.get('device')}"},
    }
    return found


ALLOWED_TOP = ("emulated", "effective_source", "flush_count", "emulator_config")


def scrape_metrics(base_url: str) -> str | None:
    """``/metrics``, or None when the server does not serve it (launched without --enable-metrics)."""
    response = httpx.get(base_url + "/metrics", timeout=60)
    return response.text if response.status_code == 200 else None


@dataclass
class Sides:
    real: dict[str, dict[str, set[str]]]
    emulator: dict[str, dict[str, set[str]]]
    real_url: str
    emulator_url: str
    models: Path
    python: str
    real_log: Path
    emulator_log: Path
    real_metrics: str | None  # /metrics after the probes; None: not served
    emulator_metrics: str | None


def _session(python: str, results: Path, emulator: bool) -> tuple[PreflightSession, LiveSession]:
    say = lambda m: print(m, file=sys.stderr)  # noqa: E731
    pre = PreflightSession(lambda: python, say)
    return pre, LiveSession(LiveOptions(emulator=emulator, results_dir=results, root=ROOT), pre, say)


@pytest.fixture(scope="module", params=list(CASES))
def sides(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sides]:
    setup = cpu_setup()
    python, models = setup.python, setup.models
    path, variant_id = CASES[request.param]
    if path is None:
        path = setup.deployment
    elif setup.kernel != "sgl-kernel":
        pytest.skip(f"{NO_SPECULATIVE_WITHOUT_KERNEL}, and this CPU {cpu_features.kernel_flags_missing()}")
    saved = {k: os.environ.get(k) for k in (TINY_MODELS_ENV, MARKER_ENV)}
    os.environ[TINY_MODELS_ENV] = str(models)
    os.environ[MARKER_ENV] = new_marker()
    deployment = load(path)
    variant = deployment.variant(variant_id)
    tmp = tmp_path_factory.mktemp(f"contract-{variant_id}")
    opened = [_session(python, tmp / "real", emulator=False), _session(python, tmp / "emulator", emulator=True)]
    try:
        real = opened[0][1].running(deployment, variant)
        emulated = opened[1][1].running(deployment, variant)
        assert not real.facts.emulated and real.facts.device == "cpu" and emulated.facts.emulated
        real_probes, real_metrics = probe_all(real.server.base_url), scrape_metrics(real.server.base_url)
        emulator_probes, emulator_metrics = (
            probe_all(emulated.server.base_url),
            scrape_metrics(emulated.server.base_url),
        )
        yield Sides(
            real_probes,
            emulator_probes,
            real.server.base_url,
            emulated.server.base_url,
            models / deployment.model.served_path.rsplit("/", 1)[-1],
            python,
            real.server.spec.log_path,
            emulated.server.spec.log_path,
            real_metrics,
            emulator_metrics,
        )
    finally:
        for pre, live in opened:
            live.close()
            pre.close()
        restore_env(saved)


def _unexplained(probe: str, real: set[str], emulated: set[str]) -> list[str]:
    lines = []
    for line in sorted(real ^ emulated):
        if any(probe == p and line.startswith(prefix) for p, prefix in ALLOWED):
            continue
        lines.append(f"{'real only' if line in real else 'emulator only'}: {line}")
    return lines


@pytest.mark.parametrize(
    "probe",
    ["health", "v1_models", "model_info", "generate_stream", "chat_stream", "chat_stream_logprobs", "server_info"],
)
def test_emulator_answers_like_real_sglang(sides: Sides, probe: str) -> None:
    problems = []
    for part in sorted(set(sides.real[probe]) | set(sides.emulator[probe])):
        real, emulated = sides.real[probe].get(part, set()), sides.emulator[probe].get(part, set())
        problems += [f"{part}: {line}" for line in _unexplained(probe, real, emulated)]
    assert not problems, f"{probe}: the emulator differs from real SGLang 0.5.23:\n" + "\n".join(problems)


def test_emulator_batch_lines_read_like_real_sglang(sides: Sides) -> None:
    """The batch log lines the suite reads as runtime evidence (sglang/batch_log.py): the same fields,
    in the same order, with the same graph label, from both servers after the same probes."""

    def fields(log: Path) -> dict[str, set[tuple[str, ...]]]:
        out: dict[str, set[tuple[str, ...]]] = {}
        for line in parse_batch_lines(log.read_text(errors="replace")):
            out.setdefault(line.kind, set()).add((*line.fields, f"label={line.graph_label}"))
        return out

    real, emulated = fields(sides.real_log), fields(sides.emulator_log)
    assert set(real) == {"prefill", "decode"}, f"{sides.real_log}: {real}"
    assert emulated == real


def _metric_problems(real: dict[str, Metric], emulated: dict[str, Metric]) -> list[str]:
    def label_names(family: Metric) -> set[tuple[str, tuple[str, ...]]]:
        return {(s.name, tuple(sorted(s.labels))) for s in family.samples}

    def values(family: Metric, label: str) -> set[str]:
        return {s.labels[label] for s in family.samples if label in s.labels}

    problems = []
    for name, family in sorted(emulated.items()):
        other = real.get(name)
        if other is None:
            problems.append(f"{name}: not on the real server")
            continue
        if (family.type, family.documentation) != (other.type, other.documentation):
            problems.append(
                f"{name}: {family.type} {family.documentation!r}; real: {other.type} {other.documentation!r}"
            )
        if extra := label_names(family) - label_names(other):
            problems.append(f"{name}: samples with label names the real server's lack: {sorted(extra)}")
        for label in sorted({k for s in family.samples for k in s.labels} - set(METRICS_VALUES_DIFFER)):
            mine, theirs = values(family, label), values(other, label)
            # A histogram's buckets must be the same; other values the emulator has seen fewer of.
            if not mine <= theirs or (label == "le" and mine != theirs):
                problems.append(f"{name}: {label} values {sorted(mine)}; real: {sorted(theirs)}")
    return problems


def test_emulator_metrics_read_like_real_sglang(sides: Sides) -> None:
    """``/metrics`` after the same probes: every family the emulator prints is on the real server with
    the same type, HELP text and label names, its label values among the real server's (see
    METRICS_VALUES_DIFFER); and every family the emulator can print (its table, with the retraction
    counters no probe here moves) is of the kind and HELP text this release's own code defines."""
    missing = [side for side, text in (("real", sides.real_metrics), ("emulator", sides.emulator_metrics)) if not text]
    assert not missing, f"no /metrics from {', '.join(missing)}: the suite's launches pass --enable-metrics"
    assert sides.real_metrics and sides.emulator_metrics
    real = {f.name: f for f in text_string_to_metric_families(sides.real_metrics)}
    emulated = {f.name: f for f in text_string_to_metric_families(sides.emulator_metrics)}
    problems = _metric_problems(real, emulated)
    definitions = metrics_catalogue.catalogue(sides.python)
    for family in FAMILIES:
        found = definitions.get(family.name)
        if found is None or (found.kind, found.documentation) != (family.kind, family.documentation):
            problems.append(f"{family.name}: emulated as {family.kind} {family.documentation!r}; SGLang: {found}")
    # The rest of the real server's families (memory, startup, HTTP, per-stage timings, ...) the suite
    # does not watch; they are counted here, not emulated.
    print(f"/metrics: the emulator prints {len(emulated)} of the real server's {len(real)} families")
    assert not problems, "/metrics: the emulator differs from real SGLang 0.5.23:\n" + "\n".join(problems)


@pytest.mark.parametrize("api", ["native", "openai-chat"])
def test_sglperf_meter_works_against_both(sides: Sides, api: str) -> None:
    prompts = load_prompts(ROOT / "data" / "prompts" / "chat.jsonl")
    prompts = dataclasses.replace(prompts, prompts=prompts.prompts[:2])
    workload = load(TINY_CPU).workloads[0].model_copy(update={"repeats": 2, "output_len": 16, "warmup": 0, "api": api})
    for url in (sides.real_url, sides.emulator_url):
        result = meter.measure(url, workload, prompts, concurrency=1)
        tokens = [s.completion_tokens for s in result.samples]
        assert tokens == [16] * 4, (url, tokens)


def test_sglang_bench_serving_works_against_both(sides: Sides, tmp_path: Path) -> None:
    """SGLang's own benchmark client, backend sglang, unchanged (it asks /v1/models for the model),
    from where this release keeps it: on 0.5.23 the new path, so no deprecation warning."""
    module = bench_client.bench_serving_module(sides.python)
    assert module == BENCH_SERVING_MODULES[0]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    runs = {}
    # Both sides at once: each run spends most of its 15-20 s importing SGLang, and nothing here is timed.
    for side, url in (("real", sides.real_url), ("emulator", sides.emulator_url)):
        host, port = url.removeprefix("http://").split(":")
        cmd = [
            sides.python,
            "-m",
            module,
            "--backend",
            "sglang",
            "--host",
            host,
            "--port",
            port,
            "--dataset-name",
            "random-ids",
            "--random-input-len",
            "32",
            "--random-output-len",
            "16",
            "--random-range-ratio",
            "1",
            "--num-prompts",
            "4",
            "--tokenizer",
            str(sides.models),
            "--disable-tqdm",
        ]
        # cwd: bench_serving writes its result file (sglang_<date>_<n>_<in>_<out>.jsonl) there, one per side
        (tmp_path / side).mkdir()
        runs[url] = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path / side
        )
    try:
        said = {url: proc.communicate(timeout=300) for url, proc in runs.items()}
    finally:
        for proc in runs.values():
            proc.kill()
    for url, (stdout, stderr) in said.items():
        assert runs[url].returncode == 0, f"{url}: {stdout[-1500:]}\n{stderr[-1500:]}"
        assert "Successful requests:                     4" in stdout, stdout[-1500:]
        assert "`sglang.bench_serving` is deprecated" not in stderr, stderr[-1500:]
