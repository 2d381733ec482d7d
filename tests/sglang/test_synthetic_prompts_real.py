"""Synthetic prompt sets generated with a real tokenizer (the tiny Qwen3's byte-level BPE, trained by
sglperf.testing.tiny_models) by the real SGLang 0.5.23 interpreter: every prompt, re-encoded there, has
exactly the length asked for; the same seed gives the same bytes, another seed another digest; a set
once generated is read from its cache without running anything; a worker that cannot work says so in
one line naming the tokenizer and the interpreter.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import subprocess
import venv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from sglperf.measure.synthetic import SyntheticPromptsError, TokenizerSource, cache_path, prompt_set
from sglperf.model.prompts import PromptSet
from sglperf.model.workload import RandomPrompts, SharedPrefixPrompts
from sglperf.testing import tiny_models

from ..support.project import NEW_SGLANG, SglangPython, make_project, with_workloads

pytestmark = [pytest.mark.needs_sglang]

RANDOM = RandomPrompts(kind="random", count=16, input_len=40, input_range=0.5, seed=0)
ONE_TOKEN = RandomPrompts(kind="random", count=8, input_len=1, seed=3)
SHARED = SharedPrefixPrompts(kind="shared-prefix", prefixes=3, suffixes=4, prefix_len=48, input_len=12, seed=0)
# Token ids of each text, as the tokenizer SGLang loads encodes them (no special tokens added).
ENCODE = """
import json, sys
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
print(json.dumps([tokenizer.encode(text, add_special_tokens=False) for text in json.load(sys.stdin)]))
"""


@dataclass(frozen=True)
class Tiny:
    python: str
    tokenizer: TokenizerSource
    folder: Path  # the cache folder the sets below were generated into

    def encode(self, prompts: PromptSet) -> list[list[int]]:
        texts = [p.text for p in prompts.prompts]
        proc = subprocess.run(
            [self.python, "-c", ENCODE, self.tokenizer.path],
            input=json.dumps(texts),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        ids: list[list[int]] = json.loads(proc.stdout.strip().splitlines()[-1])
        return ids


@pytest.fixture(scope="module")
def tiny(sglang_python: SglangPython, tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    python = sglang_python(NEW_SGLANG)
    models = tiny_models.ensure(python, tiny_models.default_cache())
    source = TokenizerSource(str(models / "tiny-qwen3"), python, NEW_SGLANG)
    return Tiny(python, source, tmp_path_factory.mktemp("synthetic"))


@pytest.fixture(scope="module")
def generated(tiny: Tiny) -> Callable[[RandomPrompts | SharedPrefixPrompts], PromptSet]:
    """The set for a spec, generated into the module's cache folder on first use."""
    return lambda spec: prompt_set(spec, tiny.tokenizer, folder=tiny.folder, timeout_s=600)


def test_random_prompts_have_exactly_the_drawn_lengths(tiny: Tiny, generated: Callable[..., PromptSet]) -> None:
    for spec in (RANDOM, ONE_TOKEN):
        prompts = generated(spec)
        low, high = spec.length_range()
        rng = random.Random(spec.seed)  # the lengths are the seed's first draws
        drawn = [rng.randint(low, high) for _ in range(spec.count)]
        lengths = [len(ids) for ids in tiny.encode(prompts)]
        assert lengths == drawn, (spec, lengths, drawn)
        assert len(set(drawn)) > 1 or spec.input_range == 0
        width = len(str(spec.count - 1))
        assert [p.id for p in prompts.prompts] == [f"random-{i:0{width}d}" for i in range(spec.count)]
        assert prompts.name == "synthetic-random"
        assert all(m.role == "user" for p in prompts.prompts for m in p.messages)


def test_shared_prefix_prompts_share_exact_prefix_tokens(tiny: Tiny, generated: Callable[..., PromptSet]) -> None:
    prompts = generated(SHARED)
    encoded = tiny.encode(prompts)
    assert len(encoded) == SHARED.prompt_count() and all(len(ids) == 48 + 12 for ids in encoded)
    groups: dict[str, list[list[int]]] = {}
    for prompt, ids in zip(prompts.prompts, encoded):
        groups.setdefault(prompt.id.split("-")[0], []).append(ids)
    assert sorted(groups) == ["prefix0", "prefix1", "prefix2"]
    heads = set()
    for members in groups.values():
        assert len(members) == 4 and len({tuple(ids[:48]) for ids in members}) == 1  # the radix cache's prefix
        assert len({tuple(ids[48:]) for ids in members}) == 4  # each suffix its own
        heads.add(tuple(members[0][:48]))
    assert len(heads) == 3


def test_same_seed_same_bytes_other_seed_other_digest(
    tiny: Tiny, generated: Callable[..., PromptSet], tmp_path: Path
) -> None:
    first = generated(RANDOM)
    again = prompt_set(RANDOM, tiny.tokenizer, folder=tmp_path, timeout_s=600)  # generated anew, elsewhere
    assert again.path.parent == tmp_path and again.path.read_bytes() == first.path.read_bytes()
    assert again.digest == first.digest == hashlib.sha256(first.path.read_bytes()).hexdigest()
    reseeded = generated(RANDOM.model_copy(update={"seed": 1}))
    assert reseeded.digest != first.digest and reseeded.path != first.path


