"""The event log: switches, commands, server lifecycle and the server's own log lines.

Each record becomes one line stamped with the record's own time, so a replay
shows exactly what the operator saw live.
"""

from __future__ import annotations

import pwd
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from rich.text import Text
from textual.widgets import RichLog

from specctl.runtime.core import records as ev  # the event names (`records` is a parameter below)
from specctl.widgets.banner import clock

_SKIP = {"v", "t", "kind", "event", "cmd", "ok", "uid", "args", "sim"}
_EVENTS = {ev.SERVER_START: ("START", "plain"), ev.SERVER_READY: ("READY", "good"),
           ev.SERVER_EXIT: ("EXIT", "bad"), ev.SERVER_RESTART: ("RESTART", "warn"),
           ev.SERVER_UNREACHABLE: ("UNREACH", "bad"), ev.GPU_FAILED: ("GPU", "bad"),
           ev.GPU_RECOVERED: ("GPU", "good"), ev.SETTINGS: ("SETTINGS", "plain"),
           ev.SUPERVISOR_START: ("SUPERV", "plain"), ev.SUPERVISOR_STOP: ("SUPERV", "plain"),
           ev.SERVER_START_FAILED: ("FAILED", "bad"), ev.SERVER_STOP: ("STOP", "warn"),
           ev.GPU_UNAVAILABLE: ("GPU", "warn"), ev.SETTINGS_RESTORED: ("SETTINGS", "plain"),
           ev.SETTINGS_RESTORE_FAILED: ("SETTINGS", "bad"), ev.SLOW_OFF_STATE: ("SLOW OFF", "bad"),
           ev.EAGER_PREFILL: ("EAGER", "warn"), ev.JOURNAL_GAP: ("JOURNAL", "bad"), ev.VIEW_ONLY: ("VIEW", "warn"),
           ev.DEPTH_COSTS_MISSING: ("DEPTH", "warn"),
           ev.ATTACHED_SIMULATOR: ("SIM", "warn"), ev.ATTACHED_ROUTER: ("ROUTER", "warn"),
           ev.BACKEND_THRESHOLDS: ("SETTINGS", "plain"),
           ev.BACKEND_THRESHOLDS_FAILED: ("SETTINGS", "bad"), ev.EXTERNAL_CHANGE: ("SETTINGS", "warn"),
           ev.SETTINGS_ADOPTED: ("SETTINGS", "warn"), ev.SETTINGS_RESET: ("SETTINGS", "plain"),
           ev.SETTINGS_LEARNED: ("SETTINGS", "plain"), ev.DESIRED_RESTORED: ("SETTINGS", "plain"),
           ev.DESIRED_UNUSABLE: ("SETTINGS", "bad"), ev.SERVER_BUSY: ("BUSY", "warn"),
           ev.BACKEND_THRESHOLDS_SKIPPED: ("SETTINGS", "warn"),
           ev.DENSE_THRESHOLDS_ON_MOE: ("SETTINGS", "warn"),
           ev.CALIBRATED: ("CALIB", "plain"), ev.CALIBRATION_PROBE: ("CALIB", "plain"),
           ev.CALIBRATION_RESET: ("CALIB", "plain"),
           # made by the console itself, not journaled: its link to the supervisor went and came back
           "link_lost": ("LINK", "bad"), "link_restored": ("LINK", "good"),
           # the fleet console's per-worker results of a command (console/tui/fleet_app.py)
           "fleet": ("FLEET", "good"), "fleet_not_ok": ("FLEET", "bad")}


def describe(record: dict[str, Any]) -> tuple[str, str, str]:
    """(tag, text, tone) for one event or command record; tone is good, bad, warn or plain."""
    if record.get("kind") == "command":
        return _command(record)
    name = str(record.get("event"))
    if name == ev.SPEC_SWITCH:
        return _switch(record)
    tag, tone = _EVENTS.get(name, (name.upper()[:8], "plain"))
    if name in (ev.CALIBRATED, ev.CALIBRATION_PROBE):
        return tag, _calibration(record), tone
    if name == ev.SETTINGS and isinstance(record.get("changes"), dict) and record["changes"]:
        # what changed, not the whole set after it as well: the journal keeps both
        return tag, _fields({"event": name, **record["changes"]}), tone
    return tag, _fields(record), tone


