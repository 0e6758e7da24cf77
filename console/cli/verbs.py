"""The one-shot verbs (``specctl force-off``, ``set``, ``status``, ...), spoken over the control socket.

Plain asyncio through runtime.control_client: no Textual, so a verb starts fast
and works on a headless box. Every user mistake ends in a one-line message and
an exit code, never a traceback: 0 ok, 1 refused, 2 usage, 3 no supervisor.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specctl.console.cli.exit_codes import EXIT_NO_SUPERVISOR, EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from specctl.runtime.control.client import ControlError, NoSupervisor, ProtocolError, call
from specctl.runtime.core import records, view_only
from specctl.runtime.core.errors import MALFORMED
from specctl.runtime.core.in_between import switching
from specctl.runtime.core.settings import MAX_BATCH, SettingsError, check_ranges
from specctl.runtime.supervisor import config, config_file, paths

GIB = 1024**3

SERVER_TIMEOUT = 300.0  # a restart may wait for the model server to come back


class UsageError(Exception):
    """The command line itself is wrong; nothing was sent."""


def run_verb(args: argparse.Namespace, verb: Callable[[Path, argparse.Namespace], int] | None = None) -> int:
    """Run one verb (``verb``, or the one VERBS names); returns the process exit code."""
    try:
        path = Path(args.socket) if args.socket else config_file.socket_path()
    except config_file.ConfigFileError as e:
        if args.verb == "locate":  # the way to find the file that is wrong
            _locate(None)
        return _fail(f"specctl: {e}", EXIT_USAGE)
    if args.verb == "locate":
        return _locate(path)
    try:
        return (verb or VERBS[args.verb])(path, args)
    except UsageError as e:
        return _fail(f"specctl {args.verb}: {e}", EXIT_USAGE)
    except NoSupervisor as e:
        return _fail(f"specctl: {e}", EXIT_NO_SUPERVISOR)
    except ProtocolError as e:
        return _fail(f"specctl: {e}", EXIT_NO_SUPERVISOR)
    except ControlError as e:
        if e.details.get("kind") == MALFORMED:  # the value itself is wrong, on any server: a usage error
            return _fail(f"specctl {args.verb}: {_describe(e)}", EXIT_USAGE)
        return _fail(f"specctl {args.verb}: refused: {_describe(e)}", EXIT_REFUSED)
    except BrokenPipeError:  # `specctl status | head -1`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _fail(message: str, code: int) -> int:
    print(message, file=sys.stderr)
    return code


def _describe(e: ControlError) -> str:
    """The message, prefixed with the field it names unless it already starts with it."""
    field = e.details.get("field")
    if field and not e.message.startswith(f"{field}"):
        return f"{field}: {e.message}"
    return e.message


# -- mode ---------------------------------------------------------------------------

def _mode(mode: str) -> Callable[[Path, argparse.Namespace], int]:
    def verb(path: Path, args: argparse.Namespace) -> int:
        steps = getattr(args, "steps", None)
        if steps is not None:
            _checked({"steps": steps})
        result = call(path, "mode", {"mode": mode} if steps is None else {"mode": mode, "steps": steps})
        print(_mode_line(result["settings"]) + _pending(result))
        return EXIT_OK
    return verb


def _pending(result: dict[str, Any]) -> str:
    """The command has reached the server but not yet run: said, so the next status is no surprise."""
    pending = result.get("pending")
    return f" [{pending}]" if isinstance(pending, str) else ""


def _mode_line(settings: dict[str, Any]) -> str:
    mode = settings.get("mode")
    if mode == "off":
        return "speculation forced OFF (mode off; `specctl auto` hands it back to the policy)"
    if mode == "on":
        return (f"speculation forced ON at {settings.get('steps')} draft steps "
                "(mode on; `specctl auto` hands it and the depth back to the policy)")
    return (f"speculation under the policy (mode auto: {_load_words(settings)}{_auto_depths(settings)})")


def _load_words(settings: dict[str, Any]) -> str:
    """off_at and on_at in words: the sentinel off_at (MAX_BATCH) is "never off for load", not a number."""
    off_at = settings.get("off_at")
    if isinstance(off_at, int) and off_at >= MAX_BATCH:
        return "never off for load, only for low acceptance"
    return f"off at batch >= {off_at}, on at <= {settings.get('on_at')}"


def _auto_depths(settings: dict[str, Any]) -> str:
    """The depths auto chooses among on a server built for several, and how to widen them.

    Why: ``force-on --steps 2`` sets ``steps``, the deepest depth auto may use, and it stays after
    ``specctl auto``; an operator who pinned 2 for a while would not know auto can no longer reach 3.
    """
    built, steps = settings.get("candidates") or [], settings.get("steps")
    if not isinstance(steps, int) or not _several_depths(built):
        return ""
    usable = ",".join(str(d) for d in built if isinstance(d, int) and d <= steps)
    if max(built) <= steps:
        return f"; depths {usable}"
    return (f"; depths {usable}, up to steps {steps}: `specctl set steps={max(built)}` lets it use all of "
            f"{','.join(map(str, built))}")


def _several_depths(built: object) -> bool:
    """A server built for more than one positive depth: only there is the depth worth a word."""
    return isinstance(built, list) and len([d for d in built if isinstance(d, int) and d > 0]) > 1


# -- set ----------------------------------------------------------------------------

def _checked(changes: dict[str, Any]) -> dict[str, Any]:
    """Names, types and each value's own range checked here: a mistake is a usage error (exit 2)
    with or without a supervisor to ask; what depends on the server's state is its to refuse (exit 1)."""
    try:
        return check_ranges(changes)
    except SettingsError as e:
        raise UsageError(str(e)) from None


