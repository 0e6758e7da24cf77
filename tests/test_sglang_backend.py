"""Supervising a launched SGLang server, on the CPU: a stand-in `sglang.launch_server` package
prints SGLang's start-up log, starts a child "rank" that serves the API, and can crash or
ignore SIGTERM. The supervisor, backend, launcher and log parser are the real ones."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from specctl.runtime.core.settings import PolicySettings
from specctl.runtime.core.thresholds import BY_BACKEND, MOE_BY_BACKEND, TREE_BY_BACKEND
from specctl.runtime.core.tree_drafts import TREE_SWITCH_ENV
from specctl.runtime.supervisor.config import SupervisorConfig
from specctl.runtime.supervisor.lifecycle import Supervisor

from support.headless import pid_alive

STANDIN = Path(__file__).parent / "standin_sglang"


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(STANDIN), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("STANDIN_STEP_S", "0.2")
    monkeypatch.setenv("SPECCTL_STATE_DIR", str(tmp_path / "state"))  # where the admin key's files go
    pidfile = tmp_path / "rank.pid"
    monkeypatch.setenv("STANDIN_PIDFILE", str(pidfile))
    return pidfile


def config(**kw) -> SupervisorConfig:
    return SupervisorConfig(backend="sglang", model="/models/llama", draft="/models/eagle3", interval=0.1,
                            restart_backoff=(0.2, 1.0), **kw)


async def until(predicate, what: str, timeout: float = 60.0):
    end = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < end:
        if value := predicate():
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"gave up waiting for {what}")


@asynccontextmanager
async def launched(monkeypatch: pytest.MonkeyPatch, preset: str, **kw) -> AsyncIterator[Supervisor]:
    """A supervisor launching the stand-in SGLang as the simulator's ``preset``; stopped with its server after."""
    monkeypatch.setenv("STANDIN_PRESET", preset)
    sup = Supervisor(config(**kw))
    await sup.start()
    try:
        yield sup
    finally:
        await sup.stop()


def events(sup: Supervisor, name: str) -> list[dict]:
    return [r for r in sup.recent if r.get("event") == name]


async def test_start_up_shows_progress_then_ready(standin: Path) -> None:
    sup = Supervisor(config())
    seen: list[str] = []
    sub = sup.hub.subscribe()
    await sup.start()
    try:
        async def watch() -> None:
            async for rec in sub:
                if rec["kind"] == "sample":
                    progress = rec["server"]["progress"]
                    if progress and progress["phase"] not in seen:
                        seen.append(progress["phase"])
                        assert progress["elapsed_s"] >= 0
                    if rec["server"]["state"] == "ready":
                        return
        await asyncio.wait_for(watch(), 60)
        assert seen[0] == "weights" and "cuda_graphs" in seen
        assert sup.latest_sample["spec"]["settings"]["steps"] == 3
        logged = [line for r in events(sup, "server_log") for line in r["lines"]]
        assert any("Load weight begin" in line for line in logged)
    finally:
        await sup.stop()


