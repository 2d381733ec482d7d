"""Write (or check) the shipped deprecation ledger from SGLang releases' own parsers.

    .venv/bin/python ci/refresh-deprecations.py 0.5.13 0.5.14 ... 0.5.23   # rewrite the shipped ledger
    .venv/bin/python ci/refresh-deprecations.py --check 0.5.19              # the ledger holds what 0.5.19 says

Each release is built as a managed environment (sglperf.sglang.envs) and its parser read by the preflight
worker: the ledger is what the releases declared, never a table we write. Run it when a release adds or
removes deprecated aliases (the upgrade-check page says when); --check is what tests/sglang runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sglperf.model.runner_profile import RunnerProfile
from sglperf.preflight import Resolver
from sglperf.sglang import envs
from sglperf.sglang.argv import ParserInfo
from sglperf.sglang.deprecations import SHIPPED_FILE, Deprecation, DeprecationLedger, deprecations_of

# The parser does not depend on the GPU; the worker needs one to simulate.
_ANY_GPU = RunnerProfile(
    name="parser-only", gpu_count=1, gpu_name="NVIDIA H100 80GB HBM3", compute_capability="9.0", memory_gib=80
)
LEDGER = Path(__file__).resolve().parent.parent / "src" / "sglperf" / "sglang" / SHIPPED_FILE


def _parser(version: str) -> ParserInfo:
    python = envs.choose_python(None, version, lambda line: print(line, file=sys.stderr))
    resolver = Resolver(python, _ANY_GPU, progress=lambda line: print(line, file=sys.stderr))
    try:
        return resolver.release().parser
    finally:
        resolver.close()


def _missing(said: Deprecation, shipped: DeprecationLedger) -> str | None:
    entry = shipped.get(said.flag)
    if entry is None:
        return f"{said.flag}: SGLang {said.first} deprecates it for {said.replacement}; the ledger lacks it"
    if entry.replacement != said.replacement and said.last == entry.last:
        return f"{said.flag}: SGLang {said.first} names {said.replacement}; the ledger says {entry.replacement}"
    return None


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_argument("--check", action="store_true", help="compare with the shipped ledger; write nothing")
    cli.add_argument("versions", nargs="+", metavar="VERSION")
    args = cli.parse_args(argv)
    parsers = [_parser(v) for v in args.versions]
    if args.check:
        shipped = DeprecationLedger.shipped()
        problems = [p for parser in parsers for said in deprecations_of(parser) if (p := _missing(said, shipped))]
        for problem in problems:
            print(f"{LEDGER}: {problem}; run ci/refresh-deprecations.py with every release", file=sys.stderr)
        count = sum(len(deprecations_of(p)) for p in parsers)
        print(f"{count} deprecations in SGLang {', '.join(args.versions)}: {len(problems)} not in the ledger")
        return 1 if problems else 0
    ledger = DeprecationLedger().with_parsers(*parsers)
    LEDGER.write_text(ledger.to_json(), encoding="utf-8")
    print(f"{LEDGER}: {len(ledger.entries)} deprecations from SGLang {', '.join(args.versions)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
