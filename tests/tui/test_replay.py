"""`specctl replay`: a journal played back in the same screens, with pause, seek and speed."""

from __future__ import annotations

import pytest
from textual.widgets import Button

from specctl.console.tui.app import SpecctlApp
from specctl.console.tui.links import LinkError, ReplayLink
from specctl.runtime.core import records
from specctl.widgets.banner import SpecBanner
from specctl.widgets.event_log import EventLog
from specctl.widgets.gpu_panel import GpuPanel

from support.tui import FIXTURES, T0


def banner(app) -> str:
    return app.dashboard.query_one(SpecBanner).render().plain


@pytest.mark.slow
async def test_replay_to_a_time_shows_the_state_of_that_time(replay, settled) -> None:
    app = replay("eight_gpu.jsonl", 180)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert "SPEC OFF" in banner(app) and "last switch load (batch 70)" in banner(app)
        assert app.timeline.latest["t"] == T0 + 180
        for _ in range(8):
            await pilot.press("left")  # back to 100 s: before the switch
        await settled(pilot)
        assert "SPEC ON" in banner(app) and "no switch yet" in banner(app)
        assert app.timeline.latest["t"] == T0 + 100
        await pilot.press("end")
        await settled(pilot)
        assert "UNREACHABLE" in banner(app) and "SPEC ?" in banner(app)
        failed = [p for p in app.dashboard.query(GpuPanel) if "FAILED" in p.render().plain]
        assert [p.gpu["index"] for p in failed] == [5]


async def test_controls_are_greyed_out_in_a_replay(replay, settled) -> None:
    app = replay("one_gpu.jsonl", 100)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        for ident in ("force-on", "force-off", "auto", "thresholds"):
            assert app.dashboard.query_one(f"#{ident}", Button).disabled
        before = len(app.screen_stack)
        await pilot.press("o", "x", "t")
        assert len(app.screen_stack) == before and "AUTO" in banner(app)
        said = [n.message for n in app._notifications]
        assert said.count("a replay has no controls: it only plays a journal back") == 3, "each key says why"
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Force speculation off" not in titles and "Restart the model server" not in titles


@pytest.mark.slow
async def test_pause_and_speed_keys(replay, settled) -> None:
    app = replay("one_gpu.jsonl", 100)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert "⏸ x1" in banner(app)
        await pilot.press("plus", "plus")
        assert app.link.speed == 4 and "x4" in banner(app)
        await pilot.press("minus")
        assert app.link.speed == 2
        await pilot.press("space")
        assert not app.link.paused and "▶" in banner(app)
        await pilot.press("p")
        assert app.link.paused


async def test_a_replay_plays_to_the_end_in_order() -> None:
    link = ReplayLink(FIXTURES / "one_gpu.jsonl", speed=64.0, start_at=T0 + 296)
    await link.open()
    times = []
    async for record in link.records():
        times.append(record["t"])
        if link.paused:  # it pauses itself at the end
            break
        if record["t"] >= link.end:
            break
    assert times == sorted(times) and times[-1] == link.end


async def test_a_replay_refuses_commands_with_a_clear_message() -> None:
    link = ReplayLink(FIXTURES / "one_gpu.jsonl")
    with pytest.raises(LinkError) as caught:
        await link.request("mode", {"mode": "off"})
    assert caught.value.code == "unavailable" and "replay" in caught.value.message


async def test_no_color_picks_the_high_contrast_theme_and_keeps_the_words(replay, settled, monkeypatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = replay("eight_gpu.jsonl", 180)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert app.no_color and app.theme == "specctl-contrast"
        assert "SPEC OFF" in banner(app) and "SIM" in banner(app)


async def test_more_gpus_than_fit_scroll(tmp_path, settled) -> None:
    from specctl.console.tui.app import SpecctlApp
    from specctl.runtime.core.records import sample
    from specctl.runtime.supervisor.journal import Journal

    gpus = [{"index": i, "name": "NVIDIA H200", "state": "ok", "util": 50.0} for i in range(12)]
    journal = Journal(tmp_path / "twelve.jsonl")
    journal.write(sample({"state": "ready"}, None, gpus, [], sim=True, t=T0))
    journal.close()
    app = SpecctlApp(ReplayLink(tmp_path / "twelve.jsonl", paused=True), remember_theme=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        box = app.dashboard.query_one("#gpus")
        assert len(box.query(GpuPanel)) == 12
        assert box.size.height == 8 and box.max_scroll_y == 4


async def test_a_server_whose_off_state_is_slow_is_flagged_in_the_banner_and_the_log(tmp_path, settled) -> None:
    """The journal of a server without fast off: the banner and the event log both say SLOW OFF."""
    off_state = {"fast": False, "why_not": "SPECCTL_FAST_OFF=0: SGLang's own steps-0 state runs while off"}
    spec = {"mode": "auto", "on": False, "steps": 0, "reason": "load", "off_state": off_state,
            "settings": {"steps": 3, "off_at": 56, "on_at": 24}}
    server = {"state": "ready", "running": 200, "queued": 0, "gen_tps": 2000.0, "accept_len": None}
    journal = tmp_path / "slow.jsonl"
    lines = [records.event("server_ready", t=T0 - 1, url="u"),
             records.event("slow_off_state", t=T0 - 0.5, why=off_state["why_not"]),
             *(records.sample(server, spec, [], [], sim=False, t=T0 + i) for i in range(5))]
    journal.write_text("".join(records.dumps(r) + "\n" for r in lines))
    app = SpecctlApp(ReplayLink(journal, start_at=T0 + 4, paused=True), remember_theme=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert "SPEC OFF" in banner(app) and "SLOW OFF" in banner(app)
        log = app.dashboard.query_one(EventLog)
        assert any("SLOW OFF" in line.text and "steps-0" in line.text for line in log.lines)
