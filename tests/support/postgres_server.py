"""A real PostgreSQL server for the history-store tests, started and stopped by the tests themselves.

Uses the server binaries of the machine (Debian's `postgresql` package, which ci/setup.sh installs
where it can). PostgreSQL refuses to run as root, so as root the cluster is run as the package's
`postgres` user, in a folder of its own under /tmp (pytest's own temporary folders are root-only).
Password authentication (SCRAM), so that a wrong password is a real refusal.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sglperf.runtime.server import free_port

USER, PASSWORD = "sglperf", "s3cret-for-tests"


@dataclass(frozen=True)
class Postgres:
    port: int
    folder: Path

    def url(self, password: str = PASSWORD, database: str = "postgres") -> str:
        return f"postgresql://{USER}:{password}@127.0.0.1:{self.port}/{database}"


def binaries() -> Path | None:
    """The folder of initdb and pg_ctl; None when PostgreSQL is not installed."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(versions[-1]).parent if versions else None


def _as_server_user() -> list[str]:
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError as exc:
        raise RuntimeError("running as root and there is no `postgres` user to run the server as") from exc
    return ["runuser", "-u", "postgres", "--"]


def started(bin_dir: Path) -> Iterator[Postgres]:
    """A fresh cluster on a free port; stopped and removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="sglperf-postgres-"))
    run_as = _as_server_user()
    if run_as:
        os.chmod(folder, 0o755)
        shutil.chown(folder, "postgres", "postgres")
    data, pwfile, log = folder / "data", folder / "pw", folder / "server.log"
    pwfile.write_text(PASSWORD + "\n")
    if run_as:
        shutil.chown(pwfile, "postgres", "postgres")
    port = free_port()
    subprocess.run(
        [*run_as, str(bin_dir / "initdb"), "-D", str(data), "-U", USER, "--auth=scram-sha-256", f"--pwfile={pwfile}"],
        check=True,
        capture_output=True,
    )
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(
        [*run_as, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options, "-w", "-t", "60", "start"],
        check=True,
        capture_output=True,
    )
    try:
        yield Postgres(port, folder)
    finally:
        subprocess.run(
            [*run_as, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"], capture_output=True
        )
        time.sleep(0.1)
        shutil.rmtree(folder, ignore_errors=True)
