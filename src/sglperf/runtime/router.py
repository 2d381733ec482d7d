"""SGLang's router (the ``sglang-router`` package) in front of a topology's servers: started, waited for, asked.

What the router says about itself is not what its workers say: its ``/health`` answers 200 before any worker
is registered (``/readiness`` counts the healthy ones), its ``/get_server_info`` is its own summary, and its
``/metrics`` lives on a separate Prometheus port. So sglperf waits on ``/readiness`` for every worker, and
reads each worker's ``/server_info``, ``/flush_cache`` and ``/metrics`` at the worker itself; the router only
carries the measured traffic. Seen with sglang-router 0.3.2 (docs/scale-out.md).
"""

from __future__ import annotations

import importlib.metadata
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from sglperf.errors import SglperfError
from sglperf.model.progress import Progress, silent
from sglperf.runtime import server
from sglperf.runtime.http_deadline import get_within

ROUTER_MODULE = "sglang_router.launch_router"
READINESS_PATH = "/readiness"
WORKERS_PATH = "/workers"
# The router's spelling (0.3.x): workers, policy, PD mode, its Prometheus port.
WORKER_URLS_FLAG, POLICY_FLAG = "--worker-urls", "--policy"
PD_FLAG, PREFILL_FLAG, DECODE_FLAG = "--pd-disaggregation", "--prefill", "--decode"
PROMETHEUS_HOST_FLAG, PROMETHEUS_PORT_FLAG = "--prometheus-host", "--prometheus-port"
# The router probes a worker every this many seconds; its default (60) would leave a dead worker "healthy"
# for minutes.
HEALTH_INTERVAL_FLAG, HEALTH_INTERVAL_S = "--health-check-interval-secs", "5"
# What the router's /workers calls each kind of worker.
WORKER_TYPES = {"regular": "replica", "prefill": "prefill", "decode": "decode"}


class RouterError(SglperfError, RuntimeError):
    """The router did not come up with every worker, or its answer about its workers cannot be read."""


@dataclass(frozen=True)
class RouterPlan:
    """What the router fronts: data-parallel workers, or prefill servers (with bootstrap ports) and decode servers."""

    workers: tuple[str, ...] = ()
    prefill: tuple[tuple[str, int], ...] = ()
    decode: tuple[str, ...] = ()
    policy: str = "round_robin"

    @property
    def total(self) -> int:
        return len(self.workers) + len(self.prefill) + len(self.decode)

    def argv(self, prometheus_port: int) -> tuple[str, ...]:
        argv = [POLICY_FLAG, self.policy, HEALTH_INTERVAL_FLAG, HEALTH_INTERVAL_S]
        argv += [PROMETHEUS_HOST_FLAG, server.HOST, PROMETHEUS_PORT_FLAG, str(prometheus_port)]
        if self.workers:
            argv += [WORKER_URLS_FLAG, *self.workers]
        if self.prefill or self.decode:
            argv.append(PD_FLAG)
            for url, bootstrap in self.prefill:
                argv += [PREFILL_FLAG, url, str(bootstrap)]
            for url in self.decode:
                argv += [DECODE_FLAG, url]
        return tuple(argv)


@dataclass(frozen=True)
class RouterWorker:
    """One worker as the router lists it."""

    url: str
    role_kind: str  # replica, prefill or decode
    healthy: bool


def router_version() -> str:
    """The installed sglang-router's version (the router runs under sglperf's interpreter)."""
    try:
        return importlib.metadata.version("sglang-router")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def router_spec(plan: RouterPlan, name: str, log_path: Path, startup_timeout_s: float) -> server.ServerSpec:
    """The router as a process sglperf starts: under sglperf's own interpreter (the package is sglperf's
    dependency, not SGLang's)."""
    return server.ServerSpec(
        name=name,
        python=sys.executable,
        argv=plan.argv(server.free_port()),
        log_path=log_path,
        startup_timeout_s=startup_timeout_s,
        launch_module=ROUTER_MODULE,
        health_paths=(READINESS_PATH,),
    )


def start_router(plan: RouterPlan, spec: server.ServerSpec, progress: Progress = silent) -> server.Server:
    """Start the router and wait until it counts every worker of ``plan`` healthy (or raise ServerStartError)."""
    router = server.launch(spec, None, progress)
    deadline = time.monotonic() + spec.startup_timeout_s
    seen = "nothing"
    while time.monotonic() < deadline:
        try:
            answer = get_within(router.base_url + READINESS_PATH, 10.0, {})
            body = answer.json() if answer.status_code in (200, 503) else {}
        except (httpx.HTTPError, ValueError) as exc:
            seen = f"{type(exc).__name__}: {exc}"
        else:
            healthy = body.get("healthy_workers") if isinstance(body, dict) else None
            if healthy == plan.total:
                progress(f"{spec.name}: {healthy} of {plan.total} workers healthy behind the router")
                return router
            seen = f"{READINESS_PATH} answered {answer.status_code}: {answer.text[:200]}"
        time.sleep(0.5)
    router.stop()
    raise server.ServerStartError(
        f"{spec.name}: the router did not count all {plan.total} workers healthy within "
        f"{spec.startup_timeout_s:.0f} s; {seen}; log {spec.log_path}"
    )


def router_workers(url: str, headers: dict[str, str] | None = None, timeout_s: float = 30.0) -> list[RouterWorker]:
    """The workers a running router fronts, from its ``/workers`` (for a deployment someone else launched)."""
    where = f"{url.rstrip('/')}{WORKERS_PATH}"
    try:
        answer = get_within(where, timeout_s, headers or {})
    except httpx.HTTPError as exc:
        raise RouterError(f"{where}: {type(exc).__name__}: {exc}; is {url} SGLang's router?") from None
    if answer.status_code != 200:
        raise RouterError(f"{where}: HTTP {answer.status_code} ({answer.text[:120]}); is {url} SGLang's router?")
    try:
        listed = answer.json().get("workers")
    except (ValueError, AttributeError):
        listed = None
    if not isinstance(listed, list) or not listed:
        raise RouterError(f"{where}: no list of workers in its answer ({answer.text[:120]}); is {url} SGLang's router?")
    return [_worker(entry, where) for entry in listed]


def _worker(entry: Any, where: str) -> RouterWorker:
    if not isinstance(entry, dict) or not isinstance(entry.get("url"), str):
        raise RouterError(f"{where}: a worker without a url: {str(entry)[:120]}")
    kind = WORKER_TYPES.get(str(entry.get("worker_type", "regular")))
    if kind is None:
        raise RouterError(f"{where}: worker {entry['url']} has worker_type {entry.get('worker_type')!r}, unknown here")
    return RouterWorker(entry["url"].rstrip("/"), kind, bool(entry.get("is_healthy", True)))
