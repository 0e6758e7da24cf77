"""`specctl sglang-args`: the environment and flags for an operator's own SGLang launch line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specctl.runtime.core.adaptive_config import read_candidate_steps
from specctl.runtime.core.settings import PolicySettings
from specctl.runtime.core.thresholds import BY_BACKEND, MOE_BY_BACKEND
from specctl.runtime.supervisor.launcher import build_command

SPECCTL = [sys.executable, "-m", "specctl.console.cli.main", "sglang-args"]


def specctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SPECCTL, *args], capture_output=True, text=True, timeout=60)


def test_shell_output_evaluated_by_bash_gives_the_plugin_its_settings(tmp_path: Path) -> None:
    """The printed lines are run by a real shell, and the plugin's own reader takes the environment."""
    config = tmp_path / "etc" / "adaptive.json"
    reader = ("from specctl.runtime.sglang_plugin.plugin import settings_from_env; import os, json; "
              "print(json.dumps([os.environ['SPECCTL_PLUGIN'], settings_from_env().as_dict()]))")
    script = (f'out="$({" ".join(SPECCTL)} --tp 8 --steps 2 --backend triton --gpu "NVIDIA H200" '
              f'--config {config})" || exit 9; '
              f'eval "$(printf "%s\\n" "$out" | grep ^export)"; '
              f'{sys.executable} -c "{reader}"')
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    enabled, settings = json.loads(done.stdout)
    assert enabled == "1"
    assert settings["steps"] == 2 and settings["off_at"] == BY_BACKEND["triton"]["off_at"]
    assert read_candidate_steps(config) == [0, 2], "the config lists off and on in every bucket"
    assert config.stat().st_mode & 0o777 == 0o644, "readable by a server running as another user"


SERVER_START = ("from specctl.runtime.sglang_plugin.plugin import settings_from_env, costs_from_env; "
                "from specctl.runtime.sglang_plugin.params import SpecctlParams; import json, sys; "
                "s = settings_from_env(); c = costs_from_env(); "
                "p = SpecctlParams(s.steps, sys.argv[1], settings=s, costs=c); "
                "print(json.dumps([p.candidate_steps, p.state()['candidates'], "
                "None if c is None else list(c.depths)]))")


def start_with_printed_lines(*args: str, config: Path) -> subprocess.CompletedProcess[str]:
    """Bash evaluates the printed exports, then the plugin is built from them as SGLang builds it at start."""
    script = (f'out="$({" ".join(SPECCTL)} {" ".join(args)} --config {config})" || exit 9; '
              f'eval "$(printf "%s\\n" "$out" | grep ^export)"; '
              f'{sys.executable} -c "{SERVER_START}" {config}')
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("depths", [["--speculative-candidate-steps", "0,1,2,3"], ["--set", "candidates=0,1,2,3"]])
def test_chosen_depths_are_built_so_the_server_starts(tmp_path: Path, depths: list[str]) -> None:
    """The adaptive config lists every chosen depth: the plugin refuses a candidate SGLang did not build."""
    config = tmp_path / "adaptive.json"
    done = start_with_printed_lines(*depths, config=config)
    assert done.returncode == 0, done.stderr
    built, candidates, priced = json.loads(done.stdout)
    assert built == [0, 1, 2, 3] and candidates == [0, 1, 2, 3] and priced is None
    assert read_candidate_steps(config) == [0, 1, 2, 3]
    assert "without --depth-costs FILE auto chooses between 0 and 3 steps only" in done.stderr


