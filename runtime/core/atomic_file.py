"""A file written whole or not at all: a temporary file beside it, renamed over it.

Why shared: SGLang reads the adaptive config at start-up and every rank reads
the depth cost table at start-up; a half-written file from a crash or a full
disk would fail a server start or price depths from half a table. The rename
is atomic on one filesystem, so a reader sees the old file or the new one.

Why so careful: specctl is run as root to write a file for a server that runs
as its own user. Everything happens through descriptors, never by path after
the checks: the folder is opened once and every later step names files
relative to it (``dir_fd``), the temporary file is created ``O_EXCL |
O_NOFOLLOW`` mode 0600 and given its final mode with ``fchmod`` before the
rename, and nothing is chmod-ed or chown-ed by path afterwards, so no symlink
swapped in between can turn a permission change onto another file. A target
that exists and is not a regular file (a device, a FIFO, a folder, a link) is
refused, and so is a folder that another user could swap names in: one owned
by another user (root aside), or writable by group or others without the
sticky bit.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path


class UnsafeTargetError(OSError):
    """A target specctl will not write; the message says why and what to do (one line)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unsafe target"


def _check_folder(folder: Path, fd: int) -> None:
    info = os.fstat(fd)
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeTargetError(f"{folder} is not a folder")
    me = os.geteuid()
    if info.st_uid not in (me, 0):
        raise UnsafeTargetError(
            f"the folder {folder} belongs to another user (uid {info.st_uid}), who could swap the file for a "
            "link while it is written; write into a folder owned by you or root and let the server read it there")
    if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
        raise UnsafeTargetError(
            f"the folder {folder} is writable by {'group and others' if info.st_mode & 0o002 else 'its group'} "
            f"(mode {stat.S_IMODE(info.st_mode):o}), who could swap the file for a link while it is written; "
            f"chmod go-w {folder} or write elsewhere")


def _check_target(path: Path, dfd: int) -> None:
    try:
        info = os.stat(path.name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISREG(info.st_mode):
        return
    kind = ("a symbolic link" if stat.S_ISLNK(info.st_mode) else "a folder" if stat.S_ISDIR(info.st_mode)
            else "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
            else "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a socket" if stat.S_ISSOCK(info.st_mode)
            else "not a regular file")
    raise UnsafeTargetError(f"{path} exists and is {kind}, not a regular file; name a new or regular file "
                            "(nothing written)")


def check_target(path: str | os.PathLike[str]) -> None:
    """Raise UnsafeTargetError where write_atomic would refuse ``path`` (a look before any work; the write
    checks again on its own descriptors)."""
    target = Path(path)
    dfd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _check_folder(target.parent, dfd)
        _check_target(target, dfd)
    finally:
        os.close(dfd)


def write_atomic(path: str | os.PathLike[str], text: str, mode: int | None = None) -> Path:
    """Write ``text`` to ``path`` through a temporary file in its folder; ``mode``: its permissions, if given
    (else 0600). Nothing is left behind on failure; UnsafeTargetError (an OSError) when the folder or the
    target is refused, with one line that says why and what to do."""
    target = Path(path)
    folder = target.parent
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _check_folder(folder, dfd)
        _check_target(target, dfd)
        tmp = f".{target.name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                if mode is not None:
                    os.fchmod(f.fileno(), mode)
                os.fsync(f.fileno())
            os.replace(tmp, target.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            raise
    finally:
        os.close(dfd)
    return target
