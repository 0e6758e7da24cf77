"""The control socket: a Unix socket, one JSON object per line each way, shaped like QMP.

The server greets first, then answers requests ``{"id", "cmd", "args"}`` with
``{"id", "ok": true, "result"}`` or ``{"id", "ok": false, "error": {"code",
"message", ...}}``. It owns only framing, the greeting, the peer check and
``subscribe``; every other command goes to ``target.execute`` (the supervisor),
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
import json
import logging
import math
import os
import resource
import socket
import stat
import struct
from pathlib import Path
from typing import Any, Protocol

from specctl import PROTOCOL, __version__
from specctl.runtime.control.hub import Hub, Subscription
from specctl.runtime.core import records
from specctl.runtime.core.errors import BAD_REQUEST, FORBIDDEN, INTERNAL, UNAVAILABLE, CommandError
from specctl.runtime.core.journalable import why_unjournalable

log = logging.getLogger(__name__)

MAX_LINE = 64 * 1024  # bytes in one line, not counting the newline
_READ_CHUNK = 64 * 1024
_SCALARS = (str, int, float, bool, type(None))


class ControlTarget(Protocol):
    """What the control server steers: the supervisor, or a stand-in in tests."""

    hub: Hub

    async def execute(self, cmd: str, args: dict[str, Any], uid: int | None) -> dict[str, Any]: ...


class ControlSocketError(Exception):
    """The control socket could not be set up at the path asked for."""


class SocketInUse(ControlSocketError):
    """Another process answers on the socket path: most likely another supervisor."""


class _LineTooLong(Exception):
    """A line went past MAX_LINE; its bytes were discarded up to its newline."""


class _LineStalled(Exception):
    """A line was started but not finished within the line timeout."""


class _BadRequest(Exception):
    """A request line that cannot be executed; ``req_id`` is echoed when it could be read."""

    def __init__(self, message: str, req_id: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.req_id = req_id


class _Dropped(Exception):
    """The client stopped reading (or is gone); its connection was aborted."""


class _LineReader:
    """Splits a stream into lines, with a bound on a line's size and on how long it may take.

    An idle connection (no partial line pending) may wait ``idle_timeout`` (None:
    forever); once a line has started, each further chunk must come within
    ``line_timeout``, so a client cannot pin a half-sent line forever. An idle
    timeout counts as the end of input; a stalled line raises _LineStalled.
    """

    def __init__(self, reader: asyncio.StreamReader, idle_timeout: float | None,
                 line_timeout: float) -> None:
        self._reader = reader
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf known to hold no newline: a trickling client costs O(n)
        self._discarding = False
        self._eof = False
        self._idle_timeout = idle_timeout
        self._line_timeout = line_timeout

    async def readline(self) -> bytes | None:
        """The next line without its newline; None at end of input; raises _LineTooLong."""
        while True:
            line = self._take_line()
            if line is not None:
                return line
            if self._eof:
                return self._take_tail()
            await self._fill()

    def _take_line(self) -> bytes | None:
        if self._discarding:  # inside an over-long line: drop everything up to its newline
            end = self._buf.find(b"\n")
            if end < 0:
                self._buf.clear()
                self._scanned = 0
                return None
            del self._buf[:end + 1]
            self._scanned = 0
            self._discarding = False
            raise _LineTooLong
        end = self._buf.find(b"\n", self._scanned)
        if end < 0:
            self._scanned = len(self._buf)
            if len(self._buf) > MAX_LINE:
                self._discarding = True
                self._buf.clear()
                self._scanned = 0
            return None
        line = bytes(self._buf[:end])
        del self._buf[:end + 1]
        self._scanned = 0
        if len(line) > MAX_LINE:
            raise _LineTooLong
        return line

    def _take_tail(self) -> bytes | None:
        """A last line without a newline still counts (``printf '{...}' | nc -U`` is common), unless it
        is the rest of an over-long line: that is discarded whole, up to EOF, and none of it runs."""
        if self._discarding:
            self._discarding = False
            self._buf.clear()
            self._scanned = 0
            raise _LineTooLong
        if not self._buf:
            return None
        line = bytes(self._buf)
        self._buf.clear()
        self._scanned = 0
        if len(line) > MAX_LINE:
            raise _LineTooLong
        return line

    async def _fill(self) -> None:
        pending = bool(self._buf) or self._discarding
        timeout = self._line_timeout if pending else self._idle_timeout
        try:  # asyncio.timeout: on 3.11 wait_for can swallow a cancel (stop()) that meets a read
            async with asyncio.timeout(timeout):
                data = await self._reader.read(_READ_CHUNK)
        except TimeoutError:
            if pending:
                raise _LineStalled from None
            data = b""
        if data:
            self._buf += data
        else:
            self._eof = True


def _dumps(obj: dict[str, Any]) -> bytes:
    """One wire line. ASCII-escaped, so even a lone surrogate a client sent in its id encodes."""
    return (json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n").encode("ascii")


def _error(req_id: Any, code: str, message: str, **details: Any) -> dict[str, Any]:
    return {"id": req_id, "ok": False, "error": {"code": code, "message": message, **details}}


def _encode_answer(answer: dict[str, Any]) -> bytes:
    """The answer's line; a result that is not plain JSON is the target's bug, answered as internal."""
    try:
        return _dumps(answer)
    except (TypeError, ValueError):
        log.exception("control answer is not plain JSON: %r", answer)
        return _dumps(_error(answer["id"], INTERNAL, "the supervisor's answer could not be encoded"))


def _parse_request(line: bytes) -> tuple[Any, str, dict[str, Any]]:
    """Check one request line before anything acts on it; raises _BadRequest naming what is wrong.

    Returns ``(id, cmd, args)``. Unknown top-level keys are ignored, as in QMP.
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _BadRequest(f"not valid UTF-8 at byte {e.start}") from None
    try:
        obj = records.loads(text)
    except (ValueError, RecursionError) as e:
        raise _BadRequest(f"not JSON: {str(e)[:200]}") from None
    if not isinstance(obj, dict):
        raise _BadRequest(f"a request is a JSON object, got {type(obj).__name__}")
    req_id = obj.get("id")
    if not isinstance(req_id, _SCALARS) or (isinstance(req_id, float) and not math.isfinite(req_id)):
        raise _BadRequest("id must be a JSON scalar (string, number, boolean or null)")
    cmd, args = obj.get("cmd"), obj.get("args")
    if not isinstance(cmd, str):
        raise _BadRequest("cmd must be a string", req_id)
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise _BadRequest("args must be a JSON object", req_id)
    # the journal must be able to hold what is applied: refuse here, before anything acts on it
    if why := why_unjournalable(cmd) or why_unjournalable(args):
        raise _BadRequest(f"request cannot be journaled: {why}", req_id)
    return req_id, cmd, args


