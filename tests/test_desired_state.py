"""Desired state: what an operator (or someone elsewhere) set survives server and supervisor restarts.

The end-to-end tests run a real `specctl run` on the simulator, kill it with SIGKILL and start it
again on the same socket and state folder, and read what an operator reads: `specctl status`.
"""

from __future__ import annotations

import asyncio
import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from specctl.runtime.core.settings import PolicySettings
from specctl.runtime.supervisor.config import SupervisorConfig
from specctl.runtime.supervisor.desired import Desired, DesiredFileError, DesiredState, load, save
from specctl.runtime.supervisor.lifecycle import Supervisor

from support.headless import Headless, wait_for

DEPTHS = ("--speculative-candidate-steps", "0,1,2,3")


# -- the record ----------------------------------------------------------------------------------------

def test_layers_config_then_calibration_then_people_and_a_pin_forces_its_depth_on() -> None:
    state = DesiredState(config={"off_at": 40, "on_at": 20, "dwell": 4})
    state = state.learned_values({"off_at": 56, "on_at": 24, "min_accept": 0.3}, "bench sweep 2026-12")
    assert state.wanted() == {"off_at": 56, "on_at": 24, "dwell": 4, "min_accept": 0.3}
    state = state.choose({"off_at": 48, "on_at": 16}, "operator", by=1000, t=5.0)
    state = state.learned_values({"off_at": 64, "on_at": 32}, "a later sweep")  # below what people chose
    assert state.wanted()["off_at"] == 48 and state.who("off_at") == {"value": 48, "source": "operator",
                                                                      "t": 5.0, "by": 1000}
    assert state.who("min_accept")["source"] == "calibration" and state.who("dwell")["source"] == "config"
    pinned = state.pinned(2, restore=3, by=1000)
    assert pinned.wanted()["mode"] == "on" and pinned.wanted()["steps"] == 2
    assert "steps" not in pinned.choose({"mode": "auto"}, "operator").wanted(), "auto hands the depth back"
    assert pinned.reset().wanted() == {"off_at": 64, "on_at": 32, "dwell": 4, "min_accept": 0.3}


def test_a_config_value_changed_since_the_record_replaces_the_older_choice_with_its_pair() -> None:
    kept = DesiredState(config={"off_at": 40, "on_at": 20}).choose({"off_at": 48, "on_at": 16}, "operator")
    same, dropped = kept.with_config({"off_at": 40, "on_at": 20})
    assert same.wanted()["off_at"] == 48 and dropped == []
    edited, dropped = kept.with_config({"on_at": 10, "off_at": 40})  # the file's on_at edited: the pair goes
    assert edited.wanted() == {"off_at": 40, "on_at": 10} and dropped == ["off_at", "on_at"]


def test_the_file_is_0600_written_whole_and_refused_when_others_may_write_it(tmp_path: Path) -> None:
    path = tmp_path / "desired" / "s.json"
    state = DesiredState(config={"dwell": 4}).choose({"mode": "off"}, "operator", by=7).pinned(2, 3)
    save(path, state)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and not list(path.parent.glob(".*.tmp"))
    assert load(path) == state
    path.chmod(0o666)
    with pytest.raises(DesiredFileError, match="may be written by others"):
        load(path)


def test_learned_is_the_calibration_loops_entry_point_and_journals_it(tmp_path: Path) -> None:
    said: list[dict[str, Any]] = []
    store = Desired(tmp_path / "d.json", {"off_at": 40, "on_at": 20}, said.append)
    store.choose({"off_at": 48, "on_at": 16}, by=0)
    out = store.learned({"off_at": 64, "on_at": 30, "min_accept": 0.5}, "calibration run 3")
    assert out == {"off_at": 48, "on_at": 16, "min_accept": 0.5}, "operator-set keys win"
    assert said[-1]["event"] == "settings_learned" and said[-1]["why"] == "calibration run 3"
    again = Desired(tmp_path / "d.json", {"off_at": 40, "on_at": 20}, said.append)
    again.restore()
    assert again.wanted() == {"off_at": 48, "on_at": 16, "min_accept": 0.5}
    assert said[-1]["event"] == "desired_restored" and said[-1]["who"]["min_accept"]["source"] == "calibration"


