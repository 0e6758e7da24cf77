"""A server launched without speculation: the simulator imitates one, and specctl watches it but never steers it.

Many operators point specctl at the SGLang server they already run, launched
without ``--speculative-algorithm``. The simulator's ``--no-speculation`` answers
as SGLang 0.5.17 does then (sim/nospec.py says from which sources); a real
``specctl run --headless --attach`` then journals the fact once, keeps
sampling, and every steering verb is refused with the fix, exit code 1.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specctl.runtime.core.view_only import HEADLINES, NO_SPECULATION
from specctl.runtime.sim import nospec
from specctl.runtime.sim.__main__ import config_from_args
from specctl.runtime.sim.costs import decode_s
from specctl.runtime.sim.server import SimServer

from support.headless import Headless, wait_for
from support.sglang_source import SglangSource
from support.sim_process import sim_process

SPEC_SERVER_ARGS = ("speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
                    "speculative_eagle_topk", "speculative_num_draft_tokens")
# where each release's scheduler adds avg_spec_accept_length to /get_internal_state
INTERNAL_STATE = {"0.5.17": "managers/scheduler.py", "0.5.23": "managers/scheduler_components/internal_state.py"}
NO_SPEC = HEADLINES[NO_SPECULATION]


def _metrics(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_the_simulator_without_speculation_answers_as_sglang_launched_without_it(tmp_path: Path) -> None:
    with sim_process(tmp_path, "--no-speculation", "--load", "steady:c=8") as url:
        info = httpx.get(f"{url}/server_info", timeout=10).json()
        assert {k: info[k] for k in SPEC_SERVER_ARGS} == dict.fromkeys(SPEC_SERVER_ARGS), "null, as SGLang's defaults"
        state = httpx.get(f"{url}/get_internal_state", timeout=10).json()[0]
        assert "specctl" not in state and not any("spec" in k for k in state), state
        assert "specctl" not in info["internal_states"][0] and "specctl_sim" in info, "the simulator says it is one"
        metrics = wait_for(lambda: (m := _metrics(url))["sglang:gen_throughput"] > 0 and m, "tok/s")
        assert metrics["sglang:spec_accept_length"] == 0.0, "SGLang's value without speculation"
        assert not [name for name in metrics if name.startswith("specctl:")]
        # specctl's keys are refused, as by any server without the plugin, and nothing changes
        refused = httpx.post(f"{url}/set_internal_state", json={"server_args": {"specctl_mode": 0}}, timeout=10)
        assert refused.status_code == 200 and refused.json() == [False]
        assert "specctl" not in httpx.get(f"{url}/get_internal_state", timeout=10).json()[0]
        # a request's meta_info has no speculative keys: none of its tokens was verified
        answer = httpx.post(f"{url}/generate", json={"text": "hello", "sampling_params": {"max_new_tokens": 4}},
                            timeout=30).json()
        assert answer["meta_info"]["completion_tokens"] == 4
        assert "spec_accept_length" not in answer["meta_info"] and "spec_verify_ct" not in answer["meta_info"]


def test_each_step_costs_a_plain_decode() -> None:
    """The engine runs with no policy: the model's "nospec" baseline, not specctl's off state."""
    _, cfg = config_from_args(["--no-speculation", "--no-plugin"])  # redundant together: accepted
    server = SimServer(cfg)
    engine = server.engine
    assert engine.policy is None
    for _ in range(8):
        engine.submit(512, 64)
    engine.step()  # the prefill
    ctx = engine.ctx_tokens
    report = engine.step()
    assert report is not None and report.steps == 0 and report.tokens == 8
    assert report.duration == pytest.approx(decode_s(engine.params, 8, ctx))


@pytest.mark.parametrize("extra, named", [(("--steps", "2"), "--steps"), (("--slow-off",), "--slow-off"),
                                          (("--set", "off_at=48"), "--set off_at=48")])
def test_options_a_server_without_speculation_cannot_have_are_usage_errors(extra: tuple[str, ...],
                                                                           named: str) -> None:
    out = subprocess.run([sys.executable, "-m", "specctl.runtime.sim", "--no-speculation", *extra],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    error = [line for line in out.stderr.splitlines() if "error:" in line]
    assert len(error) == 1 and "--no-speculation" in error[0] and named in error[0], out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_specctl_attached_to_a_server_without_speculation_watches_it_and_refuses_to_steer(tmp_path: Path) -> None:
    with sim_process(tmp_path, "--no-speculation", "--load", "steady:c=8", "--gpus", "2") as url:
        h = Headless(tmp_path, "--attach", url)
        try:
            said = h.wait_event("view_only")
            assert said["reason"] == NO_SPECULATION and said["why"].startswith(NO_SPEC)
            assert "specctl sglang-args --draft" in said["why"], "what to add to the launch line"
            # it keeps sampling what it can read: tok/s, requests, the GPUs; no made-up accept length
            seen = len(h.records("sample"))
            def all_eight() -> dict | None:
                """A later sample with the steady load's 8 requests in: one may fall between a request's end
                and the next one's start."""
                last = h.ready_sample()
                return last if len(h.records("sample")) > seen + 5 and last["server"]["running"] == 8 else None

            sample = wait_for(all_eight, "more samples, the load's 8 requests running")
            server = sample["server"]
            assert server["gen_tps"] > 0 and server["running"] == 8 and len(sample["gpus"]) == 2
            assert server["speculative"] is False and server["accept_len"] is None and sample["spec"] is None
            assert len(h.records("event", "view_only")) == 1, "said once, not every sample"

            status = h.cli("status")
            assert status.returncode == 0, status.stderr
            assert f"spec       {NO_SPEC}" in status.stdout
            assert "specctl sglang-args --draft DRAFT_MODEL" in status.stdout and "accept len -" in status.stdout
            assert "gpu 1" in status.stdout and "tok/s" in status.stdout

            for verb in (("force-off",), ("force-on",), ("auto",), ("set", "off_at=48")):
                out = h.cli(*verb)
                assert out.returncode == 1, (verb, out.stdout, out.stderr)
                assert len(out.stderr.strip().splitlines()) == 1 and NO_SPEC in out.stderr, out.stderr
                assert "Traceback" not in out.stderr
            commands = h.records("command")
            assert len(commands) == 4 and not any(c["ok"] for c in commands)
            assert not h.records("event", "settings"), "nothing was applied"
            assert "specctl" not in httpx.get(f"{url}/get_internal_state", timeout=10).json()[0]
        finally:
            assert h.stop() == 0
        told = h.told()
        assert f"specctl: attached to {url};" in told, told[:400]  # the address once, not "URL at URL"
        assert told.count('view_only reason="no_speculation"') == 1, "headless says it once on stderr"
        assert "Traceback" not in told


