"""From a deployment variant to the argv the installed SGLang release accepts.

Raw flags are checked against the release's own parser; intents are spelled for that release.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass, field

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from sglperf.errors import SglperfError
from sglperf.model.deployment import Deployment, DraftModel, Variant
from sglperf.model.graph_coverage import graph_needs
from sglperf.model.intent_names import DECODE_CUDA_GRAPH, PREFILL_CUDA_GRAPH, SPECULATIVE
from sglperf.sglang.argv import ParsedArgv, ParserInfo
from sglperf.sglang.deprecations import replacement
from sglperf.sglang.intents import (
    DECODE_GRAPH,
    INTENTS,
    MODEL_OVERRIDE_FLAG,
    PREFILL_GRAPH,
    SPECULATIVE_SETTINGS,
    IntentNotExpressible,
)

MODEL_PATH_FLAG = "--model-path"
TP_FLAG = "--tp-size"
LOAD_FORMAT_FLAG = "--load-format"  # "dummy": random weights, for runners without the checkpoint
HOST_FLAG, PORT_FLAG, API_KEY_FLAG = "--host", "--port", "--api-key"
# A server's part in a [topology] (sglperf.model.topology), spelled by its role, never by a user's flags.
DISAGGREGATION_MODE_FLAG, DP_SIZE_FLAG = "--disaggregation-mode", "--dp-size"
NODE_RANK_FLAG, NNODES_FLAG, DIST_INIT_FLAG = "--node-rank", "--nnodes", "--dist-init-addr"
BOOTSTRAP_PORT_FLAG = "--disaggregation-bootstrap-port"
# Flags the launcher sets for each process (its address, its rank among the nodes, its rendezvous): one a
# user wrote would be overridden or, worse, make every rank claim the same address. Why, in a word each.
LAUNCHER_OWNED = {
    HOST_FLAG: "sglperf binds every server to the address it reaches it at",
    PORT_FLAG: "sglperf picks a free port for every server",
    NODE_RANK_FLAG: "each rank's is set by the launcher from [topology]",
    NNODES_FLAG: "set from the role's nodes in [topology]",
    DIST_INIT_FLAG: "the launcher picks each instance's rendezvous address",
    "--nccl-init-addr": "the launcher picks each instance's rendezvous address (--dist-init-addr)",
    BOOTSTRAP_PORT_FLAG: "the launcher picks each prefill server's bootstrap port",
}
# Owned only where a [topology] gives the servers their roles.
ROLE_OWNED = {
    DISAGGREGATION_MODE_FLAG: "set by the role's kind in [topology]",
    DP_SIZE_FLAG: "set by the role's dp_size in [topology]",
}
SKIP_TOKENIZER_FLAG = "--skip-tokenizer-init"  # preflight has config.json only, no tokenizer files
KV_POOL_CAP_FLAG = "--max-total-tokens"  # the KV pool in tokens; left out, SGLang sizes it from free memory
# In a deployment's flags, the model folder being served (preflight: the folder of its config.json), for
# files that live beside the checkpoint, e.g. an EAGLE3 draft: "{model_path}/eagle3-draft".
MODEL_PATH_PLACEHOLDER = "{model_path}"


class FlagError(SglperfError, ValueError):
    """A flag the installed release does not accept, or an intent it cannot express."""


@dataclass(frozen=True)
class LaunchPlan:
    """The argv (without interpreter and module) and environment for one variant on one release."""

    deployment: str
    variant: str
    sglang_version: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def command(self, python: str = "python") -> str:
        import shlex

        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        cmd = shlex.join([python, "-m", "sglang.launch_server", *self.argv])
        return f"{env} {cmd}".strip()


def check_flags(
    argv: list[str],
    parser: ParserInfo,
    where: str,
    architectures: tuple[str, ...] = (),
    owned: dict[str, str] = LAUNCHER_OWNED,
) -> list[str]:
    """Raise FlagError for flags this release rejects or the launcher owns; return warnings for deprecated
    ones."""
    warnings = []
    for option in ParsedArgv(argv, parser):
        if not option.known:
            raise FlagError(_unknown_flag_message(option.written, parser, where, architectures))
        if option.name in owned:
            raise FlagError(f"{where}: {option.written} is not yours to set: {owned[option.name]}; remove it")
        if parser.options[option.name].deprecated:
            instead = replacement(option.name, parser, architectures=architectures)
            hint = f"; use {instead.spelled}" if instead else ""
            warnings.append(f"{where}: {option.name} is deprecated in SGLang {parser.version}{hint}")
    return warnings


def _unknown_flag_message(flag: str, parser: ParserInfo, where: str, architectures: tuple[str, ...]) -> str:
    instead = replacement(flag, parser, architectures=architectures)
    ambiguous = parser.abbreviates(flag)
    if instead is not None and instead.from_releases:
        # A removed flag that is a prefix of its successors (--cuda-graph-max-bs on 0.5.20+): what it became
        # comes first; argparse's own reading of it is the lesser news.
        said = instead.describe()
        also = f"; as written, SGLang reads it as an ambiguous abbreviation of {', '.join(sorted(ambiguous))}"
        return f"{where}: {flag} is not accepted by SGLang {parser.version} (removed); replacement: {said}" + (
            also if ambiguous else ""
        )
    if ambiguous:
        return f"{where}: {flag} is ambiguous in SGLang {parser.version} (could be {', '.join(sorted(ambiguous))})"
    if instead is not None:
        return (
            f"{where}: {flag} is not accepted by SGLang {parser.version} (removed or renamed); "
            f"replacement: {instead.spelled}"
        )
    close = difflib.get_close_matches(flag, list(parser.options), n=3, cutoff=0.75)
    hint = f"; similar flags: {', '.join(close)}" if close else "; no known replacement"
    return f"{where}: {flag} is not accepted by SGLang {parser.version}{hint}"


def _applies(spec: str, version: str) -> bool:
    return Version(version) in SpecifierSet(spec, prereleases=True)


def launch_plan(
    deployment: Deployment,
    variant: Variant,
    parser: ParserInfo,
    model_path: str,
    architectures: tuple[str, ...],
    *,
    on_runner: bool = True,
) -> LaunchPlan:
    """Spell one variant for the installed release. Raises FlagError naming the flag and version.
    ``on_runner``: a draft model is its ``served_path`` (a server's launch), else the folder of its
    config.json (preflight, like ``model_path``)."""
    where = f"{deployment.path} variant {variant.id!r}"
    argv = [MODEL_PATH_FLAG, model_path, TP_FLAG, str(deployment.tp_size_for(variant))]
    owned = {**LAUNCHER_OWNED, **(ROLE_OWNED if deployment.topology else {})}
    env = dict(deployment.launch.env)
    # Each part checked where it is written: a flag of [launch] (or of a rule of it) is the deployment's,
    # said in the same words for every variant (so a report says it once), not the variant's.
    parts = [(f"{deployment.path} [launch] extra_flags", list(deployment.launch.extra_flags))]
    for rule in deployment.launch.when:
        if _applies(rule.sglang, parser.version):
            parts.append((f"{deployment.path} [[launch.when]] sglang = {rule.sglang!r}", list(rule.flags)))
            env.update(rule.env)
    parts.append((where, list(variant.flags)))
    env.update(variant.env)
    raw: list[str] = []
    warnings: list[str] = []
    for written_at, written in parts:
        flags = [token.replace(MODEL_PATH_PLACEHOLDER, model_path) for token in written]
        warnings += check_flags(flags, parser, written_at, architectures, owned)
        raw += flags
    argv += raw
    argv += role_flags(deployment, variant, parser, where)

    requested: dict[str, object] = dict(variant.request)
    spec = deployment.speculative_for(variant)
    if spec is not None:
        requested[SPECULATIVE] = spec
    for name, value in requested.items():
        try:
            argv += INTENTS[name].flags(value, parser, architectures)
        except IntentNotExpressible as exc:
            raise FlagError(f"{where}: cannot request {name}: {exc}") from None
    if not on_runner:
        _refuse_runner_only_draft(raw, where)
    if spec is not None and spec.draft_model is not None:
        argv += [SPECULATIVE_SETTINGS.DRAFT_MODEL_FLAG, _draft_path(deployment, spec.draft_model, on_runner, where)]
    if requested.get(DECODE_CUDA_GRAPH) is True:
        argv += _decode_coverage_flags(deployment, variant, raw, parser, where)
    if requested.get(PREFILL_CUDA_GRAPH) is True:
        argv += _prefill_coverage_flags(deployment, raw, parser, where)
    argv = merge_model_overrides(argv, where)
    return LaunchPlan(deployment.key, variant.id, parser.version, tuple(argv), env, tuple(warnings))


def rank_flags(nodes: int, rank: str, rendezvous: str) -> list[str]:
    """What the launcher gives one rank of a multi-node instance: the node count, its rank, where ranks meet."""
    return [NNODES_FLAG, str(nodes), NODE_RANK_FLAG, rank, DIST_INIT_FLAG, rendezvous]


def role_flags(deployment: Deployment, variant: Variant, parser: ParserInfo, where: str) -> list[str]:
    """What the variant's role in the topology adds: its disaggregation mode and data-parallel size."""
    role = deployment.role_of(variant)
    if role is None:
        return []
    argv = [DISAGGREGATION_MODE_FLAG, role.kind] if role.kind != "replica" else []
    argv += [DP_SIZE_FLAG, str(role.dp_size)] if role.dp_size > 1 else []
    for option in ParsedArgv(argv, parser):
        if not option.known:
            raise FlagError(f"{where}: role {role.name!r} needs {option.written}, which SGLang {parser.version} lacks")
    return argv


def _decode_coverage_flags(
    deployment: Deployment, variant: Variant, raw: list[str], parser: ParserInfo, where: str
) -> list[str]:
    """A request for the decode graph asks for it on and captured up to the most requests any workload
    keeps in flight; nothing when the variant's own flags already fix the sizes (theirs win) or no
    workload bounds its batch."""
    decode = DECODE_GRAPH
    need = graph_needs(deployment, variant).largest_in_flight()
    if need is None or decode.own_size_flags(ParsedArgv(raw, parser)):
        return []
    try:
        return decode.coverage_flags(need, parser, deployment.runner.is_cpu)
    except IntentNotExpressible as exc:
        raise FlagError(f"{where}: cannot request {DECODE_CUDA_GRAPH}: {exc}") from None


def _refuse_runner_only_draft(raw: list[str], where: str) -> None:
    """A draft path in raw flags that exists only on the runner: SGLang would try it as a Hugging Face
    repo id here and fail four times over; say in one line where it belongs."""
    flag = SPECULATIVE_SETTINGS.DRAFT_MODEL_FLAG
    for option in ParsedArgv(raw).among((flag,)):
        path = option.value or ""
        if path.startswith(("/", "~", ".")) and not os.path.exists(os.path.expanduser(path)):
            raise FlagError(
                f"{where}: {flag} {path}: a path on the runner, which preflight cannot read here; declare it as "
                f'[launch.speculative] draft_model = {{ served_path = "{path}", config = "<its config.json, copied '
                'beside the deployment>" }'
            )


def _draft_path(deployment: Deployment, draft: DraftModel, on_runner: bool, where: str) -> str:
    if not on_runner:
        return str((deployment.path.parent / draft.config).resolve().parent)
    served = os.path.expanduser(os.path.expandvars(draft.served_path))
    if "$" in served:
        raise FlagError(
            f"{where}: speculative.draft_model.served_path {draft.served_path!r} names an environment variable "
            "that is not set: set it"
        )
    return served


def _prefill_coverage_flags(deployment: Deployment, raw: list[str], parser: ParserInfo, where: str) -> list[str]:
    """A request for the prefill graph asks for it on and captured up to the workloads' longest prompt;
    nothing when the variant's own flags fix the sizes or no prompt length is known in tokens."""
    need = graph_needs(deployment).prefill_capture_need()
    if need is None or PREFILL_GRAPH.own_size_flags(ParsedArgv(raw, parser)):
        return []
    try:
        return PREFILL_GRAPH.coverage_flags(need, parser)
    except IntentNotExpressible as exc:
        raise FlagError(f"{where}: cannot request {PREFILL_CUDA_GRAPH}: {exc}") from None


def merge_model_overrides(argv: list[str], where: str) -> list[str]:
    """One --json-model-override-args holding every override: SGLang keeps only the last occurrence,
    so a requested intent must not silently replace the deployment's own overrides."""
    parsed = ParsedArgv(argv)
    overrides = parsed.among((MODEL_OVERRIDE_FLAG,))
    if not overrides:
        return argv
    merged: dict[str, object] = {}
    for option in overrides:
        text = option.value or ""
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise FlagError(f"{where}: {MODEL_OVERRIDE_FLAG} {text!r} is not JSON ({exc})") from None
        if not isinstance(value, dict):
            raise FlagError(f"{where}: {MODEL_OVERRIDE_FLAG} must be a JSON object, got {text!r}")
        merged.update(value)
    return [*parsed.without(MODEL_OVERRIDE_FLAG, values=1), MODEL_OVERRIDE_FLAG, json.dumps(merged, sort_keys=True)]
