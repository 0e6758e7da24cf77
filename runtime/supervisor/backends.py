"""Model-server backends: the embedded simulator, a real SGLang server, or one started elsewhere.

A backend owns at most one process *group*: it starts the server in a new
session so that stopping it reaches every child (SGLang starts one scheduler
process per tensor-parallel rank plus a detokenizer), and it stops the group
with SIGTERM, then SIGKILL after a grace period. Its output is read line by
line into a bounded tail, so a chatty server can neither fill a pipe nor our
memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import socket
import sys
import tempfile
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import psutil

from specctl.runtime.core.redact import redact_text
from specctl.runtime.core.wire import SIM_ADMIN_KEY_ENV as ADMIN_KEY_ENV
from specctl.runtime.supervisor.server_key import LaunchKey

LOG_TAIL = 200
MAX_LINE = 1 << 16  # longer lines are cut to their last 64 KiB
PR_SET_PDEATHSIG = 1


class BackendError(RuntimeError):
    """The server could not be started; the message says why in operator terms.

    ``retry`` is False where trying again cannot help (nothing to run): the
    supervisor then stops instead of restarting with back-off forever.
    """

    def __init__(self, message: str, *, retry: bool = True) -> None:
        super().__init__(message)
        self.retry = retry


class Backend(Protocol):
    """What the supervisor needs from a model server, whoever runs it."""

    sim: bool
    url: str | None
    owns_process: bool
    admin_key: str | None  # Bearer key for its control endpoints (/set_internal_state, /sim/*), if it has one
    api_key: str | None  # Bearer key for the rest, if the operator set SGLang's --api-key

    async def start(self) -> None: ...
    def returncode(self) -> int | None: ...
    @property
    def pid(self) -> int | None: ...
    def take_log(self) -> list[str]: ...
    @property
    def progress(self) -> dict[str, Any] | None: ...
    async def stop(self) -> None: ...


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the server binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class ProcessBackend:
    """Runs one command in its own process group and keeps a tail of its output.

    A server it launches gets a fresh admin key each start (runtime/supervisor/server_key.py): ``admin_key``
    while it runs, its files removed when it stops.
    """

    sim = False
    owns_process = True
    admin_key: str | None = None
    api_key: str | None = None

    def __init__(self, argv: list[str], env: dict[str, str] | None = None,
                 stop_grace_s: float = 10.0,
                 progress_parser: Callable[[str], dict[str, Any] | None] | None = None) -> None:
        self.argv = argv
        self.env = env
        self.stop_grace_s = stop_grace_s
        self.url: str | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._tail: deque[str] = deque(maxlen=LOG_TAIL)
        self._fresh: list[str] = []
        self._parse_progress = progress_parser
        self._progress: dict[str, Any] | None = None

    async def start(self) -> None:
        spawn = asyncio.ensure_future(asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env=self.env, start_new_session=True,
            preexec_fn=_die_with_parent))
        try:
            proc = await asyncio.shield(spawn)
        except asyncio.CancelledError:
            # stop() came while the process was being created: finish creating it,
            # so that the stop which follows reaches it instead of leaving an orphan
            self._adopt(await spawn)
            raise
        except OSError as exc:
            raise BackendError(f"cannot start {self.argv[0]}: {exc.strerror or exc}", retry=False) from exc
        self._adopt(proc)

    def _adopt(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        self._reader = asyncio.create_task(self._read_output(proc))

    async def _read_output(self, proc: asyncio.subprocess.Process) -> None:
        """Split output on newlines *and* carriage returns, so tqdm bars show as they grow."""
        assert proc.stdout is not None
        pending = b""
        while chunk := await proc.stdout.read(65536):
            parts = (pending + chunk).replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
            pending = parts.pop()[-MAX_LINE:]
            for raw in parts:
                self._note(raw.decode("utf-8", "replace").rstrip())
        if pending:
            self._note(pending.decode("utf-8", "replace").rstrip())

    def _note(self, line: str) -> None:
        if not line:
            return
        # before the journal, the screen or the progress parser: SGLang 0.5.17 logs its arguments at start,
        # the admin key among them; every key this supervisor knows and every api_key=... value is masked
        line = redact_text(line, (self.admin_key, self.api_key))
        self._tail.append(line)
        self._fresh.append(line)
        del self._fresh[:-LOG_TAIL]
        if self._parse_progress is not None:
            self._progress = self._parse_progress(line) or self._progress

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def progress(self) -> dict[str, Any] | None:
        return self._progress

    def returncode(self) -> int | None:
        """The exit status once the server process has ended, else None."""
        return None if self._proc is None else self._proc.returncode

    def take_log(self) -> list[str]:
        """Lines printed since the last call (at most LOG_TAIL)."""
        fresh, self._fresh = self._fresh, []
        return fresh

    def tail(self) -> list[str]:
        return list(self._tail)

    def _new_key(self) -> LaunchKey:
        """A fresh key for the server about to start; the last one's files go."""
        self._forget_key()
        self._key = LaunchKey()
        self.admin_key = self._key.key
        return self._key

    def _forget_key(self) -> None:
        key = getattr(self, "_key", None)
        if key is not None:
            key.remove()
            self._key = None

    async def stop(self) -> None:
        """SIGTERM the whole group, SIGKILL what is left after the grace period; never raises."""
        self._forget_key()
        proc = self._proc
        if proc is None:
            return
        family = _process_family(proc.pid)
        if proc.returncode is None:
            _signal_group(proc.pid, signal.SIGTERM)
            # asyncio.timeout, not wait_for: on 3.11 wait_for can lose a cancel that meets the exit
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.stop_grace_s):
                    await proc.wait()
        _signal_group(proc.pid, signal.SIGKILL)
        for p in family:  # children that left the group (setsid) still get stopped
            with contextlib.suppress(psutil.Error):
                p.kill()
        with contextlib.suppress(ProcessLookupError):
            await proc.wait()
        if self._reader is not None:
            # read to EOF so asyncio closes the pipe; give up if an escaped grandchild holds it open
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                async with asyncio.timeout(2.0):
                    await self._reader


