"""`--attach` to a server launched without the specctl plugin, or without speculation: a read-only view that says
why and how to fix it.

The simulator runs with --no-plugin (as SGLang does without SPECCTL_PLUGIN=1 and
the adaptive flags: no specctl block in /server_info, no specctl keys taken);
a real supervisor attaches to it, the console shows it, and every control
refuses with the banner's reason, in the console and on the CLI.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specctl.console.tui.app import NO_SPECULATION_BANNER, VIEW_ONLY_BANNER, SpecctlApp
from specctl.console.tui.links import LocalLink
from specctl.runtime.core.errors import CommandError
from specctl.runtime.supervisor.config import SupervisorConfig
from specctl.runtime.supervisor.journal import read_journal
from specctl.runtime.supervisor.lifecycle import Supervisor
from specctl.widgets.banner import SpecBanner
from specctl.widgets.event_log import EventLog
from specctl.widgets.gpu_panel import GpuPanel
from specctl.widgets.timechart import TimeChart

from support.sim_process import sim_process
from support.tui import until


@pytest.fixture
def plain_server(tmp_path: Path) -> Iterator[str]:
    """A simulator acting as SGLang without the plugin, under load."""
    port_file = tmp_path / "port"
    proc = subprocess.Popen([sys.executable, "-m", "specctl.runtime.sim", "--no-plugin", "--port", "0",
                             "--port-file", str(port_file), "--load", "steady:c=6", "--gpus", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            if port_file.exists():
                break
            assert proc.poll() is None, "the simulator exited"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{int(port_file.read_text())}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def banner(app: SpecctlApp) -> str:
    return app.dashboard.query_one(SpecBanner).render().plain


async def test_attach_without_the_plugin_is_a_read_only_view_that_says_why(plain_server: str,
                                                                           tmp_path: Path) -> None:
    sup = Supervisor(SupervisorConfig(backend="attach", url=plain_server, interval=0.2, socket_path=None,
                                      journal_path=tmp_path / "run.jsonl"))
    app = SpecctlApp(LocalLink(sup), remember_theme=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: VIEW_ONLY_BANNER in banner(app), "the view-only banner")
        assert "READY" in banner(app)
        assert "SGLang 0.5.17" in banner(app), "the release it answers like, from the sample"
        assert " NO PLUGIN  view only" in banner(app) and "SPEC ?" not in banner(app), banner(app)
        assert "mode ?" not in banner(app) and "no switch yet" not in banner(app)
        note = app.dashboard.query_one("#stale-note")
        # a TP-1 server: the bare command, as its refusal names it (no --tp to add)
        assert note.display and str(note.render()) == (
            "fix: relaunch it with what `specctl sglang-args` prints (docs/deployment.md)"), "how to fix it"
        # what it can read, it shows: tok/s, accept length, requests, the GPUs
        await until(pilot, lambda: app.dashboard.query_one("#chart-tps", TimeChart).data.legend != "–", "tok/s")
        await until(pilot, lambda: app.dashboard.query_one("#chart-accept", TimeChart).data.legend != "–",
                    "the accept length")
        assert len(app.dashboard.query(GpuPanel)) == 2
        # every control refuses, saying why
        assert app.dashboard.query_one("#force-off").disabled and app.dashboard.query_one("#thresholds").disabled
        await pilot.press("x")
        await until(pilot, lambda: any(VIEW_ONLY_BANNER in n.message for n in app._notifications),
                    "the key saying why")
        assert "Force speculation off" not in [c.title for c in app.get_system_commands(app.screen)]
        # the supervisor refuses too (the CLI and the socket go through it), with the same reason
        with pytest.raises(CommandError) as refused:
            await sup.execute("mode", {"mode": "off"}, None)
        assert refused.value.message.startswith(VIEW_ONLY_BANNER) and "sglang-args" in refused.value.message
        assert "--tp" not in refused.value.message


async def test_attach_to_a_server_without_speculation_says_so_once_and_how_to_add_it(tmp_path: Path) -> None:
    """A server launched without --speculative-algorithm: the banner says so (not "without the plugin"), the
    note names the draft model to add, the tok/s and GPUs show, the accept length stays empty (no made-up 0),
    and a control refuses in the same words."""
    with sim_process(tmp_path, "--no-speculation", "--load", "steady:c=6", "--gpus", "2") as url:
        sup = Supervisor(SupervisorConfig(backend="attach", url=url, interval=0.2, socket_path=None,
                                          journal_path=tmp_path / "run.jsonl"))
        app = SpecctlApp(LocalLink(sup), remember_theme=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: NO_SPECULATION_BANNER in banner(app), "the no-speculation banner")
            assert VIEW_ONLY_BANNER not in banner(app) and "READY" in banner(app)
            assert " NO SPEC  view only" in banner(app) and "SPEC ?" not in banner(app), banner(app)
            assert "no switch yet" not in banner(app) and "mode ?" not in banner(app)
            note = app.dashboard.query_one("#stale-note")
            assert note.display and str(note.render()) == (
                "fix: relaunch with a draft: `specctl sglang-args --draft DRAFT_MODEL` prints how")
            await until(pilot, lambda: app.dashboard.query_one("#chart-tps", TimeChart).data.legend != "–", "tok/s")
            assert app.dashboard.query_one("#chart-accept", TimeChart).data.legend == "–", "no accept length"
            assert len(app.dashboard.query(GpuPanel)) == 2
            await pilot.press("x")
            await until(pilot, lambda: any(NO_SPECULATION_BANNER in n.message for n in app._notifications),
                        "the key saying why")
            await until(pilot, lambda: "VIEW" in str(app.dashboard.query_one(EventLog).lines), "the journal's line")
        said = [r for r in read_journal(tmp_path / "run.jsonl") if r.get("event") == "view_only"]
        assert len(said) == 1 and said[0]["reason"] == "no_speculation"


async def test_attach_to_a_tree_server_says_tree_and_the_chain_fix(tmp_path: Path) -> None:
    """The report's topk-4 deployment: the badge and status say tree, the note says chain, not 'the plugin'."""
    with sim_process(tmp_path, "--no-plugin", "--preset", "rtx-8gpu-report", "--load", "steady:c=4") as url:
        sup = Supervisor(SupervisorConfig(backend="attach", url=url, interval=0.2, socket_path=None,
                                          journal_path=tmp_path / "run.jsonl"))
        app = SpecctlApp(LocalLink(sup), remember_theme=False)
        async with app.run_test(size=(140, 40)) as pilot:
            await until(pilot, lambda: " TREE  view only" in banner(app), "the tree badge")
            assert "drafts a tree" in banner(app) and VIEW_ONLY_BANNER not in banner(app), banner(app)
            note = app.dashboard.query_one("#stale-note")
            # the report's TP-8 server: a bare `specctl sglang-args` prints --tp-size 1, so the note names
            # --tp 8 and the chain's --steps 3, in 80 columns, the same command a key press's refusal names
            command = "`specctl sglang-args --tp 8 --steps 3`"
            said = str(note.render())
            assert note.display and said == f"fix: relaunch as a chain: {command} prints how", said
            assert len(said) <= 80
            await pilot.press("x")
            await until(pilot, lambda: any("drafts a tree" in n.message for n in app._notifications),
                        "the key saying why")
            assert all(command in n.message for n in app._notifications if "drafts a tree" in n.message)
