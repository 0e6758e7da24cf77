"""The records, defined once: one JSON object per line, ``v`` and ``t`` first.

A *record* is a plain dict, typed here as a TypedDict (:data:`Sample`,
:data:`Event`, :data:`Command`); the same dicts travel through the hub, the
control socket's ``subscribe`` stream, the journal and the console, so every
consumer sees exactly what was written. A field that could not be read is
``None`` (JSON ``null``), never a made-up number. The supervisor builds records
with :func:`sample`, :func:`event` (its names are :data:`EventName`, one
constant each) and :func:`command`; a record read from outside (a journal file,
a socket) passes :func:`parse` once, which skips what does not have the shape.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from types import UnionType
from typing import Any, Final, Literal, TypedDict, Union, get_args, get_origin, get_type_hints, is_typeddict

VERSION = 1
KINDS = ("sample", "event", "command")

Kind = Literal["sample", "event", "command"]
ServerState = Literal["starting", "ready", "unreachable", "restarting", "stopped"]
GpuState = Literal["ok", "failed", "unsupported", "unread"]

# -- the shapes (docs/architecture.md shows a line of each) --------------------
# Nested shapes are total=False: a reader takes a field with .get(), and a journal
# from an older writer may lack one. A field that could not be read is None.


class Progress(TypedDict, total=False):
    """A starting server's phase, read from its log."""

    phase: str  # weights | kv_cache | cuda_graphs | ready
    fraction: float | None
    elapsed_s: float


class Server(TypedDict, total=False):
    state: str  # a ServerState; a newer writer's state is shown as it is
    url: str | None
    sim: bool
    running: float | None
    queued: float | None
    gen_tps: float | None
    accept_len: float | None
    token_usage: float | None
    decode_tokens_total: float | None
    model: str | None
    tp: int | None
    prefill_graphs: bool | None
    speculative: bool | None  # launched with speculation (/server_info's speculative_algorithm); None: unknown
    topk: int | None  # its draft tree's width (/server_info's speculative_eagle_topk); None: unknown or no draft
    version: str | None  # the SGLang release (/server_info's version); None: unknown
    pid: int | None
    restarts: int
    error: str | None
    progress: Progress | None
    uptime_s: float
    since: float  # unix time the server entered ``state`` (as the supervisor saw it)
    last_step_t: float | None  # unix time the policy's step counter last moved; None: never read


class Settings(TypedDict, total=False):
    """The policy's settings as the server reports them (policy.PolicySettings.as_dict)."""

    mode: str
    steps: int
    off_at: int
    on_at: int
    min_accept: float
    accept_slope: float
    accept_window: int
    probe_after: int
    dwell: int
    warm_below: int
    candidates: list[int]  # the depths the server was built for ([] = {0, steps})


class EarlyPublish(TypedDict, total=False):
    """The plugin's early publish (docs/sglang-plugin.md, "Fast off"): what runs and what it did."""

    setting: str  # auto, decode+extend, decode or off (SPECCTL_EARLY_PUBLISH)
    mode: str  # what runs: decode+extend, decode or off
    check: bool
    decode: int  # off decode steps published before their forward
    extend: int  # prefills published before their target forward
    swallowed: int  # SGLang's own publishes skipped after an early one
    mismatches: int  # check mode only


class OffState(TypedDict, total=False):
    fast: bool | None
    why_not: str | None
    early_publish: EarlyPublish


class Spec(TypedDict, total=False):
    """The policy's state (policy.SpecPolicy.state, as server_info.public_spec passes it on)."""

    mode: str
    on: bool
    steps: int
    reason: str | None
    switches: int
    step: int
    last_switch_step: int | None
    batch_size: int | None
    accept_mean: float | None
    verifies: int
    steps_on: int
    steps_off: int
    settings: Settings
    off_state: OffState
    depth: int  # draft steps now (0 = off), as ``steps``
    candidates: list[int]  # the depths auto may choose now: the built ones up to ``steps``
    depth_model: bool  # auto chooses among depths with a cost table
    accept_by_depth: dict[str, float] | None
    steps_at: dict[str, int]
    experts: int  # the target's routed experts from its HF config, 0 for dense (absent: an older plugin)


class GpuProcess(TypedDict, total=False):
    """A process using a GPU (NVML's compute processes; user and command from psutil, None where hidden)."""

    pid: int
    user: str | None
    mem_used: float | None  # bytes of this GPU's memory it holds; None where NVML does not say
    command: str | None


