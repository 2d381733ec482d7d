"""Runs inside the *target* interpreter (the one with SGLang installed), never imported by sglperf.

Writes a synthetic prompt set whose prompts are exactly so many tokens of a tokenizer, loaded the way
SGLang loads it (``transformers.AutoTokenizer``). Standard library and transformers only, because it runs
in SGLang's environment, not ours; ``sglperf.measure.synthetic`` launches it and caches what it writes.

Protocol: one JSON object on stdin, ``{"tokenizer", "trust_remote_code", "use_fast", "spec", "output"}``,
where ``spec`` is ``{"kind": "random", "count", "low", "high", "seed"}`` or ``{"kind": "shared-prefix",
"prefixes", "suffixes", "prefix_len", "input_len", "seed"}``. It writes the JSONL prompt set to ``output``
and exits 0, or prints one line ``sglperf-synthetic: PROBLEM`` last on stderr and exits 1.

Token ids are drawn with ``random.Random(seed)`` from the ordinary vocabulary (no special or added token),
decoded, and re-encoded without special tokens: decoded text need not encode back to the same ids (byte
pieces join into characters, neighbours merge), so the ids it does encode to are trimmed or extended
with new draws until the text encodes to exactly the length wanted. A shared prefix is checked in
context: prefix + suffix must encode to the prefix's own ids followed by exactly ``input_len`` more.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import sys
import traceback
from typing import Any, NoReturn

ERROR_PREFIX = "sglperf-synthetic: "
# Re-encodings per text before giving up; a text usually settles after one to three.
TRIES = 64
# Joins tried between a shared prefix and a suffix, in order, until one leaves the prefix's tokens as
# they are (a suffix glued to the prefix may merge with its last token).
JOINS = ("\n", " ", "\n\n", "")


def fail(problem: str) -> NoReturn:
    print(ERROR_PREFIX + " ".join(problem.split()), file=sys.stderr, flush=True)
    sys.exit(1)


def _plain(piece: str) -> bool:
    return "\ufffd" not in piece and all(c.isprintable() or c in "\n\t" for c in piece)


class Texts:
    """Texts of exact token lengths, drawn from ``rng``."""

    def __init__(self, tokenizer: Any, rng: random.Random):
        self.tokenizer = tokenizer
        self.rng = rng
        added = tokenizer.get_added_vocab() if hasattr(tokenizer, "get_added_vocab") else {}
        self.special = frozenset(tokenizer.all_special_ids) | frozenset(added.values())
        candidates = sorted(set(tokenizer.get_vocab().values()) - self.special)
        pieces = tokenizer.batch_decode([[i] for i in candidates], **self._decode_options())
        # A piece that is a lone byte of a longer character decodes to U+FFFD, one of whitespace only could
        # make a prompt that is blank, and control characters (NUL...) are nothing a user sends: none is drawn.
        self.vocab = [i for i, piece in zip(candidates, pieces) if piece.strip() and _plain(piece)]
        if not self.vocab:
            fail("the tokenizer has no ordinary token that decodes to text (are its files there?)")

    @staticmethod
    def _decode_options() -> dict[str, bool]:
        return {"skip_special_tokens": False, "clean_up_tokenization_spaces": False}

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self.tokenizer.encode(text, add_special_tokens=False)
        return ids

    def decode(self, ids: list[int]) -> str:
        text: str = self.tokenizer.decode(ids, **self._decode_options())
        return text

    def draw(self, n: int) -> list[int]:
        return [self.rng.choice(self.vocab) for _ in range(n)]

    def exact(self, n: int, before: str = "", join: str = "") -> str | None:
        """A text of exactly ``n`` tokens where it follows ``before`` (starting with ``join``), leaving
        ``before``'s own tokens as they are; None when it would merge into them."""
        head = self.encode(before) if before else []
        text = join + self.decode(self.draw(n))
        got: list[int] = []
        for _ in range(TRIES):
            got = self.encode(before + text)
            if got[: len(head)] != head:
                return None
            tail = got[len(head) :]
            if len(tail) == n and text.strip() and self.special.isdisjoint(tail):
                return text
            if not text.strip():
                tail = []
            tail = [self.rng.choice(self.vocab) if t in self.special else t for t in tail[:n]]
            text = self.decode(tail + self.draw(n - len(tail)))
        fail(f"no text of exactly {n} tokens after {TRIES} re-encodings (the last had {len(got) - len(head)})")

    def after(self, prefix: str, n: int) -> str | None:
        """A suffix of exactly ``n`` tokens after ``prefix`` that leaves its tokens as they are, through the
        first join that allows one; None if none does."""
        for join in JOINS:
            if (text := self.exact(n, prefix, join)) is not None:
                return text
        return None


