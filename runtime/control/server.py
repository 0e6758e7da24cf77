"""The control socket: a Unix socket, one JSON object per line each way, shaped like QMP.

The server greets first, then answers requests ``{"id", "cmd", "args"}`` with
``{"id", "ok": true, "result"}`` or ``{"id", "ok": false, "error": {"code",
"message", ...}}``. It owns only framing, the greeting, the peer check and
``subscribe`` (``{"history": true}`` in its args: the hub's recent records first,
each line ``{"record", "history": true}``, then the live stream; without it, the
live stream alone, as before); every other command goes to ``target.execute`` (the supervisor),
so a command typed in the in-process console and one sent over the socket take
the same path and are journaled the same way.

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from specctl import PROTOCOL, __version__
from specctl.runtime.control.framing import (
    MAX_LINE,
    BadRequest,
    LineReader,
    LineStalled,
    LineTooLong,
    dumps,
    encode_answer,
    error,
    is_interactive,
    parse_request,
)
from specctl.runtime.control.hub import Hub, Subscription
from specctl.runtime.control.ownership import (
    ControlSocketError,
    SocketInUse,
    check_runtime_dir,
    peer_allowed,
    peer_uid,
)
from specctl.runtime.core.errors import BAD_REQUEST, FORBIDDEN, INTERNAL, UNAVAILABLE, CommandError

log = logging.getLogger(__name__)

class ControlTarget(Protocol):
    """What the control server steers: the supervisor, or a stand-in in tests."""

    hub: Hub

    async def execute(self, cmd: str, args: dict[str, Any], uid: int | None) -> dict[str, Any]: ...


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


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close the connection now, whatever state its transport is in (a transport that is already gone may
    raise from abort(): asyncio's selector transport after its connection_lost ran)."""
    with contextlib.suppress(Exception):
        writer.transport.abort()


class _Dropped(Exception):
    """The client stopped reading (or is gone); its connection was aborted."""


class _Connection:
    """One client: reads requests in order, answers them, and streams records once subscribed."""

    def __init__(self, server: ControlServer, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, uid: int) -> None:
        self._server = server
        self._lines = LineReader(reader, server.idle_timeout, server.line_timeout)
        self._writer = writer
        self._uid = uid
        self._pump: asyncio.Task[None] | None = None
        self.last_active = asyncio.get_running_loop().time()  # when its last request (or its greeting) came
        # in one of the places kept for a person's commands; on probation until its first request says
        # "interactive" (then it keeps the place), refused and closed if that request does not
        self.reserved = False
        self.probation = False

    @property
    def subscribed(self) -> bool:
        return self._pump is not None

    def evict(self) -> None:
        """Close this connection now, to make room: its reads end, its task cleans up."""
        _abort(self._writer)

    async def serve(self) -> None:
        """Answer requests until the client leaves; then keep streaming if it subscribed."""
        try:
            await self.send(dumps({"specctl": {"version": __version__, "protocol": PROTOCOL}}))
            await self._serve_requests()
            if self._pump is not None:
                await self._pump
        except (ConnectionError, _Dropped):
            pass
        finally:
            await self._close()

    async def _serve_requests(self) -> None:
        while True:
            try:
                line = await self._lines.readline()
            except LineTooLong:
                await self.send(dumps(error(None, BAD_REQUEST, f"line longer than {MAX_LINE} bytes")))
                continue
            except LineStalled:
                await self.send(dumps(error(None, BAD_REQUEST, "line not finished in time; closing")))
                return
            if line is None:
                return
            if line.strip():
                self.last_active = asyncio.get_running_loop().time()
                if self.probation:
                    if not is_interactive(line):
                        busy = self._server.busy_message(reserved=True)
                        await self.send(dumps(error(None, UNAVAILABLE, busy, busy=True)))
                        return
                    self.probation = False
                await self.send(encode_answer(await self._answer(line)))
                await asyncio.sleep(0)  # one request, then the others' turn: a client with 2,000 queued
                # requests (or half-closed behind them) cannot hold the loop while a person's status waits

    async def _answer(self, line: bytes) -> dict[str, Any]:
        try:
            req_id, cmd, args = parse_request(line)
        except BadRequest as e:
            return error(e.req_id, BAD_REQUEST, e.message)
        try:
            result = self._subscribe(args) if cmd == "subscribe" else await self._execute(cmd, args)
        except CommandError as e:
            return {"id": req_id, "ok": False, "error": e.as_dict()}
        return {"id": req_id, "ok": True, "result": result}

    async def _execute(self, cmd: str, args: dict[str, Any]) -> dict[str, Any]:
        """The target's answer; an unexpected failure is logged and answered, never raised."""
        try:
            result = await self._server.target.execute(cmd, args, self._uid)
        except CommandError:
            raise
        except Exception:
            log.exception("control command %r failed", cmd)
            raise CommandError(INTERNAL, f"{cmd} failed inside the supervisor; see its log") from None
        return result

    def _subscribe(self, args: dict[str, Any]) -> dict[str, Any]:
        """Start streaming; ``{"history": true}`` sends the recent records first (an unknown arg is ignored).

        The answer is written before the pump's first line: the pump only starts once this
        request's handler awaits the answer's write.
        """
        if self._pump is not None:
            return {"subscribed": True}
        hub = self._server.target.hub
        if args.get("history") is True:
            past, sub = hub.subscribe_with_history()
            self._pump = asyncio.create_task(self._stream(sub, past))
            return {"subscribed": True, "history": len(past)}
        self._pump = asyncio.create_task(self._stream(hub.subscribe()))
        return {"subscribed": True}

    async def _stream(self, sub: Subscription, past: Sequence[bytes] = ()) -> None:
        """Forward hub records; a client that cannot keep up is dropped, the hub never waits.

        Each line is ``{"record": ...}``; once the hub has had to drop records for
        this reader, ``"dropped"`` carries the running count, so a console knows
        its view has a gap. ``past`` (records already encoded, from the hub's
        history) go first, marked ``"history": true``.
        """
        try:
            for data in past:
                await self.send(b'{"record":' + data + b',"history":true}\n')
            async for record in sub:
                line: dict[str, Any] = {"record": record}
                if sub.dropped:
                    line["dropped"] = sub.dropped
                try:
                    data = dumps(line)
                except (TypeError, ValueError):
                    log.exception("record not sent: it is not plain JSON")
                    continue
                await self.send(data)
        except (ConnectionError, _Dropped):
            _abort(self._writer)
        finally:
            sub.close()

    async def send(self, data: bytes) -> None:
        """Write one line; a client that does not take it within write_timeout is dropped.

        asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that lands
        as the drain completes, and a streaming pump that lost stop()'s cancel kept
        the supervisor from exiting (it waited on the hub, which closes after us).
        """
        if self._writer.is_closing():
            raise _Dropped
        self._writer.write(data)
        try:
            async with asyncio.timeout(self._server.write_timeout):
                await self._writer.drain()
        except TimeoutError:
            _abort(self._writer)
            raise _Dropped from None

    async def _close(self) -> None:
        if self._pump is not None and not self._pump.done():
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                async with asyncio.timeout(CLOSE_GRACE_S):
                    await self._pump
        if self._server.stopping:  # nothing more is owed: a client that stopped reading must not hold stop()
            _abort(self._writer)
            return
        with contextlib.suppress(Exception):
            self._writer.close()  # a normal end: what was written is still delivered
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_GRACE_S):
                await self._writer.wait_closed()
        _abort(self._writer)  # a client that never took the rest: no descriptor left behind