class Gpu(TypedDict, total=False):
    index: int
    name: str | None
    uuid: str | None
    state: str  # a GpuState
    error: str | None
    util: float | None
    mem_used: float | None
    mem_total: float | None
    power_w: float | None
    power_limit_w: float | None
    temp_c: float | None
    sm_clock_mhz: float | None
    mem_clock_mhz: float | None
    processes: list[GpuProcess] | None  # [] none running; None where they cannot be read


class Proc(TypedDict, total=False):
    pid: int
    name: str | None
    cpu_percent: float | None
    rss: float | None
    num_threads: int | None


class _SampleBase(TypedDict):
    v: int
    t: float
    kind: Literal["sample"]
    server: Server
    spec: Spec | None  # None when the server cannot be asked
    gpus: list[Gpu]


class Sample(_SampleBase, total=False):
    sim: bool  # the numbers are the simulator's: never to pass for measured ones
    procs: list[Proc]


class _EventBase(TypedDict):
    v: int
    t: float
    kind: Literal["event"]
    event: str  # an EventName; a name a newer writer added is still a record


class Event(_EventBase, total=False):
    """Something that happened once; which fields it has depends on ``event`` (docs/architecture.md)."""

    pid: int | None
    url: str | None
    error: str | None
    retry: bool
    returncode: int | None
    attempt: int
    delay_s: float
    lines: list[str]
    on: bool | None
    reason: str | None
    batch_size: int | None
    step: int | None
    why: str | None
    changes: dict[str, Any]
    settings: dict[str, Any]
    ok: bool
    backend: str | None
    experts: int | None  # backend_thresholds(_skipped), dense_thresholds_on_moe: routed experts, 0 dense, None unsaid
    index: int | None
    sim: bool
    lost: int


class _CommandBase(TypedDict):
    v: int
    t: float
    kind: Literal["command"]
    cmd: str
    ok: bool
    uid: int | None


class Command(_CommandBase, total=False):
    """A control command as received: applied (ok) or refused (error code and message)."""

    args: dict[str, Any]
    error: str
    message: str


Record = Sample | Event | Command

# -- event names ----------------------------------------------------------------
EventName = Literal[
    "supervisor_start", "supervisor_stop", "journal_gap",
    "server_start", "server_start_failed", "server_ready", "server_exit", "server_restart", "server_stop",
    "server_unreachable", "server_log", "attached_simulator",
    "spec_switch", "slow_off_state", "eager_prefill", "view_only", "depth_costs_missing",
    "settings", "settings_restored", "settings_restore_failed", "backend_thresholds", "backend_thresholds_failed",
    "backend_thresholds_skipped", "dense_thresholds_on_moe", "gpu_failed", "gpu_recovered", "gpu_unavailable",
    "external_change", "settings_adopted", "settings_learned", "settings_reset", "desired_restored",
    "desired_unusable", "server_busy", "calibrated",
    "calibration_probe", "calibration_reset",
]
EVENT_NAMES: tuple[EventName, ...] = get_args(EventName)

