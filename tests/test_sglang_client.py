"""SGLangClient against a real HTTP server on loopback (aiohttp.web); nothing of the client is mocked."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from specctl.runtime.probes.metrics import MetricsError, ServerMetrics
from specctl.runtime.probes.sglang_client import RequestRejected, ServerUnreachable, SGLangClient

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

METRICS_TEXT = (
    "# HELP sglang:num_running_reqs The number of running requests.\n"
    "# TYPE sglang:num_running_reqs gauge\n"
    'sglang:num_running_reqs{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 7.0\n'
    "# TYPE specctl:spec_on gauge\n"
    "specctl:spec_on 0.0\n"
)
GPU = {"index": 0, "name": "NVIDIA H200", "uuid": "GPU-sim-0", "state": "ok", "error": None, "util": 50.0}


@dataclass
class FakeServer:
    """A loopback HTTP server whose routes a test can swap; records what it received."""

    url: str
    routes: dict[str, Handler]
    received: list[Any] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def hang(self, request: web.Request) -> web.Response:
        """Answer only at teardown: longer than any client timeout, without sleeping."""
        await self.release.wait()
        return web.json_response({})


async def _set_internal_state(server: FakeServer, request: web.Request) -> web.Response:
    body = await request.json()
    server.received.append(body)
    values = body["server_args"].values()
    return web.json_response([all(isinstance(v, (int, float)) for v in values)])


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    fake = FakeServer(url="", routes={})

    async def dispatch(request: web.Request) -> web.StreamResponse:
        handler = fake.routes.get(request.path)
        if handler is None:
            raise web.HTTPNotFound()
        return await handler(request)

    fake.routes.update(
        {
            "/health": _const(web.Response(text="")),
            "/server_info": _const(web.json_response({"version": "0.5.17", "internal_states": [{}]})),
            "/metrics": _const(web.Response(text=METRICS_TEXT, content_type="text/plain")),
            "/set_internal_state": lambda request: _set_internal_state(fake, request),
            "/sim/gpus": _const(web.json_response([GPU])),
        }
    )
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", dispatch)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    fake.url = f"http://{host}:{port}"
    yield fake
    fake.release.set()
    await runner.cleanup()


def _const(response: web.Response) -> Handler:
    """A handler that answers a fresh copy of a fixed response each time."""
    status, body = response.status, response.body
    content_type = response.content_type

    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=status, body=body, content_type=content_type)

    return handler


@pytest.fixture
async def client(server: FakeServer) -> AsyncIterator[SGLangClient]:
    c = SGLangClient(server.url, timeout=0.5)
    yield c
    await c.aclose()


async def test_health_true_when_serving(client: SGLangClient) -> None:
    assert await client.health() is True


async def test_health_false_on_503(server: FakeServer, client: SGLangClient) -> None:
    server.routes["/health"] = _const(web.Response(status=503))
    assert await client.health() is False


async def test_server_info_returns_the_object(client: SGLangClient) -> None:
    info = await client.server_info()
    assert info["version"] == "0.5.17"
    assert info["internal_states"] == [{}]


async def test_numbers_no_float_holds_read_as_unknown(server, client: SGLangClient) -> None:
    body = '{"version": "0.5.17", "internal_states": [{"avg_spec_accept_length": NaN, "x": 1e999, "y": -Infinity}]}'
    server.routes["/server_info"] = _const(web.Response(text=body, content_type="application/json"))
    state = (await client.server_info())["internal_states"][0]
    assert state == {"avg_spec_accept_length": None, "x": None, "y": None}


async def test_metrics_are_parsed(client: SGLangClient) -> None:
    assert await client.metrics() == ServerMetrics(running=7.0, spec_on=0.0)


async def test_garbage_metrics_are_unreachable(server: FakeServer, client: SGLangClient) -> None:
    server.routes["/metrics"] = _const(web.Response(text="<html>oops</html>"))
    with pytest.raises(ServerUnreachable) as info:
        await client.metrics()
    assert info.value.message == f"malformed /metrics text from {server.url}"
    assert isinstance(info.value.__cause__, MetricsError)


async def test_set_internal_state_sends_server_args(server: FakeServer, client: SGLangClient) -> None:
    assert await client.set_internal_state({"specctl_mode": 2, "specctl_off_at": 48}) == [True]
    assert server.received == [{"server_args": {"specctl_mode": 2, "specctl_off_at": 48}}]


async def test_sim_gpus_returns_the_list(client: SGLangClient) -> None:
    assert await client.sim_gpus() == [GPU]


async def test_slow_answer_times_out_with_a_short_message(server: FakeServer, client: SGLangClient) -> None:
    server.routes["/server_info"] = server.hang
    with pytest.raises(ServerUnreachable) as info:
        await client.server_info()
    assert info.value.message == "timed out after 0.5 s"


async def test_slow_health_raises_rather_than_reporting_unhealthy(server: FakeServer, client: SGLangClient) -> None:
    server.routes["/health"] = server.hang
    with pytest.raises(ServerUnreachable, match="timed out"):
        await client.health()


async def test_connection_refused_names_the_url() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, not listening: connects are refused
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        c = SGLangClient(url)
        try:
            with pytest.raises(ServerUnreachable) as info:
                await c.health()
        finally:
            await c.aclose()
    assert info.value.message == f"connection refused at {url}"


@pytest.mark.parametrize("status", [500, 502])
async def test_5xx_is_unreachable(server: FakeServer, client: SGLangClient, status: int) -> None:
    server.routes["/server_info"] = _const(web.Response(status=status))
    with pytest.raises(ServerUnreachable) as info:
        await client.server_info()
    assert info.value.message == f"HTTP {status} from {server.url}/server_info"


async def test_4xx_is_a_rejection_with_its_status(server: FakeServer, client: SGLangClient) -> None:
    server.routes["/set_internal_state"] = _const(web.json_response({"detail": "bad"}, status=422))
    with pytest.raises(RequestRejected) as info:
        await client.set_internal_state({"specctl_mode": 2})
    assert info.value.status == 422
    assert isinstance(info.value, ServerUnreachable)  # a poller handling outages handles this too


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/server_info", b"{not json"),
        ("/server_info", b"\xff\xfe\x00garbage"),
        ("/sim/gpus", b"not json at all"),
    ],
)
async def test_garbage_json_is_unreachable(server: FakeServer, client: SGLangClient, path: str, body: bytes) -> None:
    server.routes[path] = _const(web.Response(body=body, content_type="application/json"))
    call = client.server_info if path == "/server_info" else client.sim_gpus
    with pytest.raises(ServerUnreachable, match="undecodable JSON"):
        await call()


@pytest.mark.parametrize(
    ("path", "payload"),
    [
        ("/server_info", [1, 2]),
        ("/set_internal_state", {"ok": True}),
        ("/set_internal_state", [1]),
        ("/sim/gpus", [1, 2]),
    ],
)
async def test_wrong_json_shape_is_unreachable(server: FakeServer, client: SGLangClient, path: str,
                                               payload: Any) -> None:
    server.routes[path] = _const(web.json_response(payload))
    calls = {
        "/server_info": client.server_info,
        "/set_internal_state": lambda: client.set_internal_state({"specctl_mode": 0}),
        "/sim/gpus": client.sim_gpus,
    }
    with pytest.raises(ServerUnreachable, match="unexpected JSON shape"):
        await calls[path]()


def test_client_and_samplers_load_no_ui_library() -> None:
    """httpx would pull in rich (its CLI) wherever click is installed; this client must not."""
    modules = ["sglang_client", "metrics", "gpus", "procs"]
    code = (
        f"import sys; [__import__('specctl.runtime.probes.' + m) for m in {modules!r}]; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('rich', 'textual', 'httpx')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
