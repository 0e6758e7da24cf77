"""Messages from the link's worker to the app: typed, and a newer sample replaces an older one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message


@dataclass
class RecordArrived(Message):
    """A record was folded into the timeline.

    The timeline holds everything to draw (log lines included), so a newer
    message makes any queued older one redundant: one redraw per burst.
    """

    record: dict[str, Any]

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, RecordArrived)


class SampleArrived(RecordArrived):
    """A ``sample`` record."""


class LogArrived(RecordArrived):
    """An ``event`` or ``command`` record, or a replay's reset."""


@dataclass
class LinkChanged(Message):
    """The link opened, failed or was lost: ``text`` says so in the banner, '' when all is well."""

    text: str
