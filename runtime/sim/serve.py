"""The simulator's listening side: one socket per simulated server, with the limits a public port needs.

aiohttp serves each connection with its own protocol object; :class:`Listener`
puts a thin one in front of it that counts connections and watches how long a
request takes to arrive, so that neither many clients nor slow ones can take
the process's files or lock the supervisor out:

- A handler is cancelled when its client disconnects (aiohttp's
  ``handler_cancellation``), so a killed client's request leaves the batch.
- A connection that has not sent a whole request head within
  ``HEADER_TIMEOUT_S`` of its first byte (or of connecting) is closed; a body
  is read within ``BODY_TIMEOUT_S`` (sim/body.py).
- ``max_connections`` connections are served as usual. Beyond them,
  ``RESERVED`` more are let in for the supervisor only: a request that carries
  the admin key (the supervisor that started the simulator always has it), or,
  on a server without an admin key, a read of ``SUPERVISOR_READS`` from a
  loopback peer; anything else on such a connection is answered 503 and the
  connection closed. Beyond those, a new connection takes the place of the one
  whose request head has waited longest (a half-open request), so a flood of
  slow clients cannot lock the supervisor out; only when every connection is
  being served is a new one closed at once.
- The open-files limit is raised to its hard limit at start (as SGLang's
  ``set_ulimit`` does) and the process never accepts past it, whatever the
  per-server caps add up to.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hmac
import ipaddress
import resource
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

DEFAULT_MAX_CONNECTIONS = 512
RESERVED = 8  # connections kept for the supervisor beyond max_connections
HEADER_TIMEOUT_S = 10.0
SWEEP_S = 1.0
FD_HEADROOM = 64  # files the process keeps for itself (logs, the engine, a new socket) below the limit
SUPERVISOR_READS = frozenset({"/health", "/health_generate", "/server_info", "/get_internal_state", "/metrics",
                              "/get_load", "/v1/loads", "/ready", "/ping", "/sim/gpus"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class PortInUse(Exception):
    """The port asked for is taken; the message names it."""


def raise_file_limit() -> int:
    """Raise the soft open-files limit to the hard one; the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 20)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    return soft


class _Budget:
    """The process's open connections across every listener, kept below its open-files limit."""

    open = 0
    limit = 0

    @classmethod
    def room(cls) -> bool:
        if not cls.limit:
            cls.limit = max(64, raise_file_limit() - FD_HEADROOM)
        return cls.open < cls.limit


