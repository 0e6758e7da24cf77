"""The fleet screen: a table of the workers (k9s-like), their totals, and the event log of fleet commands.

The app hands it plain rows (``show``); the screen only lays them out. Enter on a row asks the app to
open that worker in the single-server view (``OpenWorker``); ``m`` marks rows, and the fleet actions
(force on/off, auto, thresholds: the same keys as the single-server view, from the one actions table)
act on the marked rows, or on every worker where none is marked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer

from specctl.widgets.event_log import EventLog
from specctl.widgets.fleet_table import FleetTable, FleetTotals


class FleetScreen(Screen):
    """One row per worker; Enter opens it."""

    DEFAULT_CSS = """
    FleetScreen { layout: vertical; background: $background; }
    FleetScreen #fleet-log { height: 8; border-top: hkey $panel; }
    """

    @dataclass
    class OpenWorker(Message):
        url: str

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source
        self.marked: set[str] = set()
        self.redrawn = 0  # cells the table redrew over the screen's life (a test reads it)
        self._ready = False
        self._pending: tuple[Sequence[Mapping[str, Any]], Mapping[str, Any], str] | None = None
        self._pending_log: list[dict[str, Any]] = []

    def compose(self) -> ComposeResult:
        yield FleetTotals(id="fleet-totals")
        yield FleetTable(id="fleet-table")
        yield EventLog(id="fleet-log")
        yield Footer()

    def on_mount(self) -> None:
        self._ready = True
        if self._pending is not None:  # data set before the screen was up: drawn now
            self.call_after_refresh(self.show, *self._pending)
        if self._pending_log:
            self.call_after_refresh(self.log_records, self._pending_log)

    def show(self, rows: Sequence[Mapping[str, Any]], totals: Mapping[str, Any], note: str = "") -> None:
        if not self._ready:
            self._pending = (rows, totals, note)
            return
        shown = [{**r, "marked": r["url"] in self.marked} for r in rows]
        self.query_one(FleetTotals).show(self.source, totals, note)
        self.redrawn += self.query_one(FleetTable).show(shown)

    def log_records(self, records: list[dict[str, Any]]) -> None:
        if not self._ready:
            self._pending_log = [*self._pending_log, *records]
            return
        self.query_one(EventLog).show(records)

    def toggle_mark(self) -> str | None:
        url = self.query_one(FleetTable).cursor_url
        if url is not None:
            self.marked.symmetric_difference_update({url})
        return url

    @on(DataTable.RowSelected)
    def _selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.post_message(self.OpenWorker(str(event.row_key.value)))