def _calibration(record: dict[str, Any]) -> str:
    """What calibration learned, and from how much: the journal keeps the table behind it, the log says the
    gist (``learned off_at=48 on_at=24 from 1,904 steps in 5 buckets``); a probe, which state for which bucket."""
    if record.get("event") == ev.CALIBRATION_PROBE:
        phase = "probing" if record.get("phase") == "begin" else "probe over:"
        return f"{phase} {record.get('state')} at batch bucket {record.get('bucket')}" + (
            "" if record.get("ok", True) else " (not sent)")
    changes = record.get("changes") if isinstance(record.get("changes"), dict) else {}
    readings = record.get("readings") if isinstance(record.get("readings"), dict) else {}
    steps = sum(v for v in readings.values() if isinstance(v, int))
    learned = " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in changes.items())
    return (f"learned {learned or 'nothing new'} from {steps:,} steps in {len(readings)} buckets"
            + ("" if record.get("ok", True) else " (the server refused it)"))


def _switch(record: dict[str, Any]) -> tuple[str, str, str]:
    """A switch, with the depths either side where the record has them (a server built for several).

    Between two positive depths it is a change of depth, not of speculation: ``depth 3 → 2 (depth, ...)``.
    """
    on = bool(record.get("on"))
    why = f"({record.get('reason')}, batch {record.get('batch_size')})"
    old, new = record.get("from"), record.get("to")
    if not (isinstance(old, int) and isinstance(new, int)):  # a journal from before depths
        return "SWITCH", f"speculation {'ON' if on else 'OFF'} {why}", "good" if on else "bad"
    depths = f"depth {old} → {new}"
    if old > 0 and new > 0:
        return "SWITCH", f"{depths} {why}", "good"
    return "SWITCH", f"speculation {'ON' if new else 'OFF'}, {depths} {why}", "good" if new else "bad"


def _command(record: dict[str, Any]) -> tuple[str, str, str]:
    args = record.get("args") if isinstance(record.get("args"), dict) else {}
    shown = " ".join(f"{k}={v}" for k, v in _flatten(args))
    uid = record.get("uid")
    who = f"uid {uid}" if uid is not None else "uid ?"
    name = record.get("user") or (user_name(uid) if isinstance(uid, int) else None)
    user = f" ({name})" if name else ""
    outcome = "ok" if record.get("ok") else f"refused: {record.get('message') or record.get('error')}"
    return "CMD", f"{record.get('cmd')} {shown} by {who}{user}: {outcome}", "plain" if record.get("ok") else "bad"


@lru_cache(maxsize=64)
def user_name(uid: int) -> str | None:
    """The local login of a uid, looked up once (a journal from another host may not have it)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return None


def _flatten(args: dict[str, Any]) -> Iterable[tuple[str, Any]]:
    for key, value in args.items():
        if isinstance(value, dict):
            yield from value.items()
        else:
            yield key, value


def _fields(record: dict[str, Any]) -> str:
    name = str(record.get("event"))
    fields = {k: v for k, v in record.items() if k not in _SKIP and v is not None}
    rest = " ".join(f"{k}={v}" for k, v in _flatten(fields))
    return f"{name} {rest}".strip()


class EventLog(RichLog):
    """A RichLog that takes records; ``show(records, clear=...)`` appends them."""

    DEFAULT_CSS = """
    EventLog {
        height: 1fr;
        min-height: 3;
        background: $surface;
        border: none;
        padding: 0 1;
        scrollbar-size-vertical: 1;
        & > .event-log--time { color: $foreground-muted; }
        & > .event-log--plain { text-style: bold; }
        & > .event-log--good { color: $success; text-style: bold; }
        & > .event-log--bad { color: $error; text-style: bold; }
        & > .event-log--warn { color: $warning; text-style: bold; }
    }
    """
    COMPONENT_CLASSES = {"event-log--time", "event-log--plain", "event-log--good", "event-log--bad",
                         "event-log--warn"}

    def __init__(self, **kwargs: Any) -> None:
        # wrap: a refusal or an error is read whole, not cut at 80 columns
        super().__init__(max_lines=500, wrap=True, markup=False, auto_scroll=True, min_width=20, **kwargs)

    def show(self, records: list[dict[str, Any]], clear: bool = False) -> None:
        if clear:
            self.clear()
        # wrapped at the log's own width (the console's may differ, in a test); unknown yet: RichLog defers
        width = self.scrollable_content_region.width or None
        for record in records:
            if record.get("event") == ev.SERVER_LOG:  # the server's own log: one line each, dimmed
                lines = record.get("lines")
                for text in lines if isinstance(lines, list) else [lines]:
                    self.write(self._stamped(record, "LOG", "time", str(text)), width=width)
            else:
                tag, text, tone = describe(record)
                self.write(self._stamped(record, tag, tone, text), width=width)

    def _stamped(self, record: dict[str, Any], tag: str, tone: str, text: str) -> Text:
        style = self.get_component_rich_style
        t = record.get("t")
        stamp = clock(float(t)) if isinstance(t, (int, float)) else "--:--:--"
        return Text.assemble((stamp, style("event-log--time", partial=True)), " ",
                             (f"{tag:<8}", style(f"event-log--{tone}", partial=True)), " ", text)
