"""`specctl replay` on a crafted journal (issue 19 item 7): records of the wrong shape are skipped, not drawn."""

from __future__ import annotations

import json
from pathlib import Path

from specctl.console.tui.app import SpecctlApp
from specctl.console.tui.links import ReplayLink
from specctl.runtime.core import records

from support.tui import settle


async def test_a_gpu_named_by_a_list_or_a_time_of_1e308_does_not_crash_the_replay(tmp_path: Path) -> None:
    gpu = {"index": 0, "name": "SIM H200", "uuid": "GPU-0", "state": "ok", "error": None, "util": 40.0,
           "mem_used": 1, "mem_total": 2, "power_w": 300.0, "power_limit_w": 700.0, "temp_c": 50.0,
           "sm_clock_mhz": 1900.0}
    good = [records.sample({"state": "ready", "running": 3}, None, [gpu], [], sim=True, t=1000.0 + i)
            for i in range(3)]
    crafted = [records.sample({"state": "ready"}, None, [{**gpu, "name": ["SIM", "H200"]}], [], sim=True, t=1001.5),
               records.event("x", t=1e308)]
    path = tmp_path / "crafted.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [good[0], crafted[0], good[1], crafted[1], good[2]]))
    app = SpecctlApp(ReplayLink(path, start_at=1001.6, paused=True), remember_theme=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)  # where the GPU named by a list would be drawn
        assert app.timeline.latest["t"] == 1001.0
        await pilot.press("end")  # where the time of 1e308 would be
        await settle(pilot)
        assert app.timeline.latest["t"] == 1002.0
        assert app.link.end == 1002.0
