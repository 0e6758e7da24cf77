"""`specctl tui --attach` to a MoE whose launch line carries a dense model's thresholds: the event log says so.

The same server as tests/test_moe_dense_row.py (the simulator of Qwen3-30B-A3B
on Triton, started with the settings `specctl sglang-args` prints without
``--experts``), watched through the console's own in-process supervisor.
"""

from __future__ import annotations

from pathlib import Path

from specctl.console.tui.app import SpecctlApp
from specctl.console.tui.links import LocalLink
from specctl.runtime.supervisor.config import SupervisorConfig
from specctl.runtime.supervisor.journal import read_journal
from specctl.runtime.supervisor.lifecycle import Supervisor
from specctl.widgets.event_log import EventLog

from support.sglang_args import as_sim_flags, printed_settings
from support.sim_process import sim_process
from support.tui import until

EVENT = "dense_thresholds_on_moe"


def log_text(app: SpecctlApp) -> str:
    """The event log as one line of words: RichLog wraps a long line at spaces, at the log's width."""
    return " ".join(" ".join(line.text for line in app.dashboard.query_one(EventLog).lines).split())


async def test_the_console_log_shows_the_dense_row_note_with_its_fix(tmp_path: Path) -> None:
    with sim_process(tmp_path, "--preset", "h200-qwen3moe", "--load", "steady:c=4",
                     *as_sim_flags(printed_settings(tmp_path, "--backend", "triton", "--gpu", "NVIDIA H200"))) as url:
        sup = Supervisor(SupervisorConfig(backend="attach", url=url, interval=0.2, socket_path=None,
                                          journal_path=tmp_path / "run.jsonl"))
        app = SpecctlApp(LocalLink(sup), remember_theme=False)
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: EVENT in log_text(app), "the note in the event log")
            text = log_text(app)
            assert f"SETTINGS {EVENT} backend=triton experts=128" in text, text
            assert "`specctl sglang-args --experts 128` prints" in text, text
            # the simulator's GPU is an H200, so the live fix is the Triton row measured on a MoE
            assert "`specctl set off_at=1048576 on_at=1048575 min_accept=0.62 accept_slope=0.0105`" in text, text
        said = [r for r in read_journal(tmp_path / "run.jsonl") if r.get("event") == EVENT]
        assert len(said) == 1
