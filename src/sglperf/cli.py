"""`sglperf` command line: the same machinery as the pytest plugin, for people and CI steps."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import get_args

from sglperf.commands import DEFAULT_DEPLOYMENTS, UsageError
from sglperf.errors import SglperfError
from sglperf.model.runner_profile import CpuKernel
from sglperf.options import (
    EMULATOR,
    EMULATOR_CONFIG,
    HISTORY_STORE,
    MAX_HOST_LOAD,
    MODEL_PATH,
    SGLANG_PYTHON,
    SGLANG_VERSION,
    add_to_command,
)
from sglperf.sglang import envs

# Each command imports what only it uses, in its own body: the history store, the statistics (numpy) and
# the report took 0.3 s of the 0.7 s that `sglperf --help` and a warm preflight cost on the Xeon (1.7 s on
# the AVX2 EPYC), for nothing (bench/preflight_time.py).
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2  # argparse's own code for a usage error, kept for every explained error
EXIT_BUG = 3
EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a tool ended by SIGPIPE
EXIT_INTERRUPTED = 128 + 2  # what a shell reports for a tool ended by Ctrl-C (SIGINT)
EXIT_CODES = f"""exit codes:
  0    done (and every check passed)
  {EXIT_CHECK_FAILED}    done, with a failure to report: a verdict, a breaking upgrade, a folder not imported,
       an environment not built
  {EXIT_BAD_INPUT}    an error sglperf explains in one line (bad input, an unusable file, server or store)
  {EXIT_BUG}    a bug in sglperf: the traceback follows, please report it
  {EXIT_BROKEN_PIPE}  the reader of the output went away (`sglperf ... | head`)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C, or SIGTERM during an environment build)"""


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _python(args: argparse.Namespace) -> str:
    """The interpreter the command asks: --sglang-python, --sglang-version's managed one, or this one."""
    return envs.choose_python(args.sglang_python, getattr(args, "sglang_version", None), _say)


def cmd_preflight(args: argparse.Namespace) -> int:
    from sglperf.commands import resolve
    from sglperf.reporting.console import verdict_json, verdict_table

    started = time.perf_counter()
    found = resolve.deployments(args.deployments or [DEFAULT_DEPLOYMENTS], args.variant)
    checked = resolve.check_release(found, _python(args), args.variant, _say)
    verdicts = checked.verdicts
    print(verdict_json(verdicts) if args.json else verdict_table(verdicts))
    # A multi-node role's ranks: not an intent's verdict, said beside the table (stderr under --json).
    ranks = [(c, c.rank_drift) for c in checked.checks if c.rank_drift is not None]
    for check, drift in ranks:
        where = f"{check.deployment.key}/{check.variant.id}"
        line = f"{where}: ranks differ: {'; '.join(drift)}" if drift else f"{where}: every rank resolves alike"
        print(line, file=sys.stderr if args.json else sys.stdout)
    _say(f"preflight took {time.perf_counter() - started:.1f} s")
    failed = any(v.status.failed for v in verdicts) or any(drift for _, drift in ranks)
    return EXIT_CHECK_FAILED if failed else 0


def cmd_explain(args: argparse.Namespace) -> int:
    from sglperf.commands import resolve
    from sglperf.reporting.explain import render, to_json

    started = time.perf_counter()
    found = resolve.deployments(args.deployments or [DEFAULT_DEPLOYMENTS], args.variant, args.against)
    explanations = resolve.explain_variants(found, _python(args), args.variant, args.against, _say)
    print(to_json(explanations) if args.json else render(explanations).rstrip("\n"), flush=True)
    _say(f"explain took {time.perf_counter() - started:.1f} s")
    return 0


def cmd_upgrade_check(args: argparse.Namespace) -> int:
    from sglperf.commands import resolve
    from sglperf.reporting import upgrade as upgrade_text

    started = time.perf_counter()
    found = resolve.deployments(args.deployments or [DEFAULT_DEPLOYMENTS])
    old_python = envs.choose_python(args.sglang_python, args.from_version, _say)
    outcome = resolve.upgrade_check(found, old_python, args.to, args.walk, _say)
    text = upgrade_text.render(outcome.report)
    if outcome.walk is not None:
        text += "\n" + upgrade_text.render_walk(outcome.walk)
    print(json.dumps(outcome.to_record(), indent=2, sort_keys=True) if args.json else text)
    _say(f"upgrade-check took {time.perf_counter() - started:.1f} s")
    return EXIT_CHECK_FAILED if outcome.report.breaking else 0


