"""[topology] in a deployment: roles fitted to the runner pool, one variant per role, launcher-owned flags refused,
the decode batch shared by a role's workers, the router's spelling, and ranks that differ named."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglperf.model.deployment_file import DeploymentError, load
from sglperf.model.graph_coverage import graph_needs
from sglperf.model.resolution import Resolution, SGLangError
from sglperf.model.server_facts import ServerFacts
from sglperf.model.server_metrics import combined_series
from sglperf.model.topology import _nodes_for, batch_per_worker
from sglperf.preflight.check import rank_drift
from sglperf.runtime import router
from sglperf.runtime.attach import AttachedServer
from sglperf.session.topology import TopologyWorker, role_drift

from ..support.project import ROOT

LLAMA = ROOT / "tests" / "data" / "hf-configs" / "Llama-3.1-8B-Instruct" / "config.json"
CHAT = ROOT / "data" / "prompts" / "chat.jsonl"


def _deployment(tmp_path: Path, topology: str, *, runner: str = "", variant: str = "") -> Path:
    path = tmp_path / "pd.toml"
    path.write_text(
        f"""\
[model]
key = "llama"
served_path = "/models/llama"
config = "{LLAMA}"

[runner]
name = "pool"
gpu_count = 2
gpu_name = "NVIDIA L40S"
compute_capability = "8.9"
memory_gib = 48
{runner}

[launch]
tp_size = 1

[topology]
{topology}

[[variants]]
id = "plain"
{variant}

