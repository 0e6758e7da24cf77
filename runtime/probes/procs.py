"""CPU and memory of a model server's process tree (psutil).

SGLang runs a tokenizer, a detokenizer and one scheduler per TP rank as
children of the launcher, so the whole tree is what an operator needs to see.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

import psutil

_ATTRS = ["pid", "name", "cpu_percent", "memory_info", "num_threads", "status"]


class ProcSampler:
    """Samples ``root_pid`` and all its descendants.

    psutil's ``cpu_percent`` is the CPU time used since the previous call on the
    *same* Process object, so objects are kept between passes and primed here:
    the first ``sample()`` already measures the interval since construction. A
    process first seen in a pass has no interval yet and reports
    ``cpu_percent: None`` rather than psutil's placeholder 0.0.
    """

    def __init__(self, root_pid: int) -> None:
        try:
            self._root: psutil.Process | None = psutil.Process(root_pid)
        except psutil.NoSuchProcess:
            self._root = None
        self._known: dict[int, psutil.Process] = {}
        self._tree()

    def frozen(self) -> bool:
        """The root process is stopped (SIGSTOP, a debugger) or gone: its socket may still take connections
        (the kernel's backlog), but nothing will answer them. Not busy: unreachable."""
        if self._root is None:
            return False  # not known here: say nothing
        try:
            return self._root.status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP, psutil.STATUS_ZOMBIE,
                                           psutil.STATUS_DEAD)
        except psutil.NoSuchProcess:
            return True

    def sample(self) -> list[dict[str, Any]]:
        """One dict per live process of the tree, root first; [] once the root is gone."""
        rows = []
        for proc, primed in self._tree():
            try:
                info = proc.as_dict(attrs=_ATTRS, ad_value=None)
            except psutil.NoSuchProcess:  # exited between listing and reading
                continue
            if info["status"] == psutil.STATUS_ZOMBIE:  # exited, not yet reaped
                continue
            memory = info["memory_info"]
            rows.append(
                {
                    "pid": info["pid"],
                    "name": info["name"],
                    "cpu_percent": info["cpu_percent"] if primed else None,
                    "rss": None if memory is None else memory.rss,
                    "num_threads": info["num_threads"],
                }
            )
        return rows

    def _tree(self) -> list[tuple[psutil.Process, bool]]:
        """The live tree as kept Process objects, each with whether it was already primed.

        Objects are matched on pid *and* creation time (Process equality), so
        a recycled pid is treated as the new process it is.
        """
        tree = []
        for proc in self._find():
            kept = self._known.get(proc.pid)
            primed = kept is not None and kept == proc
            if not primed:
                kept = proc
                _prime(kept)
            tree.append((kept, primed))
        self._known = {proc.pid: proc for proc, _ in tree}
        return tree

    def _find(self) -> list[psutil.Process]:
        """Root first, then its descendants; [] once the root has exited."""
        if self._root is None:
            return []
        try:
            if not _alive(self._root):
                return []
            return [self._root, *_descendants(self._root)]
        except psutil.NoSuchProcess:
            return []


def _descendants(root: psutil.Process) -> list[psutil.Process]:
    """Children, grandchildren, ...: from /proc/PID/task/TID/children where Linux offers it.

    psutil's ``children(recursive=True)`` reads the stat file of every process on
    the machine, which was most of the supervisor's CPU at 4 Hz; the kernel's
    per-task children lists cost a few reads for a server's handful of processes.
    """
    found: list[psutil.Process] = []
    queue = [root.pid]
    while queue:
        pid = queue.pop(0)
        kids = _child_pids(pid)
        if kids is None:  # no children files (old kernel, other OS): psutil's full scan
            return root.children(recursive=True)
        for kid in kids:
            try:
                found.append(psutil.Process(kid))
            except psutil.NoSuchProcess:
                continue
            queue.append(kid)
    return found


def _child_pids(pid: int) -> list[int] | None:
    """Direct children of ``pid`` by the kernel's per-thread lists; None if unsupported."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []  # gone meanwhile
    except OSError:
        return None
    kids: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                kids.extend(int(k) for k in fh.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended
            return None  # kernel without CONFIG_PROC_CHILDREN
    return kids


def _alive(proc: psutil.Process) -> bool:
    """Running and not a zombie: a dead server awaiting its reaper is gone for us."""
    return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE


def _prime(proc: psutil.Process) -> None:
    """Start the CPU-time interval; the answer of this first call is meaningless."""
    try:
        proc.cpu_percent(None)
    except psutil.Error:
        pass  # gone or hidden: the pass that reads it will skip it or report None


def listening_pid(url: str) -> int | None:
    """The local process serving ``url`` (for a server started elsewhere), or None.

    Only loopback and local addresses can be ours to see; seeing another user's
    sockets may need privileges, and without them the answer is None, not a guess.
    """
    parsed = urlsplit(url)
    if parsed.hostname not in ("127.0.0.1", "localhost", "::1", "0.0.0.0") or parsed.port is None:
        return None
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    for conn in conns:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == parsed.port and conn.pid:
            return int(conn.pid)
    return None