def _die_with_parent() -> None:
    """In the child: get SIGTERM if the supervisor dies without stopping us (kill -9)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the stop path still covers orderly exits
        pass


def _process_family(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class SimBackend(ProcessBackend):
    """The embedded simulator as a real HTTP server process on loopback."""

    sim = True

    def __init__(self, preset: str, gpus: int | None, load: str, settings: dict[str, Any],
                 extra: list[str] | None = None, port: int = 0, depth_costs: Path | None = None) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix=f"specctl-sim-{os.getpid()}-")
        self._port_file = Path(self._dir.name) / "port"
        argv = [sys.executable, "-m", "specctl.runtime.sim", "--host", "127.0.0.1",
                "--port", str(port), "--port-file", str(self._port_file), "--preset", preset,
                "--load", load]
        if gpus is not None:
            argv += ["--gpus", str(gpus)]
        for key, value in settings.items():
            if isinstance(value, (list, tuple)):  # candidates: the text form the simulator's --set reads
                value = ",".join(map(str, value))
            argv += ["--set", f"{key}={value}"]
        if depth_costs is not None:  # as a launch hands SGLang SPECCTL_DEPTH_COSTS; without it the sim's own model
            argv += ["--depth-costs", str(depth_costs.resolve())]
        super().__init__(argv + list(extra or []), stop_grace_s=5.0)

    async def start(self) -> None:
        self._port_file.unlink(missing_ok=True)
        self.url = None
        self.env = {**os.environ, ADMIN_KEY_ENV: self._new_key().key}  # environ: only its owner (and root) reads it
        await super().start()
        port = await self._wait_for_port()
        self.url = f"http://127.0.0.1:{port}"

    async def _wait_for_port(self, timeout_s: float = 60.0) -> int:
        """The simulator writes its bound port to a file once it listens."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            if self.returncode() is not None:
                raise BackendError("simulator exited during start-up: " + " | ".join(self.tail()[-5:]))
            with contextlib.suppress(FileNotFoundError, ValueError):
                return int(self._port_file.read_text().strip())
            await asyncio.sleep(0.05)
        raise BackendError(f"simulator did not listen within {timeout_s:.0f} s")


class AttachBackend:
    """A server started elsewhere: we watch and steer it, but never start or stop it.

    Its admin key, if it has one, is the operator's to give (--admin-key-file, $SPECCTL_ADMIN_KEY, config).
    """

    sim = False
    owns_process = False
    pid = None
    progress = None
    api_key = None

    def __init__(self, url: str, admin_key: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.admin_key = admin_key

    async def start(self) -> None:
        return None

    def returncode(self) -> int | None:
        return None

    def take_log(self) -> list[str]:
        return []

    async def stop(self) -> None:
        return None
