"""pytest plugin: every deployment file becomes test items, one per (variant, intent) per tier.

A thin layer: collection turns deployments into items; running an item asks the session's
preflight (one SGLang import, cached) for that variant's verdict and reports it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sglperf import envs, preflight
from sglperf.deployment import Deployment, DeploymentError, load
from sglperf.verdict import Status, Verdict

SESSION_KEY = pytest.StashKey["PreflightSession"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sglperf", "SGLang performance-regression suite")
    interp = group.addoption
    interp("--sglang-python", metavar="PATH", help="interpreter of the SGLang environment to ask (default: this one)")
    interp("--sglang-version", metavar="VERSION",
           help="use sglperf's managed environment for this SGLang release (built on first use)")
    parser.addini("sglperf_deployments", "folder holding deployment files", default="deployments")


class PreflightSession:
    """One resolver per runner profile and one check per deployment, shared by all items."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self._python: str | None = None
        self._resolvers: dict[str, preflight.Resolver] = {}
        self._checks: dict[str, dict[tuple[str, str], Verdict]] = {}
        self._failure: dict[str, str] = {}

    @property
    def python(self) -> str:
        if self._python is None:
            tw = self.config.get_terminal_writer()
            self._python = envs.choose_python(self.config.getoption("sglang_python"),
                                              self.config.getoption("sglang_version"),
                                              lambda msg: tw.line(f"[sglperf] {msg}"))
        return self._python

    def verdicts(self, deployment: Deployment) -> dict[tuple[str, str], Verdict]:
        key = str(deployment.path.resolve())
        if key in self._failure:
            raise preflight.PreflightError(self._failure[key])
        if key not in self._checks:
            try:
                profile_key = deployment.runner.model_dump_json()
                if profile_key not in self._resolvers:
                    self._resolvers[profile_key] = preflight.Resolver(self.python, deployment.runner)
                checks = preflight.check(deployment, self._resolvers[profile_key])
            except (preflight.PreflightError, envs.EnvBuildError) as exc:
                self._failure[key] = str(exc)  # say it once per item, without retrying each time
                raise preflight.PreflightError(str(exc)) from None
            self._checks[key] = {(c.variant.id, v.intent): v for c in checks for v in c.verdicts}
        return self._checks[key]

    def close(self) -> None:
        for resolver in self._resolvers.values():
            resolver.close()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[SESSION_KEY] = PreflightSession(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        session.close()


def _deployments_dir(config: pytest.Config) -> Path:
    return (config.rootpath / config.getini("sglperf_deployments")).resolve()


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix == ".toml" and file_path.parent.resolve() == _deployments_dir(parent.config):
        return DeploymentFile.from_parent(parent, path=file_path)
    return None


class DeploymentFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        deployment = load(self.path)
        for variant in deployment.variants:
            for intent in deployment.expectations_for(variant):
                yield PreflightItem.from_parent(self, name=f"{deployment.key}-{variant.id}-{intent}",
                                               deployment=deployment, variant_id=variant.id, intent=intent)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:  # type: ignore[override]
        if isinstance(excinfo.value, DeploymentError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)  # type: ignore[return-value]


class IntentFailed(Exception):
    def __init__(self, verdict: Verdict):
        super().__init__(verdict.message())
        self.verdict = verdict


class PreflightItem(pytest.Item):
    def __init__(self, *, deployment: Deployment, variant_id: str, intent: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.deployment = deployment
        self.variant_id = variant_id
        self.intent = intent
        self.add_marker(pytest.mark.preflight)
        self.user_properties.append(("sglperf_tier", "preflight"))

    def runtest(self) -> None:
        session: PreflightSession = self.config.stash[SESSION_KEY]
        verdict = session.verdicts(self.deployment)[(self.variant_id, self.intent)]
        self.user_properties += [("sglang_version", verdict.sglang_version), ("expected", verdict.expected),
                                 ("effective", str(verdict.actual)), ("verdict", verdict.status.value)]
        if verdict.status == Status.UNPROVEN:
            # Reported where the item is, not at this line of the plugin.
            raise pytest.skip.Exception(f"unproven in preflight: {verdict.detail}", _use_item_location=True)
        if verdict.status != Status.PASS:
            raise IntentFailed(verdict)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:  # type: ignore[override]
        if isinstance(excinfo.value, (IntentFailed, preflight.PreflightError)):
            return str(excinfo.value)
        return super().repr_failure(excinfo)  # type: ignore[return-value]

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"preflight {self.name}"
