"""Control commands: one path for the CLI, the socket and the in-process console.

Commands that change something are journaled as ``command`` records with the
peer's uid and whether they were applied. Settings are validated as a whole
against the server's current settings before anything is sent; the server
validates again (it may be a different release), and a refusal there is
reported, not hidden. How settings reach the server is steering.py's; this
module is the commands' own: their names, arguments, checks and answers.
"""

from __future__ import annotations

import asyncio
from typing import Any

from specctl.runtime.core import records
from specctl.runtime.core.errors import (
    BAD_REQUEST,
    INVALID_VALUE,
    MALFORMED,
    UNAVAILABLE,
    UNKNOWN_COMMAND,
    CommandError,
)
from specctl.runtime.core.journalable import bounded_args, bounded_message, why_unjournalable
from specctl.runtime.core.settings import (
    MODES,
    PolicySettings,
    SettingsError,
    check_ranges,
)
from specctl.runtime.core.thresholds import groups_touched
from specctl.runtime.supervisor.desired import Desired
from specctl.runtime.supervisor.port import SupervisorPort
from specctl.runtime.supervisor.refusals import tree_depth_refusal
from specctl.runtime.supervisor.steering import Steering

COMMANDS = ("ping", "status", "mode", "set", "server", "calibration")
JOURNALED = ("mode", "set", "server", "calibration")
CALIBRATION_ACTIONS = ("show", "reset")
CALIBRATE = "calibrate"  # `specctl set calibrate=off|on`: not a policy setting, the supervisor's own switch
SERVER_ACTIONS = ("restart", "stop", "start")


