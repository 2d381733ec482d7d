"""One root for every explained error: no error class outside it unless listed here with its reason, the
CLI and the plugin show an explained error as one line and anything else as a bug with its traceback."""

from __future__ import annotations

import argparse
import ast
import builtins
import importlib
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from sglperf import cli, errors
from sglperf.commands import UsageError
from sglperf.errors import SglperfError
from sglperf.model.deployment_file import load
from sglperf.plugin import items

from ..support.project import QWEN36

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "sglperf"
ROOT_CLASS = "sglperf.errors.SglperfError"

# Exceptions that are not errors explained to a user, by class name (modules move; names stay).
OUTSIDE_THE_ROOT = {
    "LiveSkip": "control flow: the live tier cannot run here, and the plugin turns it into a skip",
    "HttpError": "control flow in the emulator: becomes the HTTP error response its client reads",
    "Stalled": "control flow in the emulator: a stall fault holding a connection open",
    "_Shutdown": "control flow in the emulator: SIGTERM/SIGINT leaving serve_forever (a BaseException)",
    "_Refused": "control flow in the probe, which runs in SGLang's interpreter where sglperf is not imported",
    "_MissingDriver": "private: PostgresBackend.problem restates it as a HistoryError naming the store",
    "DeadlineError": "an httpx.TimeoutException: callers catch httpx.HTTPError and explain it with the URL",
    "TooLargeError": "an httpx.HTTPError: callers catch httpx.HTTPError and explain it with the URL",
    "StandInKernelError": "runs as sgl_kernel inside SGLang's environment, where sglperf cannot be imported",
    "SGLangCaveat": "a warning category for pytest's warnings summary, never raised",
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


class _Scan:
    """Every class in src/sglperf with its bases resolved to dotted names, read from the source only."""

    def __init__(self) -> None:
        self.bases: dict[str, list[str]] = {}  # "sglperf.x.Class" -> resolved bases
        self.aliases: dict[str, dict[str, str]] = {}  # module -> local name -> dotted name it stands for
        classes: dict[str, list[ast.ClassDef]] = {}
        for path in sorted(PACKAGE.rglob("*.py")):
            module = _module_name(path)
            # One walk of each tree (it was three): collection of the whole fast tier waited on this scan.
            nodes = list(ast.walk(ast.parse(path.read_text(), str(path))))
            self.aliases[module] = self._imports(nodes)
            classes[module] = [n for n in nodes if isinstance(n, ast.ClassDef)]
        for module, defs in classes.items():
            local = {d.name for d in defs}
            for node in defs:
                self.bases[f"{module}.{node.name}"] = [self._dotted(module, b, local) for b in node.bases]

    @staticmethod
    def _imports(nodes: list[ast.AST]) -> dict[str, str]:
        found = {}
        for node in nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    found[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    found[a.asname or a.name] = f"{node.module}.{a.name}"
        return found

    def _dotted(self, module: str, node: ast.expr, local: set[str]) -> str:
        if isinstance(node, ast.Subscript):  # Generic[T], Protocol[T]
            return self._dotted(module, node.value, local)
        if isinstance(node, ast.Attribute):
            return f"{self._dotted(module, node.value, local)}.{node.attr}"
        assert isinstance(node, ast.Name), ast.dump(node)
        if node.id in local:
            return f"{module}.{node.id}"
        if node.id in self.aliases[module]:
            return self.aliases[module][node.id]
        return f"builtins.{node.id}"

    def _canonical(self, name: str) -> str:
        """A re-export (``sglperf.session.LiveSkip``) followed to where the class is written."""
        seen = set()
        while name not in self.bases and name.startswith("sglperf.") and name not in seen:
            seen.add(name)
            module, _, attr = name.rpartition(".")
            target = self.aliases.get(module, {}).get(attr)
            if target is None:
                break
            name = target
        return name

    def ancestors(self, name: str) -> set[str]:
        """Every dotted name above ``name``: sglperf classes by name, outside classes as objects' names."""
        out: set[str] = set()
        stack = [self._canonical(name)]
        while stack:
            current = stack.pop()
            if current in out:
                continue
            out.add(current)
            if current in self.bases:
                stack += [self._canonical(b) for b in self.bases[current]]
            else:
                out |= {f"{k.__module__}.{k.__qualname__}" for k in _outside_class(current).__mro__}
        return out


# Packages that only SGLang's interpreter has (the probe runs there): their classes are not sglperf's errors.
SGLANG_SIDE = {"torch"}


def _outside_class(dotted: str) -> type:
    module, _, attr = dotted.partition(".")
    if module in SGLANG_SIDE:
        return object
    found: object = builtins if module == "builtins" else importlib.import_module(module)
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:  # a submodule not imported by its package
            assert isinstance(found, type(builtins)), dotted
            found = importlib.import_module(f"{found.__name__}.{part}")
    assert isinstance(found, type), dotted
    return found


SCAN = _Scan()
EXCEPTIONS = sorted(c for c in SCAN.bases if "builtins.BaseException" in SCAN.ancestors(c) and c != ROOT_CLASS)


def _short(dotted: str) -> str:
    return dotted.rpartition(".")[2]


def test_the_scan_finds_exceptions_through_sglperf_and_outside_bases() -> None:
    assert "sglperf.measure.samples.HostBusyError" in EXCEPTIONS  # via MeterError
    assert "sglperf.runtime.http_deadline.DeadlineError" in EXCEPTIONS  # via httpx
    assert ROOT_CLASS in SCAN.ancestors("sglperf.model.files.InputFileError")
    assert "sglperf.model.deployment.Deployment" not in EXCEPTIONS


@pytest.mark.parametrize("name", EXCEPTIONS)
def test_every_exception_is_explained_or_listed_with_its_reason(name: str) -> None:
    under_root = ROOT_CLASS in SCAN.ancestors(name)
    listed = _short(name) in OUTSIDE_THE_ROOT
    assert under_root != listed, (
        f"{name}: derive it from sglperf.errors.SglperfError (its message says what to do), or, if it is "
        "control flow no user sees, add it to OUTSIDE_THE_ROOT with the reason"
        if not under_root
        else f"{name} is under SglperfError: remove it from OUTSIDE_THE_ROOT"
    )
    if under_root:
        assert _short(name) in (errors.__doc__ or ""), f"draw {name} in the tree of sglperf/errors.py's docstring"


def test_every_listed_exception_still_exists() -> None:
    assert set(OUTSIDE_THE_ROOT) <= {_short(c) for c in EXCEPTIONS}


def test_explained_errors_keep_their_builtin_base() -> None:
    """Callers that caught ValueError or OSError before the root existed still catch them."""
    from sglperf.baselines.store import BaselineMissing
    from sglperf.model.deployment_file import DeploymentError
    from sglperf.model.files import InputFileError
    from sglperf.preflight import PreflightError

    assert issubclass(DeploymentError, ValueError) and issubclass(BaselineMissing, ValueError)
    assert issubclass(PreflightError, RuntimeError)
    problem = InputFileError("not a regular file")
    assert isinstance(problem, OSError) and isinstance(problem, SglperfError)
    assert problem.strerror == "not a regular file"


# -- the CLI -------------------------------------------------------------------------------------


def _raising(exc: BaseException) -> Callable[[argparse.Namespace], int]:
    def command(args: argparse.Namespace) -> int:
        raise exc

    return command


def test_cli_explained_error_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["baseline", "show", str(tmp_path / "missing.json")]) == cli.EXIT_BAD_INPUT == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("sglperf: ") and "missing.json" in err, err
    assert "Traceback" not in err and "bug" not in err


def test_cli_unexpected_error_is_a_bug_with_its_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "cmd_baseline", _raising(ZeroDivisionError("division by zero")))
    assert cli.main(["baseline", "show", "x.json"]) == cli.EXIT_BUG == 3
    err = capsys.readouterr().err
    assert "a bug in sglperf" in err and "please report it with this traceback" in err
    assert "Traceback (most recent call last)" in err and "ZeroDivisionError: division by zero" in err


