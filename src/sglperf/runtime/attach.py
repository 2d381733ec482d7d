"""Attaching to an SGLang server sglperf did not start (a container, a cluster): nothing is launched
and nothing is ever stopped; the server's identity comes from what it reports about itself."""

from __future__ import annotations

from dataclasses import dataclass

from sglperf.errors import SglperfError
from sglperf.model.deployment import Deployment
from sglperf.model.server_facts import ServerFacts
from sglperf.runtime import server_info
from sglperf.runtime.server import ServerSpec, StopReport
from sglperf.sglang.flags import API_KEY_FLAG

# /server_info keys every SGLang release the suite knows reports; a server without them is not SGLang.
SGLANG_IDENTITY_KEYS = ("version", "model_path", "tp_size")


class AttachError(SglperfError, RuntimeError):
    """The URL does not lead to a usable SGLang server; the message names the URL and what to do."""


@dataclass(frozen=True)
class DeclaredGpus:
    """GPUs the operator declares for an attached server (SGLang's /server_info names none)."""

    count: int
    name: str

    @classmethod
    def parse(cls, text: str) -> DeclaredGpus:
        count, sep, name = text.partition("x")
        if not sep or not count.strip().isdigit() or not name.strip():
            raise AttachError(f"--sglang-url-gpus {text!r}: expected COUNTxNAME, e.g. '2xNVIDIA RTX A6000'")
        return cls(int(count), name.strip())


class AttachedServer:
    """The parts of `runtime.server.Server` the session uses, for a server that is not ours."""

    def __init__(self, url: str, api_key: str | None, name: str):
        self.base_url = url.rstrip("/")
        self.spec = ServerSpec(name=name, python="", argv=(), api_key=api_key)
        self.command: tuple[str, ...] = ()

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.spec.api_key}"} if self.spec.api_key else {}

    def log_tail(self, lines: int = 40) -> str:
        return ""  # its log is wherever its operator keeps it

    def stop(self) -> StopReport:
        return StopReport((), (), (), 0.0)  # never stopped: sglperf did not start it


def read_attached(url: str, api_key: str | None) -> ServerFacts:
    """The server's facts, or one AttachError line saying what is wrong with the URL."""
    if not url.startswith(("http://", "https://")):
        raise AttachError(f"--sglang-url {url!r}: expected an http:// or https:// URL of a running SGLang server")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        facts = server_info.read_facts(url.rstrip("/"), headers, timeout_s=15.0)
    except server_info.LiveError as exc:
        hint = f" (pass {API_KEY_FLAG} or set SGLPERF_API_KEY if it needs one)" if "401" in str(exc) else ""
        raise AttachError(f"--sglang-url {url}: not a reachable SGLang server: {exc}{hint}") from None
    missing = [k for k in SGLANG_IDENTITY_KEYS if k not in facts.effective and k != "version"]
    if facts.version == "unknown" or missing:
        raise AttachError(
            f"--sglang-url {url}: answers /server_info but is not SGLang (no {', '.join(missing) or 'version'})"
        )
    return facts


def attached_profile_problems(facts: ServerFacts, deployment: Deployment, declared: DeclaredGpus | None) -> list[str]:
    """How the attached server differs from the deployment's runner profile, by what it reports."""
    problems = []
    tp = facts.effective.get("tp_size")
    if tp is not None and tp != deployment.launch.tp_size:
        problems.append(f"it runs tp_size {tp}, the deployment {deployment.launch.tp_size}")
    if declared is not None:
        runner = deployment.runner
        if declared.name.lower() != runner.gpu_name.lower():
            problems.append(f"declared GPUs are {declared.name}, the profile's {runner.gpu_name}")
        if declared.count < deployment.launch.tp_size:
            problems.append(f"{declared.count} declared GPUs cannot hold tp_size {deployment.launch.tp_size}")
    return problems
