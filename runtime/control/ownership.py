"""Who may use the control socket, and where it may live.

The socket steers a server that can cost a GPU fleet its throughput, so its
folder must be ours and closed to others, and only its owner (or root) may
talk to it; the kernel says who is calling (SO_PEERCRED).
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from pathlib import Path


class ControlSocketError(Exception):
    """The control socket could not be set up at the path asked for."""


class SocketInUse(ControlSocketError):
    """Another process answers on the socket path: most likely another supervisor."""


def check_runtime_dir(folder: Path) -> None:
    """The socket's folder must be ours and closed to others: in a folder another user owns or can write,
    they could swap our socket for theirs, or plant one before we start (sshd's StrictModes, for sockets)."""
    info = os.stat(folder)
    if info.st_uid != os.geteuid():
        raise ControlSocketError(f"refusing {folder} for the control socket: it belongs to uid {info.st_uid}, "
                                 "not to us (choose a folder of your own with --socket)")
    if info.st_mode & 0o022:
        raise ControlSocketError(f"refusing {folder} for the control socket: others can write it "
                                 f"(mode {stat.S_IMODE(info.st_mode):o}); choose a folder of your own with "
                                 "--socket, or chmod go-w it")


def peer_uid(sock: socket.socket) -> int:
    """The connecting process's uid, from the kernel (SO_PEERCRED: pid, uid, gid)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid


def peer_allowed(uid: int, owner: int) -> bool:
    """Only the socket owner and root may steer the supervisor."""
    return uid == owner or uid == 0
