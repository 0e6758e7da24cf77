"""The supervisor's small parts: the server-health state machine and the say-it-once detectors.

The end-to-end tests (test_e2e_headless.py) prove them inside a running
supervisor; these pin each rule on its own, with the clock passed in.
"""

from __future__ import annotations

from typing import Any

from specctl.runtime.supervisor.edges import GpuFaults, Once, SwitchCursor
from specctl.runtime.supervisor.health import ServerHealth


def said(records: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(event name, its own fields) of each event record."""
    return [(r["event"], {k: v for k, v in r.items() if k not in ("v", "t", "kind", "event")}) for r in records]


def test_restarts_back_off_doubling_up_to_the_cap() -> None:
    health = ServerHealth((1.0, 5.0))
    delays = [health.exited(1, now=100.0)["delay_s"] for _ in range(5)]
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert (health.state, health.restarts) == ("restarting", 5)


def test_a_restart_is_due_only_after_its_delay() -> None:
    health = ServerHealth((2.0, 60.0))
    health.exited(-9, now=10.0)
    assert not health.restart_due(11.9)
    assert health.restart_due(12.0)


def test_a_ready_server_starts_the_backoff_afresh() -> None:
    health = ServerHealth((1.0, 60.0))
    health.exited(1, now=0.0)
    health.exited(1, now=0.0)
    health.starting()
    assert said([health.answered(True, attached=False, url="http://x")]) == [("server_ready", {"url": "http://x"})]
    assert health.exited(1, now=0.0)["attempt"] == 1


def test_a_failed_start_is_retried_or_stops_until_asked() -> None:
    retried = ServerHealth((1.0, 60.0))
    assert said(retried.start_failed("port taken", True, now=0.0)) == [
        ("server_start_failed", {"error": "port taken", "retry": True}),
        ("server_restart", {"attempt": 1, "delay_s": 1.0, "returncode": None})]
    assert retried.state == "restarting"
    stopped = ServerHealth((1.0, 60.0))
    assert said(stopped.start_failed("no sglang", False, now=0.0)) == [
        ("server_start_failed", {"error": "no sglang", "retry": False})]
    assert (stopped.state, stopped.error, stopped.restart_due(1e9)) == ("stopped", "no sglang", False)


def test_only_a_ready_or_attached_server_becomes_unreachable() -> None:
    launched = ServerHealth((1.0, 60.0))
    assert launched.answered(False, attached=False, url=None) is None  # still loading its weights
    assert launched.state == "starting"
    attached = ServerHealth((1.0, 60.0))
    attached.unanswered("connection refused")
    assert said([attached.answered(False, attached=True, url=None)]) == [
        ("server_unreachable", {"error": "connection refused"})]
    assert attached.answered(False, attached=True, url=None) is None  # said once
    assert attached.answered(True, attached=True, url="u") is not None and attached.error is None


def test_once_says_it_once_per_reset() -> None:
    once = Once()
    assert [once.first(), once.first()] == [True, False]
    once.reset()
    assert once.first()


def test_a_gpu_fault_is_said_when_it_begins_and_when_it_ends() -> None:
    faults = GpuFaults()
    failed = [{"index": 0, "state": "ok"}, {"index": 1, "state": "failed", "error": "lost"}]
    assert said(faults.changes(failed)) == [("gpu_failed", {"index": 1, "error": "lost"})]
    assert faults.changes(failed) == []
    assert faults.changes([{"index": 1, "state": "unread"}]) == []  # unknown is not recovered
    assert said(faults.changes([{"index": 1, "state": "ok"}])) == [("gpu_recovered", {"index": 1})]
    faults.changes(failed)
    faults.forget()
    assert said(faults.changes(failed)) == [("gpu_failed", {"index": 1, "error": "lost"})]


def switch(seq: int, on: bool) -> dict[str, Any]:
    return {"seq": seq, "on": on, "reason": "load" if not on else "quiet", "batch_size": 40, "step": seq * 10,
            "from": 0 if on else 3, "to": 3 if on else 0}


def test_switches_are_said_once_and_a_late_attach_tells_no_old_ones() -> None:
    launched = SwitchCursor()
    launched.start(owns_process=True)
    assert [e["on"] for e in launched.new([switch(1, False), switch(2, True)])] == [False, True]
    assert launched.new([switch(1, False), switch(2, True)]) == []
    attached = SwitchCursor()
    attached.start(owns_process=False)
    assert attached.new([switch(7, False)]) == []  # made before we looked
    assert said(attached.new([switch(7, False), switch(8, True)])) == [
        ("spec_switch", {"on": True, "reason": "quiet", "batch_size": 40, "step": 80, "from": 0, "to": 3})]
    assert attached.new([switch(1, False)]) == []  # the server restarted: its count began again
    assert len(attached.new([switch(1, False), switch(2, True)])) == 1
