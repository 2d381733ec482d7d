"""Commands that ask SGLang's own resolution: preflight, explain and upgrade-check (with its walk)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sglperf import preflight, upgrade
from sglperf.commands import UsageError
from sglperf.errors import SglperfError
from sglperf.model.deployment import Deployment
from sglperf.model.deployment_file import discover
from sglperf.model.explanation import Explanation
from sglperf.model.progress import Progress, silent
from sglperf.model.verdict import Verdict
from sglperf.preflight.explain import explain
from sglperf.preflight.resolver import WorkerPool
from sglperf.sglang import cpu_envs, envs
from sglperf.sglang.argv import ParserInfo


def deployments(
    paths: Sequence[str], variants: Sequence[str] | None = None, against: str | None = None
) -> list[Deployment]:
    """The deployment files, checked (and every variant asked for, by --variant or --against, known) before
    any interpreter is asked; an unknown one is blamed on the option that named it."""
    found = discover(list(paths))
    known = sorted({v.id for d in found for v in d.variants})
    for option, asked in (("--variant", variants or []), ("--against", [against] if against else [])):
        unknown = [v for v in dict.fromkeys(asked) if v not in known]
        if unknown:
            files = ", ".join(str(d.path) for d in found)
            raise UsageError(
                f"{option} {', '.join(unknown)}: no such variant in {files}; known variants: {', '.join(known)}"
            )
    return found


def resolver_for(
    deployment: Deployment, python: str, progress: Progress, pool: WorkerPool | None = None
) -> preflight.Resolver:
    """The resolver for a deployment's runner (a CPU runner: its release's CPU environment); with ``pool``,
    its SGLang import shared with the other deployments of the same interpreter and GPU model."""
    return preflight.Resolver(
        cpu_envs.python_for_runner(python, deployment.runner, progress),
        deployment.runner,
        progress=progress,
        pool=pool,
    )


@dataclass(frozen=True)
class ReleaseChecks:
    """Every deployment's variants as one release resolved and judged them."""

    version: str
    parser: ParserInfo
    checks: tuple[preflight.VariantCheck, ...]

    @property
    def verdicts(self) -> list[Verdict]:
        return [v for check in self.checks for v in check.verdicts]


def check_release(
    found: Sequence[Deployment], python: str, variants: Sequence[str] | None = None, progress: Progress = silent
) -> ReleaseChecks:
    """Preflight of every deployment with the SGLang under ``python`` (a CPU runner: its release's CPU
    environment)."""
    checks: list[preflight.VariantCheck] = []
    version, parser = "", None
    pool = WorkerPool()  # one SGLang import for the deployments of a GPU model, not one each
    try:
        for deployment in found:
            resolver = resolver_for(deployment, python, progress, pool)
            release = resolver.release()
            version, parser = release.version, release.parser
            checks += preflight.check(deployment, resolver, variants)
    finally:
        pool.close()
    if parser is None:
        raise UsageError("no deployment to check")
    return ReleaseChecks(version, parser, tuple(checks))


def explain_variants(
    found: Sequence[Deployment],
    python: str,
    variants: Sequence[str] | None = None,
    against: str | None = None,
    progress: Progress = silent,
) -> list[Explanation]:
    """Every decision SGLang makes for each selected variant; with ``against``, what each differs from that
    variant of the same deployment by, flag by flag."""
    explanations: list[Explanation] = []
    pool = WorkerPool()
    try:
        for deployment in found:
            ids = [v.id for v in deployment.variants if not variants or v.id in variants]
            if (against and against not in {v.id for v in deployment.variants}) or not ids:
                continue  # --against names another deployment's variant, or none of this one's is asked for
            explanations += explain(deployment, resolver_for(deployment, python, progress, pool), ids, against)
    finally:
        pool.close()
    if not explanations:
        raise UsageError(f"--against {against}: no deployment given has both it and the variants asked for")
    return explanations


@dataclass(frozen=True)
class UpgradeOutcome:
    report: upgrade.UpgradeReport
    walk: upgrade.WalkReport | None = None

    def to_record(self) -> dict[str, Any]:
        record = self.report.to_record()
        if self.walk is not None:
            record["walk"] = self.walk.to_record()
        return record


def upgrade_check(
    found: Sequence[Deployment], old_python: str, new_version: str, walk: bool = False, progress: Progress = silent
) -> UpgradeOutcome:
    """The deployments under the release at ``old_python`` and under ``new_version``, side by side; with
    ``walk``, every release in between resolved too (one that cannot be is said, and the walk goes on)."""
    new_python = envs.choose_python(None, new_version, progress)
    progress(f"resolving with the current release ({old_python})")
    old = check_release(found, old_python, progress=progress)
    progress(f"resolving with SGLang {new_version} ({new_python})")
    new = check_release(found, new_python, progress=progress)
    report = upgrade.compare_releases(old.version, new.version, old.parser, new.parser, old.checks, new.checks)
    if not walk:
        return UpgradeOutcome(report)
    steps = [upgrade.ReleaseStep(old.version, old.parser, old.checks)]
    for version in envs.releases_between(old.version, new.version, progress):
        progress(f"resolving with SGLang {version} (the walk)")
        try:
            between = check_release(found, envs.choose_python(None, version, progress), progress=progress)
            steps.append(upgrade.ReleaseStep(between.version, between.parser, between.checks))
        except SglperfError as exc:  # one release that cannot be built or resolved does not end the walk
            steps.append(upgrade.ReleaseStep(version, None, (), str(exc).splitlines()[0]))
    steps.append(upgrade.ReleaseStep(new.version, new.parser, new.checks))
    return UpgradeOutcome(report, upgrade.walk_releases(steps, report))
