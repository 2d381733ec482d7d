"""Synthetic prompt sets without SGLang: the workload schema, the cache key, and a cache file that is used
as it is or refused, never overwritten. With a real tokenizer: tests/sglang/test_synthetic_prompts_real.py."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglperf.measure import synthetic
from sglperf.measure.synthetic import SyntheticPromptsError, TokenizerSource, cache_key, cache_path, prompt_set
from sglperf.model.deployment_file import DeploymentError, load
from sglperf.model.workload import RandomPrompts, SharedPrefixPrompts

from ..support.project import with_workloads

NO_PYTHON = "/nonexistent/bin/python"  # any attempt to generate would fail naming it
TOKENIZER = TokenizerSource("/nonexistent/tokenizer", NO_PYTHON, "0.5.23")
RANDOM = RandomPrompts(kind="random", count=4, input_len=16, input_range=0.25, seed=0)

WORKLOADS = """
[[workloads]]
id = "random"
synthetic = { kind = "random", count = 32, input_len = 512, input_range = 0.25, seed = 0 }
max_prompts = 8
output_len = 64

[[workloads]]
id = "shared"
synthetic = { kind = "shared-prefix", prefixes = 4, suffixes = 8, prefix_len = 1024, input_len = 128, seed = 0 }
output_len = 64