def cmd_manifests(args: argparse.Namespace) -> int:
    import yaml

    class _NoAliases(yaml.SafeDumper):
        """Each object written out whole (no &id001 / *id001): manifests are read by people."""

        def ignore_aliases(self, data: object) -> bool:
            return True

    from sglperf.commands import manifests, resolve

    found = resolve.deployments(args.deployments or [DEFAULT_DEPLOYMENTS])
    objects = manifests.render(found, _python(args), args.variant, args.image, args.namespace, _say)
    print(yaml.dump_all(objects, Dumper=_NoAliases, sort_keys=False), end="")
    _say(f"{len(objects)} objects rendered, none applied (review them, then: kubectl apply -f FILE)")
    return 0


def cmd_bisect(args: argparse.Namespace) -> int:
    from sglperf.commands import bisect
    from sglperf.reporting import bisect as bisect_text
    from sglperf.reporting import json_out
    from sglperf.upgrade.bisect import Answer, Budget

    pythons: dict[str, str] = {}
    for given in args.release_python or []:
        release, sep, python = given.partition("=")
        if not sep or not release or not python:
            raise UsageError(
                f"--release-python {given!r}: give RELEASE=PATH, e.g. 0.5.22=/opt/sglang-0.5.22/bin/python"
            )
        pythons[release] = python
    try:
        budget = Budget(args.first_quartets, args.max_quartets)
    except ValueError as exc:
        raise UsageError(f"--first-quartets/--max-quartets: {exc}") from None
    request = bisect.BisectRequest(
        deployment=Path(args.deployment),
        from_version=args.from_version,
        to_version=args.to,
        selector=args.k,
        metric=args.metric,
        results_dir=Path(args.results_dir) if args.results_dir else None,
        emulator=args.emulator,
        emulator_config=args.emulator_config,
        pythons=pythons,
        model_path=args.model_path,
        budget=budget,
        history=args.history_store,
        max_host_load=args.max_host_load,
    )
    result = bisect.bisect(request, _say)
    if args.json:
        print(json_out.json_text(bisect_text.to_record(result.outcome, result.source)))
    else:
        print(bisect_text.render(result.outcome, result.source))
    _say(f"state and each release's results: {result.folder}")
    return 0 if result.outcome.answer in (Answer.CULPRIT, Answer.SAME) else EXIT_CHECK_FAILED


def cmd_baseline(args: argparse.Namespace) -> int:
    from sglperf.baselines import store
    from sglperf.reporting import baselines

    if args.action == "show":
        for path in map(Path, args.files):
            print("\n".join(baselines.shown(path, store.load(path))))
        return 0
    if len(args.files) != 2:
        _say("sglperf baseline diff OLD NEW: two baseline files (e.g. `git show HEAD~1:PATH > old.json`)")
        return EXIT_BAD_INPUT
    old, new = (store.load(Path(f)) for f in args.files)
    for line in baselines.differences(old, new):
        print(line)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from sglperf.commands import runs

    written = runs.write_report(Path(args.results_dir), args.history_store)
    for line in written.said:
        _say(line)
    print(written.path)
    if args.summary:
        print(written.path.read_text())
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    """Import results folders or export lines into the store, export it, or list its runs."""
    from sglperf.commands import runs
    from sglperf.model.numbers_source import NumbersSource

    store = runs.open_store(args.history_store)
    try:
        if args.action == "import":
            imported, skipped = runs.import_runs(store, args.paths, _say)
            for i in imported:
                state = "added" if i.added else "already stored, left as it is"
                print(f"{i.run.identity.run_id} {i.run.identity.recorded_at} {i.given}: {state}")
            return EXIT_CHECK_FAILED if skipped else 0
        if args.action == "export":
            for line in store.export_lines():
                print(line)
            return 0
        for ident in store.runs():
            flags = NumbersSource.of(emulated=ident.emulated).words.flag
            print(
                f"{ident.recorded_at} {ident.run_id} runner={ident.runner or '-'} SGLang {ident.sglang_version}{flags}"
            )
        return 0
    finally:
        store.close()


