"""How the plugin reaches the running SGLang: which release is installed, names resolved, hooks registered.

Everything here runs inside SGLang's process at start-up or per call: the
installed version read from its distribution metadata and matched against
compat.RELEASES (anything else is a start-up refusal, ``SpecctlPluginError``),
dotted names resolved as HookRegistry resolves them, hooks registered, and the
answer objects SGLang's scheduler expects built.
"""

from __future__ import annotations

import copy
import importlib.metadata
import pkgutil
from collections.abc import Callable
from typing import Any

from specctl.runtime.sglang_plugin.compat import HOOK_REGISTRY, HOOK_TYPE, RELEASES, SET_STATE_OUTPUT
from specctl.runtime.sglang_plugin.release_types import HookSpec, Release


class SpecctlPluginError(SystemExit):
    """A start-up refusal.

    SGLang's ``load_plugins`` catches ``Exception`` around each plugin and only
    logs it, which would leave a server running stock adaptive speculation
    while the operator believes specctl is in charge. ``SystemExit`` passes
    through that handler and stops the launch with this message.
    """

    def __init__(self, message: str) -> None:
        super().__init__(f"specctl: {message}")


def installed_version() -> str:
    """The installed SGLang's version, from its distribution metadata."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        raise SpecctlPluginError("SGLang's package metadata was not found; cannot check its version") from None


def release_for(version: str) -> Release:
    """The release data for ``version``; anything unverified is refused, not guessed."""
    release = RELEASES.get(version)
    if release is None:
        supported = ", ".join(RELEASES)
        raise SpecctlPluginError(
            f"SGLang {version} is not supported (supported: {supported}); "
            "unset SPECCTL_PLUGIN to run SGLang without specctl"
        )
    return release


def resolve(dotted: str) -> Any:
    """Import ``module.attr`` (the same resolution HookRegistry uses)."""
    return pkgutil.resolve_name(dotted)


def register_hook(spec: HookSpec, hook: Callable[..., Any] | type) -> None:
    registry = resolve(HOOK_REGISTRY)
    hook_type = getattr(resolve(HOOK_TYPE), spec.hook_type)
    registry.register(spec.target, hook, hook_type)


def set_state_output(updated: bool) -> Any:
    """SGLang's answer object for /set_internal_state."""
    return resolve(SET_STATE_OUTPUT)(updated=updated)


def with_server_args(recv_req: Any, server_args: dict[str, Any]) -> Any:
    """A copy of a SetInternalStateReq (a mutable msgspec struct in both releases) with other keys.

    A copy, not an edit: the scheduler still holds the original request to
    route the answer back to the HTTP worker.
    """
    clone = copy.copy(recv_req)
    clone.server_args = server_args
    return clone
