"""The run's preflight state: one resolver per runner profile, one check per deployment."""

from __future__ import annotations

from collections.abc import Callable

from sglperf import preflight
from sglperf.model.deployment import Deployment
from sglperf.model.progress import Progress, silent
from sglperf.model.verdict import Verdict
from sglperf.session.handles import EffectiveArgsView, VariantRef
from sglperf.sglang import cpu_envs, envs


def deployment_key(deployment: Deployment) -> str:
    return str(deployment.path.resolve())


class PreflightSession:
    """One resolver per runner profile and one check per deployment, shared by every item."""

    def __init__(self, python: Callable[[], str], progress: Progress = silent):
        self._python = python
        self._progress = progress
        self._resolvers: dict[str, preflight.Resolver] = {}
        self._checks: dict[str, list[preflight.VariantCheck]] = {}
        self._failure: dict[str, str] = {}

    def resolver(self, deployment: Deployment) -> preflight.Resolver:
        profile_key = deployment.runner.model_dump_json()
        if profile_key not in self._resolvers:
            # A CPU runner of a managed release resolves (and serves) with that release's CPU environment.
            python = cpu_envs.python_for_runner(self._python(), deployment.runner, self._progress)
            self._resolvers[profile_key] = preflight.Resolver(python, deployment.runner, progress=self._progress)
        return self._resolvers[profile_key]

    def checks(self, deployment: Deployment) -> list[preflight.VariantCheck]:
        key = deployment_key(deployment)
        if key in self._failure:
            raise preflight.PreflightError(self._failure[key])
        if key not in self._checks:
            try:
                self._checks[key] = preflight.check(deployment, self.resolver(deployment))
            except (preflight.PreflightError, envs.EnvBuildError) as exc:
                self._failure[key] = str(exc)  # said once per item, not retried for each
                raise preflight.PreflightError(str(exc)) from None
        return self._checks[key]

    def check(self, deployment: Deployment, variant_id: str) -> preflight.VariantCheck:
        return next(c for c in self.checks(deployment) if c.variant.id == variant_id)

    def verdict(self, deployment: Deployment, variant_id: str, intent: str) -> Verdict:
        return next(v for v in self.check(deployment, variant_id).verdicts if v.intent == intent)

    def effective_view(self, deployment: Deployment, variant_id: str) -> EffectiveArgsView:
        """The variant's effective args as SGLang's own resolution decides them (no GPU needed)."""
        check = self.check(deployment, variant_id)
        resolution = check.resolution
        if resolution is None or resolution.effective is None:
            why = resolution.error.message if resolution and resolution.error else "it could not be spelled"
            raise preflight.PreflightError(
                f"{deployment.key}-{variant_id}: SGLang {self.resolver(deployment).version} refused the variant: {why}"
            )
        return EffectiveArgsView(
            ref=VariantRef(deployment.path, deployment.key, variant_id),
            tier="preflight",
            sglang_version=self.resolver(deployment).version,
            fields=resolution.effective,
            model=resolution.model,
        )

    def close(self) -> None:
        for resolver in self._resolvers.values():
            resolver.close()
