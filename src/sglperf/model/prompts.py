"""Prompt sets (``data/prompts/*.jsonl``): fixed inputs for measurement, identified by a digest.

Acceptance length depends on content and context length, so a result is only comparable with a
baseline measured on the same bytes: every result records the file's sha256.

One JSON object per line: ``{"id": "...", "messages": [{"role": "user", "content": "..."}]}``.
Blank lines are skipped; anything else malformed is an error naming the file and line.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglperf.errors import SglperfError
from sglperf.model.files import os_problem, read_input

ROLES = frozenset({"system", "user", "assistant"})
# A chat template wraps each message in a few tokens of its own (Qwen's "<|im_start|>user\n" and
# "<|im_end|>\n" are 5, Llama 3's headers 5) plus a generation prompt: 32 a message bounds every
# template we know with room to spare.
TEMPLATE_TOKENS_PER_MESSAGE = 32
KEYS = frozenset({"id", "messages"})


class PromptError(SglperfError, ValueError):
    """A prompt file is unreadable or malformed; the message names file and line."""


@dataclass(frozen=True)
class Message:
    role: str
    content: str


@dataclass(frozen=True)
class Prompt:
    id: str
    messages: tuple[Message, ...]

    @property
    def text(self) -> str:
        """The prompt for text endpoints (native /generate, completions): contents joined by newlines."""
        return "\n".join(m.content for m in self.messages)

    def chat_messages(self) -> list[dict[str, str]]:
        return [{"role": m.role, "content": m.content} for m in self.messages]

    @property
    def token_bound(self) -> int:
        """The most tokens this prompt can take in any tokenizer, without one: a token covers at least one
        byte of text, plus the chat template's tokens per message."""
        return sum(len(m.content.encode()) + TEMPLATE_TOKENS_PER_MESSAGE for m in self.messages)


@dataclass(frozen=True)
class PromptSet:
    name: str
    path: Path
    prompts: tuple[Prompt, ...]
    digest: str  # sha256 of the file bytes


def load_prompts(path: str | Path) -> PromptSet:
    """Read and validate one JSONL prompt file."""
    path = Path(path)
    try:
        data = read_input(path)
    except FileNotFoundError:
        raise PromptError(f"{path}: no such prompt file") from None
    except OSError as exc:
        raise PromptError(f"{path}: cannot read: {os_problem(exc)}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PromptError(f"{path}: not UTF-8 text: {exc}") from None
    prompts: list[Prompt] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        prompt = _parse_line(line, f"{path}:{number}")
        if prompt.id in seen:
            raise PromptError(f"{path}:{number}: duplicate id {prompt.id!r} (first on line {seen[prompt.id]})")
        seen[prompt.id] = number
        prompts.append(prompt)
    if not prompts:
        raise PromptError(f"{path}: no prompts (the file is empty)")
    return PromptSet(path.stem, path, tuple(prompts), hashlib.sha256(data).hexdigest())


def _parse_line(line: str, where: str) -> Prompt:
    try:
        obj: Any = json.loads(line)
    except json.JSONDecodeError as exc:
        raise PromptError(f"{where}: not valid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise PromptError(f"{where}: not a prompt: JSON nested too deeply") from None
    if not isinstance(obj, dict):
        raise PromptError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - KEYS)
    if unknown:
        raise PromptError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}; allowed: id, messages")
    for key in ("id", "messages"):
        if key not in obj:
            raise PromptError(f"{where}: required field {key!r} is missing")
    prompt_id = obj["id"]
    if not isinstance(prompt_id, str) or not prompt_id.strip():
        raise PromptError(f"{where}: id must be a non-empty string, got {_shown(prompt_id)}")
    if not _unicode(prompt_id):
        raise PromptError(f"{where}: id {prompt_id!r} holds a lone surrogate escape (\\ud800-\\udfff): not text")
    raw = obj["messages"]
    if not isinstance(raw, list) or not raw:
        raise PromptError(f"{where}: messages must be a non-empty list (prompt {prompt_id!r})")
    messages = []
    for i, m in enumerate(raw):
        here = f"{where}: messages[{i}] (prompt {prompt_id!r})"
        if not isinstance(m, dict) or set(m) != {"role", "content"}:
            raise PromptError(f"{here}: expected an object with exactly 'role' and 'content'")
        if not isinstance(m["role"], str) or m["role"] not in ROLES:
            raise PromptError(f"{here}: role {_shown(m['role'])} is not one of {', '.join(sorted(ROLES))}")
        if not isinstance(m["content"], str) or not m["content"].strip():
            raise PromptError(f"{here}: content must be a non-empty string")
        if not _unicode(m["content"]):
            raise PromptError(f"{here}: content holds a lone surrogate escape (\\ud800-\\udfff): not text")
        messages.append(Message(m["role"], m["content"]))
    return Prompt(prompt_id, tuple(messages))


def _unicode(text: str) -> bool:
    """Whether ``text`` is text: JSON's escapes can spell a lone surrogate, which no encoder or tokenizer takes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown(value: Any) -> str:
    """A wrong value for an error line, cut short: a prompt file's line may be long."""
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."
