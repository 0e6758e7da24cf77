"""The supervisor's ``specctl-sim-PID-*`` folders in the temporary directory, removed even after a kill -9.

The supervisor that starts a simulator keeps its port file in a temporary
folder named with its own pid (``specctl-sim-PID-XXXX``) and removes it when it
stops. Killed with -9 it cannot, so the simulator cleans up: at its own exit,
the folder of its port file when the pid that named it is gone; at every start,
every such folder of this user whose pid is gone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path

PREFIX = "specctl-sim-"
_NAME = re.compile(r"specctl-sim-(\d+)-[^/]+")


def owner_pid(folder: Path) -> int | None:
    """The pid a ``specctl-sim-PID-*`` folder is named with, else None."""
    m = _NAME.fullmatch(folder.name)
    return int(m.group(1)) if m else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _stale(folder: Path) -> bool:
    pid = owner_pid(folder)
    if pid is None or pid == os.getpid():
        return False
    try:
        st = folder.lstat()
    except OSError:
        return False
    # only a real folder of this user (never a link, never someone else's)
    return folder.is_dir() and not folder.is_symlink() and st.st_uid == os.getuid() and not _alive(pid)


def sweep_stale_dirs(port_file: Path | None = None, tmp: Path | None = None) -> list[Path]:
    """Remove every stale ``specctl-sim-PID-*`` folder in ``tmp`` (default: the temporary directory and the
    folder above ``port_file``); the folders removed."""
    roots = {Path(tmp or tempfile.gettempdir())}
    if port_file is not None and owner_pid(port_file.parent) is not None:
        roots.add(port_file.parent.parent)
    removed = []
    for root in roots:
        with contextlib.suppress(OSError):
            for entry in root.iterdir():
                if entry.name.startswith(PREFIX) and _stale(entry):
                    shutil.rmtree(entry, ignore_errors=True)
                    removed.append(entry)
    return removed


def remove_own_dir(port_file: Path | None) -> None:
    """At exit: remove the folder of the port file when the supervisor that named it is gone."""
    if port_file is not None and _stale(port_file.parent):
        shutil.rmtree(port_file.parent, ignore_errors=True)