SUPERVISOR_START: Final = "supervisor_start"
SUPERVISOR_STOP: Final = "supervisor_stop"
JOURNAL_GAP: Final = "journal_gap"
SERVER_START: Final = "server_start"
SERVER_START_FAILED: Final = "server_start_failed"
SERVER_READY: Final = "server_ready"
SERVER_EXIT: Final = "server_exit"
SERVER_RESTART: Final = "server_restart"
SERVER_STOP: Final = "server_stop"
SERVER_UNREACHABLE: Final = "server_unreachable"
SERVER_LOG: Final = "server_log"
ATTACHED_SIMULATOR: Final = "attached_simulator"
ATTACHED_ROUTER: Final = "attached_router"  # --attach named an SGLang router, not a server: said once, not polled
SPEC_SWITCH: Final = "spec_switch"
SLOW_OFF_STATE: Final = "slow_off_state"
EAGER_PREFILL: Final = "eager_prefill"
VIEW_ONLY: Final = "view_only"
DEPTH_COSTS_MISSING: Final = "depth_costs_missing"  # several depths built, no table to price them
SETTINGS: Final = "settings"
SETTINGS_RESTORED: Final = "settings_restored"
SETTINGS_RESTORE_FAILED: Final = "settings_restore_failed"
BACKEND_THRESHOLDS: Final = "backend_thresholds"
BACKEND_THRESHOLDS_FAILED: Final = "backend_thresholds_failed"
BACKEND_THRESHOLDS_SKIPPED: Final = "backend_thresholds_skipped"  # measured elsewhere: the defaults stay
DENSE_THRESHOLDS_ON_MOE: Final = "dense_thresholds_on_moe"  # an attached MoE runs a dense row: told, not changed
GPU_FAILED: Final = "gpu_failed"
GPU_RECOVERED: Final = "gpu_recovered"
GPU_UNAVAILABLE: Final = "gpu_unavailable"
EXTERNAL_CHANGE: Final = "external_change"  # older journals: now settings_adopted
SETTINGS_ADOPTED: Final = "settings_adopted"  # a change made elsewhere, now the desired state
SETTINGS_LEARNED: Final = "settings_learned"  # a calibration's values, below the operator's
SETTINGS_RESET: Final = "settings_reset"  # `specctl set --reset`: back to the config
DESIRED_RESTORED: Final = "desired_restored"  # the kept desired state, read at supervisor start
DESIRED_UNUSABLE: Final = "desired_unusable"  # its file could not be read or written
SERVER_BUSY: Final = "server_busy"  # it accepts connections but does not answer in time
CALIBRATED: Final = "calibrated"  # learned thresholds published, with the table behind them
CALIBRATION_PROBE: Final = "calibration_probe"  # a short run of the state not in use, for a reading
CALIBRATION_RESET: Final = "calibration_reset"


# -- building records (the supervisor's side: typed by construction) -----------
def sample(server: Server, spec: Spec | None, gpus: list[Gpu], procs: list[Proc], *, sim: bool,
           t: float | None = None) -> Sample:
    """A periodic snapshot of everything the console shows."""
    return {"v": VERSION, "t": time.time() if t is None else t, "kind": "sample", "sim": sim,
            "server": server, "spec": spec, "gpus": gpus, "procs": procs}


def event(name: EventName, t: float | None = None, **fields: Any) -> Event:
    """Something that happened once: a switch, a server start/exit/restart, a settings change."""
    record: dict[str, Any] = {"v": VERSION, "t": time.time() if t is None else t, "kind": "event",
                              "event": name, **fields}
    return record  # type: ignore[return-value]  # the fields are the event's own (Event lists them)


def command(cmd: str, ok: bool, uid: int | None, t: float | None = None, **fields: Any) -> Command:
    """A control command as received, with the peer's uid and whether it was applied."""
    record: dict[str, Any] = {"v": VERSION, "t": time.time() if t is None else t, "kind": "command",
                              "cmd": cmd, "ok": ok, "uid": uid, **fields}
    return record  # type: ignore[return-value]


# -- reading records (from a journal file or a socket: untrusted) -------------
Check = Callable[[Any], bool]


