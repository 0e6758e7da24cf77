"""``specctl fleet`` against the real SGLang router (sglang-router from PyPI) in front of simulators.

Everything runs on loopback: the simulators as real processes, the router as the real Rust
binary with HF_ENDPOINT at a closed port. The assertions read what an operator reads: the CLI's
lines, its exit code, and each simulator's own /server_info.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from support.router import router_process, wait_for_workers
from support.sim_process import sim_process

KEY_A, KEY_B = "key-of-a", "key-of-b"


def specctl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specctl.console.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def server_settings(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/server_info", timeout=5) as resp:
        return json.loads(resp.read())["internal_states"][0]["specctl"]["settings"]


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        return json.loads(resp.read() or b"{}")


def lines_by_url(out: str) -> dict[str, str]:
    return {line.split()[0]: line for line in out.splitlines() if line.startswith("http")}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Two steerable simulators with their own admin keys (B with on_at 8), one without the plugin,
    behind the real router; a key file with each worker's key."""
    tmp = tmp_path_factory.mktemp("fleet")
    (tmp / "a.key").write_text(KEY_A)
    (tmp / "b.key").write_text(KEY_B)
    with ExitStack() as stack:
        a = stack.enter_context(sim_process(tmp, "--load", "steady:c=2", "--admin-key-file", str(tmp / "a.key")))
        b = stack.enter_context(sim_process(tmp, "--load", "steady:c=6", "--set", "on_at=8",
                                            "--admin-key-file", str(tmp / "b.key")))
        c = stack.enter_context(sim_process(tmp, "--load", "idle", "--no-plugin"))
        router = stack.enter_context(router_process(tmp, [a, b, c]))
        keys = tmp / "fleet.keys"
        keys.write_text(f"# per worker\n{a} {KEY_A}\n{b} {KEY_B}\n")
        yield {"a": a, "b": b, "c": c, "router": router, "keys": str(keys), "tmp": tmp}


def test_status_lists_every_worker_of_the_router_with_its_state(fleet: dict) -> None:
    got = specctl("fleet", "status", "--router", fleet["router"])
    rows = lines_by_url(got.stdout)
    assert set(rows) == {fleet["a"], fleet["b"], fleet["c"]}
    assert " ok " in rows[fleet["a"]] and "mode " in rows[fleet["a"]]
    assert "view only" in rows[fleet["c"]] and "without the specctl plugin" in rows[fleet["c"]]
    assert got.stdout.splitlines()[-1].startswith("status: 2 ok, 1 view only (3 workers")
    assert got.returncode == 1  # a view-only worker is not ok


def test_per_worker_numbers_are_each_simulators_own(fleet: dict) -> None:
    """The fleet's row per worker says what that server's own endpoints say (running requests, depth, mode)."""
    got = json.loads(specctl("fleet", "status", "--json", "--router", fleet["router"]).stdout)
    rows = {w["url"]: w for w in got["workers"]}
    for name, running in (("a", 2), ("b", 6)):
        row, url = rows[fleet[name]], fleet[name]
        with urllib.request.urlopen(f"{url}/server_info", timeout=5) as resp:
            own = json.loads(resp.read())["internal_states"][0]
        # a steady load of N keeps N requests in flight but for the instant between one's end and the next
        assert running - 1 <= row["running"] <= running and running - 1 <= own["num_running_reqs"] <= running
        assert row["gen_tps"] > 0 and row["accept_len"] >= 1
        assert row["settings"] == own["specctl"]["settings"]
        assert (row["mode"], row["switches"]) == (own["specctl"]["mode"], own["specctl"]["switches"])
    assert rows[fleet["b"]]["settings"]["on_at"] == 8
    assert rows[fleet["c"]]["state"] == "view only" and rows[fleet["c"]]["gen_tps"] == 0.0


def test_force_off_then_auto_on_every_steerable_worker(fleet: dict) -> None:
    sel = ["--router", fleet["router"], "--admin-key-file", fleet["keys"], "--only", fleet["a"], "--only", fleet["b"]]
    got = specctl("fleet", "force-off", *sel)
    assert got.returncode == 0, got.stdout + got.stderr
    assert got.stdout.splitlines()[-1].startswith("force-off: 2 ok (2 workers")
    assert server_settings(fleet["a"])["mode"] == server_settings(fleet["b"])["mode"] == "off"
    assert specctl("fleet", "auto", *sel).returncode == 0
    assert server_settings(fleet["a"])["mode"] == server_settings(fleet["b"])["mode"] == "auto"