# -- a real supervisor, killed and started again -------------------------------------------------------

def spec(h: Headless) -> dict[str, Any]:
    return h.status()["spec"]


def restart_after_kill_9(tmp_path: Path, h: Headless, *args: str) -> Headless:
    h.proc.kill()  # SIGKILL: no chance to save anything on the way out
    h.proc.wait()
    starts = len(h.records("event", "supervisor_start"))
    again = Headless(tmp_path, *args)  # the same socket, state folder and journal

    def ready_after_start() -> bool:
        recs = again.records()
        begun = [i for i, r in enumerate(recs) if r.get("event") == "supervisor_start"]
        return len(begun) > starts and any(r["kind"] == "sample" and r["server"]["state"] == "ready"
                                           for r in recs[begun[-1]:])
    wait_for(ready_after_start, "the new supervisor's server ready")
    return again


@pytest.mark.slow
def test_thresholds_and_a_pinned_depth_survive_a_supervisor_killed_with_sigkill(tmp_path: Path) -> None:
    args = ("--sim-load", "steady:c=4", *DEPTHS)
    h = Headless(tmp_path, *args)
    try:
        h.ready_sample()
        assert h.cli("set", "off_at=48", "on_at=16").returncode == 0
        assert h.cli("force-on", "--steps", "2").returncode == 0
        h = restart_after_kill_9(tmp_path, h, *args)
        now = wait_for(lambda: (s := spec(h))["settings"]["steps"] == 2 and s, "the pin pushed to the new server")
        assert now["mode"] == "on" and now["settings"]["off_at"] == 48 and now["settings"]["on_at"] == 16
        restored = h.wait_event("desired_restored")
        assert restored["who"]["off_at"]["source"] == "operator" and restored["who"]["steps"]["pinned"] == 2
        told = h.cli("status").stdout
        assert "depth 2 pinned" in told and "off_at 48 (operator uid" in told
        # auto hands the depth back; a later plain force-on forces the full depth, not the stale pin
        assert h.cli("auto").returncode == 0
        assert spec(h)["settings"]["steps"] == 3 and spec(h)["mode"] == "auto"
        out = h.cli("force-on")
        assert out.returncode == 0 and "forced ON at 3 draft steps" in out.stdout, out.stdout
        assert "pinned" not in h.cli("status").stdout
        # and set --reset goes back to the config (none here: the server's own at its start)
        out = h.cli("set", "--reset")
        assert out.returncode == 0 and "reset mode, off_at, on_at" in out.stdout, out.stdout
        settings = spec(h)["settings"]
        assert (settings["mode"], settings["off_at"], settings["on_at"]) == ("auto", 32, 24)
        assert h.records("event", "settings_reset")[-1]["source"] == "operator"
        assert "desired " not in h.cli("status").stdout
    finally:
        h.stop()


@pytest.mark.slow
def test_a_change_posted_elsewhere_is_adopted_and_survives_server_and_supervisor_restarts(tmp_path: Path) -> None:
    args = ("--sim-load", "steady:c=4")
    h = Headless(tmp_path, *args)
    try:
        url = h.ready_sample()["server"]["url"]
        wire = PolicySettings().with_changes({"off_at": 70, "on_at": 50}).to_wire(["off_at", "on_at"])
        r = httpx.post(f"{url}/set_internal_state", json={"server_args": wire}, headers=h.admin(), timeout=10)
        assert r.status_code == 200
        adopted = h.wait_event("settings_adopted")
        assert adopted["source"] == "elsewhere" and adopted["fields"] == {"off_at": 70, "on_at": 50}
        assert "off_at 70 (adopted from elsewhere" in h.cli("status").stdout
        # the server restarts (it would start with its launch line's 32 / 24): the adopted values come back
        assert h.cli("server", "restart").returncode == 0
        wait_for(lambda: spec(h)["settings"]["off_at"] == 70, "the adopted settings pushed to the new server")
        assert spec(h)["settings"]["on_at"] == 50
        assert len(h.records("event", "settings_adopted")) == 1, "our own push is not taken for a change"
        # the supervisor dies and starts again: still 70 / 50
        h = restart_after_kill_9(tmp_path, h, *args)
        wait_for(lambda: spec(h)["settings"]["off_at"] == 70, "the adopted settings after a supervisor restart")
        record = json.loads(next((tmp_path / "state" / "desired").glob("*.json")).read_text())
        assert record["chosen"]["off_at"]["source"] == "elsewhere"
    finally:
        h.stop()


