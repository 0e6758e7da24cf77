"""A GPU's own screen (Enter on a GPU): its history over the console's window and its processes.

Replays tests/tui/fixtures/tp4_processes.jsonl (four GPUs of a TP-4 server, each with its rank's
scheduler; GPU 0 also runs another user's notebook, GPU 3 a process this host cannot name), paused
at fixed journal times, so the pictures depend on nothing but the fixture.
"""

from __future__ import annotations

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from specctl.console.tui import actions
from specctl.console.tui.screens.dashboard import Dashboard
from specctl.console.tui.screens.gpu import GpuScreen
from specctl.runtime.supervisor.journal import read_journal
from specctl.widgets.gpu_panel import GpuPanel
from specctl.widgets.timechart import TimeChart

from support.tui import FIXTURES, T0, palette, settle, until

FIXTURE = "tp4_processes.jsonl"
BUSY = 180  # seconds into the fixture: loaded, speculation off since 125
SMALL, LARGE = (80, 24), (160, 48)


def recorded(index: int, at: float = BUSY) -> dict:
    """GPU ``index`` as the fixture's sample at ``at`` seconds has it: what the screen must say."""
    sample = next(r for r in read_journal(FIXTURES / FIXTURE) if r.get("kind") == "sample" and r["t"] == T0 + at)
    return sample["gpus"][index]


def table_rows(screen: GpuScreen) -> list[list[str]]:
    table = screen.query_one(DataTable)
    return [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)] if table.display else []


def head(screen: GpuScreen) -> str:
    return str(screen.query_one("#gpu-head", Static).render())


def caption(screen: GpuScreen) -> str:
    return str(screen.query_one("#gpu-procs-caption", Static).render())


async def enter_on_gpu(pilot: Pilot, index: int) -> GpuScreen:
    """Tab to GPU ``index`` as a keyboard user would, then Enter."""
    app = pilot.app
    for _ in range(20):
        focused = app.focused
        if isinstance(focused, GpuPanel) and (focused.gpu or {}).get("index") == index:
            break
        await pilot.press("tab")
    else:
        raise AssertionError(f"tab never reached GPU {index}")
    await pilot.press("enter")
    return await until(pilot, lambda: isinstance(app.screen, GpuScreen) and app.screen, f"GPU {index}'s screen")


async def test_enter_on_a_gpu_shows_its_history_and_processes_and_escape_returns(replay) -> None:
    app = replay(FIXTURE, BUSY)
    async with app.run_test(size=LARGE) as pilot:
        await settle(pilot)
        screen = await enter_on_gpu(pilot, 3)
        await pilot.pause()
        assert screen.index == 3
        assert "GPU 3" in head(screen) and "H200" in head(screen) and "SIM" in head(screen)
        charts = {c.id: c.data for c in screen.query(TimeChart)}
        assert [d.title for d in charts.values()] == ["Utilisation", "Memory", "Power", "Temperature", "Clocks"]
        for data in charts.values():  # the console's whole window, not just since the screen opened
            times = [t for series in data.series for t, _ in series]
            assert times and max(times) - min(times) >= 170, data.title
        gpu = recorded(3)
        assert charts["gpu-util"].legend == f"{gpu['util']:.0f}%"
        assert charts["gpu-mem"].legend == f"{gpu['mem_used'] / 2**30:.1f}/141 GiB"
        assert charts["gpu-power"].legend == f"{gpu['power_w']:.0f}/700 W"
        assert charts["gpu-temp"].legend == f"{gpu['temp_c']:.0f}°C"
        assert charts["gpu-clocks"].legend == f"SM {gpu['sm_clock_mhz']:.0f} · memory 3201 MHz"
        assert len(charts["gpu-clocks"].series) == 2  # SM and memory, one line each
        assert charts["gpu-util"].off_spans, "speculation off is shaded as on the dashboard"
        assert caption(screen).startswith("Processes: 2")
        scheduler = gpu["processes"][0]["mem_used"] / 2**30
        assert table_rows(screen) == [["4303", "operator", f"{scheduler:.1f} GiB", "sglang::scheduler_TP3"],
                                      ["77", "–", "–", "–"]]  # listed by NVML, unnamed here: dashes
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, Dashboard), "the dashboard again")


