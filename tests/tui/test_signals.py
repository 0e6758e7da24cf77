"""The console in a real terminal (a pty): a hang-up or SIGTERM quits it as `q` does.

Without this, closing the terminal or ssh session killed the console where it
stood: its socket stayed behind, and a real server's ranks were left to the
kernel's parent-death signal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest

from support.headless import wait_for


def drain(fd: int) -> None:
    """Read the console's screen output so it never blocks on a full pty."""
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        pass


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
def test_a_hang_up_or_sigterm_quits_the_console_as_q_does(tmp_path: Path, sig: int) -> None:
    sock = tmp_path / "ctl.sock"
    master, slave = os.openpty()
    env = dict(os.environ, TERM="xterm-256color", SPECCTL_STATE_DIR=str(tmp_path / "state"),
               XDG_CONFIG_HOME=str(tmp_path / "config"))
    proc = subprocess.Popen([sys.executable, "-m", "specctl.console.cli.main", "tui", "--socket", str(sock)],
                            stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    threading.Thread(target=drain, args=(master,), daemon=True).start()
    try:
        wait_for(sock.exists, "the console's control socket")
        children = wait_for(lambda: psutil.Process(proc.pid).children(recursive=True), "the simulator")
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == 0
        wait_for(lambda: not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children),
                 "the simulator to be stopped")
        assert not sock.exists(), "the socket is removed, as on `q`"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(master)
