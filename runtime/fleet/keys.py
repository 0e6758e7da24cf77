"""Each worker's admin key (SGLang's ``--admin-api-key``), which ``/set_internal_state`` wants.

The router never sees these keys: specctl sends each worker's change straight to it. One file
serves the fleet in either form:

- one key on one line: every worker's;
- ``URL KEY`` lines (``#`` comments, blank lines skipped): a key per worker, and a line ``* KEY``
  for the rest.

Without a file, ``$SPECCTL_ADMIN_KEY`` is every worker's key.
"""

from __future__ import annotations

import os
from pathlib import Path

from specctl.runtime.fleet.inventory import normal_url

KEY_ENV = "SPECCTL_ADMIN_KEY"
MAX_BYTES = 1 << 20


class KeyFileError(ValueError):
    """A key file that cannot be used; the message names it and the line."""


class Keys:
    """The key to send to each worker (None: send none)."""

    def __init__(self, per_worker: dict[str, str] | None = None, default: str | None = None) -> None:
        self.per_worker = per_worker or {}
        self.default = default

    def for_url(self, url: str) -> str | None:
        return self.per_worker.get(normal_url(url), self.default)

    def headers(self, url: str) -> dict[str, str]:
        key = self.for_url(url)
        return {"Authorization": f"Bearer {key}"} if key else {}


def read_keys(path: str | Path | None) -> Keys:
    """The keys from ``path``, else from ``$SPECCTL_ADMIN_KEY``, else none; KeyFileError for a bad file."""
    if path is None:
        return Keys(default=os.environ.get(KEY_ENV) or None)
    path = Path(path).expanduser()
    try:
        data = path.read_bytes()[:MAX_BYTES + 1]
        text = data.decode("utf-8")
    except OSError as exc:
        raise KeyFileError(f"cannot read the key file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise KeyFileError(f"the key file {path} is not UTF-8 text") from None
    lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise KeyFileError(f"the key file {path} is empty")
    if len(lines) == 1 and len(lines[0][1].split()) == 1:
        return Keys(default=lines[0][1])
    per: dict[str, str] = {}
    default = None
    for n, line in lines:
        parts = line.split()
        if len(parts) != 2:
            raise KeyFileError(f"{path}:{n}: expected 'URL KEY' (or '* KEY' for the rest)")
        if parts[0] == "*":
            default = parts[1]
        else:
            per[normal_url(parts[0])] = parts[1]
    return Keys(per, default)
