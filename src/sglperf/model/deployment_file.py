"""Deployment files read: TOML in, a validated `Deployment` out, or one `DeploymentError` naming the file
and each field that is wrong and what is allowed, the files it names (config.json, prompt sets) read too."""

from __future__ import annotations

import tomllib
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from sglperf.errors import SglperfError
from sglperf.model.checkpoint import CheckpointFacts
from sglperf.model.deployment import Deployment, Speculative, SpeculativeOverride
from sglperf.model.deployment_fields import PATTERN_MEANING, did_you_mean
from sglperf.model.files import os_problem, read_input
from sglperf.model.prompts import PromptError, load_prompts


class DeploymentError(SglperfError, ValueError):
    """A deployment file is unreadable or invalid; the message names file and field."""


def _field_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


_STRICT_TYPES = ("int_type", "float_type", "bool_type")


Location = tuple[str | int, ...]


def _alternatives(annotation: Any) -> list[Any]:
    """An annotation's types, with Annotated and unions unwrapped."""
    if get_origin(annotation) is Annotated:
        return _alternatives(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return [alt for arg in get_args(annotation) for alt in _alternatives(arg)]
    return [annotation]


def _is_table(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _tagged(tables: list[type[BaseModel]], value: Mapping[str, Any]) -> tuple[list[type[BaseModel]], str | None]:
    """Of a discriminated union's tables, the one ``value``'s tag names (none: a missing or unknown tag, which
    pydantic names), and the tag (it puts it in an error's location); the tables unchanged, and None, when
    they are not such a union."""
    if len(tables) < 2:
        return tables, None
    for name in tables[0].model_fields:
        literals = [get_args(t.model_fields[name].annotation) for t in tables if name in t.model_fields]
        if len(literals) == len(tables) and all(get_origin(t.model_fields[name].annotation) is Literal for t in tables):
            chosen = [t for t, tags in zip(tables, literals) if value.get(name) in tags]
            return chosen, str(value.get(name)) if chosen else None
    return tables, None


def _unknown_keys(value: Any, annotations: list[Any], loc: Location = ()) -> Iterator[tuple[Location, list[str]]]:
    """Every key of the file no table has, where pydantic would place it, with the keys allowed there
    (pydantic names only some: a table whose own check fails first hides the rest)."""
    alternatives = [alt for annotation in annotations for alt in _alternatives(annotation)]
    tables: list[type[BaseModel]] = [alt for alt in alternatives if _is_table(alt)]
    if isinstance(value, dict) and tables:
        tables, tag = _tagged(tables, value)
        if not tables:
            return
        loc = (*loc, tag) if tag is not None else loc
        known = sorted({name for table in tables for name in table.model_fields} - {"path"})
        for key, item in value.items():
            fields = [table.model_fields[key].annotation for table in tables if key in table.model_fields]
            if key not in known:
                yield (*loc, key), known
            else:
                yield from _unknown_keys(item, fields, (*loc, key))
    elif isinstance(value, dict):
        values = [get_args(alt)[1] for alt in alternatives if get_origin(alt) is dict]
        for key, item in value.items():
            yield from _unknown_keys(item, values, (*loc, key)) if values else iter(())
    elif isinstance(value, list):
        items = [get_args(alt)[0] for alt in alternatives if get_origin(alt) is list]
        for i, item in enumerate(value):
            yield from _unknown_keys(item, items, (*loc, i)) if items else iter(())


def _unknown_field(loc: Location, known: list[str]) -> str:
    return f"{_field_path(loc)}: unknown field{did_you_mean(str(loc[-1]), known)}"


def _describe(error: ErrorDetails, raw: dict[str, Any], unknown: Mapping[Location, list[str]]) -> str:
    loc = tuple(error["loc"])
    where = _field_path(loc)
    if error["type"] == "extra_forbidden":
        return _unknown_field(loc, unknown.get(loc, []))
    if error["type"] == "missing":
        return f"{where}: required field is missing"
    if error["type"] == "string_pattern_mismatch":
        pattern = error.get("ctx", {}).get("pattern", "")
        return f"{where}: {error['input']!r} is not allowed; expected {PATTERN_MEANING.get(pattern, pattern)}"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] in _STRICT_TYPES and isinstance(error["input"], str):
        message += f", got the string {error['input']!r}: write it without quotes"
    elif error["type"] == "string_type" and isinstance(error["input"], (int, float)):
        message += f', got the number {error["input"]!r}: write it in quotes, "{error["input"]}"'
    # Name variants by id as well as by index: people edit by id.
    if loc[:1] == ("variants",) and len(loc) > 1 and isinstance(loc[1], int):
        try:
            message += f" (variant {raw['variants'][loc[1]]['id']!r})"
        except (KeyError, IndexError, TypeError):
            pass
    return f"{where}: {message}"


def _read_text(path: Path, where: str = "", missing: str = "does not exist") -> str:
    """A file's text, or DeploymentError naming it (`where`: the deployment file and field that name it)."""

    def error(problem: str) -> DeploymentError:
        return DeploymentError(f"{where}: {path}: {problem}" if where else f"{path}: {problem}")

    try:
        return read_input(path).decode("utf-8")
    except FileNotFoundError:
        raise error(missing) from None
    except IsADirectoryError:
        raise error("is a directory, not a file") from None
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})") from None
    except OSError as exc:  # permissions, a device or FIFO, an over-long path, ...
        raise error(f"cannot read it: {os_problem(exc)}") from None
    except ValueError as exc:  # a NUL byte in the path
        raise error(f"cannot read it: {exc}") from None


