"""The `sglperf` commands as plain functions: each takes typed arguments (deployment paths, interpreters,
releases, folders) and returns a typed result, and none knows argparse. `sglperf.cli` parses the command
line, calls one and prints what it returned; tests, benches and other tools call them directly.

`resolve` holds what asks SGLang (preflight, explain, upgrade-check), `runs` what reads run results
(report, history, compare), `environments` the managed SGLang environments.
"""

from sglperf.errors import SglperfError

DEFAULT_DEPLOYMENTS = "deployments"


class UsageError(SglperfError, ValueError):
    """Bad input on the command line; the message says which option and what is allowed."""
