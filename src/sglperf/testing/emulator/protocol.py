"""The emulator's HTTP protocol: request bodies parsed and checked, response bodies built.

Native ``/generate`` and OpenAI ``/v1/chat/completions`` and ``/v1/completions``; batches, ``n`` > 1
and ``return_meta_info`` are not emulated. A :class:`Responder` turns a request's chunks into
streamed events (``events``, then ``tail``) or into one whole body.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any, Protocol

from sglperf.testing.emulator.state import GenRequest, Run
from sglperf.testing.emulator.timing import Chunk, prompt_tokens_of_text, token_text

DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's native default; also used for chat
DEFAULT_COMPLETION_MAX_TOKENS = 16  # the OpenAI completions default
FIRST_TOKEN_ID = 1000


# ---------------------------------------------------------------------------------------------
# Request parsing


class HttpError(Exception):
    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def _get(body: Mapping[str, Any], key: str, types: tuple[type, ...], default: Any) -> Any:
    value = body.get(key)
    if value is None:
        return default
    # bool is an int subclass; only accept it where bool is asked for
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise HttpError(400, f"{key} must be {' or '.join(t.__name__ for t in types)}, got {value!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        raise HttpError(400, f"{key} must be >= 0, got {value!r}")
    return value


def _count_prompt(value: Any, what: str) -> int:
    if isinstance(value, str):
        return prompt_tokens_of_text(value)
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return len(value)
    if isinstance(value, list) and len(value) == 1:
        return _count_prompt(value[0], what)
    raise HttpError(400, f"{what} must be one string or one non-empty list of token ids (batches are not emulated)")


def parse_native(body: Mapping[str, Any]) -> GenRequest:
    sampling = _get(body, "sampling_params", (dict,), {})
    if body.get("input_ids") is not None:
        prompt = _count_prompt(body["input_ids"], "input_ids")
    elif body.get("text") is not None:
        prompt = _count_prompt(body["text"], "text")
    else:
        raise HttpError(400, "one of text or input_ids is required")
    _get(sampling, "temperature", (int, float), 1.0)
    return GenRequest(
        prompt,
        _get(sampling, "max_new_tokens", (int,), DEFAULT_MAX_NEW_TOKENS),
        _get(sampling, "ignore_eos", (bool,), False),
        _get(body, "stream", (bool,), False),
    )


def _openai_common(body: Mapping[str, Any], prompt: int, default_max: int) -> GenRequest:
    _get(body, "temperature", (int, float), 1.0)
    if _get(body, "n", (int,), 1) != 1:
        raise HttpError(400, "only n=1 is emulated")
    max_tokens = _get(body, "max_completion_tokens", (int,), None)
    if max_tokens is None:
        max_tokens = _get(body, "max_tokens", (int,), default_max)
    ignore_eos, stream = _get(body, "ignore_eos", (bool,), False), _get(body, "stream", (bool,), False)
    return GenRequest(prompt, max_tokens, ignore_eos, stream)


def parse_chat(body: Mapping[str, Any]) -> GenRequest:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise HttpError(400, "messages must be a non-empty list of objects")
    texts = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"]
        elif content is not None:
            raise HttpError(400, "message content must be a string or a list of parts")
    _get(body, "logprobs", (bool,), False)
    _get(body, "stream_options", (dict,), {})
    return _openai_common(body, prompt_tokens_of_text("\n".join(texts)), DEFAULT_MAX_NEW_TOKENS)


def parse_completion(body: Mapping[str, Any]) -> GenRequest:
    if body.get("prompt") is None:
        raise HttpError(400, "prompt is required")
    _get(body, "logprobs", (int,), None)
    _get(body, "stream_options", (dict,), {})
    return _openai_common(body, _count_prompt(body["prompt"], "prompt"), DEFAULT_COMPLETION_MAX_TOKENS)


def json_object(body: bytes) -> dict[str, Any]:
    """A request body that must be one JSON object."""
    try:
        data = json.loads(body or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HttpError(400, f"request body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise HttpError(400, "request body must be a JSON object")
    return data


# ---------------------------------------------------------------------------------------------
# Response bodies


class Responder(Protocol):
    """Builds one generation request's response bodies from its chunks."""

    def events(self, run: Run, chunk: Chunk) -> list[dict[str, Any]]:
        """The SSE events carrying one chunk."""
        ...

    def tail(self, run: Run) -> list[dict[str, Any]]:
        """The SSE events after the last chunk, before ``[DONE]``."""
        ...

    def whole(self, run: Run, chunk: Chunk) -> dict[str, Any]:
        """The non-streaming body, built once the last chunk is due."""
        ...


def _wall(perf_s: float) -> float:
    """A ``perf_counter`` time as wall-clock seconds, as SGLang's ``convert_time_to_realtime``."""
    return time.time() - (time.perf_counter() - perf_s)


