"""Control commands: one path for the CLI, the socket and the in-process console.

Commands that change something are journaled as ``command`` records with the
peer's uid and whether they were applied. Settings are validated as a whole
against the server's current settings before anything is sent; the server
validates again (it may be a different release), and a refusal there is
reported, not hidden.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from specctl.runtime.core import records
from specctl.runtime.core.errors import BAD_REQUEST, INVALID_VALUE, UNAVAILABLE, UNKNOWN_COMMAND, CommandError
from specctl.runtime.core.policy import MODES, PolicySettings, SettingsError
from specctl.runtime.probes.sglang_client import ServerUnreachable
from specctl.runtime.core.thresholds import attention_backend, for_backend, unset_groups

if TYPE_CHECKING:
    from specctl.runtime.supervisor.lifecycle import Supervisor

COMMANDS = ("ping", "status", "mode", "set", "server")
JOURNALED = ("mode", "set", "server")
SERVER_ACTIONS = ("restart", "stop", "start")


class CommandHandler:
    """Turns commands into /set_internal_state calls and server actions."""

    def __init__(self, sup: "Supervisor") -> None:
        self.sup = sup
        self.desired: dict[str, Any] = dict(sup.config.settings)  # survives server restarts
        self._lock = asyncio.Lock()

    async def execute(self, cmd: str, args: dict[str, Any], uid: int | None) -> dict[str, Any]:
        if not isinstance(cmd, str) or cmd not in COMMANDS:
            raise CommandError(UNKNOWN_COMMAND, f"unknown command {cmd!r}; known: {', '.join(COMMANDS)} "
                                                "(and subscribe, on the control socket)")
        if not isinstance(args, dict):
            raise CommandError(BAD_REQUEST, "args must be a JSON object")
        if cmd not in JOURNALED:
            return await getattr(self, f"_cmd_{cmd}")(args)
        async with self._lock:
            try:
                result = await getattr(self, f"_cmd_{cmd}")(args)
            except CommandError as exc:
                self.sup.emit(records.command(cmd, False, uid, args=args, error=exc.code,
                                              message=exc.message))
                raise
            self.sup.emit(records.command(cmd, True, uid, args=args))
            return result

    async def _cmd_ping(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"pong": True}

    async def _cmd_status(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"sample": self.sup.latest_sample}

    async def _cmd_mode(self, args: dict[str, Any]) -> dict[str, Any]:
        mode = args.get("mode")
        if mode not in MODES:
            raise CommandError(INVALID_VALUE, f"mode must be one of {', '.join(MODES)}, got {mode!r}",
                               field="mode")
        changes: dict[str, Any] = {"mode": mode}
        if "steps" in args:  # `specctl force-on --steps 2`: the depth to pin, in the same request
            changes["steps"] = args["steps"]
        return await self._apply(changes)

    async def _cmd_set(self, args: dict[str, Any]) -> dict[str, Any]:
        settings = args.get("settings")
        if not isinstance(settings, dict) or not settings:
            raise CommandError(BAD_REQUEST, 'set needs {"settings": {"name": value, ...}}')
        return await self._apply(settings)

    async def _apply(self, changes: dict[str, Any]) -> dict[str, Any]:
        current = self._current()
        try:
            new = current.with_changes(changes)
        except SettingsError as exc:
            raise CommandError(INVALID_VALUE, str(exc), field=exc.field) from None
        client = self.sup._client
        if client is None:
            raise CommandError(UNAVAILABLE, "the model server is not running")
        try:
            answers = await client.set_internal_state(new.to_wire(changes.keys()))
        except ServerUnreachable as exc:
            raise CommandError(UNAVAILABLE, f"the model server did not answer: {exc}") from None
        if not answers or not all(answers):
            raise CommandError(INVALID_VALUE, "the model server refused the settings (its log names the field); "
                                              "nothing changed")
        applied = {k: getattr(new, k) for k in changes}
        self.desired.update(applied)
        self.sup.emit(records.event("settings", changes=applied, settings=new.as_dict()))
        await self.sup.poll_now()
        spec = (self.sup.latest_sample or {}).get("spec") or {}
        return {"settings": spec.get("settings") or new.as_dict()}  # the server's word, once it has read back

    def _current(self) -> PolicySettings:
        """The server's settings as last read; refuses when the server cannot be asked."""
        sample = self.sup.latest_sample or {}
        spec = sample.get("spec")
        if not spec or not isinstance(spec.get("settings"), dict):
            raise CommandError(UNAVAILABLE, "the model server's policy state is not known yet "
                                            f"(server {self.sup.state}); try again when it is ready")
        try:
            return PolicySettings().with_changes(spec["settings"])
        except SettingsError as exc:
            raise CommandError(UNAVAILABLE, f"the server reports unusable settings: {exc}") from None

    async def push_desired(self) -> None:
        """After a (re)start, give the server what operators asked for, so nothing is lost."""
        client = self.sup._client
        if not self.desired or client is None:
            return
        try:
            wire = PolicySettings().with_changes(self.desired).to_wire(self.desired.keys())
            ok = await client.set_internal_state(wire)
        except (SettingsError, ServerUnreachable) as exc:
            self.sup.emit(records.event("settings_restore_failed", error=str(exc)))
            return
        self.sup.emit(records.event("settings_restored", ok=bool(ok) and all(ok), changes=self.desired))

    async def adopt_backend_thresholds(self, info: dict[str, Any] | None) -> bool:
        """Once per server start: thresholds measured for its attention backend.

        Only for a server specctl launched, and only for the groups of settings the
        operator left alone (runtime/thresholds.py says why one set does not fit all).
        """
        backend = attention_backend(info)
        pair = unset_groups(for_backend(backend) or {}, self.desired)
        client = self.sup._client
        if not pair or client is None:
            return False
        try:
            wire = PolicySettings().with_changes({**self.desired, **pair}).to_wire(pair.keys())
            ok = await client.set_internal_state(wire)
        except (SettingsError, ServerUnreachable) as exc:
            self.sup.emit(records.event("backend_thresholds_failed", backend=backend, error=str(exc)))
            return False
        applied = bool(ok) and all(ok)
        self.sup.emit(records.event("backend_thresholds", backend=backend, changes=pair, ok=applied))
        return applied

    async def _cmd_server(self, args: dict[str, Any]) -> dict[str, Any]:
        action = args.get("action")
        if action not in SERVER_ACTIONS:
            raise CommandError(INVALID_VALUE, f"action must be one of {', '.join(SERVER_ACTIONS)}, got {action!r}",
                               field="action")
        if not self.sup.backend.owns_process:
            raise CommandError(INVALID_VALUE, "this server was started elsewhere (--attach); "
                                              "specctl does not start or stop it", field="action")
        if action == "start" and self.sup.state not in ("stopped", "restarting"):
            # a second server would be started beside the first, which nothing would then stop
            raise CommandError(INVALID_VALUE, f"the server is already running ({self.sup.state}); "
                                              "`specctl server restart` restarts it", field="action")
        if action in ("stop", "restart") and self.sup.state != "stopped":
            await self.sup.stop_server()
        if action in ("start", "restart"):
            await self.sup.start_server()
        return {"state": self.sup.state}
