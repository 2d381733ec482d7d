"""What the server's own batch log lines say each measured round ran (`sglperf.sglang.batch_log`).

Start-up evidence proves a graph was captured; these records prove it was replayed, round by round.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RoundBatches(_Strict):
    """One measured round's logged batches (decode: one line per ``decode_log_interval`` steps)."""

    round: int
    prefill: int
    prefill_graph: int  # of which ran the graph
    decode: int
    decode_graph: int
    max_running_req: int | None = None
    max_queue_req: int | None = None
    accept_len: float | None = None  # mean over the round's decode lines (speculative decoding)


class BatchEvidence(_Strict):
    """The measured rounds' batches, with one line of each kind quoted as SGLang printed it."""

    log: str  # the server log read
    decode_log_interval: int | None  # None: not known (the release's default applies)
    graph_label: str | None  # as the release prints it ("cuda graph", "cpu graph"); None: no such field
    rounds: list[RoundBatches]
    eager_prefill_line: str | None = None
    graph_prefill_line: str | None = None
    eager_decode_line: str | None = None
    graph_decode_line: str | None = None
    # Eager decode lines by the batch they ran (#running-req): the decode graph's coverage is judged
    # per batch size; one line quoted per size.
    eager_decode_batches: dict[int, int] = {}
    eager_decode_quotes: dict[int, str] = {}
    # Eager prefill lines of one request each (#new-seq 1) by the tokens they computed (#new-token): the
    # prefill graph's coverage in tokens. Several requests prefilled together (a round's ramp) are not
    # counted here: their sum is not one prompt.
    eager_prefill_tokens: dict[int, int] = {}
    eager_prefill_quotes: dict[int, str] = {}

    def total(self, kind: str) -> tuple[int, int]:
        """(batches logged, of which ran the graph) over every round, for "prefill" or "decode"."""
        batches = sum(getattr(r, kind) for r in self.rounds)
        graph = sum(getattr(r, f"{kind}_graph") for r in self.rounds)
        return batches, graph
