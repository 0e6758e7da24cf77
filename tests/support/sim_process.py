"""specctl's simulator as a real process on loopback, for tests that need a server to talk to.

Why a helper: several test files start one the same way (an ephemeral port read
back from ``--port-file``, a wait bounded only to end a hung test, the process
stopped at the end) and differ only in the simulator's arguments.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DEADLINE_S = 60.0  # only to end a hung test


@contextmanager
def _listening(tmp_path: Path, command: list[str], what: str) -> Iterator[list[str]]:
    """Start ``command`` with ``--port 0 --port-file F``; yield each port it listens on; stop it.

    Its stderr goes to a file in ``tmp_path`` (a pipe nobody reads could fill and stall it), and the
    assertion says why when the process dies before it listens.
    """
    tag = f"sim-{time.monotonic_ns()}"
    port_file, err_file = tmp_path / f"{tag}.port", tmp_path / f"{tag}.err"
    with err_file.open("w") as err:
        proc = subprocess.Popen([*command, "--port", "0", "--port-file", str(port_file)],
                                stdout=subprocess.DEVNULL, stderr=err, text=True)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not port_file.exists():
            assert proc.poll() is None, f"{what} exited: {err_file.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"{what} never wrote its port file"
            time.sleep(0.05)
        yield port_file.read_text().split()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def sim_process(tmp_path: Path, *args: str) -> Iterator[str]:
    """Start ``python -m specctl.runtime.sim ARGS`` (the console's embedded simulator) on an ephemeral port;
    yield its URL; stop it."""
    with _listening(tmp_path, [sys.executable, "-m", "specctl.runtime.sim", *args], "the simulator") as ports:
        yield f"http://127.0.0.1:{int(ports[0])}"


@contextmanager
def specctl_sim(tmp_path: Path, *args: str) -> Iterator[list[str]]:
    """Start ``specctl sim ARGS`` (the verb, as a user runs it) on free ports; yield each replica's URL; stop it."""
    with _listening(tmp_path, [sys.executable, "-m", "specctl.console.cli", "sim", *args], "specctl sim") as ports:
        yield [f"http://127.0.0.1:{int(port)}" for port in ports]
