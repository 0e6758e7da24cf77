"""`specctl replay` on a crafted journal (issue 19 item 7): records of the wrong shape are skipped, not drawn."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from specctl.console.tui.app import SpecctlApp
from specctl.console.tui.links import ReplayLink
from specctl.runtime.core import records

from support.headless import wait_for
from support.tui import settle


@pytest.mark.slow
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


def replay_in_a_terminal(journal: Path) -> str:
    """`specctl replay FILE` in a real terminal (a pty), quit with SIGTERM as `q` would; what the terminal got.

    Textual draws on stderr, so the pty carries both: our line, then the screen."""
    master, slave = os.openpty()
    env = dict(os.environ, TERM="xterm-256color", XDG_CONFIG_HOME=str(journal.parent / "config"))
    proc = subprocess.Popen([sys.executable, "-m", "specctl.console.cli.main", "replay", str(journal)],
                            stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    seen = bytearray()
    reader = threading.Thread(target=drain, args=(master, seen), daemon=True)
    reader.start()
    try:
        wait_for(lambda: proc.poll() is not None or b"Quit" in seen, "the console on screen")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(master)
    return seen.decode(errors="replace")


def drain(fd: int, into: bytearray) -> None:
    """Read the terminal so the console never blocks on a full pty."""
    try:
        while data := os.read(fd, 65536):
            into += data
    except OSError:
        pass


@pytest.mark.slow
def test_replay_says_how_many_malformed_records_it_skipped(tmp_path: Path) -> None:
    good = [records.event("supervisor_start", t=1000.0 + i) for i in range(3)]
    bad = ['{"t": 1e308, "kind": "event", "event": "x"}',  # a time past any clock
           "not json at all",
           '{"t": 1000.5, "kind": "event", "event": 5}',  # an event named by a number
           '{"t": 1000.6}']  # no kind
    path = tmp_path / "crafted.jsonl"
    path.write_text("".join(line + "\n" for line in [json.dumps(good[0]), *bad, *map(json.dumps, good[1:])])
                    + '{"t": 1003.0, "kind": "ev')  # a torn last line: a writer that died, not damage
    told = replay_in_a_terminal(path)
    before_the_screen = told.split("\x1b[?1049h")[0]  # said before the console takes the terminal
    assert f"specctl replay: skipped 4 malformed records of {path}" in before_the_screen, told[:2000]
    assert "Traceback" not in told

    clean = tmp_path / "clean.jsonl"
    clean.write_text("".join(json.dumps(r) + "\n" for r in good))
    assert "skipped" not in replay_in_a_terminal(clean)
