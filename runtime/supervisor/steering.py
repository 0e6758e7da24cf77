"""The one way settings reach the model server, for commands, calibration and restarts.

Every change is validated whole against the server's settings as last read, sent whole or
not at all, and read back: an operator's command (commands.py, a subclass), calibration's
learned values and probes (the supervisor hands :meth:`Steering.push_learned` and
:meth:`Steering.push_probe` to calibrate.py's loop), and the desired state given back to a
(re)started server.
What is sent for people is journaled as a ``settings`` event with who and from where.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from specctl.runtime.core import records, view_only
from specctl.runtime.core.errors import INVALID_VALUE, UNAVAILABLE, CommandError
from specctl.runtime.core.in_between import switching
from specctl.runtime.core.settings import PolicySettings, SettingsError, check_fields
from specctl.runtime.core.thresholds import groups_touched, set_together
from specctl.runtime.probes.server_info import spec_state
from specctl.runtime.probes.sglang_client import ServerUnreachable
from specctl.runtime.supervisor.desired import Desired
from specctl.runtime.supervisor.port import SupervisorPort
from specctl.runtime.supervisor.refusals import refused, shallow_hint

SETTLE_S = 2.0  # how long a command waits for a switch to show before answering "at the next step"


class Steering:
    """Sends settings to the server through :class:`SupervisorPort` and keeps what was asked for in ``store``."""

    def __init__(self, sup: SupervisorPort, store: Desired) -> None:
        self.sup = sup
        self.store = store  # the desired state: survives server and supervisor restarts (desired.py)
        self.operator_epoch = 0  # grows with every operator command that changes settings (calibration reads it)
        self._uid: int | None = None  # the peer of the command running now
        self._baseline: dict[str, Any] = {}  # the server's settings as it started, before anything was pushed
        self._first_push = True  # the first since this supervisor started: an attached server may have changed

    @property
    def desired(self) -> dict[str, Any]:
        """The settings config, calibration and people asked for (a pinned depth left out)."""
        return self.store.values()

    @property
    def operator_keys(self) -> set[str]:
        """Every setting people own: the config file's [policy] and --set, each operator's set or mode, a
        change adopted from elsewhere, a pinned depth. Calibration leaves them alone."""
        owned = set(self.store.state.config) | set(self.store.state.chosen)
        if self.store.pin is not None:
            owned |= {"mode", "steps"}
        return set(groups_touched(owned)) if owned else set()

    async def push_learned(self, values: dict[str, Any], provenance: str = "calibration") -> bool:
        """The calibration loop's publish (runtime/supervisor/calibrate.py): :meth:`learned`, with a refusal
        or nothing to send read as False, so the loop keeps learning."""
        try:
            return bool(await self.learned(values, provenance))
        except (CommandError, SettingsError):
            return False

    async def push_probe(self, mode: str) -> bool:
        """A calibration probe: force ``on``/``off`` for a few steps, ``auto`` to end it (not kept)."""
        if "mode" in self.operator_keys and mode != "auto" and self.desired.get("mode", "auto") != "auto":
            return False
        return await self._push_own({"mode": mode})

    async def _push_own(self, values: dict[str, Any]) -> bool:
        """A change of calibration's own (a probe), sent like any other, not kept: False where it could not be."""
        if not values:
            return False
        try:
            await self._apply(values, journal=False)
        except CommandError:
            return False
        return True

    async def learned(self, values: Mapping[str, Any], provenance: str) -> dict[str, Any]:
        """THE way calibration's values reach the server: the settings no one owns (the config file's [policy],
        an operator's or an adopted change, a pin) are sent whole and then kept in the desired state's learned
        layer, below the operator's, so a restarted server or supervisor starts from them. Returns what was
        sent ({} when people own every key). Raises SettingsError for values that are not settings,
        CommandError where the server refuses them (nothing is kept then).

        Takes no lock: the calibration loop calls it from the poll that a command holding the lock waits for.
        """
        check_fields(dict(values))
        send = {k: v for k, v in values.items() if k not in self.operator_keys}
        if not send:
            return {}
        await self._apply(send, journal=False)
        self.store.learned(send, provenance)  # journaled as settings_learned
        return send


    async def _apply(self, changes: dict[str, Any], journal: bool = True) -> PolicySettings:
        """Send ``changes`` whole to the server, or nothing: the new settings, journaled with who and from where."""
        current = self._current()
        try:
            new = current.with_changes(changes)
        except SettingsError as exc:
            hint = set_together(exc.field, changes) + shallow_hint(exc, changes, current)
            raise CommandError(INVALID_VALUE, str(exc) + hint, field=exc.field) from None
        client = self.sup.server_client
        if client is None:
            raise CommandError(UNAVAILABLE, "the model server is not running")
        self.sup.expect_settings(new.as_dict())  # read back, ours: not an external change
        try:
            answers = await client.set_internal_state(new.to_wire(changes.keys()))
        except ServerUnreachable as exc:
            raise CommandError(UNAVAILABLE, f"the model server did not answer: {exc}") from None
        if not answers or not all(answers):
            raise refused(current, new, ((self.sup.latest_sample or {}).get("server") or {}).get("topk"))
        if journal:
            self.operator_epoch += 1
            applied = {k: getattr(new, k) for k in changes}
            self.sup.emit(records.event(records.SETTINGS, changes=applied, settings=new.as_dict(), by=self._uid,
                                        source="operator"))
        return new

    async def _settled(self, new: PolicySettings) -> dict[str, Any]:
        """Answer once the server shows the change, waiting a bounded while for a switch to land.

        Settings read back at once (SGLang hands them to every rank at the next step boundary);
        a forced mode turns speculation on or off at the server's next decode step, which an idle
        server may not take for a while: then the answer says so (``pending``), as ``status`` does.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_S
        while True:
            await self.sup.poll_now()
            spec = self._latest_spec() or {}
            pending = switching(spec)
            if pending is None or loop.time() >= deadline:
                break
        out: dict[str, Any] = {"settings": spec.get("settings") or new.as_dict(), "on": spec.get("on"),
                               "depth": spec.get("depth", spec.get("steps"))}
        if pending is not None:
            out["pending"] = pending
        return out

    def _latest_spec(self) -> records.Spec | None:
        sample = self.sup.latest_sample
        return None if sample is None else sample["spec"]

    def _current(self) -> PolicySettings:
        """The server's settings as last read; refuses when the server cannot be asked."""
        sample = self.sup.latest_sample
        spec = None if sample is None else sample["spec"]
        if (why := view_only.reason(sample)) is not None:  # ready, no plugin state: nothing to steer
            raise CommandError(UNAVAILABLE, view_only.refusal(why, sample["server"].get("tp") if sample else None))
        if not spec or not isinstance(spec.get("settings"), dict):
            raise CommandError(UNAVAILABLE, "the model server's policy state is not known yet "
                                            f"(server {self.sup.state}); try again when it is ready")
        try:
            return PolicySettings().with_changes(spec["settings"])
        except SettingsError as exc:
            raise CommandError(UNAVAILABLE, f"the server reports unusable settings: {exc}") from None

    async def push_desired(self) -> None:
        """After a (re)start, give the server its desired state, so nothing is lost (``settings_restored``,
        with who set each value and when). The server's own settings as it started are kept first: the
        values ``set --reset`` goes back to where the config names none."""
        client = self.sup.server_client
        if client is None:
            return
        first, self._first_push = self._first_push, False
        try:
            spec = spec_state(await client.server_info()) or {}
            if isinstance(spec.get("settings"), dict):
                self._baseline = PolicySettings().with_changes(spec["settings"]).as_dict()
        except (SettingsError, ServerUnreachable):
            spec = {}  # no baseline: a reset falls back to the policy's defaults
        if first and not self.sup.owns_server and self._baseline:  # someone else's server, changed while away
            if away := self.store.changed_while_away(self._baseline, spec.get("step")):
                self.store.adopt(away, self._baseline, while_away=True)
        wanted = self.store.wanted()
        if not wanted:
            return
        try:
            base = PolicySettings().with_changes(self._baseline)
            wire = base.with_changes(wanted).to_wire(wanted.keys())
            ok = await client.set_internal_state(wire)
        except (SettingsError, ServerUnreachable) as exc:
            self.sup.emit(records.event(records.SETTINGS_RESTORE_FAILED, error=str(exc)))
            return
        self.sup.emit(records.event(records.SETTINGS_RESTORED, ok=bool(ok) and all(ok), changes=wanted,
                                    who=self.store.who()))