async def test_another_users_process_shows_with_its_user_and_command(replay) -> None:
    app = replay(FIXTURE, BUSY)
    async with app.run_test(size=LARGE) as pilot:
        await settle(pilot)
        screen = await enter_on_gpu(pilot, 0)
        await pilot.pause()
        rows = table_rows(screen)
        scheduler = recorded(0)["processes"][0]["mem_used"] / 2**30
        assert [r[:3] for r in rows] == [["4300", "operator", f"{scheduler:.1f} GiB"], ["9120", "alice", "2.0 GiB"]]
        assert rows[1][3].startswith("/usr/bin/python3 -m ipykernel_launcher")


async def test_a_click_on_a_gpu_opens_it(replay) -> None:
    app = replay(FIXTURE, BUSY)
    async with app.run_test(size=LARGE) as pilot:
        await settle(pilot)
        panels = list(app.dashboard.query(GpuPanel))
        await pilot.click(panels[2])
        screen = await until(pilot, lambda: isinstance(app.screen, GpuScreen) and app.screen, "a GPU's screen")
        assert screen.index == 2


async def test_every_gpu_is_in_the_palette(replay) -> None:
    app = replay(FIXTURE, BUSY)
    async with app.run_test(size=LARGE) as pilot:
        await settle(pilot)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert [t for t in titles if t.startswith("GPU ")] == [f"GPU {i}: history and processes" for i in range(4)]
        await palette(pilot, "GPU 1: history and processes")
        screen = await until(pilot, lambda: isinstance(app.screen, GpuScreen) and app.screen, "a GPU's screen")
        assert screen.index == 1


async def test_enter_is_offered_only_on_a_gpu_and_the_help_lists_both_keys(replay) -> None:
    app = replay(FIXTURE, BUSY)
    async with app.run_test(size=LARGE) as pilot:
        await settle(pilot)
        words = lambda: {k.description for k in app.screen.query("FooterKey")}  # noqa: E731
        assert not isinstance(app.focused, GpuPanel)
        assert "GPU detail" not in words()  # Enter on a button presses the button: no GPU to open
        panel = app.dashboard.query(GpuPanel).first()
        panel.focus()
        await until(pilot, lambda: "GPU detail" in words(), "GPU detail in the footer")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, GpuScreen) and "Back" in words(), "Back in the footer")
    rows = {row[0]: row for row in actions.help_rows()}
    assert rows["Enter"][2] == rows["Esc"][2] == "on a GPU"


async def test_a_failed_gpu_says_why_and_lists_nothing(replay) -> None:
    """eight_gpu.jsonl's GPU 5 is lost from 200 s on: its screen says so and its legends are dashes."""
    app = replay("eight_gpu.jsonl", 230)
    async with app.run_test(size=LARGE) as pilot:
        await settle(pilot)
        app.action_gpu_detail(5)
        screen = await until(pilot, lambda: isinstance(app.screen, GpuScreen) and app.screen, "GPU 5's screen")
        await pilot.pause()
        assert "FAILED: GPU is lost" in head(screen)
        assert screen.query_one("#gpu-util", TimeChart).data.legend == "–%"
        assert caption(screen).startswith("Processes: not readable")


async def _open_gpu_0(pilot: Pilot) -> None:
    await settle(pilot)
    await enter_on_gpu(pilot, 0)
    await pilot.pause()


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "160x48"])
def test_gpu_screen_snapshot(snap_compare, replay, size) -> None:
    assert snap_compare(replay(FIXTURE, BUSY), terminal_size=size, run_before=_open_gpu_0)
