"""Whether a server's URL names this machine: NVML and psutil only see local GPUs and processes."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

import psutil


def local_addresses() -> set[str]:
    """Every address of this machine's interfaces, loopback included."""
    out = {"127.0.0.1", "::1"}
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family in (socket.AF_INET, socket.AF_INET6):
                out.add(addr.address.split("%")[0])
    return out


def is_local_url(url: str) -> bool:
    """True when ``url``'s host resolves to an address of this machine (blocking: DNS; call it in a thread).

    A host that does not resolve counts as not local: its GPUs are not ours to read either way.
    """
    host = urlsplit(url).hostname or ""
    if host in ("localhost", ""):
        return True
    try:
        if ipaddress.ip_address(host).is_loopback:
            return True
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    mine = local_addresses()
    return any(str(info[4][0]).split("%")[0] in mine for info in infos)
