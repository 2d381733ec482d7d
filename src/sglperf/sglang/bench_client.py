"""SGLang's own benchmark client: which module a release keeps it in, asked of that release's interpreter.

0.5.23 moved it and deprecates the old path (`server_api.BENCH_SERVING_MODULES` lists both, newest first),
so the module is found, not assumed, and the newest one a release has is used (no deprecation warning).
"""

from __future__ import annotations

from sglperf.sglang.envs import EnvBuildError
from sglperf.sglang.processes import run_bounded
from sglperf.sglang.server_api import BENCH_SERVING_MODULES


def bench_serving_module(python: str) -> str:
    """The module SGLang's benchmark client lives in for the release under ``python``, asked of that
    interpreter (`server_api.BENCH_SERVING_MODULES`, newest first); EnvBuildError when it has none."""
    probe = (
        "import importlib.util, sys\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        if importlib.util.find_spec(name):\n"
        "            print(name); break\n"
        "    except ImportError:\n"
        "        pass\n"
    )
    out = run_bounded([python, "-c", probe, *BENCH_SERVING_MODULES], 300)
    found = out.stdout.strip().splitlines()
    if out.returncode != 0 or not found:
        raise EnvBuildError(
            f"{python}: none of {', '.join(BENCH_SERVING_MODULES)} can be found (SGLang's benchmark client moved "
            f"again?): {out.stderr.strip()[-300:]}"
        )
    return found[-1]
