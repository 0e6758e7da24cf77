"""Control commands: one path for the CLI, the socket and the in-process console.

Commands that change something are journaled as ``command`` records with the
peer's uid and whether they were applied. Settings are validated as a whole
against the server's current settings before anything is sent; the server
validates again (it may be a different release), and a refusal there is
reported, not hidden.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from specctl.runtime.core import records, view_only
from specctl.runtime.core.errors import (
    BAD_REQUEST,
    INVALID_VALUE,
    MALFORMED,
    UNAVAILABLE,
    UNKNOWN_COMMAND,
    CommandError,
)
from specctl.runtime.core.in_between import switching
from specctl.runtime.core.journalable import bounded_args, bounded_message, why_unjournalable
from specctl.runtime.core.settings import (
    MODES,
    PolicySettings,
    SettingsError,
    check_fields,
    check_ranges,
    floor_for_steps,
)
from specctl.runtime.core.thresholds import (
    GROUPS,
    MEASURED_WITH,
    attention_backend,
    for_backend,
    for_server,
    for_tree_server,
    groups_touched,
    is_moe,
    set_together,
    unset_groups,
)
from specctl.runtime.probes.server_info import draft_topk, spec_state, target_experts
from specctl.runtime.probes.sglang_client import ServerUnreachable
from specctl.runtime.supervisor.desired import Desired

COMMANDS = ("ping", "status", "mode", "set", "server", "calibration")
SETTLE_S = 2.0  # how long a command waits for a switch to show before answering "at the next step"
JOURNALED = ("mode", "set", "server", "calibration")
CALIBRATION_ACTIONS = ("show", "reset")
CALIBRATE = "calibrate"  # `specctl set calibrate=off|on`: not a policy setting, the supervisor's own switch
SERVER_ACTIONS = ("restart", "stop", "start")


class SettingsClient(Protocol):
    """The one call the commands make to the model server (probes.sglang_client.SGLangClient)."""

    async def set_internal_state(self, server_args: dict[str, int | float]) -> list[bool]: ...

    async def server_info(self) -> dict[str, Any]: ...


class SupervisorPort(Protocol):
    """What the commands need from the supervisor, and no more (lifecycle.Supervisor provides it).

    Narrow so that the commands see neither the supervisor's internals nor its module:
    lifecycle imports this one, never the other way round.
    """

    @property
    def state(self) -> str: ...  # the server's health state (health.ServerHealth)

    @property
    def latest_sample(self) -> records.Sample | None: ...

    @property
    def owns_server(self) -> bool: ...  # False for --attach: specctl neither starts nor stops it

    @property
    def server_client(self) -> SettingsClient | None: ...  # None while no server runs

    def emit(self, record: records.Record) -> None: ...

    def expect_settings(self, settings: dict[str, Any]) -> None: ...  # ours: not an external change

    async def poll_now(self, timeout: float = 5.0) -> None: ...

    async def stop_server(self) -> None: ...

    async def start_server(self) -> None: ...


class CommandHandler:
    """Turns commands into /set_internal_state calls and server actions."""

    def __init__(self, sup: SupervisorPort, store: Desired) -> None:
        self.sup = sup
        self.store = store  # the desired state: survives server and supervisor restarts (desired.py)
        self.operator_epoch = 0  # grows with every operator command that changes settings (calibration reads it)
        self.calibration: Any = None  # runtime.supervisor.calibrate.CalibrationLoop, where the supervisor runs one
        self._lock = asyncio.Lock()
        self._uid: int | None = None  # the peer of the command running now
        self._baseline: dict[str, Any] = {}  # the server's settings as it started, before anything was pushed
        self._first_push = True  # the first since this supervisor started: an attached server may have changed

    @property
    def desired(self) -> dict[str, Any]:
        """The settings config, calibration and people asked for (a pinned depth left out)."""
        return self.store.values()

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

    async def _apply(self, changes: dict[str, Any], journal: bool = True) -> PolicySettings:
        """Send ``changes`` whole to the server, or nothing: the new settings, journaled with who and from where."""
        current = self._current()
        try:
            new = current.with_changes(changes)
        except SettingsError as exc:
            hint = set_together(exc.field, changes) + _shallow_hint(exc, changes, current)
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

    async def adopt_backend_thresholds(self, info: dict[str, Any] | None, gpu_names: list[str | None],
                                       apply: bool = True) -> bool:
        """Once per server start: thresholds measured for its attention backend on its GPUs.

        Only for a server specctl launched, and only for the groups of settings the
        operator left alone (runtime/core/thresholds.py says why one set does not fit all).
        The row is the one measured for the target's model class (the expert count the plugin
        puts in /server_info): a MoE on Triton gets the MoE row; one measured on another GPU, or
        only on a dense model for a MoE target (FA3, FlashInfer), is not applied, and the
        journal says so once.
        ``apply`` False (the simulator): only that is said; nothing is sent.
        """
        backend, experts = attention_backend(info), target_experts(info)
        rows = for_tree_server if (draft_topk(info) or 1) > 1 else for_server  # a tree's crossover is its own
        row, why_not = rows(backend, gpu_names, self.desired, experts=experts)
        if why_not is not None:
            self.sup.emit(records.event(records.BACKEND_THRESHOLDS_SKIPPED, backend=backend, experts=experts,
                                        gpus=sorted({n for n in gpu_names if n}), why=why_not))
        pair = unset_groups(row or {}, self.desired)  # config, calibration and people: a row fills only the rest
        client = self.sup.server_client
        if not apply or not pair or client is None:
            return False
        try:
            wire = PolicySettings().with_changes({**self.desired, **pair}).to_wire(pair.keys())
            ok = await client.set_internal_state(wire)
        except (SettingsError, ServerUnreachable) as exc:
            self.sup.emit(records.event(records.BACKEND_THRESHOLDS_FAILED, backend=backend, error=str(exc)))
            return False
        applied = bool(ok) and all(ok)
        self.sup.emit(records.event(records.BACKEND_THRESHOLDS, backend=backend, experts=experts, changes=pair,
                                    ok=applied))
        return applied

    def note_row_in_effect(self, info: dict[str, Any] | None, gpu_names: Sequence[str | None] = ()) -> None:
        """Once at attach: a MoE whose plugin runs a thresholds row measured on a dense model, and the fix.

        An attached server starts with its launch line's settings (SPECCTL_SETTINGS), and
        ``specctl sglang-args`` without ``--experts`` prints the dense row there, which a
        server specctl launches never runs on a MoE (adopt_backend_thresholds: the MoE row
        where one was measured for its backend and GPU, else the defaults). The supervisor
        does not tune a server it did not launch, so it only tells, with the settings that
        fit (``gpu_names`` as NVML reads them pick between the MoE row and the defaults): a
        row the operator chose on purpose (their own --set here, kept in ``desired``) is not said.
        """
        experts, backend = target_experts(info), attention_backend(info)
        row, spec = for_backend(backend), spec_state(info) or {}
        settings = spec.get("settings")
        if not is_moe(experts) or row is None or not isinstance(settings, dict):
            return
        running = _row_running(row, settings, self.desired)
        if running:
            fits, _ = for_server(backend, list(gpu_names), self.desired, experts=experts)
            self.sup.emit(records.event(records.DENSE_THRESHOLDS_ON_MOE, backend=backend, experts=experts,
                                        settings=running,
                                        why=dense_row_on_moe(backend, experts, running, settings, fits)))

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


def _row_running(row: Mapping[str, float], settings: Mapping[str, Any], chosen: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of each group that the server runs at the row's values, where the operator left it alone.

    Group by group: an operator who printed sglang-args with their own off_at and on_at still runs
    the row's acceptance floor, and only that is worth a word.
    """
    left = unset_groups(dict(row), dict(chosen))
    running: dict[str, Any] = {}
    for group in GROUPS:
        values = {k: settings.get(k) for k in group if k in left}
        if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isclose(v, left[k])
                          for k, v in values.items()):
            running.update(values)
    return running


