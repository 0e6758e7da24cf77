"""`specctl tui --connect` draws the supervisor's last minutes at once, not an empty screen.

A real `specctl run --headless` runs on the simulator for a while with no
console; then a console connects through the socket. Before it has seen a
single live sample it already shows charts that reach back to before it
existed, and the log lines of the supervisor's start and the server's
readiness, stamped with their own times.
"""

from __future__ import annotations

import time
from pathlib import Path

import psutil
from textual.widgets import DataTable

from specctl.console.tui.app import SpecctlApp
from specctl.console.tui.links import SocketLink
from specctl.console.tui.screens.gpu import GpuScreen
from specctl.widgets.event_log import EventLog
from specctl.widgets.gpu_panel import GpuPanel
from specctl.widgets.timechart import TimeChart

from support.headless import Headless, wait_for
from support.tui import until

BEFORE = 12  # ready samples the supervisor takes before any console connects


def log_text(app: SpecctlApp) -> str:
    return "\n".join(strip.text for strip in app.dashboard.query_one(EventLog).lines)


def chart_times(app: SpecctlApp, ident: str) -> list[float]:
    data = app.dashboard.query_one(f"#{ident}", TimeChart).data
    return [] if data is None or not data.series else [t for t, _ in data.series[0]]


async def test_a_console_that_connects_late_shows_the_last_minutes_at_once(sock_dir: Path) -> None:
    sup = Headless(sock_dir, "--sim-load", "steady:c=8", "--sim-gpus", "2")
    try:
        wait_for(lambda: len([s for s in sup.records("sample")
                              if s["server"]["state"] == "ready" and s["server"].get("gen_tps")]) >= BEFORE,
                 f"{BEFORE} ready samples with a tok/s figure")
        connected_at = time.time()  # everything before this the console can only know from the history
        app = SpecctlApp(SocketLink(sup.socket), remember_theme=False)
        async with app.run_test(size=(120, 40)) as pilot:
            older = lambda: [t for t in chart_times(app, "chart-tps") if t < connected_at]  # noqa: E731
            await until(pilot, lambda: len(older()) >= BEFORE, f"{BEFORE} tok/s points from before the console")
            assert len([t for t in chart_times(app, "chart-requests") if t < connected_at]) >= BEFORE
            log = log_text(app)
            assert "SUPERV" in log and "supervisor_start" in log, log
            assert "READY" in log and "server_ready" in log, log
            started = next(r for r in sup.records("event", "supervisor_start"))
            assert started["t"] < connected_at
            assert time.strftime("%H:%M:%S", time.localtime(started["t"])) in log  # stamped with its own time
            shown = len(app.timeline.points)
            assert shown >= BEFORE
            # the live stream goes on after the history, without a gap and without repeats
            await until(pilot, lambda: len(app.timeline.points) > shown + 2, "live samples after the history")
            times = [p.t for p in app.timeline.points]
            assert times == sorted(times) and len(times) == len(set(times))

            # Enter on GPU 1: its charts reach back as far, and it lists the simulator's scheduler of rank 1
            panel = list(app.dashboard.query(GpuPanel))[1]
            panel.focus()
            await pilot.press("enter")
            screen = await until(pilot, lambda: isinstance(app.screen, GpuScreen) and app.screen, "GPU 1's screen")
            util = await until(pilot, lambda: screen.query_one("#gpu-util", TimeChart).data, "GPU 1's charts")
            assert len([t for t, _ in util.series[0] if t < connected_at]) >= BEFORE
            table = screen.query_one(DataTable)
            row = await until(pilot, lambda: table.row_count and [str(c) for c in table.get_row_at(0)], "a process")
            assert row[3] == "sglang::scheduler_TP1" and row[1] != "–" and row[2].endswith("GiB"), row
            sim_pid = [p for p in psutil.Process(sup.proc.pid).children(recursive=True)
                       if "specctl.runtime.sim" in " ".join(p.cmdline())][0].pid
            assert row[0] == str(sim_pid)  # a process that exists: the one simulating the ranks
    finally:
        sup.stop()
