"""The processes on one GPU, as nvitop lists them: pid, user, GPU memory and command.

Takes the plain ``processes`` list of a sample's GPU dict (None where they
could not be read); a value that could not be read shows as a dash.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

GIB = 1024**3
COLUMNS = ("PID", "USER", "GPU MEM", "COMMAND")


def _mem(value: Any) -> str:
    return "–" if not isinstance(value, (int, float)) else f"{value / GIB:.1f} GiB"


def rows(processes: list[dict[str, Any]], command_width: int) -> list[tuple[str, str, str, str]]:
    """One row per process, the largest holder of memory first; the command cut to ``command_width``."""
    ordered = sorted(processes, key=lambda p: -(p.get("mem_used") or 0))
    out = []
    for proc in ordered:
        command = proc.get("command") or "–"
        if len(command) > command_width:
            command = command[:max(command_width - 1, 1)] + "…"
        out.append((str(proc.get("pid", "–")), proc.get("user") or "–", _mem(proc.get("mem_used")), command))
    return out


def caption(processes: list[dict[str, Any]] | None, stale: bool = False) -> str:
    if processes is None:
        return "Processes: not readable here (NVML does not list them)"
    old = " (as last seen)" if stale else ""
    if not processes:
        return f"Processes: none on this GPU{old}"
    total = sum(p.get("mem_used") or 0 for p in processes)
    return f"Processes: {len(processes)}, holding {total / GIB:.1f} GiB{old}"


class GpuProcesses(Vertical):
    """A caption and a table; ``show(processes)`` redraws only when they changed."""

    DEFAULT_CSS = """
    GpuProcesses {
        height: auto;
        max-height: 12;
        padding: 0 1;
        & > #gpu-procs-caption { color: $foreground-muted; text-style: bold; }
        & > DataTable { height: auto; max-height: 10; }
    }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._shown: tuple[Any, ...] | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="gpu-procs-caption")
        table: DataTable[str] = DataTable(cursor_type="row", zebra_stripes=True, show_cursor=False)
        table.add_columns(*COLUMNS)
        yield table

    def show(self, processes: list[dict[str, Any]] | None, stale: bool = False) -> None:
        width = max(self.size.width - 40, 20)
        key = (repr(processes), stale, width)
        if key == self._shown:  # a DataTable rebuilt each sample flickers and costs: only on a change
            return
        self._shown = key
        self.query_one("#gpu-procs-caption", Static).update(caption(processes, stale))
        table = self.query_one(DataTable)
        table.clear()
        table.add_rows(rows(processes or [], width))
        table.display = bool(processes)
