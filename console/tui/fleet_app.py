"""``specctl tui --router URL`` (or ``--workers ...``): the console over a fleet.

The same app as the single-server console (:class:`SpecctlApp`), opened on the fleet screen: a poll
reads the inventory and every worker (runtime/fleet, one aiohttp session, one timeout per request)
and hands the screen plain rows. Enter opens the single-server view of one worker: an in-process
supervisor attached to its URL with its admin key, the dashboard every single server gets; Escape
stops that supervisor and returns. The keys that steer (force on/off, auto, thresholds) are the same
actions as on a single server: on the fleet screen they fan out to the marked workers, or to all.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
from textual import events, work
from textual.css.query import NoMatches

from specctl.console.tui.app import SpecctlApp
from specctl.console.tui.links import Link, LinkError, LocalLink
from specctl.console.tui.model.timeline import Timeline
from specctl.console.tui.screens.dashboard import Dashboard
from specctl.console.tui.screens.fleet import FleetScreen
from specctl.console.tui.screens.thresholds import ThresholdsScreen
from specctl.runtime.core.errors import UNAVAILABLE
from specctl.runtime.fleet import inventory
from specctl.runtime.fleet.control import send
from specctl.runtime.fleet.inventory import InventoryError, Worker
from specctl.runtime.fleet.keys import Keys
from specctl.runtime.fleet.state import OK, WorkerState, connector, differing, read_all, totals
from specctl.themes.console_themes import DEFAULT_THEME, HIGH_CONTRAST, THEMES

DEFAULT_INTERVAL = 2.0  # seconds between fleet polls: each reads every worker twice (/server_info, /metrics)


@dataclass
class FleetSource:
    """Where the fleet comes from and how to reach its workers."""

    router: str | None = None
    router_key: str | None = None
    workers: list[str] = field(default_factory=list)
    expected: list[str] = field(default_factory=list)
    keys: Keys = field(default_factory=Keys)
    timeout: float = 2.0
    interval: float = DEFAULT_INTERVAL

    @property
    def describe(self) -> str:
        return f"router {self.router}" if self.router else f"{len(self.workers)} listed workers"


class NoLink(Link):
    """The fleet screen's link while no worker is open: nothing to stream, nothing to steer."""

    kind = "fleet"
    can_control = False

    async def records(self) -> AsyncIterator[dict[str, Any]]:
        return
        yield

    async def request(self, cmd: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        raise LinkError(UNAVAILABLE, "open a worker (Enter) to steer it alone")


def attach_link(url: str, key: str | None) -> tuple[Link, Path]:
    """The single-server view's link for one worker: an in-process supervisor attached to ``url``, its
    control socket in a private temporary folder (so it never meets a supervisor of this host's own)."""
    from specctl.console.cli.main import build_parser
    from specctl.runtime.supervisor.config import SupervisorConfig
    from specctl.runtime.supervisor.lifecycle import Supervisor

    folder = Path(tempfile.mkdtemp(prefix="specctl-fleet-"))
    args = build_parser().parse_args(["tui", "--attach", url])
    config = replace(SupervisorConfig.from_args(args), socket_path=folder / "specctl.sock", admin_key=key,
                     journal_path=None)
    return LocalLink(Supervisor(config)), folder


class FleetApp(SpecctlApp):
    """The console on a fleet; one worker at a time in the single-server view."""

    def __init__(self, source: FleetSource, *, theme: str | None = None, remember_theme: bool = True,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(NoLink(), theme=theme, remember_theme=remember_theme)
        self.source = source
        self.states: list[WorkerState] = []
        self.results: dict[str, str] = {}  # url -> the last command's result, as the table shows it
        self.note = ""
        self.polls = 0
        self.clock = clock
        self._folder: Path | None = None
        self._session: aiohttp.ClientSession | None = None
        self._fleet_workers: list[Worker] = []

    def on_mount(self, event: events.Mount) -> None:
        event.prevent_default()  # the single-server app's mount opens a dashboard on its link: not here
        for theme in THEMES:
            self.register_theme(theme)
        fallback = HIGH_CONTRAST.name if self.no_color else DEFAULT_THEME
        self.theme = self._initial_theme if self._initial_theme in self.available_themes else fallback
        self.push_screen(FleetScreen(self.source.describe))
        self._poll()

    @property
    def fleet_screen(self) -> FleetScreen:
        for screen in self.screen_stack:
            if isinstance(screen, FleetScreen):
                return screen
        raise NoMatches("no fleet screen")

    def _on_fleet(self) -> bool:
        return isinstance(self.screen, FleetScreen)

    # -- the poll -------------------------------------------------------------------
    @work(exclusive=True, group="fleet", exit_on_error=False)
    async def _poll(self) -> None:
        """One pass: the inventory and every worker read, then drawn; the next pass is scheduled when this
        one ends, so passes never pile up behind a slow worker."""
        src = self.source
        try:
            if self._session is None or self._session.closed:
                self._session = aiohttp.ClientSession(connector=connector(64))
            try:
                self._fleet_workers = await inventory.load(self._session, router=src.router, router_key=src.router_key,
                                                     workers=src.workers, expected=src.expected,
                                                     timeout=src.timeout)
                self.note = ""
            except InventoryError as exc:
                self.note = exc.message  # the last inventory stays, its rows say what they can
            self.states = await read_all(self._session, self._fleet_workers, src.timeout)
            self.polls += 1
            if not self.paused:
                self.draw_fleet()
        finally:
            self.set_timer(src.interval, self._poll)

    async def on_unmount(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._folder is not None:  # quit from a worker's view: its supervisor's folder goes too
            await self.close_link()
            shutil.rmtree(self._folder, ignore_errors=True)

    def rows(self) -> list[dict[str, Any]]:
        odd = differing(self.states)
        return [{**s.row(), "differs": s.url in odd, "last_result": self.results.get(s.url, "")}
                for s in self.states]

    def draw_fleet(self) -> None:
        try:
            self.fleet_screen.show(self.rows(), totals(self.states), self.note)
        except NoMatches:
            pass

    # -- into one worker and back ---------------------------------------------------
    def on_fleet_screen_open_worker(self, message: FleetScreen.OpenWorker) -> None:
        self.open_worker(message.url)

    def open_worker(self, url: str) -> None:
        """The single-server view of ``url``: a fresh link, timeline and dashboard, over the fleet screen."""
        self.link, self._folder = attach_link(url, self.source.keys.for_url(url))
        self.timeline = Timeline()
        self.connected, self._closed, self._link_text, self.lost_since = False, False, "", None
        self.push_screen(Dashboard(self.link.describe, self.link.can_control))
        self._pump()

    def action_fleet_back(self) -> None:
        """Escape on a worker's view: back to the fleet table; that worker's supervisor is stopped behind it."""
        if not isinstance(self.screen, Dashboard):
            return
        self.pop_screen()
        self._close_worker(self.link, self._folder)
        self.link, self._folder = NoLink(), None
        self.draw_fleet()

    @work(group="close", exit_on_error=False)
    async def _close_worker(self, link: Link, folder: Path | None) -> None:
        await self.close_link_of(link)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    async def close_link_of(self, link: Link) -> None:
        for worker in [w for w in self.workers if w.group == "link"]:
            worker.cancel()
        await link.close()

    def action_fleet_mark(self) -> None:
        if self._on_fleet():
            self.fleet_screen.toggle_mark()
            self.draw_fleet()

    def action_help(self) -> None:
        from specctl.console.tui import actions
        from specctl.console.tui.screens.help import HelpScreen

        self.push_screen(HelpScreen(actions.help_rows(fleet=True)))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "fleet_back":
            return isinstance(self.screen, Dashboard)
        if action == "fleet_mark":
            return self._on_fleet()
        return super().check_action(action, parameters)

    # -- the steering keys, on the fleet ----------------------------------------------
    def controls_refused(self) -> bool:
        if self._on_fleet():  # the server's own commands (restart, stop) are one server's: open it first
            self.notify("that acts on one server: open it with Enter", severity="warning")
            return True
        return super().controls_refused()

    def action_force_on(self) -> None:
        self.fleet_send({"mode": "on"}, "force-on") if self._on_fleet() else super().action_force_on()

    def action_force_off(self) -> None:
        self.fleet_send({"mode": "off"}, "force-off") if self._on_fleet() else super().action_force_off()

    def action_auto(self) -> None:
        self.fleet_send({"mode": "auto"}, "auto") if self._on_fleet() else super().action_auto()

    def action_thresholds(self) -> None:
        if not self._on_fleet():
            super().action_thresholds()
            return
        common = _most_common([s.spec.get("settings") for s in self._targets() if s.spec])
        if common is None:
            self.notify("No thresholds to edit: no selected worker reports its settings", severity="warning")
            return

        def done(changes: dict[str, Any] | None) -> None:
            if changes:
                self.fleet_send(changes, "set")

        self.push_screen(ThresholdsScreen(common), done)

    def _targets(self) -> list[WorkerState]:
        marked = self.fleet_screen.marked
        return [s for s in self.states if not marked or s.url in marked]

    @work(group="commands", exit_on_error=False)
    async def fleet_send(self, change: dict[str, Any], name: str) -> None:
        """Read the targets afresh, check the change against each, send it to all or none; log each result."""
        targets = [s.worker for s in self._targets()]
        src = self.source
        async with aiohttp.ClientSession(connector=connector(len(targets))) as session:
            states = await read_all(session, targets, src.timeout)
            results = await send(session, states, change, src.keys, src.timeout)
        now = self.clock()
        records = []
        for r in results:
            self.results[r.url] = r.outcome if r.outcome == OK else f"{r.outcome}: {r.detail or ''}".strip(": ")
            records.append({"v": 1, "t": now, "kind": "event", "event": "fleet" if r.outcome == OK else "fleet_not_ok",
                            "command": name, "worker": r.url, "result": r.outcome, "detail": r.detail})
        ok = sum(r.outcome == OK for r in results)
        with_fleet = self.fleet_screen
        with_fleet.log_records(records)
        self.notify(f"{name}: {ok} of {len(results)} ok", severity="information" if ok == len(results) else "warning")
        self.draw_fleet()


def _most_common(settings: list[Any]) -> dict[str, Any] | None:
    import json

    counted: dict[str, int] = {}
    for s in settings:
        if isinstance(s, dict):
            key = json.dumps(s, sort_keys=True)
            counted[key] = counted.get(key, 0) + 1
    return json.loads(max(counted, key=lambda k: counted[k])) if counted else None


def run_fleet(args: Any) -> int:
    """``specctl tui --router/--workers``: the fleet console; the inventory is checked before the screen opens."""
    import sys

    from specctl.console.cli.exit_codes import EXIT_NO_SUPERVISOR, EXIT_OK, EXIT_USAGE
    from specctl.console.cli.fleet import source
    from specctl.console.tui.prefs import load_prefs
    from specctl.runtime.fleet.keys import KeyFileError
    from specctl.runtime.supervisor.config_file import ConfigFileError

    args.fleet_keys = getattr(args, "admin_key_file", None)
    try:
        src = source(args)
    except (ValueError, KeyFileError, ConfigFileError) as exc:
        print(f"specctl tui: {exc}", file=sys.stderr)
        return EXIT_USAGE
    fleet = FleetSource(src["router"], src["router_key"], src["workers"], src["expected"], src["keys"],
                        src["timeout"], args.interval or DEFAULT_INTERVAL)

    async def probe() -> str:
        async with aiohttp.ClientSession() as session:
            try:
                await inventory.load(session, router=fleet.router, router_key=fleet.router_key,
                                     workers=fleet.workers, expected=fleet.expected, timeout=fleet.timeout)
            except InventoryError as exc:
                return exc.message
        return ""

    if problem := asyncio.run(probe()):
        print(f"specctl tui: {problem}", file=sys.stderr)
        return EXIT_NO_SUPERVISOR
    result = FleetApp(fleet, theme=load_prefs().get("theme")).run()
    return EXIT_OK if result is None else int(result)
