"""A real `specctl run --headless` on the simulator, attacked over its control socket and its files.

Each test is one attack issue 19 names, asserted on what an operator sees: the
journal, `specctl status`, the supervisor's stderr.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from specctl.runtime.core.settings import PolicySettings

from support.headless import Headless, wait_for


@pytest.fixture(scope="module")
def sup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Headless]:
    h = Headless(tmp_path_factory.mktemp("attacks"), "--sim-load", "idle")
    h.ready_sample()
    yield h
    h.stop()


def raw_request(path: Path, line: bytes) -> dict[str, Any]:
    """One request as raw bytes, as a hostile client would send it; the answer as parsed."""
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(20)
        conn.connect(str(path))
        stream = conn.makefile("rb")
        assert "specctl" in json.loads(stream.readline())
        conn.sendall(line + b"\n")
        return json.loads(stream.readline())


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# -- 2. audit: applied only if it can be journaled ------------------------------------

@pytest.mark.parametrize("extra", [
    pytest.param(f'"deep": {nested(970)}', id="970-deep"),
    pytest.param('"note": "\\ud800"', id="lone-surrogate"),
    pytest.param('"note": {"\\udfff": 1}', id="surrogate-key"),
])
def test_a_request_the_journal_cannot_hold_changes_nothing(sup: Headless, extra: str) -> None:
    """The attack: a `mode off` whose args also carry something the journal cannot encode.

    Before: the mode was applied, then the record failed (RecursionError traceback, or a
    journal gap as if the disk had failed), so the journal did not say who turned speculation off.
    """
    before = len(sup.records("command"))
    answer = raw_request(sup.socket, f'{{"id": 7, "cmd": "mode", "args": {{"mode": "off", {extra}}}}}'.encode())
    assert answer["ok"] is False and answer["id"] == 7
    assert answer["error"]["code"] == "bad_request" and "journal" in answer["error"]["message"]
    assert sup.status()["spec"]["mode"] == "auto", "nothing was applied"
    assert sup.records("event", "journal_gap") == []
    assert len(sup.records("command")) == before
    told = sup.told()
    assert "Traceback" not in told and "RecursionError" not in told


def test_every_applied_command_is_journaled_with_its_uid(sup: Headless) -> None:
    """The counterpart: a command the journal can hold is applied and recorded, once."""
    answer = raw_request(sup.socket, b'{"id": 8, "cmd": "mode", "args": {"mode": "off", "note": "\\u00e9"}}')
    assert answer["ok"] is True
    mode = wait_for(lambda: [r for r in sup.records("command") if r["cmd"] == "mode" and r["ok"]], "the record")
    assert len(mode) == 1 and mode[0]["args"] == {"mode": "off", "note": "\u00e9"}
    assert sup.cli("auto").returncode == 0


# -- 4d. one client cannot evict the journal's history or flood stderr ----------------

def test_refused_commands_with_huge_args_neither_rotate_the_journal_away_nor_flood_stderr(tmp_path: Path) -> None:
    """The attack: 300 refused `set` commands carrying 60 KiB of arguments each, as fast as a socket takes them.

    Before: each was journaled raw (18 MB: a 1 MB journal rotated its whole history away in seconds)
    and each was echoed to stderr.
    """
    h = Headless(tmp_path, "--sim-load", "idle", "--log-max-mb", "1")
    try:
        h.ready_sample()
        pad = "z" * 60_000
        line = json.dumps({"id": 0, "cmd": "set", "args": {"settings": {"off_at": 48, "pad": pad}}}).encode()
        with socket.socket(socket.AF_UNIX) as conn:
            conn.settimeout(30)
            conn.connect(str(h.socket))
            stream = conn.makefile("rb")
            stream.readline()
            for _ in range(300):
                conn.sendall(line + b"\n")
                answer = json.loads(stream.readline())
                assert answer["ok"] is False and answer["error"]["code"] == "invalid_value"
        refused = wait_for(lambda: len(h.records("command")) >= 300 and h.records("command"), "300 records")
        assert all(not r["ok"] and len(json.dumps(r)) < 2000 for r in refused), "a bounded summary each"
        assert refused[0]["args"]["bytes"] > 60_000 and "summary" in refused[0]["args"]
        assert not h.journal.with_name("run.jsonl.1").exists(), "nothing rotated away"
    finally:
        h.stop()
    told = h.told()
    assert told.count("command set") <= 20, "stderr is rate-limited per kind"
    assert "more command set lines not shown" in told
    assert len(told) < 40_000


# -- 3. file descriptors: the owner gets through a socket full of idle clients --------

@pytest.mark.slow
def test_under_256_open_files_300_idle_clients_leave_the_owners_status_answering(tmp_path: Path) -> None:
    """The attack: more idle connections than the supervisor has descriptors (300 under RLIMIT_NOFILE=256).

    Before: accept() failed in a loop writing tracebacks (megabytes a second), sampling stopped and the
    owner's `specctl status` failed until the clients left.
    """
    h = Headless(tmp_path, "--sim-load", "idle",
                 preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)))
    clients: list[socket.socket] = []
    try:
        h.ready_sample()
        for _ in range(300):
            c = socket.socket(socket.AF_UNIX)
            c.connect(str(h.socket))
            clients.append(c)
        time.sleep(1.5)  # the held ones grow idle; the rest were turned away
        samples = len(h.records("sample"))
        status = h.status()
        assert status["kind"] == "sample" and status["server"]["state"] == "ready"
        assert h.cli("force-off").returncode == 0
        assert h.status()["spec"]["mode"] == "off"
        wait_for(lambda: len(h.records("sample")) > samples + 3, "sampling goes on")
    finally:
        for c in clients:
            c.close()
        assert h.stop() == 0
    told = h.told()
    assert "Traceback" not in told and len(told) < 8000, told[-3000:]


# -- 6. whose socket is it ------------------------------------------------------------

class FakeSupervisor:
    """Another user's trap: a socket that greets like specctl and keeps whatever a client sends."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.sock.settimeout(0.5)

    def received(self) -> bytes:
        try:
            conn, _ = self.sock.accept()
        except TimeoutError:
            return b""
        with conn:
            conn.sendall(b'{"specctl":{"version":"0","protocol":1}}\n')
            conn.settimeout(0.5)
            try:
                return conn.recv(65536)
            except TimeoutError:
                return b""

    def close(self) -> None:
        self.sock.close()


