"""Files: names that become paths, and writes that readers (other pytest workers, a later run, an
interrupted one) never see half of."""

from __future__ import annotations

import errno
import json
import math
import os
import secrets
import stat
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
    """``folder / name``, refusing any name that would land elsewhere (separators, ".."). The name itself is
    not resolved: a link already there is replaced by the write (`write_bytes_atomic`), not followed."""
    base = folder.resolve()
    if name in ("", ".", "..") or Path(name).name != name or "/" in name or os.sep in name:
        raise OutsideFolderError(f"{name!r} would be written outside {folder}; refusing")
    return base / name


class NotAFolderError(SglperfError, NotADirectoryError):
    """A file stands where sglperf keeps a folder of its own (plots/, measurements/)."""


def write_text_atomic(path: Path, text: str, *, fsync: bool = True) -> None:
    """Temporary file in the same folder, then rename: readers see the old or the new file, never a part."""
    write_bytes_atomic(path, text.encode("utf-8"), fsync=fsync)


def write_bytes_atomic(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """``data`` as ``path``, atomically. The rename replaces whatever name was there, a link (symbolic or
    hard) included, and never writes through it: a folder someone sent cannot point a write elsewhere."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp, fd = _exclusive(path)
    try:
        with open(fd, "wb") as fh:
            fh.write(data)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def _exclusive(path: Path) -> tuple[Path, int]:
    """A new temporary file beside ``path``, created exclusively (O_EXCL: a link planted under its name is
    never followed), with the permissions the umask gives any new file."""
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        except FileExistsError:
            continue


def own_folder(folder: Path, name: str) -> Path:
    """``folder / name`` as a real folder of ``folder``'s own: a link there (to a folder anywhere, or a
    file) is replaced by an empty folder, and its target left as it was; never written through.
    NotAFolderError when a file is in the way."""
    path = folder / name
    if path.is_symlink():
        path.unlink()
    elif path.exists() and not path.is_dir():  # someone's file, not a link: not sglperf's to delete
        raise NotAFolderError(f"{path} is a file where sglperf keeps a folder: move it away, then run again")
    path.mkdir(parents=True, exist_ok=True)
    return path


def append_line_no_follow(path: Path, line: str) -> None:
    """``line`` appended to ``path``, created if missing. A link there (symbolic, or a second name of another
    file) is replaced by a file of its own, its target left as it was: never appended through."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno != errno.ELOOP:  # ELOOP: a symbolic link
            raise
        path.unlink()
        fd = os.open(path, flags | os.O_EXCL, 0o666)
    if os.fstat(fd).st_nlink > 1:  # sglperf never makes a hard link: this name is someone else's file's too
        os.close(fd)
        path.unlink()
        fd = os.open(path, flags | os.O_EXCL, 0o666)
    with open(fd, "a", encoding="utf-8") as fh:
        fh.write(line)


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
