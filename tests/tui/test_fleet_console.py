"""The fleet console (`specctl tui --router URL`) on the real router in front of simulators, and its pictures.

The live tests drive the app as an operator does (keys, Enter, Escape) and read the table and the
simulators' own settings; the snapshots pin the fleet screen drawn from fixed rows (its widgets take
plain data), so no port number or simulated tok/s moves them.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from textual.app import App

from specctl.console.tui.fleet_app import FleetApp, FleetSource
from specctl.console.tui.screens.dashboard import Dashboard
from specctl.console.tui.screens.fleet import FleetScreen
from specctl.runtime.fleet.keys import Keys
from specctl.themes.console_themes import DEFAULT_THEME, THEMES
from specctl.widgets.fleet_table import FleetTable

from support.router import router_process
from support.sim_process import sim_process
from support.tui import T0, until

SMALL, LARGE = (80, 24), (160, 48)


def settings_of(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/server_info", timeout=5) as resp:
        return json.loads(resp.read())["internal_states"][0]["specctl"]["settings"]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    tmp = tmp_path_factory.mktemp("fleet-tui")
    (tmp / "key").write_text("fleet-key")
    with ExitStack() as stack:
        a = stack.enter_context(sim_process(tmp, "--load", "steady:c=3", "--admin-key-file", str(tmp / "key")))
        b = stack.enter_context(sim_process(tmp, "--load", "idle", "--admin-key-file", str(tmp / "key")))
        c = stack.enter_context(sim_process(tmp, "--load", "idle", "--no-plugin"))
        router = stack.enter_context(router_process(tmp, [a, b, c]))
        yield {"a": a, "b": b, "c": c, "router": router}


def source(fleet: dict) -> FleetSource:
    return FleetSource(router=fleet["router"], keys=Keys(default="fleet-key"), interval=0.3)


async def test_rows_force_off_on_the_fleet_and_into_a_worker_and_back(fleet: dict) -> None:
    app = FleetApp(source(fleet), remember_theme=False)
    async with app.run_test(size=LARGE) as pilot:
        table = app.fleet_screen.query_one(FleetTable)
        await until(pilot, lambda: table.row_count == 3, "a row per worker")
        assert app.fleet_screen.query_one("#fleet-totals").render().plain.startswith(
            f"FLEET router {fleet['router']} · 3 workers")
        await pilot.press("x")  # force off: the whole fleet, nothing marked
        await until(pilot, lambda: len(app.results) == 3, "a result per worker")
        assert app.results[fleet["a"]] == app.results[fleet["b"]] == "ok"
        assert app.results[fleet["c"]].startswith("view only")
        assert settings_of(fleet["a"])["mode"] == settings_of(fleet["b"])["mode"] == "off"
        log = "\n".join(line.text for line in app.fleet_screen.query_one("#fleet-log").lines)
        assert f"worker={fleet['a']} result=ok" in log and "result=view only" in log
        # mark one worker: auto goes to it alone
        table.move_cursor(row=table.get_row_index(fleet["b"]))
        await pilot.press("m", "a")
        await until(pilot, lambda: settings_of(fleet["b"])["mode"] == "auto", "b back to auto")
        assert settings_of(fleet["a"])["mode"] == "off"
        await pilot.press("m")  # unmark; auto for everyone
        await pilot.press("a")
        await until(pilot, lambda: settings_of(fleet["a"])["mode"] == "auto", "a back to auto")
        # Enter: the single-server view of the worker under the cursor; Escape: the table again
        table.move_cursor(row=table.get_row_index(fleet["a"]))
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, Dashboard), "the worker's dashboard")
        await until(pilot, lambda: app.timeline.latest is not None, "a sample of that worker")
        assert fleet["a"] in app.link.supervisor.backend.url
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, FleetScreen), "the fleet table again")
        polls = app.polls
        await until(pilot, lambda: app.polls > polls + 1, "the fleet poll going on")


async def test_only_changed_cells_are_redrawn(fleet: dict) -> None:
    app = FleetApp(source(fleet), remember_theme=False)
    async with app.run_test(size=LARGE) as pilot:
        await until(pilot, lambda: app.polls >= 2, "two polls")
        first = app.fleet_screen.redrawn
        await until(pilot, lambda: app.polls >= 6, "four more polls")
        # the rows were drawn once (3 x 14 cells); after that only the loaded worker's numbers move
        assert first >= 42
        assert app.fleet_screen.redrawn - first < 4 * 14


# -- pictures ---------------------------------------------------------------------------------------------

def _row(url: str, **kw: object) -> dict:
    base = {"url": url, "router_healthy": True, "state": "ok", "mode": "auto", "on": True, "depth": 3,
            "batch": 4, "accept_len": 2.41, "gen_tps": 812.0, "switches": 6, "last_switch": "quiet",
            "differs": False, "last_result": "ok"}
    return {**base, **kw}


ROWS = [
    _row("http://10.0.0.11:30000"),
    _row("http://10.0.0.12:30000", on=False, depth=0, batch=48, accept_len=1.0, gen_tps=6120.0, last_switch="load"),
    _row("http://10.0.0.13:30000", mode="off", on=False, depth=0, switches=7, last_switch="forced", differs=True),
    _row("http://10.0.0.14:30000", state="view only", mode=None, on=None, depth=None, switches=None,
         last_switch=None, last_result="view only: without the specctl plugin"),
    _row("http://10.0.0.15:30000", router_healthy=False, state="unreachable", mode=None, on=None, depth=None,
         batch=None, accept_len=None, gen_tps=None, switches=None, last_switch=None,
         last_result="unreachable: connection refused"),
    _row("http://10.0.0.16:30000", router_healthy=None, state="missing", mode=None, on=None, depth=None,
         batch=None, accept_len=None, gen_tps=None, switches=None, last_switch=None, last_result="missing"),
]
TOTALS = {"workers": 6, "by_outcome": {"ok": 3, "view only": 1, "unreachable": 1, "missing": 1},
          "spec_on": 1, "spec_off": 2, "gen_tps": 7744.0, "running": 56.0}


class FleetPicture(App[None]):
    """The fleet screen with fixed rows and one command's results in its log."""

    def on_mount(self) -> None:
        for theme in THEMES:
            self.register_theme(theme)
        self.theme = DEFAULT_THEME
        screen = FleetScreen("router http://router.example:30000")
        self.push_screen(screen)
        screen.show(ROWS, TOTALS)
        screen.log_records([{"v": 1, "t": T0, "kind": "event", "event": "fleet", "command": "force-off",
                             "worker": "http://10.0.0.13:30000", "result": "ok", "detail": "mode=off"},
                            {"v": 1, "t": T0, "kind": "event", "event": "fleet_not_ok", "command": "force-off",
                             "worker": "http://10.0.0.15:30000", "result": "unreachable",
                             "detail": "connection refused"}])


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "160x48"])
def test_fleet_screen(snap_compare, size) -> None:
    assert snap_compare(FleetPicture(), terminal_size=size)