def test_set_that_one_worker_would_refuse_is_sent_to_none(fleet: dict) -> None:
    """off_at=20 suits B (on_at 8) but not A (on_at 24): nothing changes anywhere."""
    got = specctl("fleet", "set", "off_at=20", "--router", fleet["router"], "--admin-key-file", fleet["keys"])
    rows = lines_by_url(got.stdout)
    assert got.returncode == 1
    assert "refused" in rows[fleet["a"]] and "on_at: must be below off_at (20)" in rows[fleet["a"]]
    assert "not sent" in rows[fleet["b"]]
    assert server_settings(fleet["a"])["off_at"] == server_settings(fleet["b"])["off_at"] == 32


def test_malformed_set_is_usage_before_any_request(fleet: dict) -> None:
    got = specctl("fleet", "set", "off_at=many", "--router", fleet["router"])
    assert got.returncode == 2 and got.stdout == ""
    assert got.stderr.strip() == "specctl fleet: off_at: must be an integer, got 'many'"


def test_label_selected_canary_added_and_removed_live(fleet: dict) -> None:
    """A worker added to the running router with a label appears, is steered alone by --label, and goes."""
    with sim_process(fleet["tmp"], "--load", "idle", "--admin-key-file", str(fleet["tmp"] / "a.key")) as d:
        post(f"{fleet['router']}/workers", {"url": d, "labels": {"canary": "true"}})
        wait_for_workers(fleet["router"], [d])
        got = specctl("fleet", "force-off", "--label", "canary=true", "--router", fleet["router"],
                      "--admin-key-file", str(fleet["tmp"] / "a.key"))
        assert got.returncode == 0, got.stdout + got.stderr
        assert list(lines_by_url(got.stdout)) == [d]
        assert server_settings(d)["mode"] == "off" and server_settings(fleet["a"])["mode"] == "auto"
        wid = next(w["id"] for w in json.loads(urllib.request.urlopen(f"{fleet['router']}/workers").read())["workers"]
                   if w["url"].rstrip("/") == d)
        urllib.request.urlopen(urllib.request.Request(f"{fleet['router']}/workers/{wid}", method="DELETE"), timeout=5)
        wait_for_workers(fleet["router"], [d], present=False)
        assert d not in lines_by_url(specctl("fleet", "status", "--router", fleet["router"]).stdout)


