"""The admin key read back as any local user would: over /server_info and from the supervisor's journal.

SGLang answers /server_info (and /get_server_info) to anyone, with every server argument, and 0.5.17 logs its
arguments at start. The plugin's AFTER hooks on the builders of that answer drop every ``*api_key*`` field; the
supervisor masks every key it knows (and any ``api_key=...`` value) in server log lines. Here a stand-in server
answers /server_info over HTTP the way each release builds it (0.5.17: ``resolved_config_dict(asdict(args))``;
0.5.23: ``build_server_info``), with the plugin's hooks applied as SGLang's HookRegistry applies AFTER hooks; the
online tier checks the same against both wheels' real sources and HookRegistry (test_plugin_contract.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from specctl.runtime.core.redact import redact_text
from specctl.runtime.sglang_plugin import server_info, sglang_access
from specctl.runtime.supervisor.config import SupervisorConfig
from specctl.runtime.supervisor.lifecycle import Supervisor

from support.stand_in_modules import stand_in_modules

STANDIN = Path(__file__).parent / "standin_sglang"


@dataclasses.dataclass
class ServerArgs:
    """The fields of SGLang's ServerArgs that matter here."""

    model_path: str = "/models/llama"
    port: int = 30000
    api_key: str | None = "s3cret-api"
    admin_api_key: str | None = "s3cret-admin"

    def resolved_dict(self) -> dict[str, Any]:  # 0.5.23
        return dataclasses.asdict(self)

    @property
    def launch_command(self) -> str:  # 0.5.23 keeps the command line (watermark secrets alone are masked)
        return f"python -m sglang.launch_server --model-path m --api-key {self.api_key} --port {self.port}"


class TokenizerManager:
    def __init__(self, server_args: ServerArgs) -> None:
        self.server_args = server_args

    def resolved_config_dict(self, base: dict[str, Any]) -> dict[str, Any]:
        return {**base, "served_model_name": "m"}


def build_server_info(server_args: Any, scheduler_info: dict[str, Any]) -> dict[str, Any]:
    result = server_args.resolved_dict()
    result["launch_command"] = server_args.launch_command
    result.update(scheduler_info)
    return result


class Registry:
    """SGLang's HookRegistry as far as AFTER hooks go: register, then apply by rebinding the target."""

    hooks: list[tuple[str, Any]] = []

    @classmethod
    def register(cls, target: str, hook: Any, hook_type: Any) -> None:
        assert hook_type == "AFTER"
        cls.hooks.append((target, hook))

    @classmethod
    def apply_hooks(cls) -> None:
        for target, hook in cls.hooks:
            owner_name, attr = target.rsplit(".", 1)
            owner = sglang_access.resolve(owner_name)
            original = getattr(owner, attr)

            @functools.wraps(original)
            def wrapper(*args: Any, _original: Any = original, _hook: Any = hook, **kwargs: Any) -> Any:
                result = _original(*args, **kwargs)
                modified = _hook(result, *args, **kwargs)
                return modified if modified is not None else result

            setattr(owner, attr, wrapper)
        cls.hooks = []


def server_app(version: str) -> web.Application:
    """/server_info and /get_server_info as the release's http_server.py builds them (the parts read here)."""
    args = ServerArgs()
    manager = TokenizerManager(args)
    common = sys.modules["sglang.srt.utils.common"]

    async def info(request: web.Request) -> web.Response:
        if version == "0.5.17":
            body = {**manager.resolved_config_dict(dataclasses.asdict(args)), "version": version}
        else:
            body = {**common.build_server_info(args, {"status": "ready"}), "version": version}
        return web.json_response(body)

    app = web.Application()
    app.router.add_get("/server_info", info)
    app.router.add_get("/get_server_info", info)
    return app


