"""How far apart are the CPU tier's two passes when nothing changed?

``ci/cpu-tier.sh`` measures every CPU item twice on the same build, minutes apart: once recording the
baselines, once comparing with them. Any difference is the machine's. Given pairs of results folders
(``RECORD:COMPARE``, as the two passes wrote them), this prints, per item, the ratio of the second
pass's median to the first's for ITL, E2E and TTFT (above 1: slower) and decode tok/s (below 1:
slower), then per metric over all pairs the worst slowdown of the second pass, and the widest spread
either way. The spread is what the tiny-cpu thresholds must allow for an unchanged server to pass: a
slow phase of the machine that fell on the recording pass could as well have fallen on the other.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table

LATENCIES = ("itl_s", "e2e_s", "ttft_s")
METRICS = ("decode_tok_s", *LATENCIES)


def medians(folder: Path) -> dict[str, dict[str, float]]:
    out = {}
    for file in sorted((folder / "measurements").glob("*.json")):
        record = json.loads(file.read_text())
        out[record["key"]] = {m: s["median"] for m, s in record["summary"].items() if m in METRICS}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pairs", nargs="+", metavar="RECORD:COMPARE", help="results folders of the two passes")
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    worst = dict.fromkeys(METRICS, 1.0)
    spread = dict.fromkeys(METRICS, 1.0)
    print("| pair | item | decode tok/s | ITL | E2E | TTFT |")
    print("|---|---|---:|---:|---:|---:|")
    for pair in args.pairs:
        record, compare = (Path(p) for p in pair.split(":"))
        first, second = medians(record), medians(compare)
        for key in sorted(first.keys() & second.keys()):
            ratios = {m: second[key][m] / first[key][m] for m in METRICS if m in first[key] and m in second[key]}
            for m, r in ratios.items():
                worse = r if m in LATENCIES else 1 / r
                worst[m] = max(worst[m], worse)
                spread[m] = max(spread[m], worse, 1 / worse)
            cells = " | ".join(f"{ratios[m]:.2f}" if m in ratios else "-" for m in METRICS)
            print(f"| {compare.name} | {key} | {cells} |")
    print()
    print("Worst slowdown of the second pass: " + ", ".join(f"{m} {worst[m]:.2f}x" for m in METRICS))
    print("Widest spread either way: " + ", ".join(f"{m} {spread[m]:.2f}x" for m in METRICS))
    return 0


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
