"""ProcSampler on real processes: a python child that spawns a grandchild, driven line by line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from specctl.runtime.probes.procs import ProcSampler

# The child answers each command on stdin with one line, so the test never waits on a clock.
CHILD = r"""
import subprocess, sys, time

def spawn():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], stdin=subprocess.DEVNULL)

grandchild = spawn()
print(grandchild.pid, flush=True)
for line in sys.stdin:
    command = line.strip()
    if command == "burn":  # use 0.3 s of CPU, however long that takes on a busy machine
        start = time.process_time()
        while time.process_time() - start < 0.3:
            pass
        print("burnt", flush=True)
    elif command == "reap":
        grandchild.kill()
        grandchild.wait()
        print("reaped", flush=True)
    elif command == "spawn":
        grandchild = spawn()
        print(grandchild.pid, flush=True)
grandchild.kill()
grandchild.wait()
"""


class Tree:
    """The child process and a line-based conversation with it."""

    def __init__(self) -> None:
        self.child = subprocess.Popen(
            [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.grandchild_pid = int(self.ask(None))

    def ask(self, command: str | None) -> str:
        assert self.child.stdin is not None and self.child.stdout is not None
        if command is not None:
            self.child.stdin.write(command + "\n")
            self.child.stdin.flush()
        return self.child.stdout.readline().strip()

    def close(self) -> None:
        """Closing stdin ends the child, which kills and reaps its grandchild first."""
        self.child.stdin.close()
        self.child.wait()
        self.child.stdout.close()


@pytest.fixture
def tree() -> Iterator[Tree]:
    t = Tree()
    yield t
    t.close()


def test_samples_root_and_grandchild(tree: Tree) -> None:
    sampler = ProcSampler(tree.child.pid)
    assert tree.ask("burn") == "burnt"
    rows = sampler.sample()
    assert [row["pid"] for row in rows] == [tree.child.pid, tree.grandchild_pid]
    root, grandchild = rows
    assert list(root) == ["pid", "name", "cpu_percent", "rss", "num_threads"]
    assert root["name"].startswith("python")
    assert root["cpu_percent"] > 0.0  # primed at construction; the child then used 0.3 s of CPU
    assert grandchild["cpu_percent"] >= 0.0
    assert all(row["rss"] > 0 and row["num_threads"] >= 1 for row in rows)


def test_vanished_grandchild_is_skipped_and_a_new_one_starts_unprimed(tree: Tree) -> None:
    sampler = ProcSampler(tree.child.pid)
    assert tree.ask("reap") == "reaped"
    assert [row["pid"] for row in sampler.sample()] == [tree.child.pid]

    new_pid = int(tree.ask("spawn"))
    first = sampler.sample()
    assert [row["pid"] for row in first] == [tree.child.pid, new_pid]
    assert first[1]["cpu_percent"] is None  # no interval measured yet: no number
    assert sampler.sample()[1]["cpu_percent"] >= 0.0


def test_zombie_grandchild_is_skipped(tree: Tree) -> None:
    sampler = ProcSampler(tree.child.pid)
    os.kill(tree.grandchild_pid, signal.SIGKILL)  # the child does not reap it until told
    # The kill is asynchronous; once the grandchild shows as a zombie it must not be listed.
    while _state(tree.grandchild_pid) != "Z":
        pass
    assert [row["pid"] for row in sampler.sample()] == [tree.child.pid]


def test_root_gone_gives_empty_list(tree: Tree) -> None:
    sampler = ProcSampler(tree.child.pid)
    tree.close()
    assert sampler.sample() == []


def test_unknown_pid_gives_empty_list() -> None:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    assert ProcSampler(done.pid).sample() == []


def _state(pid: int) -> str:
    """The process state letter from /proc (Linux), read directly to avoid trusting the code under test."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def test_the_process_listening_on_a_local_url_is_found() -> None:
    import socket as socketlib

    from specctl.runtime.probes.procs import listening_pid

    with socketlib.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert listening_pid(f"http://127.0.0.1:{port}") == os.getpid()
    assert listening_pid("http://10.1.2.3:80") is None
    assert listening_pid("http://127.0.0.1") is None
