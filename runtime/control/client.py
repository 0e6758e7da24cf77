"""Client of the control socket, for the CLI verbs, an attached console and benchmarks.

Errors a caller has to tell apart are separate classes: ``NoSupervisor`` (nothing
to talk to: the CLI exits 3), ``ControlError`` (the supervisor refused: exit 1,
branch on ``code``), ``ProtocolError`` (something answered that does not speak
our protocol).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import stat
import struct
import sys
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from specctl import PROTOCOL

# Lines we send stay under the server's 64 KiB; lines we read may be a little
# larger (a sample of many GPUs) without costing us the connection.
_READ_LIMIT = 1024 * 1024


class NoSupervisor(Exception):
    """No supervisor listens at the path (missing socket, refused, or silent)."""


class UntrustedSocket(NoSupervisor):
    """The socket or its folder could belong to someone else: nothing is sent (the CLI exits 3)."""


class ProtocolError(Exception):
    """The peer sent something that is not protocol-1 specctl JSON."""


class ControlError(Exception):
    """An error answer: ``code`` is stable, ``message`` is for people, ``details`` as sent (e.g. field)."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details = details or {}


def no_supervisor_message(path: str | os.PathLike[str]) -> str:
    return f"no specctl supervisor at {path}; start one with `specctl run --headless` or `specctl tui`"


