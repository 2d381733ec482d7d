"""The package's architecture, enforced: each subpackage imports only from the layers below it,
no module imports itself in a circle, and production code never imports the test double."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "sglperf"

# Lower numbers are lower layers; a package may import its own modules and any lower layer.
LAYERS = {
    "errors": -1,  # the root of explained errors, under everything: every layer raises or catches it
    "model": 0,  # plain data
    "sglang": 1,  # SGLang's spelling per release, environments, what its weight memory says
    "results": 1,  # a results folder: its file names, the measurement key, its records written and read back
    "judge": 2,  # verdicts from effective args, live evidence, drift
    "preflight": 3,  # SGLang's own resolution in a worker
    "runtime": 3,  # server processes, GPUs, introspection, provenance
    "measure": 3,  # prompt sets and the streaming meter
    "baselines": 4,  # store, statistics, one measurement against its baseline
    "history": 5,  # the run-history store, streaks and comparisons
    "upgrade": 5,  # two releases side by side
    "scaffold": 5,  # `sglperf init`: a first deployment file from what can be read
    "reporting": 6,  # table, markdown, plots
    "session": 7,  # one run's state
    "options": 7,  # every command-line option, defined once for the plugin and the command
    "plugin": 8,  # pytest, a thin layer
    "commands": 8,  # the commands as plain functions, with typed results
    "cli": 9,  # the command line, a thin layer: parses, calls a command, prints
}
# The test double may use plain data, SGLang's spelling and the error root (its configuration errors are
# explained like sglperf's), nothing that would make it agree with sglperf's own reading of a server by
# construction.
TESTING_MAY_IMPORT = {"errors", "model", "sglang", "testing"}


@functools.cache
def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(path: Path, module: str) -> set[str]:
    """sglperf modules imported by ``path`` (`from sglperf.x import y` counts y when it is a module)."""
    known = _modules()
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("sglperf")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("sglperf"):
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known}
    out.discard(module)
    return out


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_subpackage_has_a_layer() -> None:
    tops = {_top(m) for m in _modules()} - {"", "testing"}
    assert tops <= set(LAYERS), f"add {sorted(tops - set(LAYERS))} to LAYERS"


def violations(module: str, imported: set[str]) -> list[str]:
    mine, found = _top(module), []
    for name in sorted(imported):
        theirs = _top(name)
        if not theirs or theirs == mine:
            continue
        if mine == "testing":
            if theirs not in TESTING_MAY_IMPORT:
                found.append(f"{module} (test double) imports {name}")
        elif theirs == "testing":
            found.append(f"{module} imports the test double {name}")
        elif mine in LAYERS and LAYERS[theirs] >= LAYERS[mine]:
            found.append(f"{module} (layer {mine}={LAYERS[mine]}) imports {name} (layer {theirs}={LAYERS[theirs]})")
    return found


@pytest.mark.parametrize("module", sorted(_modules()))
def test_imports_point_down(module: str) -> None:
    assert violations(module, _imports(_modules()[module], module)) == []


def test_no_import_circles() -> None:
    modules = _modules()
    graph = {m: {i for i in _imports(p, m) if i in modules} for m, p in modules.items()}
    # A package's __init__ re-exporting its own modules is not a circle in the design.
    for m, imported in graph.items():
        graph[m] = {
            i for i in imported if not (m in modules and modules[m].name == "__init__.py" and i.startswith(m + "."))
        }
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = [*stack[stack.index(nxt) :], nxt]
                pytest.fail("import circle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_layering_check_catches_what_it_forbids(tmp_path: Path) -> None:
    """The check itself: upward, sideways and test-double imports are each caught."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from sglperf.session import LiveSession\nfrom sglperf import preflight\n"
        "from sglperf.testing.emulator import main\n"
    )
    found = violations("sglperf.model.bad", _imports(bad, "sglperf.model.bad"))
    assert len(found) == 3, found
    assert violations("sglperf.runtime.x", {"sglperf.measure.meter"})  # same layer, other package
    assert violations("sglperf.testing.emulator.x", {"sglperf.judge.intent"})
    assert not violations("sglperf.judge.x", {"sglperf.model.verdict", "sglperf.judge.intent"})


def test_the_architecture_page_names_every_module() -> None:
    """docs/architecture.md is where a newcomer finds where a change goes: a module it does not name is a
    home nobody can find."""
    page = (PACKAGE.parents[1] / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"^\| `([a-z_/]+)`", page, flags=re.MULTILINE))
    missing = []
    for module in _modules():
        parts = module.split(".")[1:]
        path = "/".join(parts) + ("/" if _modules()[module].name == "__init__.py" else "")
        if parts and path not in named:
            missing.append(path)
    assert missing == [], f"docs/architecture.md's module table lacks {missing}"