def test_cli_builtin_value_error_is_a_bug_not_bad_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The old `except ValueError` said "bad input" (exit 2) for any bug that raised one."""
    monkeypatch.setattr(cli, "cmd_baseline", _raising(ValueError("an internal invariant broke")))
    assert cli.main(["baseline", "show", "x.json"]) == cli.EXIT_BUG
    assert "Traceback" in capsys.readouterr().err


def test_cli_explained_error_raised_anywhere_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "cmd_baseline", _raising(UsageError("--thing: not allowed; pass another")))
    assert cli.main(["baseline", "show", "x.json"]) == cli.EXIT_BAD_INPUT
    assert capsys.readouterr().err == "sglperf: --thing: not allowed; pass another\n"


def test_cli_keyboard_interrupt_is_not_a_bug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not a bug, and (issue 53) not a traceback either: Ctrl-C during an environment build printed one.
    One line, and the shell's code for Ctrl-C; SIGTERM during a build arrives the same way, named."""
    monkeypatch.setattr(cli, "cmd_baseline", _raising(KeyboardInterrupt()))
    assert cli.main(["baseline", "show", "x.json"]) == cli.EXIT_INTERRUPTED == 130
    assert capsys.readouterr().err == "sglperf: interrupted (Ctrl-C)\n"
    monkeypatch.setattr(cli, "cmd_baseline", _raising(KeyboardInterrupt("SIGTERM")))
    assert cli.main(["baseline", "show", "x.json"]) == 130
    assert capsys.readouterr().err == "sglperf: interrupted (SIGTERM)\n"


