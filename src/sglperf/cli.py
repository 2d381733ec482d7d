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
from typing import TYPE_CHECKING, get_args

from sglperf.errors import SglperfError
from sglperf.model.deployment import Deployment
from sglperf.model.deployment_file import discover
from sglperf.model.runner_profile import CpuKernel
from sglperf.sglang import cpu_envs, envs

# Each command imports what only it uses, in its own body: the history store, the statistics (numpy) and
# the report took 0.3 s of the 0.7 s that `sglperf --help` and a warm preflight cost on the Xeon (1.7 s on
# the AVX2 EPYC), for nothing (bench/preflight_time.py).
if TYPE_CHECKING:
    from sglperf import history, preflight
    from sglperf.history.records import StoredRun
    from sglperf.sglang.argv import ParserInfo

DEFAULT_DEPLOYMENTS = "deployments"
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2  # argparse's own code for a usage error, kept for every explained error
EXIT_BUG = 3
EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a tool ended by SIGPIPE
EXIT_CODES = f"""exit codes:
  0    done (and every check passed)
  {EXIT_CHECK_FAILED}    done, with a failure to report: a verdict, a breaking upgrade, a folder not imported,
       an environment not built
  {EXIT_BAD_INPUT}    an error sglperf explains in one line (bad input, an unusable file, server or store)
  {EXIT_BUG}    a bug in sglperf: the traceback follows, please report it
  {EXIT_BROKEN_PIPE}  the reader of the output went away (`sglperf ... | head`)"""


class UsageError(SglperfError, ValueError):
    """Bad input on the command line; the message says which option and what is allowed."""


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _add_interpreter_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--python", help="interpreter of the SGLang environment to ask (default: this one)")
    group.add_argument(
        "--sglang",
        metavar="VERSION",
        help="use sglperf's managed environment for this SGLang release (built on first use)",
    )


def _deployments(paths: Sequence[str], variants: Sequence[str] | None = None) -> list[Deployment]:
    """The deployment files, checked (and every --variant known) before any interpreter is asked."""
    deployments = discover(list(paths))
    known = sorted({v.id for d in deployments for v in d.variants})
    unknown = [v for v in dict.fromkeys(variants or []) if v not in known]
    if unknown:
        files = ", ".join(str(d.path) for d in deployments)
        raise UsageError(
            f"--variant {', '.join(unknown)}: no such variant in {files}; known variants: {', '.join(known)}"
        )
    return deployments


def _check_all(
    deployments: Sequence[Deployment], python: str, variants: Sequence[str] | None = None
) -> tuple[str, ParserInfo | None, list[preflight.VariantCheck]]:
    """Every deployment's variants resolved by the SGLang under ``python``: (version, parser, checks)."""
    from sglperf import preflight

    checks: list[preflight.VariantCheck] = []
    version, parser = "", None
    for deployment in deployments:
        runner_python = cpu_envs.python_for_runner(python, deployment.runner, _say)  # CPU runner: its env
        resolver = preflight.Resolver(runner_python, deployment.runner, progress=_say)
        try:
            release = resolver.release()
            version, parser = release.version, release.parser
            checks += preflight.check(deployment, resolver, variants)
        finally:
            resolver.close()
    return version, parser, checks


def cmd_preflight(args: argparse.Namespace) -> int:
    from sglperf.reporting.console import verdict_json, verdict_table

    started = time.perf_counter()
    deployments = _deployments(args.deployments or [DEFAULT_DEPLOYMENTS], args.variant)
    python = envs.choose_python(args.python, args.sglang, _say)
    _, _, checks = _check_all(deployments, python, args.variant)
    verdicts = [v for check in checks for v in check.verdicts]
    print(verdict_json(verdicts) if args.json else verdict_table(verdicts))
    _say(f"preflight took {time.perf_counter() - started:.1f} s")
    return EXIT_CHECK_FAILED if any(v.status.failed for v in verdicts) else 0


