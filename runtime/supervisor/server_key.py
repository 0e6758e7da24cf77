"""The admin key that closes a model server's control endpoints to everyone but its supervisor.

Without it, any local user could ``POST /set_internal_state`` (or the
simulator's ``/sim/*``) to the server specctl launched and steer speculation
around the control socket's peer check and the journal. When specctl
launches a server it makes a random key, keeps it in a 0600 file in its
state directory (``keys/server-<supervisor pid>.key``, removed when it stops)
and starts the server with it: SGLang through ``--admin-api-key`` (given in a
0600 ``--config`` YAML, never on the command line, where ``ps`` shows it to
everyone), the simulator through its environment. ``/generate`` stays open.
With ``--attach`` the operator supplies the server's key (docs/sglang-plugin.md).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from specctl.runtime.supervisor import paths

KEY_ENV = "SPECCTL_ADMIN_KEY"  # the key of an attached server, for `specctl run --attach`


class KeyFileError(ValueError):
    """A key file that cannot be used; the message names it."""


def new_key() -> str:
    """256 random bits, URL-safe text (what a Bearer token may carry)."""
    return secrets.token_urlsafe(32)


def write_private(path: Path, text: str) -> Path:
    """Create ``path`` 0600 (its folder 0700) with ``text``; never through a symlink someone planted."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)
    return path


class LaunchKey:
    """A fresh key for a server this supervisor launches, and the files that carry it; ``remove()`` at stop."""

    def __init__(self) -> None:
        self.key = new_key()
        self.folder = paths.state_dir() / "keys"
        remove_orphans(self.folder)
        self.path = write_private(self.folder / f"server-{os.getpid()}.key", self.key + "\n")
        self._others: list[Path] = []

    def sglang_config(self, path: Path | None = None) -> Path:
        """A YAML file (default ``keys/sglang-<pid>.yaml``) for SGLang's ``--config``: the key reaches its
        argument parser, not its command line."""
        path = write_private(path or sglang_config_path(), f'admin-api-key: "{self.key}"\n')
        self._others.append(path)
        return path

    def remove(self) -> None:
        for path in (self.path, *self._others):
            with contextlib.suppress(OSError):
                path.unlink()


def remove_orphans(folder: Path) -> None:
    """Key files of supervisors that are gone (killed with -9: they could not clean up); their servers went
    with them (PR_SET_PDEATHSIG), so the keys open nothing, but a secret should not lie about."""
    for path in folder.glob("*-*.*"):
        pid = path.stem.rpartition("-")[2]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            with contextlib.suppress(OSError):
                path.unlink()
        except PermissionError:  # alive, someone else's (a state folder shared with root)
            pass


def sglang_config_path() -> Path:
    """Where this supervisor's SGLang ``--config`` file goes (named in the command line before it exists)."""
    return paths.state_dir() / "keys" / f"sglang-{os.getpid()}.yaml"


def read_key_file(path: Path) -> str:
    """An operator's key file: its first line. Refused if others may read it (it is a password)."""
    try:
        with open(path, "rb") as fh:
            mode = os.fstat(fh.fileno()).st_mode
            text = fh.read(4096).decode("utf-8").strip().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyFileError(f"cannot read the admin key file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if mode & 0o077:
        raise KeyFileError(f"the admin key file {path} can be read by others (mode {mode & 0o777:o}); chmod 600 it")
    if not text or not text[0].strip():
        raise KeyFileError(f"the admin key file {path} is empty")
    return text[0].strip()
