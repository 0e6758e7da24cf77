"""Async HTTP client of the endpoints that SGLang and specctl's simulator share.

Every call is bounded by the client's timeout, so a hung server shows up as
``ServerUnreachable`` within a poll interval instead of stalling the
supervisor. Errors carry a short message fit for the status line, e.g.
"connection refused at http://127.0.0.1:1234" or "timed out after 2.0 s".
"""

from __future__ import annotations

from typing import Any

import httpx

from .metrics import ServerMetrics, parse_metrics


class SGLangError(Exception):
    """Base of the errors this client raises; ``message`` is short and human."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ServerUnreachable(SGLangError):
    """No usable answer: connect error, timeout, 5xx, or a body we cannot decode."""


class RequestRejected(SGLangError):
    """The server answered 4xx: it is up but refused this request (bad body, unknown path)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class SGLangClient:
    """One connection pool per server; call ``aclose`` when done."""

    def __init__(self, base_url: str, timeout: float = 2.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        # trust_env=False: an HTTP(S)_PROXY in the environment must not
        # reroute calls to a server on loopback.
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, trust_env=False)

    async def health(self) -> bool:
        """True when serving, False on 503 (starting or unhealthy)."""
        response = await self._send("GET", "/health", allow_status=503)
        return response.status_code != 503

    async def server_info(self) -> dict[str, Any]:
        """GET /server_info: server args, version and ``internal_states`` (one per DP rank)."""
        return await self._json("GET", "/server_info", dict)

    async def metrics(self) -> ServerMetrics:
        """GET /metrics, parsed; raises MetricsError when the text is not Prometheus format."""
        response = await self._send("GET", "/metrics")
        return parse_metrics(response.text)

    async def set_internal_state(self, server_args: dict[str, int | float]) -> list[bool]:
        """POST /set_internal_state; one boolean per DP rank, False where a value was refused."""
        body = {"server_args": server_args}
        return await self._json("POST", "/set_internal_state", list, item=bool, json=body)

    async def sim_gpus(self) -> list[dict[str, Any]]:
        """GET /sim/gpus (simulator only): GPU dicts shaped as in a sample record."""
        return await self._json("GET", "/sim/gpus", list, item=dict)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _json(
        self, method: str, path: str, kind: type, item: type | None = None, **kwargs: Any
    ) -> Any:
        """The body as JSON of type ``kind``; a body of the wrong shape is as useless as garbage."""
        response = await self._send(method, path, **kwargs)
        try:
            value = response.json()
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError alike
            raise ServerUnreachable(f"undecodable JSON from {self.base_url}{path}") from exc
        if not isinstance(value, kind) or (item and not all(isinstance(v, item) for v in value)):
            raise ServerUnreachable(f"unexpected JSON shape from {self.base_url}{path}")
        return value

    async def _send(
        self, method: str, path: str, allow_status: int | None = None, **kwargs: Any
    ) -> httpx.Response:
        """One request; transport failures and error statuses become SGLangError."""
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.TimeoutException as exc:
            raise ServerUnreachable(f"timed out after {self.timeout} s") from exc
        except httpx.ConnectError as exc:
            raise ServerUnreachable(_connect_message(exc, self.base_url)) from exc
        except httpx.HTTPError as exc:
            message = f"no answer from {self.base_url}{path} ({type(exc).__name__})"
            raise ServerUnreachable(message) from exc
        status = response.status_code
        if status == allow_status or status < 400:
            return response
        message = f"HTTP {status} from {self.base_url}{path}"
        if status >= 500:
            raise ServerUnreachable(message)
        raise RequestRejected(message, status)


def _connect_message(exc: httpx.ConnectError, base_url: str) -> str:
    """Name the common case plainly; keep the OS's words for the rest (DNS, unreachable host)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return f"connection refused at {base_url}"
        cause = cause.__cause__ or cause.__context__
    return f"cannot connect to {base_url}: {exc}"

