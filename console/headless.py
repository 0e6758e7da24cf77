"""``specctl run --headless``: the supervisor as a plain asyncio program, no Textual.

It runs until SIGTERM or SIGINT, then stops everything it started. Start-up
problems (a bad flag, a socket already served by another supervisor, a journal
that cannot be opened) are one line on stderr and a non-zero exit, never a
traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from specctl.runtime.config import ConfigError, SupervisorConfig
from specctl.runtime.supervisor import Supervisor

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2


def run_headless(args: argparse.Namespace) -> int:
    try:
        config = SupervisorConfig.from_args(args)
    except ConfigError as exc:
        print(f"specctl run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return asyncio.run(_main(config))


async def _main(config: SupervisorConfig) -> int:
    sup = Supervisor(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await sup.start()
    except Exception as exc:  # the operator's environment, not our bug: say what and stop cleanly
        await sup.stop()
        print(f"specctl run: cannot start: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    _announce(config, sup)
    await stop.wait()
    await sup.stop()
    return EXIT_OK


def _announce(config: SupervisorConfig, sup: Supervisor) -> None:
    what = "simulator" if sup.sim else (config.url or config.model)
    parts = [f"specctl: supervising {what} at {sup.backend.url}"]
    if config.socket_path:
        parts.append(f"control socket {config.socket_path}")
    if config.journal_path:
        parts.append(f"journal {config.journal_path}")
    print("; ".join(parts), file=sys.stderr, flush=True)