def check_runtime_dir(folder: Path) -> None:
    """The socket's folder must be ours and closed to others: in a folder another user owns or can write,
    they could swap our socket for theirs, or plant one before we start (sshd's StrictModes, for sockets)."""
    info = os.stat(folder)
    if info.st_uid != os.geteuid():
        raise ControlSocketError(f"refusing {folder} for the control socket: it belongs to uid {info.st_uid}, "
                                 "not to us (choose a folder of your own with --socket)")
    if info.st_mode & 0o022:
        raise ControlSocketError(f"refusing {folder} for the control socket: others can write it "
                                 f"(mode {stat.S_IMODE(info.st_mode):o}); choose a folder of your own with "
                                 "--socket, or chmod go-w it")


def peer_uid(sock: socket.socket) -> int:
    """The connecting process's uid, from the kernel (SO_PEERCRED: pid, uid, gid)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid


def peer_allowed(uid: int, owner: int) -> bool:
    """Only the socket owner and root may steer the supervisor."""
    return uid == owner or uid == 0


class _Connection:
    """One client: reads requests in order, answers them, and streams records once subscribed."""

    def __init__(self, server: ControlServer, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, uid: int) -> None:
        self._server = server
        self._lines = _LineReader(reader, server.idle_timeout, server.line_timeout)
        self._writer = writer
        self._uid = uid
        self._pump: asyncio.Task[None] | None = None
        self.last_active = asyncio.get_running_loop().time()  # when its last request (or its greeting) came

    @property
    def subscribed(self) -> bool:
        return self._pump is not None

    def evict(self) -> None:
        """Close this connection now, to make room: its reads end, its task cleans up."""
        self._writer.transport.abort()

    async def serve(self) -> None:
        """Answer requests until the client leaves; then keep streaming if it subscribed."""
        try:
            await self.send(_dumps({"specctl": {"version": __version__, "protocol": PROTOCOL}}))
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
            except _LineTooLong:
                await self.send(_dumps(_error(None, BAD_REQUEST, f"line longer than {MAX_LINE} bytes")))
                continue
            except _LineStalled:
                await self.send(_dumps(_error(None, BAD_REQUEST, "line not finished in time; closing")))
                return
            if line is None:
                return
            if line.strip():
                self.last_active = asyncio.get_running_loop().time()
                await self.send(_encode_answer(await self._answer(line)))

    async def _answer(self, line: bytes) -> dict[str, Any]:
        try:
            req_id, cmd, args = _parse_request(line)
        except _BadRequest as e:
            return _error(e.req_id, BAD_REQUEST, e.message)
        try:
            result = self._subscribe() if cmd == "subscribe" else await self._execute(cmd, args)
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

    def _subscribe(self) -> dict[str, Any]:
        if self._pump is None:
            sub = self._server.target.hub.subscribe()
            self._pump = asyncio.create_task(self._stream(sub))
        return {"subscribed": True}

    async def _stream(self, sub: Subscription) -> None:
        """Forward hub records; a client that cannot keep up is dropped, the hub never waits.

        Each line is ``{"record": ...}``; once the hub has had to drop records for
        this reader, ``"dropped"`` carries the running count, so a console knows
        its view has a gap.
        """
        try:
            async for record in sub:
                line: dict[str, Any] = {"record": record}
                if sub.dropped:
                    line["dropped"] = sub.dropped
                try:
                    data = _dumps(line)
                except (TypeError, ValueError):
                    log.exception("record not sent: it is not plain JSON")
                    continue
                await self.send(data)
        except (ConnectionError, _Dropped):
            self._writer.transport.abort()
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
            self._writer.transport.abort()
            raise _Dropped from None

    async def _close(self) -> None:
        if self._pump is not None and not self._pump.done():
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                async with asyncio.timeout(CLOSE_GRACE_S):
                    await self._pump
        if self._server.stopping:  # nothing more is owed: a client that stopped reading must not hold stop()
            self._writer.transport.abort()
            return
        self._writer.close()  # a normal end: what was written is still delivered
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_GRACE_S):
                await self._writer.wait_closed()
        self._writer.transport.abort()  # a client that never took the rest: no descriptor left behind


CLOSE_GRACE_S = 1.0  # a closing connection waits this long for its client to take what was written
STOP_GRACE_S = 2.0  # stop() waits this long for client tasks to end after closing their connections
FD_HEADROOM = 96  # descriptors left for everything else: journal, NVML, HTTP pool, the server's pipes, ...
ACCEPT_BACKOFF = (0.05, 1.0)  # first and longest pause after accept() fails for want of resources
EVICT_IDLE_S = 1.0  # at the cap, a connection idle this long gives its place to a newcomer
_STARVED = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


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
    newcomer refused. Idle connections are closed after ``idle_timeout``
    (a subscriber's stream is not idle). When accept() itself fails for want of
    descriptors, the server says so once, frees the longest-idle connection and
    backs off, instead of spinning on the error.
    """

    def __init__(self, target: ControlTarget, path: str | os.PathLike[str], *,
                 max_clients: int | None = None, idle_timeout: float | None = 120.0,
                 line_timeout: float = 30.0, write_timeout: float = 5.0,
                 evict_idle_s: float = EVICT_IDLE_S) -> None:
        self.target = target
        self.path = Path(path)
        self.max_clients = fd_cap() if max_clients is None else max_clients
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
            try:
                conn, _ = await loop.sock_accept(sock)
            except OSError as exc:
                await self._accept_failed(exc)
                continue
            self._starved = 0
            task = asyncio.create_task(self._on_client(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            await asyncio.sleep(0)  # let it register before the next accept: the count and eviction see it

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

    def _evict(self, idle_for: float) -> bool:
        """Close the connection idle longest (not streaming ones first), if idle ``idle_for`` s or more."""
        now = asyncio.get_running_loop().time()
        idle = [c for c in self._live if now - c.last_active >= idle_for]
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
            writer.transport.abort()
        except Exception:
            log.exception("control connection failed")
            writer.transport.abort()

    async def _admit(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        uid = peer_uid(writer.get_extra_info("socket"))
        refusal = None
        if not peer_allowed(uid, os.geteuid()):
            log.warning("control socket: refused a connection from uid %d", uid)
            refusal = _error(None, FORBIDDEN, f"uid {uid} may not use this socket (owner or root only)")
        elif len(self._live) >= self.max_clients and not self._evict(self.evict_idle_s):
            refusal = _error(None, UNAVAILABLE, f"too many control connections ({self.max_clients}), all busy")
        if refusal is None:
            connection = _Connection(self, reader, writer, uid)
            self._live.add(connection)
            try:
                await connection.serve()
            finally:
                self._live.discard(connection)
            return
        writer.write(_dumps(refusal))
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_GRACE_S):
                await writer.drain()
        writer.transport.abort()
