"""SGLang emulator: a test double of an SGLang HTTP server, for machines without a GPU.

Start it with the argv one would give SGLang: ``python -m sglperf.testing.emulator --model-path ... --port N``.
It runs no model and touches no GPU; it speaks the subset of SGLang's HTTP API the suite uses
(health, server/model info, /v1/models, flush_cache, metrics, native /generate, OpenAI chat/completions) and
emits tokens on a stated timing model (see :mod:`.timing`), so the suite's clients and statistics
can be checked against a known truth. Configuration and environment: :mod:`.config`; injected
faults: :mod:`.faults`; request and response bodies: :mod:`.protocol`. Not emulated: batching (only,
on request, its cost under load: :mod:`.timing`), real tokenisation, tree drafts (top-k > 1),
``return_meta_info``, batch requests.

This module is the process: the HTTP server and its per-endpoint handlers, start-up and ``main``.
"""

from __future__ import annotations

import json
import mmap
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import urlsplit

from sglperf.testing.emulator.config import (
    CONFIG_ENV,
    DECODE_GRAPH_GB,
    EFFECTIVE_ENV,
    PREFILL_GRAPH_GB,
    ConfigError,
    EmulatorConfig,
    load_effective,
    parse_launch_args,
)
from sglperf.testing.emulator.console import BANNER, READY_LINE, log
from sglperf.testing.emulator.faults import Stalled, exit_if_startup_fails, http_5xx_message, never_healthy
from sglperf.testing.emulator.protocol import (
    ChatResponder,
    CompletionResponder,
    HttpError,
    NativeResponder,
    Responder,
    error_body,
    json_object,
    parse_chat,
    parse_completion,
    parse_native,
)
from sglperf.testing.emulator.state import EmulatorState, GenRequest, Run
from sglperf.testing.emulator.timing import sleep_until

OPEN_PATHS = frozenset({"/health", "/health_generate"})  # no API key needed, as in SGLang

Route = Callable[["_Handler", bytes], None]