def request_timing(run: Run, final: bool) -> dict[str, Any]:
    """The timing keys SGLang 0.5.23 adds to ``meta_info`` with ``--enable-metrics`` (scheduler side on
    every chunk, tokenizer side on the final one: ``req_time_stats.convert_to_output_meta_info``)."""
    plan = run.plan
    out: dict[str, Any] = {
        "storage_prefetch_wait": 0.0,
        "storage_staging_wait": 0.0,
        "forward_entry_time": _wall(run.t0),
        # Under load (timing.py) the prefill waited run.queue_s for a slot and later passes moved by
        # run.delay_s; both are an exact 0.0 with the load knobs off.
        "prefill_finished_time": _wall(run.t0 + run.queue_s + plan.prefill_s),
        "queue_time": run.queue_s,
    }
    if final:
        now = time.perf_counter()
        decode_s = 0.0
        if len(plan.passes) > 1:
            decode_s = plan.passes[-1].at_s - plan.passes[0].at_s + (run.delay_s - run.first_delay_s)
        out |= {
            "request_received_ts": _wall(run.t0),
            "first_token_latency": plan.passes[0].at_s + run.first_delay_s if plan.passes else 0.0,
            "api_server_dispatch_finish_ts": _wall(run.t0),
            "response_sent_to_client_ts": _wall(now),
            "request_finished_ts": _wall(now),
        }
        if decode_s > 0:
            out["decode_throughput"] = (plan.completion_tokens - 1) / decode_s
    return out


class NativeResponder:
    """Native ``/generate``: every event carries the cumulative text and ids, and ``meta_info``."""

    def __init__(self, metrics: bool = False) -> None:
        self._ids: list[int] = []
        self._text: list[str] = []
        self._metrics = metrics  # the server runs with --enable-metrics: timing keys in meta_info

    def events(self, run: Run, chunk: Chunk) -> list[dict[str, Any]]:
        return [self.whole(run, chunk)]

    def tail(self, run: Run) -> list[dict[str, Any]]:
        return []

    def whole(self, run: Run, chunk: Chunk) -> dict[str, Any]:
        first = not self._ids
        for i in range(len(self._ids), chunk.end):
            self._ids.append(FIRST_TOKEN_ID + i)
            self._text.append(token_text(i))
        # As SGLang 0.5.23 sends it (seen on a real server): the same keys on every chunk, the send time
        # on the first, and the request's totals (latency, weight versions, speculative decoding) only
        # on the final one; text, output_ids and completion_tokens are cumulative.
        meta: dict[str, Any] = {
            "id": run.rid,
            "finish_reason": None,
            "prompt_tokens": run.prompt_tokens,
            "weight_version": WEIGHT_VERSION,
            "num_retractions": int(run.retracted),
            "reasoning_tokens": 0,
            "completion_tokens": chunk.end,
            "cached_tokens": 0,
            "cached_tokens_details": None,
            "dp_rank": None,
        }
        if first:
            meta["response_sent_to_client_ts"] = time.time()
        if self._metrics:
            meta.update(request_timing(run, chunk.final))
        if chunk.final:
            meta["finish_reason"] = run.finish
            meta["weight_versions"] = [{"version": WEIGHT_VERSION, "start": 0, "end": chunk.end}]
            meta["e2e_latency"] = time.perf_counter() - run.t0
            if run.spec:
                meta.update(spec_totals(run, chunk))
        return {"text": "".join(self._text), "output_ids": list(self._ids), "meta_info": meta}


WEIGHT_VERSION = "default"


def spec_totals(run: Run, chunk: Chunk) -> dict[str, Any]:
    """A speculative request's final statistics, as SGLang 0.5.23 reports them in the last chunk."""
    accepted = [p.tokens - 1 for p in run.plan.passes[1:]]  # drafts accepted per verify step
    histogram = [0] * (max(accepted, default=0) + 1)
    for n in accepted:
        histogram[n] += 1
    return {
        "spec_accept_rate": run.accept_rate,
        "spec_accept_length": chunk.end / max(1, chunk.verify_ct),
        "spec_num_correct_drafts": run.plan.accepted_drafts,
        "spec_num_proposed_drafts": run.plan.proposed_drafts,
        "spec_verify_ct": chunk.verify_ct,
        "spec_correct_drafts_histogram": histogram if accepted else [],
    }