def parse_pairs(pairs: list[str]) -> dict[str, Any]:
    """``["off_at=64", "mode=off"]`` -> ``{"off_at": 64, "mode": "off"}``, checked as :func:`_checked`."""
    try:
        pairs, calibrate = config.calibrate_pair(pairs)  # the supervisor's own switch, not a policy setting
        checked = _checked(config.parse_pairs(pairs))
        return checked if calibrate is None else {**checked, "calibrate": "on" if calibrate else "off"}
    except config.ConfigError as e:
        raise UsageError(f"{e} (e.g. specctl set off_at=64 on_at=32)") from None


def _set(path: Path, args: argparse.Namespace) -> int:
    if getattr(args, "reset", False):
        if args.pairs:
            raise UsageError("--reset takes no KEY=VALUE (it returns every setting an operator chose to the "
                             "config file's)")
        result = call(path, "set", {"reset": True})
        reset = result.get("reset") or {}
        if not reset:
            print("nothing to reset: no setting was chosen by an operator or adopted from elsewhere")
        else:
            names = ", ".join(sorted("the pinned depth" if k == "pin" else k for k in reset))
            print(f"reset {names} to a calibrated or the config file's value (else the server's own at its "
                  "start): " + _settings_line(result["settings"]) + _pending(result))
        return EXIT_OK
    if not args.pairs:
        raise UsageError("give KEY=VALUE pairs (e.g. specctl set off_at=64 on_at=32) or --reset")
    changes = parse_pairs(args.pairs)
    result = call(path, "set", {"settings": changes})
    print("settings: " + _settings_line(result["settings"]) + _pending(result))
    if "calibrate" in result:
        print(f"calibrate: {result['calibrate']}")
    return EXIT_OK


def _settings_line(settings: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in settings.items())


# -- status -------------------------------------------------------------------------

def _status(path: Path, args: argparse.Namespace) -> int:
    answer = call(path, "status")
    sample = answer["sample"]
    if args.json:
        print("null" if sample is None else records.dumps(sample))
    elif sample is None:
        print(f"a supervisor answers at {path}, but it has no sample yet")
    else:
        print("\n".join(summary(sample) + _desired_lines(answer.get("desired"))))
    return EXIT_OK


def _desired_lines(desired: Any) -> list[str]:
    """What operators (and others) asked for and who: the settings a restart of server or supervisor keeps;
    and a calibration probe while one runs, so a mode nobody forced does not read as a mystery."""
    if not isinstance(desired, dict):
        return []
    probe = [f"probe      calibration runs speculation {desired['probe'].upper()} for a few steps to measure it; "
             "auto resumes after"] if desired.get("probe") in ("on", "off") else []
    if not isinstance(desired.get("who"), dict):
        return probe
    parts = []
    for key, who in desired["who"].items():
        value = (desired.get("settings") or {}).get(key)
        if not isinstance(who, dict) or who.get("source") == "config":
            continue
        if who.get("pinned") is not None:
            if key == "steps":
                parts.append(f"depth {value} pinned ({_by(who)}; `specctl auto` hands it back)")
            continue
        parts.append(f"{key} {_shown(key, value)} ({_by(who)})")
    return ([f"desired    {'; '.join(parts)}"] if parts else []) + probe