def cmd_compare(args: argparse.Namespace) -> int:
    """Two runs (ids in the store, or results folders): every metric and intent that changed; with
    --variants, one run's variants against its reference variant."""
    from sglperf.commands import runs
    from sglperf.history import compare
    from sglperf.reporting.changes import changes_table
    from sglperf.reporting.effects import effects_json, effects_text
    from sglperf.reporting.run_report import RunReport

    if args.variants == (args.b is not None):
        raise UsageError("compare takes two runs, or one run with --variants")
    found = runs.load_runs([args.a, *([args.b] if args.b is not None else [])], args.history_store)
    if args.variants:
        report = RunReport.of_stored(found[0])
        print(effects_json(report.effects) if args.json else effects_text(report))
        return 0
    a, b = found
    print(changes_table(a.identity.label, b.identity.label, compare.compare_runs(a, b)))
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    from sglperf.commands import environments

    if args.action == "build":
        # --cpu: the release's CPU-side install plus a kernel (SGLang's, or the stand-in), to serve on this CPU
        for python in environments.build(args.versions, args.cpu, _say):
            print(python)
    elif args.action == "path":
        for version, found in environments.interpreters(args.versions, args.cpu):
            if found is None:
                cpu = f" --cpu {args.cpu}" if args.cpu else ""
                _say(f"SGLang {version}{cpu} environment is not built; run `sglperf env build {version}{cpu}`")
                return EXIT_CHECK_FAILED
            print(found)
    else:
        for env in envs.list_envs():
            print(f"{env.version:12} {'ready' if env.ready else 'incomplete':10} {env.path}")
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    """A first deployment file, from a model folder's config.json and the runner's GPUs."""
    from sglperf import scaffold

    request = scaffold.InitRequest(
        model=Path(args.model),
        root=Path(args.dir),
        key=args.key,
        served_path=args.served_path,
        gpu_count=args.gpus,
        gpu_name=args.gpu_name,
        memory_gib=args.memory_gib,
        compute_capability=args.compute_capability,
        runner_name=args.runner_name,
        tp_size=args.tp,
        draft=Path(args.draft) if args.draft else None,
        draft_served_path=args.draft_served_path,
    )
    # Asked for at a terminal; in a script, a missing fact is one line naming the flags.
    ask = input if sys.stdin.isatty() and not args.no_input else None
    # The weights are sized by the newest SGLang built here, as preflight builds the model (else config.json).
    result = scaffold.init(request, ask, sizing=scaffold.newest_release(_say), progress=_say)
    for line in scaffold.summary(result, request.root, envs.NEWEST_CHECKED):
        _say(line)
    return 0


def cmd_shm(args: argparse.Namespace) -> int:
    """The server ledger: what servers map in /dev/shm and the processes they started, and the sweep
    that every launch runs."""
    from sglperf.runtime import server_ledger

    if args.action == "sweep":
        removed = server_ledger.sweep(_say)
        _say(f"{len(removed)} file(s) removed from {server_ledger.SHARED_MEMORY_DIR}")
        return 0
    files = server_ledger.entry_files()
    if not files:
        _say(f"no server's shared memory or processes are written down in {server_ledger.ledger_dir()}")
    for file in files:
        try:
            entry = server_ledger.read_entry(file)
        except server_ledger.LedgerError as exc:
            print(exc)
            continue
        state = "running" if entry.server_alive() else "gone: `sglperf shm sweep` removes what it left"
        print(f"{entry.name} (pid {entry.pid}, {state})")
        for path in entry.paths:
            size = f"{os.path.getsize(path) / 2**20:.0f} MiB" if os.path.exists(path) else "already removed"
            print(f"  {path} ({size})")
        for proc in entry.descendants_alive():
            print(f"  pid {proc.pid} still running")
    return 0


def _deployment_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("deployments", nargs="*", help=f"deployment files or folders (default: {DEFAULT_DEPLOYMENTS}/)")


