"""The fleet screen's widgets: one row per worker, and the fleet's totals above them.

Plain data in: each row is a dict of the numbers a worker's row shows (runtime/fleet's
``WorkerState.row()`` plus the console's ``differs``, ``marked`` and ``last_result``), keyed by
its URL. ``show`` redraws only the cells whose text changed (``DataTable.update_cell``), adds
rows for new workers and removes the ones that left, so a 64-server fleet costs what changed,
not the whole table, every poll.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text
from textual.widgets import DataTable, Static

#: (column key, heading, width)
COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("mark", " ", 1), ("url", "worker", 24), ("router", "router", 7), ("state", "state", 11),
    ("mode", "mode", 4), ("spec", "spec", 4), ("depth", "dep", 3), ("batch", "batch", 5),
    ("accept", "acc", 4), ("tps", "tok/s", 7), ("switches", "sw", 4), ("last", "last sw", 9),
    ("differs", "≠", 1), ("result", "last command", 24),
)
GOOD, BAD, WARN = "ok", ("unreachable", "timeout", "unauthorized", "missing", "refused"), ("view only",)


def _num(value: Any, digits: int = 0) -> str:
    return "-" if not isinstance(value, (int, float)) else f"{value:.{digits}f}"


def cells(row: Mapping[str, Any]) -> dict[str, str | Text]:
    """One worker's cells as text, in the table's columns."""
    state = str(row.get("state") or "")
    style = "green" if state == GOOD else "red" if state in BAD else "yellow"
    healthy = row.get("router_healthy")
    on = row.get("on")
    url = str(row.get("url", "")).removeprefix("http://")
    return {
        "mark": "*" if row.get("marked") else " ",
        "url": url,
        "router": "-" if healthy is None else "healthy" if healthy else "down",
        "state": Text(state, style=style),
        "mode": str(row.get("mode") or "-"),
        "spec": "-" if on is None else "on" if on else "off",
        "depth": _num(row.get("depth")),
        "batch": _num(row.get("batch")),
        "accept": _num(row.get("accept_len"), 2),
        "tps": _num(row.get("gen_tps")),
        "switches": _num(row.get("switches")),
        "last": str(row.get("last_switch") or "-"),
        "differs": "≠" if row.get("differs") else " ",
        "result": str(row.get("last_result") or ""),
    }


class FleetTable(DataTable[Any]):
    """A worker per row, the cursor on rows; Enter posts DataTable.RowSelected with the worker's URL as key."""

    DEFAULT_CSS = """
    FleetTable { height: 1fr; background: $surface; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._shown: dict[str, dict[str, str]] = {}  # url -> column -> text drawn

    def on_mount(self) -> None:
        for key, label, width in COLUMNS:
            self.add_column(label, key=key, width=width)

    def show(self, rows: Sequence[Mapping[str, Any]]) -> int:
        """Bring the table to ``rows``; how many cells it redrew (new rows count all of theirs)."""
        drawn = 0
        wanted = [str(r["url"]) for r in rows]
        for url in [u for u in self._shown if u not in set(wanted)]:
            self.remove_row(url)
            del self._shown[url]
        for row in rows:
            url = str(row["url"])
            new = cells(row)
            plain = {k: v.plain if isinstance(v, Text) else v for k, v in new.items()}
            old = self._shown.get(url)
            if old is None:
                self.add_row(*new.values(), key=url)
                drawn += len(new)
            else:
                for key, text in plain.items():
                    if old[key] != text:
                        self.update_cell(url, key, new[key])
                        drawn += 1
            self._shown[url] = plain
        return drawn

    @property
    def cursor_url(self) -> str | None:
        if not self._shown or self.cursor_row < 0 or self.cursor_row >= self.row_count:
            return None
        return str(self.coordinate_to_cell_key((self.cursor_row, 0)).row_key.value)


class FleetTotals(Static):
    """The fleet banner: where the inventory comes from and the totals over every worker."""

    DEFAULT_CSS = """
    FleetTotals { height: 2; background: $primary-background; color: $foreground; padding: 0 1; }
    """

    def show(self, source: str, totals: Mapping[str, Any], note: str = "") -> None:
        by = totals.get("by_outcome") or {}
        counts = ", ".join(f"{n} {o}" for o, n in by.items())
        line1 = Text.assemble(("FLEET ", "bold"), source, " · ", (f"{totals.get('workers', 0)} workers", "bold"),
                              ": ", counts)
        line2 = Text(f"spec on {totals.get('spec_on', 0)} · off {totals.get('spec_off', 0)}   "
                     f"{_num(totals.get('gen_tps'))} tok/s   {_num(totals.get('running'))} running"
                     + (f"   {note}" if note else ""))
        self.update(Text("\n").join([line1, line2]))
