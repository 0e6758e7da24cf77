"""Async HTTP client of the endpoints that SGLang and specctl's simulator share.

Every call is bounded by the client's timeout, so a hung server shows up as
``ServerUnreachable`` within a poll interval instead of stalling the
supervisor. Errors carry a short message fit for the status line, e.g.
"connection refused at http://127.0.0.1:1234" or "timed out after 2.0 s".

Built on aiohttp, which the simulator already serves with, rather than httpx:
httpx's package ``__init__`` imports its command-line tool (click, pygments,
rich) whenever those are installed, and rich in a headless process breaks the
layering that tests/test_layers.py proves.
"""

from __future__ import annotations

import errno
import json
import math
from typing import Any

import aiohttp

from specctl.runtime.core.wire import ADMIN_PATHS
from specctl.runtime.probes.metrics import MetricsError, ServerMetrics, parse_metrics

MAX_CONNECTIONS = 8
KEY_ENV_NAME = "SPECCTL_ADMIN_KEY"  # said in a 401's message; runtime/supervisor/server_key.py reads it


class ServerUnreachable(Exception):
    """No usable answer: connect error, timeout, 5xx, a body we cannot decode.

    The one error a poller must handle; ``message`` is short and human.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ServerBusy(ServerUnreachable):
    """It took the connection but did not answer in time: working (a long prefill, a kernel compile), not gone.

    A subclass, so a poller that only cares about "no usable answer" needs no change.
    """


class RequestRejected(ServerUnreachable):
    """The server answered 4xx: it is up but refused this request (bad body, unknown path).

    A subclass, so that code handling "no usable answer" covers it too; catch
    it first to tell a refusal from an outage.
    """

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class SGLangClient:
    """One connection pool per server; call ``aclose`` when done.

    The aiohttp session is opened on the first call, inside the event loop, so
    the client itself can be built from synchronous code.
    """

    def __init__(self, base_url: str, timeout: float = 2.0, *, admin_key: str | None = None,
                 api_key: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        # SGLang checks the admin key on its ADMIN_OPTIONAL endpoints (/set_internal_state) and the API key,
        # when one is set, on the rest (docs/sglang-plugin.md); each goes only where it is asked for
        self._admin = {"Authorization": f"Bearer {admin_key}"} if admin_key else {}
        self._normal = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    async def health(self) -> bool:
        """True when serving, False on 503 (starting or unhealthy)."""
        status, _ = await self._send("GET", "/health", allow_status=503)
        return status != 503

    async def server_info(self) -> dict[str, Any]:
        """GET /server_info: server args, version and ``internal_states`` (one per DP rank)."""
        return await self._json("GET", "/server_info", dict)

    async def metrics(self) -> ServerMetrics:
        """GET /metrics, parsed; text that is not Prometheus format is as useless as no answer."""
        _, body = await self._send("GET", "/metrics")
        try:
            return parse_metrics(body.decode("utf-8", errors="replace"))
        except MetricsError as exc:
            raise ServerUnreachable(f"malformed /metrics text from {self.base_url}") from exc

    async def set_internal_state(self, server_args: dict[str, int | float]) -> list[bool]:
        """POST /set_internal_state; one boolean per DP rank, False where a value was refused."""
        body = {"server_args": server_args}
        return await self._json("POST", "/set_internal_state", list, item=bool, json=body)

    async def sim_gpus(self) -> list[dict[str, Any]]:
        """GET /sim/gpus (simulator only): GPU dicts shaped as in a sample record."""
        return await self._json("GET", "/sim/gpus", list, item=dict)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _json(
        self, method: str, path: str, kind: type, item: type | None = None, **kwargs: Any
    ) -> Any:
        """The body as JSON of type ``kind``; a body of the wrong shape is as useless as garbage."""
        _, body = await self._send(method, path, **kwargs)
        try:
            # NaN, Infinity and 1e999 (which Python's json takes) read as unknown: None, never a number
            value = json.loads(body, parse_constant=lambda _: None, parse_float=_finite_or_none)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError alike
            raise ServerUnreachable(f"undecodable JSON from {self.base_url}{path}") from exc
        if not isinstance(value, kind) or (item and not all(isinstance(v, item) for v in value)):
            raise ServerUnreachable(f"unexpected JSON shape from {self.base_url}{path}")
        return value

    async def _send(
        self, method: str, path: str, allow_status: int | None = None, **kwargs: Any
    ) -> tuple[int, bytes]:
        """One request, read whole within the timeout; failures and error statuses raise."""
        url = f"{self.base_url}{path}"
        headers = self._admin if path.startswith(ADMIN_PATHS) else self._normal
        try:
            async with self._open().request(method, url, headers=headers, **kwargs) as response:
                status, body = response.status, await response.read()
        except aiohttp.ConnectionTimeoutError as exc:  # no connection at all: a host that is gone
            raise ServerUnreachable(f"no connection within {self.timeout} s") from exc
        except TimeoutError as exc:  # before ClientError: aiohttp's timeouts are both; connected, no answer
            raise ServerBusy(f"timed out after {self.timeout} s") from exc
        except aiohttp.ClientConnectorError as exc:
            raise ServerUnreachable(_connect_message(exc, self.base_url)) from exc
        except aiohttp.ClientError as exc:
            raise ServerUnreachable(f"no answer from {url} ({type(exc).__name__})") from exc
        if status == allow_status or status < 400:
            return status, body
        message = f"HTTP {status} from {url}"
        if status >= 500:
            raise ServerUnreachable(message)
        if status in (401, 403):
            message += (" (the server wants an admin key: with --attach give it by --admin-key-file, "
                        f"${KEY_ENV_NAME} or admin_key_file in the config)")
        raise RequestRejected(message, status)

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            timeout = aiohttp.ClientTimeout(total=self.timeout)
            # a few connections are all a poll and a command need; the default 100 would eat into the
            # descriptors the control socket counts on (runtime/control/server.py FD_HEADROOM)
            connector = aiohttp.TCPConnector(limit=MAX_CONNECTIONS)
            self._session = aiohttp.ClientSession(timeout=timeout, connector=connector)
        return self._session


def _connect_message(exc: aiohttp.ClientConnectorError, base_url: str) -> str:
    """Name the common case plainly; keep the OS's words for the rest (DNS, unreachable host)."""
    if exc.os_error.errno == errno.ECONNREFUSED:
        return f"connection refused at {base_url}"
    return f"cannot connect to {base_url}: {exc.os_error.strerror or exc}"


def _finite_or_none(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None