def test_cli_help_lists_the_exit_codes() -> None:
    text = cli.build_parser().format_help()
    assert "exit codes:" in text and "  3    a bug in sglperf" in text


def test_cli_history_import_of_a_binary_file_is_explained(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    binary = tmp_path / "export.jsonl"
    binary.write_bytes(b"\xff\xfe not text")
    assert cli.main(["history", "import", str(binary)]) == cli.EXIT_CHECK_FAILED
    assert f"{binary}: not UTF-8 text" in capsys.readouterr().err


# -- the plugin ----------------------------------------------------------------------------------


def _failure_shown_by(request: pytest.FixtureRequest, exc: BaseException) -> str:
    """What pytest prints for one of the plugin's own items failing with ``exc`` (built in this process:
    the item class and its repr_failure are the plugin's, the run is this one)."""
    item = items.PreflightItem.from_parent(
        request.session, name="qwen36-mtp1-overlap", deployment=load(QWEN36), variant_id="mtp1", intent="overlap"
    )
    try:
        raise exc
    except BaseException:
        excinfo = pytest.ExceptionInfo.from_current()
    return str(item.repr_failure(excinfo))


def test_plugin_explained_error_is_its_one_line(request: pytest.FixtureRequest) -> None:
    shown = _failure_shown_by(request, items.ItemFailure("qwen36-mtp1: explained; do this"))
    assert shown == "qwen36-mtp1: explained; do this"


def test_plugin_unexpected_error_is_a_bug_with_its_traceback(request: pytest.FixtureRequest) -> None:
    shown = _failure_shown_by(request, ZeroDivisionError("division by zero"))
    assert "raise exc" in shown and "test_errors.py" in shown  # the frame that raised it
    assert re.search(r"^E +ZeroDivisionError: division by zero$", shown, re.MULTILINE), shown
    assert shown.rstrip().endswith(items.BUG_NOTE) and "- sglperf -" in shown


def test_plugin_leaves_pytests_own_explained_failure_alone(request: pytest.FixtureRequest) -> None:
    with pytest.raises(pytest.fail.Exception) as caught:
        pytest.fail("said in full", pytrace=False)
    shown = _failure_shown_by(request, caught.value)
    assert "said in full" in shown and items.BUG_NOTE not in shown
