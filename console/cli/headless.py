"""``specctl run --headless``: the supervisor as a plain asyncio program, no Textual.

It runs until SIGTERM or SIGINT, then stops everything it started. Start-up
problems (a bad flag, a socket already served by another supervisor, a journal
that cannot be opened) are one line on stderr and a non-zero exit, never a
traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from typing import Any

from specctl.console.cli.exit_codes import EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from specctl.runtime.control.hub import Subscription
from specctl.runtime.core import records
from specctl.runtime.supervisor.config import ConfigError, SupervisorConfig
from specctl.runtime.supervisor.lifecycle import Supervisor


def run_headless(args: argparse.Namespace) -> int:
    try:
        config = SupervisorConfig.from_args(args)
    except ConfigError as exc:
        print(f"specctl run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    port = getattr(args, "metrics_port", None)
    if port is not None and not 0 <= port <= 65535:
        print(f"specctl run: --metrics-port must be between 0 and 65535, got {port}", file=sys.stderr)
        return EXIT_USAGE
    return asyncio.run(_main(config, metrics=(getattr(args, "metrics_host", "127.0.0.1"), port)))


def stop_signals() -> tuple[signal.Signals, ...]:
    """SIGTERM, SIGINT and SIGHUP (the terminal or ssh session went away), unless SIGHUP is ignored:
    `nohup specctl run --headless &` asked to outlive the session, and a handler would undo that."""
    hangup = () if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN else (signal.SIGHUP,)
    return (signal.SIGTERM, signal.SIGINT, *hangup)


async def _main(config: SupervisorConfig, metrics: tuple[str, int | None] = ("127.0.0.1", None)) -> int:
    sup = Supervisor(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in stop_signals():
        loop.add_signal_handler(sig, stop.set)
    events = sup.hub.subscribe(maxsize=256)  # before start, so its own events are printed too
    try:
        await sup.start()
    except Exception as exc:  # the operator's environment, not our bug: say what and stop cleanly
        await sup.stop()
        print(f"specctl run: cannot start: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    exporter = None
    if metrics[1] is not None:  # opt-in: Prometheus's view of this host (runtime/supervisor/exporter.py)
        from specctl.runtime.supervisor.exporter import Exporter

        exporter = Exporter(sup, *metrics)
        try:
            await exporter.start()
        except OSError as exc:
            await sup.stop()
            print(f"specctl run: cannot serve --metrics-port: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_REFUSED
        print(f"specctl: Prometheus metrics at http://{metrics[0]}:{exporter.port}/metrics", file=sys.stderr,
              flush=True)
    _announce(config, sup)
    printer = asyncio.create_task(_print_events(events))
    await stop.wait()
    if exporter is not None:
        await exporter.stop()
    await sup.stop()
    await printer
    return EXIT_OK


QUIET = (records.SERVER_LOG, records.SUPERVISOR_STOP)


ECHO_BURST = 10  # lines of one kind printed at once before the rate limit applies
ECHO_PER_S = 1.0  # then this many a second, per kind
ECHO_WIDTH = 2000  # characters of one line


class EchoLimit:
    """A token bucket per kind of line (an event's name, a command's name), as journald rate-limits a unit.

    The journal keeps every record; stderr is for a person, and a client that
    floods refused commands must not flood the terminal (or a log collector)
    with them. Lines held back are counted, and the count is said with the
    next line of that kind, or at the end.
    """

    def __init__(self, burst: int = ECHO_BURST, per_s: float = ECHO_PER_S) -> None:
        self.burst, self.per_s = burst, per_s
        self._tokens: dict[str, tuple[float, float]] = {}  # kind -> (tokens, when)
        self.held: dict[str, int] = {}

    def allow(self, kind: str, now: float) -> bool:
        tokens, when = self._tokens.get(kind, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - when) * self.per_s)
        if tokens < 1.0:
            self._tokens[kind] = (tokens, now)
            self.held[kind] = self.held.get(kind, 0) + 1
            return False
        self._tokens[kind] = (tokens - 1.0, now)
        return True

    def said(self, kind: str) -> str:
        """The suffix for a line of ``kind``: how many of its kind were held back since the last one."""
        held = self.held.pop(kind, 0)
        return f" ({held} more {kind} lines not shown; the journal has them)" if held else ""


async def _print_events(events: Subscription) -> None:
    """Events and commands, one line each on stderr, for an operator watching the terminal.

    Samples and the server's own log lines stay in the journal; the hub ends the
    stream when the supervisor stops. Each kind of line is rate-limited (EchoLimit).
    """
    limit = EchoLimit()
    async for record in events:
        if record["kind"] == "sample" or record.get("event") in QUIET:
            continue
        kind = record.get("event") or f"command {record.get('cmd')}"
        if limit.allow(str(kind)[:64], time.monotonic()):
            print(f"specctl: {_line(record)[:ECHO_WIDTH]}{limit.said(str(kind)[:64])}", file=sys.stderr, flush=True)
    for kind, held in limit.held.items():
        print(f"specctl: {held} more {kind} lines not shown; the journal has them", file=sys.stderr, flush=True)


def _line(record: dict[str, Any]) -> str:
    stamp = time.strftime("%H:%M:%S", time.localtime(record["t"]))
    name = record.get("event") or f"command {record.get('cmd')}"
    skip = {"v", "t", "kind", "event", "cmd"}
    fields = " ".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in record.items() if k not in skip)
    return f"{stamp} {name} {fields}".rstrip()


def _announce(config: SupervisorConfig, sup: Supervisor) -> None:
    if config.url and not sup.sim:  # attached: the address is all there is to say
        parts = [f"specctl: attached to {sup.backend.url}"]
    else:
        parts = [f"specctl: supervising {'simulator' if sup.sim else config.model} at {sup.backend.url}"]
    if config.socket_path:
        parts.append(f"control socket {config.socket_path}")
    if config.journal_path:
        parts.append(f"journal {config.journal_path}")
    print("; ".join(parts), file=sys.stderr, flush=True)