def test_the_tui_refuses_a_fleet_it_cannot_list(tmp_path: Path) -> None:
    import subprocess
    import sys

    got = subprocess.run([sys.executable, "-m", "specctl.console.cli", "tui", "--router", "http://127.0.0.1:9"],
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 3 and "cannot reach the router at http://127.0.0.1:9" in got.stderr


async def test_the_single_server_view_on_a_router_says_what_it_found(fleet: dict) -> None:
    """Attached to the router's URL, the console says once that it is a router and keeps the fleet view's
    command in its banner, instead of flapping between ready and unreachable."""
    from specctl.console.tui.app import SpecctlApp
    from specctl.console.tui.fleet_app import attach_link

    link, folder = attach_link(fleet["router"], None)
    app = SpecctlApp(link, remember_theme=False)
    try:
        async with app.run_test(size=LARGE) as pilot:
            await until(pilot, lambda: app.timeline.router is not None, "the attached_router event")
            assert app.timeline.router["workers"] == 3
            assert f"specctl tui --router {fleet['router']}" in app.status_text()
            await pilot.pause(1.0)
            log = "\n".join(line.text for line in app.dashboard.query_one("#log").lines)
            assert log.count("ROUTER") == 1 and "READY" not in log and "UNREACH" not in log
    finally:
        shutil.rmtree(folder, ignore_errors=True)