def _silent_listener() -> tuple[socket.socket, str]:
    """A port that accepts connections and never answers: a hung server."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_partial_failure_each_named_within_one_timeout(fleet: dict, tmp_path: Path) -> None:
    """A killed server, a plugin-less one, a wrong key, a hung one and a missing one: the rest are steered,
    each failure is named, and the whole answer takes about one timeout."""
    with sim_process(tmp_path, "--load", "idle") as dead:
        pass  # started and stopped: its port now refuses
    hung, hung_url = _silent_listener()
    wrong = tmp_path / "wrong.keys"
    wrong.write_text(f"{fleet['a']} {KEY_A}\n{fleet['b']} not-the-key\n")
    try:
        t0 = time.monotonic()
        got = specctl("fleet", "force-off", "--workers", f"{fleet['a']},{fleet['b']},{fleet['c']},{dead},{hung_url}",
                      "--expect", "http://127.0.0.1:9", "--admin-key-file", str(wrong), "--timeout", "2")
        wall = time.monotonic() - t0
    finally:
        hung.close()
    rows = lines_by_url(got.stdout)
    assert got.returncode == 1
    assert " ok " in rows[fleet["a"]] or rows[fleet["a"]].split()[1] == "ok"
    assert rows[fleet["b"]].split()[1] == "unauthorized"
    assert "view only" in rows[fleet["c"]]
    assert rows[dead].split()[1] == "unreachable" and "connection refused" in rows[dead]
    assert rows[hung_url].split()[1] == "timeout"
    assert rows["http://127.0.0.1:9"].split()[1] == "missing"
    assert "1 ok, 1 view only, 1 unauthorized, 1 unreachable, 1 timeout, 1 missing (6 workers" in got.stdout
    assert wall < 2 + 8  # one 2 s timeout plus the interpreter's start on a busy 2-core machine
    assert server_settings(fleet["a"])["mode"] == "off" and server_settings(fleet["b"])["mode"] == "auto"
    specctl("fleet", "auto", "--workers", fleet["a"], "--admin-key-file", fleet["keys"])


def test_no_inventory_is_exit_3_with_what_to_give() -> None:
    got = specctl("fleet", "status")
    assert got.returncode == 3 and "give --router URL or --workers URL" in got.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    got = specctl("fleet", "status", "--router", f"http://127.0.0.1:{port}")
    assert got.returncode == 3 and "cannot reach the router" in got.stderr


@pytest.mark.slow
def test_router_with_control_plane_keys_says_which_flag_and_role(tmp_path: Path) -> None:
    with sim_process(tmp_path, "--load", "idle") as a:
        keys = ["--control-plane-api-keys", "k1:ops:admin:adm-secret", "k2:ro:user:usr-secret"]
        with router_process(tmp_path, [a], *keys, key="adm-secret") as router:
            got = specctl("fleet", "status", "--router", router)
            assert got.returncode == 3
            assert "--control-plane-api-keys" in got.stderr and "role admin" in got.stderr
            (tmp_path / "user.key").write_text("usr-secret\n")
            got = specctl("fleet", "status", "--router", router, "--router-key-file", str(tmp_path / "user.key"))
            assert got.returncode == 3 and "needs role admin" in got.stderr
            (tmp_path / "admin.key").write_text("adm-secret\n")
            got = specctl("fleet", "status", "--router", router, "--router-key-file", str(tmp_path / "admin.key"))
            assert got.returncode == 0 and a in got.stdout


@pytest.mark.slow
def test_attach_to_the_router_says_so_once_instead_of_flapping(fleet: dict, tmp_path: Path) -> None:
    """`specctl run --attach ROUTER` journals one attached_router event (3 workers, the fleet view's command)
    and neither server_ready nor server_unreachable, however many polls pass."""
    from support.headless import Headless, wait_for

    sup = Headless(tmp_path, "--attach", fleet["router"])
    try:
        said = wait_for(lambda: sup.records(event="attached_router"), "the attached_router event")
        wait_for(lambda: len(sup.records(kind="sample")) >= 10, "ten polls after it")
    finally:
        sup.proc.terminate()
        sup.proc.wait(timeout=30)
    assert len(said) == 1 and said[0]["workers"] == 3
    assert f"specctl tui --router {fleet['router']}" in said[0]["message"]
    assert not sup.records(event="server_ready") and not sup.records(event="server_unreachable")


def test_fleet_table_of_the_config_file_is_the_default_inventory(fleet: dict, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'[fleet]\nworkers = ["{fleet["a"]}", "{fleet["c"]}"]\nexpect = ["http://127.0.0.1:9"]\n'
                      f'admin_key_file = "{fleet["keys"]}"\ntimeout = 3\n')
    got = subprocess.run([sys.executable, "-m", "specctl.console.cli", "fleet", "status"], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "SPECCTL_CONFIG": str(config)})
    assert set(lines_by_url(got.stdout)) == {fleet["a"], fleet["c"], "http://127.0.0.1:9"}
    config.write_text('[fleet]\nworker = ["http://x"]\n')
    got = subprocess.run([sys.executable, "-m", "specctl.console.cli", "fleet", "status"], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "SPECCTL_CONFIG": str(config)})
    assert got.returncode == 2 and "[fleet] unknown key 'worker'" in got.stderr


def test_the_routers_engine_metrics_split_by_worker_are_each_workers_own(fleet: dict) -> None:
    """The router's /engine_metrics, split back by worker_addr, gives each simulator's own /metrics numbers
    (the ones that hold still: the plugin's gauges, and the idle plugin-less server's)."""
    from specctl.runtime.fleet.state import split_engine_metrics
    from specctl.runtime.probes.metrics import parse_metrics

    with urllib.request.urlopen(f"{fleet['router']}/engine_metrics", timeout=5) as resp:
        split = split_engine_metrics(resp.read().decode())
    assert set(split) == {fleet["a"], fleet["b"], fleet["c"]}
    for name in ("a", "b", "c"):
        with urllib.request.urlopen(f"{fleet[name]}/metrics", timeout=5) as resp:
            own = parse_metrics(resp.read().decode())
        got = split[fleet[name]]
        assert (got.spec_on, got.spec_steps, got.spec_switches) == (own.spec_on, own.spec_steps, own.spec_switches)
        assert (got.running is None) == (own.running is None)
    assert split[fleet["c"]] == own  # idle, no plugin: every number the same
    got = json.loads(specctl("fleet", "status", "--json", "--router-metrics", "--router", fleet["router"]).stdout)
    rows = {w["url"]: w for w in got["workers"]}
    assert rows[fleet["c"]]["gen_tps"] == 0.0 and rows[fleet["a"]]["state"] == "ok"
    assert rows[fleet["b"]]["running"] is not None
