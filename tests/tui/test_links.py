"""`specctl tui --connect`: the console on a supervisor that runs elsewhere, through its socket."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specctl.console.cli.exit_codes import EXIT_NO_SUPERVISOR, EXIT_USAGE
from specctl.console.cli.main import build_parser
from specctl.console.tui.app import SpecctlApp
from specctl.console.tui.links import SocketLink
from specctl.console.tui.main import run_replay, run_tui
from specctl.runtime.supervisor.config import SupervisorConfig
from specctl.runtime.supervisor.journal import read_journal
from specctl.runtime.supervisor.lifecycle import Supervisor
from specctl.widgets.banner import SpecBanner

from support.tui import FIXTURES, until


def banner(app: SpecctlApp) -> str:
    return app.dashboard.query_one(SpecBanner).render().plain


async def test_connect_views_and_steers_a_running_supervisor(tmp_path: Path) -> None:
    socket, journal = tmp_path / "ctl" / "specctl.sock", tmp_path / "run.jsonl"
    sup = Supervisor(SupervisorConfig(sim_load="steady:c=4", interval=0.2, socket_path=socket,
                                      journal_path=journal))
    await sup.start()
    try:
        app = SpecctlApp(SocketLink(socket), remember_theme=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: "SPEC ON" in banner(app) and "READY" in banner(app), "a ready server")
            assert "SIM" in banner(app) and "socket" in banner(app)
            await pilot.press("x")
            await until(pilot, lambda: "FORCED OFF" in banner(app), "FORCED OFF")
            await sup.stop()
            await until(pilot, lambda: "SUPERVISOR LOST" in banner(app), "the lost connection in the banner")
            assert app.dashboard.query_one("#force-on").disabled, "the buttons greyed while the link is lost"
            await pilot.press("o")
            await until(pilot, lambda: any("not connected to the supervisor" in n.message
                                           for n in app._notifications), "the key saying why it cannot act")
            assert "Force speculation on" not in [c.title for c in app.get_system_commands(app.screen)]
    finally:
        await sup.stop()
    [record] = [r for r in read_journal(journal) if r.get("kind") == "command"]
    assert record["args"] == {"mode": "off"} and record["uid"] == os.getuid()


def test_connect_to_nothing_says_how_to_start_one(tmp_path: Path, capsys) -> None:
    args = build_parser().parse_args(["tui", "--connect", str(tmp_path / "none.sock")])
    assert run_tui(args) == EXIT_NO_SUPERVISOR
    assert "specctl run --headless" in capsys.readouterr().err


def test_replay_of_a_missing_journal_is_a_usage_error(tmp_path: Path, capsys) -> None:
    args = build_parser().parse_args(["replay", str(tmp_path / "none.jsonl")])
    assert run_replay(args) == EXIT_USAGE
    assert "no journal" in capsys.readouterr().err


def test_replay_of_a_file_that_is_no_journal_is_a_usage_error(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "notes.jsonl"
    bad.write_text("not json\n[1, 2]\n{\"kind\": \"sample\"}\n")  # nothing with a time to play
    args = build_parser().parse_args(["replay", str(bad)])
    assert run_replay(args) == EXIT_USAGE
    assert "holds no journal records" in capsys.readouterr().err


@pytest.mark.parametrize("speed", ["0", "0.001", "65", "inf", "nan", "-1"])
def test_replay_speeds_the_keys_cannot_reach_are_a_usage_error(speed: str, capsys) -> None:
    args = build_parser().parse_args(["replay", str(FIXTURES / "one_gpu.jsonl"), "--speed", speed])
    assert run_replay(args) == EXIT_USAGE
    assert "--speed must be between 0.125 and 64" in capsys.readouterr().err


def test_bad_server_arguments_are_a_usage_error(capsys) -> None:
    args = build_parser().parse_args(["tui", "--draft", "d"])
    assert run_tui(args) == EXIT_USAGE
    assert "--draft needs --model" in capsys.readouterr().err
