"""The control socket: a Unix socket, one JSON object per line each way, shaped like QMP.

The server greets first, then answers requests ``{"id", "cmd", "args"}`` with
``{"id", "ok": true, "result"}`` or ``{"id", "ok": false, "error": {"code",
"message", ...}}``. It owns only framing, the greeting, the peer check and
``subscribe`` (``{"history": true}`` in its args: the hub's recent records first,
each line ``{"record", "history": true}``, then the live stream; without it, the
live stream alone); every other command goes to ``target.execute`` (the supervisor),
so a command typed in the in-process console and one sent over the socket take
the same path and are journaled the same way.

This module binds the socket, accepts, checks the peer and stops; who gets a
place at the cap is admission.py's, what a client's requests do is connection.py's.
Nothing a client sends can stop the server: every line is checked before it
reaches the target, an over-long line is discarded, an unexpected exception
becomes an ``internal`` answer, and a subscriber that stops reading is dropped
instead of slowing the supervisor down.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import resource
import socket
import stat
from pathlib import Path
from typing import Any

from specctl.runtime.control.admission import (
    EVICT_IDLE_S,
    FD_HEADROOM,
    GRACE_S,
    Line,
    Places,
    default_reserve,
    fd_cap,
)
from specctl.runtime.control.connection import CLOSE_GRACE_S, Connection, ControlTarget, Dropped, abort
from specctl.runtime.control.framing import MAX_LINE, dumps, error
from specctl.runtime.control.ownership import (
    ControlSocketError,
    SocketInUse,
    check_runtime_dir,
    peer_allowed,
    peer_uid,
)
from specctl.runtime.core.errors import FORBIDDEN, UNAVAILABLE

__all__ = ["FD_HEADROOM", "ControlServer", "ControlTarget"]

log = logging.getLogger(__name__)

class _Quiet:
    """Warnings said at most once per ``every`` seconds per kind, each with how many like it were held back:
    a flood of forbidden connections or failing clients is a few lines in the log, not one per connection."""

    def __init__(self, every: float = 60.0) -> None:
        self.every = every
        self._next: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def warn(self, kind: str, message: str, *args: Any, exc_info: bool = False) -> None:
        now = asyncio.get_running_loop().time()
        if now < self._next.get(kind, 0.0):
            self._held[kind] = self._held.get(kind, 0) + 1
            return
        held = self._held.pop(kind, 0)
        self._next[kind] = now + self.every
        suffix = f" ({held} more like it in the last {self.every:.0f} s not shown)" if held else ""
        log.warning(message + suffix, *args, exc_info=exc_info)


STOP_GRACE_S = 2.0  # stop() waits this long for client tasks to end after closing their connections
ACCEPT_BACKOFF = (0.05, 1.0)  # first and longest pause after accept() fails for want of resources
ACCEPT_BATCH = 32  # connections taken off the backlog at once (well within FD_HEADROOM)
_STARVED = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class ControlServer:
    """Serves the control protocol for ``target`` on the Unix socket at ``path``.

    Connections are capped (``max_clients``, from RLIMIT_NOFILE by default). At
    the cap a newcomer still gets in: a newcomer that sent no request in its
    first GRACE_S gives way first (the oldest first), else the connection idle
    longest (``evict_idle_s``), so the owner's ``specctl status`` or
    ``force-off`` gets through however many clients sit on the socket, silent
    or idle. The last ``reserve`` places are kept for requests marked
    ``"interactive": true`` (the console, a verb typed at a terminal): when the
    other places are full and in use, a newcomer is greeted into the reserve on
    probation, and its first request must say "interactive" or it is answered
    ``unavailable`` and closed. A newcomer that finds no place free waits in
    line, in the order newcomers came, while some newcomer's grace still runs;
    only when every place is in use is it refused (admission.py has the rules).
    Idle connections are closed after ``idle_timeout`` (a subscriber's stream is
    not idle). When accept() itself fails for want of descriptors, the server
    says so once, frees a connection (a silent one first) and backs off, instead
    of spinning on the error.
    """

    def __init__(self, target: ControlTarget, path: str | os.PathLike[str], *,
                 max_clients: int | None = None, idle_timeout: float | None = 120.0,
                 line_timeout: float = 30.0, write_timeout: float = 5.0,
                 evict_idle_s: float = EVICT_IDLE_S, reserve: int | None = None) -> None:
        self.target = target
        self.path = Path(path)
        self.max_clients = fd_cap() if max_clients is None else max_clients
        # places of max_clients kept for a person's commands (requests marked "interactive": the console, a verb
        # typed at a terminal): a storm of the owner's scripts fills the rest at most
        self.reserve = default_reserve(self.max_clients) if reserve is None else max(0, min(reserve,
                                                                                              self.max_clients - 1))
        self.idle_timeout = idle_timeout
        self.line_timeout = line_timeout
        self.write_timeout = write_timeout
        self._places = Places(self.max_clients, self.reserve, evict_idle_s, GRACE_S)
        self._line = Line(self._places)  # newcomers that find no place free wait here, in the order they came
        self._server: asyncio.Task[None] | None = None  # the accept loop
        self._sock: socket.socket | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._inode: int | None = None
        self._stopped = False
        self._starved = 0  # accept() failures in a row: the back-off grows with it
        self._quiet_until = 0.0  # the failure is said again only after this (loop time)
        self._quiet = _Quiet()
        self._room = asyncio.Event()  # set when a client task ends: the accept loop may take more

    async def start(self) -> None:
        """Bind the socket (0600, in a 0700 directory if we make it) and start accepting."""
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            why = "it is not a folder" if isinstance(exc, FileExistsError) else exc.strerror or str(exc)
            raise ControlSocketError(f"cannot make {self.path.parent} for the control socket: {why} "
                                     "(choose another with --socket)") from None
        check_runtime_dir(self.path.parent)
        await self._clear_stale()
        sock = self._bind()
        self._inode = os.stat(self.path).st_ino
        sock.listen(1024)
        sock.setblocking(False)
        self._sock = sock
        self._server = asyncio.create_task(self._accept_loop(sock), name="specctl-control-accept")

    async def _accept_loop(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            # descriptors held by control connections stay under the cap plus one batch, counting those
            # accepted but not yet placed and those closing: the rest of FD_HEADROOM is the supervisor's own
            while len(self._tasks) >= self.max_clients + ACCEPT_BATCH:
                self._room.clear()
                await self._room.wait()
            try:
                conn, _ = await loop.sock_accept(sock)
            except OSError as exc:
                await self._accept_failed(exc)
                continue
            self._starved = 0
            self._spawn(conn)
            # the rest of the backlog in one go (a storm of connects must not queue a person's behind it one
            # loop turn each); each is counted and placed by its own task, within FD_HEADROOM of the cap
            for _ in range(min(ACCEPT_BATCH - 1, self.max_clients + ACCEPT_BATCH - len(self._tasks))):
                try:
                    conn, _ = sock.accept()
                except BlockingIOError:
                    break
                except OSError as exc:
                    await self._accept_failed(exc)
                    break
                self._spawn(conn)
            await asyncio.sleep(0)  # let them register before the next accept: the count and eviction see them

    def _spawn(self, conn: socket.socket) -> None:
        conn.setblocking(False)
        task = asyncio.create_task(self._on_client(conn))
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._room.set()

    async def _accept_failed(self, exc: OSError) -> None:
        """Out of descriptors (or memory): say it once, free a connection (a silent one first), back off."""
        if exc.errno not in _STARVED:
            log.error("control socket: accept failed: %s", exc)
            await asyncio.sleep(ACCEPT_BACKOFF[1])
            return
        now = asyncio.get_running_loop().time()
        if now >= self._quiet_until:
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            log.warning("control socket: cannot accept connections: %s (open files limit %d, %d control "
                        "connections); closing idle ones and backing off (said once a minute at most)",
                        exc.strerror or exc, soft, len(self._places))
            self._quiet_until = now + 60.0
        self._starved += 1
        first, longest = ACCEPT_BACKOFF
        if not self._places.free_one():  # nothing to free: wait for descriptors to come back, longer each time
            await asyncio.sleep(min(longest, first * 2 ** min(self._starved, 8)))

    @property
    def evicted(self) -> int:
        """Connections closed to make room, for the benchmark and tests."""
        return self._places.evicted

    async def _clear_stale(self) -> None:
        """Refuse a live socket; remove one left behind by a supervisor that died (supervisord's checkused)."""
        try:
            mode = os.lstat(self.path).st_mode
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(mode):
            raise ControlSocketError(f"{self.path} exists and is not a socket; refusing to replace it")
        try:
            async with asyncio.timeout(2.0):
                _reader, writer = await asyncio.open_unix_connection(str(self.path))
        except (ConnectionRefusedError, FileNotFoundError):
            self.path.unlink(missing_ok=True)
            return
        except (TimeoutError, OSError) as e:
            raise SocketInUse(f"{self.path} exists and could not be probed ({e!r}); remove it if no "
                              f"supervisor runs") from None
        writer.close()
        raise SocketInUse(f"another specctl supervisor is listening on {self.path}; watch it with "
                          f"`specctl tui --connect {self.path}`, stop it first, or choose another socket with --socket")

    def _bind(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(str(self.path))
        except OSError as exc:
            sock.close()
            raise ControlSocketError(f"cannot make the control socket {self.path}: {exc.strerror or exc} "
                                     "(choose another with --socket)") from None
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        return sock

    @property
    def stopping(self) -> bool:
        """stop() has begun: connections are aborted, not flushed."""
        return self._stopped

    async def stop(self) -> None:
        """Stop accepting, close every client, and remove the socket file if it is still ours.

        Bounded whatever the clients do: connections are aborted (a subscriber that
        stopped reading has a full buffer nobody will take), their tasks cancelled,
        and any task still running after STOP_GRACE_S is left to the loop's end.
        """
        self._stopped = True
        if self._server is not None:
            self._server.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._server
            self._server = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._remove_socket_file()
        for connection in self._places.holders():
            connection.evict()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            _done, stuck = await asyncio.wait(tasks, timeout=STOP_GRACE_S)
            if stuck:
                log.warning("control socket: %d client tasks did not end in %.0f s; leaving them",
                            len(stuck), STOP_GRACE_S)

    def _remove_socket_file(self) -> None:
        """Only our own socket: a newer supervisor may have bound the path since."""
        if self._inode is None:  # never bound (start failed): nothing here is ours
            return
        with contextlib.suppress(FileNotFoundError):
            if os.lstat(self.path).st_ino == self._inode:
                self.path.unlink()

    @property
    def clients(self) -> int:
        return len(self._tasks)

    async def _on_client(self, conn: socket.socket) -> None:
        if self._stopped:  # accepted just before stop(): its task was not there to cancel
            conn.close()
            return
        try:
            reader, writer = await asyncio.open_unix_connection(sock=conn, limit=MAX_LINE)
        except (OSError, asyncio.CancelledError):  # CancelledError: stop() came first; quietly
            conn.close()
            return
        try:
            await self._admit(reader, writer)
        except asyncio.CancelledError:  # stop(): a quiet close, no traceback per client
            abort(writer)
        except (ConnectionError, Dropped):  # the client left (or stopped reading) mid-answer: its own business
            abort(writer)
        except Exception as exc:  # a fault of ours: said, with its traceback, but not once per client
            self._quiet.warn("failed", "control connection failed: %r", exc, exc_info=True)
            abort(writer)

    def busy_message(self, reserved: bool) -> str:
        if reserved:
            return (f"too many control connections ({self.max_clients}), all busy; the last {self.reserve} are "
                    "kept for commands a person types (a terminal, the console)")
        return f"too many control connections ({self.max_clients}), all busy"

    def spoke(self, connection: Connection, interactive: bool) -> bool:
        """A connection's first request came; False: it had a place on probation and is not a person's."""
        kept = self._places.spoke(connection, interactive)
        self._line.moved()
        return kept

    async def _admit(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        uid = peer_uid(writer.get_extra_info("socket"))
        if not peer_allowed(uid, os.geteuid()):
            self._quiet.warn("forbidden", "control socket: refused a connection from uid %d", uid)
            refusal = error(None, FORBIDDEN, f"uid {uid} may not use this socket (owner or root only)")
        else:
            connection = Connection(self, reader, writer, uid)
            if await self._line.place(connection):
                try:
                    await connection.serve()
                finally:
                    self._places.leave(connection)
                    self._line.moved()
                return
            refusal = error(None, UNAVAILABLE, self.busy_message(reserved=False), busy=True)
        with contextlib.suppress(Exception):
            writer.write(dumps(refusal))
            async with asyncio.timeout(CLOSE_GRACE_S):
                await writer.drain()
        abort(writer)