def random_prompts(texts: Texts, spec: dict[str, Any]) -> list[tuple[str, str]]:
    lengths = [texts.rng.randint(spec["low"], spec["high"]) for _ in range(spec["count"])]
    width = len(str(len(lengths) - 1))
    out = []
    for i, n in enumerate(lengths):
        text = texts.exact(n)
        assert text is not None  # nothing comes before it, so nothing to merge into
        out.append((f"random-{i:0{width}d}", text))
    return out


def shared_prefix_prompts(texts: Texts, spec: dict[str, Any]) -> list[tuple[str, str]]:
    prefixes = []
    for _ in range(spec["prefixes"]):
        prefix = texts.exact(spec["prefix_len"])
        assert prefix is not None
        prefixes.append(prefix)
    p_width, s_width = len(str(spec["prefixes"] - 1)), len(str(spec["suffixes"] - 1))
    out = []
    # Prefix by prefix: one prefix's prompts follow each other, as its users' would.
    for p, prefix in enumerate(prefixes):
        for s in range(spec["suffixes"]):
            suffix = texts.after(prefix, spec["input_len"])
            if suffix is None:
                fail(
                    f"prefix {p} ({spec['prefix_len']} tokens): every suffix of {spec['input_len']} tokens merges "
                    f"into its last token (joins tried: {', '.join(map(repr, JOINS))})"
                )
            out.append((f"prefix{p:0{p_width}d}-suffix{s:0{s_width}d}", prefix + suffix))
    return out


def main() -> int:
    try:
        job = json.loads(sys.stdin.read())
        tokenizer_path, spec, output = job["tokenizer"], job["spec"], job["output"]
    except (ValueError, KeyError, TypeError) as exc:
        fail(f"not a job: {exc}")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # a long prompt's length warning is expected
    try:
        transformers: Any = importlib.import_module("transformers")
    except Exception as exc:  # ImportError, or a broken installation failing while it imports
        fail(f"transformers cannot be imported here ({type(exc).__name__}: {exc}); use SGLang's interpreter")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(
            tokenizer_path, trust_remote_code=bool(job.get("trust_remote_code")), use_fast=job.get("use_fast", True)
        )
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError... for an unusable tokenizer
        fail(f"the tokenizer does not load ({type(exc).__name__}: {exc})")
    try:
        texts = Texts(tokenizer, random.Random(spec["seed"]))
        if spec["kind"] == "random":
            prompts = random_prompts(texts, spec)
        elif spec["kind"] == "shared-prefix":
            prompts = shared_prefix_prompts(texts, spec)
        else:
            fail(f"unknown kind {spec['kind']!r}")
    except Exception as exc:  # a tokenizer that misbehaves, or a bug here: the traceback above the line
        traceback.print_exc()
        fail(f"generating failed ({type(exc).__name__}: {exc})")
    # ASCII JSON: a prompt file is split into lines by str.splitlines, which also splits at U+2028 or U+0085.
    lines = [json.dumps({"id": pid, "messages": [{"role": "user", "content": text}]}) + "\n" for pid, text in prompts]
    try:
        with open(output, "w", encoding="utf-8", newline="\n") as fh:
            fh.writelines(lines)
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