def _by(who: dict[str, Any]) -> str:
    source = who.get("source")
    words = {"operator": "operator" + (f" uid {who['by']}" if who.get("by") is not None else ""),
             "elsewhere": "adopted from elsewhere", "calibration": "calibration"}.get(source, str(source))
    t = who.get("t")
    return words + (f" at {_clock(t)}" if isinstance(t, (int, float)) else "")


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def _shown(key: str, value: Any) -> str:
    if key == "off_at" and isinstance(value, int) and value >= MAX_BATCH:
        return "never (never off for load)"
    if key == "on_at" and isinstance(value, int) and value >= MAX_BATCH - 1:
        return f"{value} (with off_at never: no load rule)"
    return str(value)


def _v(value: Any, fmt: str = "{}") -> str:
    """A field for people: an unreadable (null) value shows as '-', never as a made-up number."""
    return "-" if value is None else fmt.format(value)


def summary(sample: dict[str, Any]) -> list[str]:
    """The human-readable ``specctl status``: one line per topic, one per GPU."""
    server = sample.get("server") or {}
    lines = [_server_line(server, bool(sample.get("sim")), sample.get("t"))]
    why = view_only.reason(sample)
    lines += _view_only_lines(why, server.get("tp")) if why else _spec_lines(sample.get("spec"), server.get("topk"))
    if server.get("prefill_graphs") is False:
        lines.append("prefill    EAGER: prefill CUDA graphs are off; with prompts arriving the off state "
                     "costs about 5 % more (docs/sglang-plugin.md)")
    lines.append(f"load       running {_v(server.get('running'), '{:.0f}')}  "
                 f"queued {_v(server.get('queued'), '{:.0f}')}  "
                 f"{_v(server.get('gen_tps'), '{:.1f}')} tok/s  "
                 f"accept len {_v(server.get('accept_len'), '{:.2f}')}")
    lines += [_gpu_line(gpu) for gpu in sample.get("gpus") or []]
    return lines


def _not_answering(state: str, server: dict[str, Any], t: Any) -> str:
    """``BUSY since 12:01:03, last step 9.8 s ago``: a server that takes connections and works is not gone
    (``UNREACHABLE``: it refuses or resets them)."""
    words = state.upper()
    since, last = server.get("since"), server.get("last_step_t")
    if isinstance(since, (int, float)):
        words += f" since {_clock(since)}"
    if isinstance(last, (int, float)) and isinstance(t, (int, float)):
        words += f", last step {max(0.0, t - last):.1f} s ago"
    return words + (" (it takes connections but does not answer in time: working, not gone)"
                    if state == "busy" else "")


def _view_only_lines(why: str, tp: Any) -> list[str]:
    """What the server cannot tell, said as such, with the fix: not a row of '-' that reads like a fault.

    The words are runtime/core/view_only.py's, as the supervisor's refusals and the console's banner.
    """
    return [f"spec       {view_only.headline(why)}",
            f"fix        {view_only.fix(why, tp)}; until then mode and set are refused"]


def _server_line(server: dict[str, Any], sim: bool, t: Any = None) -> str:
    state = _v(server.get("state"))
    if state in ("busy", "unreachable"):
        state = _not_answering(state, server, t)
    progress = server.get("progress")
    if isinstance(progress, dict) and state == "starting":
        fraction = progress.get("fraction")
        state += f" ({_v(progress.get('phase'))}" + ("" if fraction is None else f" {fraction:.0%}") + ")"
    parts = [f"server     {state}", f"pid {_v(server.get('pid'))}", _v(server.get("url"))]
    if server.get("version"):
        parts.append(f"SGLang {server['version']}")
    if server.get("error"):
        parts.append(f"error: {server['error']}")
    if sim:
        parts.append("[SIM]")
    return "  ".join(parts)


