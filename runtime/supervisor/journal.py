"""Append-only JSONL journal with size-based rotation, and a reader that forgives a torn tail.

Each record is written as one line and flushed, so a crash at any moment
leaves every complete line readable; the reader drops an incomplete or
undecodable last line instead of failing. The writer holds the file to its
complete lines: a failed write (a full disk) is cut back to the last one, and
opening cuts a torn tail that a writer killed mid-line left, so the next
record always starts a line of its own. The file is created 0600 and opened
with O_NOFOLLOW|O_CLOEXEC: a symlink, FIFO or another user's file planted at
the path is refused, not followed.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import re
import stat
import time
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from specctl.runtime.core import records
from specctl.runtime.core.records import dumps

log = logging.getLogger(__name__)
FAILURE_QUIET_S = 60.0  # a disk that fails, heals a little and fails again is said once a minute at most


class Journal:
    """Writes records to ``path``; rotates to ``path.1`` .. ``path.N`` past ``max_bytes``."""

    def __init__(self, path: str | os.PathLike[str], max_bytes: int = 64 * 1024 * 1024,
                 backups: int = 3) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self._fh: BinaryIO | None = None
        self._inode: int | None = None
        self._end = 0  # bytes of complete lines in the file: where the next record begins
        self._torn = False  # a fragment past _end could not be cut yet
        self.lost = 0  # records append() could not write since it last wrote one
        self._quiet_until = 0.0  # a failure is said again only after this (monotonic)
        self._open()

    def _open(self) -> None:
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = open_private(self.path)
        except OSError as exc:  # said in the operator's terms; the supervisor refuses to start
            raise OSError(f"cannot write the journal {self.path}: {exc.strerror or exc}") from None
        # unbuffered: a write that fails (a full disk) leaves nothing queued to fail again at close
        self._fh = os.fdopen(fd, "ab", buffering=0)
        self._inode = os.fstat(fd).st_ino
        self._end = _repair_tail(fd, self.path)
        self._torn = os.fstat(fd).st_size != self._end

    def write(self, *items: dict[str, Any]) -> None:
        """Append records, one line each, in one write, through to the file before this returns.

        After a failed write the file is cut back to its last complete line (the
        offset we keep, not the file position, which a partial write has moved past
        the end), so the next record never lands glued to a fragment.
        """
        if self._fh is None:
            raise ValueError("journal is closed")
        self._reopen_if_moved()
        data = memoryview("".join(dumps(item) + "\n" for item in items).encode("utf-8"))
        fd = self._fh.fileno()
        try:
            if self._torn:  # a fragment that a failed cut left behind goes first
                os.ftruncate(fd, self._end)
                self._torn = False
            else:  # the real end: the file position may be past it, and another writer may have appended
                self._end = os.lseek(fd, 0, os.SEEK_END)
            while data:  # a raw write may take part of the line
                written = os.write(fd, data)
                if not written:
                    raise OSError(f"the journal {self.path} took no bytes")
                data = data[written:]
        except OSError:
            try:  # no torn line for the next record to be glued to
                os.ftruncate(fd, self._end)
            except OSError:
                self._torn = True
            raise
        self._end = os.lseek(fd, 0, os.SEEK_END)
        if self.max_bytes and self._end >= self.max_bytes:
            self._rotate()

    def append(self, record: dict[str, Any]) -> dict[str, Any] | None:
        """Write one record; a failing file (a full disk) never raises here. The failure is logged (once a
        minute at most) and the records lost counted; when writes work again a ``journal_gap`` record goes
        first, in the same write as the record (both or neither: a gap that fits where the record does not
        would only say "resumed" to fail again), and is returned so the caller can tell its listeners."""
        gap = records.event(records.JOURNAL_GAP, lost=self.lost) if self.lost else None
        try:
            self.write(*([gap] if gap else []), record)
        except (OSError, ValueError) as exc:
            now = time.monotonic()
            if not self.lost and now >= self._quiet_until:
                log.error("journal write failed: %s (said once; the records lost are counted)", exc)
                self._quiet_until = now + FAILURE_QUIET_S
            self.lost += 1
            return None
        if gap is not None:
            log.warning("journal writes resumed; %d records were lost", self.lost)
            self.lost = 0
        return gap

    def _reopen_if_moved(self) -> None:
        """Follow logrotate-style moves: if our file is no longer at ``path``, start a new one."""
        try:
            moved = os.stat(self.path).st_ino != self._inode
        except FileNotFoundError:
            moved = True
        if moved:
            assert self._fh is not None
            self._fh.close()
            self._open()

    def _rotate(self) -> None:
        assert self._fh is not None
        self._fh.close()
        for i in range(self.backups - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{i + 1}"))
        if self.backups > 0:
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        else:
            self.path.unlink(missing_ok=True)
        self._open()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def open_private(path: Path) -> int:
    """Open for appending, created 0600; never through a symlink, never a FIFO or device another user
    planted, never a file another user owns (a journal in a shared folder must be ours)."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "it is a symbolic link; refusing to follow it") from None
        raise
    info = os.fstat(fd)
    why = ("it is not a regular file" if not stat.S_ISREG(info.st_mode)
           else f"it belongs to uid {info.st_uid}, not to us" if info.st_uid != os.geteuid() else None)
    if why is not None:
        os.close(fd)
        raise OSError(errno.EPERM, why)
    os.set_blocking(fd, True)
    return fd


