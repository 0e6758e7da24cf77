"""Reading a JSON file someone else may have crafted: like the config file, and never a traceback.

The file must be a regular file (opened ``O_NONBLOCK``, so a FIFO is refused
instead of hanging the reader; ``O_NOFOLLOW`` is not used: a link to a table is
ordinary), at most ``max_bytes`` (so ``/dev/zero``-like files and huge tables
stop at the cap), strict UTF-8, and JSON without nesting past Python's
recursion limit or integers past its digit limit. Every fault is a
``JsonFileError`` whose message names the file and says what is wrong in one line.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any


class JsonFileError(ValueError):
    """A JSON file that cannot be read; the message names it and the fault."""


def read_text(path: str | os.PathLike[str], max_bytes: int, what: str = "file") -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise JsonFileError(f"{path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise JsonFileError(f"{path}: not a regular file (a {what} is a regular JSON file)")
        if info.st_size > max_bytes:
            raise JsonFileError(f"{path}: {info.st_size} bytes, more than a {what} holds ({max_bytes // 1024} KiB)")
        chunks, left = [], max_bytes + 1
        while left > 0:
            try:
                chunk = os.read(fd, min(left, 1 << 20))
            except OSError as exc:
                raise JsonFileError(f"{path}: {exc.strerror or exc}") from None
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise JsonFileError(f"{path}: more than a {what} holds ({max_bytes // 1024} KiB)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonFileError(f"{path}: not UTF-8 (byte {exc.start})") from None


def parse(text: str, where: str) -> Any:
    """``json.loads`` with every fault one line: bad syntax, nesting too deep, an integer too long."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise JsonFileError(f"{where}: not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise JsonFileError(f"{where}: nested too deep") from None
    except ValueError as exc:  # an integer past Python's digit limit for int(str)
        raise JsonFileError(f"{where}: {str(exc).split(';')[0]}") from None


def read_json(path: str | os.PathLike[str], max_bytes: int, what: str = "file") -> Any:
    return parse(read_text(path, max_bytes, what), str(path))