def cmd_explain(args: argparse.Namespace) -> int:
    from sglperf import preflight
    from sglperf.preflight.explain import explain
    from sglperf.reporting.explain import render, to_json

    started = time.perf_counter()
    deployments = _deployments(
        args.deployments or [DEFAULT_DEPLOYMENTS], [*(args.variant or []), *([args.against] if args.against else [])]
    )
    python = envs.choose_python(args.python, args.sglang, _say)
    explanations = []
    for deployment in deployments:
        ids = [v.id for v in deployment.variants if not args.variant or v.id in args.variant]
        if args.against and args.against not in {v.id for v in deployment.variants}:
            continue  # --against names another deployment's variant
        if not ids:
            continue
        runner_python = cpu_envs.python_for_runner(python, deployment.runner, _say)
        resolver = preflight.Resolver(runner_python, deployment.runner, progress=_say)
        try:
            explanations += explain(deployment, resolver, ids, args.against)
        finally:
            resolver.close()
    if not explanations:
        raise UsageError(f"--against {args.against}: no deployment given has both it and the variants asked for")
    print(to_json(explanations) if args.json else render(explanations).rstrip("\n"), flush=True)
    _say(f"explain took {time.perf_counter() - started:.1f} s")
    return 0


def cmd_upgrade_check(args: argparse.Namespace) -> int:
    from sglperf import upgrade
    from sglperf.reporting import upgrade as upgrade_text

    started = time.perf_counter()
    deployments = _deployments(args.deployments or [DEFAULT_DEPLOYMENTS])
    old_python = envs.choose_python(args.python, args.from_version, _say)
    new_python = envs.choose_python(None, args.to, _say)
    _say(f"resolving with the current release ({old_python})")
    old_version, old_parser, old_checks = _check_all(deployments, old_python)
    _say(f"resolving with SGLang {args.to} ({new_python})")
    new_version, new_parser, new_checks = _check_all(deployments, new_python)
    assert old_parser is not None and new_parser is not None  # discover() raises on no deployments
    report = upgrade.compare_releases(old_version, new_version, old_parser, new_parser, old_checks, new_checks)
    record = report.to_record()
    text = upgrade_text.render(report)
    if args.walk:
        steps = [upgrade.ReleaseStep(old_version, old_parser, tuple(old_checks))]
        for version in envs.releases_between(old_version, new_version, _say):
            _say(f"resolving with SGLang {version} (the walk)")
            try:
                between, parser, checks = _check_all(deployments, envs.choose_python(None, version, _say))
                steps.append(upgrade.ReleaseStep(between, parser, tuple(checks)))
            except SglperfError as exc:  # one release that cannot be built or resolved does not end the walk
                steps.append(upgrade.ReleaseStep(version, None, (), str(exc).splitlines()[0]))
        steps.append(upgrade.ReleaseStep(new_version, new_parser, tuple(new_checks)))
        walk = upgrade.walk_releases(steps, report)
        record["walk"] = walk.to_record()
        text += "\n" + upgrade_text.render_walk(walk)
    print(json.dumps(record, indent=2, sort_keys=True) if args.json else text)
    _say(f"upgrade-check took {time.perf_counter() - started:.1f} s")
    return EXIT_CHECK_FAILED if report.breaking else 0