async def test_a_crash_is_restarted_with_backoff(standin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_CRASH_AFTER", "0.5")
    monkeypatch.setenv("STANDIN_STEP_S", "0.01")
    sup = Supervisor(config())
    await sup.start()
    try:
        await until(lambda: len(events(sup, "server_restart")) >= 2, "two restarts")
        exits = events(sup, "server_exit")
        assert exits[0]["returncode"] == 17
        delays = [r["delay_s"] for r in events(sup, "server_restart")]
        assert delays[1] >= delays[0], "backoff grows"
    finally:
        await sup.stop()


async def test_a_server_that_ignores_sigterm_is_killed_with_its_ranks(standin: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_IGNORE_SIGTERM", "1")
    monkeypatch.setenv("STANDIN_STEP_S", "0.01")
    sup = Supervisor(config(stop_grace_s=1.0))
    await sup.start()
    await until(lambda: sup.state == "ready", "ready")
    main_pid, rank_pid = sup.backend.pid, int(standin.read_text())
    await sup.stop()
    assert not pid_alive(main_pid) and not pid_alive(rank_pid)


async def test_commands_reach_the_launched_server(standin: Path) -> None:
    sup = Supervisor(config(settings={"off_at": "48"}))
    await sup.start()
    try:
        await until(lambda: sup.state == "ready" and sup.latest_sample["spec"], "ready")
        result = await sup.execute("mode", {"mode": "off"}, uid=os.getuid())
        assert result["settings"]["mode"] == "off" and result["settings"]["off_at"] == 48
        assert sup.latest_sample["spec"]["settings"]["mode"] == "off"
    finally:
        await sup.stop()


@pytest.mark.slow
async def test_the_launched_servers_control_endpoint_wants_the_supervisors_key(standin: Path,
                                                                            tmp_path: Path) -> None:
    """SGLang under --admin-api-key (here the stand-in, which reads it from --config as SGLang does): a
    side-door /set_internal_state is 401, the supervisor's own commands pass, and the key is in no argv."""
    sup = Supervisor(config())
    await sup.start()
    try:
        await until(lambda: sup.state == "ready" and sup.latest_sample["spec"], "ready")
        key = (tmp_path / "state" / "keys" / f"server-{os.getpid()}.key").read_text().strip()
        assert key == sup.backend.admin_key and key not in " ".join(sup.backend.argv)
        async with httpx.AsyncClient() as http:
            side = await http.post(f"{sup.backend.url}/set_internal_state",
                                   json={"server_args": {"specctl_mode": 2}}, timeout=10)
            assert side.status_code == 401
            assert (await http.post(f"{sup.backend.url}/generate", json={"text": "hi"}, timeout=10)).status_code == 200
        assert (await sup.execute("mode", {"mode": "off"}, uid=os.getuid()))["settings"]["mode"] == "off"
    finally:
        await sup.stop()
    assert not list((tmp_path / "state" / "keys").iterdir()), "the key's files go with the server"


@pytest.mark.parametrize(("preset", "backend"), [("h200-llama8b-fa3", "fa3"),
                                                  ("h200-llama8b-flashinfer", "flashinfer")])
async def test_thresholds_follow_the_attention_backend(standin: Path, monkeypatch: pytest.MonkeyPatch,
                                                       preset: str, backend: str) -> None:
    async with launched(monkeypatch, preset, gpu_source="sim") as sup:  # the stand-in's GPUs: an H200, as NVML names it
        [adopted] = await until(lambda: events(sup, "backend_thresholds"), "thresholds for the backend")
        assert adopted["backend"] == backend and adopted["ok"] is True
        assert adopted["experts"] in (None, 0), "a dense target, or one that does not say (the row applies)"
        assert not events(sup, "backend_thresholds_skipped")
        settings = await until(lambda: sup.latest_sample and (sup.latest_sample["spec"] or {}).get("settings"),
                               "settings read back")
        row = BY_BACKEND[backend]
        assert {key: settings[key] for key in row} == row
        assert (settings["off_at"], settings["min_accept"]) != (32, 1.3), "not the policy's defaults"
        assert sup.calibration.calibrator.least_slope == row["accept_slope"], "calibration's floor starts from it"


@pytest.mark.slow
async def test_after_a_restart_calibration_keeps_the_rows_slope_not_its_own(standin: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # a learned floor is restored over the row after a restart (the row fills only what nobody set), but the
    # least slope calibration may fit stays the row's: one it learned itself must not become its own lower bound
    async with launched(monkeypatch, "h200-llama8b-flashinfer", gpu_source="sim") as sup:
        await until(lambda: events(sup, "backend_thresholds"), "the FlashInfer row applied")
        await until(lambda: sup.latest_sample and (sup.latest_sample["spec"] or {}).get("settings"),
                    "the policy's state read")
        row = BY_BACKEND["flashinfer"]
        assert await sup.commands.push_learned({"min_accept": 0.4, "accept_slope": 0.08}, "from 5,000 steps")
        sup.recent.clear()
        await sup.commands.execute("server", {"action": "restart"}, uid=0)
        [adopted] = await until(lambda: events(sup, "backend_thresholds"), "the row considered again")
        assert "accept_slope" not in adopted["changes"], "the learned floor stays over the row"
        await sup.poll_now()
        assert sup.latest_sample["spec"]["settings"]["accept_slope"] == 0.08
        assert sup.calibration.calibrator.least_slope == row["accept_slope"]


@pytest.mark.slow
async def test_the_operators_thresholds_win_over_the_backends(standin: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    own = {"off_at": "48", "on_at": "40"}
    async with launched(monkeypatch, "h200-llama8b-fa3", settings=own, gpu_source="sim") as sup:
        [adopted] = await until(lambda: events(sup, "backend_thresholds"), "thresholds for the backend")
        fa3 = BY_BACKEND["fa3"]
        assert adopted["changes"] == {"min_accept": fa3["min_accept"], "accept_slope": fa3["accept_slope"]}
        await sup.poll_now()
        settings = sup.latest_sample["spec"]["settings"]
        assert (settings["off_at"], settings["on_at"]) == (48, 40)


@pytest.mark.slow
async def test_a_tree_under_the_switch_on_triton_gets_the_trees_own_row(standin: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # the report's topk-4 tree under specctl's switch on an H200 with Triton: the static tree fell below no
    # speculation at 16 requests where a chain pays to 32 (docs/benchmarks.md), so the chain's row stays out
    monkeypatch.setenv(TREE_SWITCH_ENV, "1")
    tree = {"topk": 4, "draft_tokens": 16, "spec_steps": 2}
    async with launched(monkeypatch, "h200-llama8b-tree", gpu_source="sim", **tree) as sup:
        [adopted] = await until(lambda: events(sup, "backend_thresholds"), "thresholds for the tree")
        assert adopted["backend"] == "triton" and adopted["ok"] is True
        assert adopted["changes"] == TREE_BY_BACKEND["triton"] == {"off_at": 16, "on_at": 8}
        assert not events(sup, "backend_thresholds_skipped")
        settings = await until(lambda: sup.latest_sample and (sup.latest_sample["spec"] or {}).get("settings"),
                               "settings read back")
        defaults = PolicySettings()
        assert (settings["off_at"], settings["on_at"]) == (16, 8)
        assert (settings["min_accept"], settings["accept_slope"]) == (defaults.min_accept, defaults.accept_slope), \
            "the floor stays the policy's: a tree's break-even was not measured (nor the chain's row's floor taken)"


@pytest.mark.slow
async def test_a_tree_on_another_gpu_keeps_the_defaults_and_the_journal_says_why(
        standin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the report's own system: its tree under the switch on Blackwell with FlashInfer, where nothing was measured
    monkeypatch.setenv(TREE_SWITCH_ENV, "1")
    tree = {"topk": 4, "draft_tokens": 16, "spec_steps": 2, "tp": 8}
    async with launched(monkeypatch, "rtx-8gpu-report", gpu_source="sim", **tree) as sup:
        [skipped] = await until(lambda: events(sup, "backend_thresholds_skipped"), "the rows refused")
        assert skipped["backend"] == "flashinfer"
        assert "a tree's were measured on Triton with a dense target on an H200 only" in skipped["why"]
        assert "the policy's defaults stay" in skipped["why"] and "specctl set" in skipped["why"]
        settings = await until(lambda: sup.latest_sample and (sup.latest_sample["spec"] or {}).get("settings"),
                               "settings read back")
        assert settings["off_at"] == PolicySettings().off_at
        assert not events(sup, "backend_thresholds")


@pytest.mark.slow
@pytest.mark.parametrize(("preset", "gpu_source", "why"), [
    ("rtx-8gpu-report-topk1", "sim", "this server runs on NVIDIA RTX PRO 6000 Blackwell Server Edition"),
    ("h200-llama8b-flashinfer", "none", "this server's GPUs could not be read")])
async def test_thresholds_measured_on_another_gpu_stay_out_and_the_journal_says_why(
        standin: Path, monkeypatch: pytest.MonkeyPatch, preset: str, gpu_source: str, why: str) -> None:
    # FlashInfer's row was measured on an H200; on the report's Blackwell GPUs it would keep drafting
    # on where it loses (docs/benchmarks.md, "Thresholds"), so the defaults stay.
    async with launched(monkeypatch, preset, gpu_source=gpu_source) as sup:
        [skipped] = await until(lambda: events(sup, "backend_thresholds_skipped"), "the row refused")
        assert skipped["backend"] == "flashinfer" and why in skipped["why"]
        assert "measured on an H200" in skipped["why"] and "specctl set" in skipped["why"]
        settings = await until(lambda: sup.latest_sample and (sup.latest_sample["spec"] or {}).get("settings"),
                               "settings read back")
        defaults = PolicySettings()
        assert (settings["off_at"], settings["min_accept"]) == (defaults.off_at, defaults.min_accept)
        assert not events(sup, "backend_thresholds")


@pytest.mark.slow
async def test_a_moe_on_triton_on_an_h200_gets_the_row_measured_on_a_moe(
        standin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Qwen3-30B-A3B with Triton on an H200, as the first MoE sitting ran it: static EAGLE-3 stops paying
    # between 4 and 16 requests there (docs/benchmarks.md), so the row measured on a MoE applies, not
    # the one measured on Llama-3.1-8B (which keeps speculation on to 56 requests).
    async with launched(monkeypatch, "h200-qwen3moe", gpu_source="sim") as sup:
        [adopted] = await until(lambda: events(sup, "backend_thresholds"), "thresholds for the backend")
        assert adopted["backend"] == "triton" and adopted["experts"] == 128 and adopted["ok"] is True
        assert adopted["changes"] == MOE_BY_BACKEND["triton"] != BY_BACKEND["triton"]
        assert not events(sup, "backend_thresholds_skipped")
        await sup.poll_now()
        settings = sup.latest_sample["spec"]["settings"]
        assert {key: settings[key] for key in MOE_BY_BACKEND["triton"]} == MOE_BY_BACKEND["triton"]
        await sup.poll_now()
        assert len(events(sup, "backend_thresholds")) == 1, "applied once a start, not every poll"


@pytest.mark.slow
async def test_a_moe_on_another_gpu_is_told_both_reasons_at_once(standin: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # The report's system: GLM-5 (256 routed experts) with FlashInfer on RTX PRO 6000s. Told only
    # the GPU, an operator who moved to an H200 would find the row still out for the model.
    async with launched(monkeypatch, "rtx-8gpu-report-topk1", gpu_source="sim") as sup:
        [skipped] = await until(lambda: events(sup, "backend_thresholds_skipped"), "the row refused")
        assert skipped["backend"] == "flashinfer" and skipped["experts"] == 256
        gpu, _, model = skipped["why"].partition("; also, ")
        assert gpu == ("the flashinfer thresholds were measured on an H200, this server runs on "
                       "NVIDIA RTX PRO 6000 Blackwell Server Edition")
        assert model.startswith("the flashinfer thresholds were measured on a dense model and this server's "
                                "target is a MoE (256 experts)")
        assert model.count("the policy's defaults stay") == 1
        await sup.poll_now()
        settings = sup.latest_sample["spec"]["settings"]
        defaults = PolicySettings()
        assert (settings["off_at"], settings["min_accept"]) == (defaults.off_at, defaults.min_accept)
        assert not events(sup, "backend_thresholds")


@pytest.mark.slow
async def test_the_operators_whole_thresholds_on_a_moe_need_no_why(standin: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    own = {"off_at": "64", "on_at": "8", "min_accept": "1.0", "accept_slope": "0"}
    async with launched(monkeypatch, "h200-qwen3moe", settings=own, gpu_source="sim") as sup:
        # the row is decided on the first answer of the ready server, before that answer's sample
        settings = await until(lambda: sup.latest_sample and (sup.latest_sample["spec"] or {}).get("settings"),
                               "settings read back")
        await sup.poll_now()
        assert (settings["off_at"], settings["on_at"], settings["min_accept"]) == (64, 8, 1.0)
        assert not events(sup, "backend_thresholds_skipped") and not events(sup, "backend_thresholds")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="SGLang is installed here")
async def test_a_missing_sglang_is_one_clear_message_then_a_start_once_it_is_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(site))  # empty for now: no real SGLang on this machine
    monkeypatch.setenv("STANDIN_STEP_S", "0.2")
    monkeypatch.setenv("STANDIN_PIDFILE", str(tmp_path / "rank.pid"))
    sup = Supervisor(config())
    await sup.start()
    try:
        failed = await until(lambda: events(sup, "server_start_failed"), "the start to fail")
        assert "SGLang is not installed" in failed[0]["error"] and "--attach" in failed[0]["error"]
        assert failed[0]["retry"] is False
        await until(lambda: sup.latest_sample and sup.latest_sample["server"]["state"] == "stopped", "stopped")
        await asyncio.sleep(0.5)  # longer than the first back-off (0.2 s): nothing is retried
        assert not events(sup, "server_restart") and len(events(sup, "server_start_failed")) == 1
        shutil.copytree(STANDIN / "sglang", site / "sglang")  # the operator installs it...
        await sup.execute("server", {"action": "start"}, uid=os.getuid())  # ...and says start
        await until(lambda: sup.state == "ready", "ready")
    finally:
        await sup.stop()


@pytest.mark.slow
async def test_a_restart_keeps_the_pair_the_operator_ran_with_after_setting_half_of_it(
        standin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # FlashInfer on an H200: the row gives off_at 114, on_at 48. `specctl set off_at=100` runs
    # (100, 48). A restart must bring back (100, 48), not (100, 24): the row's on_at is left out
    # once the operator owns half of its group, and the policy's default took its place silently.
    async with launched(monkeypatch, "h200-llama8b-flashinfer", gpu_source="sim") as sup:
        await until(lambda: events(sup, "backend_thresholds"), "the FlashInfer row applied")
        await until(lambda: sup.latest_sample and (sup.latest_sample["spec"] or {}).get("settings", {})
                    .get("on_at") == BY_BACKEND["flashinfer"]["on_at"], "the row read back")
        result = await sup.commands.execute("set", {"settings": {"off_at": 100}}, uid=0)
        assert (result["settings"]["off_at"], result["settings"]["on_at"]) == (100, 48)
        sup.recent.clear()  # what the restart says, alone
        await sup.commands.execute("server", {"action": "restart"}, uid=0)
        [adopted] = await until(lambda: events(sup, "backend_thresholds"), "the row considered again")
        assert set(adopted["changes"]) == {"min_accept", "accept_slope"}, "the group the operator left alone"
        await sup.poll_now()
        settings = sup.latest_sample["spec"]["settings"]
        assert (settings["off_at"], settings["on_at"]) == (100, 48), "the pair the operator ran with"
        [restored] = events(sup, "settings_restored")
        assert restored["changes"] == {"off_at": 100, "on_at": 48}


@pytest.mark.slow
async def test_a_tree_launched_under_the_switch_keeps_the_defaults_and_says_why(
        standin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # every row was measured with a chain; the report's tree (topk 4, 16 draft tokens) costs more a verify
    async with launched(monkeypatch, "rtx-8gpu-report", gpu_source="sim", spec_steps=2, topk=4,
                        draft_tokens=16) as sup:
        [skipped] = await until(lambda: events(sup, "backend_thresholds_skipped"), "the row refused")
        assert "the thresholds measured per backend are a chain's" in skipped["why"], skipped
        settings = await until(lambda: sup.latest_sample and (sup.latest_sample["spec"] or {}).get("settings"),
                               "settings read back")
        assert settings["off_at"] == PolicySettings().off_at and not events(sup, "backend_thresholds")