@pytest.fixture
def hooked_sglang(monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in_modules(monkeypatch, {
        "sglang.srt.managers.tokenizer_manager": {"TokenizerManager": TokenizerManager},
        "sglang.srt.utils.common": {"build_server_info": build_server_info},
    })
    monkeypatch.setattr(TokenizerManager, "resolved_config_dict", TokenizerManager.resolved_config_dict)
    monkeypatch.setattr(Registry, "hooks", [])


@pytest.fixture
async def served(request: pytest.FixtureRequest, hooked_sglang: None) -> AsyncIterator[tuple[str, str]]:
    version = request.param
    monkey = pytest.MonkeyPatch()
    monkey.setattr(sglang_access, "register_hook",
                   lambda spec, hook: Registry.register(spec.target, hook, spec.hook_type))
    try:
        server_info.install(sglang_access.release_for(version))
        Registry.apply_hooks()
        runner = web.AppRunner(server_app(version))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            yield version, f"http://127.0.0.1:{port}"
        finally:
            await runner.cleanup()
    finally:
        monkey.undo()


@pytest.mark.parametrize("served", ["0.5.17", "0.5.23"], indirect=True)
async def test_the_admin_key_cannot_be_read_back_over_server_info(served: tuple[str, str]) -> None:
    version, url = served
    async with httpx.AsyncClient(timeout=10) as http:
        for path in ("/server_info", "/get_server_info"):
            answer = await http.get(url + path)
            assert answer.status_code == 200
            text = answer.text
            assert "s3cret" not in text and "api_key" not in text, (version, path, text)
            body = json.loads(text)
            assert body["model_path"] == "/models/llama" and body["version"] == version
    if version == "0.5.23":
        assert body["launch_command"].endswith("--api-key <redacted> --port 30000")


def test_without_the_hooks_the_stand_in_gives_the_key_away(hooked_sglang: None) -> None:
    """The stand-in is honest: unhooked, it answers with the key, as SGLang does."""
    args = ServerArgs()
    assert TokenizerManager(args).resolved_config_dict(dataclasses.asdict(args))["admin_api_key"] == "s3cret-admin"


@pytest.mark.parametrize("line", [
    "server_args=ServerArgs(model_path='m', api_key='s3cret', admin_api_key='s3cret', port=1)",
    "{'admin_api_key': 's3cret', 'port': 1}",
    '{"api_key": "s3cret"}',
    "python -m sglang.launch_server --admin-api-key s3cret --port 1",
    "python -m sglang.launch_server --api-key=s3cret",
    "the key s3cret turned up in plain words",
])
def test_log_lines_lose_known_keys_and_key_patterns(line: str) -> None:
    out = redact_text(line, ["s3cret"])
    assert "s3cret" not in out and "<redacted>" in out


def test_unset_keys_and_ordinary_text_stay() -> None:
    line = "server_args=ServerArgs(api_key=None, admin_api_key=None, model_path='m')"
    assert redact_text(line) == line
    assert redact_text("Load weight end. type=LlamaForCausalLM") == "Load weight end. type=LlamaForCausalLM"


async def test_the_journal_and_the_screen_never_see_the_launched_servers_key(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The stand-in launcher logs ``server_args=ServerArgs(... admin_api_key='KEY' ...)`` as SGLang 0.5.17 does,
    with the key the supervisor gave it and an operator's --api-key; neither reaches the journal."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(STANDIN), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("STANDIN_STEP_S", "0.05")
    monkeypatch.setenv("SPECCTL_STATE_DIR", str(tmp_path / "state"))
    journal = tmp_path / "journal.jsonl"
    cfg = SupervisorConfig(backend="sglang", model="/models/llama", draft="/models/eagle3", interval=0.1,
                           restart_backoff=(0.2, 1.0), journal_path=journal,
                           sglang_args=["--api-key", "s3cret-api-key"])
    sup = Supervisor(cfg)
    screen = sup.hub.subscribe()
    await sup.start()
    try:
        key = sup.backend.admin_key
        assert key
        end = asyncio.get_running_loop().time() + 60
        while not any("server_args=ServerArgs" in line for r in sup.recent if r.get("event") == "server_log"
                      for line in r["lines"]):
            assert asyncio.get_running_loop().time() < end, "the stand-in's argument line never came"
            await asyncio.sleep(0.05)
    finally:
        await sup.stop()
    text = journal.read_text()
    assert "server_args=ServerArgs" in text and "admin_api_key='<redacted>'" in text
    assert key not in text and "s3cret-api-key" not in text
    seen = []
    while (record := screen._queue.get_nowait() if not screen._queue.empty() else None) is not None:
        seen.append(json.dumps(record))  # what a console or `specctl run` prints came through the same hub
    assert any("server_args=ServerArgs" in s for s in seen) and not any(key in s for s in seen)
