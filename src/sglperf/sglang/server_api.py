"""SGLang's HTTP API as the suite uses it: endpoint paths (with their older names) and the
`/server_info` keys that are not server args. The emulator serves the same names."""

from __future__ import annotations

from sglperf.sglang.batch_log import DECODE_LOG_INTERVAL_FIELD
from sglperf.sglang.metrics_catalogue import METRICS_FIELD

LAUNCH_MODULE = "sglang.launch_server"
# SGLang's own benchmark client, newest path first: 0.5.23 moved it and warns on the old one
# ("`sglang.bench_serving` is deprecated and will be removed in a future release; use
# `sglang.benchmark.serving` instead"). Which one a release has: bench_client.bench_serving_module.
BENCH_SERVING_MODULES = ("sglang.benchmark.serving", "sglang.bench_serving")
# /health_generate generates a token (the real check); releases without it answer /health only.
HEALTH_PATHS = ("/health_generate", "/health")
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")  # the first from 0.5.6, the second deprecated later
MODEL_INFO_PATHS = ("/model_info", "/get_model_info")
FLUSH_CACHE_PATH = "/flush_cache"
MODELS_PATH = "/v1/models"
GENERATE_PATHS = {"native": "/generate", "openai-chat": "/v1/chat/completions", "openai-completions": "/v1/completions"}

INTERNAL_STATES_KEY = "internal_states"  # /server_info: one object per rank
# /server_info keys that are not server args: SGLang's version, live state and (0.5.23) how long each
# start-up phase took; the emulator adds the last ones about itself.
NOT_ARGS = frozenset(
    {"version", INTERNAL_STATES_KEY, "startup_time", "emulated", "effective_source", "flush_count", "emulator_config"}
)
# The KV cache pool in tokens, as the scheduler sized it (a /server_info key, not a server arg).
KV_POOL_TOKENS_FIELD = "max_total_num_tokens"
# Server args that name this launch and say nothing about what SGLang decided: where it listens, the
# paths it was given, the seed, and what sglperf adds to every launch (the batch log of each round, read
# by batch_log; the server metrics, by metrics_catalogue; dummy weights for a measurement).
IDENTITY_FIELDS = frozenset(
    {
        "host",
        "port",
        "api_key",
        "model_path",
        "tokenizer_path",
        "served_model_name",
        "skip_tokenizer_init",
        "launch_command",
        "random_seed",
        "base_gpu_id",
        "nccl_port",
        "log_level",
        "load_format",
        DECODE_LOG_INTERVAL_FIELD,
        METRICS_FIELD,
    }
)
# Sized from the memory free when the server starts: two starts of one build on the CPU server differed by
# 439 of 1,045,353 tokens of KV pool. Decisions in preflight (explain shows them), noise between two
# launches (the pool is kept in provenance instead, and a change beyond noise is noted: baselines.store).
MEMORY_SIZED_FIELDS = frozenset({"mem_fraction_static", "max_total_tokens", KV_POOL_TOKENS_FIELD, "max_req_input_len"})
# Server args that differ between two launches of the same variant: ignored when comparing live args
# with the preflight, between a baseline and now, and in effective-args digests.
LAUNCH_SPECIFIC_FIELDS = IDENTITY_FIELDS | MEMORY_SIZED_FIELDS
# What differs between two ranks of one role by design: their identity, the launcher's per-rank settings (their
# rank, rendezvous and bootstrap port), and the KV pool each sizes from its own free memory. Any other field
# that differs is drift (sglperf.session.topology).
RANK_SPECIFIC_FIELDS = IDENTITY_FIELDS | frozenset(
    {
        "node_rank",
        "dist_init_addr",
        "disaggregation_bootstrap_port",
        "max_total_tokens",
        KV_POOL_TOKENS_FIELD,
        "max_req_input_len",
    }
)