class EmulatorServer(ThreadingHTTPServer):
    daemon_threads = True  # streams must not delay shutdown
    request_queue_size = 128  # the suite opens many concurrent streams

    def __init__(self, address: tuple[str, int], state: EmulatorState) -> None:
        self.state = state
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sglperf-emulator"
    disable_nagle_algorithm = True  # small SSE writes must leave at once
    server: EmulatorServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # per-request lines would fill an undrained stdout pipe and block the server

    # -- dispatch --

    def do_GET(self) -> None:
        self._dispatch(self.GET, b"")

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self.close_connection = True
            self._send_json(400, error_body(400, "a request body needs a valid Content-Length"))
            return
        self._dispatch(self.POST, self.rfile.read(length))

    def _dispatch(self, table: dict[str, Route], body: bytes) -> None:
        self._streaming = False
        try:
            self._route(table, urlsplit(self.path).path, body)
        except HttpError as exc:
            if not self._streaming:
                self._send_json(exc.status, error_body(exc.status, exc.message, exc.kind))
        except (ConnectionError, TimeoutError, Stalled):
            self.close_connection = True
        except Exception as exc:  # a bug here must cost one request, not the server
            self.close_connection = True
            if not self._streaming:
                self._send_json(500, error_body(500, f"{type(exc).__name__}: {exc}", "InternalServerError"))

    def _route(self, table: dict[str, Route], path: str, body: bytes) -> None:
        if path not in self.GET and path not in self.POST:
            raise HttpError(404, "Not Found", "NotFoundError")
        if path not in table:
            raise HttpError(405, "Method Not Allowed", "MethodNotAllowed")
        if not self._authorized(path):
            self._send_json(401, {"error": "Unauthorized"})
            return
        message = http_5xx_message(self.server.state.config, path)
        if message is not None:
            raise HttpError(500, message, "InternalServerError")
        table[path](self, body)

    def _authorized(self, path: str) -> bool:
        key = self.server.state.launch.api_key
        return not key or path in OPEN_PATHS or self.headers.get("Authorization") == f"Bearer {key}"

    # -- plain responses --

    def _send(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _send_json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json")

    def _health(self, body: bytes) -> None:
        self._send(200 if self.server.state.ready.is_set() else 503, b"", "text/plain")

    def _server_info(self, body: bytes) -> None:
        self._send_json(200, self.server.state.server_info())

    def _model_info(self, body: bytes) -> None:
        self._send_json(200, self.server.state.model_info())

    def _models(self, body: bytes) -> None:
        self._send_json(200, self.server.state.models())

    def _metrics(self, body: bytes) -> None:
        state = self.server.state
        if not state.metrics_enabled:
            raise HttpError(404, "Not Found (start with --enable-metrics)", "NotFoundError")
        self._send(200, state.metrics().encode(), "text/plain; version=0.0.4; charset=utf-8")

    def _flush(self, body: bytes) -> None:
        state = self.server.state
        with state.lock:
            state.stats.flush_count += 1
        self._send(200, b"Cache flushed.", "text/plain")

    # -- generation --

    def _json_body(self, body: bytes) -> dict[str, Any]:
        data = json_object(body)
        if not self.server.state.ready.is_set():
            raise HttpError(503, "the server is still starting", "ServiceUnavailable")
        return data

    def _generate(self, body: bytes) -> None:
        req = parse_native(self._json_body(body))
        state = self.server.state
        self._serve_run(req, NativeResponder(state.metrics_enabled))

    def _chat(self, body: bytes) -> None:
        data = self._json_body(body)
        req = parse_chat(data)
        self._serve_run(req, ChatResponder(data, self.server.state.model_name))

    def _completions(self, body: bytes) -> None:
        data = self._json_body(body)
        req = parse_completion(data)
        self._serve_run(req, CompletionResponder(data, self.server.state.model_name))

    def _serve_run(self, req: GenRequest, responder: Responder) -> None:
        """Run one request on the timing model: stream its chunks as SSE events, or answer once at the end."""
        state = self.server.state
        run = state.start_run(req)
        completed = False
        try:
            if req.stream:
                self._start_stream()
            self._after_tokens(run, 0, req.stream)
            steps = 0
            for i, chunk in enumerate(run.chunks):
                state.await_chunk(run, chunk)
                if req.stream:
                    self._send_events(responder.events(run, chunk))
                # Logged after the chunk is out, so the log's own cost is never in a measured time.
                if i == 0:
                    state.log_prefill(run)
                state.log_decode_steps(run, chunk.verify_ct - steps, chunk.end)
                steps = chunk.verify_ct
                self._after_tokens(run, chunk.end, req.stream)
            completed = True
            if req.stream:
                self._send_events(responder.tail(run))
                self._send_event("[DONE]")
                self.wfile.write(b"0\r\n\r\n")
            else:
                self._send_json(200, responder.whole(run, run.chunks[-1]))
        finally:
            state.end_run(run, completed)

    def _after_tokens(self, run: Run, sent: int, streaming: bool) -> None:
        """Fire the token-count faults once ``sent`` tokens are out (called right after each chunk is sent)."""
        run.faults.after_tokens(sent, streaming, self._send_event, self.server.state.stopping)

    # -- streaming --

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._streaming = True

    def _send_events(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            self._send_event(json.dumps(event))

    def _send_event(self, data: str) -> None:
        payload = f"data: {data}\n\n".encode()
        # one write per event: header, payload and trailer must not be split across TCP segments
        self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))

    # -- route tables: path -> handler, per HTTP method --

    GET: ClassVar[dict[str, Route]] = {
        "/health": _health,
        "/health_generate": _health,
        "/server_info": _server_info,
        "/get_server_info": _server_info,
        "/model_info": _model_info,
        "/get_model_info": _model_info,
        "/v1/models": _models,
        "/metrics": _metrics,
        "/flush_cache": _flush,
    }
    POST: ClassVar[dict[str, Route]] = {
        "/generate": _generate,
        "/v1/chat/completions": _chat,
        "/v1/completions": _completions,
        "/flush_cache": _flush,
    }


