"""The CLI verbs as an operator runs them: `specctl ...` processes against a live control socket."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from specctl.console.cli.verbs import UsageError, parse_pairs, summary

STANDIN = Path(__file__).parent / "support" / "control_standin.py"
GUARD = 60


@pytest.fixture(scope="module")
def sock() -> Iterator[Path]:
    """A stand-in supervisor's control socket, served by a separate process."""
    folder = Path(tempfile.mkdtemp(prefix="sc-", dir="/tmp"))
    path = folder / "specctl.sock"
    proc = subprocess.Popen([sys.executable, str(STANDIN), str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield path
    proc.send_signal(signal.SIGTERM)
    proc.wait(GUARD)
    shutil.rmtree(folder, ignore_errors=True)


def specctl(*argv: str, socket: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SPECCTL_SOCKET"}
    if socket is not None:
        env["SPECCTL_SOCKET"] = str(socket)
    return subprocess.run([sys.executable, "-m", "specctl.console.cli.main", *argv], env=env,
                          capture_output=True, text=True, timeout=GUARD)


def status_json(sock: Path) -> dict:
    done = specctl("status", "--json", "--socket", str(sock))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_force_off_force_on_and_auto(sock: Path) -> None:
    off = specctl("force-off", socket=sock)
    assert off.returncode == 0 and "forced OFF" in off.stdout
    assert status_json(sock)["spec"]["mode"] == "off"
    on = specctl("force-on", "--socket", str(sock))
    assert on.returncode == 0 and "forced ON" in on.stdout
    assert status_json(sock)["spec"]["mode"] == "on"
    auto = specctl("auto", socket=sock)
    assert auto.returncode == 0 and "mode auto" in auto.stdout
    assert status_json(sock)["spec"]["mode"] == "auto"


def test_set_applies_all_pairs(sock: Path) -> None:
    done = specctl("set", "off_at=80", "on_at=20", "min_accept=0.5", "warm_below=16", socket=sock)
    assert done.returncode == 0, done.stderr
    assert "off_at=80" in done.stdout and "on_at=20" in done.stdout
    settings = status_json(sock)["spec"]["settings"]
    assert (settings["off_at"], settings["on_at"], settings["min_accept"], settings["warm_below"]) == (80, 20, 0.5, 16)


def test_set_refused_names_the_field_and_changes_nothing(sock: Path) -> None:
    before = status_json(sock)["spec"]["settings"]
    done = specctl("set", "off_at=50", "on_at=60", socket=sock)
    assert done.returncode == 1
    assert "on_at" in done.stderr and "refused" in done.stderr
    assert "Traceback" not in done.stderr
    assert status_json(sock)["spec"]["settings"] == before


@pytest.mark.parametrize("pair", ["off_at", "=5", "off_at=", "off at=5"])
def test_a_malformed_pair_is_a_usage_error(sock: Path, pair: str) -> None:
    done = specctl("set", "on_at=10", pair, socket=sock)
    assert done.returncode == 2
    assert "KEY=VALUE" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(("pair", "said"), [("bogus=1", "bogus: unknown setting"),
                                            ("off_at=abc", "off_at: must be an integer"),
                                            ("mode=sometimes", "mode: must be one of")])
def test_a_setting_no_server_could_take_is_a_usage_error_with_or_without_a_supervisor(
        sock: Path, tmp_path: Path, pair: str, said: str) -> None:
    before = status_json(sock)["spec"]["settings"]
    for where in (sock, tmp_path / "nobody.sock"):
        done = specctl("set", "on_at=10", pair, socket=where)
        assert done.returncode == 2 and said in done.stderr, done.stderr
    assert status_json(sock)["spec"]["settings"] == before


def test_status_json_is_the_journal_sample_line(sock: Path) -> None:
    done = specctl("status", "--json", socket=sock)
    assert done.returncode == 0
    assert done.stdout.count("\n") == 1 and ": " not in done.stdout  # one compact line
    sample = json.loads(done.stdout)
    assert list(sample)[:3] == ["v", "t", "kind"]
    assert sample["kind"] == "sample" and set(sample) >= {"server", "spec", "gpus", "procs", "sim"}


def test_status_for_people(sock: Path) -> None:
    specctl("force-off", socket=sock)
    done = specctl("status", socket=sock)
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert lines[0].startswith("server     ready") and "[SIM]" in lines[0]
    assert "mode off" in lines[1]
    assert "running 12" in done.stdout and "queued 0" in done.stdout
    assert "1834.2 tok/s" in done.stdout and "accept len 2.79" in done.stdout
    assert [line.split()[1] for line in lines if line.startswith("gpu ")] == ["0", "1"]
    assert "failed: lost" in done.stdout
    specctl("auto", socket=sock)


def test_server_actions(sock: Path) -> None:
    stop = specctl("server", "stop", socket=sock)
    assert (stop.returncode, stop.stdout.strip()) == (0, "server: stopped")
    start = specctl("server", "start", socket=sock)
    assert (start.returncode, start.stdout.strip()) == (0, "server: ready")


def test_no_supervisor_exits_3_and_says_how_to_start_one(tmp_path: Path) -> None:
    missing = tmp_path / "nobody.sock"
    done = specctl("force-off", "--socket", str(missing))
    assert done.returncode == 3
    assert f"no specctl supervisor at {missing}" in done.stderr
    assert "specctl run --headless" in done.stderr and "Traceback" not in done.stderr


def test_locate_prints_where_the_config_file_is_even_when_it_is_wrong(tmp_path: Path) -> None:
    bad = tmp_path / "specctl.toml"
    bad.write_text("[supervisor\n")
    env = {k: v for k, v in os.environ.items() if k != "SPECCTL_SOCKET"} | {"SPECCTL_CONFIG": str(bad)}
    done = subprocess.run([sys.executable, "-m", "specctl.console.cli.main", "locate"], env=env,
                          capture_output=True, text=True, timeout=GUARD)
    assert done.returncode == 2 and str(bad) in done.stderr
    assert f"config  {bad}" in done.stdout and "socket  (unknown: the config file is wrong)" in done.stdout


def test_locate_prints_paths(tmp_path: Path) -> None:
    env_sock = tmp_path / "x.sock"
    done = specctl("locate", socket=env_sock)
    assert done.returncode == 0
    lines = dict(line.split(None, 1) for line in done.stdout.splitlines())
    assert lines["socket"] == str(env_sock)
    assert set(lines) == {"socket", "config", "state"}


def test_verbs_never_import_textual(sock: Path) -> None:
    code = ("import sys; from specctl.console.cli.main import main; rc = main(['status', '--socket', sys.argv[1]]);"
            "print(rc, sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')))")
    done = subprocess.run([sys.executable, "-c", code, str(sock)], capture_output=True, text=True, timeout=GUARD)
    assert done.stdout.splitlines()[-1] == "0 []"


# -- the pure parts -------------------------------------------------------------------

def test_pairs_become_the_types_of_their_settings() -> None:
    assert parse_pairs(["off_at=64", "min_accept=1", "mode=OFF"]) == {"off_at": 64, "min_accept": 1.0, "mode": "off"}
    with pytest.raises(UsageError, match="min_accept: must be a finite number"):
        parse_pairs(["min_accept=nan"])
    with pytest.raises(UsageError, match="twice"):
        parse_pairs(["off_at=1", "off_at=2"])


def test_summary_shows_unreadable_values_as_dashes() -> None:
    sample = {"v": 1, "t": 0.0, "kind": "sample", "sim": False, "spec": None, "procs": [],
              "server": {"state": "starting", "progress": {"phase": "cuda_graphs", "fraction": 0.4},
                         "running": None, "queued": None, "gen_tps": None, "accept_len": None},
              "gpus": [{"index": 0, "name": "H200", "state": "ok", "util": None, "mem_used": None,
                        "mem_total": None, "power_w": None, "temp_c": None}]}
    text = "\n".join(summary(sample))
    assert "starting (cuda_graphs 40%)" in text
    assert "spec       unknown" in text
    assert "running -  queued -  - tok/s  accept len -" in text
    assert "util -  mem -/- GiB  power -  temp -" in text


def test_summary_gives_gpu_memory_in_gib_as_the_console_does() -> None:
    sample = {"v": 1, "t": 0.0, "kind": "sample", "sim": True, "spec": None, "procs": [], "server": {"state": "ready"},
              "gpus": [{"index": 0, "name": "NVIDIA H200", "state": "ok", "util": 99.0, "mem_used": 132 * 1024**3,
                        "mem_total": 143771 * 1024**2, "power_w": 690.0, "temp_c": 51.0}]}
    assert "mem 132.0/140.4 GiB" in "\n".join(summary(sample))


def test_a_closed_stdout_is_not_a_traceback(sock: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "specctl.console.cli.main", "status", "--socket", str(sock)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.close()  # like `specctl status | head -0`
    _, err = proc.communicate(timeout=GUARD)
    assert proc.returncode == 0 and "Traceback" not in err


def test_help_says_what_specctl_is_for_and_what_its_exit_codes_mean() -> None:
    done = specctl("--help")
    assert done.returncode == 0
    assert "speculative decoding" in done.stdout and "``" not in done.stdout
    assert "3 no supervisor to talk to" in done.stdout


def test_each_verb_help_opens_with_what_it_does_and_set_names_its_keys() -> None:
    done = specctl("set", "--help")
    assert done.returncode == 0 and "Change thresholds, all or nothing" in done.stdout
    assert "off_at" in done.stdout and "warm_below" in done.stdout
    assert "Start, restart or stop the model server." in specctl("server", "--help").stdout
