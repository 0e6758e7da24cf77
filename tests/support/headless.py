"""Start a real `specctl run --headless` on the simulator and read what a user would read."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from specctl.runtime.supervisor.journal import read_journal

DEADLINE_S = 90.0  # only a guard against hangs; nothing asserts on speed


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = DEADLINE_S) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"gave up waiting for {what}")


class Headless:
    """One headless supervisor process with its own socket and journal in a temp folder."""

    def __init__(self, tmp: Path, *args: str, preexec_fn: Callable[[], None] | None = None) -> None:
        self.socket = tmp / "ctl" / "specctl.sock"
        self.state = tmp / "state"
        self.journal = tmp / "run.jsonl"
        env = dict(os.environ, SPECCTL_STATE_DIR=str(tmp / "state"))
        self.stderr_path = tmp / "stderr.log"  # a file, not a pipe nobody drains while the test runs
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "specctl.console.cli.main", "run", "--headless", "--socket", str(self.socket),
                 "--log", str(self.journal), "--interval", "0.2", *args],
                stdout=subprocess.DEVNULL, stderr=err, env=env, start_new_session=True, preexec_fn=preexec_fn)

    def told(self) -> str:
        """What the supervisor printed on stderr so far."""
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def records(self, kind: str | None = None, event: str | None = None) -> list[dict[str, Any]]:
        if not self.journal.exists():
            return []
        out = list(read_journal(self.journal))
        if kind:
            out = [r for r in out if r.get("kind") == kind]
        if event:
            out = [r for r in out if r.get("event") == event]
        return out

    def wait_event(self, event: str, **match: Any) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            for r in self.records("event", event):
                if all(r.get(k) == v for k, v in match.items()):
                    return r
            return None
        return wait_for(found, f"event {event} {match}")

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "specctl.console.cli.main", *args, "--socket", str(self.socket)],
                              capture_output=True, text=True, timeout=60)

    def status(self) -> dict[str, Any]:
        out = self.cli("status", "--json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def ready_sample(self) -> dict[str, Any]:
        def ready() -> dict[str, Any] | None:
            samples = self.records("sample")
            return samples[-1] if samples and samples[-1]["server"]["state"] == "ready" else None
        return wait_for(ready, "a sample with the server ready")

    def admin(self) -> dict[str, str]:
        """The header that opens the simulator's control endpoints: the key this supervisor made for it."""
        key = (self.state / "keys" / f"server-{self.proc.pid}.key").read_text().strip()
        return {"Authorization": f"Bearer {key}"}

    def set_sim_load(self, spec: str) -> None:
        url = self.ready_sample()["server"]["url"]
        r = httpx.post(f"{url}/sim/load", json={"spec": spec}, headers=self.admin(), timeout=10)
        assert r.status_code == 200, r.text

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired as exc:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                raise AssertionError("supervisor ignored SIGTERM") from exc
        return self.proc.returncode


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8") as fh:
        yield from fh
