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
    return asyncio.run(_main(config))


def stop_signals() -> tuple[signal.Signals, ...]:
    """SIGTERM, SIGINT and SIGHUP (the terminal or ssh session went away), unless SIGHUP is ignored:
    `nohup specctl run --headless &` asked to outlive the session, and a handler would undo that."""
    hangup = () if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN else (signal.SIGHUP,)
    return (signal.SIGTERM, signal.SIGINT, *hangup)


async def _main(config: SupervisorConfig) -> int:
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
    _announce(config, sup)
    printer = asyncio.create_task(_print_events(events))
    await stop.wait()
    await sup.stop()
    await printer
    return EXIT_OK


QUIET = (records.SERVER_LOG, records.SUPERVISOR_STOP)


async def _print_events(events: Subscription) -> None:
    """Events and commands, one line each on stderr, for an operator watching the terminal.

    Samples and the server's own log lines stay in the journal; the hub ends the
    stream when the supervisor stops.
    """
    async for record in events:
        if record["kind"] == "sample" or record.get("event") in QUIET:
            continue
        print(f"specctl: {_line(record)}", file=sys.stderr, flush=True)


def _line(record: dict[str, Any]) -> str:
    stamp = time.strftime("%H:%M:%S", time.localtime(record["t"]))
    name = record.get("event") or f"command {record.get('cmd')}"
    skip = {"v", "t", "kind", "event", "cmd"}
    fields = " ".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in record.items() if k not in skip)
    return f"{stamp} {name} {fields}".rstrip()


def _announce(config: SupervisorConfig, sup: Supervisor) -> None:
    what = "simulator" if sup.sim else (config.url or config.model)
    parts = [f"specctl: supervising {what} at {sup.backend.url}"]
    if config.socket_path:
        parts.append(f"control socket {config.socket_path}")
    if config.journal_path:
        parts.append(f"journal {config.journal_path}")
    print("; ".join(parts), file=sys.stderr, flush=True)
