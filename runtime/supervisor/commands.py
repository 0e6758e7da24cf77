"""Control commands: one path for the CLI, the socket and the in-process console.

Commands that change something are journaled as ``command`` records with the
peer's uid and whether they were applied. Settings are validated as a whole
against the server's current settings before anything is sent; the server
validates again (it may be a different release), and a refusal there is
reported, not hidden.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from specctl.runtime.core import records, view_only
from specctl.runtime.core.errors import BAD_REQUEST, INVALID_VALUE, UNAVAILABLE, UNKNOWN_COMMAND, CommandError
from specctl.runtime.core.journalable import bounded_args, bounded_message, why_unjournalable
from specctl.runtime.core.settings import MODES, PolicySettings, SettingsError, check_fields, floor_for_steps
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

COMMANDS = ("ping", "status", "mode", "set", "server", "calibration")
JOURNALED = ("mode", "set", "server", "calibration")
CALIBRATION_ACTIONS = ("show", "reset")
CALIBRATE = "calibrate"  # `specctl set calibrate=off|on`: not a policy setting, the supervisor's own switch
SERVER_ACTIONS = ("restart", "stop", "start")


class SettingsClient(Protocol):
    """The one call the commands make to the model server (probes.sglang_client.SGLangClient)."""

    async def set_internal_state(self, server_args: dict[str, int | float]) -> list[bool]: ...


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

    def __init__(self, sup: SupervisorPort, settings: Mapping[str, Any]) -> None:
        self.sup = sup
        self.desired: dict[str, Any] = dict(settings)  # survives server restarts
        # every setting an operator set (config [policy], --set, `specctl set`, mode): calibration leaves them alone
        self.operator_keys: set[str] = set(groups_touched(settings))
        self.operator_epoch = 0  # grows with every operator command that changes settings
        self.learned: dict[str, Any] = {}  # what calibration published, restored after a restart with desired
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
        settings = dict(settings)
        enable = _calibrate_value(settings.pop(CALIBRATE)) if CALIBRATE in settings else None
        if enable is not None and self.calibration is None:
            raise CommandError(UNAVAILABLE, "this supervisor runs no calibration", field=CALIBRATE)
        result = await self._apply(settings) if settings else {"settings": (self._latest_spec() or {}).get("settings")}
        if enable is not None:
            self.calibration.enabled = enable
            result = {**result, CALIBRATE: "on" if enable else "off"}
        return result

    async def _cmd_calibration(self, args: dict[str, Any]) -> dict[str, Any]:
        action = args.get("action", "show")
        if action not in CALIBRATION_ACTIONS:
            raise CommandError(INVALID_VALUE, f"action must be one of {', '.join(CALIBRATION_ACTIONS)}, "
                                              f"got {action!r}", field="action")
        if self.calibration is None:
            raise CommandError(UNAVAILABLE, "this supervisor runs no calibration")
        if action == "reset":
            return dict(await self.calibration.reset())
        return dict(self.calibration.show())

    async def push_learned(self, values: dict[str, Any]) -> bool:
        """THE way calibration publishes what it learned: settings the operator does not own, to the server.

        Validated whole against the server's settings, sent like an operator's set (every rank takes
        them at one step boundary), read back as ours; kept for a restarted server (push_desired).
        """
        values = {k: v for k, v in values.items() if k not in self.operator_keys}
        if not await self._push_own(values):
            return False
        self.learned.update(values)
        return True

    async def push_probe(self, mode: str) -> bool:
        """A calibration probe: force ``on``/``off`` for a few steps, ``auto`` to end it (not kept)."""
        if "mode" in self.operator_keys and mode != "auto" and self.desired.get("mode", "auto") != "auto":
            return False
        return await self._push_own({"mode": mode})

    async def _push_own(self, values: dict[str, Any]) -> bool:
        client = self.sup.server_client
        if not values or client is None:
            return False
        try:
            new = self._current().with_changes(values)
            self.sup.expect_settings(new.as_dict())
            answers = await client.set_internal_state(new.to_wire(values.keys()))
        except (CommandError, SettingsError, ServerUnreachable):
            return False
        return bool(answers) and all(answers)

    async def _apply(self, changes: dict[str, Any]) -> dict[str, Any]:
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
        applied = {k: getattr(new, k) for k in changes}
        self.desired.update({k: getattr(new, k) for k in groups_touched(changes)})  # the pair it ran, for restarts
        self.operator_keys |= groups_touched(changes)
        self.operator_epoch += 1
        self.sup.emit(records.event(records.SETTINGS, changes=applied, settings=new.as_dict()))
        await self.sup.poll_now()
        spec = self._latest_spec() or {}
        return {"settings": spec.get("settings") or new.as_dict()}  # the server's word, once it has read back

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
        """After a (re)start, give the server what operators asked for, so nothing is lost."""
        client = self.sup.server_client
        if not self.desired and not self.learned or client is None:
            return
        if self.learned:  # calibration's values first, the operator's over them
            with contextlib.suppress(SettingsError, ServerUnreachable):
                learned = {k: v for k, v in self.learned.items() if k not in self.operator_keys}
                await client.set_internal_state(PolicySettings().with_changes(learned).to_wire(learned.keys()))
        if not self.desired:
            return
        try:
            wire = PolicySettings().with_changes(self.desired).to_wire(self.desired.keys())
            ok = await client.set_internal_state(wire)
        except (SettingsError, ServerUnreachable) as exc:
            self.sup.emit(records.event(records.SETTINGS_RESTORE_FAILED, error=str(exc)))
            return
        self.sup.emit(records.event(records.SETTINGS_RESTORED, ok=bool(ok) and all(ok), changes=self.desired))

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
        pair = unset_groups(row or {}, {**self.learned, **self.desired})  # calibration refines a row: kept
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


def _calibrate_value(value: Any) -> bool:
    """``calibrate=on|off`` (also true/false, 1/0); anything else is refused naming the setting."""
    text = str(value).strip().lower()
    if text in ("on", "true", "1"):
        return True
    if text in ("off", "false", "0"):
        return False
    raise CommandError(INVALID_VALUE, f"{CALIBRATE}: must be on or off, got {value!r}", field=CALIBRATE)


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
            f"--experts; a MoE's verify cost over the batch is not a {MEASURED_WITH} model's (docs/results/moe.md): "
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


def refused(current: PolicySettings, new: PolicySettings, topk: object = None) -> CommandError:
    """The server said no to settings the supervisor found valid: name the field and why where it is known.

    The one setting a server refuses that passes every check here is a step count it has no runtime
    state for: SGLang builds CUDA graphs at launch for the candidate steps of its adaptive config
    (specctl writes {0, N}), so another N needs a relaunch, not a set. A tree (``topk`` above 1)
    has its launch depth and off only, whatever the relaunch.
    """
    if new.steps != current.steps and isinstance(topk, int) and topk > 1:
        return CommandError(INVALID_VALUE, (
            f"the model server drafts a tree (topk {topk}) under specctl's switch, which has its launch depth "
            f"({current.steps}) and off only; another depth is a relaunch with that tree's own "
            "--speculative-num-steps and --speculative-num-draft-tokens (docs/topk.md); nothing changed"),
            field="steps")
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
