"""The optional TOML config: defaults a site sets once, which flags on the command line override.

```toml
[policy]              # any PolicySettings field
off_at = 48
min_accept = 1.0

[supervisor]
interval = 0.5        # seconds between samples
log = "/var/log/specctl/run.jsonl"
log_max_mb = 64       # rotate past this size; three older files are kept
socket = "/run/specctl/specctl.sock"
sim_preset = "h200-llama8b"
sim_load = "bursts"
admin_key_file = "~/.config/specctl/server.key"  # an --attach'ed server's admin key (0600)

[fleet]               # `specctl fleet` and `specctl tui --router/--workers` (docs/fleet.md)
router = "http://router:30000"
router_key_file = "~/.config/specctl/router.key"   # the router's control-plane key (role admin)
workers = ["http://10.0.0.1:30000"]                 # a plain list, where there is no router
expect = ["http://10.0.0.1:30000"]                  # listed here but not by the router: `missing`
admin_key_file = "~/.config/specctl/fleet.keys"    # the workers' admin keys
timeout = 2.0
```

Found at ``paths.config_file()`` (``$SPECCTL_CONFIG`` overrides). Read by ``specctl run``/``tui``
(config.SupervisorConfig.from_args) and, for ``[policy]``, by ``specctl sglang-args``, so the
policy it prints is the one run starts with. Validated
strictly: an unknown table or key is an error that names it, so a typo never
passes silently.
"""

from __future__ import annotations

import os
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specctl.runtime.core.settings import PolicySettings, SettingsError, check_fields, floor_for_steps
from specctl.runtime.supervisor import paths

SUPERVISOR_KEYS: dict[str, type | tuple[type, ...]] = {
    "interval": (int, float), "log": str, "log_max_mb": (int, float), "socket": str, "sim_preset": str,
    "sim_load": str, "admin_key_file": str,
}

FLEET_KEYS: dict[str, type | tuple[type, ...]] = {
    "router": str, "router_key_file": str, "workers": list, "expect": list, "admin_key_file": str,
    "timeout": (int, float),
}


class ConfigFileError(ValueError):
    """The config file is unreadable or invalid; the message names the file and the key."""


@dataclass(frozen=True)
class FileConfig:
    policy: dict[str, Any] = field(default_factory=dict)
    supervisor: dict[str, Any] = field(default_factory=dict)
    fleet: dict[str, Any] = field(default_factory=dict)


MAX_BYTES = 1024 * 1024  # a config is a few lines; past this it is a mistake (or /dev/zero)
CONFIG_ENV = "SPECCTL_CONFIG"


def load(path: Path | None = None) -> FileConfig:
    """The config at ``path`` (default: the usual place); an absent file is an empty config,
    unless $SPECCTL_CONFIG named it: a path the operator gave that is not there is a mistake to say."""
    named = path is None and bool(os.environ.get(CONFIG_ENV))  # the operator pointed at it: it must be there
    path = path or paths.config_file()
    try:
        raw = tomllib.loads(_read(path))
    except FileNotFoundError:
        if named:
            raise ConfigFileError(f"{CONFIG_ENV} names {path}, which does not exist "
                                  f"(unset {CONFIG_ENV} to run without a config file)") from None
        return FileConfig()
    except OSError as exc:
        raise ConfigFileError(f"{path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigFileError(f"{path}: {exc}") from None
    except RecursionError:
        raise ConfigFileError(f"{path}: nested too deep to be a specctl config") from None
    unknown = set(raw) - {"policy", "supervisor", "fleet"}
    if unknown:
        raise ConfigFileError(f"{path}: unknown table [{sorted(unknown)[0]}] (known: [fleet], [policy], [supervisor])")
    return FileConfig(policy=_policy(path, raw.get("policy", {})),
                      supervisor=_supervisor(path, raw.get("supervisor", {})),
                      fleet=_table(path, "fleet", FLEET_KEYS, raw.get("fleet", {})))


def _read(path: Path) -> str:
    """The file's text: a regular file of at most MAX_BYTES. Opened without blocking, so a FIFO named by
    SPECCTL_CONFIG is refused instead of hanging every verb, and read up to the cap, so /dev/zero is too."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigFileError(f"{path}: not a regular file")
        data = fh.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ConfigFileError(f"{path}: larger than {MAX_BYTES // 1024} KiB; a config is a few lines")
    return data.decode("utf-8")


def _policy(path: Path, table: Any) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise ConfigFileError(f"{path}: [policy] must be a table")
    try:
        PolicySettings().with_changes(table)
    except SettingsError as exc:
        if exc.field == "min_accept" and "min_accept" not in table:  # the default floor, out of the file's steps' reach
            steps = check_fields({"steps": table.get("steps", PolicySettings.steps)})["steps"]
            raise ConfigFileError(
                f"{path}: [policy] steps = {steps}: the default acceptance floor min_accept "
                f"{PolicySettings.min_accept:g} (accepted draft tokens a verify) is more than a verify of {steps} "
                f"draft step{'s' if steps != 1 else ''} can accept; add {floor_fix(steps)}") from None
        raise ConfigFileError(f"{path}: [policy] {exc.field}: {exc.message}") from None
    return dict(table)


def floor_fix(steps: int) -> str:
    """The acceptance floor for ``steps`` draft steps, in the file's words: what a refusal tells one to write."""
    return (f"min_accept = {floor_for_steps(steps):g} under [policy] (the default scaled to {steps} draft "
            f"step{'s' if steps != 1 else ''}; docs/policy.md)")


def _supervisor(path: Path, table: Any) -> dict[str, Any]:
    return _table(path, "supervisor", SUPERVISOR_KEYS, table)


def _table(path: Path, name: str, known: dict[str, type | tuple[type, ...]], table: Any) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise ConfigFileError(f"{path}: [{name}] must be a table")
    for key, value in table.items():
        kind = known.get(key)
        if kind is None:
            raise ConfigFileError(f"{path}: [{name}] unknown key {key!r} "
                                  f"(known: {', '.join(sorted(known))})")
        if not isinstance(value, kind) or isinstance(value, bool) or (
                isinstance(value, list) and not all(isinstance(v, str) for v in value)):
            raise ConfigFileError(f"{path}: [{name}] {key} has the wrong type: {value!r}")
    return dict(table)


def socket_path() -> Path:
    """The control socket: ``$SPECCTL_SOCKET``, else the config's, else the runtime dir's."""
    if os.environ.get("SPECCTL_SOCKET"):
        return paths.socket_path()
    configured = load().supervisor.get("socket")
    return Path(configured) if configured else paths.socket_path()