[[workloads]]
id = "chat"
prompts = "{CHAT}"
output_len = 16
concurrency = [32]
"""
    )
    return path


PD = """roles = [
  { name = "prefill", kind = "prefill", expect = { prefill_cuda_graph = true } },
  { name = "decode", kind = "decode", instances = 2 },
]"""


def test_each_role_becomes_a_variant_with_its_own_expectations(tmp_path: Path) -> None:
    d = load(_deployment(tmp_path, PD, runner="nodes = 2"))
    assert [v.id for v in d.variants] == ["plain.prefill", "plain.decode"]
    prefill, decode = d.variants
    assert d.expectations_for(prefill) == {"prefill_cuda_graph": True} and d.expectations_for(decode) == {}
    # Only the entry role (the decode servers, which stream the tokens) carries the measurements.
    assert not d.measures(prefill) and d.measures(decode)
    assert (prefill.base, prefill.role) == ("plain", "prefill")


def test_the_decode_batch_is_shared_by_the_roles_workers(tmp_path: Path) -> None:
    d = load(_deployment(tmp_path, PD, runner="nodes = 2"))
    prefill, decode = d.variants
    assert graph_needs(d, decode).largest_in_flight() == 16  # 32 in flight over 2 decode servers
    (batch,) = graph_needs(d, decode).batches
    assert batch.bounded_by == "32 in flight over 2 workers"
    assert graph_needs(d, prefill).largest_in_flight() == 32  # a prefill server runs no decode batch
    assert graph_needs(d).largest_in_flight() == 32


@pytest.mark.parametrize(
    ("topology", "runner", "said"),
    [
        (PD, "", "topology: needs 2 nodes of 2 GPUs, runner 'pool' has 1 (runner.nodes)"),
        ('roles = [{ name = "r", instances = 1, tp_size = 4 }]', "", "an instance needs 4 GPUs"),
        ('roles = [{ name = "r", tp_size = 3, nodes = 2 }]', "nodes = 4", "3 GPUs do not divide over 2 nodes"),
        ('roles = [{ name = "r", tp_size = 8, nodes = 2 }]', "nodes = 4", "4 GPUs per node, but runner 'pool' has 2"),
        ('roles = [{ name = "p", kind = "prefill" }]', "", "a disaggregated deployment needs a decode role"),
        (
            'roles = [{ name = "a" }, { name = "b", kind = "decode" }]',
            "",
            "replicas and prefill/decode roles do not mix",
        ),
        ('roles = [{ name = "a" }, { name = "a" }]', "", "duplicate role 'a'"),
        ('roles = [{ name = "a", expect = { prefil_cuda_graph = true } }]', "", "did you mean 'prefill_cuda_graph'?"),
    ],
)
def test_a_topology_that_cannot_run_is_refused_naming_why(
    tmp_path: Path, topology: str, runner: str, said: str
) -> None:
    with pytest.raises(DeploymentError) as raised:
        load(_deployment(tmp_path, topology, runner=runner))
    assert said in str(raised.value), raised.value


def test_a_multi_node_instance_fits_whole_nodes(tmp_path: Path) -> None:
    d = load(
        _deployment(tmp_path, 'roles = [{ name = "r", instances = 2, tp_size = 4, nodes = 2 }]', runner="nodes = 4")
    )
    assert d.tp_size_for(d.variants[0]) == 4


def test_a_variant_may_not_claim_a_role(tmp_path: Path) -> None:
    with pytest.raises(DeploymentError) as raised:
        load(_deployment(tmp_path, PD, runner="nodes = 2", variant='role = "decode"'))
    assert "variants[0].role: set by [topology] for each role, not by the file" in str(raised.value)


@given(st.lists(st.integers(1, 8), max_size=12), st.integers(8, 16))
def test_first_fit_packs_no_node_over_its_gpus_and_never_needs_more_than_one_per_instance(
    demands: list[int], per_node: int
) -> None:
    nodes = _nodes_for(demands, per_node)
    assert nodes <= len(demands)
    assert nodes >= -(-sum(demands) // per_node)  # at least the GPUs' worth


@given(st.integers(1, 512), st.integers(1, 64))
def test_the_workers_share_covers_the_batch(batch: int, workers: int) -> None:
    each = batch_per_worker(batch, workers)
    assert each * workers >= batch and (each - 1) * workers < batch


def test_the_router_is_spelled_for_replicas_and_for_prefill_and_decode() -> None:
    plan = router.RouterPlan(workers=("http://a:1", "http://b:2"))
    argv = plan.argv(29001)
    assert argv[argv.index("--worker-urls") + 1 :][:2] == ("http://a:1", "http://b:2")
    assert "--pd-disaggregation" not in argv and argv[argv.index("--prometheus-port") + 1] == "29001"
    pd = router.RouterPlan(prefill=(("http://p:1", 8998),), decode=("http://d:2",)).argv(29001)
    at = pd.index("--pd-disaggregation")
    assert pd[at:] == ("--pd-disaggregation", "--prefill", "http://p:1", "8998", "--decode", "http://d:2")


def _worker(role: str, name: str, url: str, **effective: object) -> TopologyWorker:
    facts = ServerFacts(url, "0.5.23", {"port": int(url.rsplit(":", 1)[1]), **effective}, (), {}, False)
    return TopologyWorker(role, name, AttachedServer(url, None, name), facts)


def test_ranks_that_differ_are_named_and_their_own_addresses_are_not() -> None:
    same = (
        _worker("decode", "d0", "http://h:1", max_running_requests=64),
        _worker("decode", "d1", "http://h:2", max_running_requests=64),
        _worker("prefill", "p0", "http://h:3", max_running_requests=8),  # another role may differ
    )
    assert role_drift(same) == []
    differ = (*same, _worker("decode", "d2", "http://h:4", max_running_requests=32))
    assert role_drift(differ) == [
        "role 'decode': max_running_requests is 32 on worker d2 (http://h:4) but 64 on worker d0 (http://h:1)"
    ]


def test_the_workers_metrics_add_up_and_their_gauges_keep_the_extremes() -> None:
    a = {"sglang:generation_tokens_total": 64.0, "sglang:num_running_reqs:max": 1.0, "sglang:num_running_reqs:min": 0.0}
    b = {"sglang:generation_tokens_total": 60.0, "sglang:num_running_reqs:max": 2.0, "sglang:num_running_reqs:min": 1.0}
    b_only = {**b, "sglang:kv_transfer_latency_ms_sum": 3.0}  # a series one worker lacks is not the deployment's
    assert combined_series([a, b_only]) == {
        "sglang:generation_tokens_total": 124.0,
        "sglang:num_running_reqs:max": 2.0,
        "sglang:num_running_reqs:min": 0.0,
    }


def _resolved(**effective: object) -> Resolution:
    return Resolution((), {}, dict(effective))


def test_a_rank_that_resolves_differently_is_named_with_the_field() -> None:
    rank0 = _resolved(node_rank=0, dist_init_addr="127.0.0.1:20000", max_running_requests=64)
    alike = _resolved(node_rank=1, dist_init_addr="127.0.0.1:20000", max_running_requests=64)
    assert rank_drift(rank0, []) is None  # a single-node instance: nothing to compare
    assert rank_drift(rank0, [alike]) == []
    other = _resolved(node_rank=1, max_running_requests=32, dist_init_addr="127.0.0.1:20000")
    assert rank_drift(rank0, [alike, other]) == ["rank 2: max_running_requests = 32, rank 0: 64"]
    refused = Resolution((), {}, None, error=SGLangError("ValueError", "node_rank out of range\ntraceback"))
    assert rank_drift(rank0, [refused]) == ["rank 1: SGLang refuses it: node_rank out of range"]
