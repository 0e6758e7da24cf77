"""Append-only JSONL journal with size-based rotation, and a reader that forgives a torn tail.

Each record is written as one line and flushed, so a crash at any moment
leaves every complete line readable; the reader drops an incomplete or
undecodable last line instead of failing.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from specctl.runtime.core import records
from specctl.runtime.core.records import dumps

log = logging.getLogger(__name__)


class Journal:
    """Writes records to ``path``; rotates to ``path.1`` .. ``path.N`` past ``max_bytes``."""

    def __init__(self, path: str | os.PathLike[str], max_bytes: int = 64 * 1024 * 1024,
                 backups: int = 3) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self._fh: BinaryIO | None = None
        self._inode: int | None = None
        self.lost = 0  # records append() could not write since it last wrote one
        self._open()

    def _open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # unbuffered: a write that fails (a full disk) leaves nothing queued to fail again at close
            self._fh = open(self.path, "ab", buffering=0)
        except OSError as exc:  # said in the operator's terms; the supervisor refuses to start
            raise OSError(f"cannot write the journal {self.path}: {exc.strerror or exc}") from None
        self._inode = os.fstat(self._fh.fileno()).st_ino

    def write(self, record: dict[str, Any]) -> None:
        """Append one record as one line, written through to the file before this returns."""
        if self._fh is None:
            raise ValueError("journal is closed")
        self._reopen_if_moved()
        data = memoryview((dumps(record) + "\n").encode("utf-8"))
        start = self._fh.tell()
        try:
            while data:  # a raw write may take part of the line
                written = self._fh.write(data)
                if not written:
                    raise OSError(f"the journal {self.path} took no bytes")
                data = data[written:]
        except OSError:
            with contextlib.suppress(OSError):  # no torn line for the next record to be glued to
                os.ftruncate(self._fh.fileno(), start)
            raise
        if self.max_bytes and self._fh.tell() >= self.max_bytes:
            self._rotate()

    def append(self, record: dict[str, Any]) -> dict[str, Any] | None:
        """Write one record; a failing file (a full disk) never raises here. The failure is logged once and
        the records lost counted; when writes work again a ``journal_gap`` record goes first, and is returned
        so the caller can tell its listeners."""
        if self.lost:
            gap = records.event(records.JOURNAL_GAP, lost=self.lost)
            if not self._took(gap):
                self.lost += 1  # the record itself is lost too
                return None
            log.warning("journal writes resumed; %d records were lost", self.lost)
            self.lost = 0
        else:
            gap = None
        if not self._took(record):
            self.lost += 1
        return gap

    def _took(self, record: dict[str, Any]) -> bool:
        try:
            self.write(record)
        except (OSError, ValueError) as exc:
            if not self.lost:
                log.error("journal write failed: %s (said once; the records lost are counted)", exc)
            return False
        return True

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


def read_journal(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Yield every complete record; a torn or corrupt last line is skipped, not raised.

    A corrupt line in the middle (which our writer never produces) is skipped
    too, so one bad line cannot hide the rest of a recording.
    """
    with open(path, "rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                return  # torn tail: the writer died mid-line
            try:
                record = records.loads(raw)  # NaN or 1e999 would be drawn as numbers: the line is corrupt
            except (UnicodeDecodeError, ValueError):
                continue
            if isinstance(record, dict):
                yield record


def read_records(path: str | os.PathLike[str]) -> Iterator[records.Record]:
    """The journal's records, typed: lines without a record's shape are skipped (records.parse)."""
    for raw in read_journal(path):
        record = records.parse(raw)
        if record is not None:
            yield record
