"""A disk that fills up for real: a small tmpfs where this machine lets the test mount one, else the
file size limit (RLIMIT_FSIZE, whose writes fail with EFBIG) of the process that writes. Either way the
failure comes from the kernel, never from a mock of our code."""

from __future__ import annotations

import contextlib
import resource
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

Disk = tuple[Path, Callable[..., None], Callable[[], None]]


@contextlib.contextmanager
def small_disk(folder: Path, size_kib: int = 256) -> Iterator[Disk]:
    """``(mount point, fill, free)``. ``fill(pid)``: the disk is full for the process ``pid`` writes from (None:
    this one); its file size limit plays the full disk where nothing can be mounted."""
    mnt = folder / "mnt"
    mnt.mkdir()
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(mnt)],
                                 capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):  # no mount(8), or no right to use it
        mounted = False
    if mounted:
        try:
            yield mnt, lambda pid=None: _fill(mnt / "filler"), lambda: (mnt / "filler").unlink(missing_ok=True)
        finally:
            subprocess.run(["umount", "-l", str(mnt)], check=False, timeout=20)
        return
    yield from _fsize_disk(mnt)


def _fill(filler: Path) -> None:
    with open(filler, "ab", buffering=0) as fh, contextlib.suppress(OSError):
        while True:
            fh.write(b"f" * 1024)


def _fsize_disk(mnt: Path) -> Iterator[Disk]:
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    limited: list[int] = []

    def fill(pid: int | None = None) -> None:
        size = max((p.stat().st_size for p in mnt.iterdir()), default=0)
        resource.prlimit(pid or 0, resource.RLIMIT_FSIZE, (size + 700, hard))
        limited.append(pid or 0)

    def free() -> None:
        for pid in limited:
            with contextlib.suppress(ProcessLookupError):
                resource.prlimit(pid, resource.RLIMIT_FSIZE, (soft, hard))
        limited.clear()
    try:
        yield mnt, fill, free
    finally:
        free()
