"""The specctl console: one Textual app over any :class:`~specctl.console.tui.links.Link`.

A worker reads the link's records, folds each into the :class:`Timeline` and
posts a typed message; the handler redraws the dashboard from the timeline
(a newer message replaces a queued older one, so a slow terminal never falls
behind). Every key, button and palette entry goes through ``Link.request``,
the same control path as the CLI, and the supervisor journals it.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
from collections.abc import Iterable
from contextlib import suppress
from typing import Any

from textual import on, work
from textual.app import App, SystemCommand
from textual.css.query import NoMatches
from textual.reactive import reactive
from textual.screen import Screen
from textual.worker import WorkerCancelled, WorkerFailed

from specctl.console.cli.headless import stop_signals
from specctl.console.tui import actions
from specctl.console.tui.actions import SERVER_QUESTIONS
from specctl.console.tui.links import Link, LinkError, ReplayLink
from specctl.console.tui.messages import LinkChanged, LogArrived, SampleArrived
from specctl.console.tui.model.gpu_charts import gpu_view
from specctl.console.tui.model.timeline import Timeline
from specctl.console.tui.prefs import save_prefs
from specctl.console.tui.screens.confirm import ConfirmScreen
from specctl.console.tui.screens.dashboard import WINDOW_S, Dashboard
from specctl.console.tui.screens.gpu import GpuScreen
from specctl.console.tui.screens.help import HelpScreen
from specctl.console.tui.screens.thresholds import ThresholdsScreen
from specctl.runtime.core import view_only
from specctl.themes.console_themes import DEFAULT_THEME, HIGH_CONTRAST, THEMES
from specctl.widgets.gpu_panel import GpuPanel

VIEW_ONLY_BANNER = view_only.headline(view_only.NO_PLUGIN)
NO_SPECULATION_BANNER = view_only.headline(view_only.NO_SPECULATION)
RETRY_S = (0.5, 1.0, 2.0, 5.0)
#: How long a toast stays, by severity: long enough to read, short enough not to sit on the view.
TOAST_S = {"information": 3.0, "warning": 5.0, "error": 6.0}


def duration(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    return f"{int(seconds // 60)}:{seconds % 60:04.1f}"


class SpecctlApp(App[int]):
    """The console; ``link`` says where records come from and where commands go."""

    CSS_PATH = ["app.tcss"]
    TITLE = "specctl"
    BINDINGS = actions.bindings()

    paused: reactive[bool] = reactive(False)

    def __init__(self, link: Link, *, theme: str | None = None, remember_theme: bool = True) -> None:
        super().__init__()
        self.link = link
        self.timeline = Timeline()
        self.connected = False
        self._link_text = ""
        self._initial_theme = theme
        self._remember_theme = remember_theme
        self._closed = False
        self.lost_since: float | None = None  # wall time the link was lost, while it is
        self.wall_clock = time.time  # the wall clock of "lost since" (a snapshot test freezes it)
        self._quit_signals = tuple(sig for sig in stop_signals() if sig != signal.SIGINT)  # ctrl+c is Textual's

    # -- start and stop -----------------------------------------------------
    def on_mount(self) -> None:
        for theme in THEMES:
            self.register_theme(theme)
        fallback = HIGH_CONTRAST.name if self.no_color else DEFAULT_THEME
        self.theme = self._initial_theme if self._initial_theme in self.available_themes else fallback
        self.theme_changed_signal.subscribe(self, lambda theme: self._remember(theme.name))
        self.push_screen(Dashboard(self.link.describe, self.link.can_control))
        self._pump()
        self.set_interval(1.0, self._tick_lost)
        for sig in self._quit_signals:  # quit as `q` does, so the server we started is stopped
            asyncio.get_running_loop().add_signal_handler(sig, self.call_later, self.action_quit)

    async def on_unmount(self) -> None:
        await self.close_link()  # handlers stay until the server is stopped: a second signal must not cut it short
        for sig in self._quit_signals:
            asyncio.get_running_loop().remove_signal_handler(sig)

    async def close_link(self) -> None:
        """Stop what the console started (the in-process supervisor and its server), once.

        The link's worker goes first: a quit during start-up must not race the
        supervisor's start against its stop.
        """
        if self._closed:
            return
        self._closed = True
        for worker in [w for w in self.workers if w.group == "link"]:
            worker.cancel()
            with suppress(WorkerCancelled, WorkerFailed):
                await worker.wait()
        await self.link.close()

    async def action_quit(self) -> None:
        await self.close_link()
        self.exit(0)

    @property
    def dashboard(self) -> Dashboard:
        for screen in self.screen_stack:
            if isinstance(screen, Dashboard):
                return screen
        raise NoMatches("no dashboard: the app is starting or shutting down")  # callers suppress NoMatches

    # -- records in -----------------------------------------------------------
    @work(exclusive=True, group="link", exit_on_error=False)
    async def _pump(self) -> None:
        """Open the link and fold its records in; a socket link reconnects with backoff."""
        was_up = False  # once open, every later failure is a loss ("lost: ..."), retries included
        for attempt in itertools.count():
            try:
                await self.link.open()
                was_up = True
                self.post_message(LinkChanged(""))
                async for record in self.link.records():
                    self.timeline.fold(record)
                    kind = SampleArrived if record.get("kind") == "sample" else LogArrived
                    self.post_message(kind(record))
                return
            except (LinkError, OSError, ConnectionError) as exc:
                self.post_message(LinkChanged(f"{'lost' if was_up else 'cannot connect'}: {exc}"))
            if self.link.kind != "socket":
                return
            await asyncio.sleep(RETRY_S[min(attempt, len(RETRY_S) - 1)])

    def on_sample_arrived(self, message: SampleArrived) -> None:
        if not self.paused:
            self._redraw()

    def on_log_arrived(self, message: LogArrived) -> None:
        if not self.paused:
            self._redraw()

    @on(LinkChanged)
    def _link_changed(self, message: LinkChanged) -> None:
        if message.text and message.text != self._link_text:
            self.notify(message.text, title=self.link.describe, severity="error")
        self._note_loss(message.text)
        self.connected = not message.text
        self._link_text = message.text
        self.refresh_bindings()
        if self.paused:
            with suppress(NoMatches):  # see _redraw
                self.dashboard.show_status(self.timeline, self.status_text(), self.lost)
        else:
            self._redraw()
        with suppress(NoMatches):
            self.dashboard.set_can_control(self.can_steer)

    def _note_loss(self, text: str) -> None:
        """The link went (or came back): the event log says so, with the time, like any other event.

        These records are the console's own (the supervisor cannot journal its own loss); they go
        through the timeline so that the log shows them in order with the rest.
        """
        now = self.wall_clock()
        if text.startswith("lost") and self.lost_since is None:
            self.lost_since = now
            self.timeline.fold({"v": 1, "t": now, "kind": "event", "event": "link_lost",
                                "error": text.removeprefix("lost: ")})
        elif not text and self.lost_since is not None:
            self.timeline.fold({"v": 1, "t": now, "kind": "event", "event": "link_restored",
                                "lost_s": round(now - self.lost_since, 1)})
            self.lost_since = None

    @property
    def lost(self) -> tuple[float, float] | None:
        """(since, now) in wall time while the link to the supervisor is lost, else None."""
        return None if self.lost_since is None else (self.lost_since, self.wall_clock())

    def _tick_lost(self) -> None:
        """Keep "lost since ... (12s ago)" counting while no records arrive to redraw it."""
        if self.lost_since is not None:
            with suppress(NoMatches):
                self.dashboard.show_status(self.timeline, self.status_text(), self.lost)

    def status_text(self) -> str:
        """The banner's extra words: link trouble, pause, replay position."""
        words = []
        if self.lost_since is not None:
            words.append(f"retrying · {self._link_text.removeprefix('lost: ')}")
        elif self._link_text:
            words.append(self._link_text)
        if (why := self.timeline.view_only_reason) is not None:
            words.append(view_only.headline(why))
        if (router := self.timeline.router) is not None:  # said once by the supervisor, kept in view here
            words.append(f"a router, not a server: `specctl tui --router {router.get('url')}` shows its workers")
        link = self.link
        if isinstance(link, ReplayLink):
            state = "⏸" if link.paused else "▶"
            words.append(f"REPLAY {duration(link.position - link.start)} / {duration(link.end - link.start)} "
                         f"{state} x{link.speed:g}")
        elif self.paused:
            words.append("VIEW PAUSED (p resumes)")
        return "  ".join(words)

    def notify(self, message: str, *, title: str = "", severity: Any = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        """A toast that leaves after a few seconds (TOAST_S by severity): the event log keeps the record."""
        super().notify(message, title=title, severity=severity,
                       timeout=TOAST_S.get(severity, 5.0) if timeout is None else timeout, markup=markup)

    # -- actions --------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Replay keys exist only in a replay. Control keys always run: where they cannot act, they say why
        (a greyed key that does nothing when pressed looks broken; the buttons are greyed as well)."""
        if actions.applies(action) == "replay":
            return isinstance(self.link, ReplayLink)
        if action == "gpu_detail" and not parameters:  # Enter: only on a GPU of the dashboard
            return isinstance(self.screen, Dashboard) and isinstance(self.focused, GpuPanel)
        if action == "close_gpu":
            return isinstance(self.screen, GpuScreen)
        return actions.applies(action) != "fleet"  # the fleet console (fleet_app.py) allows its own

    @property
    def can_steer(self) -> bool:
        """Whether commands can steer the server now: a live link, connected, to a server with the plugin."""
        return self.link.can_control and self.connected and not self.timeline.view_only

    def controls_refused(self) -> bool:
        """True, after saying why, where this console cannot steer a supervisor right now."""
        if not self.link.can_control:
            why = "a replay has no controls: it only plays a journal back"
        elif not self.connected:
            why = "not connected to the supervisor (the banner says why)"
        elif self.timeline.view_only:
            why = self.timeline.view_only_refusal()
        else:
            return False
        self.notify(why, severity="warning")
        return True

    def action_force_on(self) -> None:
        if not self.controls_refused():
            self.send("mode", {"mode": "on"}, "Speculation forced on")

    def action_force_off(self) -> None:
        if not self.controls_refused():
            self.send("mode", {"mode": "off"}, "Speculation forced off")

    def action_auto(self) -> None:
        if not self.controls_refused():
            self.send("mode", {"mode": "auto"}, "Speculation back to auto")

    def action_pin_depth(self, depth: int) -> None:
        """Force on at one of the depths the server was built for: mode and steps in one request,
        exactly as `specctl force-on --steps N` sends it."""
        if self.controls_refused():
            return
        built = self.timeline.built_depths()
        if depth not in built:
            why = f"depths {', '.join(map(str, built))}" if built else "one depth only"
            self.notify(f"Cannot pin depth {depth}: this server was built for {why}", severity="warning")
            return
        self.send("mode", {"mode": "on", "steps": depth}, f"Depth pinned at {depth} (forced on)")

    def action_server(self, what: str) -> None:
        """Start, stop or restart the server the supervisor runs, once the operator says yes."""
        if self.controls_refused():
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.send("server", {"action": what}, f"Server {what}: done")

        self.push_screen(ConfirmScreen(f"server {what}", SERVER_QUESTIONS[what]), answered)

    def action_thresholds(self) -> None:
        if self.controls_refused():
            return
        latest = self.timeline.latest or {}
        settings = (latest.get("spec") or {}).get("settings")
        if not settings:  # a form of defaults would pass for the server's own values
            state = (latest.get("server") or {}).get("state") or "not answering"
            self.notify(f"No thresholds to edit: they are the server's, and it is {state}", severity="warning")
            return
        screen = ThresholdsScreen(settings)
        self.push_screen(screen, self._thresholds_done)
        self._say_learned(screen)

    @work(group="status", exit_on_error=False)
    async def _say_learned(self, screen: ThresholdsScreen) -> None:
        """Fill in, once the supervisor answers, which thresholds calibration learned (the form opens at once)."""
        try:
            who = ((await self.link.request("status")).get("desired") or {}).get("who")
        except LinkError:
            return  # the form works without it
        if isinstance(who, dict) and screen in self.screen_stack:
            screen.show_learned(who)

    def _thresholds_done(self, changes: dict[str, Any] | None) -> None:
        if changes:
            self.send("set", {"settings": changes}, "Thresholds applied")
        elif changes == {}:
            self.notify("Nothing changed: the thresholds are as they were")

    @work(group="commands", exit_on_error=False)
    async def send(self, cmd: str, args: dict[str, Any], done: str) -> dict[str, Any] | None:
        """Run one command through the link; say what happened either way."""
        try:
            result = await self.link.request(cmd, args)
        except LinkError as exc:
            where = f" ({exc.field})" if exc.field else ""
            self.notify(f"{exc.message}{where}", title=f"{cmd} refused", severity="error")
            return None
        # a paused view still shows the state from before the command: say so, or the banner contradicts it
        self.notify(f"{done} (the view is paused: p shows it)" if self.paused else done)
        return result

    def action_gpu_detail(self, index: int | None = None) -> None:
        """Open a GPU's screen: ``index``, or the dashboard's focused GPU (Enter on it)."""
        if index is None:
            focused = self.focused
            gpu = focused.gpu if isinstance(focused, GpuPanel) else None
            index = (gpu or {}).get("index")
        if not isinstance(index, int):
            return
        if isinstance(self.screen, GpuScreen):  # from the palette on another GPU's screen: that one instead
            self.pop_screen()
        self.push_screen(GpuScreen(index))
        self.call_after_refresh(self._redraw)

    def on_gpu_panel_chosen(self, message: GpuPanel.Chosen) -> None:
        self.action_gpu_detail(message.index)

    def action_close_gpu(self) -> None:
        if isinstance(self.screen, GpuScreen):
            self.pop_screen()

    def action_toggle_pause(self) -> None:
        if isinstance(self.link, ReplayLink):
            self.link.resume() if self.link.paused else self.link.pause()
        else:
            self.paused = not self.paused
        self._redraw()

    def action_seek(self, seconds: float) -> None:
        if isinstance(self.link, ReplayLink):
            self.link.seek(self.link.position + seconds)

    def action_seek_start(self) -> None:
        if isinstance(self.link, ReplayLink):
            self.link.seek(self.link.start)

    def action_seek_end(self) -> None:
        if isinstance(self.link, ReplayLink):
            self.link.seek(self.link.end)

    def action_speed(self, factor: float) -> None:
        if isinstance(self.link, ReplayLink):
            self.link.set_speed(self.link.speed * factor)
            self._redraw()

    def _redraw(self) -> None:
        # A record can still be queued while the app shuts down and the dashboard's
        # widgets are already gone; there is nothing left to draw it on.
        with suppress(NoMatches):
            self.dashboard.show(self.timeline, self.status_text(), self.paused, self.lost)
            self.dashboard.set_can_control(self.can_steer)
            if isinstance(self.screen, GpuScreen):
                screen = self.screen
                screen.show(gpu_view(self.timeline, screen.index, WINDOW_S, lost=self.lost is not None),
                            lost=self.lost is not None)

    def action_cycle_theme(self) -> None:
        names = [theme.name for theme in THEMES]
        current = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(current + 1) % len(names)]
        self.notify(f"Theme: {self.theme}")

    def action_help(self) -> None:
        self.push_screen(HelpScreen(actions.help_rows()))

    def _remember(self, name: str) -> None:
        if self._remember_theme:
            self._save_theme(name)

    @work(thread=True, exclusive=True, group="prefs", exit_on_error=False)
    def _save_theme(self, name: str) -> None:
        save_prefs({"theme": name})

    # -- command palette ------------------------------------------------------
    def _gpu_indices(self) -> list[int]:
        sample = self.timeline.latest
        return [] if sample is None else [g["index"] for g in sample["gpus"] if isinstance(g.get("index"), int)]

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        ours = {entry.palette for entry in actions.palette_entries()}
        # Textual's own "Keys" (its key panel) beside ours (the help screen, every key): one entry each
        yield from (command for command in super().get_system_commands(screen) if command.title not in ours)
        controls = self.can_steer
        for entry in actions.palette_entries():
            params = (0,) if entry.each_gpu else ()  # a GPU's entry names its GPU: no focus needed
            if not (self.check_action(entry.name, params) and (controls or entry.applies != "live")):
                continue
            if entry.each_gpu:
                for index in self._gpu_indices():
                    yield SystemCommand(entry.palette.format(gpu=index), entry.palette_help,
                                        lambda a=f"{entry.name}({index})": self.run_action(a))
            elif entry.each_depth:  # only where the server has several depths to pin
                for depth in self.timeline.built_depths():
                    yield SystemCommand(entry.palette.format(depth=depth), entry.palette_help.format(depth=depth),
                                        lambda a=f"{entry.name}({depth})": self.run_action(a))
            else:
                yield SystemCommand(entry.palette, entry.palette_help or entry.help,
                                    lambda a=entry.action: self.run_action(a))