def cmd_baseline(args: argparse.Namespace) -> int:
    from sglperf.baselines import regression, store

    if args.action == "show":
        for path in map(Path, args.files):
            b = store.load(path)
            p = b.provenance
            gpus = ", ".join(sorted(set(p.gpu_names)))
            tag = p.numbers_source.words.tag
            print(f"{path}: {b.deployment}/{b.variant} on {p.runner} ({p.gpu_count}x {gpus}){tag}")
            print(
                f"  SGLang {p.sglang_version}, torch {p.torch_version}, CUDA {p.cuda_version}, "
                f"driver {p.driver_version}, "
                f"sglperf {p.harness_version} ({p.git_commit[:10]}), recorded {p.date}"
            )
            print(f"  launch: {p.launch_command}")
            for key, entry in sorted(b.entries.items()):
                medians = ", ".join(f"{m} {s.median:g} (n={s.n})" for m, s in sorted(entry.summary.items()))
                print(f"  {key}: {medians}")
        return 0
    if len(args.files) != 2:
        _say("sglperf baseline diff OLD NEW: two baseline files (e.g. `git show HEAD~1:PATH > old.json`)")
        return EXIT_BAD_INPUT
    old, new = (store.load(Path(f)) for f in args.files)
    for key in sorted(set(old.entries) | set(new.entries)):
        if key not in new.entries:
            print(f"{key}: removed")
            continue
        for line in store.describe_change(old, new, key):
            print(line)
        if key in old.entries:
            for c in regression.compare_entry(old.entries[key], new.entries[key].samples, {}):
                print(f"  {c.message()}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from sglperf import history
    from sglperf.reporting import markdown

    folder = Path(args.results_dir)
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such results folder (give the --results-dir of a run)")
    written = markdown.record_and_write(folder.resolve(), history.chosen(args.history_store))
    for line in written.said:
        _say(line)
    print(written.path)
    if args.summary:
        print(written.path.read_text())
    return 0


def _store(location: str | None) -> history.SqlHistoryStore:
    from sglperf import history

    store = history.open_store(history.chosen(location))
    if store is None:
        raise UsageError(
            "the history store is off (--history-store / SGLPERF_HISTORY): there is nothing to read or add"
        )
    return store


def cmd_history(args: argparse.Namespace) -> int:
    """Import results folders or export lines into the store, export it, or list its runs."""
    from sglperf.results.folder import ResultsError

    store = _store(args.history_store)
    try:
        if args.action == "import":
            if not args.paths:
                raise UsageError(
                    "sglperf history import RESULTS_DIR... (results folders, or files of `history export`)"
                )
            failed = 0
            for given in args.paths:
                try:
                    runs = _runs_in(Path(given))
                except ResultsError as exc:
                    _say(f"sglperf history: {exc}; skipped")
                    failed += 1
                    continue
                for run in runs:
                    added = store.add_run(run)
                    state = "added" if added else "already stored, left as it is"
                    print(f"{run.identity.run_id} {run.identity.recorded_at} {given}: {state}")
            return EXIT_CHECK_FAILED if failed else 0
        if args.action == "export":
            for line in store.export_lines():
                print(line)
            return 0
        from sglperf.model.numbers_source import NumbersSource

        for ident in store.runs():
            flags = NumbersSource.of(emulated=ident.emulated).words.flag
            print(
                f"{ident.recorded_at} {ident.run_id} runner={ident.runner or '-'} SGLang {ident.sglang_version}{flags}"
            )
        return 0
    finally:
        store.close()


def _runs_in(path: Path) -> list[StoredRun]:
    from sglperf.history import ingest
    from sglperf.model.files import os_problem, read_input
    from sglperf.results.folder import ResultsError

    if path.is_dir():
        return [ingest.from_folder(path)]
    try:
        text = read_input(path).decode()
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read it: {os_problem(exc)}") from None
    except UnicodeDecodeError as exc:
        raise ResultsError(
            f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}): give a file of `sglperf history export`"
        ) from None
    return [ingest.from_export_line(line, f"{path}:{n}") for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def cmd_compare(args: argparse.Namespace) -> int:
    """Two runs (ids in the store, or results folders): every metric and intent that changed; with
    --variants, one run's variants against its reference variant."""
    from sglperf.history import compare, ingest
    from sglperf.reporting.changes import changes_table

    if args.variants == (args.b is not None):
        raise UsageError("compare takes two runs, or one run with --variants")
    store: history.SqlHistoryStore | None = None
    try:
        runs = []
        for given in (args.a, args.b) if args.b is not None else (args.a,):
            if Path(given).is_dir():
                runs.append(ingest.from_folder(Path(given)))
                continue
            store = store or _store(args.history_store)
            found = store.run(given)
            if found is None:
                raise UsageError(f"{given}: neither a results folder nor a run id in {store.backend.where}")
            runs.append(found)
    finally:
        if store is not None:
            store.close()
    if args.variants:
        return _print_variant_effects(runs[0], args.json)
    a, b = runs
    print(changes_table(a.identity.label, b.identity.label, compare.compare_runs(a, b)))
    return 0


def _print_variant_effects(run: StoredRun, as_json: bool) -> int:
    from sglperf.reporting.effects import effects_json, effects_text
    from sglperf.reporting.run_report import RunReport

    report = RunReport.of_stored(run)
    print(effects_json(report.effects) if as_json else effects_text(report))
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    if args.action == "build":
        for version in args.versions:
            # --cpu: the release's CPU-side install plus a kernel (SGLang's, or the stand-in), to serve on this CPU
            env = (
                cpu_envs.ensure_cpu_env(version, _say, kernel=args.cpu) if args.cpu else envs.ensure_env(version, _say)
            )
            print(env.python)
    elif args.action == "path":
        for version in args.versions:
            env = cpu_envs.cpu_env_for(version, args.cpu) if args.cpu else envs.env_for(version)
            ready = cpu_envs.cpu_env_ready(env) if args.cpu else env.ready
            if not ready:
                cpu = f" --cpu {args.cpu}" if args.cpu else ""
                _say(f"SGLang {version}{cpu} environment is not built; run `sglperf env build {version}{cpu}`")
                return EXIT_CHECK_FAILED
            print(env.python)
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
    result = scaffold.init(request, ask)
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


def build_parser() -> argparse.ArgumentParser:
    from sglperf.history.location import HISTORY_ENV

    parser = argparse.ArgumentParser(
        prog="sglperf", description=__doc__, epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("preflight", help="what SGLang will actually do with each variant's flags (no GPU needed)")
    p.add_argument("deployments", nargs="*", help=f"deployment files or folders (default: {DEFAULT_DEPLOYMENTS}/)")
    p.add_argument("--variant", action="append", help="only these variant ids (repeatable)")
    p.add_argument("--json", action="store_true", help="print a JSON list of records instead of the table")
    _add_interpreter_options(p)
    p.set_defaults(func=cmd_preflight)

    p = sub.add_parser(
        "explain",
        help="every decision SGLang makes for each variant, with the rule in its code that made it; --against: "
        "what differs from another variant, and what each flag really changed",
    )
    p.add_argument("deployments", nargs="*", help=f"deployment files or folders (default: {DEFAULT_DEPLOYMENTS}/)")
    p.add_argument("--variant", action="append", help="only these variant ids (repeatable)")
    p.add_argument("--against", metavar="VARIANT", help="compare each variant with this one of the same deployment")
    p.add_argument("--json", action="store_true", help="print a JSON list of records instead of text")
    _add_interpreter_options(p)
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser(
        "upgrade-check", help="the deployments under the current and a target SGLang release, side by side"
    )
    p.add_argument("deployments", nargs="*", help=f"deployment files or folders (default: {DEFAULT_DEPLOYMENTS}/)")
    p.add_argument("--to", required=True, metavar="VERSION", help="the SGLang release to upgrade to")
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "--from", dest="from_version", metavar="VERSION", help="the release in use (managed environment)"
    )
    source.add_argument("--python", help="interpreter of the SGLang environment in use (default: this one)")
    p.add_argument(
        "--walk",
        action="store_true",
        help="also resolve every release in between (managed environments, built on first use): where each "
        "change happened, with the rule there, and the flags' replacement chains from their own deprecations",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_upgrade_check)

    p = sub.add_parser("baseline", help="read stored baselines")
    p.add_argument("action", choices=["show", "diff"])
    p.add_argument("files", nargs="+", help="baseline JSON files (diff: OLD NEW)")
    p.set_defaults(func=cmd_baseline)

    store_help = (
        f"run-history store: an SQLite file, a postgresql:// URL, or off (default: ${HISTORY_ENV}, else "
        "~/.local/share/sglperf/history.sqlite)"
    )
    p = sub.add_parser("report", help="record a results folder in the history, then (re)build report.md and plots")
    p.add_argument("results_dir")
    p.add_argument("--summary", action="store_true", help="also print the markdown (e.g. >> $GITHUB_STEP_SUMMARY)")
    p.add_argument("--history-store", metavar="PATH|URL|off", help=store_help)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("history", help="the run-history store: import results folders, export it, list its runs")
    p.add_argument("action", choices=["import", "export", "list"])
    p.add_argument("paths", nargs="*", help="import: results folders, or files written by `history export`")
    p.add_argument("--history-store", metavar="PATH|URL", help=store_help)
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
    p.add_argument("--history-store", metavar="PATH|URL", help=store_help)
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
    p.add_argument("--tp", type=int, help="tensor-parallel size (default: the fewest GPUs that hold the weights)")
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
    except Exception:
        # Not an explained error: a bug. Saying "bad input" would send the user to fix what is not broken.
        _say("sglperf: unexpected error, a bug in sglperf: please report it with this traceback")
        traceback.print_exc(file=sys.stderr)
        return EXIT_BUG


if __name__ == "__main__":
    sys.exit(main())