def test_a_depth_cost_table_reaches_the_plugin(tmp_path: Path) -> None:
    table = tmp_path / "costs.json"
    subprocess.run([sys.executable, "-m", "specctl.runtime.sim.depth", "--preset", "h200-llama8b-fa3",
                    "--depths", "0,1,2,3", "--out", str(table)], check=True, timeout=60)
    done = start_with_printed_lines("--speculative-candidate-steps", "0,1,2,3", "--depth-costs", str(table),
                                    config=tmp_path / "adaptive.json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[2] == [0, 1, 2, 3]
    assert "depth-costs" not in done.stderr, "a table is given: nothing to warn about"


def test_the_default_config_file_is_one_per_depth_set(tmp_path: Path) -> None:
    env = {**os.environ, "SPECCTL_STATE_DIR": str(tmp_path)}
    paths = []
    for extra in ([], ["--speculative-candidate-steps", "0,1,2,3"]):
        done = subprocess.run([*SPECCTL, "--format", "json", *extra], capture_output=True, text=True,
                              timeout=60, env=env)
        assert done.returncode == 0, done.stderr
        paths.append(Path(json.loads(done.stdout)["adaptive_config"]))
    assert [p.name for p in paths] == ["adaptive-steps-3.json", "adaptive-steps-3-depths-0-1-2-3.json"]
    assert read_candidate_steps(paths[0]) == [0, 3], "the second line did not rewrite the first one's file"


def test_flags_are_the_launchers_own_less_the_operators(tmp_path: Path) -> None:
    config = tmp_path / "a.json"
    done = specctl("--tp", "8", "--draft", "/models/eagle3", "--config", str(config), "--format", "json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    ours = build_command("M", "/models/eagle3", 8, 3, 31999, "H", str(config))
    assert out["args"] == [w for w in ours[ours.index("sglang.launch_server") + 1:]
                           if w not in ("--model-path", "M", "--host", "H", "--port", "31999")]
    assert "--speculative-adaptive-config" in out["args"] and str(config) in out["args"]
    assert out["adaptive_config"] == str(config) and config.is_file()
    assert out["env"]["SPECCTL_PLUGIN"] == "1"


@pytest.mark.parametrize("fmt", ["shell", "systemd"])
def test_a_tree_operator_is_told_their_own_speculative_flags_go(tmp_path: Path, fmt: str) -> None:
    """Appended beside a topk-4 line, the chain's flags would fight the tree's: the header says which go."""
    done = specctl("--config", str(tmp_path / "a.json"), "--format", fmt)
    assert done.returncode == 0, done.stderr
    header = next(line for line in done.stdout.splitlines() if "sglang.launch_server" in line)
    for flag in ("--speculative-algorithm", "--speculative-eagle-topk", "--speculative-num-steps",
                 "--speculative-num-draft-tokens"):
        assert flag in header, (flag, header)
    assert "topk 1" in header or "without your own" in header


@pytest.mark.parametrize(("own", "printed"), [(None, "2147483648"), ("4294967296", "4294967296")])
def test_the_flashinfer_workspace_is_printed_with_the_operators_own_size(tmp_path: Path, own: str | None,
                                                                          printed: str) -> None:
    """A unit or manifest does not inherit the shell: the size must be in the printed lines, the operator's kept."""
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_FLASHINFER_WORKSPACE_SIZE"}
    if own is not None:
        env["SGLANG_FLASHINFER_WORKSPACE_SIZE"] = own
    done = subprocess.run([*SPECCTL, "--backend", "flashinfer", "--format", "systemd",
                           "--config", str(tmp_path / "a.json")], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if "SGLANG_FLASHINFER_WORKSPACE_SIZE" in line]
    assert lines == [f'Environment="SGLANG_FLASHINFER_WORKSPACE_SIZE={printed}"'], done.stdout


def test_systemd_lines(tmp_path: Path) -> None:
    done = specctl("--config", str(tmp_path / "a.json"), "--format", "systemd")
    assert done.returncode == 0, done.stderr
    assert 'Environment="SPECCTL_PLUGIN=1"' in done.stdout
    assert 'Environment="SPECCTL_SETTINGS={\\"mode\\":\\"auto\\"' in done.stdout


def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    config = tmp_path / "a.json"
    for args, said in ((["--steps", "0"], "steps"), (["--set", "off_at=8"], "on_at"),
                       (["--set", "nonsense"], "KEY=VALUE"), (["--tp", "0"], "--tp"),
                       (["--experts", "-1"], "--experts must be 0"),
                       (["--experts", "abc"], "--experts must be a whole"),
                       (["--experts", "1.5"], "--experts must be a whole"),
                       (["--speculative-candidate-steps", "1,2"], "must hold 0"),
                       (["--speculative-candidate-steps", "0,1", "--steps", "3"], "candidates"),
                       (["--depth-costs", str(tmp_path / "none.json")], "--depth-costs"),
                       (["--depth-costs", str(tmp_path)], "--depth-costs")):
        done = specctl(*args, "--config", str(config))
        assert done.returncode == 2, (args, done.stderr)
        assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "Traceback" not in done.stderr
    assert not config.exists()


def test_flashinfer_is_named_with_its_workspace_and_its_measured_row(tmp_path: Path) -> None:
    """The report's Blackwell runs FlashInfer: an operator can say so, and the workspace verify graphs need is set.

    The settings are FlashInfer's row (measured on an H200, with a dense target), not the policy's defaults."""
    done = specctl("--backend", "flashinfer", "--gpu", "NVIDIA H200", "--experts", "0",
                   "--config", str(tmp_path / "a.json"), "--format", "json")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    out = json.loads(done.stdout)
    args = out["args"]
    assert args[args.index("--attention-backend") + 1] == "flashinfer"
    assert int(out["env"]["SGLANG_FLASHINFER_WORKSPACE_SIZE"]) >= 601_882_624
    settings = json.loads(out["env"]["SPECCTL_SETTINGS"])
    assert {key: settings[key] for key in BY_BACKEND["flashinfer"]} == BY_BACKEND["flashinfer"]
    assert settings["off_at"] != PolicySettings().off_at


@pytest.mark.parametrize(("gpu", "said"), [
    (["--gpu", "NVIDIA RTX PRO 6000 Blackwell Server Edition"],
     "this server runs on NVIDIA RTX PRO 6000 Blackwell Server Edition"),
    ([], "add --gpu 'NVIDIA H200' if the server runs on one")])
def test_a_row_measured_on_another_gpu_is_left_out_and_said_once(tmp_path: Path, gpu: list[str], said: str) -> None:
    # The report's Blackwell with FlashInfer: the H200's row would keep drafting on where it loses.
    done = specctl("--backend", "flashinfer", *gpu, "--config", str(tmp_path / "a.json"), "--format", "json")
    assert done.returncode == 0
    assert done.stderr.count("\n") == 1 and said in done.stderr and "Traceback" not in done.stderr
    settings = json.loads(json.loads(done.stdout)["env"]["SPECCTL_SETTINGS"])
    defaults = PolicySettings()
    assert (settings["off_at"], settings["min_accept"]) == (defaults.off_at, defaults.min_accept)


def printed_settings(done: subprocess.CompletedProcess[str]) -> dict:
    return json.loads(json.loads(done.stdout)["env"]["SPECCTL_SETTINGS"])


@pytest.mark.parametrize("backend", ["triton", "fa3"])
def test_a_moe_on_an_h200_gets_the_row_measured_on_a_moe(tmp_path: Path, backend: str) -> None:
    # Qwen3-30B-A3B (128 routed experts) on an H200, as the MoE sittings ran it (docs/benchmarks.md,
    # moe-fa3.md): the backend's MoE row, silently. The dense Triton row would keep speculation on to 56
    # requests; on FA3 the defaults (off_at 32) served 0.66-0.82x static from 64 requests.
    done = specctl("--backend", backend, "--gpu", "NVIDIA H200", "--experts", "128",
                   "--config", str(tmp_path / "a.json"), "--format", "json")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    settings = printed_settings(done)
    assert {k: settings[k] for k in MOE_BY_BACKEND[backend]} == MOE_BY_BACKEND[backend] != BY_BACKEND[backend]


@pytest.mark.parametrize("backend", ["flashinfer"])
def test_a_moe_on_another_backend_gets_the_defaults_and_why_on_the_very_gpu_the_rows_were_measured_on(
        tmp_path: Path, backend: str) -> None:
    done = specctl("--backend", backend, "--gpu", "NVIDIA H200", "--experts", "128",
                   "--config", str(tmp_path / "a.json"), "--format", "json")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "measured on a dense model and this server's target is a MoE (128 experts)" in done.stderr
    assert "the policy's defaults stay" in done.stderr
    settings, defaults = printed_settings(done), PolicySettings()
    assert {k: settings[k] for k in BY_BACKEND[backend]} == {k: getattr(defaults, k) for k in BY_BACKEND[backend]}


def test_a_moe_on_triton_elsewhere_gets_the_defaults_and_which_row_stayed_out(tmp_path: Path) -> None:
    rtx = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    done = specctl("--backend", "triton", "--gpu", rtx, "--experts", "128", "--config", str(tmp_path / "a.json"),
                   "--format", "json")
    assert done.returncode == 0, done.stderr
    assert f"the triton thresholds for a MoE were measured on an H200, this server runs on {rtx}" in done.stderr
    assert printed_settings(done)["off_at"] == PolicySettings().off_at


@pytest.mark.parametrize(("gpu", "said"), [
    # the report's GLM-5 (256 routed experts) on its RTX PRO 6000s: both reasons, so moving to an H200
    # is not the whole fix
    (["--gpu", "NVIDIA RTX PRO 6000 Blackwell Server Edition"],
     "this server runs on NVIDIA RTX PRO 6000 Blackwell Server Edition; also, the flashinfer thresholds were "
     "measured on a dense model and this server's target is a MoE (256 experts)"),
    # no --gpu: a hint to add one would lead to a second refusal, so the model class is the reason
    ([], "specctl sglang-args: the flashinfer thresholds were measured on a dense model and this server's target "
         "is a MoE (256 experts)")])
def test_a_moe_is_said_whatever_is_said_of_the_gpu(tmp_path: Path, gpu: list[str], said: str) -> None:
    done = specctl("--backend", "flashinfer", *gpu, "--experts", "256", "--config", str(tmp_path / "a.json"),
                   "--format", "json")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("\n") == 1 and said in done.stderr and "add --gpu" not in done.stderr
    settings, defaults = printed_settings(done), PolicySettings()
    assert (settings["off_at"], settings["min_accept"]) == (defaults.off_at, defaults.min_accept)


def test_without_experts_the_row_is_printed_and_stderr_says_how_to_check(tmp_path: Path) -> None:
    """As the supervisor does for a server that does not say its class (thresholds.for_server)."""
    done = specctl("--backend", "triton", "--gpu", "NVIDIA H200", "--config", str(tmp_path / "a.json"),
                   "--format", "json")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("\n") == 1 and "add --experts N" in done.stderr
    assert done.stderr.endswith("for the thresholds measured on a MoE\n"), done.stderr
    settings = printed_settings(done)
    assert {k: settings[k] for k in BY_BACKEND["triton"]} == BY_BACKEND["triton"]


def test_the_operators_own_thresholds_need_no_word_about_the_model_class(tmp_path: Path) -> None:
    every = ["--set", "off_at=64", "--set", "on_at=8", "--set", "min_accept=1.0", "--set", "accept_slope=0"]
    for experts in ([], ["--experts", "128"]):
        done = specctl("--backend", "triton", "--gpu", "NVIDIA H200", *experts, *every,
                       "--config", str(tmp_path / "a.json"), "--format", "json")
        assert done.returncode == 0 and done.stderr == "", (experts, done.stderr)
        assert printed_settings(done)["off_at"] == 64


TREE = ("--steps", "2", "--topk", "4", "--draft-tokens", "16")


@pytest.mark.parametrize(("args", "said"), [
    (("--steps", "2", "--topk", "4"), "a tree (--topk 4) needs --draft-tokens (2 to 21 at 2 steps)"),
    (("--steps", "2", "--topk", "4", "--draft-tokens", "22"), "--draft-tokens must be between 2 and 21"),
    (("--steps", "2", "--topk", "4", "--draft-tokens", "1"), "--draft-tokens must be between 2 and 21"),
    (("--draft-tokens", "16"), "--draft-tokens is for a tree (--topk above 1); a chain of 3 steps has 4, got 16"),
    (("--topk", "0"), "--topk must be 1 (a chain) or more (a tree), got 0"),
    ((*TREE, "--speculative-candidate-steps", "0,1,2"),
     "switches between its launch depth and off only: --speculative-candidate-steps must be 0,2 or left out"),
    ((*TREE, "--set", "candidates=0,1,2"), "must be 0,2 or left out, got 0,1,2"),
    ((*TREE, "--depth-costs", "costs.json"), "--depth-costs prices draft depths of a chain"),
])
def test_a_tree_that_cannot_run_under_the_switch_is_refused_and_nothing_written(
        tmp_path: Path, args: tuple[str, ...], said: str) -> None:
    config = tmp_path / "adaptive.json"
    out = specctl(*args, "--config", str(config))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("specctl sglang-args: ") and said in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and not config.exists()


def test_a_tree_on_triton_on_an_h200_is_printed_with_the_trees_own_row(tmp_path: Path) -> None:
    # measured with the tree under the switch (docs/benchmarks.md): off from 16 requests, on again at 8
    config = str(tmp_path / "adaptive.json")
    dense = specctl(*TREE, "--backend", "triton", "--gpu", "NVIDIA H200", "--experts", "0", "--format", "json",
                    "--config", config)
    assert dense.returncode == 0 and dense.stderr == "", dense.stderr
    settings, defaults = printed_settings(dense), PolicySettings()
    assert (settings["off_at"], settings["on_at"]) == (16, 8) != (BY_BACKEND["triton"]["off_at"], 24)
    assert (settings["min_accept"], settings["accept_slope"]) == (defaults.min_accept, defaults.accept_slope)
    unsaid = specctl(*TREE, "--backend", "triton", "--gpu", "NVIDIA H200", "--format", "json", "--config", config)
    assert printed_settings(unsaid)["off_at"] == 16
    assert "the triton tree thresholds were measured on a dense model and are printed" in unsaid.stderr
    assert "add --experts N (its config's routed experts) for the policy's defaults" in unsaid.stderr
    moe = specctl(*TREE, "--backend", "triton", "--gpu", "NVIDIA H200", "--experts", "128", "--format", "json",
                  "--config", config)
    assert moe.returncode == 0 and printed_settings(moe)["off_at"] == defaults.off_at
    assert "a tree's were measured on Triton with a dense target on an H200 only" in moe.stderr
    assert "the policy's defaults are printed" in moe.stderr and moe.stderr.count("\n") == 1


def test_a_tree_is_printed_with_the_opt_in_and_without_a_chains_thresholds(tmp_path: Path) -> None:
    config = tmp_path / "adaptive.json"
    out = specctl(*TREE, "--backend", "fa3", "--gpu", "NVIDIA H200", "--format", "json", "--config", str(config))
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    assert printed["env"]["SPECCTL_TREE_SWITCH"] == "1"
    args = printed["args"]
    assert args[args.index("--speculative-eagle-topk") + 1] == "4"
    assert args[args.index("--speculative-num-draft-tokens") + 1] == "16"
    assert read_candidate_steps(config) == [0, 2]
    settings = json.loads(printed["env"]["SPECCTL_SETTINGS"])
    # FA3's row never turns a chain off for load; a tree stops paying at 16 requests, so the row stays out
    assert settings["off_at"] == PolicySettings.off_at != BY_BACKEND["fa3"]["off_at"]
    assert "the thresholds measured per backend are a chain's" in out.stderr
    chosen = specctl(*TREE, "--set", "off_at=16", "--set", "on_at=8", "--format", "json",
                     "--config", str(config))
    assert chosen.returncode == 0 and chosen.stderr == "", chosen.stderr
    assert json.loads(json.loads(chosen.stdout)["env"]["SPECCTL_SETTINGS"])["off_at"] == 16
    chain = specctl("--steps", "2", "--format", "json", "--config", str(config))
    assert "SPECCTL_TREE_SWITCH" not in json.loads(chain.stdout)["env"], "a chain needs no opt-in"