def _repair_tail(fd: int, path: Path) -> int:
    """Cut a torn last line (a writer killed mid-line) so the next record starts on a line of its own.

    Returns the size of the complete lines. Reads back from the end in blocks;
    a file with no newline at all is one torn line.
    """
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    end = size
    while end > 0:
        start = max(0, end - 65536)
        block = os.pread(fd, end - start, start)
        cut = block.rfind(b"\n")
        if cut >= 0:
            end = start + cut + 1
            break
        end = start
    try:
        os.ftruncate(fd, end)
    except OSError as exc:
        log.error("journal %s ends in a torn line that could not be cut: %s", path, exc)
        return end
    log.warning("journal %s ended in a torn line (a writer was killed mid-line); cut %d bytes", path, size - end)
    return end


MAX_T = 1e10  # unix seconds (the year 2286): a timestamp past it is corrupt, not the future
# fields readers draw, by type, as the records declare them; a field not declared may be anything (new
# ones are added over time)
_GPU_TEXT = records.declared_fields(records.Gpu, str)
_GPU_NUMBERS = records.declared_fields(records.Gpu, int, float)
_SERVER_TEXT = records.declared_fields(records.Server, str)
_SERVER_NUMBERS = records.declared_fields(records.Server, int, float)


class JournalReader:
    """Every complete, well-shaped record of a journal; what is not is skipped and counted in ``skipped``.

    A torn last line ends the reading (the writer died mid-line). A corrupt
    line (not JSON, NaN, 1e999) and a record of the wrong shape (a timestamp of
    1e308, a GPU whose name is a list) are skipped alike, so one bad line cannot
    hide the rest of a recording or crash the console that replays it.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = path
        self.skipped = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        with open(self.path, "rb") as fh:
            for raw in fh:
                if not raw.endswith(b"\n"):
                    return  # torn tail: the writer died mid-line
                record = parse_line(raw)
                if record is not None:
                    yield record
                else:
                    self.skipped += 1


def parse_line(raw: bytes) -> dict[str, Any] | None:
    """One complete journal line as a well-shaped record, or None for a corrupt one (not JSON, NaN, 1e999,
    an integer past float range, the wrong shape)."""
    try:
        record = records.loads(raw)  # NaN or 1e999 would be drawn as numbers: the line is corrupt
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) and well_shaped(record) else None


# specctl writes "v" then "t" first on every line: the index reads t from there without parsing the line
_T_PREFIX = re.compile(rb'\{"v":\d{1,9},"t":(-?\d{1,20}(?:\.\d{1,20})?(?:[eE][+-]?\d{1,3})?),"kind":"(\w{1,16})"')


class JournalIndex:
    """Where each complete line of a journal starts and its time, in time order (equal times in file order),
    without keeping or parsing the records: 16 bytes a line, so a 200 MB journal's index is a few MB and is
    read in one pass. A record is parsed when asked for (:meth:`record`), and None if it is corrupt; a line
    whose time cannot be read is left out and counted in ``unindexed``. A torn last line ends the index."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = path
        self.unindexed = 0
        offsets, times, samples = array("q"), array("d"), array("B")
        at = 0
        with open(path, "rb") as fh:
            for raw in fh:
                if not raw.endswith(b"\n"):
                    break
                timed = _line_time(raw)
                if timed is None:
                    self.unindexed += 1
                else:
                    offsets.append(at)
                    times.append(timed[0])
                    samples.append(timed[1])
                at += len(raw)
        if any(times[i] > times[i + 1] for i in range(len(times) - 1)):
            order = sorted(range(len(times)), key=times.__getitem__)  # stable: equal times keep file order
            offsets = array("q", (offsets[i] for i in order))
            times = array("d", (times[i] for i in order))
            samples = array("B", (samples[i] for i in order))
        self.offsets, self.times, self.samples = offsets, times, samples  # samples[i]: 1 for a sample
        self._fh: BinaryIO | None = None

    def __len__(self) -> int:
        return len(self.times)

    def record(self, i: int) -> records.Record | None:
        """The record of index ``i``, parsed now and typed (records.parse); None where the line is corrupt."""
        if self._fh is None:
            self._fh = open(self.path, "rb")
        self._fh.seek(self.offsets[i])
        record = parse_line(self._fh.readline())
        return None if record is None else records.parse(record)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _line_time(raw: bytes) -> tuple[float, int] | None:
    """A line's ``t`` (a real time, 0 ..MAX_T) and whether it is a sample (1) or not (0), read from the prefix
    specctl writes, else from the whole line; None when it has no such time."""
    m = _T_PREFIX.match(raw)
    if m is not None:
        t: Any = float(m.group(1))
        sample = m.group(2) == b"sample"
    else:
        try:
            obj = records.loads(raw)
        except (UnicodeDecodeError, ValueError, RecursionError):
            return None
        t = obj.get("t") if isinstance(obj, dict) else None
        if not _number(t):
            return None
        sample = obj.get("kind") == "sample"
    return (float(t), int(sample)) if 0 <= t <= MAX_T else None