@pytest.mark.slow
def test_a_change_made_while_no_supervisor_watched_an_attached_server_is_adopted_not_undone(tmp_path: Path) -> None:
    """The fleet case: `specctl fleet set` (here a POST with the key) reaches a server while its host's
    supervisor is down; the supervisor that starts again adopts it rather than pushing its older record."""
    key_file = tmp_path / "server.key"
    key_file.write_text("s3cret-for-the-test\n")
    key_file.chmod(0o600)
    port_file = tmp_path / "port"
    sim = subprocess.Popen([sys.executable, "-m", "specctl.runtime.sim", "--port-file", str(port_file),
                            "--load", "steady:c=2", "--gpus", "1", "--admin-key-file", str(key_file)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    h: Headless | None = None
    try:
        wait_for(port_file.exists, "the simulator's port file")
        url = f"http://127.0.0.1:{port_file.read_text().strip()}"
        args = ("--attach", url, "--admin-key-file", str(key_file))
        h = Headless(tmp_path, *args)
        h.ready_sample()
        assert h.cli("set", "off_at=48", "on_at=16").returncode == 0
        h.proc.kill()
        h.proc.wait()
        wire = PolicySettings().with_changes({"off_at": 90, "on_at": 60}).to_wire(["off_at", "on_at"])
        r = httpx.post(f"{url}/set_internal_state", json={"server_args": wire},
                       headers={"Authorization": "Bearer s3cret-for-the-test"}, timeout=10)
        assert r.status_code == 200
        h = restart_after_kill_9(tmp_path, h, *args)
        adopted = h.wait_event("settings_adopted", while_away=True)
        assert adopted["fields"] == {"off_at": 90, "on_at": 60}
        assert (spec(h)["settings"]["off_at"], spec(h)["settings"]["on_at"]) == (90, 60), "not undone"
    finally:
        if h is not None:
            h.stop()
        sim.terminate()
        sim.wait(timeout=30)


async def test_a_calibration_reaches_the_server_below_the_operators_own_values(tmp_path: Path) -> None:
    """The entry point a calibration loop calls: learned values are sent, an operator's keys are not."""
    sup = Supervisor(SupervisorConfig(sim_load="steady:c=4", sim_gpus=1, interval=0.2, socket_path=None,
                                      desired_path=tmp_path / "desired.json"))
    await sup.start()
    try:
        for _ in range(300):
            if sup.latest_sample and sup.latest_sample["server"]["state"] == "ready" and sup.latest_sample["spec"]:
                break
            await asyncio.sleep(0.1)
        await sup.execute("set", {"settings": {"off_at": 48, "on_at": 16}}, uid=1000)
        sent = await sup.commands.learned({"off_at": 64, "on_at": 30, "min_accept": 0.5}, "sweep 3")
        assert sent == {"min_accept": 0.5}, "the operator's pair wins"
        await sup.poll_now()
        settings = sup.latest_sample["spec"]["settings"]
        assert (settings["off_at"], settings["on_at"], settings["min_accept"]) == (48, 16, 0.5)
        kept = json.loads((tmp_path / "desired.json").read_text())
        assert kept["learned"]["min_accept"]["note"] == "sweep 3"
        assert [e for e in sup.recent if e.get("event") == "settings_learned"][-1]["why"] == "sweep 3"
    finally:
        await sup.stop()