class ControlClient:
    """One connection to a supervisor. ``async with ControlClient(path) as c: await c.request("ping")``."""

    def __init__(self, path: str | os.PathLike[str], timeout: float = 5.0, interactive: bool = False) -> None:
        self.path = Path(path)
        self.timeout = timeout
        # a person is waiting on this connection (the console, a verb typed at a terminal): its requests say so,
        # and the supervisor keeps places for them that a storm of scripts cannot take (docs/security.md)
        self.interactive = interactive
        self.greeting: dict[str, Any] | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._ids = itertools.count(1)
        self._records: deque[dict[str, Any]] = deque()

    async def __aenter__(self) -> ControlClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> dict[str, Any]:
        """Check whose socket it is, open it and check the greeting; returns it (``{"version", "protocol"}``)."""
        check_socket_owner(self.path)
        try:
            async with asyncio.timeout(self.timeout):  # not wait_for: on 3.11 it can lose a cancel
                self._reader, self._writer = await asyncio.open_unix_connection(str(self.path), limit=_READ_LIMIT)
        except (TimeoutError, FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
            raise NoSupervisor(no_supervisor_message(self.path)) from None
        except PermissionError:
            raise NoSupervisor(f"cannot open {self.path}: permission denied (a supervisor of "
                               f"another user?)") from None
        except OSError as e:  # a path too long for a Unix socket, a socket of the wrong type, ...
            raise NoSupervisor(f"cannot connect to {self.path}: {e.strerror or e}") from None
        check_peer(self._writer, self.path)
        first = await self._read(self.timeout)
        if first is None:
            raise NoSupervisor(f"the supervisor at {self.path} closed the connection at once")
        self.greeting = self._check_greeting(first)
        return self.greeting

    def _check_greeting(self, first: dict[str, Any]) -> dict[str, Any]:
        if first.get("ok") is False:
            raise _error_of(first)
        greeting = first.get("specctl")
        if not isinstance(greeting, dict) or greeting.get("protocol") != PROTOCOL:
            raise ProtocolError(f"{self.path} does not speak specctl protocol {PROTOCOL}: {first!r:.200}")
        return greeting

    @property
    def closed_by_peer(self) -> bool:
        """The supervisor closed this connection (idle too long, or to make room for others)."""
        return self._reader is None or self._reader.at_eof()

    async def request(self, cmd: str, args: dict[str, Any] | None = None,
                      timeout: float | None = None) -> dict[str, Any]:
        """Send one command and wait for its answer; raises ControlError on an error answer."""
        req_id = next(self._ids)
        request: dict[str, Any] = {"id": req_id, "cmd": cmd}
        if self.interactive:
            request["interactive"] = True
        if args is not None:
            request["args"] = args
        await self._send(request)
        answer = await self._answer(req_id, self.timeout if timeout is None else timeout)
        if not answer.get("ok"):
            raise _error_of(answer)
        result = answer.get("result")
        return result if isinstance(result, dict) else {}

    async def subscribe(self, *, history: bool = False) -> AsyncIterator[dict[str, Any]]:
        """Records (samples, events, commands) as the supervisor publishes them, until it leaves.

        ``history``: the supervisor's recent records come first (the last minutes it keeps; none
        from a supervisor that keeps none). To learn how many before reading them, call
        :meth:`start_subscription` and then iterate :meth:`records`.
        """
        await self.start_subscription(history=history)
        async for record in self.records():
            yield record

    async def start_subscription(self, *, history: bool = False) -> dict[str, Any]:
        """Ask for the stream; the answer says ``{"subscribed": true}``, with ``"history": N`` (the recent
        records that come first) from a supervisor that keeps them, when ``history`` was asked for."""
        return await self.request("subscribe", {"history": True} if history else None)

    async def records(self) -> AsyncIterator[dict[str, Any]]:
        """The subscribed stream's records, in order, until the supervisor leaves."""
        while True:
            while self._records:
                yield self._records.popleft()
            msg = await self._read(None)
            if msg is None:
                return
            self._keep_record(msg)

    async def close(self) -> None:
        if self._writer is None:
            return
        self._writer.close()
        try:
            async with asyncio.timeout(self.timeout):
                await self._writer.wait_closed()
        except (TimeoutError, OSError):
            pass
        self._writer = None

    async def _send(self, obj: dict[str, Any]) -> None:
        if self._writer is None:
            raise RuntimeError("ControlClient is not connected")
        self._writer.write(json.dumps(obj, separators=(",", ":")).encode() + b"\n")
        try:
            async with asyncio.timeout(self.timeout):
                await self._writer.drain()
        except (TimeoutError, ConnectionError):
            raise NoSupervisor(f"the supervisor at {self.path} stopped listening") from None

    async def _answer(self, req_id: int, timeout: float) -> dict[str, Any]:
        """The answer to ``req_id``; records that arrive meanwhile are kept for subscribe()."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            msg = await self._read(max(0.0, deadline - loop.time()))
            if msg is None:
                raise NoSupervisor(f"the supervisor at {self.path} closed the connection")
            if "record" in msg:
                self._keep_record(msg)
            elif msg.get("id") == req_id or ("ok" in msg and msg.get("id") is None):
                return msg

    def _keep_record(self, msg: dict[str, Any]) -> None:
        record = msg.get("record")
        if isinstance(record, dict):
            self._records.append(record)

    async def _read(self, timeout: float | None) -> dict[str, Any] | None:
        """The next JSON object line, or None at end of stream."""
        assert self._reader is not None
        try:
            async with asyncio.timeout(timeout):
                line = await self._reader.readline()
        except TimeoutError:
            raise NoSupervisor(f"the supervisor at {self.path} did not answer within {timeout:g} s") from None
        except ConnectionError:
            raise NoSupervisor(f"lost the connection to the supervisor at {self.path}") from None
        except ValueError as e:
            raise ProtocolError(f"reading from {self.path} failed: {e}") from None
        if not line:
            return None
        try:
            msg = json.loads(line)
        except ValueError:
            raise ProtocolError(f"{self.path} sent a line that is not JSON: {line[:200]!r}") from None
        if not isinstance(msg, dict):
            raise ProtocolError(f"{self.path} sent a line that is not an object: {line[:200]!r}")
        return msg


def _trusted_uid(uid: int) -> bool:
    return uid == os.geteuid() or uid == 0


def check_socket_owner(path: Path) -> None:
    """Before sending anything: the socket and its folder must belong to us (or root), and no one else may
    write the folder (else another user could have put their own socket there). A missing path is left to
    connect(), which says there is no supervisor."""
    try:
        folder = os.stat(path.parent if str(path.parent) else Path("."))
        sock = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise NoSupervisor(f"cannot check {path}: {e.strerror or e}") from None
    refuse = f"refusing to use {path}: "
    if not _trusted_uid(folder.st_uid):
        raise UntrustedSocket(refuse + f"its folder belongs to uid {folder.st_uid}, not to you or root")
    if folder.st_mode & 0o022:
        raise UntrustedSocket(refuse + f"its folder {path.parent} can be written by others "
                              f"(mode {stat.S_IMODE(folder.st_mode):o}); put the socket in a folder of your own")
    if stat.S_ISSOCK(sock.st_mode) and not _trusted_uid(sock.st_uid):
        raise UntrustedSocket(refuse + f"it belongs to uid {sock.st_uid}, not to you or root")


def check_peer(writer: asyncio.StreamWriter, path: Path) -> None:
    """The process that listens must run as us or as root (SO_PEERCRED, from the kernel)."""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    if not _trusted_uid(uid):
        writer.close()
        raise UntrustedSocket(f"refusing to use {path}: the process listening there runs as uid {uid}, "
                              "not as you or root")


def _error_of(answer: dict[str, Any]) -> ControlError:
    error = answer.get("error")
    if not isinstance(error, dict):
        return ControlError("internal", f"malformed error answer: {answer!r:.200}")
    details = {k: v for k, v in error.items() if k not in ("code", "message")}
    return ControlError(str(error.get("code")), str(error.get("message")), details)


BUSY_RETRIES = (0.05, 0.1, 0.2, 0.4, 0.6, 0.8)  # pauses between a person's tries while every place is busy
INTERACTIVE_ENV = "SPECCTL_INTERACTIVE"  # 1: this process's commands are a person's; 0: a script's


def from_a_person() -> bool:
    """A verb a person typed: SPECCTL_INTERACTIVE if set, else whether any of stdin, stdout, stderr is a
    terminal (a script under cron, systemd or a pipe has none)."""
    said = os.environ.get(INTERACTIVE_ENV, "").strip()
    if said in ("0", "1"):
        return said == "1"
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        try:
            if stream is not None and stream.isatty():
                return True
        except (OSError, ValueError):
            continue
    return False


def call(path: str | os.PathLike[str], cmd: str, args: dict[str, Any] | None = None,
         timeout: float = 5.0, answer_timeout: float | None = None) -> dict[str, Any]:
    """One command, synchronously: for the CLI, which has no event loop of its own.

    ``timeout`` bounds connecting; ``answer_timeout`` (default: the same) bounds
    the wait for the answer, longer for commands that restart a model server.
    """

    interactive = from_a_person()

    async def once() -> dict[str, Any]:
        async with ControlClient(path, timeout, interactive=interactive) as client:
            return await client.request(cmd, args, answer_timeout)

    async def patiently() -> dict[str, Any]:
        """A person's command comes back when a storm took the reserve's places for a moment (their
        newcomers are answered "busy" at once and free them): a few tries within about two seconds."""
        for pause in (*BUSY_RETRIES, None):
            try:
                return await once()
            except ControlError as exc:
                if not interactive or exc.details.get("busy") is not True or pause is None:
                    raise  # only the socket's own "every place is busy", never a command's refusal
            except NoSupervisor as exc:  # closed before its answer: its place went to another newcomer before
                # its request was read (a place on probation), so the command did not run
                if not interactive or "the connection" not in str(exc) or pause is None:
                    raise
            await asyncio.sleep(pause)
        raise AssertionError("unreachable")

    return asyncio.run(patiently())