# ---------------------------------------------------------------------------------------------
# Process


def _start_up(state: EmulatorState) -> None:
    """Emulate model loading: SGLang-like log lines, then ready (or a startup fault)."""
    cfg = state.config
    t0 = time.perf_counter()
    avail = cfg.gpu_memory_gb - 1.0
    log(f"Load weight begin. avail mem={avail:.2f} GB", rank=True)
    if cfg.shared_memory_bytes:
        state.shared_memory = _map_shared_memory(cfg.shared_memory_bytes, state.launch.port)
    sleep_until(t0 + cfg.startup_s / 2)
    exit_if_startup_fails(cfg)
    arch = (state.architectures or ["unknown"])[0]
    avail -= state.weight_gb
    log(
        f"Load weight end. elapsed={cfg.startup_s / 2:.2f} s, type={arch}, dtype=torch.bfloat16, "
        f"avail mem={avail:.2f} GB, mem usage={state.weight_gb:.2f} GB.",
        rank=True,
    )
    memory = state.memory_usage()
    log(f"KV Cache is allocated. #tokens: {memory['token_capacity']}, KV size: {memory['kvcache']:.2f} GB", rank=True)
    if state.decode_graph:
        avail -= DECODE_GRAPH_GB
        log(
            f"Capture cuda graph end. Time elapsed: 0.00 s. mem usage={DECODE_GRAPH_GB:.2f} GB. "
            f"avail mem={avail:.2f} GB.",
            rank=True,
        )
    if state.prefill_graph:
        avail -= PREFILL_GRAPH_GB
        log(
            f"Capture prefill cuda graph end (piecewise). Time elapsed: 0.00 s. "
            f"mem usage={PREFILL_GRAPH_GB:.2f} GB. avail mem={avail:.2f} GB.",
            rank=True,
        )
    sleep_until(t0 + cfg.startup_s)
    if never_healthy(cfg):
        return  # a hung warmup logs nothing more
    state.ready.set()
    log(READY_LINE)


def _map_shared_memory(size: int, port: int) -> mmap.mmap:
    """A file in /dev/shm, mapped for the process's life and never unlinked: SGLang's CPU backend
    names its buffer after host and port the same way and leaves it behind."""
    path = f"/dev/shm/sglperf_emulator_buffer_127.0.0.1_{port}_{os.getpid()}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.ftruncate(fd, size)
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


class _Shutdown(BaseException):
    """Raised in the main thread by SIGTERM/SIGINT to leave serve_forever."""


def _raise_shutdown(signum: int, frame: Any) -> None:
    raise _Shutdown(signum)


def main(argv: list[str] | None = None) -> int:
    launch = parse_launch_args(argv)
    try:
        config = EmulatorConfig.from_env(os.environ.get(CONFIG_ENV))
        effective, version, source = load_effective(os.environ.get(EFFECTIVE_ENV), launch)
    except ConfigError as exc:
        print(f"sglperf emulator: {exc}", file=sys.stderr, flush=True)
        return 2
    state = EmulatorState(config, launch, effective, version, source)
    log(BANNER)
    log(
        f"effective args from {source} (SGLang {version}); speculative steps={state.spec_steps}, "
        f"prefill graph={'on' if state.prefill_graph else 'off'}"
    )
    try:
        server = EmulatorServer((launch.host, launch.port), state)
    except OSError as exc:
        log(f"cannot listen on {launch.host}:{launch.port}: {exc}")
        return 1
    signal.signal(signal.SIGTERM, _raise_shutdown)
    signal.signal(signal.SIGINT, _raise_shutdown)
    threading.Thread(target=_start_up, args=(state,), daemon=True, name="startup").start()
    log(f"Uvicorn running on http://{launch.host}:{launch.port} (Press CTRL+C to quit)")
    try:
        server.serve_forever(poll_interval=0.1)
    except _Shutdown:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal must not interrupt the cleanup
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        state.stopping.set()
        server.server_close()
    log("Shutting down.")
    return 0
