"""What the commands see of the supervisor and of the model server: two Protocols.

commands.py, steering.py and threshold_rows.py type their supervisor with these, so none of
them imports lifecycle.py, which imports them.
"""

from __future__ import annotations

from typing import Any, Protocol

from specctl.runtime.core import records


class SettingsClient(Protocol):
    """The one call the commands make to the model server (probes.sglang_client.SGLangClient)."""

    async def set_internal_state(self, server_args: dict[str, int | float]) -> list[bool]: ...

    async def server_info(self) -> dict[str, Any]: ...


class SupervisorPort(Protocol):
    """What the commands need from the supervisor, and no more (lifecycle.Supervisor provides it).

    Narrow so that the commands see neither the supervisor's internals nor its module:
    lifecycle imports this one, never the other way round.
    """

    @property
    def state(self) -> str: ...  # the server's health state (health.ServerHealth)

    @property
    def latest_sample(self) -> records.Sample | None: ...

    @property
    def owns_server(self) -> bool: ...  # False for --attach: specctl neither starts nor stops it

    @property
    def server_client(self) -> SettingsClient | None: ...  # None while no server runs

    def emit(self, record: records.Record) -> None: ...

    def expect_settings(self, settings: dict[str, Any]) -> None: ...  # ours: not an external change

    async def poll_now(self, timeout: float = 5.0) -> None: ...

    async def stop_server(self) -> None: ...

    async def start_server(self) -> None: ...