class _Conn(asyncio.Protocol):
    """One connection: forwards to aiohttp's protocol and notes whether a request is half-arrived."""

    def __init__(self, owner: _Connections, inner: asyncio.Protocol) -> None:
        self.owner, self.inner = owner, inner
        self.transport: asyncio.Transport | None = None
        self.reserved = False  # let in beyond max_connections: the supervisor's only
        self.admitted = False  # counted and handed to aiohttp (a refused one never is)
        self.active = 0  # requests whose handler runs now
        self.pending_since: float | None = None  # a request began to arrive and no handler has it yet

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        owner = self.owner
        if (len(owner.open) >= owner.max_connections + RESERVED or not _Budget.room()) and not owner.evict():
            owner.refused += 1
            transport.abort()
            return
        self.reserved = len(owner.open) >= owner.max_connections
        self.admitted = True
        owner.open[transport] = self
        _Budget.open += 1
        self.pending_since = time.monotonic()
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.active == 0 and self.pending_since is None:
            self.pending_since = time.monotonic()
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is None or not self.admitted:
            return
        if self.owner.open.pop(self.transport, None) is not None:  # (an evicted one is out of the count already)
            _Budget.open -= 1
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class _Connections:
    """The open connections of one listener and the middleware that sees their requests."""

    def __init__(self, max_connections: int, admin_key: str | None, header_timeout_s: float) -> None:
        self.max_connections = max_connections
        self.admin_key = admin_key
        self.header_timeout_s = header_timeout_s
        self.open: dict[asyncio.BaseTransport, _Conn] = {}
        self.refused = 0
        self.evicted = 0
        self.timed_out = 0

    def supervisor(self, request: web.Request) -> bool:
        """Whether a request is the supervisor's: the admin key, or (no key) a loopback read of its paths."""
        if self.admin_key is not None:
            scheme, _, token = request.headers.get("Authorization", "").partition(" ")
            return scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), self.admin_key.encode())
        peer = request.transport.get_extra_info("peername") if request.transport is not None else None
        try:
            loopback = peer is not None and ipaddress.ip_address(peer[0]).is_loopback
        except ValueError:
            loopback = False
        return loopback and request.method == "GET" and request.path in SUPERVISOR_READS

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        conn = self.open.get(request.transport) if request.transport is not None else None
        if conn is None:
            return await handler(request)
        conn.active += 1
        conn.pending_since = None
        try:
            if conn.reserved and not self.supervisor(request):
                return web.json_response({"error": "too many connections; try again later"}, status=503,
                                         headers={"Connection": "close"})
            return await handler(request)
        finally:
            conn.active -= 1

    def evict(self) -> bool:
        """Make room for a new connection: close the one whose request head has waited longest (never one
        whose request is being served). Whether there was one; the newest connection is evicted last, so a
        client that sends its request as it connects (the supervisor) always gets in."""
        waiting = [(c.pending_since, t) for t, c in self.open.items() if c.active == 0 and c.pending_since is not None]
        if not waiting:
            return False
        _, transport = min(waiting, key=lambda w: w[0])
        self.evicted += 1
        del self.open[transport]
        _Budget.open -= 1
        transport.abort()  # its connection_lost follows and tells aiohttp
        return True

    def sweep(self) -> None:
        """Close the connections whose request head has not arrived in time."""
        cutoff = time.monotonic() - self.header_timeout_s
        for transport, conn in list(self.open.items()):
            if conn.active == 0 and conn.pending_since is not None and conn.pending_since < cutoff:
                self.timed_out += 1
                transport.abort()


class Listener:
    """One simulated server's socket, its aiohttp runner and its connection limits."""

    def __init__(self, runner: web.AppRunner, server: asyncio.Server, conns: _Connections) -> None:
        self.runner, self.server, self.conns = runner, server, conns
        self.port: int = server.sockets[0].getsockname()[1]
        self._sweeper = asyncio.create_task(self._sweep(), name="specctl-sim-sweep")

    @classmethod
    async def start(cls, app: web.Application, host: str, port: int, *, admin_key: str | None,
                    max_connections: int = DEFAULT_MAX_CONNECTIONS,
                    header_timeout_s: float = HEADER_TIMEOUT_S) -> Listener:
        """Bind ``host:port`` (PortInUse if taken) and serve ``app`` on it."""
        conns = _Connections(max_connections, admin_key, header_timeout_s)
        app.middlewares.insert(0, conns.middleware)
        sock = _bind(host, port)
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        try:
            await runner.setup()
            loop = asyncio.get_running_loop()
            inner: Any = runner.server
            assert inner is not None
            server = await loop.create_server(lambda: _Conn(conns, inner()), sock=sock, backlog=1024)
        except BaseException:
            sock.close()
            await runner.cleanup()
            raise
        return cls(runner, server, conns)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(min(SWEEP_S, self.conns.header_timeout_s / 2))
            self.conns.sweep()

    async def close(self) -> None:
        self._sweeper.cancel()
        self.server.close()
        for transport in list(self.conns.open):
            transport.abort()
        await self.runner.cleanup()


class BadAddress(ValueError):
    """--host names no address this machine can listen on."""


def _bind(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise BadAddress(f"--host {host}: {exc.strerror}") from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(f"port {port} on {host} is in use (another server?); choose another with --port") \
                from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise BadAddress(f"--host {host} is not an address of this machine") from None
        raise PortInUse(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.setblocking(False)
    return sock