def read_journal(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Yield every complete, well-shaped record; a torn or corrupt line is skipped, not raised
    (JournalReader counts what it skips)."""
    return iter(JournalReader(path))


def read_records(path: str | os.PathLike[str]) -> Iterator[records.Record]:
    """The journal's records, typed: lines without a record's shape are skipped (records.parse)."""
    for raw in read_journal(path):
        record = records.parse(raw)
        if record is not None:
            yield record


def well_shaped(record: dict[str, Any]) -> bool:
    """The shape every reader relies on: a real timestamp, a known kind, and for samples, GPUs and server
    fields of the types drawn. Unknown keys pass (new fields are added over time)."""
    t = record.get("t")
    if not _number(t) or not 0 <= t <= MAX_T or not isinstance(record.get("kind"), str):
        return False
    kind = record["kind"]
    if kind == "event":
        return isinstance(record.get("event"), str)
    if kind == "command":
        return isinstance(record.get("cmd"), str)
    if kind == "sample":
        return _sample_shaped(record)
    return True


def _sample_shaped(record: dict[str, Any]) -> bool:
    server, spec, gpus, procs = (record.get(k) for k in ("server", "spec", "gpus", "procs"))
    if not isinstance(server, (dict, type(None))) or not isinstance(spec, (dict, type(None))):
        return False
    if not isinstance(gpus, (list, type(None))) or not isinstance(procs, (list, type(None))):
        return False
    if server is not None and not _fields_shaped(server, _SERVER_TEXT, _SERVER_NUMBERS):
        return False
    return all(isinstance(g, dict) and _fields_shaped(g, _GPU_TEXT, _GPU_NUMBERS) for g in gpus or []) and \
        all(isinstance(p, dict) for p in procs or [])


def _fields_shaped(fields: dict[str, Any], text: tuple[str, ...], numbers: tuple[str, ...]) -> bool:
    """Known text fields are text or null; known number fields finite numbers or null."""
    return all(isinstance(fields.get(k), (str, type(None))) for k in text) and \
        all(fields.get(k) is None or _number(fields[k]) for k in numbers)


def _number(value: Any) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer past float range
        return False
