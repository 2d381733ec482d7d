"""The public API (`sglperf/__init__.py`): its names pinned, each one real, and the examples using nothing else.

A name added or removed here is a change users see: this test makes it a deliberate one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import sglperf

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = [
    "BaselineError",
    "Deployment",
    "DeploymentError",
    "EffectiveArgsView",
    "Measure",
    "MeasurementRecord",
    "ServerHandle",
    "SglperfError",
    "Status",
    "Variant",
    "VariantRef",
    "Verdict",
    "Workload",
    "__version__",
    "assert_baseline",
    "load_deployment",
]


def test_the_public_names_are_pinned() -> None:
    assert sorted(sglperf.__all__) == PUBLIC


def test_every_public_name_resolves_to_its_module_s_object() -> None:
    for name in PUBLIC:
        assert getattr(sglperf, name) is not None, name
    from sglperf.model.deployment_file import load

    assert sglperf.load_deployment is load
    assert issubclass(sglperf.DeploymentError, sglperf.SglperfError)
    assert issubclass(sglperf.BaselineError, sglperf.SglperfError)


def test_the_type_checking_imports_name_the_same_objects_as_the_lazy_table() -> None:
    """mypy reads the TYPE_CHECKING imports, Python the table: both must say the same thing."""
    tree = ast.parse(Path(sglperf.__file__).read_text())
    typed: dict[str, tuple[str, str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module
                typed.update({a.asname or a.name: (stmt.module, a.name) for a in stmt.names})
    assert typed == sglperf._EXPORTS
    assert set(typed) | {"__version__"} == set(PUBLIC)


def test_an_unknown_name_is_an_attribute_error_and_subpackages_still_import() -> None:
    try:
        sglperf.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("expected AttributeError")
    from sglperf import preflight

    assert preflight.__name__ == "sglperf.preflight"


def _sglperf_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sglperf"):
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("sglperf")]
    return found


def test_the_examples_import_only_the_public_api() -> None:
    examples = sorted((ROOT / "examples").glob("*.py"))
    assert examples
    private = {f"{p.name}: {m}" for p in examples for m in _sglperf_imports(p) if m != "sglperf"}
    assert not private, f"examples must import from `sglperf` only: {sorted(private)}"