def test_what_the_simulator_reports_without_speculation_is_what_sglang_reports(sglang_source: SglangSource) -> None:
    """Read from each supported release's wheel: the speculative arguments default to None (so /server_info
    says null), the accept-length gauge is set to 0 without speculation, and avg_spec_accept_length is added
    only for a speculative server. sim/nospec.py answers the same."""
    text = "".join(sglang_source.srt(rel) for rel in sglang_source.release.args_field_files)
    for name in SPEC_SERVER_ARGS:
        field = re.search(rf"\n    {name}: A\[(.*?)\n    \] = (\w+)\n", text, re.S)
        assert field is not None and field.group(2) == "None", name
    reporter = sglang_source.srt("managers/scheduler_components/metrics_reporter.py")
    assert re.search(r"if self\.scheduler\.spec_algorithm\.is_none\(\):\n\s+spec_accept_length = 0\n", reporter)
    assert nospec.ACCEPT_GAUGE == 0.0 and set(nospec.SPEC_SERVER_ARGS) == set(SPEC_SERVER_ARGS)
    state = sglang_source.srt(INTERNAL_STATE[sglang_source.release.version])
    guard = state.rfind("spec_algorithm.is_none()", 0, state.index('["avg_spec_accept_length"]'))
    assert guard > 0 and state.index('["avg_spec_accept_length"]') - guard < 300, "added only with speculation"
