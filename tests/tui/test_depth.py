"""The draft depth, live in the console (issue 22): banner, depth row, switch lines, "Pin depth N".

A server built for several depths says which one it runs; a two-state server reads exactly as before.
The live tests run a real Supervisor on the simulator built with depths 0,1,2,3, in the app's loop.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from specctl.console.tui.app import SpecctlApp
from specctl.console.tui.links import LocalLink
from specctl.runtime.supervisor.config import SupervisorConfig
from specctl.runtime.supervisor.journal import read_journal
from specctl.runtime.supervisor.lifecycle import Supervisor
from specctl.widgets.banner import BannerState, SpecBanner
from specctl.widgets.event_log import EventLog, describe
from specctl.widgets.timechart import TimeChart

from support.tui import first_line, palette, until

SWITCH = {"v": 1, "t": 1764400000.0, "kind": "event", "event": "spec_switch", "batch_size": 12}


# -- the event log's switch line ----------------------------------------------------------
def test_a_switch_between_two_depths_reads_as_a_depth_change() -> None:
    assert describe({**SWITCH, "on": True, "reason": "depth", "from": 3, "to": 2}) == (
        "SWITCH", "depth 3 → 2 (depth, batch 12)", "good")


def test_on_and_off_switches_keep_their_words_and_add_the_depths() -> None:
    assert describe({**SWITCH, "on": False, "reason": "load", "from": 2, "to": 0}) == (
        "SWITCH", "speculation OFF, depth 2 → 0 (load, batch 12)", "bad")
    assert describe({**SWITCH, "on": True, "reason": "quiet", "from": 0, "to": 3}) == (
        "SWITCH", "speculation ON, depth 0 → 3 (quiet, batch 12)", "good")


def test_a_switch_from_a_journal_before_depths_reads_as_it_did() -> None:
    assert describe({**SWITCH, "on": True, "reason": "quiet"}) == (
        "SWITCH", "speculation ON (quiet, batch 12)", "good")
    assert describe({**SWITCH, "on": False, "reason": "load", "from": None, "to": None}) == (
        "SWITCH", "speculation OFF (load, batch 12)", "bad")


# -- the banner's first line ----------------------------------------------------------------


DEPTHS = (0, 1, 2, 3)


@pytest.mark.parametrize(("state", "says"), [
    (BannerState(spec_on=True, mode="auto", steps=2, steps_on=3, depths=DEPTHS), "SPEC ON  AUTO  depth 2 of 0,1,2,3"),
    (BannerState(spec_on=False, mode="auto", steps=0, steps_on=3, depths=DEPTHS),
     "SPEC OFF  AUTO  depth 0 of 0,1,2,3"),
    (BannerState(spec_on=True, mode="on", steps=2, steps_on=2, depths=(0, 1, 2)), "SPEC ON  FORCED ON at 2  server"),
    (BannerState(spec_on=True, mode="on", steps=3, steps_on=2, depths=(0, 1, 2)),
     "SPEC ON  FORCED ON at 2 (switching)  depth 3 of 0,1,2"),
    (BannerState(spec_on=False, mode="off", steps=0, steps_on=3, depths=DEPTHS),
     "SPEC OFF  FORCED OFF  depth 0 of 0,1,2,3"),
])
async def test_a_server_of_several_depths_says_which_one_it_runs(state: BannerState, says: str) -> None:
    assert says in await first_line(state)


async def test_a_two_state_server_reads_as_before() -> None:
    line = await first_line(BannerState(spec_on=False, mode="on", steps=0, steps_on=3))
    assert "SPEC OFF  FORCED ON (switching)  draft steps 0 (3 when on)" in line and "depth" not in line


# -- a replay of a depth journal ------------------------------------------------------------
def accept_chart(app: SpecctlApp) -> list[str]:
    chart = app.dashboard.query_one("#chart-accept", TimeChart)
    return [chart.render_line(y).text for y in range(chart.size.height)]


async def test_a_depth_journal_shows_the_depth_in_the_banner_the_chart_and_the_log(replay, settled) -> None:
    app = replay("depth.jsonl", 240)
    async with app.run_test(size=(160, 48)) as pilot:
        await settled(pilot)
        banner = app.dashboard.query_one(SpecBanner).render().plain
        assert "SPEC ON  AUTO  depth 2 of 0,1,2,3" in banner
        row = accept_chart(app)[-1]
        assert row.startswith("depth▕")
        digits = "".join(c for c in row.removeprefix("depth▕") if c != " ")
        # 3 until 60 s, 2 to 100, 1 to 125, 0 while off under load, 2 again from 222: in that order
        assert [d for i, d in enumerate(digits) if i == 0 or digits[i - 1] != d] == list("32102")
        log = [line.text for line in app.dashboard.query_one(EventLog).lines]
        assert any("SWITCH   depth 3 → 2 (depth, batch 20)" in line for line in log)
        assert any("SWITCH   speculation OFF, depth 1 → 0 (load, batch 70)" in line for line in log)


async def test_a_two_state_journal_has_no_depth_row(replay, settled) -> None:
    app = replay("one_gpu.jsonl", 240)
    async with app.run_test(size=(160, 48)) as pilot:
        await settled(pilot)
        assert not any(line.startswith("depth") for line in accept_chart(app))
        assert "depth" not in app.dashboard.query_one(SpecBanner).render().plain


# -- live, on the simulator built for depths 0,1,2,3 ----------------------------------------
def live_app(journal: Path, candidates: list[int] | None) -> SpecctlApp:
    settings: dict[str, Any] = {} if candidates is None else {"candidates": candidates}
    config = SupervisorConfig(sim_load="steady:c=4", sim_gpus=1, interval=0.2, journal_path=journal,
                              socket_path=None, settings=settings)
    return SpecctlApp(LocalLink(Supervisor(config)), remember_theme=False)


def banner(app: SpecctlApp) -> str:
    return app.dashboard.query_one(SpecBanner).render().plain


def titles(app: SpecctlApp) -> list[str]:
    return [c.title for c in app.get_system_commands(app.screen)]


async def ready(pilot: Pilot) -> None:
    await until(pilot, lambda: "SPEC ON" in banner(pilot.app) and "READY" in banner(pilot.app), "a ready server")


async def test_pinning_a_depth_from_the_palette(tmp_path: Path) -> None:
    journal = tmp_path / "run.jsonl"
    app = live_app(journal, [0, 1, 2, 3])
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        assert "AUTO  depth 3 of 0,1,2,3" in banner(app)
        assert [t for t in titles(app) if t.startswith("Pin depth")] == ["Pin depth 1", "Pin depth 2", "Pin depth 3"]
        await palette(pilot, "Pin depth 2")
        await until(pilot, lambda: "SPEC ON  FORCED ON at 2  server READY" in banner(app), "FORCED ON at 2")
        assert app.link.supervisor.latest_sample["spec"]["depth"] == 2
        # the newest column of the depth row (a column shows the newest depth in its few seconds)
        await until(pilot, lambda: accept_chart(app)[-1].rstrip().endswith("2"), "depth 2 at the depth row's end")
        assert accept_chart(app)[-1].startswith("depth▕")
        log = app.dashboard.query_one(EventLog)
        await until(pilot, lambda: [s for s in log.lines if "depth 3 → 2 (forced" in s.text], "the switch logged")
    [record] = [r for r in read_journal(journal) if r.get("kind") == "command" and r.get("cmd") == "mode"]
    assert record["ok"] and record["args"] == {"mode": "on", "steps": 2} and record["uid"] == os.getuid()


@pytest.mark.slow
async def test_a_two_state_server_has_no_depth_to_pin(tmp_path: Path) -> None:
    app = live_app(tmp_path / "run.jsonl", None)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        assert "draft steps 3" in banner(app) and "depth" not in banner(app)
        assert not [t for t in titles(app) if t.startswith("Pin depth")]
        app.action_pin_depth(2)  # as if a stale palette entry ran: refused with the reason, nothing sent
        await until(pilot, lambda: [n for n in app._notifications if "Cannot pin depth 2" in n.message],
                    "the refusal")
    assert not [r for r in read_journal(tmp_path / "run.jsonl") if r.get("kind") == "command"]


async def test_a_server_with_middle_depths_and_no_cost_table_is_told_once_in_the_log(tmp_path: Path) -> None:
    """The simulator as a server launched without SPECCTL_DEPTH_COSTS: auto cannot price depths 1 and 2."""
    journal = tmp_path / "run.jsonl"
    config = SupervisorConfig(sim_load="steady:c=4", sim_gpus=1, interval=0.2, journal_path=journal,
                              socket_path=None, settings={"candidates": [0, 1, 2, 3]}, sim_args=["--no-depth-costs"])
    app = SpecctlApp(LocalLink(Supervisor(config)), remember_theme=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        log = app.dashboard.query_one(EventLog)
        said = await until(pilot, lambda: [s.text for s in log.lines if "depth_costs_missing" in s.text], "the note")
        assert "DEPTH    depth_costs_missing steps=3 depths=[1, 2, 3] why=without --depth-costs FILE auto" in said[0]
    notes = [r for r in read_journal(journal) if r.get("event") == "depth_costs_missing"]
    assert len(notes) == 1 and notes[0]["depths"] == [1, 2, 3]
