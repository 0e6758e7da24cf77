"""``specctl tui`` and ``specctl replay``: build a link from the arguments and run the console.

Errors a user can fix (bad arguments, no supervisor behind --connect, a
missing journal) are reported before the screen takes over the terminal.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from specctl.console.cli.exit_codes import EXIT_NO_SUPERVISOR, EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from specctl.console.tui.links import MAX_SPEED, MIN_SPEED, Link, LinkError, ReplayLink, SocketLink
from specctl.runtime.core import records
from specctl.runtime.supervisor.journal import JournalReader, read_records


def run_tui(args: argparse.Namespace) -> int:
    """The live console: an in-process supervisor, or --connect to a running one (or a fleet: --router)."""
    if getattr(args, "router", None) or getattr(args, "workers", None):
        from specctl.console.tui.fleet_app import run_fleet

        return run_fleet(args)
    if args.connect:
        link: Link = SocketLink(args.connect)
        problem = _probe(link)
        if problem:
            print(f"specctl: {problem}", file=sys.stderr)  # it names the path and how to start one
            return EXIT_NO_SUPERVISOR
    else:
        from specctl.console.tui.links import LocalLink
        from specctl.runtime.supervisor.config import ConfigError, SupervisorConfig
        from specctl.runtime.supervisor.lifecycle import Supervisor

        try:
            config = SupervisorConfig.from_args(args)
        except ConfigError as exc:
            print(f"specctl: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if config.socket_path is not None and not _probe(SocketLink(config.socket_path)):
            return _offer_connect(config.socket_path)  # a supervisor answers there: a second one could not start
        if problem := _socket_folder_problem(config.socket_path):
            print(f"specctl tui: cannot start: {problem}", file=sys.stderr)  # as `specctl run` says it
            return EXIT_REFUSED
        link = LocalLink(Supervisor(config))
    return _run(link)


def _socket_folder_problem(path: Path | None) -> str | None:
    """Why the supervisor would refuse the socket's folder, said before the screen takes the terminal
    (a console whose supervisor cannot start is a dead one). A folder not made yet is the supervisor's to make."""
    from specctl.runtime.control.ownership import ControlSocketError, check_runtime_dir

    if path is None or not path.parent.is_dir():
        return None
    try:
        check_runtime_dir(path.parent)
    except ControlSocketError as exc:
        return str(exc)
    return None


def _offer_connect(path: Path) -> int:
    """A supervisor already holds the socket: offer to view it (``--connect``) rather than open a dead console.

    In a terminal the operator is asked (Enter means yes); without one, the message says what to type.
    """
    told = (f"a supervisor is already running on {path}: view and steer it with "
            f"`specctl tui --connect {path}`, or give this console another --socket")
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print(f"specctl: {told}", file=sys.stderr)
        return EXIT_USAGE
    try:
        answer = input(f"specctl: a supervisor is already running on {path}. Connect to it instead? [Y/n] ")
    except EOFError:
        answer = "n"
    if answer.strip().lower() not in ("", "y", "yes"):
        print(f"specctl: {told}", file=sys.stderr)
        return EXIT_USAGE
    return _run(SocketLink(path))


PRECOUNT_BYTES = 32 << 20  # up to this, malformed records are counted (a whole parse) before the screen shows


def run_replay(args: argparse.Namespace) -> int:
    """A journal played back in the same screens, with pause, seek and speed."""
    path = Path(args.file)
    if not path.is_file():
        print(f"specctl: no journal at {path}", file=sys.stderr)
        return EXIT_USAGE
    if not MIN_SPEED <= args.speed <= MAX_SPEED:  # NaN fails too
        print(f"specctl: --speed must be between {MIN_SPEED:g} and {MAX_SPEED:g}, got {args.speed:g}", file=sys.stderr)
        return EXIT_USAGE
    problem = _journal_problem(path)
    if problem:
        print(f"specctl: {problem}", file=sys.stderr)
        return EXIT_USAGE
    counted = path.stat().st_size <= PRECOUNT_BYTES  # a large journal is indexed, not parsed, before it shows
    skipped = _malformed(path) if counted else 0
    if skipped:  # said before the screen takes the terminal; it is there again when the console exits
        print(f"specctl replay: skipped {skipped} malformed records of {path}", file=sys.stderr)
    link = ReplayLink(path, speed=args.speed)
    code = _run(link)
    if not counted and link.skipped:  # those met while playing: the rest of a large journal was not read
        print(f"specctl replay: skipped {link.skipped} malformed records of {path} (of those played)",
              file=sys.stderr)
    return code


def _malformed(path: Path) -> int:
    """Lines the replay will not show: corrupt, of the wrong shape, or not a record (records.parse).

    A torn last line is not counted: that is a writer that died mid-line, not damage.
    """
    reader = JournalReader(path)
    try:
        unparsed = sum(records.parse(raw) is None for raw in reader)
    except OSError:
        return 0  # _journal_problem has read it; a file that goes away now is the replay's to say
    return reader.skipped + unparsed


def _journal_problem(path: Path) -> str:
    """Why ``path`` cannot be replayed, or "": checked here so that a wrong file is a message, not an empty screen."""
    try:
        if next(read_records(path), None) is not None:
            return ""
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    return f"{path} holds no journal records (a journal is what `specctl run --log FILE.jsonl` writes)"


def _probe(link: SocketLink) -> str:
    """Connect once and leave, so a wrong path fails here with a message, not inside the screen."""
    async def probe() -> str:
        try:
            await link.open()
        except LinkError as exc:
            return exc.message
        finally:
            await link.close()
        return ""

    return asyncio.run(probe())


def _run(link: Link) -> int:
    from specctl.console.tui.app import SpecctlApp
    from specctl.console.tui.prefs import load_prefs

    app = SpecctlApp(link, theme=load_prefs().get("theme"))
    result = app.run()
    return EXIT_OK if result is None else int(result)