def _spec_lines(spec: dict[str, Any] | None, topk: object = None) -> list[str]:
    """The spec lines; ``topk`` above 1 says the server drafts a tree (under specctl's switch, as it steers it)."""
    if spec is None:
        return ["spec       unknown (the model server cannot be asked)"]
    on = spec.get("on")
    state = "-" if on is None else ("ON" if on else "OFF")
    if (pending := switching(spec)) is not None:  # the command has landed, the switch waits for a decode step
        state += f" (forced {spec.get('mode')}; {pending})"
    tree = f", a tree of topk {topk}" if isinstance(topk, int) and topk > 1 else ""
    steps = f" ({spec.get('steps')} steps{tree})" if on else ""
    built = (spec.get("settings") or {}).get("candidates") if isinstance(spec.get("settings"), dict) else None
    if _several_depths(built):
        # built for several depths: the one running and those auto may choose among now, as the banner says it
        steps = f" (depth {_v(spec.get('depth'))} of {','.join(map(str, spec.get('candidates') or []))})"
    lines = [f"spec       {state}{steps}  mode {_v(spec.get('mode'))}  reason {_v(spec.get('reason'))}  "
             f"switches {_v(spec.get('switches'))}",
             f"last switch  {_last_switch(spec)}"]
    settings = spec.get("settings")
    if isinstance(settings, dict):
        lines.append(_thresholds_line(settings))
    off = spec.get("off_state")
    if isinstance(off, dict) and off.get("fast") is False:
        lines.append(f"off state  SLOW: {_v(off.get('why_not'))}")
    return lines


def _thresholds_line(settings: dict[str, Any]) -> str:
    """The thresholds auto works by, as `specctl set` names them: what an operator checks after a switch.

    Why here: the supervisor may have set them for the server's attention backend
    (the journal's ``backend_thresholds``), so they are not always the defaults
    nor what the operator last typed.
    """
    floor = f"{_v(settings.get('min_accept'), '{:g}')}"
    if settings.get("accept_slope"):
        floor += f" + {settings['accept_slope']:g} x batch"
    off_at = settings.get("off_at")
    if off_at is not None and off_at >= MAX_BATCH:  # never off for load: on_at cannot come into play
        load = "off_at never"
    else:
        load = f"off_at {_v(off_at)}  on_at {_v(settings.get('on_at'))}"
    return f"thresholds {load}  accept floor {floor}  dwell {_v(settings.get('dwell'))}"


def _last_switch(spec: dict[str, Any]) -> str:
    """The step of the last switch and how long ago in steps (a sample carries no switch list: the journal has them)."""
    last, step = spec.get("last_switch_step"), spec.get("step")
    if last is None:
        return "none yet"
    ago = f", {step - last} steps ago" if isinstance(step, int) and isinstance(last, int) else ""
    return f"at step {last} ({_v(spec.get('reason'))}){ago}"


def _gpu_line(gpu: dict[str, Any]) -> str:
    head = f"gpu {_v(gpu.get('index'))}      {_v(gpu.get('name'))}"
    if gpu.get("state") not in (None, "ok"):
        return f"{head}  {gpu['state']}" + (f": {gpu['error']}" if gpu.get("error") else "")
    used, total = gpu.get("mem_used"), gpu.get("mem_total")
    mem = f"{_v(used and used / GIB, '{:.1f}')}/{_v(total and total / GIB, '{:.1f}')} GiB"  # as the console, nvitop
    return (f"{head}  util {_v(gpu.get('util'), '{:.0f}%')}  mem {mem}  "
            f"power {_v(gpu.get('power_w'), '{:.0f} W')}  temp {_v(gpu.get('temp_c'), '{:.0f} C')}")


# -- server and locate --------------------------------------------------------------

def _server(path: Path, args: argparse.Namespace) -> int:
    result = call(path, "server", {"action": args.action}, answer_timeout=SERVER_TIMEOUT)
    print(f"server: {_v(result.get('state'))}")
    return EXIT_OK


def _locate(socket: Path | None) -> int:
    """Where things live; needs no supervisor (nor a config file that reads: None when it does not)."""
    print(f"socket  {'(unknown: the config file is wrong)' if socket is None else socket.absolute()}")
    print(f"config  {paths.config_file()}")
    print(f"state   {paths.state_dir()}")
    return EXIT_OK


VERBS: dict[str, Callable[[Path, argparse.Namespace], int]] = {
    "force-off": _mode("off"), "force-on": _mode("on"), "auto": _mode("auto"),
    "set": _set, "status": _status, "server": _server,
}
