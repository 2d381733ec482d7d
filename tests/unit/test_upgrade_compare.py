"""`sglperf.upgrade` on hand-built parsers and preflight results (no SGLang environments)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from sglperf import upgrade
from sglperf.model.deployment import Deployment
from sglperf.model.deployment_file import load
from sglperf.model.resolution import FieldChange, LogLine, ModelFacts, Resolution, Write
from sglperf.model.verdict import Status, Verdict
from sglperf.preflight.check import VariantCheck
from sglperf.reporting import upgrade as upgrade_text
from sglperf.sglang.argv import Option, ParserInfo
from sglperf.sglang.flags import LaunchPlan

from ..support.project import QWEN36

OLD, NEW = "0.5.13", "0.5.23"
SPECULATIVE_FLAGS = (
    "--speculative-algorithm",
    "--speculative-num-steps",
    "--speculative-num-draft-tokens",
    "--speculative-eagle-topk",
)
COMMON = ("--model-path", "--tp-size", "--skip-tokenizer-init", "--enable-single-batch-overlap", *SPECULATIVE_FLAGS)


def parser(version: str, *flags: str, deprecated: tuple[str, ...] = (), **choices: tuple[str, ...]) -> ParserInfo:
    options = {f: Option(dest=f[2:].replace("-", "_"), deprecated=f in deprecated) for f in (*COMMON, *flags)}
    for dest, values in choices.items():
        flag = "--" + dest.replace("_", "-")
        options[flag] = Option(dest=dest, choices=values)
    return ParserInfo(version, options)


BACKENDS = ("breakable", "tc_piecewise", "full", "disabled")
NEW_BACKENDS = ("breakable", "full", "disabled")  # 0.5.22 refuses tc_piecewise
OLD_PARSER = parser(
    OLD,
    "--enforce-piecewise-cuda-graph",
    "--disable-piecewise-cuda-graph",
    "--disable-cuda-graph",
    "--mamba-scheduler-strategy",
    "--language-only",
    "--legacy-knob",
)
NEW_PARSER = parser(
    NEW,
    "--disable-cuda-graph",
    "--mamba-radix-cache-strategy",
    "--language-only",
    deprecated=("--disable-cuda-graph",),
    cuda_graph_backend_prefill=NEW_BACKENDS,
    cuda_graph_backend_decode=NEW_BACKENDS,
)
PREFILL_REPLACEMENT = (
    "--cuda-graph-backend-prefill breakable (or `request = { prefill_cuda_graph = true }` in the variant)"
)
MAMBA_SAYS = (
    "'--mamba-scheduler-strategy' is deprecated and will be removed in a future release. "
    "Use '--mamba-radix-cache-strategy' instead."
)


@pytest.fixture(scope="module")
def deployment() -> Deployment:
    return load(QWEN36)


def argv(*flags: str) -> tuple[str, ...]:
    return ("--model-path", "/m", "--tp-size", "2", *flags, "--speculative-algorithm", "NEXTN")


def verdict(
    variant: str, intent: str, actual: str | None, status: Status, detail: str = "", version: str = OLD
) -> Verdict:
    return Verdict("qwen36", variant, intent, "on", actual, status, detail, version)


def variant_check(
    deployment: Deployment,
    variant_id: str,
    version: str,
    verdicts: list[Verdict],
    flags: tuple[str, ...] = (),
    warnings: tuple[str, ...] = (),
    *,
    resolved: bool = True,
) -> VariantCheck:
    plan = LaunchPlan("qwen36", variant_id, version, argv(*flags))
    logs = (*(LogLine("WARNING", "sglang", w) for w in warnings), LogLine("INFO", "sglang", "info 1"))
    resolution = Resolution(plan.argv, {}, {"port": 1}, logs) if resolved else None
    return VariantCheck(deployment, deployment.variant(variant_id), plan, resolution, verdicts)


def checks(deployment: Deployment) -> tuple[list[VariantCheck], list[VariantCheck]]:
    old = [
        variant_check(
            deployment,
            "mtp1",
            OLD,
            [
                verdict("mtp1", "prefill_cuda_graph", "off", Status.FAIL, "read from x"),
                verdict("mtp1", "decode_cuda_graph", "on", Status.PASS),
            ],
            ("--mamba-scheduler-strategy", "extra_buffer", "--disable-piecewise-cuda-graph", "--disable-cuda-graph"),
            ("max_total_tokens=1000 is small", "chunked prefill is off"),
        ),
        variant_check(
            deployment,
            "mtp3-full",
            OLD,
            [
                verdict("mtp3-full", "prefill_cuda_graph", "on", Status.PASS),
                verdict("mtp3-full", "single_batch_overlap", "on", Status.PASS),
            ],
            ("--mamba-scheduler-strategy", "extra_buffer", "--enforce-piecewise-cuda-graph", "--legacy-knob=1"),
        ),
    ]
    new = [
        variant_check(
            deployment,
            "mtp1",
            NEW,
            [
                verdict("mtp1", "prefill_cuda_graph", "on", Status.PASS, version=NEW),
                verdict("mtp1", "decode_cuda_graph", "on", Status.PASS, version=NEW),
            ],
            warnings=("max_total_tokens=2000 is small", "radix cache is experimental"),
        ),
        variant_check(
            deployment,
            "mtp3-full",
            NEW,
            [
                verdict("mtp3-full", "prefill_cuda_graph", None, Status.ERROR, "SGLang's validation says: no", NEW),
                verdict("mtp3-full", "single_batch_overlap", "off", Status.FAIL, "read from y", NEW),
            ],
            ("--cuda-graph-backend-prefill", "breakable"),
            resolved=False,
        ),
    ]
    return old, new


def report(deployment: Deployment) -> upgrade.UpgradeReport:
    old, new = checks(deployment)
    return upgrade.compare_releases(OLD, NEW, OLD_PARSER, NEW_PARSER, old, new)


def test_flag_changes_name_removed_renamed_and_deprecated_flags_with_replacements(deployment: Deployment) -> None:
    old, _ = checks(deployment)
    changes = {c.flag: c for c in upgrade.flag_changes(OLD_PARSER, NEW_PARSER, old, deployment.architectures)}
    assert set(changes) == {
        "--enforce-piecewise-cuda-graph",
        "--disable-piecewise-cuda-graph",
        "--disable-cuda-graph",
        "--mamba-scheduler-strategy",
        "--legacy-knob",
    }
    # The releases' own words come first, but 0.5.14-0.5.19's replacement (tc_piecewise) is a value the target
    # refuses: then sglperf spells the intent.
    # Only flags a variant passes: how sglperf would spell an intent nobody asks for is no change of the user's.
    assert changes["--enforce-piecewise-cuda-graph"] == upgrade.FlagChange(
        "--enforce-piecewise-cuda-graph",
        "removed",
        ("qwen36/mtp3-full",),
        PREFILL_REPLACEMENT,
        "intent",
    )
    # What the releases said is taken where the target accepts it, before sglperf's own spelling.
    assert changes["--disable-piecewise-cuda-graph"] == upgrade.FlagChange(
        "--disable-piecewise-cuda-graph",
        "renamed",
        ("qwen36/mtp1",),
        "--cuda-graph-backend-prefill=disabled",
        "SGLang 0.5.14-0.5.19's deprecation",
        "'--disable-piecewise-cuda-graph' is deprecated and will be removed in a future release. "
        "Use '--cuda-graph-backend-prefill=disabled' instead.",
    )
    assert changes["--mamba-scheduler-strategy"] == upgrade.FlagChange(
        "--mamba-scheduler-strategy",
        "renamed",
        ("qwen36/mtp1", "qwen36/mtp3-full"),
        "--mamba-radix-cache-strategy",
        "SGLang 0.5.14-0.5.19's deprecation",  # from the shipped ledger: neither 0.5.13 nor 0.5.23 says it
        MAMBA_SAYS,
    )
    assert (changes["--disable-cuda-graph"].change, changes["--disable-cuda-graph"].source) == ("deprecated", "intent")
    assert changes["--disable-cuda-graph"].replacement == (
        "--cuda-graph-backend-decode disabled (or `request = { decode_cuda_graph = false }` in the variant)"
    )
    # "--legacy-knob=1": the value is split off; nothing knows a replacement.
    assert changes["--legacy-knob"] == upgrade.FlagChange("--legacy-knob", "removed", ("qwen36/mtp3-full",), None)


def test_flags_both_releases_accept_alike_are_not_changes(deployment: Deployment) -> None:
    old, _ = checks(deployment)
    flags = {c.flag for c in upgrade.flag_changes(OLD_PARSER, NEW_PARSER, old, deployment.architectures)}
    assert not flags & {"--language-only", "--model-path", "--tp-size", "--speculative-algorithm"}
    assert upgrade.flag_changes(OLD_PARSER, OLD_PARSER, old, deployment.architectures) == []


def test_a_flag_already_deprecated_on_the_old_release_is_not_news(deployment: Deployment) -> None:
    old_parser = parser(OLD, "--disable-cuda-graph", deprecated=("--disable-cuda-graph",))
    assert upgrade.flag_changes(old_parser, NEW_PARSER, [], deployment.architectures) == []


def test_an_abbreviated_flag_counts_under_its_full_name(deployment: Deployment) -> None:
    old = [variant_check(deployment, "mtp1", OLD, [], ("--enforce-piecewise",))]
    (change,) = [
        c
        for c in upgrade.flag_changes(OLD_PARSER, NEW_PARSER, old, deployment.architectures)
        if "qwen36/mtp1" in c.used_by
    ]
    assert change.flag == "--enforce-piecewise-cuda-graph"


def test_the_releases_own_replacement_wins_and_is_quoted(deployment: Deployment) -> None:
    said = "--legacy-knob is deprecated; use --new-knob"
    old_options = dict(OLD_PARSER.options)
    old_options["--legacy-knob"] = Option(
        dest="legacy_knob", deprecated=True, replacement="--new-knob", deprecation_message=said
    )
    new_options = dict(NEW_PARSER.options)
    new_options["--new-knob"] = Option(dest="new_knob")
    new_options["--disable-cuda-graph"] = Option(
        dest="disable_cuda_graph", deprecated=True, replacement="--cuda-graph-backend-decode=disabled"
    )
    old_parser, new_parser = ParserInfo(OLD, old_options), ParserInfo(NEW, new_options)
    old, new = checks(deployment)
    r = upgrade.compare_releases(OLD, NEW, old_parser, new_parser, old, new)
    changes = {c.flag: c for c in r.flags}
    renamed = changes["--legacy-knob"]
    assert (renamed.change, renamed.replacement, renamed.source, renamed.release_says) == (
        "renamed",
        "--new-knob",
        "SGLang 0.5.13's deprecation",
        said,
    )
    # The target's own deprecation wins over the shipped ledger's words and over sglperf's spelling.
    deprecated = changes["--disable-cuda-graph"]
    assert (deprecated.change, deprecated.replacement, deprecated.source, deprecated.release_says) == (
        "deprecated",
        "--cuda-graph-backend-decode=disabled",
        "SGLang 0.5.23's parser",
        None,
    )
    lines = upgrade_text.render(r).splitlines()
    assert (
        "  --legacy-knob: renamed in 0.5.23 (used by qwen36/mtp3-full); "
        f'its new name is --new-knob, from SGLang 0.5.13\'s deprecation ("{said}")'
    ) in lines
    assert (
        "  --disable-cuda-graph: deprecated in 0.5.23 (used by qwen36/mtp1); "
        "SGLang 0.5.23's parser names its replacement: --cuda-graph-backend-decode=disabled"
    ) in lines


def test_render_tells_the_operator_what_changes(deployment: Deployment) -> None:
    text = upgrade_text.render(report(deployment))
    lines = text.splitlines()
    assert lines[0] == "SGLang 0.5.13 -> 0.5.23"
    assert (
        "  --enforce-piecewise-cuda-graph: removed in 0.5.23 (used by qwen36/mtp3-full); "
        f"sglperf will use {PREFILL_REPLACEMENT}"
    ) in lines
    assert (
        "  --mamba-scheduler-strategy: renamed in 0.5.23 (used by qwen36/mtp1, qwen36/mtp3-full); "
        "its new name is --mamba-radix-cache-strategy, from SGLang 0.5.14-0.5.19's deprecation "
        f'("{MAMBA_SAYS}")'
    ) in lines
    assert "  --legacy-knob: removed in 0.5.23 (used by qwen36/mtp3-full); no known replacement" in lines
    assert any(line.startswith("  --disable-cuda-graph: deprecated in 0.5.23 (used by qwen36/mtp1)") for line in lines)

    def row(variant: str, intent: str) -> str:
        return next(line for line in lines if f"qwen36/{variant} " in line and f" {intent} " in line)

    assert row("mtp1", "prefill_cuda_graph").endswith("fail->pass SGLang default changed")
    assert " off " in row("mtp1", "prefill_cuda_graph") and "-> on" in row("mtp1", "prefill_cuda_graph")
    assert row("mtp1", "decode_cuda_graph").endswith("pass->pass")
    assert row("mtp3-full", "prefill_cuda_graph").endswith("pass->error BREAKS")
    assert row("mtp3-full", "single_batch_overlap").endswith("pass->fail BREAKS")

    would_fail = lines.index("Would fail with 0.5.23:")
    assert lines[would_fail + 1 : would_fail + 3] == [
        "  qwen36/mtp3-full prefill_cuda_graph: SGLang's validation says: no",
        "  qwen36/mtp3-full single_batch_overlap: read from y",
    ]
    assert "  qwen36/mtp1 new: radix cache is experimental" in lines
    assert "  qwen36/mtp1 gone: chunked prefill is off" in lines
    refused = lines.index("Refused by 0.5.23:")
    assert lines[refused + 1] == "  qwen36/mtp3-full: SGLang's validation says: no"
    assert lines[-1] == "3 intents change, 2 would fail with 0.5.23, 0 fail on both, 5 flag changes"


def test_render_of_a_quiet_upgrade(deployment: Deployment) -> None:
    passing = [verdict("mtp1", "decode_cuda_graph", "on", Status.PASS)]
    warnings = ("chunked prefill is off", "max_total_tokens=5 is small")
    old = [variant_check(deployment, "mtp1", OLD, passing, warnings=warnings)]
    new = [variant_check(deployment, "mtp1", NEW, passing, warnings=warnings)]
    r = upgrade.compare_releases(OLD, NEW, NEW_PARSER, NEW_PARSER, old, new)
    text = upgrade_text.render(r)
    assert "Flags: no flag in use was removed, renamed or deprecated" in text
    for section in ("Would fail", "SGLang warnings", "Refused by", "BREAKS", "changed"):
        assert section not in text
    assert text.endswith("0 intents change, 0 would fail with 0.5.23, 0 fail on both, 0 flag changes")


def test_an_intent_failing_on_both_releases_is_standing_not_the_upgrades_failure(deployment: Deployment) -> None:
    """The Gemma-3 case: an INERT verdict on both releases made upgrade-check exit 1 ("Would fail with
    0.5.23"), though the upgrade changes nothing about it. It is listed in its own section instead."""
    failing = [verdict("mtp1", "prefill_cuda_graph", "off", Status.FAIL, "read from x")]
    inert = [verdict("mtp1", "vision_weights_skipped", "on", Status.INERT, "the tower is built")]
    old = [variant_check(deployment, "mtp1", OLD, [*failing, *inert])]
    new = [variant_check(deployment, "mtp1", NEW, [*failing, replace(inert[0], sglang_version=NEW)])]
    r = upgrade.compare_releases(OLD, NEW, NEW_PARSER, NEW_PARSER, old, new)
    assert r.breaking == [] and r.changed == []
    assert [c.intent for c in r.standing] == ["prefill_cuda_graph", "vision_weights_skipped"]
    lines = upgrade_text.render(r).splitlines()
    assert "Would fail with 0.5.23:" not in lines and "BREAKS" not in "\n".join(lines)
    at = lines.index("Failing with 0.5.13 and 0.5.23 alike (not the upgrade's doing):")
    assert lines[at + 1 : at + 3] == [
        "  qwen36/mtp1 prefill_cuda_graph: read from x",
        "  qwen36/mtp1 vision_weights_skipped: the tower is built",
    ]
    assert lines[-1] == "0 intents change, 0 would fail with 0.5.23, 2 fail on both, 0 flag changes"
    assert any(line.endswith("inert->inert fails on both") for line in lines)


def test_json_record(deployment: Deployment) -> None:
    record = json.loads(json.dumps(report(deployment).to_record()))
    assert (record["from"], record["to"], record["breaking"]) == (OLD, NEW, 2)
    flags = {f["flag"]: f for f in record["flags"]}
    assert flags["--mamba-scheduler-strategy"] == {
        "flag": "--mamba-scheduler-strategy",
        "change": "renamed",
        "used_by": ["qwen36/mtp1", "qwen36/mtp3-full"],
        "replacement": "--mamba-radix-cache-strategy",
        "source": "SGLang 0.5.14-0.5.19's deprecation",
        "release_says": MAMBA_SAYS,
    }
    assert record["intents"][0] == {
        "deployment": "qwen36",
        "variant": "mtp1",
        "intent": "prefill_cuda_graph",
        "before": "off",
        "after": "on",
        "status_before": "fail",
        "status_after": "pass",
        "detail_after": "",
        "requested": False,
    }
    assert record["warnings"] == [
        {
            "deployment": "qwen36",
            "variant": "mtp1",
            "appeared": ["radix cache is experimental"],
            "vanished": ["chunked prefill is off"],
        }
    ]
    assert record["errors"] == ["qwen36/mtp3-full: SGLang's validation says: no"]


def test_the_walk_names_the_release_of_each_change_with_its_rule_and_the_flags_replacement_chain(
    deployment: Deployment,
) -> None:
    mid = "0.5.16"
    cap = Write(
        "cuda_graph_max_bs",
        48,
        "_handle_gpu_memory_settings",
        "server_args.py:1496",
        comment="A10",
        conditions=("if x",),
    )

    def step(
        version: str, prefill: str, max_bs: int, parser_: ParserInfo, writes: tuple[Write, ...] = ()
    ) -> upgrade.ReleaseStep:
        status = Status.PASS if prefill == "on" else Status.FAIL
        c = variant_check(
            deployment, "mtp1", version, [verdict("mtp1", "prefill_cuda_graph", prefill, status, version=version)]
        )
        assert c.resolution is not None
        effective = {"cuda_graph_max_bs": max_bs, "chunked_prefill_size": 4096}
        c.resolution = Resolution(c.resolution.argv, {}, effective, writes=writes)
        return upgrade.ReleaseStep(version, parser_, (c,))

    middle_parser = ParserInfo(
        mid,
        {
            **OLD_PARSER.options,
            "--legacy-knob": Option(
                "legacy_knob", deprecated=True, replacement="--new-knob", deprecation_message="use --new-knob"
            ),
        },
    )
    steps = [
        step(OLD, "off", 24, OLD_PARSER),
        step(mid, "on", 48, middle_parser, (cap,)),
        upgrade.ReleaseStep("0.5.17", None, (), "building its environment failed"),
        step(NEW, "on", 48, NEW_PARSER, (cap,)),
    ]
    old, new = steps[0].checks, steps[-1].checks
    report = upgrade.compare_releases(OLD, NEW, OLD_PARSER, NEW_PARSER, old, new)
    report.flags.append(upgrade.FlagChange("--legacy-knob", "removed", ("qwen36/mtp3-full",), None))
    walk = upgrade.walk_releases(steps, report)
    assert walk.walked == [OLD, mid, NEW] and walk.unresolved == ["0.5.17: building its environment failed"]
    assert [(t.release, t.what, t.before, t.after) for t in walk.transitions] == [
        (mid, "intent prefill_cuda_graph", "off", "on"),
        (mid, "cuda_graph_max_bs", "24", "48"),
    ]
    assert walk.transitions[1].rule == cap.describe()
    (link,) = walk.chains["--legacy-knob"]
    assert (link.first, link.replacement, link.message) == (mid, "--new-knob", "use --new-knob")
    assert walk.chain_ends_accepted == {"--legacy-knob": False}  # the target has no --new-knob either
    text = upgrade_text.render_walk(walk)
    assert f"Releases walked: {OLD} -> {mid} -> {NEW}" in text
    assert f"  --legacy-knob -> --new-knob ({mid} deprecated --legacy-knob and named it); not accepted by {NEW}" in text
    assert f"    {mid}: cuda_graph_max_bs: 24 -> 48" in text
    json.dumps(walk.to_record())


def _walk_step(
    deployment: Deployment,
    version: str,
    effective: dict[str, Any],
    *,
    writes: tuple[Write, ...] = (),
    warnings: tuple[str, ...] = (),
    model: ModelFacts | None = None,
    model_error: str | None = None,
    vision: tuple[str, Status] = ("on", Status.PASS),
) -> upgrade.ReleaseStep:
    verdicts = [verdict("mtp3-full", "vision_weights_skipped", vision[0], vision[1], version=version)]
    c = variant_check(deployment, "mtp3-full", version, verdicts)
    logs = tuple(LogLine("WARNING", "sglang", w) for w in warnings)
    c.resolution = Resolution(
        c.resolution.argv if c.resolution else (), {}, effective, logs, writes, model=model, model_error=model_error
    )
    return upgrade.ReleaseStep(version, NEW_PARSER, (c,))


BUILT = ModelFacts("Qwen3_5ForConditionalGeneration", None, 0, 26896675584, 0)


def test_the_walk_never_credits_a_change_to_the_release_after_a_gap_alone(deployment: Deployment) -> None:
    """A release that could not be resolved, or whose model class could not be built, leaves the change unsure
    between it and the next one: shown at the next release, with the gap named; no phantom change on the
    release where the model class failed to build."""
    cap = Write("mem_fraction_static", 0.85, "_handle_gpu_memory_settings", "server_args.py:4979")
    old_rule = Write("disable_piecewise_cuda_graph", True, "_handle_piecewise_cuda_graph", "server_args.py:1376")
    steps = [
        _walk_step(
            deployment,
            "0.5.13",
            {"mem_fraction_static": 0.7, "disable_piecewise_cuda_graph": True},
            writes=(old_rule,),
            model=BUILT,
        ),
        upgrade.ReleaseStep("0.5.14", None, (), "building its environment failed"),
        _walk_step(
            deployment,
            "0.5.15",
            {"mem_fraction_static": 0.85},
            writes=(cap,),
            model=BUILT,
            warnings=("SGLANG_ENABLE_SPEC_V2 has been removed",),
        ),
        _walk_step(
            deployment,
            "0.5.16",
            {"mem_fraction_static": 0.85},
            model_error="RuntimeError: no groups",
            vision=("off", Status.UNPROVEN),
        ),
        _walk_step(
            deployment, "0.5.17", {"mem_fraction_static": 0.85}, model=replace(BUILT, param_bytes_per_rank=26000000000)
        ),
    ]
    fields = ("mem_fraction_static", "disable_piecewise_cuda_graph", "built_model.param_bytes_per_rank")
    changes = tuple(FieldChange(f, "memory and KV pool", 0, 1) for f in fields)
    report = upgrade.UpgradeReport("0.5.13", "0.5.17", fields=[upgrade.FieldChanges("qwen36", "mtp3-full", changes)])
    walk = upgrade.walk_releases(steps, report)
    seen = {(t.what, t.release): t for t in walk.transitions}
    # Changed between 0.5.13 and 0.5.15, and 0.5.14 says nothing: unsure, the rule quoted is 0.5.15's.
    moved = seen[("mem_fraction_static", "0.5.15")]
    assert (moved.unsure, moved.rule_release) == (("0.5.14",), "0.5.15") and moved.rule == cap.describe()
    # A field 0.5.15 no longer has: the rule that set it is 0.5.13's, and says so.
    gone = seen[("disable_piecewise_cuda_graph", "0.5.15")]
    assert (gone.after, gone.rule_release) == ("(absent)", "0.5.13") and gone.rule == old_rule.describe()
    # The warning only 0.5.15 prints: it appears there and goes at 0.5.16, release by release.
    assert [(t.release, t.before, t.after) for t in walk.transitions if t.what == upgrade.records.WARNING] == [
        ("0.5.15", "(none)", "SGLANG_ENABLE_SPEC_V2 has been removed"),
        ("0.5.16", "SGLANG_ENABLE_SPEC_V2 has been removed", "(none)"),
    ]
    # 0.5.16 could not build the model: said once, and no intent or model fact moves there.
    built_again = [(t.release, t.after) for t in walk.transitions if t.what == upgrade.records.MODEL_BUILD]
    assert [(r, a.split(":")[0]) for r, a in built_again] == [
        ("0.5.16", "not built on the meta device"),
        ("0.5.17", "built"),
    ]
    assert not any(t.what.startswith("intent") for t in walk.transitions)
    built = seen[("built_model.param_bytes_per_rank", "0.5.17")]
    assert (built.before, built.after, built.unsure) == ("26896675584", "26000000000", ("0.5.16",))
    text = upgrade_text.render_walk(walk)
    assert "    0.5.15 (or 0.5.14 before it, where it is not known): mem_fraction_static: 0.7 -> 0.85" in text
    assert f"        0.5.13: {old_rule.describe()}" in text
    assert (
        "    0.5.15 (or 0.5.14 before it, where it is not known): SGLang warns: SGLANG_ENABLE_SPEC_V2 has been removed"
        in text
    )
    assert "    0.5.16: the model class was not built on the meta device: RuntimeError: no groups: " in text
    assert "    0.5.17: the model class is built again" in text


def test_a_chain_ends_accepted_only_with_a_value_the_target_takes(deployment: Deployment) -> None:
    """0.5.14-0.5.19 named --cuda-graph-backend-prefill=tc_piecewise for --enforce-piecewise-cuda-graph; 0.5.23
    has the flag but refuses the value: the chain does not end at something 0.5.23 accepts."""
    said = Option(
        "enforce_piecewise_cuda_graph", deprecated=True, replacement="--cuda-graph-backend-prefill=tc_piecewise"
    )
    middle = ParserInfo("0.5.19", {**OLD_PARSER.options, "--enforce-piecewise-cuda-graph": said})
    steps = [
        upgrade.ReleaseStep(OLD, OLD_PARSER, ()),
        upgrade.ReleaseStep("0.5.19", middle, ()),
        upgrade.ReleaseStep(NEW, NEW_PARSER, ()),
    ]
    report = upgrade.UpgradeReport(
        OLD, NEW, flags=[upgrade.FlagChange("--enforce-piecewise-cuda-graph", "removed", (), None)]
    )
    walk = upgrade.walk_releases(steps, report)
    assert [link.replacement for link in walk.chains["--enforce-piecewise-cuda-graph"]] == [
        "--cuda-graph-backend-prefill=tc_piecewise"
    ]
    assert walk.chain_ends_accepted == {"--enforce-piecewise-cuda-graph": False}