CLOSE_GRACE_S = 1.0  # a closing connection waits this long for its client to take what was written
STOP_GRACE_S = 2.0  # stop() waits this long for client tasks to end after closing their connections
FD_HEADROOM = 96  # descriptors left for everything else: journal, NVML, HTTP pool, the server's pipes, ...
ACCEPT_BACKOFF = (0.05, 1.0)  # first and longest pause after accept() fails for want of resources
ACCEPT_BATCH = 32  # connections taken off the backlog at once (well within FD_HEADROOM)
EVICT_IDLE_S = 1.0  # at the cap, a connection idle this long gives its place to a newcomer
_STARVED = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


PROBATION_GRACE_S = 0.1  # a newcomer in the reserve that sent nothing for this long gives its place to the next
# (a person's client sends its request as soon as the greeting is read: well within this, even on a loaded host)
RESERVE_MAX = 16  # places kept for a person's commands, at most (an eighth of the cap below 128)


def default_reserve(max_clients: int) -> int:
    return 0 if max_clients < 2 else max(1, min(RESERVE_MAX, max_clients // 8))


def fd_cap(headroom: int = FD_HEADROOM) -> int:
    """Control connections this process can hold: the soft RLIMIT_NOFILE less headroom, at least 8.

    From the limit as it is, so the cap holds under `ulimit -n 256` as well as under systemd's 1024.
    """
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 65536
    return max(8, soft - headroom)


class ControlServer:
    """Serves the control protocol for ``target`` on the Unix socket at ``path``.

    Connections are capped (``max_clients``, from RLIMIT_NOFILE by default). At
    the cap a newcomer still gets in: the connection that has been idle longest
    (one that is not streaming records first) is closed to make room, so the
    owner's ``specctl status`` or ``force-off`` always gets through, however many
    idle clients hold the socket. Only when every connection is busy is the
    newcomer refused, and even then a person's command gets in: the last
    ``reserve`` places are kept for requests marked ``"interactive": true`` (the
    console, a verb typed at a terminal). When the other places are full and
    busy, a newcomer is greeted into the reserve on probation; its first
    request must say "interactive" or it is answered ``unavailable`` and
    closed, and a newcomer that says nothing for PROBATION_GRACE_S gives its
    place to the next. So a storm of the owner's own scripts, however busy,
    fills the other places at most. Idle connections are closed after ``idle_timeout``
    (a subscriber's stream is not idle). When accept() itself fails for want of
    descriptors, the server says so once, frees the longest-idle connection and
    backs off, instead of spinning on the error.
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
        self.evict_idle_s = evict_idle_s
        self._server: asyncio.Task[None] | None = None  # the accept loop
        self._sock: socket.socket | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._live: set[_Connection] = set()
        self._inode: int | None = None
        self._stopped = False
        self._starved = 0  # accept() failures in a row: the back-off grows with it
        self._quiet_until = 0.0  # the failure is said again only after this (loop time)
        self.evicted = 0  # connections closed to make room, for the benchmark and tests
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
        """Out of descriptors (or memory): say it once, free the longest-idle connection, back off."""
        if exc.errno not in _STARVED:
            log.error("control socket: accept failed: %s", exc)
            await asyncio.sleep(ACCEPT_BACKOFF[1])
            return
        now = asyncio.get_running_loop().time()
        if now >= self._quiet_until:
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            log.warning("control socket: cannot accept connections: %s (open files limit %d, %d control "
                        "connections); closing idle ones and backing off (said once a minute at most)",
                        exc.strerror or exc, soft, len(self._live))
            self._quiet_until = now + 60.0
        self._starved += 1
        first, longest = ACCEPT_BACKOFF
        freed = self._evict(idle_for=0.0)
        if not freed:  # nothing to free: wait for descriptors to come back, longer each time
            await asyncio.sleep(min(longest, first * 2 ** min(self._starved, 8)))

    def _evict(self, idle_for: float, reserved: bool | None = None) -> bool:
        """Close the connection idle longest (not streaming ones first), if idle ``idle_for`` s or more;
        ``reserved``: only among the reserve's (True; those on probation first) or the rest's (False)."""
        now = asyncio.get_running_loop().time()
        idle = [c for c in self._live if now - c.last_active >= idle_for
                and (reserved is None or c.reserved == reserved)]
        if reserved:  # in the reserve, only a newcomer that has not yet said who it is makes room
            idle = [c for c in idle if c.probation]
        if not idle:
            return False
        victim = min(idle, key=lambda c: (c.subscribed, c.last_active))
        self._live.discard(victim)
        victim.evict()
        self.evicted += 1
        return True

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
        for connection in list(self._live):
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
            _abort(writer)
        except (ConnectionError, _Dropped):  # the client left (or stopped reading) mid-answer: its own business
            _abort(writer)
        except Exception as exc:  # a fault of ours: said, with its traceback, but not once per client
            self._quiet.warn("failed", "control connection failed: %r", exc, exc_info=True)
            _abort(writer)

    def busy_message(self, reserved: bool) -> str:
        if reserved:
            return (f"too many control connections ({self.max_clients}), all busy; the last {self.reserve} are "
                    "kept for commands a person types (a terminal, the console)")
        return f"too many control connections ({self.max_clients}), all busy"

    def _place(self) -> str | None:
        """Where a newcomer goes: among the rest ("open"), in the reserve kept for a person ("reserve"), or
        nowhere (None). At a cap, the longest-idle connection of that pool makes room."""
        reserved = sum(c.reserved for c in self._live)
        if len(self._live) - reserved < self.max_clients - self.reserve or self._evict(self.evict_idle_s, False):
            return "open"
        if reserved < self.reserve or self._evict(PROBATION_GRACE_S, True):
            return "reserve"
        return None

    async def _admit(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        uid = peer_uid(writer.get_extra_info("socket"))
        refusal = None
        if not peer_allowed(uid, os.geteuid()):
            self._quiet.warn("forbidden", "control socket: refused a connection from uid %d", uid)
            refusal = error(None, FORBIDDEN, f"uid {uid} may not use this socket (owner or root only)")
        else:
            place = self._place()
            if place is None:
                refusal = error(None, UNAVAILABLE, self.busy_message(reserved=False), busy=True)
        if refusal is None:
            connection = _Connection(self, reader, writer, uid)
            connection.reserved = connection.probation = place == "reserve"
            self._live.add(connection)
            try:
                await connection.serve()
            finally:
                self._live.discard(connection)
            return
        with contextlib.suppress(Exception):
            writer.write(dumps(refusal))
            async with asyncio.timeout(CLOSE_GRACE_S):
                await writer.drain()
        _abort(writer)
