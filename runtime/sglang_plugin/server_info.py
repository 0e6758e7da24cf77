"""The admin key never leaves the server: key fields out of every argument dump SGLang answers with.

SGLang's ``/server_info`` (and the deprecated ``/get_server_info``, ``/get_load``
and the gRPC server info) is open even when ``--admin-api-key`` is set, and it
returns every server argument: 0.5.17 builds it from
``TokenizerManager.resolved_config_dict(dataclasses.asdict(server_args))``,
0.5.23 from ``build_server_info`` (``server_args.resolved_dict()`` plus the
launch command). Any local user could read the admin key there and POST
``/set_internal_state``. AFTER hooks on those builders (compat's
``Release.redact_hooks``) drop every ``*api_key*`` field and mask a key's value
in the launch command; the dump is a copy, so the server's own arguments keep
their key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specctl.runtime.core.redact import redact_args
from specctl.runtime.sglang_plugin import sglang_access
from specctl.runtime.sglang_plugin.release_types import HookSpec, Release


def hooks_for(release: Release) -> tuple[HookSpec, ...]:
    return release.redact_hooks


def after_args_dump(result: Any, *args: Any, **kwargs: Any) -> Any:
    """AFTER hook: the dump without its keys (anything else passes as it came)."""
    return redact_args(result) if isinstance(result, Mapping) else result


def install(release: Release) -> None:
    for spec in hooks_for(release):
        sglang_access.register_hook(spec, after_args_dump)