def _interpreter_options(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group()
    add_to_command(group, SGLANG_PYTHON)
    add_to_command(group, SGLANG_VERSION)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sglperf", description=__doc__, epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("preflight", help="what SGLang will actually do with each variant's flags (no GPU needed)")
    _deployment_arguments(p)
    p.add_argument("--variant", action="append", help="only these variant ids (repeatable)")
    p.add_argument("--json", action="store_true", help="print a JSON list of records instead of the table")
    _interpreter_options(p)
    p.set_defaults(func=cmd_preflight)

    p = sub.add_parser(
        "explain",
        help="every decision SGLang makes for each variant, with the rule in its code that made it; --against: "
        "what differs from another variant, and what each flag really changed",
    )
    _deployment_arguments(p)
    p.add_argument("--variant", action="append", help="only these variant ids (repeatable)")
    p.add_argument("--against", metavar="VARIANT", help="compare each variant with this one of the same deployment")
    p.add_argument("--json", action="store_true", help="print a JSON list of records instead of text")
    _interpreter_options(p)
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser(
        "upgrade-check", help="the deployments under the current and a target SGLang release, side by side"
    )
    _deployment_arguments(p)
    p.add_argument("--to", required=True, metavar="VERSION", help="the SGLang release to upgrade to")
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "--from", dest="from_version", metavar="VERSION", help="the release in use (managed environment)"
    )
    add_to_command(source, SGLANG_PYTHON, help="interpreter of the SGLang environment in use (default: this one)")
    p.add_argument(
        "--walk",
        action="store_true",
        help="also resolve every release in between (managed environments, built on first use): where each "
        "change happened, with the rule there, and the flags' replacement chains from their own deprecations",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_upgrade_check)

    p = sub.add_parser(
        "bisect",
        help="in which SGLang release one measurement item changed, and through which of SGLang's decisions: "
        "paired comparisons on fresh servers, the releases where its effective config changed first",
    )
    p.add_argument("deployment", help="the deployment file")
    p.add_argument("--from", dest="from_version", required=True, metavar="VERSION", help="the older release")
    p.add_argument("--to", required=True, metavar="VERSION", help="the newer release")
    p.add_argument(
        "-k", required=True, metavar="SELECTOR", help="the measurement item: its key, or a part of it only it has"
    )
    p.add_argument("--metric", default="decode_tok_s", help="the metric to bisect (default: decode_tok_s)")
    p.add_argument(
        "--results-dir",
        metavar="DIR",
        help="where the state, each release's results and the server logs go; the same command resumes from it "
        "(default: results/bisect/<item>-<from>-<to>)",
    )
    p.add_argument(
        "--release-python",
        action="append",
        metavar="RELEASE=PATH",
        help="the interpreter of a given SGLang environment for one release (repeatable; default: managed ones)",
    )
    p.add_argument("--first-quartets", type=int, default=1, metavar="N", help="A B B A quartets per comparison first")
    p.add_argument(
        "--max-quartets", type=int, default=4, metavar="N", help="doubled up to this while not yet known (default 4)"
    )
    add_to_command(p, EMULATOR)
    add_to_command(
        p,
        EMULATOR_CONFIG,
        help='the emulator\'s timing and faults; "variants" by id and "releases" by SGLang version get their own, '
        'e.g. {"releases": {"0.5.22": {"decode_slowdown": 1.1}}}',
    )
    add_to_command(p, MODEL_PATH)
    add_to_command(p, MAX_HOST_LOAD)
    add_to_command(p, HISTORY_STORE)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bisect)

    p = sub.add_parser(
        "manifests",
        help="a deployment's [topology] as Kubernetes LeaderWorkerSet manifests (a dry run: printed, never applied)",
    )
    _deployment_arguments(p)
    p.add_argument("--variant", help="the variant to render (default: each deployment's first)")
    p.add_argument("--image", required=True, help="the SGLang container image, e.g. lmsysorg/sglang:v0.5.23")
    p.add_argument("--namespace", default="default", help="the namespace the objects go in (default: default)")
    _interpreter_options(p)
    p.set_defaults(func=cmd_manifests)

    p = sub.add_parser("baseline", help="read stored baselines")
    p.add_argument("action", choices=["show", "diff"])
    p.add_argument("files", nargs="+", help="baseline JSON files (diff: OLD NEW)")
    p.set_defaults(func=cmd_baseline)

    p = sub.add_parser("report", help="record a results folder in the history, then (re)build report.md and plots")
    p.add_argument("results_dir")
    p.add_argument("--summary", action="store_true", help="also print the markdown (e.g. >> $GITHUB_STEP_SUMMARY)")
    add_to_command(p, HISTORY_STORE)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("history", help="the run-history store: import results folders, export it, list its runs")
    p.add_argument("action", choices=["import", "export", "list"])
    p.add_argument("paths", nargs="*", help="import: results folders, or files written by `history export`")
    add_to_command(p, HISTORY_STORE)
    p.set_defaults(func=cmd_history)

    p = sub.add_parser(
        "compare",
        help="two runs side by side: every metric and intent that changed; or, with --variants, one run's "
        "variants against its reference variant",
    )
    p.add_argument("a", help="a run id in the history store, or a results folder")
    p.add_argument("b", nargs="?", help="a run id in the history store, or a results folder")
    p.add_argument(
        "--variants",
        action="store_true",
        help="one run: each variant against the deployment's reference variant (rank test, interval, floor)",
    )
    p.add_argument("--json", action="store_true", help="with --variants: the effects as JSON records")
    add_to_command(p, HISTORY_STORE)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("env", help="managed per-release SGLang environments for CPU-side resolution")
    p.add_argument("action", choices=["build", "path", "list"])
    p.add_argument("versions", nargs="*")
    p.add_argument(
        "--cpu",
        nargs="?",
        const="sgl-kernel",
        choices=get_args(CpuKernel),
        help="the environment that serves on this CPU: with SGLang's CPU kernel (sgl-kernel, the default; needs "
        "AVX-512), or with no native kernel (torch-native: SGLang's torch fallbacks, any x86-64 CPU)",
    )
    p.set_defaults(func=cmd_env)

    p = sub.add_parser(
        "init",
        help="write a first deployment file (and its model config, prompts, pytest.ini, .gitignore lines) from a "
        "model folder's config.json and the runner's GPUs",
    )
    p.add_argument("model", help="the model's folder (holding config.json), or its config.json")
    p.add_argument("--dir", default=".", help="the repository to write into (default: here)")
    p.add_argument("--key", help="the deployment's name (default: from the model folder's name)")
    p.add_argument("--served-path", help="the checkpoint's path on the runner (default: the model folder given)")
    p.add_argument("--gpus", type=int, help="the runner's GPU count (default: this machine's, read through NVML)")
    p.add_argument("--gpu-name", help='as nvidia-smi prints it, e.g. "NVIDIA L40S"')
    p.add_argument("--memory-gib", type=float, help="memory per GPU, GiB")
    p.add_argument("--compute-capability", help="e.g. 8.9")
    p.add_argument("--runner-name", help="the runner's name in the file (default: from its GPUs, e.g. 1xl40s)")
    p.add_argument(
        "--tp",
        type=int,
        help="tensor-parallel size (default: the fewest GPUs that hold the weights, as the newest SGLang environment "
        "built here builds the model, else counted from config.json)",
    )
    p.add_argument("--draft", help="a draft model's folder or config.json (EAGLE, EAGLE3, a small model)")
    p.add_argument("--draft-served-path", help="the draft checkpoint's path on the runner (default: --draft's folder)")
    p.add_argument("--no-input", action="store_true", help="never ask: a fact left unknown is an error")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser(
        "shm",
        help="/dev/shm files and processes of servers sglperf started: list them, or remove/stop those of "
        "servers that are gone (a killed pytest leaves them; each launch sweeps too)",
    )
    p.add_argument("action", choices=["list", "sweep"])
    p.set_defaults(func=cmd_shm)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        # `sglperf ... | head -1`: the reader has what it wanted. Exit quietly; stdout now goes
        # nowhere so that the interpreter's final flush does not complain either.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except SglperfError as exc:
        _say(f"sglperf: {exc}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        # Ctrl-C, or SIGTERM where a step turns it into this (an environment build): what was half done has
        # been cleaned up on the way here, so one line says so rather than a traceback.
        _say(f"sglperf: interrupted ({str(exc) or 'Ctrl-C'})")
        return EXIT_INTERRUPTED
    except Exception:
        # Not an explained error: a bug. Saying "bad input" would send the user to fix what is not broken.
        _say("sglperf: unexpected error, a bug in sglperf: please report it with this traceback")
        traceback.print_exc(file=sys.stderr)
        return EXIT_BUG


if __name__ == "__main__":
    sys.exit(main())
