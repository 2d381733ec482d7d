"""Writing files so that readers (other pytest workers, a later run, an interrupted one) never see half."""

from __future__ import annotations

import os
import threading
from pathlib import Path

GIB = 1024**3


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
