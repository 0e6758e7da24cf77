"""Every file specctl writes, attacked as another local user would: a symlink swapped in a loop while the writer
runs, a device or FIFO named as the target, a folder another user can rename files in.

The attacker is a real process of another uid (``nobody``, 65534), so these tests need root to start it; they
skip elsewhere. What they assert is what an operator would see: the root-only file elsewhere keeps its 0600,
the device stays a device, the CLI says why in one line with exit 2.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specctl.runtime.core.atomic_file import UnsafeTargetError, write_atomic

NOBODY = 65534
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="starts an attacker of another uid: needs root")

# The attacker: plants links at the target's name and at every temporary name it can see, each pointing at
# the root-only file, as fast as it can, until told to stop (its stdin closes).
ATTACKER = r"""
import os, sys, threading
folder, secret = sys.argv[1], sys.argv[2]
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
n = 0
print("ready", flush=True)
while not stop.is_set():
    names = ["target.json"]
    try:
        names += [x for x in os.listdir(folder) if x.endswith(".tmp")]
    except OSError:
        pass
    for name in names:
        p = os.path.join(folder, name)
        try:
            os.unlink(p)
        except OSError:
            pass
        try:
            os.symlink(secret, p)
        except OSError:
            pass
        n += 1
print(n, flush=True)
"""


def _python_for_nobody() -> str:
    """An interpreter another uid can run (the venv's may sit under root's 0700 home)."""
    for candidate in (shutil.which("python3", path="/usr/bin:/bin:/usr/local/bin"), "/usr/bin/python3"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.skip("no system python3 for the attacker")


def _drop() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def _start_attacker(folder: Path, secret: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([_python_for_nobody(), "-I", "-S", "-c", ATTACKER, str(folder), str(secret)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=_drop,
                            cwd="/")
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _stop(proc: subprocess.Popen[str]) -> int:
    out, _ = proc.communicate(input="", timeout=60)
    return int(out.strip() or 0)


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder the attacker can reach (pytest's own tmp_path sits under a 0700 folder of root's)."""
    folder = Path(tempfile.mkdtemp(prefix="specctl-write-safety-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def secret(base: Path) -> Path:
    """A root-only file outside the folder being written."""
    private = base / "private"
    private.mkdir(mode=0o755)
    path = private / "secret"
    path.write_text("root only\n")
    path.chmod(0o600)
    return path


def _modes(folder: Path) -> dict[str, int]:
    return {str(p): p.lstat().st_mode for p in folder.rglob("*")}


@root_only
def test_symlink_race_in_a_sticky_shared_folder_never_moves_a_mode(base: Path, secret: Path) -> None:
    """A root-owned 1777 folder (/tmp's kind): nobody can plant links in it, but not replace root's files. The
    writer runs hundreds of times while the attacker tries to swap links at the target's and at every temporary
    name it sees; the root-only file never changes mode and no file outside the folder does either."""
    shared = base / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    write_atomic(shared / "target.json", "{}\n", mode=0o644)  # the file as a previous run left it
    before = _modes(base / "private")
    attacker = _start_attacker(shared, secret)
    refused = written = 0
    try:
        for i in range(400):
            try:
                write_atomic(shared / "target.json", json.dumps({"i": i}) + "\n", mode=0o644)
                written += 1
            except UnsafeTargetError as exc:  # a link at the target's name would be refused, never followed
                assert "symbolic link" in str(exc)
                refused += 1
            assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    finally:
        planted = _stop(attacker)
    assert planted > 0 and written + refused == 400
    assert (shared / "target.json").is_file() and not (shared / "target.json").is_symlink()
    assert _modes(base / "private") == before
    assert secret.read_text() == "root only\n"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600


@root_only
def test_a_folder_owned_by_another_user_is_refused_with_the_attacker_running(base: Path, secret: Path) -> None:
    """docs' old case: root writes into a folder the server's user owns. That user can swap anything there, so
    the CLI refuses in one line, exit 2, every time, and the root-only file keeps its mode."""
    theirs = base / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)
    attacker = _start_attacker(theirs, secret)
    try:
        for _ in range(3):
            proc = subprocess.run([sys.executable, "-m", "specctl.console.cli.main", "sglang-args", "--steps", "3",
                                   "--config", str(theirs / "target.json")],
                                  capture_output=True, text=True, timeout=120)
            assert proc.returncode == 2, proc.stderr
            lines = proc.stderr.strip().splitlines()
            assert len(lines) == 1 and "belongs to another user" in lines[0] and "Traceback" not in proc.stderr
            for _ in range(50):
                with pytest.raises(UnsafeTargetError, match="belongs to another user"):
                    write_atomic(theirs / "target.json", "{}\n", mode=0o644)
            assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    finally:
        _stop(attacker)
    assert secret.read_text() == "root only\n"


def test_a_group_or_world_writable_folder_without_sticky_bit_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.raises(UnsafeTargetError, match="writable by group and others"):
        write_atomic(folder / "t.json", "{}\n")
    folder.chmod(0o775)
    with pytest.raises(UnsafeTargetError, match="writable by its group"):
        write_atomic(folder / "t.json", "{}\n")
    assert list(folder.iterdir()) == []


@root_only
def test_a_character_device_target_is_refused_and_unchanged(tmp_path: Path) -> None:
    dev = tmp_path / "null"
    os.mknod(dev, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    for argv in (["sglang-args", "--steps", "3", "--config", str(dev)],):
        proc = subprocess.run([sys.executable, "-m", "specctl.console.cli.main", *argv],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "is a device" in proc.stderr
    with pytest.raises(UnsafeTargetError, match="is a device"):
        write_atomic(dev, "{}\n", mode=0o644)
    info = dev.lstat()
    assert stat.S_ISCHR(info.st_mode) and info.st_rdev == os.makedev(1, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]  # no temporary file left


def test_a_fifo_and_a_folder_target_are_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UnsafeTargetError, match="is a FIFO"):
        write_atomic(fifo, "{}\n")
    (tmp_path / "dir").mkdir()
    with pytest.raises(UnsafeTargetError, match="is a folder"):
        write_atomic(tmp_path / "dir", "{}\n")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_the_mode_is_set_before_the_rename_and_the_text_is_whole(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        path = write_atomic(tmp_path / "t.json", "abc\n", mode=0o644)
    finally:
        os.umask(old)
    assert path.read_text() == "abc\n" and stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE(write_atomic(tmp_path / "u.json", "x").stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json", "u.json"]


def test_depth_costs_out_refuses_a_device_like_target(tmp_path: Path) -> None:
    fifo = tmp_path / "table.json"
    os.mkfifo(fifo)
    journal = tmp_path / "j.jsonl"
    journal.write_text("")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "specctl.console.cli.main", "depth-costs", str(journal),
                           "--out", str(fifo)], capture_output=True, text=True, timeout=120)
    assert time.monotonic() - t0 < 120
    assert proc.returncode == 2 and "is a FIFO" in proc.stderr and "Traceback" not in proc.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
