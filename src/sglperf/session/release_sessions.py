"""Sessions of one measurement point on several SGLang releases: what a bisect measures.

Each session is a fresh server of one release (its own start, warm-up and state), the point's rounds, and
the server stopped: the unit `sglperf.upgrade.bisect` pairs in A B B A quartets. A release's first session
is a measurement item's whole measurement, written to that release's own results folder (one folder per
release, stamped as a run of it), so the history store gets one run per release measured; the later ones
keep their rounds only, as the counterbalanced sessions of a variant effect do.

A release that cannot run the point (its preflight refuses the variant, its server does not start, it
cannot be installed) raises `ReleaseUnusable` with the first line of why; a measurement that breaks
mid-round raises as it would in a run, and the bisect stops there (its state lets it resume).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from sglperf import preflight
from sglperf.model.deployment import Deployment, Variant
from sglperf.model.progress import Progress
from sglperf.model.workload import LoadPoint, Workload, measurement_key
from sglperf.results import folder as results_folder
from sglperf.runtime import server, server_info
from sglperf.session.live_session import LiveSession
from sglperf.session.measurement import Measurement
from sglperf.session.preflight_session import PreflightSession
from sglperf.session.running import LiveOptions, RunningVariant
from sglperf.sglang import envs
from sglperf.upgrade.bisect import ReleaseRun, ReleaseUnusable

RELEASES_DIR = "releases"  # <results>/releases/<version>/: each release's own results folder


def release_folder(results_dir: Path, release: str) -> Path:
    return results_dir / RELEASES_DIR / release


class ReleaseSessions:
    """One measurement point (a deployment's variant, workload and load) measured on any release asked."""

    def __init__(
        self,
        options: LiveOptions,
        deployment: Deployment,
        variant: Variant,
        workload: Workload,
        load: LoadPoint,
        python_for: Callable[[str], str],
        progress: Progress,
        recorded: Callable[[Path], None] = lambda folder: None,
    ):
        self.options, self.deployment, self.variant = options, deployment, variant
        self.workload, self.load = workload, load
        self.python_for, self.progress, self.recorded = python_for, progress, recorded
        self.key = measurement_key(deployment.key, variant.id, workload.id, load.tag)
        self.started = time.time()  # one drift clock for every release's emulator, as a run has
        self._lives: dict[str, LiveSession] = {}

    def _live(self, release: str) -> LiveSession:
        if release not in self._lives:
            folder = release_folder(self.options.results_dir, release)
            folder.mkdir(parents=True, exist_ok=True)
            stamp = results_folder.read_stamp(folder) or results_folder.RunStamp.new(
                f"bisect-{release}-{uuid.uuid4().hex[:8]}"
            )
            stamp.stamp(folder)
            options = replace(self.options, results_dir=folder, run=stamp)
            # The release's interpreter is found (or built) when its preflight first asks for it.
            preflight_session = PreflightSession(lambda: self.python_for(release), self.progress)
            live = LiveSession(options, preflight_session, self.progress)
            live.started = self.started
            self._lives[release] = live
        return self._lives[release]

    def session(self, release: str) -> ReleaseRun:
        live = self._live(release)
        first = not results_folder.measurement_path(live.options.results_dir, self.key).exists()
        began = time.monotonic()
        try:
            try:
                running = self._running(live, release)
            except (server.ServerStartError, server_info.LiveError, preflight.PreflightError, envs.EnvBuildError) as e:
                raise ReleaseUnusable(_first_line(e)) from None
            if first:
                record = live.measure(self.deployment, self.variant, self.workload, self.load)
                started_at, samples = record.started_at or "", record.samples
            else:
                measured = Measurement(live.options, running, self.workload, self.load, self.progress)
                started_at, samples = measured.session_samples()
        finally:
            live.stop()
        if first:
            self.recorded(live.options.results_dir)
        seconds = time.monotonic() - began
        self.progress(f"{self.key} on SGLang {release}: a session in {seconds:.0f} s")
        return ReleaseRun(release=release, started_at=started_at, seconds=seconds, samples=dict(samples))

    def _running(self, live: LiveSession, release: str) -> RunningVariant:
        """The release's server, started once more when its start fails: a release is called unusable for the
        whole bisect on a failure that repeats, not on one of the moment (a port taken, a slow disk)."""
        try:
            return live.running(self.deployment, self.variant)
        except server.ServerStartError as exc:
            self.progress(
                f"SGLang {release}: the server did not start ({_first_line(exc)[:300]}); starting it once more "
                f"before calling {release} unusable"
            )
            live.forget_failure(self.deployment, self.variant)
            return live.running(self.deployment, self.variant)

    def close(self) -> None:
        for live in self._lives.values():
            live.close()
            live.preflight.close()


def _first_line(exc: BaseException) -> str:
    """One line of why: the message's first, and where it ends with a server's log, the log's own error
    line (SGLang's words: the last line naming an error or exception, else the last line)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    head, tail = lines[0], lines[1:]
    if head.endswith("ends with:") and tail:
        errors = [line for line in tail if "error" in line.lower() or "exception" in line.lower()]
        return f"{head} {(errors or tail)[-1][:300]}"
    return head
