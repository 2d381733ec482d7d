"""Files: names that become paths, and writes that readers (other pytest workers, a later run, an
interrupted one) never see half of."""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import threading
from pathlib import Path
from typing import Any

from sglperf.errors import SglperfError

GIB = 1024**3
# A name that becomes part of a path or a test id (deployment keys, variant and workload ids, record
# keys): it cannot hold a separator, start with a dot, or be empty, so it stays inside its folder.
SAFE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


# Deployment files, configs, baselines, prompt sets, records: the largest real one is well under this.
INPUT_LIMIT_BYTES = 64 * 2**20


class InputFileError(SglperfError, OSError):
    """An input that is not a regular file of reasonable size (``strerror`` says which)."""

    def __init__(self, problem: str) -> None:
        super().__init__(errno.EINVAL, problem)


def read_input(path: Path, limit_bytes: int = INPUT_LIMIT_BYTES) -> bytes:
    """A regular file's bytes, at most ``limit_bytes``: a device (/dev/zero), a FIFO (which would block
    forever) or an oversized file is an InputFileError; missing, a directory or an over-long path raise
    the OSError Python raises, for the caller's message."""
    info = os.stat(path)
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
    if not stat.S_ISREG(info.st_mode):
        raise InputFileError("not a regular file (a device, FIFO or socket): sglperf reads only regular files")
    with open(path, "rb") as fh:
        data = fh.read(limit_bytes + 1)
    if len(data) > limit_bytes:
        raise InputFileError(f"larger than {limit_bytes // 2**20} MiB: not an input sglperf reads")
    return data


def os_problem(exc: OSError) -> str:
    """An OSError in words for one line: "Read-only file system (EROFS)"."""
    code = errno.errorcode.get(exc.errno or 0)
    return f"{exc.strerror or exc}" + (f" ({code})" if code else "")


def writable_folder_problem(folder: Path) -> str | None:
    """Why files could not be written into ``folder``, or None: checked without creating anything (the
    nearest existing folder on its path must be writable; a file in the way is named)."""
    probe = folder
    while not probe.exists():
        if probe.is_symlink():
            return f"{probe} is a dangling symbolic link"
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        return f"{probe} is a file, not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"cannot write in {probe}: permission denied or a read-only file system"
    return None


class OutsideFolderError(SglperfError, ValueError):
    """A name that would place a file outside the folder it belongs in."""


def confined(folder: Path, name: str) -> Path:
    """``folder / name``, refusing any name that would land elsewhere (separators, "..", links)."""
    base = folder.resolve()
    path = (base / name).resolve()
    if path.parent != base:
        raise OutsideFolderError(f"{name!r} would be written outside {folder}; refusing")
    return path


def write_text_atomic(path: Path, text: str, *, fsync: bool = True) -> None:
    """Temporary file in the same folder, then rename: readers see the old or the new file, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def strict_json(value: Any, **kwargs: Any) -> str:
    """Standard JSON for strict parsers: a non-finite float (Python would write NaN or Infinity, which
    JSON has no token for) becomes null, as pydantic writes it."""
    return json.dumps(_finite(value), allow_nan=False, **kwargs)