def cli(socket_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specctl.console.cli.main", *args, "--socket", str(socket_path)],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("plant", ["folder-writable-by-others", "socket-of-another-uid"])
def test_the_cli_sends_nothing_to_a_socket_someone_else_could_have_planted(sock_dir: Path, plant: str) -> None:
    """The attack: another user puts a socket where the CLI looks (a shared folder, or their own socket) and
    reads the commands (and answers with lies). Before: the CLI talked to whatever answered."""
    folder = sock_dir / "shared"
    folder.mkdir()
    path = folder / "specctl.sock"
    fake = FakeSupervisor(path)
    try:
        if plant == "folder-writable-by-others":
            os.chmod(folder, 0o1777)
        else:
            if os.geteuid() != 0:
                pytest.skip("chown to another uid needs root")
            os.chown(path, 65534, 65534)
        out = cli(path, "force-off")
        assert out.returncode == 3
        assert out.stderr.count("\n") == 1 and "refusing to use" in out.stderr and "Traceback" not in out.stderr
        assert fake.received() == b"", "nothing was sent"
    finally:
        fake.close()


def test_the_supervisor_refuses_a_runtime_folder_others_can_write(sock_dir: Path) -> None:
    """The attack: the socket's folder is writable by others, who could swap the socket for their own."""
    folder = sock_dir / "shared"
    folder.mkdir()
    os.chmod(folder, 0o777)
    h = Headless(sock_dir, "--socket", str(folder / "specctl.sock"))
    assert h.proc.wait(timeout=60) == 1
    told = h.told()
    assert "others can write it" in told and "Traceback" not in told and told.count("\n") == 1
    assert not (folder / "specctl.sock").exists()


# -- 7. smaller ----------------------------------------------------------------------

def test_sigterm_with_clients_connected_stops_quietly(tmp_path: Path) -> None:
    """Before: one CancelledError traceback per connected client on SIGTERM."""
    h = Headless(tmp_path, "--sim-load", "idle")
    clients = []
    try:
        h.ready_sample()
        for i in range(6):
            c = socket.socket(socket.AF_UNIX)
            c.connect(str(h.socket))
            c.recv(4096)  # the greeting: the connection is being served
            if i % 3 == 1:
                c.sendall(b'{"id": 1, "cmd": "subscribe"}\n')
            elif i % 3 == 2:
                c.sendall(b'{"id": 1, "cmd": "sta')  # half a line
            clients.append(c)
        time.sleep(0.5)
    finally:
        assert h.stop() == 0
        for c in clients:
            c.close()
    told = h.told()
    assert "Traceback" not in told and "CancelledError" not in told, told[-3000:]



def _never_reads(h: Headless) -> list[socket.socket]:
    """A subscriber that stops reading, with its answers piling up: the server waits in drain."""
    c = socket.socket(socket.AF_UNIX)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    c.connect(str(h.socket))
    c.sendall(b'{"id": 0, "cmd": "subscribe"}\n' + b'{"id": 1, "cmd": "status"}\n' * 500)
    return [c]


def _console(h: Headless) -> list[threading.Thread]:
    """The console's own link (two connections: a stream and a command one), reading in a thread."""
    from specctl.console.tui.links import LinkError, SocketLink

    streaming = threading.Event()

    async def watch() -> None:
        link = SocketLink(h.socket)
        await link.open()
        try:
            async for _record in link.records():
                streaming.set()
        except LinkError:
            pass  # the supervisor went away: what the console says on screen
        finally:
            await link.close()

    thread = threading.Thread(target=asyncio.run, args=(watch(),), daemon=True)
    thread.start()
    assert streaming.wait(timeout=60), "the console link never streamed"
    return [thread]


def _idle_50(h: Headless) -> list[socket.socket]:
    clients = []
    for _ in range(50):
        c = socket.socket(socket.AF_UNIX)
        c.connect(str(h.socket))
        clients.append(c)
    return clients


@pytest.mark.parametrize("clients", [_never_reads, _console, _idle_50], ids=["never-reads", "console", "idle-50"])
def test_sigterm_stops_the_supervisor_whatever_its_clients_do(tmp_path: Path, clients: Any) -> None:
    """Before: a subscriber's stream could swallow stop's cancel and SIGTERM never finished."""
    h = Headless(tmp_path, "--sim-load", "steady:c=200", "--sim-gpus", "8")  # big samples, often
    held: list[Any] = []
    try:
        h.ready_sample()
        held = clients(h)
        time.sleep(1.0)  # a few samples: streams are flowing, or piling up
        h.proc.send_signal(signal.SIGTERM)
        rc = h.proc.wait(timeout=60)  # only a guard against a hang
    finally:
        if h.proc.poll() is None:
            os.killpg(h.proc.pid, signal.SIGKILL)
            h.proc.wait()
        for c in held:
            if isinstance(c, socket.socket):
                c.close()
    told = h.told()
    assert rc == 0 and "Traceback" not in told and "CancelledError" not in told, told[-3000:]
    assert not h.socket.exists()
    for c in held:
        if isinstance(c, threading.Thread):
            c.join(timeout=60)
            assert not c.is_alive(), "the console did not see the supervisor go"


# -- 5. the model server's HTTP port is no side door ------------------------------------

def side_door(url: str, path: str, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, headers=headers or {}, timeout=10)


def test_the_launched_servers_control_endpoints_are_closed_to_anyone_without_the_key(sup: Headless) -> None:
    """The attack: any local user POSTs the specctl keys to /set_internal_state (or fails a GPU through
    /sim/gpus) on the server specctl launched, past the socket's peer check and the journal."""
    url = sup.ready_sample()["server"]["url"]
    wire = PolicySettings().with_changes({"mode": "off"}).to_wire(["mode"])
    assert side_door(url, "/set_internal_state", {"server_args": wire}).status_code == 401
    assert side_door(url, "/set_internal_state", {"server_args": wire},
                     {"Authorization": "Bearer guessed"}).status_code == 401
    assert side_door(url, "/sim/gpus", {"failed": [0]}).status_code == 401
    assert httpx.get(f"{url}/sim/gpus", timeout=10).status_code == 401
    assert side_door(url, "/flush_cache", {}).status_code == 401  # ADMIN_OPTIONAL in SGLang too
    assert side_door(url, "/abort_request", {"abort_all": True}).status_code == 401
    assert side_door(url, "/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 4}}).status_code == 200
    assert httpx.get(f"{url}/server_info", timeout=10).status_code == 200
    assert sup.status()["spec"]["mode"] == "auto" and sup.status()["gpus"][0]["state"] == "ok"
    key_file = sup.state / "keys" / f"server-{sup.proc.pid}.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert key_file.read_text().strip() not in Path(f"/proc/{sup.proc.pid}/cmdline").read_text()


def test_a_change_made_past_the_supervisor_is_journaled_when_it_is_next_seen(sup: Headless) -> None:
    """Even one made with the key (an operator with a curl): the journal says what changed, and to what,
    and it is adopted as the desired state."""
    url = sup.ready_sample()["server"]["url"]
    assert sup.cli("set", "off_at=60").returncode == 0  # ours: no external change
    wire = PolicySettings().with_changes({"off_at": 50}).to_wire(["off_at"])
    assert side_door(url, "/set_internal_state", {"server_args": wire}, sup.admin()).status_code == 200
    change = sup.wait_event("settings_adopted")
    assert change["source"] == "elsewhere" and change["fields"] == {"off_at": 50}
    assert change["settings"]["off_at"] == 50
    assert len(sup.records("event", "settings_adopted")) == 1


@pytest.mark.slow
def test_with_attach_the_operator_gives_the_servers_key(tmp_path: Path) -> None:
    """A server started elsewhere with an admin key: without it specctl cannot steer (and says what it needs);
    with --admin-key-file it can. A key file others may read is refused: it is a password."""
    key_file = tmp_path / "server.key"
    key_file.write_text("s3cret-for-the-test\n")
    key_file.chmod(0o600)
    port_file = tmp_path / "port"
    sim = subprocess.Popen([sys.executable, "-m", "specctl.runtime.sim", "--port-file", str(port_file),
                            "--load", "idle", "--gpus", "1", "--admin-key-file", str(key_file)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(port_file.exists, "the simulator's port file")
        url = f"http://127.0.0.1:{port_file.read_text().strip()}"
        for sub in "abc":
            (tmp_path / sub).mkdir()
        without = Headless(tmp_path / "a", "--attach", url)
        try:
            without.ready_sample()
            out = without.cli("force-off")
            assert out.returncode == 1 and "admin key" in out.stderr, out.stderr
        finally:
            without.stop()
        key_file.chmod(0o644)
        loose = Headless(tmp_path / "b", "--attach", url, "--admin-key-file", str(key_file))
        assert loose.proc.wait(timeout=60) == 2 and "chmod 600" in loose.told()
        key_file.chmod(0o600)
        keyed = Headless(tmp_path / "c", "--attach", url, "--admin-key-file", str(key_file))
        try:
            keyed.ready_sample()
            out = keyed.cli("force-off")
            assert out.returncode == 0, out.stderr
            assert keyed.status()["spec"]["mode"] == "off"
        finally:
            keyed.stop()
    finally:
        sim.terminate()
        sim.wait(timeout=30)