[[workloads]]
id = "file"
prompts = "../data/prompts/chat.jsonl"
"""


def _load(deployment_dir: Path, workloads: str) -> Path:
    path = deployment_dir / "deployments" / "qwen36.toml"
    path.write_text(with_workloads(workloads))
    load(path)
    return path


def test_synthetic_workloads_load(deployment_dir: Path) -> None:
    path = deployment_dir / "deployments" / "qwen36.toml"
    path.write_text(with_workloads(WORKLOADS))
    random, shared, file = load(path).workloads
    assert isinstance(random.synthetic, RandomPrompts) and random.prompts is None and random.max_prompts == 8
    assert random.synthetic.length_range() == (384, 640)
    assert random.synthetic.describe() == "random, 512±25% tokens"
    assert isinstance(shared.synthetic, SharedPrefixPrompts) and shared.synthetic.prompt_count() == 32
    assert shared.synthetic.describe() == "shared-prefix, 4 prefixes of 1024 tokens x 8 suffixes of 128 tokens"
    assert file.synthetic is None and file.prompts == Path("../data/prompts/chat.jsonl")
    defaults = RandomPrompts(kind="random", count=1, input_len=7)
    assert (defaults.input_range, defaults.seed, defaults.describe()) == (0.0, 0, "random, 7 tokens")


RANDOM_TOML = '{ kind = "random", count = 4, input_len = 16 }'
BAD = {
    "both": (f'prompts = "../data/prompts/chat.jsonl"\nsynthetic = {RANDOM_TOML}', "workloads[0]: synthetic: "),
    "neither": ("output_len = 8", "workloads[0]: prompts: a workload needs a prompt set"),
    "unknown kind": ('synthetic = { kind = "lorem", count = 4 }', "workloads[0].synthetic: Input tag 'lorem'"),
    "no kind": ("synthetic = { count = 4, input_len = 16 }", "workloads[0].synthetic: Unable to extract tag"),
    "zero count": ('synthetic = { kind = "random", count = 0, input_len = 16 }', "synthetic.random.count: "),
    "zero length": ('synthetic = { kind = "random", count = 4, input_len = 0 }', "synthetic.random.input_len: "),
    "length as a string": (
        'synthetic = { kind = "random", count = 4, input_len = "16" }',
        "synthetic.random.input_len: Input should be a valid integer, got the string '16'",
    ),
    "range of 1": (
        'synthetic = { kind = "random", count = 4, input_len = 16, input_range = 1.0 }',
        "synthetic.random.input_range: Input should be less than 1",
    ),
    "negative range": (
        'synthetic = { kind = "random", count = 4, input_len = 16, input_range = -0.1 }',
        "synthetic.random.input_range: ",
    ),
    "too long": ('synthetic = { kind = "random", count = 1, input_len = 2000000 }', "synthetic.random.input_len: "),
    "too many tokens": (
        'synthetic = { kind = "random", count = 10000, input_len = 1000 }',
        "count: 10000 prompts of up to 1000 tokens exceed 4000000 tokens in all",
    ),
    "unknown field": ('synthetic = { kind = "random", count = 4, input_len = 16, lenght = 3 }', "lenght: unknown"),
    "a random field on shared-prefix": (
        'synthetic = { kind = "shared-prefix", prefixes = 2, suffixes = 2, prefix_len = 8, input_len = 8, count = 4 }',
        "synthetic.shared-prefix.count: unknown field",
    ),
    "shared-prefix without prefixes": (
        'synthetic = { kind = "shared-prefix", suffixes = 2, prefix_len = 8, input_len = 8 }',
        "synthetic.shared-prefix.prefixes: required field is missing",
    ),
    "too many shared-prefix prompts": (
        'synthetic = { kind = "shared-prefix", prefixes = 1000, suffixes = 1000, prefix_len = 1, input_len = 1 }',
        "suffixes: 1000 prefixes x 1000 suffixes make 1000000 prompts, over 100000",
    ),
    "negative seed": ('synthetic = { kind = "random", count = 4, input_len = 16, seed = -1 }', "random.seed: "),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_synthetic_workload_is_one_line_naming_the_field(case: str, deployment_dir: Path) -> None:
    fields, expected = BAD[case]
    with pytest.raises(DeploymentError) as excinfo:
        _load(deployment_dir, f'[[workloads]]\nid = "w"\n{fields}\n')
    message = str(excinfo.value)
    problems = message.splitlines()[1:]
    assert len(problems) == 1 and expected in problems[0], message
    assert "qwen36.toml" in message.splitlines()[0]


# --- the cache key ------------------------------------------------------------------------------------

SEEDS = st.integers(0, 2**63 - 1)
RANDOM_SPECS = st.builds(
    RandomPrompts,
    kind=st.just("random"),
    count=st.integers(1, 1000),
    input_len=st.integers(1, 2000),
    input_range=st.floats(0, 0.99),
    seed=SEEDS,
)
SHARED_SPECS = st.builds(
    SharedPrefixPrompts,
    kind=st.just("shared-prefix"),
    prefixes=st.integers(1, 20),
    suffixes=st.integers(1, 50),
    prefix_len=st.integers(1, 1024),
    input_len=st.integers(1, 1024),
    seed=SEEDS,
)
SPECS = RANDOM_SPECS | SHARED_SPECS
IDENTITY = "files 0123 trust_remote_code=False use_fast=True"


@given(SPECS, SPECS)
def test_cache_keys_differ_exactly_when_specs_do(a: synthetic.Spec, b: synthetic.Spec) -> None:
    assert (cache_key(a, IDENTITY) == cache_key(b, IDENTITY)) == (a == b)


@given(SPECS, SEEDS)
def test_same_spec_same_key_and_another_seed_or_tokenizer_another(spec: synthetic.Spec, seed: int) -> None:
    again = type(spec).model_validate(json.loads(spec.model_dump_json()))
    assert cache_key(again, IDENTITY) == cache_key(spec, IDENTITY)
    reseeded = spec.model_copy(update={"seed": seed})
    assert (cache_key(reseeded, IDENTITY) == cache_key(spec, IDENTITY)) == (seed == spec.seed)
    assert cache_key(spec, IDENTITY + " ") != cache_key(spec, IDENTITY)


def test_a_range_of_zero_has_one_key_however_written() -> None:
    written = [
        RandomPrompts.model_validate({"kind": "random", "count": 4, "input_len": 16, "input_range": r})
        for r in (0, 0.0, -0.0)
    ]
    assert len({cache_key(spec, IDENTITY) for spec in written}) == 1


@given(st.integers(1, 100_000), st.floats(0, 0.99))
def test_length_range_is_around_input_len(input_len: int, input_range: float) -> None:
    spec = RandomPrompts(kind="random", count=1, input_len=input_len, input_range=input_range)
    low, high = spec.length_range()
    assert 1 <= low <= input_len <= high
    assert input_len - low <= input_len * input_range + 1 and high - input_len <= input_len * input_range + 1
    assert synthetic.worker_job(spec) == {"kind": "random", "count": 1, "low": low, "high": high, "seed": 0}


def _tokenizer_folder(path: Path, vocab: str = '{"a": 0}') -> Path:
    path.mkdir(parents=True)
    (path / "tokenizer.json").write_text(vocab)
    (path / "tokenizer_config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(b"weights")
    return path


def test_tokenizer_identity_is_the_folder_content_or_the_name_and_release(tmp_path: Path) -> None:
    one = TokenizerSource(str(_tokenizer_folder(tmp_path / "one")), NO_PYTHON, "0.5.23")
    copy = TokenizerSource(str(_tokenizer_folder(tmp_path / "copy")), "/other/python", "0.5.13")
    assert one.identity() == copy.identity()  # a copy elsewhere, used by another release: the same set
    (tmp_path / "copy" / "model.safetensors").write_bytes(b"other weights")
    assert one.identity() == copy.identity()  # weights are not the tokenizer
    (tmp_path / "copy" / "tokenizer.json").write_text('{"b": 0}')
    assert one.identity() != copy.identity()
    assert TokenizerSource(one.path, NO_PYTHON, "0.5.23", trust_remote_code=True).identity() != one.identity()
    hub = TokenizerSource("Qwen/Qwen3-8B", NO_PYTHON, "0.5.23")
    assert hub.identity() != TokenizerSource("Qwen/Qwen3-8B", NO_PYTHON, "0.5.22").identity()
    assert "Qwen/Qwen3-8B" in hub.identity()


def test_the_servers_tokenizer_path_else_its_model_path() -> None:
    both = {"tokenizer_path": "/tok", "model_path": "/model", "trust_remote_code": True, "tokenizer_mode": "slow"}
    source = TokenizerSource.of_server(both, "/py", "0.5.23")
    assert (source.path, source.trust_remote_code, source.use_fast) == ("/tok", True, False)
    assert TokenizerSource.of_server({"tokenizer_path": None, "model_path": "/model"}, "/py", "0.5.23").path == "/model"
    with pytest.raises(SyntheticPromptsError, match="neither tokenizer_path nor model_path"):
        TokenizerSource.of_server({}, "/py", "0.5.23")


# --- the cache file -----------------------------------------------------------------------------------


def test_a_cached_set_is_read_back_without_generating(tmp_path: Path) -> None:
    path = cache_path(RANDOM, TOKENIZER, tmp_path)
    assert path.parent == tmp_path and path.name.startswith("random-") and path.suffix == ".jsonl"
    data = b'{"id": "random-0", "messages": [{"role": "user", "content": "hello there"}]}\n'
    path.write_bytes(data)
    prompts = prompt_set(RANDOM, TOKENIZER, folder=tmp_path)  # the interpreter does not exist: no worker ran
    assert prompts.digest == hashlib.sha256(data).hexdigest() and prompts.path == path
    assert prompts.name == "synthetic-random" and [p.id for p in prompts.prompts] == ["random-0"]


@pytest.mark.parametrize("content", [b"\xff\xfe not text\n", b'{"id": "x"\n', b""])
def test_an_unreadable_cache_file_is_one_line_and_left_as_it_is(tmp_path: Path, content: bytes) -> None:
    path = cache_path(RANDOM, TOKENIZER, tmp_path)
    path.write_bytes(content)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    with pytest.raises(SyntheticPromptsError) as excinfo:
        prompt_set(RANDOM, TOKENIZER, folder=tmp_path)
    message = str(excinfo.value)
    assert "\n" not in message and message.startswith(str(path)), message
    assert "delete the file and it is generated again" in message and NO_PYTHON not in message
    assert path.read_bytes() == content and path.stat().st_mtime_ns == 1_000_000_000
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # nothing written beside it either


def test_a_folder_where_the_cache_file_goes_is_refused(tmp_path: Path) -> None:
    path = cache_path(RANDOM, TOKENIZER, tmp_path)
    path.mkdir()
    (path / "keep").write_text("mine")
    with pytest.raises(SyntheticPromptsError, match="cannot read") as excinfo:
        prompt_set(RANDOM, TOKENIZER, folder=tmp_path)
    assert str(path) in str(excinfo.value) and "\n" not in str(excinfo.value)
    assert (path / "keep").read_text() == "mine"
