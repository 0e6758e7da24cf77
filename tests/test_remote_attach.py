"""`--attach` to a server on another host: this machine's GPUs are not its GPUs, and the journal says so."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import psutil

from specctl.runtime.probes.hosts import is_local_url
from specctl.runtime.supervisor.config import SupervisorConfig
from specctl.runtime.supervisor.journal import read_journal
from specctl.runtime.supervisor.lifecycle import Supervisor

REMOTE = "http://192.0.2.1:30000"  # TEST-NET-1 (RFC 5737): never an address of this machine


def test_local_and_remote_urls() -> None:
    assert is_local_url("http://127.0.0.1:30000") and is_local_url("http://localhost:1")
    assert is_local_url("http://[::1]:30000")
    mine = [a.address for addrs in psutil.net_if_addrs().values() for a in addrs if a.family == socket.AF_INET]
    assert all(is_local_url(f"http://{a}:30000") for a in mine)
    assert not is_local_url(REMOTE)
    assert not is_local_url("http://no-such-host.invalid:30000")


async def test_attach_to_another_host_says_gpu_panels_need_a_supervisor_there(tmp_path: Path) -> None:
    journal = tmp_path / "run.jsonl"
    sup = Supervisor(SupervisorConfig(backend="attach", url=REMOTE, interval=0.2, socket_path=None,
                                      journal_path=journal))
    await sup.start()
    try:
        for _ in range(200):
            said = [r for r in read_journal(journal) if r.get("event") == "gpu_unavailable"]
            if said:
                break
            await asyncio.sleep(0.05)
    finally:
        await sup.stop()
    [event] = said
    assert "GPU panels need a supervisor on that host" in event["error"] and REMOTE in event["error"]
    assert "ssh -L" in event["error"]
