"""Every control of the console, driven like an operator would, against a real supervisor.

The supervisor runs in the app's event loop on the embedded simulator (a
real HTTP server process on loopback); each test presses a key or clicks a
button and then checks three things a user could check: the banner, the
supervisor's state and the journal's ``command`` record.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from textual.command import CommandList
from textual.pilot import Pilot
from textual.widgets import Input, Static

from specctl.console.tui.actions import ACTIONS
from specctl.console.tui.app import SpecctlApp
from specctl.console.tui.links import LocalLink
from specctl.console.tui.messages import SampleArrived
from specctl.console.tui.screens.confirm import ConfirmScreen
from specctl.console.tui.screens.help import HelpScreen
from specctl.console.tui.screens.thresholds import ThresholdsScreen
from specctl.runtime.core.settings import PolicySettings
from specctl.runtime.supervisor.config import SupervisorConfig
from specctl.runtime.supervisor.journal import read_journal
from specctl.runtime.supervisor.lifecycle import Supervisor
from specctl.widgets.banner import SpecBanner
from specctl.widgets.event_log import EventLog

from support.tui import palette, until


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    return tmp_path / "run.jsonl"


@pytest.fixture
def app(journal: Path) -> SpecctlApp:
    config = SupervisorConfig(sim_load="steady:c=4", sim_gpus=2, interval=0.2, journal_path=journal,
                              socket_path=None)
    return SpecctlApp(LocalLink(Supervisor(config)), remember_theme=False)


def banner(app: SpecctlApp) -> str:
    return app.dashboard.query_one(SpecBanner).render().plain


def commands(journal: Path, cmd: str) -> list[dict[str, Any]]:
    return [r for r in read_journal(journal) if r.get("kind") == "command" and r.get("cmd") == cmd]


async def ready(pilot: Pilot) -> None:
    await until(pilot, lambda: "SPEC ON" in banner(pilot.app) and "READY" in banner(pilot.app),
                "the simulator to be ready with speculation on")


async def test_force_off_key_reaches_the_supervisor_and_the_journal(app: SpecctlApp, journal: Path) -> None:
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await pilot.press("x")
        await until(pilot, lambda: "SPEC OFF" in banner(app) and "FORCED OFF" in banner(app), "SPEC OFF")
        assert app.link.supervisor.latest_sample["spec"]["mode"] == "off"
        log = app.dashboard.query_one(EventLog)
        await until(pilot, lambda: [s for s in log.lines if f"mode mode=off by uid {os.getuid()}" in s.text],
                    "the command in the event log")
    [record] = commands(journal, "mode")
    assert record["ok"] and record["args"] == {"mode": "off"} and record["uid"] == os.getuid()


async def test_clicking_force_on_then_auto(app: SpecctlApp, journal: Path) -> None:
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await pilot.click("#force-on")
        await until(pilot, lambda: "FORCED ON" in banner(app), "FORCED ON")
        await pilot.click("#auto")
        await until(pilot, lambda: "AUTO" in banner(app) and "FORCED" not in banner(app), "AUTO")
    assert [r["args"]["mode"] for r in commands(journal, "mode")] == ["on", "auto"]


async def test_auto_key(app: SpecctlApp, journal: Path) -> None:
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await pilot.press("x")
        await until(pilot, lambda: "FORCED OFF" in banner(app), "FORCED OFF")
        await pilot.press("a")
        await until(pilot, lambda: "AUTO" in banner(app) and "FORCED" not in banner(app), "AUTO")
    assert [r["args"]["mode"] for r in commands(journal, "mode")] == ["off", "auto"]


async def test_thresholds_form_applies_what_was_typed(app: SpecctlApp, journal: Path) -> None:
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await pilot.press("t")
        assert isinstance(app.screen, ThresholdsScreen)
        await pilot.click("#field-off_at")
        await pilot.press("end", "backspace", "backspace", "4", "8", "enter")
        settings = lambda: app.link.supervisor.latest_sample["spec"]["settings"]  # noqa: E731
        await until(pilot, lambda: settings()["off_at"] == 48, "off_at 48 on the server")
        assert not isinstance(app.screen, ThresholdsScreen)
    [record] = commands(journal, "set")
    assert record["ok"] and record["args"] == {"settings": {"off_at": 48}}


async def test_the_form_says_which_thresholds_calibration_learned_and_from_how_much(app: SpecctlApp) -> None:
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        # the calibration loop's own way in: the desired state's learned layer, sent to the server
        sent = await app.link.supervisor.commands.learned({"off_at": 40, "on_at": 20}, "from 1,904 steps")
        assert sent == {"off_at": 40, "on_at": 20}
        settings = lambda: app.link.supervisor.latest_sample["spec"]["settings"]  # noqa: E731
        await until(pilot, lambda: settings()["off_at"] == 40, "off_at 40 on the server")
        await pilot.press("t")
        assert isinstance(app.screen, ThresholdsScreen)
        line = lambda: app.screen.query_one("#form-learned", Static).render().plain  # noqa: E731
        await until(pilot, lambda: "learned by calibration" in line(), "the form to say what was learned")
        assert "off_at 40, on_at 20 (from 1,904 steps, since " in line()
        assert app.screen.query_one("#field-off_at", Input).value == "40"


def said(app: SpecctlApp) -> list[str]:
    return [n.message for n in app._notifications]


async def test_applying_an_unchanged_form_sends_nothing_and_says_so(app: SpecctlApp, journal: Path) -> None:
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await pilot.press("t")
        await pilot.click("#field-off_at")
        await pilot.press("enter")
        await until(pilot, lambda: not isinstance(app.screen, ThresholdsScreen), "the form to close")
        assert "Nothing changed: the thresholds are as they were" in said(app)
    assert commands(journal, "set") == []


async def test_no_thresholds_form_without_the_server_s_settings(app: SpecctlApp) -> None:
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await app.link.supervisor.stop_server()
        await until(pilot, lambda: app.timeline.latest["server"]["state"] == "stopped", "a stopped sample")
        await pilot.press("t")
        await pilot.pause()
        assert not isinstance(app.screen, ThresholdsScreen), "a form of defaults would pass for the server's"
        assert "No thresholds to edit: they are the server's, and it is stopped" in said(app)


async def test_a_command_sent_while_the_view_is_paused_says_the_view_is_paused(app: SpecctlApp) -> None:
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await pilot.press("p", "x")
        await until(pilot, lambda: "Speculation forced off (the view is paused: p shows it)" in said(app),
                    "the paused note")
        await pilot.press("p")
        await until(pilot, lambda: "FORCED OFF" in banner(app), "FORCED OFF once resumed")


@pytest.mark.slow
async def test_the_server_restarts_from_the_palette_once_the_operator_says_yes(app: SpecctlApp, journal: Path) -> None:
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        first = app.timeline.latest["server"]["pid"]
        await palette(pilot, "Restart the model server")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
        await pilot.press("n")
        await pilot.pause()
        assert commands(journal, "server") == [], "no is no"
        await palette(pilot, "Restart the model server")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question again")
        await pilot.press("y")
        await until(pilot, lambda: (app.timeline.latest["server"]["pid"] not in (None, first)
                                    and "READY" in banner(app)), "a new server ready")
    [record] = commands(journal, "server")
    assert record["ok"] and record["args"] == {"action": "restart"}


@pytest.mark.slow
async def test_an_invalid_set_is_refused_whole_and_nothing_is_sent(app: SpecctlApp, journal: Path) -> None:
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await pilot.click("#thresholds")
        await pilot.click("#field-off_at")
        await pilot.press("end", "backspace", "backspace", "4", "8")  # a fine change...
        await pilot.click("#field-on_at")
        await pilot.press("end", "backspace", "backspace", "9", "0", "enter")  # ...and a bad one
        await pilot.pause()
        form = app.screen
        assert isinstance(form, ThresholdsScreen)
        assert "on_at: must be below off_at (48)" in str(form.query_one("#form-error").render())
        assert form.query_one("#apply").disabled
        await pilot.press("escape")
        await pilot.pause()
        assert app.link.supervisor.latest_sample["spec"]["settings"]["off_at"] == PolicySettings().off_at
    assert commands(journal, "set") == []


async def test_pause_freezes_the_view_and_resume_catches_up(app: SpecctlApp) -> None:
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await pilot.press("p")
        assert "VIEW PAUSED" in banner(app)
        frozen = app.dashboard.query_one(SpecBanner).state
        seen = app.timeline.latest["t"]
        await until(pilot, lambda: app.timeline.latest["t"] > seen, "a newer sample")
        assert app.dashboard.query_one(SpecBanner).state is frozen
        await pilot.click("#pause")  # the button resumes as the key does
        assert "VIEW PAUSED" not in banner(app)
        assert app.dashboard.query_one(SpecBanner).state.now == app.timeline.now


async def test_a_narrow_banner_keeps_its_two_lines_and_the_view_s_status(app: SpecctlApp) -> None:
    async with app.run_test(size=(60, 20)) as pilot:
        await ready(pilot)
        await pilot.press("p")
        lines = banner(app).split("\n")
        assert len(lines) == 2 and "READY" in lines[0] and lines[1].startswith("VIEW PAUSED"), lines


async def test_samples_arrive_as_typed_messages(journal: Path) -> None:
    posted: list[Any] = []
    config = SupervisorConfig(sim_load="idle", interval=0.2, journal_path=journal, socket_path=None)
    app = SpecctlApp(LocalLink(Supervisor(config)), remember_theme=False)
    async with app.run_test(size=(100, 30), message_hook=posted.append) as pilot:
        await until(pilot, lambda: any(isinstance(m, SampleArrived) for m in posted), "a SampleArrived")
    sample = next(m for m in posted if isinstance(m, SampleArrived)).record
    assert sample["kind"] == "sample" and sample["sim"] is True


async def test_help_lists_every_key(replay) -> None:
    app = replay("one_gpu.jsonl", 100)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        table = app.screen.query_one("DataTable")
        text = " ".join(str(cell) for i in range(table.row_count) for cell in table.get_row_at(i))
        for action in ACTIONS:
            if action.keys and action.applies != "fleet":  # the fleet console's own keys: in its help only
                assert action.help in text
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


@pytest.mark.slow
async def test_palette_runs_force_off(app: SpecctlApp, journal: Path) -> None:
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await pilot.press("ctrl+p")
        await pilot.press(*"Force speculation off")
        hits = lambda: app.screen.query_one(CommandList).option_count  # noqa: E731
        await until(pilot, hits, "palette hits")
        await pilot.press("enter")
        await until(pilot, lambda: "FORCED OFF" in banner(app), "FORCED OFF")
    assert [r["args"]["mode"] for r in commands(journal, "mode")] == ["off"]


async def test_theme_is_switched_live_and_remembered() -> None:
    from specctl.console.tui.links import ReplayLink
    from specctl.console.tui.prefs import load_prefs

    app = SpecctlApp(ReplayLink(Path(__file__).parent / "fixtures" / "one_gpu.jsonl"))
    async with app.run_test(size=(100, 30)) as pilot:
        assert app.theme == "specctl-dark"
        await pilot.press("c")
        assert app.theme == "specctl-light"
        await until(pilot, lambda: load_prefs().get("theme") == "specctl-light", "the theme saved")


async def test_quitting_stops_the_supervisor_and_its_server(app: SpecctlApp) -> None:
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        backend = app.link.supervisor.backend
        pid = backend.pid
        await pilot.press("q")
    assert backend.returncode() is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_quitting_during_start_up_leaves_no_server_behind(app: SpecctlApp) -> None:
    async with app.run_test(size=(100, 30)) as pilot:
        backend = app.link.supervisor.backend
        await until(pilot, lambda: backend.pid, "the simulator process to exist")
        pid = backend.pid
        await pilot.press("q")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