def test_a_second_call_reads_the_cache_without_a_subprocess(tiny: Tiny, generated: Callable[..., PromptSet]) -> None:
    first = generated(SHARED)
    written = first.path.stat().st_mtime_ns
    # The same tokenizer (its files are the key, not the interpreter), through an interpreter that does not
    # exist: generating would fail, reading the cache runs nothing.
    absent = TokenizerSource(tiny.tokenizer.path, "/nonexistent/bin/python", NEW_SGLANG)
    assert cache_path(SHARED, absent, tiny.folder) == first.path
    cached = prompt_set(SHARED, absent, folder=tiny.folder)
    assert cached == first and first.path.stat().st_mtime_ns == written
    with pytest.raises(SyntheticPromptsError, match="/nonexistent/bin/python"):  # the proof it would have run it
        prompt_set(SHARED.model_copy(update={"seed": 7}), absent, folder=tiny.folder)


def test_worker_failures_are_one_line_naming_tokenizer_and_interpreter(
    tiny: Tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a path that is no folder is a hub name to transformers
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)  # a real interpreter without transformers
    not_a_tokenizer = tmp_path / "empty"
    not_a_tokenizer.mkdir()
    cases = {
        "transformers cannot be imported here": TokenizerSource(tiny.tokenizer.path, str(bare / "bin" / "python"), ""),
        "the tokenizer does not load": TokenizerSource(str(not_a_tokenizer), tiny.python, NEW_SGLANG),
        "the tokenizer does not load (": TokenizerSource(str(tmp_path / "missing"), tiny.python, NEW_SGLANG),
    }
    for expected, source in cases.items():
        with pytest.raises(SyntheticPromptsError) as excinfo:
            prompt_set(ONE_TOKEN, source, folder=tmp_path / "cache", timeout_s=300)
        message = str(excinfo.value)
        assert "\n" not in message and "Traceback" not in message, message
        assert expected in message and source.path in message and source.python in message, message
    assert [p.name for p in (tmp_path / "cache").iterdir() if p.suffix != ".lock"] == []  # nothing half-written


pytest_plugins = ["pytester"]
SYNTHETIC_WORKLOAD = """
[[workloads]]
id = "synth"
synthetic = { kind = "random", count = 4, input_len = 24, input_range = 0.25, seed = 0 }
max_prompts = 3
output_len = 16
concurrency = [1]
warmup = 0
repeats = 2
"""


def test_a_measurement_sends_the_synthetic_set_of_the_servers_tokenizer(
    pytester: pytest.Pytester, tiny: Tiny, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the whole plugin against the emulator, whose tokenizer_path is the folder of the model's
    config.json, given the tiny Qwen3's tokenizer here: the set is generated once in that tokenizer's
    tokens, cut to max_prompts, and its digest is the one recorded."""
    monkeypatch.delenv("SGLPERF_SIMULATED_GPUS", raising=False)
    monkeypatch.setenv("SGLPERF_GPU_LOCK_DIR", str(pytester.path / "locks"))
    monkeypatch.setenv("SGLPERF_HOME", str(pytester.path / "home"))  # its own cache: generated here, once
    make_project(pytester.path, with_workloads(SYNTHETIC_WORKLOAD, own_model_folder=True))  # gets a tokenizer
    model = pytester.path / "models" / "qwen3.6-27b"
    for file in Path(tiny.tokenizer.path).glob("*token*"):
        shutil.copy(file, model / file.name)
    pytester.makeini("[pytest]\ntestpaths = deployments\n")
    results = pytester.path / "results"
    run = pytester.runpytest_subprocess(
        "-k",
        "qwen36-mtp1-synth",
        f"--sglang-python={tiny.python}",
        "--emulator",
        "--baseline-missing=skip",
        # It checks what the run sends, not how fast: a busy host must not refuse the rounds.
        "--max-host-load=1",
        f"--results-dir={results}",
        "-p",
        "no:cacheprovider",
        "-s",
        timeout=600,
    )
    output = run.stdout.str() + run.stderr.str()
    assert run.parseoutcomes().get("failed", 0) == 0, output
    assert output.count("generating 4 synthetic prompts (random, 24±25% tokens)") == 1, output
    assert "2 rounds of 3 synthetic prompts (random, 24±25% tokens)" in output, output
    [cached] = (pytester.path / "home" / "synthetic-prompts").glob("random-*.jsonl")
    record = json.loads((results / "measurements" / "qwen36-mtp1-synth-c1.json").read_text())
    assert record["result"]["prompt_digest"] == hashlib.sha256(cached.read_bytes()).hexdigest()
    assert len(record["result"]["samples"]) == 2 * 3
