"""A file written whole or not at all: a temporary file beside it, renamed over it.

Why shared: SGLang reads the adaptive config at start-up and every rank reads
the depth cost table at start-up; a half-written file from a crash or a full
disk would fail a server start or price depths from half a table. The rename
is atomic on one filesystem, so a reader sees the old file or the new one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike[str], text: str, mode: int | None = None) -> Path:
    """Write ``text`` to ``path`` through a temporary file in its folder; ``mode``: its permissions, if given
    (else the temporary file's 0600). Nothing is left behind on failure."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