class _OpenAIResponder:
    """What chat and completions share: the model, the creation time, the optional usage chunk."""

    id_prefix = ""
    chunk_object = ""

    def __init__(self, data: Mapping[str, Any], default_model: str) -> None:
        self.usage_chunk = bool((data.get("stream_options") or {}).get("include_usage"))
        self.model = data.get("model") or default_model
        self.created = int(time.time())
        self.sent = 0  # tokens streamed so far

    def head(self, run: Run) -> dict[str, Any]:
        return {
            "id": self.id_prefix + run.rid,
            "object": self.chunk_object,
            "created": self.created,
            "model": self.model,
        }

    def tail(self, run: Run) -> list[dict[str, Any]]:
        if not self.usage_chunk:
            return []
        usage = {**_usage(run), "prompt_tokens_details": None, "reasoning_tokens": 0, "completion_tokens_details": None}
        return [{**self.head(run), "choices": [], "usage": usage}]


class ChatResponder(_OpenAIResponder):
    """OpenAI ``/v1/chat/completions``."""

    id_prefix = "chatcmpl-"
    chunk_object = "chat.completion.chunk"

    def __init__(self, data: Mapping[str, Any], default_model: str) -> None:
        super().__init__(data, default_model)
        self.want_logprobs = bool(data.get("logprobs"))

    def _logprobs(self, tokens: list[str]) -> dict[str, Any] | None:
        return {"content": _chat_logprobs(tokens)} if self.want_logprobs else None

    def events(self, run: Run, chunk: Chunk) -> list[dict[str, Any]]:
        # As SGLang 0.5.23 streams it (seen): a role-only chunk, content chunks, then a chunk with only
        # the finish reason (and the usage chunk, in ``tail``).
        out = []
        if self.sent == 0 and chunk.end > 0:
            role = {"reasoning_content": None, "role": "assistant", "content": ""}
            out.append(self._chunk(run, role, None, None))
        tokens = [token_text(i) for i in range(self.sent, chunk.end)]
        self.sent = chunk.end
        out.append(
            self._chunk(run, {"reasoning_content": None, "content": "".join(tokens)}, self._logprobs(tokens), None)
        )
        if chunk.final:
            out.append(self._chunk(run, {"reasoning_content": None}, None, _openai_finish(run)))
        return out

    def _chunk(self, run: Run, delta: dict[str, Any], logprobs: Any, finish: str | None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish, "matched_stop": None}
        return {**self.head(run), "choices": [choice]}

    def whole(self, run: Run, chunk: Chunk) -> dict[str, Any]:
        tokens = [token_text(i) for i in range(chunk.end)]
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": "".join(tokens)},
            "logprobs": self._logprobs(tokens),
            "finish_reason": _openai_finish(run),
        }
        return {**self.head(run), "object": "chat.completion", "choices": [choice], "usage": _usage(run)}


class CompletionResponder(_OpenAIResponder):
    """OpenAI ``/v1/completions``."""

    id_prefix = "cmpl-"
    chunk_object = "text_completion"

    def __init__(self, data: Mapping[str, Any], default_model: str) -> None:
        super().__init__(data, default_model)
        self.logprobs = data.get("logprobs")

    def _choice(self, run: Run, start: int, end: int, final: bool) -> dict[str, Any]:
        tokens = [token_text(i) for i in range(start, end)]
        return {
            "index": 0,
            "text": "".join(tokens),
            "logprobs": _completion_logprobs(tokens, self.logprobs) if self.logprobs is not None else None,
            "finish_reason": _openai_finish(run) if final else None,
        }

    def events(self, run: Run, chunk: Chunk) -> list[dict[str, Any]]:
        start, self.sent = self.sent, chunk.end
        return [{**self.head(run), "choices": [self._choice(run, start, chunk.end, chunk.final)], "usage": None}]

    def whole(self, run: Run, chunk: Chunk) -> dict[str, Any]:
        return {**self.head(run), "choices": [self._choice(run, 0, chunk.end, True)], "usage": _usage(run)}


def error_body(status: int, message: str, kind: str = "BadRequestError") -> dict[str, Any]:
    return {"object": "error", "message": message, "type": kind, "param": None, "code": status}


def _usage(run: Run) -> dict[str, int]:
    done = run.plan.completion_tokens
    return {"prompt_tokens": run.prompt_tokens, "completion_tokens": done, "total_tokens": run.prompt_tokens + done}


def _openai_finish(run: Run) -> str:
    return "length" if run.finish["type"] == "length" else "stop"


def _chat_logprobs(tokens: list[str]) -> list[dict[str, Any]]:
    return [{"token": t, "logprob": 0.0, "bytes": list(t.encode()), "top_logprobs": []} for t in tokens]


def _completion_logprobs(tokens: list[str], top: int) -> dict[str, Any]:
    offsets, pos = [], 0
    for t in tokens:
        offsets.append(pos)
        pos += len(t)
    return {
        "tokens": tokens,
        "token_logprobs": [0.0] * len(tokens),
        "top_logprobs": [{t: 0.0} if top else {} for t in tokens],
        "text_offset": offsets,
    }
