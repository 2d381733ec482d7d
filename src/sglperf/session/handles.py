"""What users' own tests get from the fixtures: a running variant's server, and effective args.

Stable, typed, documented in docs/writing-tests.md: change only compatibly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglperf.model.resolution import ModelFacts
from sglperf.model.verdict import Verdict
from sglperf.sglang.intents import INTENTS


@dataclass(frozen=True)
class VariantRef:
    """One variant of one deployment: what `@pytest.mark.sglang(...)` parametrises a test over."""

    deployment_path: Path
    deployment: str
    variant: str

    @property
    def test_id(self) -> str:
        """The id part of the test's name, as the built-in items spell it: `qwen36-mtp3-full`."""
        return f"{self.deployment}-{self.variant}"


@dataclass(frozen=True)
class ServerHandle:
    """A running SGLang server for one variant (launched by sglperf, emulated, or attached to)."""

    ref: VariantRef
    url: str  # e.g. http://127.0.0.1:30123, without a trailing slash
    api_key: str | None
    argv: tuple[str, ...]  # what `python -m sglang.launch_server` got (empty when attached)
    log_path: Path | None  # the server's log (None when attached)
    sglang_version: str
    effective_args: Mapping[str, Any]  # from its /server_info
    evidence: tuple[Verdict, ...] = ()  # the live verdicts of the variant's intents, with their evidence
    emulated: bool = False
    attached: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)

    def openai_client(self) -> Any:
        """An `openai.OpenAI` client for the server's OpenAI-compatible API."""
        import openai

        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=self.api_key or "none")


@dataclass(frozen=True)
class EffectiveArgsView:
    """A variant's effective server args and what its model class builds, from one tier."""

    ref: VariantRef
    tier: str  # "preflight" (SGLang's own resolution, no GPU) or "live" (the server's /server_info)
    sglang_version: str
    fields: Mapping[str, Any]
    model: ModelFacts | None = None  # preflight only, where the model class could be built

    def intent(self, name: str) -> Any:
        """An intent's effective value, read the way the built-in items read it on every release
        (e.g. `args.intent("prefill_cuda_graph")` is True or False whatever the field is called)."""
        return INTENTS[name].read(self.fields, self.model).value

    def __getitem__(self, path: str) -> Any:
        """A field by its dotted path, e.g. `args["cuda_graph_config.prefill.backend"]`."""
        node: Any = self.fields
        for part in path.split("."):
            if not isinstance(node, Mapping) or part not in node:
                raise KeyError(f"{path} is not in SGLang {self.sglang_version}'s effective args ({self.tier})")
            node = node[part]
        return node