def dense_row_on_moe(backend: str | None, experts: int, running: Mapping[str, Any],
                     settings: Mapping[str, Any] | None = None, fits: Mapping[str, float] | None = None) -> str:
    """The one line for a MoE running a dense model's row: what it runs, and both fixes.

    The relaunch fixes it for good (sglang-args with --experts prints the MoE row where one
    was measured for the backend and GPU, else the policy's defaults); ``specctl set`` fixes it
    now, until that server restarts without this supervisor. ``fits``: that MoE row, where it
    applies to this server (None: the defaults are what fits).
    """
    shown = ", ".join(f"{k} {_number(v)}" for k, v in running.items())
    return (f"this server's target is a MoE ({experts} experts) and its plugin runs the {backend} thresholds "
            f"measured on a {MEASURED_WITH} model ({shown}), as `specctl sglang-args` prints them without "
            f"--experts; a MoE's verify cost over the batch is not a {MEASURED_WITH} model's (docs/benchmarks.md): "
            f"relaunch with the environment `specctl sglang-args --experts {experts}` prints (with your other "
            f"flags), or {_to_fitting(running, settings or {}, backend, fits)}")


def _to_fitting(running: Mapping[str, Any], settings: Mapping[str, Any], backend: str | None,
                fits: Mapping[str, float] | None) -> str:
    """The `specctl set` that puts these settings to what fits a MoE, where the server would take it.

    That is the backend's MoE row where ``fits`` gives one, else the policy's defaults. At one
    draft step the default acceptance floor (1.3) is more than a verify can accept, so the
    server's other settings decide whether the plain values are a command that works.
    """
    source = fits if fits else PolicySettings().as_dict()
    back = {k: source[k] for k in running}
    try:
        PolicySettings().with_changes(dict(settings)).with_changes(back)
    except SettingsError:
        return f"set {' and '.join(running)} now with specctl set (docs/policy.md)"
    what = f"the {backend} thresholds measured on a MoE" if fits else "the policy's defaults"
    return f"run {what} now with `specctl set {' '.join(f'{k}={_number(v)}' for k, v in back.items())}`"