def load(path: str | Path) -> Deployment:
    """Read and validate one deployment file."""
    path = Path(path)
    text = _read_text(path, missing="no such deployment file")
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DeploymentError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise DeploymentError(f"{path}: not valid TOML: nested too deeply") from None
    if "path" in raw:  # set by sglperf from where the file is, never by the file
        raise DeploymentError(f"{path}: invalid deployment file:\n  - path: unknown field")
    listed = raw.get("variants")
    for i, variant in enumerate(listed if isinstance(listed, list) else []):
        for key in ("role", "base"):  # set by [topology] when it makes one variant per role
            if isinstance(variant, dict) and key in variant:
                raise DeploymentError(f"{path}: variants[{i}].{key}: set by [topology] for each role, not by the file")
    raw.setdefault("key", path.stem)
    if raw["key"] != path.stem:
        raise DeploymentError(f"{path}: key: {raw['key']!r} must match the file name {path.stem!r}")
    try:
        deployment = Deployment.model_validate({**raw, "path": path})
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        unknown = dict(_unknown_keys(raw, [Deployment]))
        said = {tuple(e["loc"]) for e in errors if e["type"] == "extra_forbidden"}
        lines = [_describe(e, raw, unknown) for e in errors]
        lines += [_unknown_field(loc, known) for loc, known in unknown.items() if loc not in said]
        problems = "\n".join(f"  - {line}" for line in lines)
        raise DeploymentError(f"{path}: invalid deployment file:\n{problems}") from None
    _check_files(deployment)
    return deployment


def _check_files(deployment: Deployment) -> None:
    where = f"{deployment.path}: model.config"
    try:
        config = deployment.config_path
    except (OSError, ValueError, RuntimeError) as exc:
        raise DeploymentError(f"{where}: {deployment.model.config} is not a usable path: {exc}") from None
    text = _read_text(
        config, where, missing="does not exist (preflight needs the model's config.json; ship it under models/)"
    )
    _check_config_json(config, text, where)
    drafts: list[tuple[str, Speculative | SpeculativeOverride | None]]
    drafts = [("launch.speculative.draft_model.config", deployment.launch.speculative)]
    drafts += [
        (f"variants[{i}].speculative.draft_model.config", v.speculative) for i, v in enumerate(deployment.variants)
    ]
    for field, speculative in drafts:
        if speculative is None or speculative.draft_model is None:
            continue
        where = f"{deployment.path}: {field}"
        draft = deployment.path.parent / speculative.draft_model.config
        missing = "does not exist (preflight reads the draft's config.json: copy it from the draft checkpoint)"
        _check_config_json(draft, _read_text(draft, where, missing=missing), where)
    for i, workload in enumerate(deployment.workloads):
        if workload.synthetic is not None:  # generated when measured, with the server's tokenizer
            _check_loads(deployment, i, workload.synthetic.prompt_count())
            continue
        assert workload.prompts is not None  # a workload has one or the other (Workload._one_prompt_set)
        try:
            prompts = (deployment.path.parent / workload.prompts).resolve()
            found = prompts.is_file()
        except (OSError, ValueError, RuntimeError):
            prompts, found = deployment.path.parent / workload.prompts, False
        if not found:
            raise DeploymentError(f"{deployment.path}: workloads[{i}].prompts: {prompts} does not exist")
        # Read now, not when the first measurement starts on a GPU runner: a malformed line is one error
        # at load, naming the workload, the file and the line (format: docs/deployments.md#prompt-sets).
        try:
            in_set = len(load_prompts(prompts).prompts)
        except PromptError as exc:
            raise DeploymentError(f"{deployment.path}: workloads[{i}].prompts: {exc}") from None
        _check_loads(deployment, i, in_set)


def _check_loads(deployment: Deployment, i: int, in_set: int) -> None:
    """Every load point of workload ``i`` held by its rounds over its prompts (`Workload.unheld`), or one error
    naming the field to change."""
    workload = deployment.workloads[i]
    for load in workload.load_points():
        if (unheld := workload.unheld(load, workload.prompts_used(in_set))) is not None:
            field, line = unheld
            raise DeploymentError(f"{deployment.path}: workloads[{i}].{field} (workload {workload.id!r}): {line}")


def _check_config_json(config: Path, text: str, where: str) -> None:
    try:
        CheckpointFacts.parse(text)
    except ValueError as exc:
        raise DeploymentError(f"{where}: {config} {exc}") from None


def discover(paths: list[str | Path]) -> list[Deployment]:
    """Load deployment files and directories of them (``*.toml``), sorted by key."""
    files: list[Path] = []
    for p in map(Path, paths):
        try:
            folder = p.is_dir()
        except OSError:  # an over-long name, say: load() says so, naming it
            folder = False
        files.extend(sorted(p.glob("*.toml")) if folder else [p])
    if not files:
        raise DeploymentError(f"no deployment files found in {', '.join(map(str, paths))}")
    return sorted((load(f) for f in files), key=lambda d: d.key)