class CommandHandler(Steering):
    """Turns commands into /set_internal_state calls (through :class:`Steering`) and server actions."""

    def __init__(self, sup: SupervisorPort, store: Desired) -> None:
        super().__init__(sup, store)
        self.calibration: Any = None  # runtime.supervisor.calibrate.CalibrationLoop, where the supervisor runs one
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
            self._uid = uid
            try:
                if why := why_unjournalable(args):  # applied only if its record can be written
                    raise CommandError(BAD_REQUEST, f"args cannot be journaled: {why}")
                result = await getattr(self, f"_cmd_{cmd}")(args)
            except CommandError as exc:
                self.sup.emit(records.command(cmd, False, uid, args=bounded_args(args), error=exc.code,
                                              message=bounded_message(exc.message)))
                raise
            self.sup.emit(records.command(cmd, True, uid, args=bounded_args(args)))
            return result

    async def _cmd_ping(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"pong": True}

    async def _cmd_status(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"sample": self.sup.latest_sample, "desired": self.desired_view()}

    def desired_view(self) -> dict[str, Any]:
        """The desired state as status shows it: each setting a person, a file or a calibration asked for,
        with who and when, and a pinned depth."""
        pin = self.store.pin
        probing = None if self.calibration is None else self.calibration.calibrator.probing
        return {"settings": self.store.wanted(), "who": self.store.who(),
                "pin": None if pin is None else pin.as_dict(), "path": None if self.store.path is None
                else str(self.store.path), "probe": probing}

    async def _cmd_mode(self, args: dict[str, Any]) -> dict[str, Any]:
        mode = args.get("mode")
        if mode not in MODES:
            raise CommandError(INVALID_VALUE, f"mode must be one of {', '.join(MODES)}, got {mode!r}",
                               field="mode", kind=MALFORMED)
        current = self._current()
        changes: dict[str, Any] = {"mode": mode}
        pin = self.store.pin
        if args.get("steps") is not None:  # `specctl force-on --steps 2`: the depth to pin, in the same request
            steps = _field_checked("steps", args["steps"])
            if mode != "on":
                raise CommandError(INVALID_VALUE, "a depth is pinned with mode on (specctl force-on --steps N)",
                                   field="steps", kind=MALFORMED)
            topk = ((self.sup.latest_sample or {}).get("server") or {}).get("topk")
            if steps != current.steps and isinstance(topk, int) and topk > 1:
                raise tree_depth_refusal(current.steps, topk)
            if not current.candidates and steps != current.steps:
                raise CommandError(INVALID_VALUE, f"this server built depth {current.steps} only; pinning depth "
                                   f"{steps} needs a relaunch with --speculative-candidate-steps "
                                   f"0,{','.join(map(str, sorted({steps, current.steps})))}", field="steps")
            changes["steps"] = steps
            restore = pin.restore if pin is not None else current.steps
            new = await self._apply(changes)
            if current.candidates:  # several depths built: a pin that `auto` or a plain force-on hands back
                self.store.pinned(steps, restore, self._uid)
            else:
                self.store.choose({"mode": mode}, self._uid)
            return await self._settled(new)
        if pin is not None and pin.restore != current.steps:
            changes["steps"] = pin.restore  # the pin ends: the depth goes back to the policy
        new = await self._apply(changes)
        self.store.choose({"mode": mode}, self._uid)  # and the pin with it
        return await self._settled(new)

    async def _cmd_set(self, args: dict[str, Any]) -> dict[str, Any]:
        if args.get("reset") is True:
            return await self._reset()
        settings = args.get("settings")
        if not isinstance(settings, dict) or not settings:
            raise CommandError(BAD_REQUEST, 'set needs {"settings": {"name": value, ...}} or {"reset": true}')
        settings = dict(settings)
        enable = _calibrate_value(settings.pop(CALIBRATE)) if CALIBRATE in settings else None
        if enable is not None and self.calibration is None:
            raise CommandError(UNAVAILABLE, "this supervisor runs no calibration", field=CALIBRATE)
        for key, value in settings.items():
            _field_checked(key, value)
        if settings:
            new = await self._apply(settings)
            kept = {k: getattr(new, k) for k in groups_touched(settings)}  # the pair it ran, for restarts
            if self.store.pin is not None and "steps" in kept:  # a depth set by hand ends a pin; the mode stays on
                kept.setdefault("mode", new.mode)
            self.store.choose(kept, self._uid)
            result = await self._settled(new)
        else:
            result = {"settings": (self._latest_spec() or {}).get("settings")}
        if enable is not None:
            self.calibration.enabled = enable
            result = {**result, CALIBRATE: "on" if enable else "off"}
        return result

    async def _cmd_calibration(self, args: dict[str, Any]) -> dict[str, Any]:
        action = args.get("action", "show")
        if action not in CALIBRATION_ACTIONS:
            raise CommandError(INVALID_VALUE, f"action must be one of {', '.join(CALIBRATION_ACTIONS)}, "
                                              f"got {action!r}", field="action", kind=MALFORMED)
        if self.calibration is None:
            raise CommandError(UNAVAILABLE, "this supervisor runs no calibration")
        if action == "reset":
            return dict(await self.calibration.reset())
        return dict(self.calibration.show())


    async def _reset(self) -> dict[str, Any]:
        """``specctl set --reset``: every setting an operator chose (or that was adopted from elsewhere) and a
        pinned depth go back to the config file's (and ``--set``'s) value, else the server's own at its start."""
        current = self._current()
        chosen = set(self.store.state.chosen) | ({"mode", "steps"} if self.store.pin is not None else set())
        if not chosen:
            return {"settings": current.as_dict(), "reset": {}}
        base = {**PolicySettings().as_dict(), **self._baseline, **self.store.state.config,
                **{k: e.value for k, e in self.store.state.learned.items()}}
        back = {k: base[k] for k in groups_touched(chosen) if k in base}
        if self.store.pin is not None and "steps" not in {**self.store.state.config, **self.store.state.learned}:
            back["steps"] = self.store.pin.restore
        new = await self._apply(back, journal=False)
        dropped = self.store.reset()
        self.sup.emit(records.event(records.SETTINGS_RESET, by=self._uid, source="operator", dropped=dropped,
                                    changes={k: getattr(new, k) for k in back}, settings=new.as_dict()))
        result = await self._settled(new)
        return {**result, "reset": {k: v.get("value", v.get("depth")) for k, v in dropped.items()}}
    async def _cmd_server(self, args: dict[str, Any]) -> dict[str, Any]:
        action = args.get("action")
        if action not in SERVER_ACTIONS:
            raise CommandError(INVALID_VALUE, f"action must be one of {', '.join(SERVER_ACTIONS)}, got {action!r}",
                               field="action")
        if not self.sup.owns_server:
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


def _field_checked(key: str, value: Any) -> Any:
    """One setting's own type and range, whatever the others are: a refusal here is the value's (exit 2)."""
    try:
        return check_ranges({key: value})[key]
    except SettingsError as exc:
        raise CommandError(INVALID_VALUE, str(exc), field=exc.field, kind=MALFORMED) from None


def _calibrate_value(value: Any) -> bool:
    """``calibrate=on|off`` (also true/false, 1/0); anything else is refused naming the setting."""
    text = str(value).strip().lower()
    if text in ("on", "true", "1"):
        return True
    if text in ("off", "false", "0"):
        return False
    raise CommandError(INVALID_VALUE, f"{CALIBRATE}: must be on or off, got {value!r}", field=CALIBRATE,
                       kind=MALFORMED)