def _number(value: Any) -> str:
    """56 rather than 56.0, 1048576 rather than 1.04858e+06: as an operator types it."""
    return str(int(value)) if isinstance(value, (int, float)) and float(value).is_integer() else str(value)


def _shallow_hint(exc: SettingsError, changes: Mapping[str, Any], current: PolicySettings) -> str:
    """A depth asked for without the setting it needs changed along: say how to ask for both.

    ``specctl force-on --steps 1`` on a server built for 0,1,2,3 is refused for min_accept (1.3 by
    default: a depth-1 verify accepts at most one draft token), which the operator never typed.
    """
    steps = changes.get("steps")
    if exc.field == "steps" and steps is None and isinstance(changes.get("candidates"), (list, tuple)):
        # `set candidates=0,2` while steps is 3: narrowing past steps takes steps along
        shown = ",".join(map(str, changes["candidates"]))
        deepest = max(changes["candidates"], default=0)
        floor = f" min_accept={floor_for_steps(deepest):g}" if current.min_accept > deepest else ""  # else refused next
        return f"; narrow steps with them in one command (specctl set candidates={shown} steps={deepest}{floor})"
    if exc.field != "min_accept" or "min_accept" in changes or steps is None:
        return ""
    steps = check_fields({"steps": steps})["steps"]  # coerced already, or the refusal would name steps
    if not current.candidates and steps != current.steps:  # built {0, steps} only: the set would be refused next
        return (f"; and the model server built runtime states (CUDA graphs) for 0 and {current.steps} draft steps "
                f"only, so {steps} needs a relaunch ({_relaunch(steps)})")
    mode = "mode=on " if changes.get("mode") == "on" else ""
    return (f"; at {steps} draft step{'s' if steps != 1 else ''} the acceptance floor min_accept must be at most "
            f"{steps}: lower it in the same command (specctl set {mode}steps={steps} "
            f"min_accept={floor_for_steps(steps):g}, the default floor scaled to the depth)")


def _relaunch(steps: int) -> str:
    """The launch lines for ``steps`` draft steps, with the floor they need where the default is out of reach."""
    floor = f" --set min_accept={floor_for_steps(steps):g}" if PolicySettings.min_accept > steps else ""
    return (f"specctl run --speculative-num-steps {steps}{floor}, or specctl sglang-args --steps {steps}{floor} "
            "for your own launch line")


def tree_depth_refusal(steps: int, topk: int) -> CommandError:
    """A tree under the switch has its launch depth and off only: another depth is a relaunch of that tree."""
    return CommandError(INVALID_VALUE, (
        f"the model server drafts a tree (topk {topk}) under specctl's switch, which has its launch depth "
        f"({steps}) and off only; another depth is a relaunch with that tree's own "
        "--speculative-num-steps and --speculative-num-draft-tokens (docs/sglang-plugin.md); nothing changed"),
        field="steps")


def refused(current: PolicySettings, new: PolicySettings, topk: object = None) -> CommandError:
    """The server said no to settings the supervisor found valid: name the field and why where it is known.

    The one setting a server refuses that passes every check here is a step count it has no runtime
    state for: SGLang builds CUDA graphs at launch for the candidate steps of its adaptive config
    (specctl writes {0, N}), so another N needs a relaunch, not a set. A tree (``topk`` above 1)
    has its launch depth and off only, whatever the relaunch.
    """
    if new.steps != current.steps and isinstance(topk, int) and topk > 1:
        return tree_depth_refusal(current.steps, topk)
    if new.steps != current.steps:
        return CommandError(INVALID_VALUE, (
            f"the model server was launched for {current.steps} draft steps and built its runtime states "
            f"(CUDA graphs) for those and for 0 only, so it cannot run {new.steps} without a relaunch "
            f"({_relaunch(new.steps)}); nothing changed"), field="steps")
    if new.candidates != current.candidates and set(new.candidates) - set(current.candidates):
        wanted = ",".join(map(str, new.candidates))
        return CommandError(INVALID_VALUE, (
            f"the model server refused candidates {wanted}: it built runtime states (CUDA graphs) at launch "
            "only for the depths it was launched with, so another depth needs a relaunch (specctl run "
            f"--speculative-candidate-steps {wanted}, or specctl sglang-args --speculative-candidate-steps "
            f"{wanted} for your own launch line); narrowing to a subset of those is fine; nothing changed"),
            field="candidates")
    changed = ", ".join(k for k, v in new.as_dict().items() if v != current.as_dict()[k]) or "none"
    return CommandError(INVALID_VALUE, f"the model server refused the settings ({changed}): it validates them "
                                       "again, and its log says which and why; nothing changed")