def whole(value: Any, least: int | None = None) -> int | None:
    """``value`` where it is an int (not a bool, which Python counts as one) of at least ``least``; else None.

    Counts arrive from JSON, from SGLang's configs and from other processes: one is a
    count only when it really is an int.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return value if least is None or value >= least else None


def _shape(fields: Mapping[str, Check]) -> Check:
    """A dict whose known fields have their types (unknown ones pass: a newer writer may add some)."""
    def check(value: Any) -> bool:
        return isinstance(value, dict) and all(ok(value[k]) for k, ok in fields.items() if k in value)
    return check


def _list_of(item: Check) -> Check:
    return lambda value: isinstance(value, list) and all(item(x) for x in value)


def _check_of(hint: Any, nullable: bool) -> Check:
    """The run-time check of one declared type, read from the declaration itself.

    ``nullable``: None passes (a scalar field of a record that could not be read). A list, a dict or
    a nested record is None only where it is declared ``| None``, so a reader can walk it.
    """
    args = get_args(hint)
    if get_origin(hint) in (Union, UnionType):
        kinds = [arg for arg in args if arg is not type(None)]
        checks = [_check_of(arg, nullable=False) for arg in kinds]
        with_none = nullable or len(kinds) < len(args)
        return lambda value: (with_none and value is None) or any(ok(value) for ok in checks)
    if is_typeddict(hint):
        return _shape(_declared(hint))
    if get_origin(hint) is list:
        return _list_of(_check_of(args[0], nullable=False))
    if get_origin(hint) is dict or hint is dict:
        values = _check_of(args[1], nullable=False) if args else _anything
        return lambda value: isinstance(value, dict) and all(values(v) for v in value.values())
    if get_origin(hint) is Literal:
        scalar: Check = lambda value: value in args  # noqa: E731
    elif hint in _SCALARS:
        scalar = _SCALARS[hint]
    elif hint is Any:
        return _anything
    else:
        raise TypeError(f"records: no run-time check for the declared type {hint!r}")
    return (lambda value: value is None or scalar(value)) if nullable else scalar


def _anything(_value: Any) -> bool:
    return True


def _declared(shape: type) -> dict[str, Check]:
    """Each declared field of a TypedDict with its check: the declaration is the one source of both."""
    optional: frozenset[str] = shape.__optional_keys__  # type: ignore[attr-defined]
    return {name: _check_of(hint, nullable=name in optional) for name, hint in get_type_hints(shape).items()}


def declared_fields(shape: type, *kinds: type) -> tuple[str, ...]:
    """The fields of ``shape`` declared as one of ``kinds`` (``None`` aside), in declaration order:
    e.g. a GPU's text fields, ``declared_fields(Gpu, str)``."""
    def kind(hint: Any) -> set[Any]:
        return set(get_args(hint)) - {type(None)} if get_origin(hint) in (Union, UnionType) else {hint}
    return tuple(name for name, hint in get_type_hints(shape).items() if kind(hint) and kind(hint) <= set(kinds))


_SCALARS: dict[Any, Check] = {
    str: lambda value: isinstance(value, str),
    bool: lambda value: isinstance(value, bool),
    int: lambda value: whole(value) is not None,
    float: lambda value: isinstance(value, (int, float)) and not isinstance(value, bool),
}
_SAMPLE, _EVENT, _COMMAND = (_shape(_declared(shape)) for shape in (Sample, Event, Command))
# The fields a record of the kind must have; ``v``, ``t`` and ``kind`` are checked on their own.
_SAMPLE_NEEDS, _EVENT_NEEDS, _COMMAND_NEEDS = (
    tuple(sorted(shape.__required_keys__ - {"v", "t", "kind"}))
    for shape in (Sample, Event, Command))


def parse(raw: Any) -> Record | None:
    """The one check between JSON from outside (a journal file, a socket) and the typed records.

    Returns the record itself when it has a record's shape: a known ``kind``, a
    numeric ``t``, and every field this module declares of its declared type
    (``None`` where a value could not be read); else None, and the caller skips
    it. So code that takes a :data:`Record` needs no defensive reads. Nothing is
    copied or changed: what the writer wrote is what is shown.
    """
    if not isinstance(raw, dict) or not _is_time(raw.get("t")):
        return None
    kind = raw.get("kind")
    if kind == "sample":
        ok = all(k in raw for k in _SAMPLE_NEEDS) and _SAMPLE(raw)
    elif kind == "event":
        ok = all(k in raw for k in _EVENT_NEEDS) and _EVENT(raw)
    elif kind == "command":
        ok = all(k in raw for k in _COMMAND_NEEDS) and _COMMAND(raw)
    else:
        ok = False
    return raw if ok else None  # type: ignore[return-value]  # checked field by field above


def _is_time(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and _finite(value)


def _finite(value: int | float) -> bool:
    """math.isfinite, False (not OverflowError) for an integer past float range."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def loads(text: str | bytes) -> Any:
    """Strict JSON: no NaN or Infinity, and no number too large for a float (``1e999`` would read as
    inf, which dumps() then refuses: a request taken in could not be journalled, a record not drawn)."""
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float, parse_int=_float_sized_int)


def _float_sized_int(text: str) -> int:
    """An integer a float can hold: one past float range (a 401-digit ``t``) would pass isinstance checks and
    then raise OverflowError in every reader that does float arithmetic on it; the line is unreadable."""
    value = int(text)
    if len(text) > 300:
        try:
            float(value)
        except OverflowError:
            raise ValueError(f"the integer {text[:24]}... is too large") from None
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:24]}{'...' if len(text) > 24 else ''} is too large")
    return value


def dumps(record: Mapping[str, Any]) -> str:
    """Compact UTF-8 JSON, one line, no trailing newline."""
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
