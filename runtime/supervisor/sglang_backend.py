"""A real SGLang server, launched by specctl with its plugin in charge of speculation."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

from specctl.runtime.core.adaptive_config import write_config
from specctl.runtime.supervisor.backends import BackendError, ProcessBackend, free_port
from specctl.runtime.supervisor.config import SupervisorConfig
from specctl.runtime.supervisor.launcher import StartupProgress, api_key_of, build_command, launch_env
from specctl.runtime.supervisor.server_key import sglang_config_path


class SGLangBackend(ProcessBackend):
    """``python -m sglang.launch_server`` in its own process group, on a loopback port."""

    def __init__(self, config: SupervisorConfig) -> None:
        assert config.model and config.draft
        self._dir = tempfile.TemporaryDirectory(prefix="specctl-sglang-")
        settings = config.start_settings()  # checked at config: PolicySettings(steps=1) alone would be refused
        adaptive = write_config(Path(self._dir.name) / "adaptive.json", config.spec_steps,
                                candidates=settings.candidates)
        port = config.port or free_port()
        self._key_config = sglang_config_path()
        argv = build_command(config.model, config.draft, config.tp, config.spec_steps, port,
                             "127.0.0.1", str(adaptive), config.sglang_args, key_config=str(self._key_config),
                             topk=config.topk, draft_tokens=config.draft_tokens)
        self.api_key = api_key_of(config.sglang_args)
        costs = str(config.depth_costs.resolve()) if config.depth_costs else None
        env = {**os.environ, **launch_env(settings, os.environ, costs, tree=config.topk > 1)}
        self._startup = StartupProgress()
        super().__init__(argv, env=env, stop_grace_s=config.stop_grace_s, progress_parser=self._startup.feed)
        self.url = f"http://127.0.0.1:{port}"

    async def start(self) -> None:
        await self._check_installed()
        self._startup = StartupProgress()
        self._parse_progress = self._startup.feed
        self._new_key().sglang_config(self._key_config)  # --config names this file: the key, 0600, for --admin-api-key
        await super().start()

    async def _check_installed(self) -> None:
        """A missing SGLang is one clear message, not a crash loop of import errors."""
        probe = await asyncio.create_subprocess_exec(
            self.argv[0], "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('sglang') is None)",
            env=self.env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        if await probe.wait() != 0:
            raise BackendError(f"SGLang is not installed for {self.argv[0]}; install it there "
                               "(pip install 'specctl[sglang]') and run `specctl server start`, "
                               "or supervise a running server with --attach URL", retry=False)
