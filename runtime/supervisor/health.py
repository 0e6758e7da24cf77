"""The model server's health as the supervisor sees it: one small state machine.

States: ``starting`` (launched or attached, not answered yet), ``ready``,
``busy`` (it takes connections but does not answer in time: a long prefill,
a first-use kernel compile; working, not gone), ``unreachable`` (it refuses
or resets connections, or an attached one never did),
``restarting`` (it exited or failed to start; a restart is due after a
backoff) and ``stopped`` (asked to, or nothing to run). Every transition that
an operator should hear about returns the event that says so; the supervisor
journals it. Pure: the caller passes the clock, so the rules are testable
without a server or an event loop.
"""

from __future__ import annotations

from specctl.runtime.core import records


class ServerHealth:
    """State, last error, restart count and the backoff of the next restart."""

    def __init__(self, backoff: tuple[float, float]) -> None:
        self.backoff = backoff  # (first delay, cap) in seconds; doubled per failed attempt
        self.state = "starting"
        self.error: str | None = None
        self.restarts = 0
        self._attempt = 0
        self._restart_at: float | None = None

    @property
    def down(self) -> bool:
        """No server to ask: stopped, or waiting to restart."""
        return self.state in ("stopped", "restarting")

    def starting(self) -> None:
        """A start (or restart) of the server begins."""
        self.state = "starting"
        self.error = None

    def start_asked(self) -> None:
        """An operator's start: a fresh series of attempts, nothing scheduled."""
        self._attempt = 0
        self._restart_at = None

    def start_failed(self, error: str, retry: bool, now: float) -> list[records.Event]:
        """The server could not be started: retried after the backoff, or stopped until asked again."""
        self.error = error
        said: list[records.Event] = [records.event(records.SERVER_START_FAILED, error=error, retry=retry)]
        if retry:
            said.append(self.exited(None, now))
        else:  # stopped until an operator fixes it and says `specctl server start`
            self.state, self._restart_at = "stopped", None
        return said

    def exited(self, returncode: int | None, now: float) -> records.Event:
        """The server is gone: a restart is due after the backoff."""
        self._attempt += 1
        first, cap = self.backoff
        delay = min(cap, first * 2 ** (self._attempt - 1))
        self.state = "restarting"
        self._restart_at = now + delay
        self.restarts += 1
        return records.event(records.SERVER_RESTART, attempt=self._attempt, delay_s=delay, returncode=returncode)

    def restart_due(self, now: float) -> bool:
        return self.state == "restarting" and self._restart_at is not None and now >= self._restart_at

    def stopped(self) -> None:
        """Stopped on request: stays so until a start."""
        self.state = "stopped"
        self._restart_at = None

    def unanswered(self, error: str) -> None:
        """A request to the server failed; the error is shown until it answers again."""
        self.error = error

    def answered(self, healthy: bool, *, attached: bool, url: str | None, busy: bool = False) -> records.Event | None:
        """A health check's outcome: the event when it changes the state, else None.

        ``busy``: not healthy because it took the connection and did not answer in time
        (probes.sglang_client.ServerBusy): ``busy``, not ``unreachable``.

        A server we launched may take minutes to start, so only a ready one (or one
        we attached to, which should answer at once) becomes unreachable.
        """
        if healthy and self.state != "ready":
            self.state = "ready"
            self.error = None
            self._attempt = 0
            return records.event(records.SERVER_READY, url=url)
        if healthy:
            return None
        if busy and (self.state in ("ready", "unreachable") or (self.state == "starting" and attached)):
            self.state = "busy"
            return records.event(records.SERVER_BUSY, error=self.error)
        if not busy and (self.state in ("ready", "busy") or (self.state == "starting" and attached)):
            self.state = "unreachable"
            return records.event(records.SERVER_UNREACHABLE, error=self.error)
        return None
