"""The console never shows old figures as live: a supervisor killed under it, a server that stops answering.

Both tests run a real `specctl run --headless` process on the simulator and
the console connected to it through its socket, then take something away the
way it goes away in production (SIGKILL, a server process that hangs).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest

from specctl.console.tui.app import SpecctlApp
from specctl.console.tui.links import SocketLink
from specctl.console.tui.screens.dashboard import LOST_NOTE, UNREACHABLE_NOTE
from specctl.widgets.banner import SpecBanner
from specctl.widgets.event_log import EventLog
from specctl.widgets.gpu_panel import GpuPanel
from specctl.widgets.timechart import TimeChart

from support.headless import Headless
from support.tui import until


def banner(app: SpecctlApp) -> str:
    return app.dashboard.query_one(SpecBanner).render().plain


def log_text(app: SpecctlApp) -> str:
    return "\n".join(strip.text for strip in app.dashboard.query_one(EventLog).lines)


def legend(app: SpecctlApp, ident: str) -> str:
    data = app.dashboard.query_one(f"#{ident}", TimeChart).data
    assert data is not None
    return data.legend


def note(app: SpecctlApp) -> str:
    widget = app.dashboard.query_one("#stale-note")
    return str(widget.render()) if widget.display else ""


def stop(sup: Headless) -> None:
    """SIGTERM as an operator would; whatever is left after a minute is killed, so no test leaks a process."""
    if sup.proc.poll() is not None:
        return
    tree = psutil.Process(sup.proc.pid).children(recursive=True)
    sup.proc.send_signal(signal.SIGTERM)
    try:
        sup.proc.wait(timeout=60)
    finally:
        for p in [*tree, psutil.Process(sup.proc.pid)] if sup.proc.poll() is None else tree:
            if p.is_running():
                p.kill()


@pytest.fixture
def headless(sock_dir: Path):
    sup = Headless(sock_dir, "--sim-load", "steady:c=8", "--sim-gpus", "2")
    yield sup
    stop(sup)


@pytest.mark.slow
async def test_a_killed_supervisor_greys_the_whole_view_and_the_log_says_so(headless: Headless,
                                                                              sock_dir: Path) -> None:
    app = SpecctlApp(SocketLink(headless.socket), remember_theme=False)
    children: list[psutil.Process] = []
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: os.path.exists(headless.socket), "the supervisor's socket")
        await until(pilot, lambda: "READY" in banner(app) and "SPEC ON" in banner(app), "a ready server")
        await until(pilot, lambda: legend(app, "chart-tps") != "–", "a live tok/s figure")
        assert note(app) == "" and not any(p.stale for p in app.dashboard.query(GpuPanel))

        children = psutil.Process(headless.proc.pid).children(recursive=True)
        headless.proc.send_signal(signal.SIGKILL)  # no goodbye: the way a supervisor dies under OOM
        headless.proc.wait(timeout=30)
        for child in children:  # its simulator would run on, orphaned
            child.kill()

        await until(pilot, lambda: "SUPERVISOR LOST" in banner(app), "SUPERVISOR LOST in the banner")
        first = banner(app).splitlines()[0]
        assert "since" in first and "READY" not in first and "SPEC ON" not in first, first
        assert "figures below are old" in first
        assert legend(app, "chart-tps") == "–" and legend(app, "chart-accept") == "–"
        assert legend(app, "chart-requests") == "run – · queue –"
        panels = list(app.dashboard.query(GpuPanel))
        assert panels and all(p.stale for p in panels), "every GPU panel greyed"
        assert note(app) == LOST_NOTE and "q quit" in note(app)
        assert "LINK" in log_text(app) and "link_lost" in log_text(app)
        assert app.dashboard.query_one("#force-on").disabled

        # a new supervisor on the same socket: the console reconnects and says so
        (sock_dir / "again").mkdir()
        second = Headless(sock_dir / "again", "--socket", str(headless.socket), "--sim-load", "steady:c=8")
        try:
            await until(pilot, lambda: "SUPERVISOR LOST" not in banner(app) and "READY" in banner(app),
                        "the view live again")
            assert "link_restored" in log_text(app)
            assert note(app) == ""
            await until(pilot, lambda: not any(p.stale for p in app.dashboard.query(GpuPanel)), "live GPU panels")
        except BaseException:
            stop(second)
            raise
    stop(second)  # once the console has left: it is the supervisor's shutdown under test elsewhere, not here


@pytest.mark.slow
async def test_a_server_that_stops_answering_marks_its_last_figures_old(headless: Headless) -> None:
    app = SpecctlApp(SocketLink(headless.socket), remember_theme=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: os.path.exists(headless.socket), "the supervisor's socket")
        await until(pilot, lambda: "READY" in banner(app) and legend(app, "chart-tps") != "–", "live figures")
        [server] = [p for p in psutil.Process(headless.proc.pid).children(recursive=True)
                    if "specctl.runtime.sim" in " ".join(p.cmdline())]
        server.send_signal(signal.SIGSTOP)  # alive, but answering nothing: UNREACHABLE, not exited
        try:
            await until(pilot, lambda: "UNREACHABLE" in banner(app), "UNREACHABLE in the banner")
            first = banner(app).splitlines()[0]
            assert "(was ON)" in first and "since" in first, first
            tps = legend(app, "chart-tps")
            assert tps.startswith("– (was ") and tps.endswith(")"), tps
            assert note(app) == UNREACHABLE_NOTE
            assert "SUPERVISOR LOST" not in banner(app), "the supervisor itself still answers"
        finally:
            server.send_signal(signal.SIGCONT)
        await until(pilot, lambda: "READY" in banner(app) and note(app) == "", "the server back")
